"""Fine-tuning a transformer encoder for extractive question answering: BERT's SQuAD head (Devlin et al.
2019, §4.2).

Input: ``[CLS] question [SEP] passage [SEP]``, segment ids 0 then 1 (``<s> q </s></s> p </s>`` for
RoBERTa-type models). Two new vectors S, E in R^H (one linear layer H -> 2): the probability of
position i starting the answer is softmax_i(S . T_i), of ending it softmax_i(E . T_i); the loss is the
mean of the two log-likelihoods of the gold positions. The answer's start is the first piece of its
first word, its end the last piece of its last word.

Long passages (BERT's ``run_squad``): the passage is cut into windows of whole words that fit the
positions beside the question, each next window starting about ``stride`` of the room further on
(so windows overlap). A training window that does not hold the whole answer is trained to point at
``[CLS]`` (position 0), as BERT's v1.1 code does. At prediction each word takes its scores from the
window where it has the **maximum context**: the window maximising min(words left of it, words right
of it) + 0.01 * window length (BERT's ``_check_is_max_context``, counted in words). The answer is then
the best span over the passage's words (``best_span``: start <= end, at most ``max_answer_words``).
Deviation, stated: BERT scores only spans inside one window; scoring per word from its best window lets
a span cross windows, and equals BERT's when the passage fits one window.

Left-to-right models (GPT) are refused: a passage word there never sees the words after it.
Optimisation is ``elmokit.transfer.finetune``'s (AdamW, warm-up then linear decay, gradient norm 1),
on the engine's epoch loop with dev early stopping on the official F1.

Shapes: R windows, P positions, H hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from elmokit.engine.epochs import EpochOptions, EpochResult, seed_everything, shuffled_batches, train_epochs
from elmokit.errors import UserError
from elmokit.tasks.metrics import squad_scores
from elmokit.tasks.squad_data import SquadData, best_span
from elmokit.text.subword_tokenizers import encode_words
from elmokit.transfer.finetune import FineTuneOptions, adamw_with_warmup, is_causal, load_base, max_positions
from elmokit.transfer.finetune_pairs import pad_rows


@dataclass
class Window:
    """Passage words ``start..end-1`` beside the question: the ids and where each word's pieces sit."""

    start: int
    end: int
    input_ids: list[int]
    token_type_ids: list[int]
    first: list[int]  # position of the first piece of word start + k
    last: list[int]  # position of its last piece


def word_windows(counts: Sequence[int], room: int, stride: int) -> list[tuple[int, int]]:
    """(start, end) word ranges whose piece counts fit ``room``; the next starts at the first word at least
    ``stride`` pieces after the current start (never past its end), until one reaches the last word."""
    offsets = np.concatenate([[0], np.cumsum(counts)])
    windows, start = [], 0
    while True:
        end = start
        while end < len(counts) and offsets[end + 1] - offsets[start] <= room:
            end += 1
        if end == start:
            raise UserError(f"a passage word has {counts[start]} sub-tokens, more than the {room} a window holds "
                            "beside the question")
        windows.append((start, end))
        if end == len(counts):
            return windows
        step = start + 1
        while step < end and offsets[step] - offsets[start] < stride:
            step += 1
        start = step


def max_context_windows(windows: Sequence[tuple[int, int]], num_words: int) -> list[int]:
    """For each word, the window (index) where min(left context, right context) + 0.01 * length is largest
    (the first such window on a tie)."""
    best = []
    for k in range(num_words):
        scores = [(min(k - s, e - 1 - k) + 0.01 * (e - s), -w) for w, (s, e) in enumerate(windows) if s <= k < e]
        best.append(-max(scores)[1])
    return best


