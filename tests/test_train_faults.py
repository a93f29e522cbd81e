"""Training under bad input and faults: empty corpora, non-finite steps, damaged checkpoints,
interrupts, out-of-range numbers, a --resume of nothing. Each answer is one clear line, a handled
fault, or data kept (docs/reliability.md lists them)."""

import contextlib
import hashlib
import json
import logging
import signal

import pytest
import torch
from safetensors.torch import load_file, save_file
from train_helpers import GOLDEN_MODEL, GOLDEN_TRAINING, TINY_CORPUS, one_thread, run_tiny, tiny_vocab

from elmokit.cli.main import main
from elmokit.engine.checkpoint import (
    CheckpointError,
    latest_good_checkpoint,
    list_checkpoints,
    verify_checksums,
    write_checkpoint,
)
from elmokit.text.corpus import CorpusError
from elmokit.training import trainer
from elmokit.training.data import SentenceStream, batches
from elmokit.training.run_config import ConfigError, resolve_run_config
from elmokit.training.trainer import NonFiniteError, RunError, read_metrics


@contextlib.contextmanager
def within(seconds):
    """Fail (instead of hanging the suite) if the block runs longer than ``seconds``."""

    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def weights(folder):
    return load_file(str(folder / "model.safetensors"))


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


# ---- empty corpora ----------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "\n  \n\t\n"], ids=["empty", "blank-lines"])
def test_an_empty_corpus_stream_raises_instead_of_spinning(tmp_path, content):
    path = tmp_path / "corpus.txt"
    path.write_text(content)
    with within(20), pytest.raises(CorpusError, match="corpus.txt: no sentences"):
        next(batches(SentenceStream(str(path)), batch_size=4))


