"""`elmokit pretrain` on the shared loop: tiny runs learn, the export is a standard HF folder that loads as a
Representation and matches the library's own hidden states, resume is exact (weights, metrics, masks),
a damaged checkpoint is set aside, two processes train like one; the corpus readers and the schedule."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pretraining_testkit import need_transformers, pretrain_ddp_worker, write_document_corpus
from testkit import run_two_ranks
from train_helpers import one_thread

need_transformers()

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from elmokit.cli.main import main  # noqa: E402
from elmokit.engine.run_folder import read_metrics  # noqa: E402
from elmokit.pretraining.corpus import Document, SpecialIds, causal, pairs, segments, split_sentences  # noqa: E402
from elmokit.pretraining.run import PretrainConfig, learning_rate, pretrain  # noqa: E402
from elmokit.text.corpus import CorpusError  # noqa: E402

TIMING = ("tokens_per_s", "elapsed_s", "cpu_s")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    write_document_corpus(path)
    return path


def _config(objective: str, **changes) -> PretrainConfig:
    base = dict(objective=objective, preset="tiny", max_steps=6, batch_size=4, vocab_size=300, max_tokens=32, log_every=1,
                checkpoint_every=3, lr=2e-3)
    return PretrainConfig(**{**base, **changes})


def _run(run_dir, corpus, config, resume=False):
    with one_thread():
        return pretrain(run_dir, corpus=str(corpus), config=config, resume=resume, command="test", progress=False)


def _untimed(metrics):
    return [{k: v for k, v in e.items() if k not in TIMING} for e in metrics]


@pytest.mark.parametrize("objective", ["bert", "gpt"])
def test_cli_tiny_run_learns_and_its_export_matches_the_libraries_hidden_states(tmp_path, corpus, objective, capsys):
    from transformers import AutoModel, AutoTokenizer

    from elmokit.representation import load_representation, spec_from_flags

    out = tmp_path / "run"
    with one_thread():
        code = main(["pretrain", "--objective", objective, "--corpus", str(corpus), "--out", str(out), "--preset", "tiny",
                     "--max-steps", "24", "--batch-size", "6", "--vocab-size", "300", "--max-tokens", "32", "--lr", "3e-3",
                     "--dropout", "0", "--log-every", "1", "--warmup-steps", "2", "--threads", "1"])
    assert code == 0, capsys.readouterr().err
    losses = [e["loss"] for e in read_metrics(out) if "loss" in e]
    assert len(losses) == 24 and np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.3, losses
    record = json.loads((out / "training.json").read_text())
    assert record["kind"] == "pretrain" and record["flops"]["forward_backward_first_step"] > 0
    assert [e["tokens"] for e in read_metrics(out)] == sorted({e["tokens"] for e in read_metrics(out)})  # increasing
    assert "elmokit pretrain --objective" in (out / "command.txt").read_text()
    model_dir = out / "model"
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= {p.name for p in model_dir.iterdir()}

    spec = spec_from_flags(model=str(model_dir))  # --model DIR
    assert spec["kind"] == "transformer"
    rep = load_representation(spec)
    words = ["Anna", "told", "Boris", "unbelievable", "stories", "."]
    vectors = rep.embed([words])[0]  # (layers, words, dim)
    # the oracle: transformers' own model and tokenizer, pieces mean-pooled per word by hand
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    encoded = tokenizer(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        hidden = torch.stack(model(**encoded, output_hidden_states=True).hidden_states)[:, 0].numpy()  # (L+1, T, H)
    word_of = encoded.word_ids(0)
    expected = np.stack([hidden[:, [t for t, w in enumerate(word_of) if w == i]].mean(axis=1)
                         for i in range(len(words))], axis=1)
    assert vectors.shape == expected.shape == (3, len(words), 32)
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("objective, changes", [("spanbert", {"sbo": True}), ("roberta", {}), ("xlnet", {})])
def test_resume_after_half_the_steps_is_bit_identical(tmp_path, corpus, objective, changes):
    """Straight 6 steps vs 3 + --resume + 3: weights (model and the SBO head), optimizer, metrics identical;
    dropout on, so the torch RNG must be restored too, and the masks come from the saved numpy generator."""
    config = _config(objective, **changes)
    straight = _run(tmp_path / "straight", corpus, config)
    # the same tokenizer (HF's WordPiece trainer breaks ties differently from run to run; a run keeps its own)
    config = config.replace(tokenizer_dir=str(tmp_path / "straight" / "tokenizer"))
    _run(tmp_path / "split", corpus, config.replace(max_steps=3))
    state = json.loads((tmp_path / "split" / "checkpoints" / "step_00000003" / "state.json").read_text())
    assert state["masking_rng"]["bit_generator"] == "PCG64" and state["position"]["offset"] == 12
    resumed = _run(tmp_path / "split", corpus, config, resume=True)
    assert resumed.step == straight.step == 6 and resumed.tokens == straight.tokens
    assert _untimed(read_metrics(tmp_path / "split")) == _untimed(read_metrics(tmp_path / "straight"))
    for name in ("model.safetensors", "optimizer.safetensors"):
        a = load_file(str(tmp_path / "straight" / "checkpoints" / "step_00000006" / name))
        b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000006" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        if objective == "spanbert" and name == "model.safetensors":
            assert any(k.startswith("sbo_head.") for k in a)
    # the schedule really ran: the metrics carry it, warmup 1 then linear decay
    assert [e["lr"] for e in read_metrics(tmp_path / "split")] == [learning_rate(config, s) for s in range(1, 7)]


def test_a_damaged_checkpoint_is_set_aside_and_the_one_before_resumes_exactly(tmp_path, corpus, caplog):
    config = _config("bert", checkpoint_every=2, keep_checkpoints=3)
    _run(tmp_path / "straight", corpus, config)
    config = config.replace(tokenizer_dir=str(tmp_path / "straight" / "tokenizer"))
    _run(tmp_path / "run", corpus, config.replace(max_steps=4))
    damaged = tmp_path / "run" / "checkpoints" / "step_00000004" / "model.safetensors"
    data = bytearray(damaged.read_bytes())
    data[-5] ^= 0xFF
    damaged.write_bytes(bytes(data))
    resumed = _run(tmp_path / "run", corpus, config, resume=True)
    assert (tmp_path / "run" / "checkpoints" / "step_00000004.damaged").is_dir()
    assert "step_00000004: skipped, not resumable" in caplog.text and "differs from SHA256SUMS" in caplog.text
    assert resumed.step == 6
    a = load_file(str(tmp_path / "straight" / "checkpoints" / "step_00000006" / "model.safetensors"))
    b = load_file(str(tmp_path / "run" / "checkpoints" / "step_00000006" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_refuses_a_different_run_and_a_new_run_refuses_a_used_folder(tmp_path, corpus, capsys):
    _run(tmp_path / "run", corpus, _config("gpt", max_steps=2))
    code = main(["pretrain", "--out", str(tmp_path / "run"), "--resume", "--lr", "0.1"])
    assert code == 2 and "--resume asks for a different run: lr: saved 0.002, requested 0.1" in capsys.readouterr().err
    code = main(["pretrain", "--objective", "gpt", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--max-steps", "2"])
    assert code == 2 and "already holds a run; pass --resume" in capsys.readouterr().err
    code = main(["pretrain", "--objective", "bert", "--out", str(tmp_path / "new"), "--max-steps", "2"])
    assert code == 2 and "a new run needs --corpus" in capsys.readouterr().err


@pytest.mark.slow  # two fresh processes import transformers: ~20 s
def test_two_processes_train_like_one_on_the_same_global_batch(tmp_path, corpus, monkeypatch):
    """GPT on contiguous windows of exactly 32 tokens: every row has 31 targets, so the target-weighted mean
    equals one process's. Dropout off: its masks are drawn per rank."""
    config = _config("gpt", max_steps=4, batch_size=6, dropout=0.0, checkpoint_every=100)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    single = _run(tmp_path / "single", corpus, config)
    config = config.replace(tokenizer_dir=str(tmp_path / "single" / "tokenizer"))
    init_method = f"file://{tmp_path / 'rendezvous'}"
    run_two_ranks(pretrain_ddp_worker, (2, init_method, str(tmp_path / "ddp"), str(corpus), config.to_dict()))
    ddp = [e for e in read_metrics(tmp_path / "ddp") if "loss" in e]
    np.testing.assert_allclose([e["loss"] for e in ddp], [e["loss"] for e in single.history], rtol=1e-5)
    assert [e["tokens"] for e in ddp] == [e["tokens"] for e in single.history]
    a = load_file(str(tmp_path / "single" / "checkpoints" / "step_00000004" / "model.safetensors"))
    b = load_file(str(tmp_path / "ddp" / "checkpoints" / "step_00000004" / "model.safetensors"))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)


