"""The CLI end to end on tiny inline data with the shipped default model: classify, eval probe, eval wsd."""

import json

from elmokit.cli.main import main

TSV = "pos\tthe film is great fun\nneg\ta dull and awful mess\npos\tgreat acting\nneg\tawful\n"


def test_classify_train_and_predict_round_trip(tmp_path, capsys):
    (tmp_path / "train.tsv").write_text(TSV, encoding="utf-8")
    (tmp_path / "in.txt").write_text("a great film\nawful mess\n", encoding="utf-8")
    for extra in ([], ["--no-elmo"]):
        model = tmp_path / f"model{len(extra)}"
        assert main(["classify", "train", "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "train.tsv"),
                     "--out", str(model), "--epochs", "2", "--word-dim", "4", "--hidden-dim", "3", "--threads", "1",
                     *extra]) == 0
        assert json.loads((model / "config.json").read_text())["use_elmo"] == (not extra)
        assert main(["classify", "predict", "--classifier", str(model), "--input", str(tmp_path / "in.txt"),
                     "--out", str(tmp_path / "p.tsv")]) == 0
        rows = [line.split("\t") for line in (tmp_path / "p.tsv").read_text().splitlines()]
        assert len(rows) == 2 and all(label in ("pos", "neg") and 0.5 <= float(p) <= 1 for label, p in rows)


def test_classify_bad_tsv_names_file_and_line(tmp_path, capsys):
    (tmp_path / "bad.tsv").write_text("pos\tfine\nno tab here\n", encoding="utf-8")
    assert main(["classify", "train", "--train", str(tmp_path / "bad.tsv"), "--dev", str(tmp_path / "bad.tsv"),
                 "--out", str(tmp_path / "m"), "--no-elmo"]) == 2
    assert "bad.tsv:2: expected 'label<TAB>sentence'" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_eval_probe_cli_on_inline_conllu(tmp_path, capsys):
    rows = ["1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_", "2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_",
            "3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_"]
    for split in ("train", "dev", "test"):
        (tmp_path / f"en_ewt-ud-{split}.conllu").write_text(("\n".join(rows) + "\n\n") * 3, encoding="utf-8")
    assert main(["eval", "probe", "--data-dir", str(tmp_path), "--weight-decays", "0", "--out",
                 str(tmp_path / "probe.json"), "--threads", "1"]) == 0
    result = json.loads((tmp_path / "probe.json").read_text())
    assert result["tokens"] == {"train": 9, "dev": 9, "test": 9}
    assert len(result["layers"]) == result["num_layers"]
    assert "paper (Table 6, PTB)" in capsys.readouterr().out
