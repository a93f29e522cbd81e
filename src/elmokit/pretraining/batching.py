"""What every pretraining objective shares: the loss record it returns, the interface the loop calls, and the
batching helpers (padding rows into tensors, cutting an example stream into batches, reading an example's
fields whether it is a dict or an object).

An objective (``objectives``, ``permutation``, ``unilm``, ``seq2seq``, ``knowledge``, ``distill``) imports
this module; ``registry`` (the table ``elmokit pretrain`` reads) imports the objectives. Nothing here knows
any objective, so the dependencies point one way.

Shape legend: B batch, T tokens (padded).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from elmokit.pretraining.masking import IGNORE_INDEX


@dataclass
class ObjectiveLoss:
    """loss: the scalar to minimise (the paper's sum of mean losses). parts: each component's mean,
    detached, for the metrics. n_targets: predicted positions; n_tokens: non-pad input tokens."""

    loss: torch.Tensor
    parts: dict[str, float] = field(default_factory=dict)
    n_targets: int = 0
    n_tokens: int = 0


class Objective(Protocol):
    name: str

    def modules(self) -> dict[str, nn.Module]: ...

    def batches(self, examples: Iterable[Any], *, batch_size: int,
                rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]: ...

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss: ...


_PAD_VALUES = {"labels": IGNORE_INDEX, "token_type_ids": 0, "attention_mask": 0,
               "span_left": -1, "span_right": -1, "span_offset": -1}


def example_field(example, name: str, default=None):
    """``example[name]`` for a dict example, ``example.name`` for an object (``NspPair``, a stream row)."""
    if isinstance(example, Mapping):
        return example.get(name, default)
    return getattr(example, name, default)


def collate(rows: Sequence[Mapping[str, Any]], *, pad_id: int) -> dict[str, torch.Tensor]:
    """Pad per-sequence arrays to (B, T) tensors: input_ids with ``pad_id``, labels with -100,
    token_type_ids / attention_mask with 0, span targets with -1; scalars (next_sentence_label) stack."""
    T = max(len(r["input_ids"]) for r in rows)
    out: dict[str, torch.Tensor] = {}
    for name in rows[0]:
        values = [r[name] for r in rows]
        if np.ndim(values[0]) == 0:
            out[name] = torch.tensor(np.asarray(values), dtype=torch.long)
            continue
        pad = pad_id if name == "input_ids" else _PAD_VALUES.get(name, 0)
        array = np.full((len(rows), T), pad, dtype=np.int64)
        for b, v in enumerate(values):
            array[b, : len(v)] = v
        out[name] = torch.from_numpy(array)
    if "attention_mask" not in out:
        mask = np.zeros((len(rows), T), dtype=np.int64)
        for b, r in enumerate(rows):
            mask[b, : len(r["input_ids"])] = 1
        out["attention_mask"] = torch.from_numpy(mask)
    return out


def chunks(examples: Iterable[Any], batch_size: int) -> Iterator[list]:
    """Consecutive lists of ``batch_size`` examples; the last may be shorter."""
    chunk = []
    for example in examples:
        chunk.append(example)
        if len(chunk) == batch_size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
