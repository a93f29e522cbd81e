"""1-NN WSD: hand-built sense inventory with hand-computed choices and F1, first-sense back-off, readers."""

import numpy as np
import pytest
from probe_testkit import BagOfContext

from elmokit.evaluation.wsd import (
    WsdDataError,
    build_sense_vectors,
    evaluate_wsd,
    read_first_senses,
    read_gold_keys,
    read_raganato_xml,
    read_semcor_tsv,
    sense_key_lemma_pos,
)

TABLE = {"money": (1, 0), "river": (0, 1), "bank": (1, 1), "took": (2, 0), "place": (0, 4)}
FINANCE, SLOPE = "bank%1:14:00::", "bank%1:17:01::"

SEMCOR = """\
# doc = d1
# sent_id = d1.s1
1\tmoney\tmoney\tNN\tmoney%1:21:00::\teng30-13384557-n
2\tbank\tbank\tNN\tbank%1:14:00::\teng30-08420278-n

# sent_id = d1.s2
1\triver\triver\tNN\t_\t_
2\tbank\tbank\tNN\tbank%1:17:01::\teng30-09213565-n

# sent_id = d1.s3
1\tmoney\tmoney\tNN\t_\t_
2\tmoney\tmoney\tNN\t_\t_
3\tbank\tbank\tNN\tbank%1:14:00::\teng30-08420278-n
4\t.\t_\t_\t_\t_

1\tmoney\tmoney\tNN\t_\t_
2\ttook_place\ttake_place\tVB\ttake_place%2:30:00::\teng30-00339934-v
"""

XML = """<?xml version="1.0" encoding="UTF-8" ?>
<corpus lang="en" source="test">
<text id="d000">
<sentence id="d000.s000">
<wf lemma="river" pos="NOUN">river</wf>
<wf lemma="flow" pos="VERB">flows</wf>
<instance id="d000.s000.t000" lemma="bank" pos="NOUN">bank</instance>
</sentence>
<sentence id="d000.s001">
<wf lemma="money" pos="NOUN">money</wf>
<instance id="d000.s001.t000" lemma="bank" pos="NOUN">bank</instance>
<instance id="d000.s001.t001" lemma="deposit" pos="NOUN">deposit</instance>
<instance id="d000.s001.t002" lemma="zzz" pos="NOUN">zzz</instance>
</sentence>
<sentence id="d000.s002">
<wf lemma="money" pos="NOUN">money</wf>
<wf lemma="money" pos="NOUN">money</wf>
<wf lemma="river" pos="NOUN">river</wf>
<instance id="d000.s002.t000" lemma="Bank" pos="NOUN">bank</instance>
<instance id="d000.s002.t001" lemma="take_place" pos="VERB">took place</instance>
</sentence>
</text>
</corpus>
"""

GOLD = """\
d000.s000.t000 bank%1:17:01::
d000.s001.t000 bank%1:14:00:: bank%1:14:01::
d000.s001.t001 deposit%1:21:00::
d000.s001.t002 zzz%1:01:00::
d000.s002.t000 bank%1:17:01::
d000.s002.t001 take_place%2:30:00::
"""

INDEX_SENSE = """\
bank%1:14:00:: 08420278 2 20
bank%1:17:01:: 09213565 1 25
deposit%1:21:00:: 13416345 1 5
deposit%1:22:00:: 13416346 2 3
money%1:21:00:: 13384557 1 50
take_place%2:30:00:: 00339934 1 30
"""


@pytest.fixture
def files(tmp_path):
    paths = {"semcor": tmp_path / "semcor.tsv", "xml": tmp_path / "t.data.xml", "gold": tmp_path / "t.gold.key.txt",
             "wordnet": tmp_path / "wn"}
    paths["semcor"].write_text(SEMCOR, encoding="utf-8")
    paths["xml"].write_text(XML, encoding="utf-8")
    paths["gold"].write_text(GOLD, encoding="utf-8")
    paths["wordnet"].mkdir()
    (paths["wordnet"] / "index.sense").write_text(INDEX_SENSE, encoding="utf-8")
    return paths


def test_readers(files):
    semcor = read_semcor_tsv(files["semcor"])
    assert semcor.sentences[3] == ["money", "took", "place"]  # took_place split for embedding
    assert [(o.sentence, o.positions, o.keys) for o in semcor.occurrences][-1] == (3, [1, 2], ("take_place%2:30:00::",))
    assert len(semcor.occurrences) == 5
    test = read_raganato_xml(files["xml"])
    assert test.sentences[2] == ["money", "money", "river", "bank", "took", "place"]
    last = test.occurrences[-1]
    assert (last.id, last.positions, last.lemma, last.pos) == ("d000.s002.t001", [4, 5], "take_place", "VERB")
    assert test.occurrences[4].lemma == "bank"  # lemmas lowercased like sense keys
    assert read_gold_keys(files["gold"])["d000.s001.t000"] == {FINANCE, "bank%1:14:01::"}
    assert read_first_senses(files["wordnet"]) == {
        ("bank", "NOUN"): SLOPE, ("deposit", "NOUN"): "deposit%1:21:00::", ("money", "NOUN"): "money%1:21:00::",
        ("take_place", "VERB"): "take_place%2:30:00::"}
    assert sense_key_lemma_pos("peculiar%5:00:00:specific:00") == ("peculiar", "ADJ")