# ---- the corpus readers and the schedule ------------------------------------------------------------

SPECIAL = SpecialIds(cls=2, sep=3, bos=0, eos=2)


def _document(sentences):
    """Token ids = 100 + running index; each sentence's word ids as given."""
    ids, n = [], 100
    for words in sentences:
        ids.append(list(range(n, n + len(words))))
        n += len(words)
    return Document(ids, [list(w) for w in sentences])


def test_sentences_split_after_end_punctuation_and_closing_quotes():
    assert split_sentences("He ran. “Stop!” she said? Then quiet") == [
        ["He", "ran", "."], ["“", "Stop", "!", "”"], ["she", "said", "?"], ["Then", "quiet"]]


def test_segments_hold_whole_sentences_and_cut_a_long_one_at_word_boundaries():
    # sentence word ids: 3 tokens (words 0,0,1), 4 tokens (0,1,1,2), 9 tokens (0,0,0,1,1,2,3,3,4)
    doc = _document([[0, 0, 1], [0, 1, 1, 2], [0, 0, 0, 1, 1, 2, 3, 3, 4]])
    out = segments([doc], max_tokens=9, special=SPECIAL, rng=np.random.default_rng(0))
    bodies = [list(e["input_ids"][1:-1]) for e in out]
    assert all(e["input_ids"][0] == 2 and e["input_ids"][-1] == 3 and len(e["input_ids"]) <= 9 for e in out)
    # capacity 7: s1+s2 (7 tokens) together; s3 (9) alone, cut at 6 tokens: 7 would split word 3 (tokens 6, 7)
    assert bodies == [list(range(100, 107)), list(range(107, 113)), list(range(113, 116))]
    assert out[0]["word_ids"] == [None, 0, 0, 1, 2, 3, 3, 4, None]  # renumbered across the two sentences
    assert out[1]["word_ids"] == [None, 0, 0, 0, 1, 1, 2, None] and out[2]["word_ids"] == [None, 0, 0, 1, None]


