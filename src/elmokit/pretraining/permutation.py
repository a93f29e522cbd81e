"""XLNet's permutation language model (Yang et al. 2019) on transformers' ``XLNetLMHeadModel``.

What the paper trains (§2.2-2.4) and where it lives here:

- *Permutation LM* (eq. 3): maximise E_z[sum_t log p(x_{z_t} | x_{z<t})] over factorisation orders z,
  with *partial prediction* (§2.3): only the last tokens of each order are predicted (about 1/K of
  them, K = 6 in the paper's pretraining, ``num_predict`` = 85 of 512). The targets, the order and the
  resulting ``perm_mask`` come from transformers' ``DataCollatorForPermutationLanguageModeling``
  (present in 5.x): targets are spans of 1..5 tokens, one per context of ``span / plm_probability``
  tokens (plm_probability = 1/6), as XLNet's ``_sample_mask``; non-targets come first in the order
  (everyone sees them), the targets follow in a random order that keeps the first half of the
  segment before the second (XLNet's ``perm_size`` = half the segment). ``perm_mask[b, i, j] = 1``:
  position i may not attend to position j.
- *Two-stream attention* (§2.3, eq. 4): the model's own. The content stream h_i sees the positions
  ``perm_mask`` allows and itself; the query stream g_i sees the same positions but not itself (it
  starts from the learned ``mask_emb``, so it knows the target's position and not its content).
  ``target_mapping`` (B, P, T) selects the P predicted positions: the query stream and the softmax
  run for those only.
- *Segment recurrence* (§2.4, Transformer-XL): the content stream of the previous segment is cached
  (``mems``, no gradient) and attended by every position of the next one, with relative positions.
  ``batches`` therefore deals whole documents onto ``batch_size`` parallel streams and yields them
  segment by segment: **row i of batch k+1 continues row i of batch k** (Transformer-XL's
  ``batchify``, streamed), and ``loss`` keeps the returned ``mems`` for the next call. A batch with
  ``segment_index == 0`` starts without memory. Feed it documents (``document_streams``), not
  windows cut and shuffled: a shuffled window would continue a row with unrelated text. In
  ``elmokit pretrain`` the corpus stream cuts the segments itself (``corpus.segment_rows``: a shard's
  documents dealt onto ``--batch-size`` rows, emitted row by row and never shuffled), so each step gets
  the next segment of every row and the whole shard is read, with the memory carried over between
  steps (``segment_batch``); the segment length is ``--max-tokens`` (default: the preset's positions).

Deviations (stated, each for a reason):

- transformers' collator replaces the targets by [MASK] in ``input_ids``. XLNet does not: its content
  stream reads the real tokens (``inputs_k = inputs`` in XLNet's ``_local_perm``), which is what lets a
  target later in the order condition on an earlier target (the paper's "New York" example, §2.6);
  with [MASK] inputs the targets would be predicted independently, as in BERT. ``batches`` puts the
  original ids back; ``perm_mask`` already hides a target's content from every position before it in
  the order and from its own query stream (tested by perturbation).
- The collator's ``target_mapping`` is the identity (every position gets a query stream, T x T); here
  it is compacted to the P targets of each row (P = most targets in the batch, extra rows all zero
  with label -100), as XLNet's ``num_predict``: the query stream costs P/T of the identity's.
- The collator draws span lengths uniformly in 1..5 (XLNet: probability proportional to 1/n) and
  draws from torch's global generator; here it runs under a forked torch generator seeded from the
  objective's numpy ``rng``, so batches stay a function of (examples, rng state).
- One segment type, no [SEP]/[CLS] pair format, no ``bi_data`` (XLNet-Large's ablation drops
  next-sentence prediction; the bidirectional input pipeline halves the batch per direction and is
  left out). The memory holds the previous segment, trimmed to its T tokens (Transformer-XL's ``mem_len`` =
  segment length, whatever the model config's ``mem_len``);
  XLNet caches only the ``reuse_len`` first tokens because its examples overlap by that much.
- The memory is part of the checkpoint (``tensor_state``: one (L, M, B, H) tensor per rank), so a
  resumed run attends to the same previous segment as an uninterrupted one, bit for bit.

Shape legend: B batch (streams), T segment length, P predicted positions per row, V vocabulary,
M memory length, H hidden.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from elmokit.pretraining.batching import ObjectiveLoss, example_field
from elmokit.pretraining.masking import IGNORE_INDEX


def xlnet_config(p, vocab_size: int, ids: dict, *, segment_length: int | None = None):
    """An ``XLNetConfig`` at a ``ModelPreset``: relative positions (no position table), memory of one
    segment (``segment_length``, default the preset's ``max_positions``), mems kept in training."""
    from transformers import XLNetConfig

    return XLNetConfig(vocab_size=vocab_size, d_model=p.hidden, n_layer=p.layers, n_head=p.heads, d_inner=p.intermediate,
                       ff_activation="gelu", dropout=p.dropout, mem_len=segment_length or p.max_positions, reuse_len=None,
                       use_mems_train=True, use_mems_eval=True, attn_type="bi", bi_data=False,
                       pad_token_id=ids.get("pad_id", 0), bos_token_id=ids.get("bos_id", ids.get("cls_id", 2)),
                       eos_token_id=ids.get("eos_id", ids.get("sep_id", 3)))


def document_streams(documents, *, max_tokens: int = 0, special=None, rng=None, source: str = "") -> list[dict]:
    """An example reader (``pretraining.corpus.EXAMPLE_READERS`` signature) for XLNet: one example per
    document, its sentences' ids in order without specials (``max_tokens`` is not a limit here: the
    objective cuts the streams into segments). Documents may be shuffled; their text must not be."""
    return [{"input_ids": np.asarray([t for sentence in d.ids for t in sentence], dtype=np.int64)} for d in documents]


def contiguous_streams(examples: Iterable[Any], batch_size: int, segment_length: int, *,
                       separator_id: int | None = None) -> Iterator[np.ndarray]:
    """(B, T) int64 segments of ``batch_size`` parallel token streams, in order: row i of each segment
    continues row i of the one before. Each example (a document's ``input_ids``) is appended whole to
    the stream with the fewest pending tokens (the first on a tie), after ``separator_id``; a segment
    is cut as soon as every stream holds ``segment_length`` tokens. Works on an endless iterator with
    bounded memory; what is left when the examples end is dropped."""
    buffers: list[list[int]] = [[] for _ in range(batch_size)]
    started = [False] * batch_size
    for example in examples:
        ids = np.asarray(example_field(example, "input_ids", example), dtype=np.int64).reshape(-1).tolist()
        if not ids:
            continue
        row = min(range(batch_size), key=lambda r: len(buffers[r]))
        if started[row] and separator_id is not None:
            buffers[row].append(int(separator_id))
        buffers[row] += ids
        started[row] = True
        while all(len(b) >= segment_length for b in buffers):
            yield np.array([b[:segment_length] for b in buffers], dtype=np.int64)
            for r in range(batch_size):
                del buffers[r][:segment_length]


def batchified_streams(examples: Iterable[Any], batch_size: int, segment_length: int, *,
                       separator_id: int | None = None) -> list[np.ndarray]:
    """Transformer-XL's layout of a finite corpus: the examples (documents' ``input_ids``) joined into one
    token stream, ``separator_id`` between documents, cut into ``batch_size`` contiguous rows of equal
    length, and the rows read ``segment_length`` tokens at a time: (B, T) segments in order, row i of each
    continuing row i of the one before. Unlike ``contiguous_streams`` it needs no more documents than
    rows (a shard of two books fills 32 rows); a document may run from the end of one row into the next.
    The stream's last ``len % batch_size`` tokens and each row's last partial segment are dropped."""
    stream: list[int] = []
    for example in examples:
        ids = np.asarray(example_field(example, "input_ids", example), dtype=np.int64).reshape(-1).tolist()
        if not ids:
            continue
        if stream and separator_id is not None:
            stream.append(int(separator_id))
        stream += ids
    row_length = len(stream) // batch_size
    segments = row_length // segment_length
    rows = np.asarray(stream[: row_length * batch_size], dtype=np.int64).reshape(batch_size, row_length)
    return [rows[:, k * segment_length:(k + 1) * segment_length].copy() for k in range(segments)]


def compact_targets(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """From per-position ``labels`` (B, T) (-100 where nothing is predicted) to XLNet's
    ``target_mapping`` (B, P, T) one-hot rows and ``target_labels`` (B, P), targets in position order;
    P is the most targets of any row, shorter rows are padded with zero rows and -100."""
    B, T = labels.shape
    counts = (labels != IGNORE_INDEX).sum(1)
    P = max(int(counts.max()), 1)
    mapping = torch.zeros(B, P, T)
    target_labels = torch.full((B, P), IGNORE_INDEX, dtype=torch.long)
    for b in range(B):
        positions = (labels[b] != IGNORE_INDEX).nonzero().squeeze(1)
        mapping[b, torch.arange(len(positions)), positions] = 1.0
        target_labels[b, : len(positions)] = labels[b, positions]
    return mapping, target_labels


class PermutationLMObjective:
    """XLNet pretraining (see the module docstring). ``tokenizer``: a fast tokenizer with a mask and a
    pad token (the collator needs them). ``segment_length``: T, even (the collator's half-split).
    Examples: anything with ``input_ids`` (or id lists), best encoded without specials; documents are
    joined with ``separator_id`` (default the tokenizer's [SEP] / eos)."""

    name = "xlnet"

    def __init__(self, tokenizer, *, segment_length: int = 64, plm_probability: float = 1 / 6,
                 max_span_length: int = 5, separator_id: int | None = None) -> None:
        from transformers import DataCollatorForPermutationLanguageModeling

        if segment_length < 2 or segment_length % 2:
            raise ValueError(f"segment_length={segment_length}: XLNet's permutation needs an even length >= 2")
        self.collator = DataCollatorForPermutationLanguageModeling(
            tokenizer=tokenizer, plm_probability=plm_probability, max_span_length=max_span_length)
        self.segment_length = segment_length
        if separator_id is None:
            separator_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        self.separator_id = separator_id
        self.mems: list[torch.Tensor] | None = None  # (M, B, H) per layer, from the previous segment

    def modules(self) -> dict[str, nn.Module]:
        return {}

    def permute(self, segment: torch.Tensor, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """One segment (B, T) -> input_ids (original tokens), perm_mask (B, T, T), labels (B, T)."""
        seed = int(rng.integers(0, 2**63 - 1))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            _, perm_mask, _, labels = self.collator.torch_mask_tokens(segment.clone())
        return {"input_ids": segment, "perm_mask": perm_mask, "labels": labels}

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        """Segments of ``batch_size`` contiguous streams (``contiguous_streams``), in order: row i of
        batch k+1 continues row i of batch k. Each batch: input_ids (B, T), perm_mask (B, T, T), target_mapping (B, P, T),
        target_labels (B, P), labels (B, T) (per position), segment_index () (0 = a fresh stream)."""
        if isinstance(examples, (list, tuple)) and examples and example_field(examples[0], "segment_index") is not None:
            yield self.segment_batch(examples, rng)  # rows already cut (the run's stream: corpus.segment_rows)
            return
        segments = contiguous_streams(examples, batch_size, self.segment_length, separator_id=self.separator_id)
        for k, segment in enumerate(segments):
            yield self._batch(torch.from_numpy(segment), k, rng)

    def segment_batch(self, rows, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """One batch from rows of one segment (``corpus.segment_rows``: ``input_ids`` (T,), ``segment_index``)."""
        indices = {int(example_field(r, "segment_index")) for r in rows}
        if len(indices) != 1:
            raise ValueError(f"an XLNet batch must be the rows of one segment; got segment indices {sorted(indices)} "
                             "(the batch size must equal the rows the stream was cut with)")
        segment = torch.from_numpy(np.stack([np.asarray(example_field(r, "input_ids"), dtype=np.int64) for r in rows]))
        return self._batch(segment, indices.pop(), rng)

    def _batch(self, segment: torch.Tensor, index: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        batch = self.permute(segment, rng)
        batch["target_mapping"], batch["target_labels"] = compact_targets(batch["labels"])
        batch["segment_index"] = torch.tensor(index)
        batch["attention_mask"] = torch.ones_like(batch["input_ids"])
        return batch

    def tensor_state(self) -> dict[str, torch.Tensor]:
        """The memory for a checkpoint: ``{"mems": (L, M, B, H)}``, or nothing before the first segment."""
        return {} if self.mems is None else {"mems": torch.stack(self.mems)}

    def load_tensor_state(self, state: Mapping[str, torch.Tensor]) -> None:
        self.mems = list(state["mems"].unbind(0)) if "mems" in state else None

    def reset(self) -> None:
        """Forget the memory (a new pass over the corpus starts here)."""
        self.mems = None

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss:
        """Mean cross-entropy of the query stream's predictions at the targets; carries ``mems`` over."""
        B = batch["input_ids"].shape[0]
        mems = self.mems
        if int(batch["segment_index"]) == 0 or mems is None or mems[0].shape[1] != B:
            mems = None
        out = model(input_ids=batch["input_ids"], perm_mask=batch["perm_mask"].float(),
                    target_mapping=batch["target_mapping"].float(), mems=mems, use_mems=True)
        # stop-gradient (Transformer-XL); the memory is the previous segment only, whatever the model's mem_len
        T = batch["input_ids"].shape[1]
        self.mems = [m[-T:].detach() for m in out.mems] if out.mems is not None else None
        logits = out.logits  # (B, P, V)
        targets = batch["target_labels"]
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=IGNORE_INDEX)
        n = int((targets != IGNORE_INDEX).sum())
        return ObjectiveLoss(loss, {"plm": float(loss.detach())}, n, int(batch["input_ids"].numel()))


def xlnet(tokenizer, *, segment_length: int = 64) -> PermutationLMObjective:
    """XLNet: permutation LM, two-stream attention, segment memory (model family 'xlnet')."""
    return PermutationLMObjective(tokenizer, segment_length=segment_length)