def test_sense_vectors_are_means_and_multiword_tokens_are_averaged(files):
    vectors, counts = build_sense_vectors(BagOfContext(TABLE), read_semcor_tsv(files["semcor"]), progress=False)
    # finance: layer 0 bank=(1,1) twice; layer 1 context (1,0) in s1 and (2,0) in s3 -> mean (1.5, 0)
    np.testing.assert_allclose(vectors[FINANCE], [[1, 1], [1.5, 0]])
    np.testing.assert_allclose(vectors[SLOPE], [[1, 1], [0, 1]])
    # took_place: layer 0 mean of took (2,0) and place (0,4); layer 1 mean of (1,4) and (3,0)
    np.testing.assert_allclose(vectors["take_place%2:30:00::"], [[1, 2], [2, 2]])
    assert counts == {"money%1:21:00::": 1, FINANCE: 2, SLOPE: 1, "take_place%2:30:00::": 1}


def test_one_nearest_neighbour_choices_and_f1(files):
    result = evaluate_wsd(BagOfContext(TABLE), read_semcor_tsv(files["semcor"]), read_raganato_xml(files["xml"]),
                          read_gold_keys(files["gold"]), read_first_senses(files["wordnet"]), progress=False)
    # Layer 1 (context): s0 bank ctx (0,1) -> slope (right); s1 bank ctx (1,0) -> finance (right);
    # s2 bank ctx = money+money+river+took+place = (4,5): cos finance 4/sqrt(41) = 0.62 < cos slope
    #   5/sqrt(41) = 0.78 -> slope (right). deposit: unseen in SemCor -> first sense (right);
    # zzz: in neither -> unanswered; take_place: only candidate (right). 5 answered, 5 right, 6 gold.
    layer1 = result["layers"][1]
    assert (layer1["answered"], layer1["correct"], layer1["instances"]) == (5, 5, 6)
    assert layer1["precision"] == pytest.approx(100) and layer1["recall"] == pytest.approx(500 / 6)
    assert layer1["f1"] == pytest.approx(2 * 100 * (500 / 6) / (100 + 500 / 6))
    # Layer 0: both bank senses have vector (1,1), a tie -> the first key in sorted order (finance):
    # s0 wrong, s1 right, s2 wrong; deposit and take_place right -> 3 of 5 answered.
    layer0 = result["layers"][0]
    assert (layer0["answered"], layer0["correct"]) == (5, 3)
    assert layer0["f1"] == pytest.approx(2 * 60 * 50 / 110)
    # WordNet first sense everywhere: bank -> slope: s0 right, s1 wrong, s2 right; deposit, take_place right.
    mfs = result["wordnet_first_sense"]
    assert (mfs["answered"], mfs["correct"]) == (5, 4)
    assert result["backed_off_to_first_sense"] == 2  # deposit and zzz


def test_gold_key_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.gold.key.txt"
    path.write_text("d000.s000.t000 bank%1:17:01::\nd000.s000.t001\n", encoding="utf-8")
    with pytest.raises(WsdDataError, match=r"bad\.gold\.key\.txt:2: expected 'instance_id sense_key"):
        read_gold_keys(path)
    path.write_text("d000.s000.t000 notakey\n", encoding="utf-8")
    with pytest.raises(WsdDataError, match=r"bad\.gold\.key\.txt:1: not a WordNet sense key: 'notakey'"):
        read_gold_keys(path)


def test_malformed_xml_and_tsv_errors_name_file_and_line(tmp_path):
    xml = tmp_path / "bad.data.xml"
    xml.write_text('<corpus>\n<sentence id="s">\n<instance id="i" pos="NOUN">bank</instance>\n</sentence>\n</corpus>\n')
    with pytest.raises(WsdDataError, match=r"bad\.data\.xml:3: <instance> without lemma"):
        read_raganato_xml(xml)
    xml.write_text('<corpus>\n<sentence id="s">\n<wf>a</wf>\n</corpus>\n')
    with pytest.raises(WsdDataError, match=r"bad\.data\.xml:4: malformed XML"):
        read_raganato_xml(xml)
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("1\tThe\tthe\tDT\t_\t_\n2\tjury\tjury\tNN\n")
    with pytest.raises(WsdDataError, match=r"bad\.tsv:2: expected 6 tab-separated fields, found 4"):
        read_semcor_tsv(tsv)
