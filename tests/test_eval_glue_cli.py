"""`elmokit eval glue` end to end on tiny hand-written task files and a tiny vector table; its errors;
and (slow) a real run on a few dozen GLUE examples with the shipped model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from elmokit.cli.main import main

WORDS = ["a", "the", "dog", "cat", "runs", "sleeps", "man", "woman", "is", "not", "."]


def _data(root):
    """glue/rte and glue/cola with 30 training rows each (the label is whether a 'not' is in the second sentence /
    whether the sentence ends with a full stop)."""
    rng = np.random.default_rng(0)
    rte = root / "glue" / "rte"
    rte.mkdir(parents=True)
    cola = root / "glue" / "cola"
    cola.mkdir(parents=True)
    for split, n in (("train", 30), ("dev", 12)):
        rows, cola_rows = ["index\tsentence1\tsentence2\tlabel"], []
        for i in range(n):
            first = " ".join(rng.choice(WORDS[:8], 3))
            negated = i % 2 == 0
            rows.append(f"{i}\t{first}.\tA man is {'not ' if negated else ''}here.\t"
                        f"{'not_entailment' if negated else 'entailment'}")
            cola_rows.append(f"src\t{i % 2}\t\tThe {rng.choice(WORDS[2:4])} runs{'.' if i % 2 else ''}")
        (rte / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        (cola / f"{split}.tsv").write_text("\n".join(cola_rows) + "\n", encoding="utf-8")
    vectors = root / "vectors.txt"
    table = np.random.default_rng(1).normal(size=(len(WORDS) + 4, 7))
    names = WORDS + ["A", "The", "here", "Man"]
    vectors.write_text(f"{len(names)} 7\n" + "".join(f"{w} {' '.join(f'{x:.4f}' for x in row)}\n"
                                                      for w, row in zip(names, table)), encoding="utf-8")
    return vectors


def test_eval_glue_prints_the_table_and_writes_one_json_per_run(tmp_path, capsys):
    vectors = _data(tmp_path)
    out = tmp_path / "out"
    code = main(["eval", "glue", "--vectors", str(vectors), "--tasks", "rte,cola", "--seeds", "0,1", "--epochs", "2",
                 "--hidden-dim", "5", "--mlp-dim", "6", "--data-dir", str(tmp_path), "--out", str(out), "--threads", "1"])
    assert code == 0
    printed = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(printed) if line.startswith("representation"))
    assert printed[header].split() == ["representation", "rte", "cola", "avg"]
    row = printed[header + 1].split()
    assert row[0] == "vectors"  # the table's own name (the file's stem)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["tasks"] == ["rte", "cola"] and results["seeds"] == [0, 1]
    runs = sorted(p.relative_to(out).as_posix() for p in (out / "runs").rglob("*.json"))
    assert len(runs) == 4 and all(p.split("/")[-1] in {"rte.seed0.json", "rte.seed1.json", "cola.seed0.json",
                                                       "cola.seed1.json"} for p in runs)
    run = json.loads((out / runs[0]).read_text(encoding="utf-8"))
    assert run["sizes"] == {"train": 27, "dev": 3, "test": 12}  # 10% of the 30 training rows held out
    assert set(run["test"]) >= {"score"} and run["command"][:3] == ["elmokit", "eval", "glue"]
    assert 1 <= run["best_epoch"] <= 2 and len(run["history"]) == run["epochs_run"]
    # the row's cells are the seed means of the runs' test scores
    rte = [json.loads((out / p).read_text())["test"]["accuracy"] for p in runs if p.endswith(("rte.seed0.json",
                                                                                              "rte.seed1.json"))]
    summary = results["rows"][0]["tasks"]["rte"]
    assert summary["mean"]["accuracy"] == pytest.approx(np.mean(rte)) and summary["seeds"] == 2
    assert row[1].startswith(f"{np.mean(rte):.1f}±")


def test_eval_glue_esim_applies_to_the_pair_tasks(tmp_path, capsys):
    vectors = _data(tmp_path)
    out = tmp_path / "out"
    assert main(["eval", "glue", "--vectors", str(vectors), "--tasks", "rte,cola", "--architecture", "esim", "--epochs", "1",
                 "--hidden-dim", "3", "--data-dir", str(tmp_path), "--out", str(out), "--threads", "1"]) == 0
    assert "feature recipe, esim" in capsys.readouterr().out
    model = {task: json.loads((out / "runs" / "vectors" / f"{task}.seed0.json").read_text())["model"] for task in ("rte", "cola")}
    assert model["rte"]["architecture"] == "esim" and model["cola"]["architecture"] == "infersent"


def test_rows_with_the_same_name_are_kept_apart(tmp_path, capsys):
    vectors = _data(tmp_path)
    other = tmp_path / "elsewhere" / "vectors.txt"  # another table with the same file name
    other.parent.mkdir()
    other.write_text(vectors.read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["eval", "glue", "--vectors", str(vectors), "--vectors", str(other), "--tasks", "cola", "--epochs", "1",
                 "--hidden-dim", "3", "--data-dir", str(tmp_path), "--out", str(out), "--threads", "1"]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[-2:]]
    assert rows == ["vectors", "vectors#2"]
    assert sorted(p.parent.name for p in (out / "runs").rglob("*.json")) == ["vectors", "vectors_2"]


def test_eval_glue_reports_a_bad_row_as_file_and_line(tmp_path, capsys):
    vectors = _data(tmp_path)
    path = tmp_path / "glue" / "rte" / "train.tsv"
    path.write_text(path.read_text(encoding="utf-8") + "99\tA b.\tC d.\tmaybe\n", encoding="utf-8")
    code = main(["eval", "glue", "--vectors", str(vectors), "--tasks", "rte", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{path}:32: label 'maybe' is not one of entailment, not_entailment" in err
    assert main(["eval", "glue", "--vectors", str(vectors), "--tasks", "rte,qqp", "--data-dir", str(tmp_path)]) == 2
    assert "unknown qqp" in capsys.readouterr().err
    assert main(["eval", "glue", "--vectors", str(vectors), "--recipe", "finetune", "--data-dir", str(tmp_path)]) == 2
    assert "transformer folders" in capsys.readouterr().err
    assert main(["eval", "glue", "--vectors", str(vectors), "--seeds", "1,1", "--data-dir", str(tmp_path)]) == 2
    assert "a seed is repeated" in capsys.readouterr().err


@pytest.mark.slow
def test_a_real_tiny_glue_run_with_the_shipped_model(tmp_path, capsys):
    from testkit import need_shared

    need_shared("data", "glue")
    code = main(["eval", "glue", "--model", "default", "--tasks", "rte,cola,stsb", "--max-train", "48", "--max-eval", "32",
                 "--epochs", "2", "--threads", "1", "--out", str(tmp_path / "out")])
    assert code == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert set(results["rows"][0]["tasks"]) == {"rte", "cola", "stsb"}


def test_eval_glue_finetune_recipe_on_a_tiny_bert_folder(tmp_path, capsys):
    pytest.importorskip("transformers")
    from elmokit.pretraining.models import build_model, preset
    from elmokit.text.subword_tokenizers import wordpiece_from_vocab

    _data(tmp_path)
    folder = tmp_path / "bert"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "A", "The", "here", "Man"]
    build_model("bert", preset("tiny", max_positions=24), vocab_size=len(vocab), seed=1).save_pretrained(str(folder))
    wordpiece_from_vocab(vocab).save_pretrained(str(folder))
    code = main(["eval", "glue", "--recipe", "finetune", "--model", str(folder), "--tasks", "rte", "--epochs", "1",
                 "--batch-size", "8", "--data-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--threads", "1"])
    assert code == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].split()[0] == "finetune:bert"
    run = json.loads((tmp_path / "out" / "runs" / "finetune_bert" / "rte.seed0.json").read_text(encoding="utf-8"))
    assert run["input"] == "bert" and run["input_kind"] == "entailment" and run["recipe"] == "finetune"
    assert run["epochs_run"] == 1 and 0 <= run["test"]["accuracy"] <= 100
    assert main(["eval", "glue", "--recipe", "finetune", "--aux-lm", "--model", str(folder), "--tasks", "rte",
                 "--data-dir", str(tmp_path)]) == 2  # GPT's auxiliary LM loss on an encoder: refused in one line
    assert "needs a left-to-right model; bert is an encoder" in capsys.readouterr().err
    _squad_file(tmp_path / "squad")  # the same folder through BERT's span head
    assert main(["eval", "squad", "--recipe", "finetune", "--model", str(folder), "--epochs", "1",
                 "--data-dir", str(tmp_path / "squad"), "--threads", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[0] == "finetune:bert"


def _squad_file(folder, n_articles=8):
    animals, foods = ["dog", "cat", "cow", "owl"], ["bones", "fish", "grass", "mice"]
    articles = []
    for a in range(n_articles):
        context = " ".join(f"the {animals[k]} eats {foods[(k + a) % 4]} ." for k in range(4))
        qas = [{"id": f"{a}-{k}", "question": f"what does the {animals[k]} eat ?",
                "answers": [{"text": foods[(k + a) % 4], "answer_start": context.index(foods[(k + a) % 4])}]}
               for k in range(4)]
        articles.append({"title": f"a{a}", "paragraphs": [{"context": context, "qas": qas}]})
    folder.mkdir()
    (folder / "dev-v1.1.json").write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")


def test_eval_squad_prints_em_and_f1_and_writes_the_runs(tmp_path, capsys):
    _data(tmp_path)
    vectors = tmp_path / "vectors.txt"
    _squad_file(tmp_path / "squad")
    code = main(["eval", "squad", "--vectors", str(vectors), "--data-dir", str(tmp_path / "squad"), "--epochs", "2",
                 "--hidden-dim", "4", "--out", str(tmp_path / "out"), "--threads", "1"])
    assert code == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2].split() == ["representation", "EM", "F1"] and printed[-1].split()[0] == "vectors"
    run = json.loads((tmp_path / "out" / "runs" / "vectors" / "squad.seed0.json").read_text(encoding="utf-8"))
    # 8 articles: the 4th and 8th are test; of the other 6, the 6th is dev
    assert run["sizes"] == {"train": 20, "dev": 4, "test": 8}
    assert set(run["test"]) == {"exact_match", "f1"} and float(printed[-1].split()[2]) == pytest.approx(run["test"]["f1"],
                                                                                                          abs=0.05)
    (tmp_path / "squad" / "dev-v1.1.json").write_text("{not json", encoding="utf-8")
    assert main(["eval", "squad", "--vectors", str(vectors), "--data-dir", str(tmp_path / "squad")]) == 2
    assert "not a SQuAD JSON file" in capsys.readouterr().err


@pytest.mark.slow
def test_a_real_tiny_squad_run_with_the_shipped_model(tmp_path, capsys):
    from testkit import need_shared

    need_shared("data", "squad_v1.1")
    code = main(["eval", "squad", "--model", "default", "--max-train", "64", "--max-eval", "32", "--epochs", "2",
                 "--threads", "1", "--out", str(tmp_path / "out")])
    assert code == 0
    run = json.loads((tmp_path / "out" / "runs" / "elmo_default" / "squad.seed0.json").read_text(encoding="utf-8"))
    assert run["sizes"] == {"train": 64, "dev": 32, "test": 32} and 0 <= run["test"]["f1"] <= 100


def test_the_command_lines_task_table_is_the_evaluations():
    """``eval glue --help`` lists the tasks from a torch-free table; it must name exactly the evaluation's tasks."""
    from elmokit.evaluation.datasets import GLUE_TASKS
    from elmokit.evaluation.glue import DEFAULT_TASKS, TASKS

    assert GLUE_TASKS == tuple(TASKS) == DEFAULT_TASKS
