"""A deterministic warm start for the biLM: one initial LSTM state per model, computed once.

Why. The reference ELMo is stateful because a zero LSTM state is unlike any state the biLM saw in
training: bilm-tf trained on a continuous stream of sentences (each wrapped in <S> ... </S>), so
every sentence it learned from began with the state left by the text before it. elmokit starts
every sentence from zero by default, which keeps sentences independent but starts them cold.
The warm start keeps the independence and starts warm: every sentence begins from the *same*
state, the one the model reaches after reading a fixed warm-up text, so outputs stay independent
of batch composition and order (bit for bit) while the first tokens see a realistic state.

How the state is computed (``compute_warm_state``):

* The warm-up text (``WARMUP_SENTENCES`` below, or the user's) is read by the reference's own
  stateful mode (``BiLM(stateful=True)``), one sentence per call in a single batch row, each with
  its <S> and </S>: exactly the stream the reference would see embedding the text sentence by
  sentence, and the shape of bilm-tf's training stream.
* Forward direction: the state after reading the sentences in order. Backward direction: the
  state after reading the text backwards, i.e. the sentences fed in reverse order (the backward
  LM reads each sentence from its end, and what it has read before a sentence is the text that
  follows it).
* One stream, not the mean over several rows: the result is a state the model really reaches on
  real text. A mean of final states is not one (h is a projection of saturating gates; averaging
  shrinks it towards zero, back towards the cold start we want to avoid).

The state is stored in the model folder as ``warm_state.safetensors``: ``h`` (L, 2, P) and ``c``
(L, 2, D) float32, direction 0 forward and 1 backward, with metadata naming the text (its SHA-256
and sentence count) and a fingerprint of the weights it was computed with, so a state left beside
other weights is refused instead of silently used. ``elmokit warm-state --model DIR`` writes it.

Legend: L LSTM layers, P projection size, D cell size, B batch.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import save_file

from elmokit.bilm import BiLM  # this module uses the model; the model never imports it
from elmokit.errors import UserError
from elmokit.formats.checks import describe_non_finite, refuse_non_finite
from elmokit.io import atomic_path
from elmokit.text.chars import batch_to_ids

WARM_STATE_NAME = "warm_state.safetensors"
FORMAT_VERSION = 1

# The shipped warm-up text: opening sentences of public-domain English novels (all published
# before 1930), tokenised with punctuation split off as in the 1B Word Benchmark. Ordinary prose at
# both ends, because the forward state is shaped most by the last sentence and the backward state
# by the first. Sources, in order: Austen, Pride and Prejudice (1813); Carroll, Alice's Adventures
# in Wonderland (1865); Dickens, A Tale of Two Cities (1859); Melville, Moby-Dick (1851); Dickens,
# A Christmas Carol (1843); Tolstoy, Anna Karenina (tr. Garnett, 1901); Doyle, A Scandal in
# Bohemia (1891); Dickens, David Copperfield (1850); Bronte, Jane Eyre (1847).
WARMUP_SENTENCES: tuple[str, ...] = (
    "It is a truth universally acknowledged , that a single man in possession of a good fortune , "
    "must be in want of a wife .",
    "Alice was beginning to get very tired of sitting by her sister on the bank , and of having nothing to do .",
    "It was the best of times , it was the worst of times .",
    "Call me Ishmael .",
    "Marley was dead : to begin with .",
    "Happy families are all alike ; every unhappy family is unhappy in its own way .",
    "To Sherlock Holmes she is always the woman .",
    "Whether I shall turn out to be the hero of my own life , or whether that station will be held by "
    "anybody else , these pages must show .",
    "There was no possibility of taking a walk that day .",
)


class WarmStateError(UserError):
    """A warm state that is missing, malformed, or computed for other weights."""


@dataclass
class WarmState:
    """The initial state of every sentence: h (L, 2, P) and c (L, 2, D), direction 0 = forward."""

    h: torch.Tensor
    c: torch.Tensor
    metadata: dict = field(default_factory=dict)


def weights_fingerprint(bilm) -> str:
    """SHA-256 over the biLM's parameters (names and float32 bytes), independent of file format."""
    digest = hashlib.sha256()
    for name, tensor in sorted(bilm.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to(torch.float32).contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()


def text_fingerprint(sentences: Sequence[Sequence[str]]) -> str:
    digest = hashlib.sha256()
    for sentence in sentences:
        digest.update(" ".join(sentence).encode("utf-8") + b"\n")
    return digest.hexdigest()


def warmup_sentences() -> list[list[str]]:
    """The shipped warm-up text, tokenised."""
    return [s.split() for s in WARMUP_SENTENCES]


def read_warmup_text(path: str | os.PathLike) -> list[list[str]]:
    """One whitespace-tokenised sentence per line; blank lines are skipped; at least one sentence."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise WarmStateError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    sentences = [line.split() for line in lines if line.strip()]
    if not sentences:
        raise WarmStateError(f"{path}: no sentences (one whitespace-tokenised sentence per line expected)")
    return sentences


@torch.no_grad()
def compute_warm_state(bilm, sentences: Sequence[Sequence[str]] | None = None) -> WarmState:
    """The state ``bilm`` reaches reading ``sentences`` (default: the shipped warm-up text).

    Runs a fresh fp32 stateful copy of the model (``bilm`` itself is left untouched), one sentence
    per call in one batch row: forward state after the text in order, backward state after the
    text read backwards (sentences in reverse order). See the module docstring for why.
    """
    sentences = [list(s) for s in (warmup_sentences() if sentences is None else sentences)]
    if not sentences or any(len(s) == 0 for s in sentences):
        raise WarmStateError("the warm-up text needs at least one sentence and no empty ones")
    reader = BiLM(bilm.config, stateful=True)
    reader.load_state_dict(bilm.state_dict())
    reader.eval()

    def final_state(order: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        reader.reset_states()
        for sentence in order:
            reader(batch_to_ids([sentence]))
        h, c = reader._state  # (L, 2, rows, P), (L, 2, rows, D); one row here
        return h[:, :, 0], c[:, :, 0]

    forward_h, forward_c = final_state(sentences)
    backward_h, backward_c = final_state(sentences[::-1])
    h = torch.stack([forward_h[:, 0], backward_h[:, 1]], dim=1).contiguous()  # (L, 2, P)
    c = torch.stack([forward_c[:, 0], backward_c[:, 1]], dim=1).contiguous()  # (L, 2, D)
    metadata = {
        "format_version": FORMAT_VERSION,
        "text_sha256": text_fingerprint(sentences),
        "n_sentences": len(sentences),
        "n_tokens": sum(len(s) for s in sentences),
        "text": "shipped" if sentences == warmup_sentences() else "user",
        "weights_sha256": weights_fingerprint(bilm),
    }
    return WarmState(h.float(), c.float(), metadata)


def save_warm_state(directory: str | os.PathLike, state: WarmState) -> Path:
    """Write ``directory / warm_state.safetensors`` atomically."""
    target = Path(directory) / WARM_STATE_NAME
    arrays = {"h": state.h.detach().cpu().numpy().astype(np.float32), "c": state.c.detach().cpu().numpy().astype(np.float32)}
    refuse_non_finite(arrays, target)
    metadata = {key: json.dumps(value) for key, value in state.metadata.items()}
    with atomic_path(target) as tmp:
        save_file(arrays, tmp, metadata=metadata)
    return target


def load_warm_state(directory: str | os.PathLike, bilm) -> WarmState:
    """Read the warm state stored in a model folder and check it: readable, the shapes of
    ``bilm``'s config, finite, and computed for ``bilm``'s weights (``WarmStateError`` naming the file)."""
    path = Path(directory) / WARM_STATE_NAME
    if not path.exists():
        raise WarmStateError(
            f"{Path(directory)}: no {WARM_STATE_NAME}, so initial_state='warm' cannot be used; "
            f"fix: compute it once with `elmokit warm-state --model {directory}`"
        )
    try:
        with safe_open(str(path), framework="np") as f:
            raw_meta = f.metadata() or {}
            arrays = {key: f.get_tensor(key) for key in f.keys()}
    except Exception as error:  # safetensors raises its own error types for a damaged file
        reason = "empty: 0 bytes" if path.stat().st_size == 0 else (str(error).splitlines() or [""])[0]
        raise WarmStateError(
            f"{path}: not a readable safetensors file ({reason}); fix: recompute it with "
            f"`elmokit warm-state --model {directory}`"
        ) from None
    try:
        metadata = {key: json.loads(value) for key, value in raw_meta.items()}
    except json.JSONDecodeError:
        raise WarmStateError(f"{path}: metadata is not elmokit's (not JSON); fix: recompute it with "
                             f"`elmokit warm-state --model {directory}`") from None
    config = bilm.config
    expected = {"h": (config.n_layers, 2, config.projection_dim), "c": (config.n_layers, 2, config.lstm_dim)}
    for key, shape in expected.items():
        if key not in arrays or tuple(arrays[key].shape) != shape:
            found = tuple(arrays[key].shape) if key in arrays else "missing"
            raise WarmStateError(f"{path}: tensor {key!r} should have shape {shape} for this model, found {found}")
        problem = describe_non_finite(arrays[key])
        if problem:
            raise WarmStateError(
                f"{path}: tensor {key!r} holds {problem}; fix: recompute it with `elmokit warm-state --model {directory}`"
            )
    if metadata.get("weights_sha256") != weights_fingerprint(bilm):
        raise WarmStateError(
            f"{path}: computed for other weights than this model's; fix: recompute it with "
            f"`elmokit warm-state --model {directory}`"
        )
    return WarmState(torch.from_numpy(arrays["h"].copy()), torch.from_numpy(arrays["c"].copy()), metadata)
