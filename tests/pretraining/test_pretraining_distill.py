"""Distillation: the student starts from teacher layers 0, 2, ...; DistilBERT's and TinyBERT's losses
against hand-written formulas on a toy; a few steps lower the loss; the run on the engine's step loop: the
student folder, exact resume, one-line errors for a GPT teacher, an empty or non-UTF-8 corpus, a foreign --out."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from pretraining_testkit import HAND_VOCAB, need_transformers

need_transformers()

import torch  # noqa: E402

from elmokit.pretraining import distill as D  # noqa: E402
from elmokit.pretraining.masking import MaskingVocab  # noqa: E402
from elmokit.pretraining.models import build_model, preset  # noqa: E402
from elmokit.text.subword_tokenizers import wordpiece_from_vocab  # noqa: E402


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    tokenizer = wordpiece_from_vocab(HAND_VOCAB)
    teacher = build_model("bert-mlm", preset("tiny", dropout=0.0, layers=4, hidden=20, heads=2, intermediate=36),
                          vocab_size=len(tokenizer), seed=0, pad_id=0).eval()
    rng = np.random.default_rng(0)
    examples = [{"input_ids": np.array([2, *rng.integers(5, 20, size=int(rng.integers(4, 11))), 3])} for _ in range(6)]
    return tokenizer, teacher, examples


def test_student_starts_from_every_other_teacher_layer(setup):
    _, teacher, _ = setup
    student = D.student_from_teacher(teacher).eval()
    assert D.student_layers(4) == [0, 2] and student.config.n_layers == 2
    for j, t in enumerate([0, 2]):
        s_layer, t_layer = student.distilbert.transformer.layer[j], teacher.bert.encoder.layer[t]
        assert torch.equal(s_layer.attention.q_lin.weight, t_layer.attention.self.query.weight)
        assert torch.equal(s_layer.ffn.lin2.bias, t_layer.output.dense.bias)
        assert torch.equal(s_layer.output_layer_norm.weight, t_layer.output.LayerNorm.weight)
    # functionally: the student is the teacher with layers 1 and 3 removed (segment 0 folded into positions)
    pruned = copy.deepcopy(teacher)
    layers = pruned.bert.encoder.layer  # the copy's own modules: sharing the teacher's confuses transformers' hooks
    pruned.bert.encoder.layer = torch.nn.ModuleList([layers[0], layers[2]])
    ids = torch.tensor([[2, 5, 6, 7, 11, 12, 3]])
    with torch.no_grad():
        expected = pruned(ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
        got = student(ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
    for a, b in zip(got.hidden_states, expected.hidden_states):
        assert torch.allclose(a, b, atol=1e-5)
    assert torch.allclose(got.logits, expected.logits, atol=1e-4)


def test_losses_match_hand_written_formulas(setup):
    tokenizer, teacher, examples = setup
    config = D.DistillationConfig(alpha_hidden=1.0, alpha_attention=1.0)
    objective = D.DistillationObjective(teacher, MaskingVocab.from_tokenizer(tokenizer), pad_id=0, config=config,
                                        student_hidden=20)
    student = D.student_from_teacher(teacher, seed=1)
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():  # move the student away from the teacher
        for p in student.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=noise))
    batch = next(objective.batches(examples, batch_size=3, rng=np.random.default_rng(0)))
    assert (batch["attention_mask"] == 0).any()  # padding is present and must be left out
    terms = objective.losses(student, batch)
    with torch.no_grad():
        t = teacher(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True,
                    output_attentions=True)
        s = student(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True,
                    output_attentions=True)
    T = 2.0
    mask = batch["attention_mask"].numpy().astype(bool)
    labels = batch["labels"].numpy()
    zs, zt = s.logits.numpy().astype(np.float64), t.logits.numpy().astype(np.float64)

    def softmax(z):
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    ce = [-(softmax(zt[b, i] / T) * np.log(softmax(zs[b, i] / T))).sum() for b, i in zip(*np.nonzero(mask))]
    mlm = [-np.log(softmax(zs[b, i])[labels[b, i]]) for b, i in zip(*np.nonzero(labels != -100))]
    hs, ht = s.hidden_states[-1].numpy().astype(np.float64), t.hidden_states[-1].numpy().astype(np.float64)
    cos = [1 - hs[b, i] @ ht[b, i] / np.linalg.norm(hs[b, i]) / np.linalg.norm(ht[b, i]) for b, i in zip(*np.nonzero(mask))]
    hidden = sum(np.mean([(s.hidden_states[m][b, i].numpy() - t.hidden_states[2 * m][b, i].numpy()) ** 2
                          for b, i in zip(*np.nonzero(mask))]) for m in range(3))
    attention = 0.0
    for m in (1, 2):
        a_s, a_t = s.attentions[m - 1].numpy(), t.attentions[2 * m - 1].numpy()
        diffs = [(a_s[b, h, i, j] - a_t[b, h, i, j]) ** 2 for b in range(3) for h in range(2)
                 for i in np.flatnonzero(mask[b]) for j in np.flatnonzero(mask[b])]
        attention += np.mean(diffs)
    expected = {"ce": T * T * np.mean(ce), "mlm": np.mean(mlm), "cos": np.mean(cos), "hidden": hidden,
                "attention": attention}
    for name, value in expected.items():
        assert float(terms[name].detach()) == pytest.approx(value, rel=1e-4, abs=1e-7), name
    total = objective.loss(student, batch)
    weighted = 5 * expected["ce"] + 2 * expected["mlm"] + expected["cos"] + hidden + attention
    assert float(total.loss.detach()) == pytest.approx(weighted, rel=1e-4)


def test_projection_when_widths_differ_and_a_few_steps_lower_the_loss(setup, tmp_path):
    tokenizer, teacher, examples = setup
    objective = D.DistillationObjective(teacher, MaskingVocab.from_tokenizer(tokenizer), pad_id=0,
                                        config=D.DistillationConfig(alpha_hidden=1.0), student_hidden=12)
    assert objective.modules()["projection"].weight.shape == (20, 12)
    assert D.layer_map(2, 4) == [0, 2, 4]
    objective = D.DistillationObjective(teacher, MaskingVocab.from_tokenizer(tokenizer), pad_id=0)
    student = D.student_from_teacher(teacher, seed=0)
    noise = torch.Generator().manual_seed(0)  # the test's own stream: the global one depends on test order
    with torch.no_grad():
        for p in student.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=noise))
    batch = next(objective.batches(examples, batch_size=6, rng=np.random.default_rng(0)))
    optimizer = torch.optim.Adam(student.parameters(), lr=3e-3)
    losses, parts = [], []
    for _ in range(12):
        optimizer.zero_grad()
        out = objective.loss(student, batch)
        out.loss.backward()
        optimizer.step()
        losses.append(float(out.loss.detach()))
        parts.append(out.parts)
    # the soft cross-entropy has a floor (T^2 x the teacher's entropy), so the total moves little in relative terms
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert parts[-1]["mlm"] < 0.8 * parts[0]["mlm"] and parts[-1]["cos"] < 0.8 * parts[0]["cos"], parts
    # the minimal loop end to end: teacher folder in, student folder out
    teacher.save_pretrained(tmp_path / "teacher")
    tokenizer.save_pretrained(tmp_path / "teacher")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat .\na doggy !\n\nthe cats sat unbelievable x\n", encoding="utf-8")
    result = D.distill(tmp_path / "teacher", tmp_path / "run", [corpus], config=D.DistillRunConfig(max_steps=3, batch_size=2),
                       progress=False)
    assert result.step == 3 and (tmp_path / "run" / "model" / "config.json").is_file()
    from transformers import AutoModelForMaskedLM

    assert type(AutoModelForMaskedLM.from_pretrained(tmp_path / "run" / "model")).__name__ == "DistilBertForMaskedLM"


# ---- the run (the engine's step loop and run folder) ----------------------------------------------


@pytest.fixture(scope="module")
def teacher_dir(setup, tmp_path_factory):
    tokenizer, teacher, _ = setup
    folder = tmp_path_factory.mktemp("teacher")
    teacher.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    corpus = folder.parent / "distill_corpus.txt"
    corpus.write_text("the cat sat on the mat .\na doggy !\n\nthe cats sat unbelievable x\nthe mat x\ncat on a dog\n",
                      encoding="utf-8")
    return folder, corpus


def _distill(teacher, corpus, out, *extra):
    from elmokit.cli.main import main

    return main(["distill", "--teacher", str(teacher), "--corpus", str(corpus), "--out", str(out), "--batch-size", "2",
                 "--threads", "1", "--log-every", "1", *extra])


def test_distill_resume_is_exact_and_logs_metrics_like_pretrain(teacher_dir, tmp_path):
    from safetensors.torch import load_file

    from elmokit.engine.run_folder import read_metrics

    teacher, corpus = teacher_dir
    assert _distill(teacher, corpus, tmp_path / "straight", "--max-steps", "6", "--checkpoint-every", "3") == 0
    assert _distill(teacher, corpus, tmp_path / "resumed", "--max-steps", "3") == 0
    assert _distill(teacher, corpus, tmp_path / "resumed", "--max-steps", "6", "--resume") == 0
    a = load_file(str(tmp_path / "straight" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # 6 steps cross an epoch (5 segments)
    timing = ("tokens_per_s", "elapsed_s")
    straight, resumed = ([{k: v for k, v in e.items() if k not in timing} for e in read_metrics(tmp_path / run)]
                         for run in ("straight", "resumed"))
    assert straight == resumed and [e["step"] for e in straight] == [1, 2, 3, 4, 5, 6]
    assert {"loss", "ce", "mlm", "cos", "grad_norm", "tokens", "skipped_nonfinite"} <= set(straight[0])
    assert sorted(p.name for p in (tmp_path / "straight" / "checkpoints").iterdir()) == ["step_00000003", "step_00000006"]


def test_distill_keeps_a_users_file_in_out_and_refuses_in_one_line(teacher_dir, tmp_path, capsys):
    teacher, corpus = teacher_dir
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert _distill(teacher, corpus, out, "--max-steps", "1") == 2
    err = capsys.readouterr().err
    [error] = [line for line in err.splitlines() if line.startswith("elmokit distill:")]
    assert str(out) in error and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("case", ["gpt teacher", "empty corpus", "bad utf-8"])
def test_distill_bad_inputs_are_one_line_naming_the_file(teacher_dir, tmp_path, capsys, case):
    teacher, corpus = teacher_dir
    if case == "gpt teacher":
        gpt = build_model("gpt2", preset("tiny"), vocab_size=30, seed=0)
        gpt.save_pretrained(tmp_path / "gpt")
        teacher, expected = tmp_path / "gpt", f"--teacher {tmp_path / 'gpt'}: a 'gpt2' model"
    elif case == "empty corpus":
        corpus = tmp_path / "empty.txt"
        corpus.write_text("\n  \n", encoding="utf-8")
        expected = f"corpus {corpus}: no non-empty line"
    else:
        corpus = tmp_path / "bad.txt"
        corpus.write_bytes(b"the cat\nthe \xff mat\n")
        expected = f"{corpus}:2: not UTF-8"
    assert _distill(teacher, corpus, tmp_path / "run", "--max-steps", "1") == 2
    err = capsys.readouterr().err
    [error] = [line for line in err.splitlines() if line.startswith("elmokit distill:")]
    assert expected in error and "Traceback" not in err


def test_distill_non_finite_step_is_skipped_and_counted_when_asked_else_stops_naming_it(teacher_dir, tmp_path, monkeypatch):
    from elmokit.engine.run_folder import read_metrics
    from elmokit.engine.steps import NonFiniteError

    teacher, corpus = teacher_dir
    original, calls = D.DistillationObjective.loss, []

    def nan_at_second(self, student, batch):
        out = original(self, student, batch)
        calls.append(1)
        return D.ObjectiveLoss(out.loss * float("nan"), out.parts, out.n_targets, out.n_tokens) if len(calls) == 2 else out

    monkeypatch.setattr(D.DistillationObjective, "loss", nan_at_second)
    config = D.DistillRunConfig(max_steps=3, batch_size=2, log_every=1)
    with pytest.raises(NonFiniteError, match="step 2: non-finite loss"):
        D.distill(teacher, tmp_path / "stop", [corpus], config=config, progress=False)
    calls.clear()
    result = D.distill(teacher, tmp_path / "skip", [corpus], config=D.DistillRunConfig(max_steps=3, batch_size=2, log_every=1,
                                                                                      skip_nonfinite_steps=1), progress=False)
    [skipped] = [e for e in read_metrics(tmp_path / "skip") if "skipped" in e]
    assert result.step == 3 and skipped["step"] == 2 and skipped["skipped_nonfinite"] == 1


def test_a_teacher_holding_one_nan_is_refused_naming_file_and_tensor(teacher_dir, tmp_path, capsys):
    import shutil

    from safetensors.torch import load_file, save_file

    teacher, corpus = teacher_dir
    shutil.copytree(teacher, tmp_path / "teacher")
    weights = tmp_path / "teacher" / "model.safetensors"
    tensors = load_file(str(weights))
    name = sorted(tensors)[0]
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, str(weights), metadata={"format": "pt"})
    capsys.readouterr()
    assert _distill(tmp_path / "teacher", corpus, tmp_path / "run", "--max-steps", "1") == 2
    line = capsys.readouterr().err.splitlines()[-1]  # after transformers' own loading bar
    assert line.startswith(f"elmokit distill: error: {weights}: tensor '") and " holds 1 non-finite value" in line
    assert not (tmp_path / "run" / "model").exists()