def test_causal_windows_are_the_contiguous_text_with_an_end_token_after_each_document():
    docs = [_document([[0, 1, 2], [0, 1]]), _document([[0, 1, 2, 3]])]
    out = causal(docs, max_tokens=4, special=SPECIAL, rng=np.random.default_rng(0))
    stream = [100, 101, 102, 103, 104, 2, 100, 101, 102, 103, 2]
    assert [list(e["input_ids"]) for e in out] == [stream[0:4], stream[4:8], stream[8:11]]


def test_sentence_pairs_need_two_documents_and_keep_a_documents_sentences_in_order():
    with pytest.raises(CorpusError, match="blank line"):
        pairs([_document([[0, 1], [0]])], max_tokens=16, special=SPECIAL, rng=np.random.default_rng(0), source="f.txt")
    docs = [_document([[0, 1], [0, 1, 2], [0], [0, 1]]), _document([[0, 1, 2], [0, 1]])]
    out = pairs(docs, max_tokens=64, special=SPECIAL, rng=np.random.default_rng(3))
    for pair in out:
        if pair.next_sentence_label == 0:  # IsNext: B follows A in the same document
            assert pair.a_source[0] == pair.b_source[0] and pair.b_source[1] == pair.a_source[2]


def test_learning_rate_warms_up_then_decays_linearly_to_zero():
    config = PretrainConfig(objective="bert", max_steps=10, warmup_steps=4, lr=1.0)
    assert [learning_rate(config, s) for s in range(1, 11)] == [0.25, 0.5, 0.75, 1.0, 6 / 7, 5 / 7, 4 / 7, 3 / 7,
                                                                 2 / 7, 1 / 7]
    assert PretrainConfig(objective="bert", max_steps=1000).warmup_steps == 10  # BERT's 1%


@pytest.mark.slow  # two fresh processes import transformers: ~20 s
def test_two_xlnet_processes_checkpoint_each_ranks_memory(tmp_path, corpus, monkeypatch):
    """Each rank reads every second row of the segment, so its memory is those rows of one process's memory
    (same weights to float rounding); the checkpoint keeps both ranks' memories for an exact resume."""
    config = _config("xlnet", max_steps=2, batch_size=4, dropout=0.0, checkpoint_every=100)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    _run(tmp_path / "single", corpus, config)
    config = config.replace(tokenizer_dir=str(tmp_path / "single" / "tokenizer"))
    init_method = f"file://{tmp_path / 'rendezvous'}"
    run_two_ranks(pretrain_ddp_worker, (2, init_method, str(tmp_path / "ddp"), str(corpus), config.to_dict()))
    single = load_file(str(tmp_path / "single" / "checkpoints" / "step_00000002" / "model.safetensors"))
    ddp = load_file(str(tmp_path / "ddp" / "checkpoints" / "step_00000002" / "model.safetensors"))
    memory = single["objective.rank0.mems"]  # (layers, memory length, rows, hidden)
    assert memory.shape[2] == 4 and "objective.rank1.mems" not in single
    for rank in (0, 1):
        torch.testing.assert_close(ddp[f"objective.rank{rank}.mems"], memory[:, :, rank::2], rtol=1e-4, atol=1e-5)