@pytest.mark.parametrize("content", ["", "\n  \n\n"], ids=["empty", "blank-lines"])
def test_train_and_vocab_on_an_empty_corpus_are_one_line_errors(tmp_path, capsys, content):
    corpus = tmp_path / "e.txt"
    corpus.write_text(content)
    assert main(["vocab", "--corpus", str(corpus), "--out", str(tmp_path / "v.txt")]) == 2
    err = capsys.readouterr().err
    assert f"corpus {corpus}: no tokens" in err and "Traceback" not in err
    assert not (tmp_path / "v.txt").exists(), "no vocabulary written"
    with within(30):
        code = main(["train", "--corpus", str(corpus), "--vocab", str(tiny_vocab(tmp_path)), "--preset", "tiny",
                     "--out", str(tmp_path / "r"), "--max-steps", "5", "--threads", "1"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"elmokit train: error: corpus {corpus}: no sentences")
    assert not (tmp_path / "r").exists(), "no run folder for a corpus that cannot train"


def test_perplexity_on_an_empty_corpus_is_a_one_line_error(tmp_path, capsys):
    model_dir = run_tiny(tmp_path / "run", max_steps=1).model_dir
    corpus = tmp_path / "blank.txt"
    corpus.write_text("\n \n")
    capsys.readouterr()
    assert main(["perplexity", "--model", str(model_dir), "--corpus", str(corpus)]) == 2
    err = capsys.readouterr().err
    assert f"elmokit perplexity: error: corpus {corpus}: no sentences to evaluate" in err and "Traceback" not in err


# ---- non-finite steps -------------------------------------------------------------------------


def test_a_diverging_run_stops_with_the_step_named_and_keeps_finite_checkpoints(tmp_path, capsys):
    run = tmp_path / "r"
    code = main(["train", "--corpus", str(TINY_CORPUS), "--vocab", str(tiny_vocab(tmp_path)), "--preset", "tiny",
                 "--out", str(run), "--max-steps", "20", "--optimizer", "sgd", "--lr", "1e30", "--batch-size", "6",
                 "--checkpoint-every", "1", "--threads", "1"])
    # SGD's step 1 moves the weights by ~1e30 (finite); step 2's forward pass overflows. (Adagrad's
    # per-coordinate normalisation bounds each step, so even lr 1e6 stays finite: it only seemed to
    # diverge while the highway's sigmoid gave NaN gradients.)
    err = capsys.readouterr().err
    assert code == 2
    assert "error: step 2: non-finite" in err and "--skip-nonfinite-steps" in err
    assert not (run / "model").exists(), "no NaN model exported"
    found = list_checkpoints(run / "checkpoints")
    assert [step for step, _ in found] == [1]
    assert all(torch.isfinite(t).all() for t in weights(found[0][1]).values())


def test_a_huge_but_finite_loss_still_exports_the_model_and_its_card(tmp_path):
    """exp(loss) overflows a float beyond loss 709: the card's perplexity is capped, not a crash."""
    result = run_tiny(tmp_path / "r", lr=1e6, loss_scale=1e6, max_steps=6, log_every=1, checkpoint_every=6)
    assert result.loss > 709
    card = (result.model_dir / "README.md").read_text()
    assert f"last logged training loss {result.loss:.4f} (perplexity " in card


def nan_at_call(original, at):
    """A LanguageModel.forward whose ``at``-th call gives a NaN forward loss."""
    calls = []

    def forward(module, *args, **kwargs):
        calls.append(1)
        out = original(module, *args, **kwargs)
        if len(calls) == at:
            out.forward_nll = out.forward_nll * float("nan")
        return out

    return forward


def test_skipped_non_finite_steps_are_counted_and_one_too_many_stops(tmp_path, monkeypatch):
    from elmokit.lm import LanguageModel

    original = LanguageModel.forward
    monkeypatch.setattr(LanguageModel, "forward", nan_at_call(original, at=3))
    result = run_tiny(tmp_path / "skip", max_steps=5, log_every=1, skip_nonfinite_steps=1)
    metrics = read_metrics(tmp_path / "skip")
    assert [e["step"] for e in metrics] == [1, 2, 3, 4, 5]
    skipped = {"step": 3, "skipped": "non-finite loss and gradient", "skipped_nonfinite": 1, "tokens": metrics[2]["tokens"]}
    assert metrics[2] == skipped
    assert [e["skipped_nonfinite"] for e in metrics] == [0, 0, 1, 1, 1]
    assert all(torch.isfinite(t).all() for t in weights(list_checkpoints(tmp_path / "skip" / "checkpoints")[-1][1]).values())
    assert result.step == 5

    monkeypatch.setattr(LanguageModel, "forward", nan_at_call(original, at=3))
    with pytest.raises(NonFiniteError, match=r"step 3: non-finite loss and gradient .* training stopped before applying it"):
        run_tiny(tmp_path / "stop", max_steps=5, log_every=1)


# ---- checkpoints: checksums, damaged and NaN checkpoints, rotation ------------------------------


CHANGES = dict(max_steps=4, checkpoint_every=2, softmax="sampled", n_negative_samples=10)


def test_checkpoints_carry_sha256sums(tmp_path):
    run_tiny(tmp_path / "r", max_steps=2, checkpoint_every=2)
    folder = tmp_path / "r" / "checkpoints" / "step_00000002"
    lines = (folder / "SHA256SUMS").read_text().splitlines()
    listed = {name: digest for digest, name in (line.split("  ") for line in lines)}
    assert set(listed) == {"model.safetensors", "optimizer.safetensors", "state.json"}
    for name, digest in listed.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
    assert verify_checksums(folder) is None


def flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40  # inside the last tensor's data: still a loadable file, other numbers
    path.write_bytes(bytes(data))


def nan_weights_with_fresh_sums(folder):
    """A checkpoint that a NaN step produced before the finite checks: valid sums, NaN weights."""
    tensors = weights(folder)
    tensors["softmax_bias"] = torch.full_like(tensors["softmax_bias"], float("nan"))
    save_file(tensors, str(folder / "model.safetensors"))
    names = ("model.safetensors", "optimizer.safetensors", "state.json")
    (folder / "SHA256SUMS").write_text("".join(f"{hashlib.sha256((folder / n).read_bytes()).hexdigest()}  {n}\n" for n in names))


@pytest.mark.parametrize("damage, reason", [(lambda f: flip_a_byte(f / "model.safetensors"), "sha256"),
                                            (nan_weights_with_fresh_sums, "non-finite")],
                         ids=["flipped-byte", "nan-weights"])
def test_a_bad_latest_checkpoint_is_skipped_and_the_previous_good_one_resumes_exactly(tmp_path, caplog, damage, reason):
    run_tiny(tmp_path / "straight", **{**CHANGES, "max_steps": 6})
    run = tmp_path / "r"
    run_tiny(run, **CHANGES)
    damage(run / "checkpoints" / "step_00000004")
    with caplog.at_level(logging.WARNING):
        result = run_tiny(run, resume=True, **{**CHANGES, "max_steps": 6})
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "step_00000004: skipped, not resumable" in message and reason in message
    assert result.step == 6
    assert (run / "checkpoints" / "step_00000004.damaged").is_dir(), "the bad one is set aside, not deleted"
    assert_same_weights(weights(run / "checkpoints" / "step_00000006"),
                        weights(tmp_path / "straight" / "checkpoints" / "step_00000006"))
    assert [e["step"] for e in read_metrics(run)] == [e["step"] for e in read_metrics(tmp_path / "straight")]


def test_no_good_checkpoint_at_all_is_a_clear_error(tmp_path):
    run = tmp_path / "r"
    run_tiny(run, max_steps=2, checkpoint_every=2)
    flip_a_byte(run / "checkpoints" / "step_00000002" / "optimizer.safetensors")
    with pytest.raises(CheckpointError, match=r"no usable checkpoint \(step_00000002: optimizer.safetensors: sha256"):
        run_tiny(run, resume=True, max_steps=4)
    assert (run / "checkpoints" / "step_00000002.damaged").is_dir()


def test_rotation_never_deletes_the_checkpoint_just_written_for_unverified_newer_ones(tmp_path):
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adagrad(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    names = [n for n, _ in model.named_parameters()]
    root = tmp_path / "checkpoints"

    def write(step, keep):
        return write_checkpoint(root, step, model_state=model.state_dict(), optimizer=optimizer, param_names=names,
                                state={"step": step}, keep=keep)

    write(2, keep=1)
    newer = root / "step_00000005"  # e.g. copied in, or left by another process: never verified
    newer.mkdir()
    (newer / "state.json").write_text("{}")
    written = write(3, keep=1)
    assert [step for step, _ in list_checkpoints(root)] == [3, 5], "step 3 (good) kept; only the older step 2 rotated away"
    assert written.is_dir()
    assert latest_good_checkpoint(root, set_aside_bad=False) == written, "the unverified newer one is not resumed from"


def test_a_checkpoint_with_non_finite_weights_is_never_written(tmp_path):
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight[0, 0] = float("inf")
    optimizer = torch.optim.Adagrad(model.parameters())
    with pytest.raises(CheckpointError, match="refusing to write the checkpoint of step 7: non-finite weights in weight"):
        write_checkpoint(tmp_path / "c", 7, model_state=model.state_dict(), optimizer=optimizer,
                         param_names=["weight", "bias"], state={"step": 7}, keep=2)
    assert list_checkpoints(tmp_path / "c") == []


# ---- resume of nothing, interrupts ------------------------------------------------------------


def test_resume_of_a_missing_folder_says_it_does_not_exist(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "typo"), "--resume", "--max-steps", "3"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'typo'}: no such run folder" in err and "--preset" not in err
    assert not (tmp_path / "typo").exists()


def test_ctrl_c_names_the_kept_checkpoint_and_how_to_resume(tmp_path, capsys, monkeypatch):
    original = trainer._step

    def interrupt_at_5(*args, **kwargs):
        if args[7] == 5:  # the step number
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(trainer, "_step", interrupt_at_5)
    run = tmp_path / "r"
    code = main(["train", "--corpus", str(TINY_CORPUS), "--vocab", str(tiny_vocab(tmp_path)), "--preset", "tiny",
                 "--out", str(run), "--max-steps", "10", "--checkpoint-every", "2", "--batch-size", "6", "--threads", "1"])
    err = capsys.readouterr().err
    assert code == 130
    assert "nothing was written" not in err
    assert f"keeps checkpoint {run / 'checkpoints' / 'step_00000004'} (step 4)" in err
    assert f"elmokit train --out {run} --resume" in err
    monkeypatch.setattr(trainer, "_step", original)
    assert main(["train", "--out", str(run), "--resume", "--threads", "1"]) == 0
    assert json.loads((run / "checkpoints" / "step_00000010" / "state.json").read_text())["step"] == 10


# ---- flags ------------------------------------------------------------------------------------


TRAIN = ["train", "--corpus", "c.txt", "--vocab", "v.txt", "--out", "r", "--preset", "tiny"]


@pytest.mark.parametrize("argv, flag", [
    (TRAIN + ["--lr", "0"], "--lr"),
    (TRAIN + ["--lr", "nan"], "--lr"),
    (TRAIN + ["--loss-scale", "inf"], "--loss-scale"),
    (TRAIN + ["--clip-norm", "-1"], "--clip-norm"),
    (TRAIN + ["--initial-accumulator", "0"], "--initial-accumulator"),
    (TRAIN + ["--batch-size", "0"], "--batch-size"),
    (TRAIN + ["--batch-tokens", "-5"], "--batch-tokens"),
    (TRAIN + ["--max-steps", "0"], "--max-steps"),
    (TRAIN + ["--epochs", "1.5"], "--epochs"),
    (TRAIN + ["--seed", "-1"], "--seed"),
    (TRAIN + ["--negatives", "0"], "--negatives"),
    (TRAIN + ["--keep-checkpoints", "0"], "--keep-checkpoints"),
    (TRAIN + ["--checkpoint-every", "0"], "--checkpoint-every"),
    (TRAIN + ["--skip-nonfinite-steps", "-1"], "--skip-nonfinite-steps"),
    (TRAIN + ["--threads", "0"], "--threads"),
    (["vocab", "--corpus", "c.txt", "--out", "v.txt", "--min-count", "0"], "--min-count"),
    (["vocab", "--corpus", "c.txt", "--out", "v.txt", "--max-size", "-3"], "--max-size"),
    (["perplexity", "--model", "m", "--corpus", "c.txt", "--batch-size", "0"], "--batch-size"),
    (["perplexity", "--model", "m", "--corpus", "c.txt", "--max-length", "0"], "--max-length"),
    (["perplexity", "--model", "m", "--corpus", "c.txt", "--limit-lines", "-1"], "--limit-lines"),
    (["perplexity", "--model", "m", "--corpus", "c.txt", "--threads", "0"], "--threads"),
    (["warm-state", "--model", "m", "--threads", "-2"], "--threads"),
])
def test_numeric_flags_are_checked_at_parse_time(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_train_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("learning rate (Adagrad's default is bilm-tf's) (default: 0.2)", "(default: adagrad)",
                 "sentences per global batch (default: 64)",
                 "keep the newest N checkpoints (default: 2)", "(default: 8192)", "(default: 0)"):
        assert text in out


# ---- the library's run configuration ------------------------------------------------------------


def test_resolve_run_config_is_the_cli_resolution_for_python_users(tmp_path):
    vocab = tiny_vocab(tmp_path)
    run = tmp_path / "r"
    config = resolve_run_config(run, preset="tiny", sets={"dropout": 0.1, "batch_size": 6}, corpus=str(TINY_CORPUS),
                                vocab=vocab, training={"max_steps": 2, "shuffle_buffer": 16, "softmax": "full"},
                                tokenizer={"lowercase": True})
    assert config.model_config == GOLDEN_MODEL
    assert config.training == GOLDEN_TRAINING.replace(max_steps=2, log_every=10, checkpoint_every=1000,
                                                      tokenizer={"kind": "whitespace", "lowercase": True})
    with one_thread():
        trainer.train(run, **config.train_arguments(), command="test", progress=False)
    resumed = resolve_run_config(run, resume=True, training={"max_steps": 4})
    assert resumed.model_config == config.model_config and resumed.training == config.training.replace(max_steps=4)
    assert resumed.corpus == [str(TINY_CORPUS)] and resumed.vocab == str(run / "vocab.txt")
    with pytest.raises(ConfigError, match="'huge': not one of"):
        resolve_run_config(tmp_path / "n", preset="huge", corpus="x", vocab="v")
    with pytest.raises(RunError, match="no such run folder"):
        resolve_run_config(tmp_path / "missing", resume=True)
