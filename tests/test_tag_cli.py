"""`elmokit tag train|predict` and `elmokit eval pos|ner` on tiny inline data."""

from __future__ import annotations

import json

import pytest
import torch

from elmokit.cli.main import main
from elmokit.elmo import Embedder

torch.set_num_threads(1)

NER = "John\tB-PER\nlives\tO\nin\tO\nNew\tB-LOC\nYork\tI-LOC\n\nMary\tB-PER\nsaw\tO\nParis\tB-LOC\n\n"
CONLLU = (
    "# text = The cat sat.\n"
    "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n"
    "3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_\n4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_\n\n"
    "1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_\n2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_\n"
    "3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_\n\n"
)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "ner.conll").write_text(NER)
    (tmp_path / "pos.conllu").write_text(CONLLU)
    (tmp_path / "in.txt").write_text("John saw York\nMary lives in Paris\n")
    return tmp_path


def test_train_and_predict_ner_with_the_default_model(files, capsys):
    out = files / "tagger"
    code = main(["tag", "train", "--train", str(files / "ner.conll"), "--dev", str(files / "ner.conll"),
                 "--test", str(files / "ner.conll"), "--format", "conll", "--scheme", "BIOES", "--elmo-at-output",
                 "--epochs", "2", "--hidden-dim", "7", "--word-dim", "5", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "span F1 (seqeval strict, IOB2)" in printed and "test:" in printed
    config = json.loads((out / "config.json").read_text())
    default = Embedder.load("default")
    assert (config["elmo_layers"], config["elmo_dim"]) == (default.num_layers, default.dim)
    assert config["representation"] == {"kind": "elmo", "model": "default"}
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["mixing_weights"]) == {"input", "output"}
    assert len(metrics["mixing_weights"]["input"]["softmax_w"]) == default.num_layers
    assert metrics["command"][:3] == ["elmokit", "tag", "train"]
    assert "f1" in metrics["test"]

    assert main(["tag", "predict", "--tagger", str(out), "--input", str(files / "in.txt"),
                 "--out", str(files / "tagged.conll")]) == 0
    blocks = (files / "tagged.conll").read_text().strip("\n").split("\n\n")
    rows = [[line.split("\t") for line in block.splitlines()] for block in blocks]
    assert [[r[0] for r in block] for block in rows] == [["John", "saw", "York"], ["Mary", "lives", "in", "Paris"]]
    labels = {r[1] for block in rows for r in block}
    assert labels <= {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"}  # BIO out, never E-/S-

    assert main(["tag", "predict", "--tagger", str(out), "--input", str(files / "ner.conll"), "--format", "conll",
                 "--out", str(files / "again.conll")]) == 0
    assert "span F1" in capsys.readouterr().out


def test_train_pos_baseline_softmax(files, capsys):
    out = files / "pos"
    assert main(["tag", "train", "--train", str(files / "pos.conllu"), "--dev", str(files / "pos.conllu"),
                 "--format", "conllu", "--no-elmo", "--output", "softmax", "--epochs", "2", "--out", str(out)]) == 0
    assert "token accuracy" in capsys.readouterr().out
    config = json.loads((out / "config.json").read_text())
    assert (config["task"], config["elmo"], config["scheme"]) == ("pos", "none", None)
    vocab = json.loads((out / "vocab.json").read_text())
    assert sorted(vocab["labels"]) == ["AUX", "DET", "NOUN", "PART", "PUNCT", "VERB"]
    assert main(["tag", "predict", "--tagger", str(out), "--input", str(files / "pos.conllu"), "--format", "conllu",
                 "--out", str(files / "pos.out")]) == 0
    assert [l.split("\t")[0] for l in (files / "pos.out").read_text().split("\n\n")[1].splitlines()] == ["do", "n't", "go"]


def test_bad_input_is_one_clear_line_and_writes_nothing(files, capsys):
    (files / "bad.conll").write_text("John\tB-PER\nlonely\n")
    out = files / "never"
    code = main(["tag", "train", "--train", str(files / "bad.conll"), "--dev", str(files / "ner.conll"),
                 "--format", "conll", "--no-elmo", "--out", str(out)])
    assert code == 2
    assert "bad.conll:2: expected 'token" in capsys.readouterr().err
    assert not out.exists()
    code = main(["tag", "predict", "--tagger", str(files), "--input", str(files / "in.txt"), "--out", str(out)])
    assert code == 2 and "not a tagger folder" in capsys.readouterr().err


def _tiny_benchmark_tree(root):
    """The shared data layout, with tiny files, for eval pos|ner."""
    (root / "ud_english_ewt").mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (root / "ud_english_ewt" / f"en_ewt-ud-{split}.conllu").write_text(CONLLU)
    (root / "wnut17").mkdir()
    for name in ("wnut17train.conll", "emerging.dev.conll", "emerging.test.annotated"):
        (root / "wnut17" / name).write_text(NER)
    (root / "wikiann_en").mkdir()
    for name in ("train.txt", "dev.txt", "test.txt"):
        (root / "wikiann_en" / name).write_text("".join(
            f"en:{line}\n" if line else "\n" for line in NER.split("\n")[:-1]))
    return root  # no conll2003_en: skipped, as an optional set


def test_eval_pos_and_ner_json(tmp_path, capsys):
    data = _tiny_benchmark_tree(tmp_path / "data")
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("4 3\njohn 1 0 0\nmary 0 1 0\nparis 0 0 1\nthe 1 1 0\n")
    assert main(["eval", "pos", "--data-dir", str(data), "--epochs", "2", "--hidden-dim", "6",
                 "--out", str(tmp_path / "pos.json")]) == 0
    printed = capsys.readouterr().out
    assert "UPOS token accuracy" in printed and "elmo:default" in printed and "none" in printed
    pos = json.loads((tmp_path / "pos.json").read_text())
    assert [(r["dataset"], r["representation"]) for r in pos["results"]] == [("ewt", "elmo:default"), ("ewt", "none")]
    weights = pos["results"][0]["mixing_weights"]["input"]
    assert sum(weights["softmax_w"]) == pytest.approx(1.0, abs=1e-5) and "gamma" in weights
    assert pos["results"][1]["mixing_weights"] == {}

    assert main(["eval", "ner", "--vectors", str(vectors), "--data-dir", str(data), "--epochs", "1",
                 "--no-baseline", "--out", str(tmp_path / "ner.json")]) == 0
    assert "strict" in capsys.readouterr().out
    ner = json.loads((tmp_path / "ner.json").read_text())
    assert [r["dataset"] for r in ner["results"]] == ["wikiann", "wnut17"]  # conll2003 absent: skipped
    assert all(r["representation"] != "none" and "f1" in r["test"] for r in ner["results"])
    assert ner["results"][0]["config"]["elmo_layers"] == 1  # a static table is one layer


def test_warm_initial_state_is_recorded_and_used_again_by_predict(files):
    out = files / "warm-tagger"
    assert main(["tag", "train", "--train", str(files / "ner.conll"), "--dev", str(files / "ner.conll"),
                 "--format", "conll", "--initial-state", "warm", "--epochs", "1", "--hidden-dim", "7",
                 "--word-dim", "5", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["representation"] == {"kind": "elmo", "model": "default", "initial_state": "warm"}
    from elmokit.representation import load_representation

    warm = load_representation(config["representation"])
    sentence = [["John", "saw", "York"]]
    expected = Embedder.load("default", initial_state="warm").embed(sentence)[0]
    assert (warm.embed(sentence)[0] == expected).all()
    assert not (Embedder.load("default").embed(sentence)[0] == expected).all(), "warm must differ from zero"
