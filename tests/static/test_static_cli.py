"""A tiny end-to-end run of every algorithm through the CLI, checked with gensim as the file oracle."""

import json

import numpy as np
import pytest

pytest.importorskip("gensim")
pytest.importorskip("sklearn")
from gensim.models import KeyedVectors
from static_testkit import ANIMALS

from elmokit.cli.main import main
from elmokit.static.train import infer_doc_vectors, load_doc_vectors
from elmokit.static.vectors import StaticVectors

FAST = {  # tiny, quick settings; everything else is the tool default
    "cbow-hs": ["--algo", "cbow", "--hs"],
    "skipgram-ns": ["--algo", "skipgram", "--negative", "3"],
    "cbow-ns": ["--algo", "cbow", "--negative", "5"],
    "skipgram-hs": ["--algo", "skipgram", "--hs"],
    "fasttext": ["--algo", "fasttext", "--bucket", "53", "--min-n", "3", "--max-n", "4"],
    "glove": ["--algo", "glove", "--epochs", "3", "--window", "4", "--max-pairs-in-memory", "50", "--chunk-tokens", "101"],
    "lsa": ["--algo", "lsa", "--dim", "5"],
    "doc2vec-dm": ["--algo", "doc2vec", "--mode", "dm", "--epochs", "2"],
    "doc2vec-dbow": ["--algo", "doc2vec", "--mode", "dbow", "--epochs", "2"],
}


@pytest.mark.parametrize("run", sorted(FAST))
def test_train_each_algorithm(tmp_path, tiny_corpus, run):
    out = tmp_path / run
    dim = "5" if run == "lsa" else "7"
    argv = ["static", "train", *FAST[run], "--corpus", tiny_corpus, "--out", str(out), "--min-count", "3",
            "--dim", dim, "--tokenizer", "regex", "--lowercase", "--seed", "11", "--quiet"]
    assert main(argv) == 0
    record = json.loads((out / "run.json").read_text())
    assert record["command"].startswith("elmokit static train --algo")
    assert record["seed"] == 11 and record["config"]["dim"] == int(dim)
    assert record["corpus"]["tokenizer"] == {"kind": "regex", "lowercase": True, "pattern": r"\w+|[^\w\s]"}
    assert len(record["corpus"]["files"]) == 2 and record["training_seconds"] >= 0
    # vocabulary: the regex tokeniser splits "field." and lowercases "The"; every animal occurs >= 3 times
    kv = KeyedVectors.load_word2vec_format(str(out / "vectors.txt"))  # header line present: gensim reads it
    assert kv.vector_size == int(dim)
    assert {"the", ".", "field", *ANIMALS} <= set(kv.index_to_key)
    assert "The" not in kv.key_to_index and "field." not in kv.key_to_index
    table = StaticVectors.load(out)
    assert table.words == list(kv.index_to_key) and table.lowercase
    np.testing.assert_array_equal(table.vectors, kv.vectors)
    assert np.isfinite(table.vectors).all() and np.abs(table.vectors).sum() > 0
    (emb,) = table.embed([["the", "cat", "unseenword"]])
    assert emb.shape == (1, 3, int(dim))
    if run == "fasttext":
        assert np.abs(emb[0, 2]).sum() > 0  # built from n-grams
        from gensim.models import FastText

        model = FastText.load(str(out / "model.gensim"))
        stored = set(table.subwords.bucket_ids.tolist())
        from elmokit.static.subwords import ngram_buckets

        # (53 buckets: nearly all are touched by some vocabulary word)
        # words whose n-grams are all stored get exactly gensim's out-of-vocabulary vector
        checked = 0
        for word in ["cats", "dogs", "horses", "gardens", "rivers", "thecat"]:
            if set(ngram_buckets(word, 3, 4, 53)) <= stored:
                np.testing.assert_allclose(table[word], model.wv[word], rtol=1e-5, atol=1e-6)
                checked += 1
        assert checked >= 3
    else:
        np.testing.assert_array_equal(emb[0, 2], 0)
    if run.startswith("doc2vec"):
        docs = load_doc_vectors(out)
        from static_testkit import tiny_lines

        assert docs.shape == (sum(1 for line in tiny_lines() if line.strip()), int(dim))  # one per non-empty line
        inferred = infer_doc_vectors(out, [["the", "cat", "runs"], ["a", "dog"]])
        assert inferred.shape == (2, int(dim)) and inferred.dtype == np.float32