class SpanInputs:
    """Builds the windows of a (question, passage) for an encoder's tokenizer."""

    def __init__(self, tokenizer, config, *, stride: float = 0.5, max_question_pieces: int = 64) -> None:
        if is_causal(config):
            raise UserError(f"span extraction fine-tunes encoders (BERT §4.2); {config.model_type} reads left to right")
        if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
            raise UserError("an encoder's tokenizer needs a CLS and a SEP token (BERT's [CLS], [SEP])")
        self.tokenizer = tokenizer
        self.positions = max_positions(config)
        self.double_separator = getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert")
        self.stride, self.max_question_pieces = stride, max_question_pieces

    def windows(self, question: Sequence[str], passage: Sequence[str]) -> list[Window]:
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        extra = [sep] if self.double_separator else []
        q = list(encode_words(self.tokenizer, question, add_special_tokens=False).input_ids)
        q = q[: min(self.max_question_pieces, self.positions // 2)]
        pieces = encode_words(self.tokenizer, passage, add_special_tokens=False)
        word_ids = [pieces.input_ids[p[0]: p[-1] + 1] for p in pieces.pieces]
        head = [cls, *q, sep, *extra]
        room = self.positions - len(head) - 1
        out = []
        for start, end in word_windows([len(w) for w in word_ids], room, max(1, int(self.stride * room))):
            ids, first, last = list(head), [], []
            for w in word_ids[start:end]:
                first.append(len(ids))
                ids.extend(w)
                last.append(len(ids) - 1)
            ids.append(sep)
            types = [0] * len(head) + [1] * (len(ids) - len(head))
            out.append(Window(start, end, ids, types, first, last))
        return out


class SpanModel(nn.Module):
    """A transformer encoder and BERT's start/end vectors."""

    def __init__(self, base: nn.Module) -> None:
        super().__init__()
        if getattr(base, "pooler", None) is not None:  # the [CLS] pooler feeds nothing here: dropped
            base.pooler = None
        self.base = base
        hidden = int(base.config.hidden_size)
        self.uses_segments = (getattr(base.config, "type_vocab_size", 0) or 0) > 1
        self.start_end = nn.Linear(hidden, 2)  # rows: S and E

    def forward(self, ids: torch.Tensor, types: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, P) each -> start, end scores (R, P), -inf at padding."""
        extra = {"token_type_ids": types} if self.uses_segments else {}
        hidden = self.base(input_ids=ids, attention_mask=mask, **extra).last_hidden_state  # (R, P, H)
        scores = self.start_end(hidden).masked_fill(~mask.bool().unsqueeze(-1), float("-inf"))  # (R, P, 2)
        return scores[..., 0], scores[..., 1]


@dataclass
class SpanFineTuned:
    model: SpanModel
    inputs: SpanInputs
    pad_id: int
    max_answer_words: int = 30

    def window_lists(self, data: SquadData) -> list[list[Window]]:
        return [self.inputs.windows(q.words, data.paragraphs[q.paragraph].words) for q in data.questions]

    @torch.no_grad()
    def predict(self, data: SquadData, windows: list[list[Window]] | None = None, *, batch_size: int = 16) -> dict[str, str]:
        """{question id: answer text}: per word the scores of its maximum-context window, then ``best_span``."""
        self.model.eval()
        windows = windows if windows is not None else self.window_lists(data)
        out = {}
        for s in range(0, len(data), batch_size):
            indices = list(range(s, min(s + batch_size, len(data))))
            flat = [w for i in indices for w in windows[i]]
            ids, types, mask = pad_rows([(w.input_ids, w.token_type_ids) for w in flat], self.pad_id)
            start, end = self.model(ids, types, mask)
            row = 0
            for i in indices:
                question, own = data.questions[i], windows[i]
                words = data.paragraphs[question.paragraph].words
                owner = max_context_windows([(w.start, w.end) for w in own], len(words))
                word_start = torch.empty(len(words))
                word_end = torch.empty(len(words))
                for k, w in enumerate(owner):
                    window = own[w]
                    word_start[k] = start[row + w, window.first[k - window.start]]
                    word_end[k] = end[row + w, window.last[k - window.start]]
                row += len(own)
                [(a, b)] = best_span(word_start[None], word_end[None], torch.ones(1, len(words), dtype=torch.bool),
                                     self.max_answer_words)
                out[question.id] = data.paragraphs[question.paragraph].text(a, b)
        return out


def span_targets(window: Window, span: tuple[int, int]) -> tuple[int, int]:
    """(start, end) positions of the answer in ``window``, or (0, 0) ([CLS]) when it is not wholly inside."""
    a, b = span
    if window.start <= a and b < window.end:
        return window.first[a - window.start], window.last[b - window.start]
    return 0, 0


def finetune_span(folder, train: SquadData, dev: SquadData, *, options: FineTuneOptions | None = None,
                  patience: int | None = None, stride: float = 0.5, max_answer_words: int = 30,
                  log=None) -> tuple[SpanFineTuned, EpochResult]:
    """Fine-tune the encoder in ``folder`` on ``train``'s questions; keep the epoch with the best dev F1."""
    options = options or FineTuneOptions()
    seed_everything(options.seed)
    rng = np.random.default_rng(options.seed)
    base, tokenizer = load_base(folder)
    inputs = SpanInputs(tokenizer, base.config, stride=stride)
    model = SpanModel(base)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tuned = SpanFineTuned(model, inputs, pad, max_answer_words)
    instances = []  # (window, start, end) of every window of every question whose answer aligns to words
    for question, own in zip(train.questions, tuned.window_lists(train)):
        if question.span is not None:
            instances.extend((w, *span_targets(w, question.span)) for w in own)
    dev_windows = tuned.window_lists(dev)
    steps = options.epochs * -(-len(instances) // options.batch_size)
    optimizer, scheduler = adamw_with_warmup(model, options, steps)

    def batches(epoch: int):
        return [[instances[i] for i in batch] for batch in shuffled_batches(len(instances), options.batch_size, rng)]

    def loss(batch):
        ids, types, mask = pad_rows([(w.input_ids, w.token_type_ids) for w, _, _ in batch], pad)
        start, end = model(ids, types, mask)
        gold_start = torch.tensor([a for _, a, _ in batch])
        gold_end = torch.tensor([b for _, _, b in batch])
        return (nn.functional.cross_entropy(start, gold_start) + nn.functional.cross_entropy(end, gold_end)) / 2, len(batch)

    def evaluate():
        scores = squad_scores(tuned.predict(dev, dev_windows), dev.gold())
        return scores["f1"], {"dev_exact_match": scores["exact_match"]}

    result = train_epochs(model, optimizer, batches=batches, loss=loss, evaluate=evaluate, scheduler=scheduler,
                          options=EpochOptions(max_epochs=options.epochs, patience=patience, grad_clip=1.0),
                          metric_name="dev_f1", log=log, description="span fine-tuning epoch")
    return tuned, result
