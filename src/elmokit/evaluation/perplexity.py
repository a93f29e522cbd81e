"""Perplexity of a biLM language model: forward, backward and their average, full softmax.

Counting (the same as training's loss): each sentence of n tokens gives n + 1 targets per
direction - the forward LM predicts w_1 .. w_n and </S>, the backward LM <S> and w_n .. w_1 -
and the perplexity is exp(total NLL / number of targets), per direction. The average is
exp of the mean of the two directions' per-token NLL (the geometric mean of the two
perplexities, as bilm-tf's ``test`` computes ``exp(0.5 (loss_f + loss_b))``).

Out-of-vocabulary tokens are still *read* from their characters, but as targets they are the
single class <UNK> and count like any other target; so perplexities are only comparable between
models with the same vocabulary and tokenisation. The OOV rate is reported alongside.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import torch

from elmokit.errors import UserError
from elmokit.text.chars import batch_to_ids


class NoSentencesError(UserError):
    """The sentences to evaluate were none (or all empty)."""


@dataclass
class PerplexityResult:
    forward: float
    backward: float
    average: float
    forward_nll: float  # nats, summed
    backward_nll: float
    num_targets: int  # per direction (tokens + one boundary per sentence)
    num_sentences: int
    num_tokens: int
    num_oov: int  # tokens outside the vocabulary (predicted as <UNK>)

    def to_dict(self) -> dict:
        return asdict(self)


def _batches(sentences: Iterable[Sequence[str]], batch_size: int, sort_window: int) -> Iterable[list[list[str]]]:
    """Batches of similar length: read ``sort_window`` sentences, sort by length, cut."""
    window: list[list[str]] = []

    def flush():
        window.sort(key=len)
        for start in range(0, len(window), batch_size):
            yield window[start : start + batch_size]
        window.clear()

    for sentence in sentences:
        if sentence:
            window.append(list(sentence))
        if len(window) >= sort_window:
            yield from flush()
    yield from flush()


@torch.no_grad()
def perplexity(
    model,
    vocabulary,
    sentences: Iterable[Sequence[str]],
    *,
    batch_size: int = 64,
    sort_window: int = 4096,
    device: str | torch.device = "cpu",
    progress=None,
) -> PerplexityResult:
    """Evaluate ``model`` (a :class:`~elmokit.lm.LanguageModel`) on tokenised sentences."""
    model.eval()
    fwd_total, bwd_total = 0.0, 0.0
    n_targets = n_sentences = n_tokens = n_oov = 0
    for batch in _batches(sentences, batch_size, sort_window):
        max_len = max(len(s) for s in batch)
        ids = [vocabulary.ids(s) for s in batch]
        n_oov += sum(i == vocabulary.unk and t != "<UNK>" for s, row in zip(batch, ids) for t, i in zip(s, row))
        word_ids = torch.tensor([row + [0] * (max_len - len(row)) for row in ids], dtype=torch.long, device=device)
        out = model(batch_to_ids(batch).to(device), word_ids)
        fwd_total += float(out.forward_nll)
        bwd_total += float(out.backward_nll)
        n_targets += out.num_targets
        n_sentences += len(batch)
        n_tokens += sum(len(s) for s in batch)
        if progress is not None:
            progress.update(sum(len(s) for s in batch))
    if n_targets == 0:
        raise NoSentencesError("no sentences to evaluate (none given, or all empty)")
    fwd, bwd = fwd_total / n_targets, bwd_total / n_targets
    return PerplexityResult(
        forward=math.exp(fwd), backward=math.exp(bwd), average=math.exp(0.5 * (fwd + bwd)),
        forward_nll=fwd_total, backward_nll=bwd_total, num_targets=n_targets,
        num_sentences=n_sentences, num_tokens=n_tokens, num_oov=n_oov,
    )


@dataclass
class StreamPerplexityResult:
    """Forward perplexity of a text read as one stream (the LSTM state carried across sentences)."""

    forward: float
    forward_nll: float  # nats, summed
    num_targets: int  # tokens + one </S> per sentence
    num_sentences: int

    def to_dict(self) -> dict:
        return asdict(self)


def stream_forward_perplexity(model, vocabulary, sentences: Iterable[Sequence[str]], *,
                              device: str | torch.device = "cpu") -> StreamPerplexityResult:
    """The forward LM's perplexity with the text read in order as one stream: each sentence is
    still framed ``<S> w_1 .. w_n </S>``, but its LSTMs start from the state the previous sentence
    ended in (the biLM's ``stateful`` mode, one row), not from zero. This is how Kim et al. (2016)
    and Zaremba et al. (2014) evaluate on PTB (they carry the state through the whole test set).
    Only the forward direction is meaningful here: a stream's backward LM would need the state of
    the text that follows (``stream_backward_perplexity``). The model's stateful setting and carried
    state are restored after."""
    return _stream_perplexity(model, vocabulary, list(sentences), device, backward=False)


def stream_backward_perplexity(model, vocabulary, sentences: Iterable[Sequence[str]], *,
                               device: str | torch.device = "cpu") -> StreamPerplexityResult:
    """The backward LM's perplexity with the text read as one stream from its end: the sentences in
    reverse order, each from the backward state the sentence after it ended in. The result's
    ``forward`` field holds the backward perplexity (the direction this stream reads in)."""
    return _stream_perplexity(model, vocabulary, list(sentences)[::-1], device, backward=True)


def _stream_perplexity(model, vocabulary, sentences, device, *, backward: bool) -> StreamPerplexityResult:
    model.eval()
    bilm = model.bilm
    was_stateful = bilm.stateful
    bilm.stateful = True
    bilm.reset_states()
    total, n_targets, n_sentences = 0.0, 0, 0
    try:
        with torch.no_grad():
            for sentence in sentences:
                if not sentence:
                    continue
                sentence = list(sentence)
                word_ids = torch.tensor([vocabulary.ids(sentence)], dtype=torch.long, device=device)
                out = model(batch_to_ids([sentence]).to(device), word_ids)
                total += float(out.backward_nll if backward else out.forward_nll)
                n_targets += out.num_targets
                n_sentences += 1
    finally:
        bilm.reset_states()
        bilm.stateful = was_stateful
    if n_targets == 0:
        raise NoSentencesError("no sentences to evaluate (none given, or all empty)")
    return StreamPerplexityResult(forward=math.exp(total / n_targets), forward_nll=total, num_targets=n_targets,
                                  num_sentences=n_sentences)