def test_refuses_to_overwrite_and_keeps_old_run(tmp_path, tiny_corpus, capsys):
    out = tmp_path / "run"
    base = ["static", "train", "--algo", "lsa", "--dim", "3", "--corpus", tiny_corpus, "--out", str(out), "--quiet"]
    assert main(base) == 0
    before = (out / "vectors.txt").read_bytes()
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "holds an earlier output of `elmokit static train`" in err and "--force" in err
    assert main(base[:-1] + ["--min-count", "100000", "--force", "--quiet"]) == 2  # fails: nothing left
    assert (out / "vectors.txt").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "run"]  # no partial folder left


def test_bad_options_are_reported(tmp_path, tiny_corpus, capsys):
    out = str(tmp_path / "x")
    assert main(["static", "train", "--algo", "skipgram", "--negative", "0", "--corpus", tiny_corpus, "--out", out]) == 2
    assert "choose --hs or --negative" in capsys.readouterr().err
    assert main(["static", "train", "--algo", "lsa", "--corpus", str(tmp_path / "none*.txt"), "--out", out]) == 2
    assert "matches no file" in capsys.readouterr().err


def test_eval_similarity_cli(tmp_path, capsys):
    words = ["cat", "dog", "car", "bus", "tree"]
    vectors = np.array([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0, 0.9, 0.2], [0, 0, 1]], dtype=np.float32)
    StaticVectors(words, vectors, name="toy").save(tmp_path / "toy.txt", header=False)  # GloVe style
    data = tmp_path / "wordsim"
    (data / "eval-word-vectors").mkdir(parents=True)
    (data / "eval-word-vectors" / "EN-MC-30.txt").write_text("cat\tdog\t9\ncar\tbus\t8\ncat\ttree\t1\ncat\tzebra\t5\n")
    (data / "gensim").mkdir()
    (data / "gensim" / "questions-words.txt").write_text(": family\ncat dog car bus\n")
    out = tmp_path / "res.json"
    assert main(["eval", "similarity", "--vectors", str(tmp_path / "toy.txt"), "--datasets", "mc30", "--analogies",
                 "google", "--data-dir", str(data), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "toy" in printed and "mc30" in printed
    res = json.loads(out.read_text())
    (mc,) = res["similarity"]
    # cosines: cat-dog .994, car-bus .976, cat-tree 0 -> same order as 9, 8, 1: rho 1 over 3 of 4 pairs
    assert mc["n_covered"] == 3 and mc["coverage"] == 0.75 and mc["spearman"] == pytest.approx(1.0)
    # dog - cat + car = (-.1+.., ...) -> bus is the nearest word left: correct
    assert res["analogy"][0]["accuracy"] == 1.0 and res["analogy"][0]["n_covered"] == 1


@pytest.mark.parametrize("algo", ["skipgram", "glove"])
def test_same_seed_same_vectors_different_seed_different(tmp_path, tiny_corpus, algo):
    def train(name, seed):
        extra = ["--epochs", "2"] if algo == "glove" else []
        argv = ["static", "train", "--algo", algo, "--dim", "6", "--min-count", "2", "--corpus", tiny_corpus,
                "--out", str(tmp_path / name), "--seed", str(seed), "--quiet", *extra]
        assert main(argv) == 0
        return StaticVectors.load(tmp_path / name).vectors

    first, again, other = train("a", 3), train("b", 3), train("c", 4)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


def test_document_vectors_holding_nan_are_refused_naming_file_and_tensor(tmp_path):
    from safetensors.numpy import save_file

    from elmokit.formats.checks import NonFiniteFile

    vectors = np.ones((3, 4), dtype=np.float32)
    vectors[2, 1] = np.nan
    save_file({"docvecs": vectors}, str(tmp_path / "docvecs.safetensors"))
    with pytest.raises(NonFiniteFile) as caught:
        load_doc_vectors(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'docvecs.safetensors'}: tensor 'docvecs' holds 1 non-finite value "
                                        "(first: nan at (2, 1))")
