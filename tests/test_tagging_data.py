"""Readers for CoNLL-U and CoNLL NER files, on small inline files and (when present) the shared data."""

from __future__ import annotations

import pytest
from testkit import need_shared

from elmokit.tasks.data import (
    TaggingDataError,
    bio_to_bioes,
    bioes_to_bio,
    iob1_to_bio,
    read_conll,
    read_conllu,
    read_text,
    write_conll,
)

CONLLU = """# sent_id = 1
# text = I didn't go.
1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2-3\tdidn't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdid\tdo\tAUX\tVBD\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_
3.1\tgone\tgo\tVERB\tVBN\t_\t_\t_\t_\t_
4\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

# sent_id = 2
1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\t_
"""


def test_conllu_skips_ranges_and_empty_nodes(tmp_path):
    path = tmp_path / "x.conllu"
    path.write_text(CONLLU)
    corpus = read_conllu(path)
    assert corpus.sentences == [["I", "did", "n't", "go", "."], ["Yes"]]
    assert corpus.labels == [["PRON", "AUX", "PART", "VERB", "PUNCT"], ["INTJ"]]
    assert read_conllu(path, column="xpos").labels[0] == ["PRP", "VBD", "RB", "VB", "."]


def test_conllu_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.conllu"
    lines = CONLLU.splitlines()
    lines[5] = "3\tn't\tnot\tPART"  # 4 columns on line 6
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaggingDataError, match=r"bad\.conllu:6: .*10 tab-separated columns.*has 4"):
        read_conllu(path)


CONLL_2003_STYLE = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O
Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER
Smith NNP I-NP B-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP I-LOC
"""


def test_conll_docstart_and_iob1_conversion(tmp_path):
    path = tmp_path / "eng.train"
    path.write_text(CONLL_2003_STYLE)
    corpus = read_conll(path)
    assert corpus.sentences == [["EU", "rejects", "German", "call", "Peter", "Blackburn", "Smith"], ["BRUSSELS"]]
    # IOB1: I- opens a chunk; B- only between two adjacent chunks of one type
    assert corpus.labels == [["B-ORG", "O", "B-MISC", "O", "B-PER", "I-PER", "B-PER"], ["B-LOC"]]
    assert corpus.notes and "4 chunk-opening" in corpus.notes[0]


def test_conll_tabs_prefix_and_whitespace_only_separators(tmp_path):
    path = tmp_path / "wikiann.txt"
    path.write_text("en:R.H.\tB-ORG\nen:Saunders\tI-ORG\n\t\nen:(\tO\n \nen:en:x\tO\n")
    corpus = read_conll(path, token_prefix="en:")
    assert corpus.sentences == [["R.H.", "Saunders"], ["("], ["en:x"]]
    assert corpus.labels == [["B-ORG", "I-ORG"], ["O"], ["O"]]
    assert corpus.notes == []  # well-formed BIO is left alone


def test_conll_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.conll"
    path.write_text("a\tO\nb\tB-X\nlonely\n")
    with pytest.raises(TaggingDataError, match=r"bad\.conll:3: expected 'token"):
        read_conll(path)
    path.write_text("a\tO\nb\tPER\n")
    with pytest.raises(TaggingDataError, match=r"bad\.conll:2: label 'PER'"):
        read_conll(path)
    with pytest.raises(FileNotFoundError, match="nope.conll"):
        read_conll(tmp_path / "nope.conll")


def test_scheme_conversions_by_hand():
    assert iob1_to_bio(["I-A", "I-A", "B-A", "O", "I-B", "I-A"]) == ["B-A", "I-A", "B-A", "O", "B-B", "B-A"]
    bio = ["B-A", "I-A", "I-A", "B-A", "O", "B-B", "B-B", "I-B"]
    bioes = ["B-A", "I-A", "E-A", "S-A", "O", "S-B", "B-B", "E-B"]
    assert bio_to_bioes(bio) == bioes
    assert bioes_to_bio(bioes) == bio


def test_text_reader_and_writer_round_trip(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("The cat sat .\nHello !\n")
    sentences = read_text(text)
    assert sentences == [["The", "cat", "sat", "."], ["Hello", "!"]]
    out = tmp_path / "out.conll"
    write_conll(out, sentences, [["O", "B-X", "I-X", "O"], ["O", "O"]])
    back = read_conll(out)
    assert back.sentences == sentences and back.labels == [["O", "B-X", "I-X", "O"], ["O", "O"]]
    text.write_text("a b\n\nc\n")
    with pytest.raises(TaggingDataError, match="empty lines 2"):
        read_text(text)


def test_shared_data_counts_match_their_source_files():
    ewt = need_shared("data", "ud_english_ewt")
    test = read_conllu(ewt / "en_ewt-ud-test.conllu")
    assert (len(test), test.num_tokens) == (2077, 25094)  # SOURCE.txt
    assert len(test.label_set()) == 17
    wnut = read_conll(need_shared("data", "wnut17") / "emerging.dev.conll")
    assert (len(wnut), wnut.num_tokens) == (1009, 15733)
    wikiann = read_conll(need_shared("data", "wikiann_en") / "dev.txt", token_prefix="en:")
    assert (len(wikiann), wikiann.num_tokens) == (10000, 80536)
    assert not any(t.startswith("en:") for s in wikiann.sentences[:100] for t in s)
