"""ERNIE (Tsinghua): the WordNet reader (against nltk's on the real files), TransE (PyKEEN's score and loss
against a numpy re-statement), SemCor's tagfiles, the first-sense linker, the fusion layer's equations by hand,
dEA's corruption rates by binomial bounds and its loss by hand, exact resume and a CLI smoke run."""

from __future__ import annotations

import json
import math
import tarfile
from pathlib import Path

import numpy as np
import pytest
from pretraining_testkit import assert_proportion, need_transformers, write_document_corpus
from train_helpers import one_thread

need_transformers()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from elmokit.cli.main import main  # noqa: E402
from elmokit.engine.run_folder import read_metrics  # noqa: E402
from elmokit.pretraining.ernie_thu import (  # noqa: E402
    KEEP,
    MASK,
    REPLACE,
    FirstSenseLinker,
    FusionLayer,
    GoldMentions,
    KnowledgeableEncoder,
    align,
    corrupt_alignments,
    dea_loss,
    link,
)
from elmokit.pretraining.knowledge_graph import (  # noqa: E402
    KnowledgeGraphError,
    TransEVectors,
    read_semcor,
    read_wordnet,
    train_transe,
    transe_score,
    write_semcor_corpus,
)
from elmokit.pretraining.run import PretrainConfig, pretrain  # noqa: E402

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
WORDNET_ARCHIVE = SHARED / "wordnet3.0" / "wordnet-3.0.tar.xz"
SEMCOR_ARCHIVE = SHARED / "semcor3.0" / "semcor3.0.tar.xz"

# ---- a toy WordNet in the database format: (offset, file pos, ss_type, lexname id, words, pointers)
LEXNAMES = {0: "adj.all", 3: "noun.Tops", 4: "noun.act", 5: "noun.animal", 6: "noun.artifact", 10: "noun.communication",
            17: "noun.object", 18: "noun.person", 28: "noun.time", 32: "verb.communication", 35: "verb.contact",
            38: "verb.motion"}
TOY = [
    ("00000010", "n", "n", 3, ["entity"], []),
    ("00000020", "n", "n", 5, ["animal"], [("@", "00000010", "n")]),
    ("00000030", "n", "n", 5, ["cat", "true_cat"], [("@", "00000020", "n")]),
    ("00000040", "n", "n", 5, ["dog"], [("@", "00000020", "n"), ("@", "00000020", "n")]),  # a repeated pointer
    ("00000050", "n", "n", 6, ["mat"], [("@", "00000010", "n")]),
    ("00000060", "n", "n", 17, ["hill"], [("@", "00000010", "n")]),
    ("00000070", "n", "n", 17, ["river"], [("@", "00000010", "n")]),
    ("00000080", "n", "n", 17, ["sky"], [("@", "00000010", "n")]),
    ("00000090", "n", "n", 28, ["summer", "summertime"], [("@", "00000010", "n")]),
    ("00000100", "n", "n", 28, ["day"], [("@", "00000010", "n")]),
    ("00000110", "n", "n", 10, ["story"], [("@", "00000010", "n")]),
    ("00000120", "n", "n", 28, ["summer_day"], [("@", "00000100", "n")]),
    ("00000130", "n", "n", 18, ["cat"], [("@", "00000010", "n")]),
    ("00000140", "n", "n", 4, ["run"], [("@", "00000010", "n"), ("+", "00000010", "v")]),
    ("00000010", "v", "v", 38, ["run"], [("+", "00000140", "n")]),
    ("00000020", "v", "v", 35, ["sit"], []),
    ("00000030", "v", "v", 32, ["tell"], []),
    ("00000010", "a", "a", 0, ["bright"], [("&", "00000020", "s")]),
    ("00000020", "a", "s", 0, ["brilliant"], [("&", "00000010", "a")]),
]
# sense key, synset (offset-pos), sense number, tag count
SENSES = [("entity%1:03:00::", "00000010-n", 1, 3), ("animal%1:05:00::", "00000020-n", 1, 9),
          ("cat%1:05:00::", "00000030-n", 1, 18), ("true_cat%1:05:00::", "00000030-n", 1, 0),
          ("cat%1:18:00::", "00000130-n", 2, 1), ("dog%1:05:00::", "00000040-n", 1, 42),
          ("mat%1:06:00::", "00000050-n", 1, 2), ("hill%1:17:00::", "00000060-n", 1, 4),
          ("river%1:17:00::", "00000070-n", 1, 7), ("sky%1:17:00::", "00000080-n", 1, 5),
          ("summer%1:28:00::", "00000090-n", 1, 6), ("summertime%1:28:00::", "00000090-n", 1, 0),
          ("day%1:28:00::", "00000100-n", 1, 30), ("story%1:10:00::", "00000110-n", 1, 8),
          ("summer_day%1:28:00::", "00000120-n", 1, 0), ("run%1:04:00::", "00000140-n", 1, 5),
          ("run%2:38:00::", "00000010-v", 1, 100), ("sit%2:35:00::", "00000020-v", 1, 20),
          ("tell%2:32:00::", "00000030-v", 1, 50), ("bright%3:00:00::", "00000010-a", 1, 3),
          ("brilliant%5:00:00:bright:00", "00000020-a", 1, 1)]
FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}


def write_toy_wordnet(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lexnames").write_text("".join(f"{k:02d}\t{v}\t1\n" for k, v in LEXNAMES.items()))
    lines = {p: ["  1 This is a toy in WordNet's format.\n"] for p in FILES}
    for offset, pos, ss_type, lex, words, pointers in TOY:
        fields = [offset, f"{lex:02d}", ss_type, f"{len(words):02x}"] + [x for w in words for x in (w, "0")]
        fields += [f"{len(pointers):03d}"] + [x for s, o, p in pointers for x in (s, o, p, "0000")]
        lines[pos].append(" ".join(fields) + " | a gloss  \n")
    for pos, name in FILES.items():
        (folder / f"data.{name}").write_text("".join(lines[pos]))
    (folder / "index.sense").write_text("".join(f"{k} {s.split('-')[0]} {n} {c}\n" for k, s, n, c in sorted(SENSES)))
    (folder / "verb.exc").write_text("ran run\nsat sit\ntold tell\n")
    for name in ("noun", "adj", "adv"):
        (folder / f"{name}.exc").write_text("")
    return folder


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return read_wordnet(write_toy_wordnet(tmp_path_factory.mktemp("wn") / "wordnet"))


def _name(graph, synset_index):
    return graph.synsets[synset_index]


# ---- WordNet


def test_toy_wordnet_entities_triples_and_senses_by_hand(toy):
    assert len(toy.synsets) == 19 and toy.synsets[:2] == ["00000010-n", "00000020-n"]
    assert toy.lexnames[toy.index["00000040-n"]] == "noun.animal"
    triples = {(_name(toy, h), toy.relations[r], _name(toy, t)) for h, r, t in toy.triples}
    assert len(toy.triples) == len(triples) == 17  # 18 pointers, the dog's repeated hypernym kept once
    assert ("00000040-n", "@", "00000020-n") in triples
    assert ("00000140-n", "+", "00000010-v") in triples  # across files
    assert ("00000010-a", "&", "00000020-a") in triples  # a satellite's pointer lands in data.adj
    assert _name(toy, toy.sense_keys["brilliant%5:00:00:bright:00"]) == "00000020-a"
    assert [(_name(toy, s), n) for s, _, n, _ in toy.senses["cat"]] == [("00000030-n", 1), ("00000130-n", 2)]
    assert _name(toy, toy.first_sense("run")) == "00000010-v"  # the verb's first sense has more tags
    assert toy.first_sense("unknown") is None
    assert toy.exceptions["ran"] == ["run"]


def test_a_missing_or_broken_wordnet_is_a_user_error(tmp_path):
    with pytest.raises(KnowledgeGraphError, match="no such file"):
        read_wordnet(tmp_path / "nothing")
    folder = write_toy_wordnet(tmp_path / "wn")
    (folder / "data.noun").write_text("00000010 03 n zz entity\n")
    with pytest.raises(KnowledgeGraphError, match=r"data.noun:1: not a WordNet data line"):
        read_wordnet(folder)


@pytest.fixture(scope="module")
def real_wordnet(tmp_path_factory):
    """WordNet 3.0 unpacked where nltk looks for it: ROOT/corpora/wordnet."""
    if not WORDNET_ARCHIVE.exists():
        pytest.skip("needs ../shared/data/wordnet3.0/wordnet-3.0.tar.xz")
    root = tmp_path_factory.mktemp("nltk_data")
    with tarfile.open(WORDNET_ARCHIVE) as archive:
        archive.extractall(root, filter="data")
    folder = next(p.parent for p in root.rglob("data.noun"))
    (root / "corpora").mkdir()
    folder.rename(root / "corpora" / "wordnet")
    return root


@pytest.mark.slow
def test_wordnet_30_reads_as_nltk_reads_it(real_wordnet):
    """The oracle: nltk's WordNet reader on the same files, offline (nltk.data.path; nothing is downloaded).
    300 sampled synsets' lexicographer files and hypernyms, 300 sense keys, first senses per POS."""
    nltk = pytest.importorskip("nltk")
    nltk.data.path.insert(0, str(real_wordnet))
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    theirs = WordNetCorpusReader(str(real_wordnet / "corpora" / "wordnet"), None)
    ours = read_wordnet(real_wordnet / "corpora" / "wordnet")
    assert len(ours.synsets) == 117659 and len(set(ours.synsets)) == 117659  # WordNet 3.0's synset count
    rng = np.random.default_rng(0)
    hypernym = ours.relations.index("@")
    by_head: dict[int, set] = {}
    for h, _, t in ours.triples[ours.triples[:, 1] == hypernym]:
        by_head.setdefault(int(h), set()).add(ours.synsets[t])
    for i in rng.choice(len(ours.synsets), 300, replace=False):
        offset, pos = ours.synsets[i].split("-")
        synset = theirs.synset_from_pos_and_offset(pos, int(offset))
        assert synset.lexname() == ours.lexnames[i], ours.synsets[i]
        expected = {f"{h.offset():08d}-{h.pos()}" for h in synset.hypernyms()}  # '@' (instances are '@i')
        assert by_head.get(int(i), set()) == expected, ours.synsets[i]
    for key in rng.choice(sorted(ours.sense_keys), 300, replace=False):
        synset = theirs.lemma_from_key(str(key)).synset()
        pos = "a" if synset.pos() == "s" else synset.pos()
        assert ours.synsets[ours.sense_keys[key]] == f"{synset.offset():08d}-{pos}", key
    for lemma in ("dog", "bank", "run", "new_york", "take_place", "good", "quickly"):
        for pos in "nvar":
            theirs_first = [s for s in theirs.synsets(lemma) if (s.pos() if s.pos() != "s" else "a") == pos]
            ours_first = [s for s in ours.senses.get(lemma, ()) if s[1] == pos]
            assert bool(theirs_first) == bool(ours_first), (lemma, pos)
            if theirs_first:
                assert ours.synsets[ours_first[0][0]] == f"{theirs_first[0].offset():08d}-{pos}", (lemma, pos)


# ---- TransE


def test_transe_score_and_margin_loss_of_pykeen_equal_a_numpy_restatement():
    """PyKEEN's TransE interaction and margin ranking loss against the formulas, then a trained toy graph ranks
    its true triples above their corruptions and keeps the entity vectors on the unit sphere."""
    pytest.importorskip("pykeen")
    from pykeen.losses import MarginRankingLoss
    from pykeen.models import TransE
    from pykeen.triples import CoreTriplesFactory

    triples = np.array([[0, 0, 1], [1, 0, 2], [2, 0, 3], [3, 0, 4], [0, 1, 2], [1, 1, 3], [2, 1, 4]])
    factory = CoreTriplesFactory(mapped_triples=torch.as_tensor(triples), num_entities=5, num_relations=2)
    for p in (1, 2):
        model = TransE(triples_factory=factory, embedding_dim=7, scoring_fct_norm=p, random_seed=3)
        entities = model.entity_representations[0]().detach().numpy()
        relations = model.relation_representations[0]().detach().numpy()
        scores = model.score_hrt(torch.as_tensor(triples)).detach().numpy().ravel()
        np.testing.assert_allclose(scores, transe_score(entities, relations, triples, p), rtol=1e-5, atol=1e-6)
        by_hand = [-sum(abs(entities[h] + relations[r] - entities[t]) ** p) ** (1 / p) for h, r, t in triples]
        np.testing.assert_allclose(scores, by_hand, rtol=1e-5)
    positive = torch.tensor([-1.0, -0.2, -3.0])
    negative = torch.tensor([-1.5, -0.1, -0.5])
    loss = MarginRankingLoss(margin=1.0).process_slcwa_scores(positive[:, None], negative[:, None])
    assert float(loss) == pytest.approx(np.mean(np.maximum(0, 1.0 - positive.numpy() + negative.numpy())), rel=1e-6)

    # the graph 30 times an epoch: PyKEEN runs a full gc.collect after each epoch, slow in a big test process
    entities, relations, record = train_transe(np.tile(triples, (30, 1)), 5, 2, dim=8, epochs=3, batch_size=14, lr=0.05,
                                               seed=0)
    np.testing.assert_allclose(np.linalg.norm(entities, axis=1), 1.0, rtol=1e-5)
    true = transe_score(entities, relations, triples)
    corrupted = []
    for h, r, t in triples:  # every tail corruption that is not itself a true triple
        corrupted += [transe_score(entities, relations, np.array([[h, r, x]]))[0] for x in range(5)
                      if x != t and not ((triples == [h, r, x]).all(1)).any()]
    assert true.mean() > np.mean(corrupted) + 0.5, (true.mean(), np.mean(corrupted))
    assert record["library"] == "pykeen" and record["losses"][-1] < record["losses"][0]


def test_transe_vectors_round_trip_and_refuse_non_finite(tmp_path):
    vectors = TransEVectors(["a-n", "b-n"], np.eye(2, 3, dtype=np.float32), np.ones((1, 3), np.float32), 1, {"x": 1})
    vectors.save(tmp_path / "kg")
    again = TransEVectors.load(tmp_path / "kg")
    assert again.names == ["a-n", "b-n"] and again.info == {"x": 1} and np.array_equal(again.entities, vectors.entities)
    vectors.entities[1, 2] = np.nan
    vectors.save(tmp_path / "bad")
    with pytest.raises(KnowledgeGraphError, match=r"entities holds 1 non-finite value \(first: nan at \(1, 2\)\)"):
        TransEVectors.load(tmp_path / "bad")


# ---- SemCor and the linker

TAGFILE = """<contextfile concordance=brown>
<context filename=br-x01 paras=yes>
<p pnum=1>
<s snum=1>
<wf cmd=ignore pos=DT>The</wf>
<wf cmd=done pos=NN lemma=cat wnsn=2 lexsn=1:18:00::>cats</wf>
<wf cmd=done pos=VB lemma=run wnsn=1 lexsn=2:38:00::>ran</wf>
<wf cmd=done pos=NN lemma=summer_day wnsn=1 lexsn=1:28:00::>summer_day</wf>
<wf cmd=done pos=NN lemma=unicorn wnsn=1 lexsn=1:05:00::>unicorn</wf>
<punc>.</punc>
</s>
</p>
</context>
</contextfile>
"""


def test_semcor_tagfiles_give_words_and_gold_synsets(tmp_path, toy):
    folder = tmp_path / "semcor" / "brown1" / "tagfiles"
    folder.mkdir(parents=True)
    (folder / "br-x01").write_text(TAGFILE)
    documents = read_semcor(tmp_path / "semcor", toy)
    (sentence,) = documents[0]
    assert sentence.words == ["The", "cats", "ran", "summer", "day", "unicorn", "."]
    assert [(s, e, _name(toy, k)) for s, e, k in sentence.mentions] == [
        (1, 2, "00000130-n"), (2, 3, "00000010-v"), (3, 5, "00000120-n")]  # unicorn: a key WordNet lacks
    write_semcor_corpus(documents, tmp_path / "semcor.txt", tmp_path / "mentions.jsonl", toy)
    assert (tmp_path / "semcor.txt").read_text() == "The cats ran summer day unicorn .\n\n"
    row = json.loads((tmp_path / "mentions.jsonl").read_text())
    assert row["mentions"][0] == [1, 2, "00000130-n"]


@pytest.mark.slow
def test_semcor_30_counts():
    if not (SEMCOR_ARCHIVE.exists() and WORDNET_ARCHIVE.exists()):
        pytest.skip("needs ../shared/data/semcor3.0 and ../shared/data/wordnet3.0")
    wordnet = read_wordnet(WORDNET_ARCHIVE)
    documents = read_semcor(SEMCOR_ARCHIVE, wordnet)
    assert len(documents) == 352 and sum(len(d) for d in documents) == 37176  # SOURCE.txt; Raganato et al.'s count
    mentions = sum(len(s.mentions) for d in documents for s in d)
    assert 220_000 < mentions <= 234_136, mentions  # sense-tagged tokens whose first key WordNet 3.0 holds


def test_first_sense_linker_longest_match_morphology_and_function_words(toy):
    linker = FirstSenseLinker(toy)
    words = "The cats ran on a long summer day under bright skies and cat".split()
    got = [(words[s:e], _name(toy, k)) for s, e, k in linker(words)]
    assert got == [(["cats"], "00000030-n"),  # plural -> cat, sense 1 (not the person, sense 2)
                   (["ran"], "00000010-v"),  # verb.exc, and run's verb sense outranks the noun's by tag count
                   (["summer", "day"], "00000120-n"),  # the longest lemma first
                   (["bright"], "00000010-a"),
                   (["skies"], "00000080-n"),  # morphy's ies -> y
                   (["cat"], "00000030-n")]
    assert linker(["a", "the", ",", "1990"]) == []


def test_gold_mentions_where_semcor_sentences_stand_and_the_linker_elsewhere(toy):
    gold = GoldMentions([(["The", "cats", "ran", "."], [(1, 2, toy.index["00000130-n"])])])
    words = ["dogs", "sat", ".", "the", "cats", "ran", ".", "cats"]
    got = [(s, e, _name(toy, k)) for s, e, k in link(words, FirstSenseLinker(toy), gold)]
    assert got == [(0, 1, "00000040-n"), (1, 2, "00000020-v"), (4, 5, "00000130-n"),  # gold: the person sense
                   (7, 8, "00000030-n")]  # outside the sentence the linker's first sense
    assert link(words, None, gold) == [(4, 5, toy.index["00000130-n"])]


def test_an_entity_is_aligned_to_the_first_piece_of_its_mention():
    word_ids = [None, 0, 0, 1, 2, 2, 2, None]
    assert align(word_ids, [(0, 1, 7), (1, 3, 9)]).tolist() == [-1, 7, -1, 9, -1, -1, -1, -1]


# ---- dEA


def test_dea_corruption_rates_are_5_15_80_by_binomial_bounds():
    rng = np.random.default_rng(0)
    n_rows, length, num_entities = 400, 50, 1000
    counts = {KEEP: 0, REPLACE: 0, MASK: 0}
    aligned_total = 0
    for _ in range(n_rows):
        entities = np.where(rng.random(length) < 0.4, rng.integers(0, num_entities, length), -1)
        out, decisions = corrupt_alignments(entities, num_entities, rng)
        aligned = entities >= 0
        aligned_total += int(aligned.sum())
        assert (decisions[~aligned] == -1).all() and (out[~aligned] == -1).all()  # no alignment made up
        assert (out[decisions == KEEP] == entities[decisions == KEEP]).all()
        assert (out[decisions == MASK] == -1).all()
        assert ((out[decisions == REPLACE] >= 0) & (out[decisions == REPLACE] < num_entities)).all()
        for kind in counts:
            counts[kind] += int((decisions == kind).sum())
    assert sum(counts.values()) == aligned_total > 7000
    assert_proportion(counts[REPLACE], aligned_total, 0.05, "replaced")
    assert_proportion(counts[MASK], aligned_total, 0.15, "masked")
    assert_proportion(counts[KEEP], aligned_total, 0.80, "kept")


def test_dea_loss_by_hand():
    table = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 2.0]], dtype=np.float32)
    encoder = KnowledgeableEncoder(table, hidden=3, intermediate=4, k_layers=0)
    with torch.no_grad():
        encoder.dea.weight.copy_(torch.tensor([[1.0, 0.0, 0.5], [0.0, 2.0, -1.0]]))
        encoder.dea.bias.copy_(torch.tensor([0.1, -0.2]))
    hidden = torch.tensor([[[1.0, 2.0, 3.0], [0.5, -1.0, 0.0], [9.0, 9.0, 9.0]],
                           [[0.0, 1.0, 1.0], [2.0, 0.0, -1.0], [1.0, 1.0, 1.0]]])
    labels = torch.tensor([[2, 0, -1], [3, -1, -1]])
    candidates = torch.tensor([[0, 2, -1], [1, 3, 0]])
    total, count = dea_loss(encoder, hidden, labels, candidates)
    expected = 0.0
    W, b = np.array([[1.0, 0.0, 0.5], [0.0, 2.0, -1.0]]), np.array([0.1, -0.2])
    for (row, col, target, cands) in ((0, 0, 2, [0, 2]), (0, 1, 0, [0, 2]), (1, 0, 3, [1, 3, 0])):
        q = W @ hidden[row, col].numpy() + b
        logits = np.array([q @ table[c] for c in cands])
        expected += -(logits[cands.index(target)] - np.log(np.exp(logits).sum()))
    assert count == 3 and float(total.detach()) == pytest.approx(expected, rel=1e-5)


