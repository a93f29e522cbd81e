"""Carried-state windows (``TrainingConfig.window``; bilm-tf's unroll_steps): the rows and windows are the
ones restated by hand here, a row read in windows with the state carried scores exactly what the biLM's
stateful stream evaluation scores on the same text, and a stopped run resumes its rows bit-exactly."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import GOLDEN_MODEL, TINY_CORPUS, run_tiny, tiny_vocab

from elmokit.cli.main import main
from elmokit.evaluation.perplexity import perplexity, stream_backward_perplexity, stream_forward_perplexity
from elmokit.lm import LanguageModel
from elmokit.text.vocab import Vocabulary
from elmokit.training.config import TrainingConfig
from elmokit.training.data import BOS_TYPE, EOS_TYPE, Position, SentenceStream, window_batches
from elmokit.training.trainer import _type_char_ids, _vocab_ids_of_types, read_metrics

WINDOW = dict(window=8, batch_size=6, shuffle_buffer=1, log_every=1, checkpoint_every=5)


def as_text(row, types):
    return [{BOS_TYPE: "<S>", EOS_TYPE: "</S>"}.get(int(i), types[int(i)]) for i in row]


def test_windows_cut_the_framed_text_into_contiguous_rows(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\nc\nd e f\n")
    # <S> a b </S> <S> c </S> <S> d e f </S>: 12 tokens, 2 rows of 6, windows of 2 (+1 target): 2 per epoch
    stream = SentenceStream(str(corpus), shuffle_buffer=1)
    first, second, third = [b for _, b in zip(range(3), window_batches(stream, rows=2, window=2))]
    assert [as_text(r, first.types) for r in first.forward] == [["<S>", "a", "b"], ["</S>", "<S>", "d"]]
    assert [as_text(r, second.types) for r in second.forward] == [["b", "</S>", "<S>"], ["d", "e", "f"]]
    # the backward LM reads each row from its end
    assert [as_text(r, first.types) for r in first.backward] == [["c", "<S>", "</S>"], ["</S>", "f", "e"]]
    assert [as_text(r, second.types) for r in second.backward] == [["</S>", "b", "a"], ["e", "d", "<S>"]]
    assert (first.epoch, first.end, first.first_of_epoch) == (0, Position(0, 0, 1), True)
    assert (second.end, second.first_of_epoch) == (Position(0, 0, 2), False)
    assert (third.epoch, third.first_of_epoch) == (1, True)
    assert first.num_tokens == 1 and second.num_tokens == 3  # words among the inputs, boundaries not counted
    # resuming at a position gives the same windows
    resumed = next(window_batches(stream, rows=2, window=2, start=Position(0, 0, 1)))
    assert (resumed.forward == second.forward).all() and (resumed.backward == second.backward).all()


def test_too_short_an_epoch_is_refused_with_the_corpus_named(tmp_path):
    corpus = tmp_path / "short.txt"
    corpus.write_text("a b\n")
    with pytest.raises(ValueError, match="short.txt.*too few"):
        next(window_batches(SentenceStream(str(corpus)), rows=2, window=4))


def _one_row_windows(model, vocabulary, sentences, window):
    """Score a one-row text with ``window_forward`` window by window, carrying the state."""
    types, ids = ["<S>", "</S>"], []
    for sentence in sentences:
        ids.append(BOS_TYPE)
        for token in sentence:
            types.append(token)
            ids.append(len(types) - 1)
        ids.append(EOS_TYPE)
    row = torch.tensor(ids)
    assert (len(row) - 1) % window == 0, "the test text must fill whole windows"
    backward_row = row.flip(0)
    vocab_ids = torch.from_numpy(_vocab_ids_of_types(vocabulary, types))
    state, forward_nll, backward_nll, n_forward, n_backward = None, 0.0, 0.0, 0, 0
    for k in range(0, len(row) - 1, window):
        f, b = row[k : k + window + 1].unsqueeze(0), backward_row[k : k + window + 1].unsqueeze(0)
        unique, inverse = torch.unique(torch.cat([f[:, :-1], b[:, :-1]]), return_inverse=True)
        out, state = model.window_forward(_type_char_ids(types, unique.numpy()), inverse[:1], inverse[1:],
                                          vocab_ids[f[:, 1:]], vocab_ids[b[:, 1:]], f[:, :-1] != EOS_TYPE,
                                          b[:, :-1] != BOS_TYPE, state)
        forward_nll += float(out.forward_nll)
        backward_nll += float(out.backward_nll)
        n_forward += out.forward_targets
        n_backward += out.backward_targets
    return forward_nll, backward_nll, n_forward, n_backward


def test_windows_with_the_carried_state_score_what_the_stateful_stream_scores(tmp_path):
    """The oracle is an independent path: the biLM's reference-compatible stateful mode, one sentence per
    call (``stream_*_perplexity``). Dropping the carried state (``state = None`` per window) breaks it."""
    torch.manual_seed(0)
    model = LanguageModel(GOLDEN_MODEL.replace(dropout=0.0), 44)
    for p in model.parameters():
        torch.nn.init.uniform_(p, -0.3, 0.3)
    model.eval()
    vocabulary = Vocabulary.load(tiny_vocab(tmp_path))
    sentences = [["the", "cat", "sat"], ["a", "dog"], ["it", "ran", "home", "fast"], ["ok"]]  # 18 framed tokens
    with torch.no_grad():
        forward_nll, backward_nll, n_forward, n_backward = _one_row_windows(model, vocabulary, sentences, window=1 + 16)
        assert (n_forward, n_backward) == (14, 14)  # n + 1 per sentence and direction
        for window in (1, 17):  # 17 inputs = one window; 1 = the state carried through every token
            f, b, _, _ = _one_row_windows(model, vocabulary, sentences, window=window)
            forward = stream_forward_perplexity(model, vocabulary, sentences)
            backward = stream_backward_perplexity(model, vocabulary, sentences)
            assert forward.num_targets == n_forward
            assert f == pytest.approx(forward.forward_nll, rel=1e-5)
            assert b == pytest.approx(backward.forward_nll, rel=1e-5)
    # not vacuous: the zero-state-per-sentence score differs
    assert math.log(perplexity(model, vocabulary, sentences).forward) * n_forward != pytest.approx(forward_nll, rel=1e-3)


def weights(run_dir, step):
    return load_file(str(run_dir / "checkpoints" / f"step_{step:08d}" / "model.safetensors"))


def test_a_stopped_window_run_resumes_its_rows_exactly(tmp_path):
    """Across an epoch boundary too (the tiny corpus holds 9 windows of 6 rows x 8 tokens per epoch)."""
    straight = run_tiny(tmp_path / "straight", max_steps=12, **WINDOW)
    run_tiny(tmp_path / "stopped", max_steps=5, **WINDOW)
    saved = weights(tmp_path / "stopped", 5)
    assert saved["carried_state/h"].shape == (GOLDEN_MODEL.n_layers, 2, 6, GOLDEN_MODEL.projection_dim)
    assert saved["carried_state/c"].abs().sum() > 0
    run_tiny(tmp_path / "stopped", max_steps=12, resume=True, **WINDOW)
    a, b = weights(tmp_path / "straight", 12), weights(tmp_path / "stopped", 12)
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    epochs = [e["epoch"] for e in straight.history if "loss" in e]
    assert epochs[0] == 0 and epochs[-1] >= 1  # the run crossed an epoch start (state reset there)
    losses = [e["loss"] for e in read_metrics(tmp_path / "straight") if "loss" in e]
    assert losses == [e["loss"] for e in read_metrics(tmp_path / "stopped") if "loss" in e]


def test_window_validation_reads_the_valid_text_as_streams(tmp_path):
    result = run_tiny(tmp_path / "run", max_steps=2, valid_corpus=[str(TINY_CORPUS)], valid_every=2,
                      valid_sentences=6, **WINDOW)
    (entry,) = [e for e in result.history if "valid_ppl" in e]
    assert entry["valid_stream_fwd_ppl"] > 1 and entry["valid_stream_bwd_ppl"] > 1
    assert entry["valid_stream_fwd_ppl"] != entry["valid_fwd_ppl"]


@pytest.mark.parametrize("changes, message", [
    (dict(window=-1), "window must be an integer"),
    (dict(window=4, batch_tokens=100), "batch_tokens does not apply"),
])
def test_bad_window_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig(max_steps=1, **changes)


def test_the_cli_trains_in_windows_and_records_it(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["train", "--corpus", str(TINY_CORPUS), "--vocab", str(tiny_vocab(tmp_path)), "--preset", "tiny",
                 "--out", str(run), "--max-steps", "2", "--window", "8", "--batch-size", "6", "--shuffle-buffer", "1",
                 "--threads", "1"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((run / "training.json").read_text())["training"]["window"] == 8
    (checkpoint,) = (run / "checkpoints").iterdir()
    assert "carried_state/h" in load_file(str(checkpoint / "model.safetensors"))
    card = (run / "model" / "README.md").read_text()
    assert "batch 6 rows of running text read in windows of 8 tokens, the LSTM state carried" in card
    # the model folder holds the weights only, not the carried state
    assert "carried_state/h" not in load_file(str(run / "model" / "model.safetensors"))