# ---- the fusion layer


def _bert_layer(hidden=6, intermediate=10, heads=2):
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer

    torch.manual_seed(0)
    config = BertConfig(hidden_size=hidden, intermediate_size=intermediate, num_attention_heads=heads,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertLayer(config).eval()


@pytest.mark.parametrize("fusion", ["paper", "residual"])
def test_fusion_layer_is_equations_4_to_6_by_hand(fusion):
    """B 2, T 5, H 6, I 10, D 4: the token stream's attention is the BERT layer's own (so it is the oracle of
    eq. 4's w~); the entity attention, eq. 5 for tokens with an entity and eq. 6 for the others, by hand."""
    layer = _bert_layer()
    torch.manual_seed(1)
    fusion_layer = FusionLayer(4, 10, heads=2, fusion=fusion, dropout=0.0).eval()
    B, T, H, D = 2, 5, 6, 4
    w = torch.randn(B, T, H)
    has_entity = torch.tensor([[True, False, True, False, False], [False, False, False, False, False]])
    e = torch.randn(B, T, D) * has_entity[..., None]
    pad = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    mask = (1.0 - pad[:, None, None, :].float()) * torch.finfo(torch.float32).min
    w_out, e_out = fusion_layer(layer, w, e, has_entity, mask)
    assert w_out.shape == (B, T, H) and e_out.shape == (B, T, D)

    with torch.no_grad():
        w_t = layer.attention(w, attention_mask=mask)[0]
        att = fusion_layer.attention
        qkv = e @ att.qkv.weight.T + att.qkv.bias  # (B, T, 3D)
        q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
        e_t = torch.zeros(B, T, D)
        for b in range(B):
            keys = [j for j in range(T) if has_entity[b, j]]
            for i in keys:
                heads = []
                for hd in range(2):
                    sl = slice(2 * hd, 2 * hd + 2)
                    scores = torch.stack([q[b, i, sl] @ k[b, j, sl] for j in keys]) / math.sqrt(2)
                    heads.append(sum(p * v[b, j, sl] for p, j in zip(torch.softmax(scores, 0), keys)))
                context = torch.cat(heads) @ att.out.weight.T + att.out.bias
                e_t[b, i] = F.layer_norm(context + e[b, i], (D,), att.norm.weight, att.norm.bias, 1e-12)
        Wt_in, bt_in = layer.intermediate.dense.weight, layer.intermediate.dense.bias
        We_in = fusion_layer.entity_in.weight
        Wt_out, bt_out = layer.output.dense.weight, layer.output.dense.bias
        We_out, be_out = fusion_layer.entity_out.weight, fusion_layer.entity_out.bias
        for b in range(B):
            for j in range(T):
                if has_entity[b, j]:
                    h = F.gelu(Wt_in @ w_t[b, j] + We_in @ e_t[b, j] + bt_in)  # eq. 5
                else:
                    h = F.gelu(Wt_in @ w_t[b, j] + bt_in)  # eq. 6
                if fusion == "paper":
                    w_expected = F.gelu(Wt_out @ h + bt_out)
                    e_expected = F.gelu(We_out @ h + be_out)
                else:
                    w_expected = F.layer_norm(Wt_out @ h + bt_out + w_t[b, j], (H,), layer.output.LayerNorm.weight,
                                              layer.output.LayerNorm.bias, layer.output.LayerNorm.eps)
                    e_expected = F.layer_norm(We_out @ h + be_out + e_t[b, j], (D,), fusion_layer.norm.weight,
                                              fusion_layer.norm.bias, 1e-12)
                torch.testing.assert_close(w_out[b, j], w_expected, rtol=1e-5, atol=1e-5)
                if has_entity[b, j]:
                    torch.testing.assert_close(e_out[b, j], e_expected, rtol=1e-5, atol=1e-5)
                else:
                    assert not e_out[b, j].any()
        assert torch.isfinite(w_out).all() and torch.isfinite(e_out).all()  # row 1: no entity at all


def test_residual_k_encoder_without_entities_is_the_bert_model_itself():
    """With the authors' residual fusion, text without entities runs exactly the HF BERT (eq. 6 is then a BERT
    layer), so the T-/K-Encoder split and the masks are the library's."""
    from elmokit.pretraining.models import build_model

    model = build_model("bert-mlm", "tiny", vocab_size=50, seed=0).eval()
    encoder = KnowledgeableEncoder(np.ones((3, 4), np.float32), hidden=32, intermediate=128, k_layers=1,
                                   fusion="residual").eval()
    ids = torch.tensor([[2, 7, 8, 9, 3], [2, 10, 3, 0, 0]])
    attention = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    ours = encoder(model, ids, attention, torch.full_like(ids, -1))
    out = model.bert(input_ids=ids, attention_mask=attention, output_hidden_states=True)
    theirs = out[0]
    torch.testing.assert_close(ours[attention.bool()], theirs[attention.bool()], rtol=1e-5, atol=1e-6)
    every = encoder(model, ids, attention, torch.full_like(ids, -1), all_layers=True)  # embeddings + each layer
    assert len(every) == len(out.hidden_states) == 3 and torch.equal(every[-1], ours)
    for mine, library in zip(every, out.hidden_states):
        torch.testing.assert_close(mine[attention.bool()], library[attention.bool()], rtol=1e-5, atol=1e-6)
    entities = torch.tensor([[-1, 0, -1, 2, -1], [-1, 1, -1, -1, -1]])
    assert not torch.allclose(encoder(model, ids, attention, entities), ours)  # entities do change the tokens


# ---- runs


@pytest.fixture(scope="module")
def kg(tmp_path_factory):
    """The toy WordNet with TransE vectors (random unit rows: a run does not need trained ones) and a corpus."""
    root = tmp_path_factory.mktemp("kg")
    folder = write_toy_wordnet(root / "wordnet")
    graph = read_wordnet(folder)
    rng = np.random.default_rng(0)
    entities = rng.normal(size=(len(graph.synsets), 8)).astype(np.float32)
    entities /= np.linalg.norm(entities, axis=1, keepdims=True)
    TransEVectors(graph.synsets, entities, rng.normal(size=(len(graph.relations), 8)).astype(np.float32)).save(root / "transe")
    write_document_corpus(root / "docs.txt")
    return {"wordnet": str(folder), "transe": str(root / "transe"), "corpus": root / "docs.txt"}


def _config(kg, **changes) -> PretrainConfig:
    base = dict(objective="ernie-thu", preset="tiny", max_steps=6, batch_size=4, vocab_size=300, max_tokens=32,
                log_every=1, checkpoint_every=3, lr=2e-3, ernie_thu_wordnet=kg["wordnet"], ernie_thu_transe=kg["transe"])
    return PretrainConfig(**{**base, **changes})


def _run(run_dir, kg, config, resume=False):
    with one_thread():
        return pretrain(run_dir, corpus=str(kg["corpus"]), config=config, resume=resume, command="test", progress=False)


def test_resume_after_half_the_steps_is_bit_identical(tmp_path, kg):
    """Straight 6 steps vs 3 + resume + 3 with dropout on: model, K-Encoder modules, optimizer and metrics equal."""
    config = _config(kg)
    straight = _run(tmp_path / "straight", kg, config)
    config = config.replace(tokenizer_dir=str(tmp_path / "straight" / "tokenizer"))
    _run(tmp_path / "split", kg, config.replace(max_steps=3))
    resumed = _run(tmp_path / "split", kg, config, resume=True)
    assert resumed.step == straight.step == 6 and resumed.tokens == straight.tokens
    untimed = [{k: v for k, v in e.items() if k not in ("tokens_per_s", "elapsed_s", "cpu_s")}
               for e in read_metrics(tmp_path / "straight")]
    assert untimed == [{k: v for k, v in e.items() if k not in ("tokens_per_s", "elapsed_s", "cpu_s")}
                       for e in read_metrics(tmp_path / "split")]
    assert all(e["alignments"] > 0 for e in untimed if "alignments" in e)  # the linker found entities
    for name in ("model.safetensors", "optimizer.safetensors"):
        a = load_file(str(tmp_path / "straight" / "checkpoints" / "step_00000006" / name))
        b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000006" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        if name == "model.safetensors":
            assert any(k.startswith("ernie_thu.fusions.0.") for k in a)
            assert not any("entity_table" in k for k in a)  # the frozen TransE table is not checkpointed


def test_cli_smoke_run_trains_mlm_and_dea(tmp_path, kg, capsys):
    out = tmp_path / "run"
    with one_thread():
        code = main(["pretrain", "--objective", "ernie-thu", "--corpus", str(kg["corpus"]), "--out", str(out),
                     "--preset", "tiny", "--max-steps", "20", "--batch-size", "6", "--vocab-size", "300",
                     "--max-tokens", "32", "--lr", "3e-3", "--dropout", "0", "--log-every", "1", "--warmup-steps", "2",
                     "--threads", "1", "--ernie-thu-wordnet", kg["wordnet"], "--ernie-thu-transe", kg["transe"],
                     "--ernie-thu-fusion", "residual"])
    assert code == 0, capsys.readouterr().err
    metrics = [e for e in read_metrics(out) if "loss" in e]
    assert len(metrics) == 20
    dea = [e["dea"] for e in metrics]
    assert np.mean(dea[-4:]) < np.mean(dea[:4]), dea
    record = json.loads((out / "training.json").read_text())
    assert record["pretraining"]["ernie_thu_fusion"] == "residual" and "ernie_thu" in record["model"]["module_parameters"]


def test_settings_errors_are_one_line(tmp_path, kg, capsys):
    code = main(["pretrain", "--objective", "bert", "--corpus", str(kg["corpus"]), "--out", str(tmp_path / "a"),
                 "--max-steps", "1", "--ernie-thu-fusion", "residual"])
    assert code == 2 and "ernie_thu_fusion go with --objective ernie-thu" in capsys.readouterr().err
    code = main(["pretrain", "--objective", "ernie-thu", "--corpus", str(kg["corpus"]), "--out", str(tmp_path / "b"),
                 "--max-steps", "1", "--vocab-size", "300"])
    err = capsys.readouterr().err
    assert code == 2 and "needs --ernie-thu-wordnet" in err and "Traceback" not in err
    assert not (tmp_path / "b").exists()  # refused before anything is written
    code = main(["pretrain", "--objective", "ernie-thu", "--corpus", str(kg["corpus"]), "--out", str(tmp_path / "c"),
                 "--max-steps", "1", "--ernie-thu-wordnet", kg["wordnet"], "--ernie-thu-transe", kg["transe"],
                 "--ernie-thu-k-layers", "3"])
    assert code == 2 and "ernie_thu_k_layers must be 1 to 2" in capsys.readouterr().err


def test_resume_refuses_a_changed_transe_table(tmp_path, kg):
    import shutil

    transe = tmp_path / "transe"
    shutil.copytree(kg["transe"], transe)
    config = _config({**kg, "transe": str(transe)}, max_steps=2, checkpoint_every=1)
    _run(tmp_path / "run", kg, config)
    vectors = TransEVectors.load(transe)
    vectors.entities[0] *= -1
    vectors.save(transe)
    with pytest.raises(KnowledgeGraphError, match="transe changed since the run started"):
        _run(tmp_path / "run", kg, config.replace(max_steps=4), resume=True)


def test_every_parameter_of_the_knowledge_side_gets_a_gradient(kg, hand_tokenizer):
    """One MLM + dEA step through the objective's own batches, two K-Encoder layers: the fusion layers, the
    entity attention and the dEA projection all receive gradient, except the last layer's entity output, which
    feeds nothing (dEA reads the token stream, as in the paper); the TransE table is a buffer."""
    from elmokit.pretraining.ernie_thu import ernie_thu_from_options
    from elmokit.pretraining.models import build_model

    model = build_model("bert-mlm", "tiny", vocab_size=len(hand_tokenizer), seed=0)
    objective = ernie_thu_from_options(hand_tokenizer, model, {"ernie_thu_wordnet": kg["wordnet"],
                                                               "ernie_thu_transe": kg["transe"], "ernie_thu_k_layers": 2})
    ids = hand_tokenizer.convert_tokens_to_ids(["[CLS]", "the", "cat", "##s", "sat", "on", "the", "mat", "a", "dog", "[SEP]"])
    example = {"input_ids": np.array(ids), "word_ids": [None, 0, 1, 1, 2, 3, 4, 5, 6, 7, None]}
    rng = np.random.default_rng(0)
    batch = next(objective.batches([example] * 3, batch_size=3, rng=rng))
    assert (batch["entity_labels"][0] >= 0).sum() == 4  # cats, sat (sit), mat, dog
    assert batch["candidates"].shape == (3, 4)
    out = objective.loss(model, batch)
    out.loss.backward()
    assert out.parts["alignments"] == 12 and out.parts["dea"] > 0
    for name, parameter in objective.encoder.named_parameters():
        if name.startswith("fusions.1.entity_out") or name.endswith(("fusions.0.norm.weight", "fusions.0.norm.bias")) \
                or name.startswith("fusions.1.norm"):  # the last entity output; the paper fusion has no entity norm
            assert parameter.grad is None, name
        else:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert not objective.encoder.entity_table.requires_grad
