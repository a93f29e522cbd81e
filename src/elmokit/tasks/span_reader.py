"""A small DrQA-style document reader on frozen features (Chen et al. 2017, §3.2), for SQuAD.

Legend: B questions, T passage words, Q question words, L layers, D representation dim, H LSTM size.

    p_i = ELMo of passage word i, q_j = ELMo of question word j (one scalar mix each, eq. 1)  (B, T, D), (B, Q, D)
    f_align(p_i) = sum_j a_ij q_j,  a_ij = softmax_j(relu(W p_i) . relu(W q_j))   (DrQA's aligned question embedding)
    passage:  BiLSTM([p_i; f_align(p_i)])                                          (B, T, 2H)
    question: BiLSTM(q_j), then q = sum_j b_j q_j, b_j = softmax_j(w . q_j)        (B, 2H)
    P_start(i) ∝ exp(p_i W_s q),  P_end(i) ∝ exp(p_i W_e q)                       (B, T) each

trained by the negative log-likelihood of the gold start and end; the answer is ``best_span`` with at
most ``max_answer_words`` words (DrQA: 15). Deviations, stated: no word vectors, exact-match or token
features beside the representation (the table measures it), one-layer BiLSTMs, small sizes.
Training runs on the engine's epoch loop with dev early stopping on the official F1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from elmokit.engine.epochs import EpochOptions, EpochResult, seed_everything, shuffled_batches, train_epochs
from elmokit.nn.scalar_mix import ScalarMix
from elmokit.tasks.metrics import squad_scores
from elmokit.tasks.squad_data import SquadData, best_span


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim)


class DocumentReader(nn.Module):
    def __init__(self, num_layers: int, dim: int, *, hidden_dim: int = 32, dropout: float = 0.1) -> None:
        super().__init__()
        self.passage_mix = ScalarMix(num_layers)
        self.question_mix = ScalarMix(num_layers)
        self.align = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)
        self.passage_rnn = nn.LSTM(2 * dim, hidden_dim, batch_first=True, bidirectional=True)
        self.question_rnn = nn.LSTM(dim, hidden_dim, batch_first=True, bidirectional=True)
        self.question_weight = nn.Linear(2 * hidden_dim, 1)
        self.start = nn.Bilinear(2 * hidden_dim, 2 * hidden_dim, 1)
        self.end = nn.Bilinear(2 * hidden_dim, 2 * hidden_dim, 1)

    @staticmethod
    def _run(rnn: nn.LSTM, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(1).clamp_min(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
        out, _ = rnn(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=mask.shape[1])[0]

    def forward(self, passage: tuple[torch.Tensor, torch.Tensor], question: tuple[torch.Tensor, torch.Tensor]):
        """(layers (B, L, T, D), mask (B, T)) of passages and of questions -> start, end scores (B, T) (-inf at padding)."""
        (p_layers, p_mask), (q_layers, q_mask) = passage, question
        p = self.dropout(self.passage_mix(p_layers.transpose(0, 1), p_mask))  # (B, T, D)
        q = self.dropout(self.question_mix(q_layers.transpose(0, 1), q_mask))  # (B, Q, D)
        affinity = torch.relu(self.align(p)) @ torch.relu(self.align(q)).transpose(1, 2)  # (B, T, Q)
        aligned = _masked_softmax(affinity, q_mask.unsqueeze(1)) @ q  # (B, T, D): f_align
        p_enc = self.dropout(self._run(self.passage_rnn, torch.cat([p, aligned], -1), p_mask))  # (B, T, 2H)
        q_enc = self._run(self.question_rnn, q, q_mask)  # (B, Q, 2H)
        b = _masked_softmax(self.question_weight(q_enc).squeeze(-1), q_mask)  # (B, Q)
        q_vec = (b.unsqueeze(-1) * q_enc).sum(1)  # (B, 2H)
        q_rep = q_vec.unsqueeze(1).expand(-1, p_enc.shape[1], -1).contiguous()  # (B, T, 2H)
        start = self.start(p_enc, q_rep).squeeze(-1).masked_fill(~p_mask, float("-inf"))
        end = self.end(p_enc, q_rep).squeeze(-1).masked_fill(~p_mask, float("-inf"))
        return start, end

    def penalty(self, coefficient: float = 0.001) -> torch.Tensor:
        return self.passage_mix.l2_penalty(coefficient) + self.question_mix.l2_penalty(coefficient)


@dataclass
class SquadFeatures:
    """Feature sources of the paragraphs and of the questions of a ``SquadData`` (row i: paragraph i /
    question i), each with ``.batch(indices) -> (layers (B, L, T, D), mask (B, T))``."""

    data: SquadData
    paragraphs: object
    questions: object

    def batch(self, indices: Sequence[int]):
        indices = list(indices)
        passage = self.paragraphs.batch([self.data.questions[i].paragraph for i in indices])
        return passage, self.questions.batch(indices)


@dataclass
class Reader:
    model: DocumentReader
    max_answer_words: int = 15

    @torch.no_grad()
    def predict(self, features: SquadFeatures, *, batch_size: int = 32) -> dict[str, str]:
        """{question id: answer text} for every question of ``features.data``."""
        self.model.eval()
        data, out = features.data, {}
        for s in range(0, len(data), batch_size):
            indices = list(range(s, min(s + batch_size, len(data))))
            passage, question = features.batch(indices)
            start, end = self.model(passage, question)
            for i, (a, b) in zip(indices, best_span(start, end, passage[1], self.max_answer_words)):
                q = data.questions[i]
                out[q.id] = data.paragraphs[q.paragraph].text(a, b)
        return out


def train_reader(train: SquadFeatures, dev: SquadFeatures, *, num_layers: int, dim: int, max_epochs: int = 10,
                 patience: int | None = 3, batch_size: int = 32, learning_rate: float = 2e-3, seed: int = 0,
                 hidden_dim: int = 32, dropout: float = 0.1, max_answer_words: int = 15,
                 log=None) -> tuple[Reader, EpochResult]:
    """Train on the questions of ``train`` whose answer aligns to words; early stopping on dev F1."""
    seed_everything(seed)
    rng = np.random.default_rng(seed)
    reader = Reader(DocumentReader(num_layers, dim, hidden_dim=hidden_dim, dropout=dropout), max_answer_words)
    model = reader.model
    usable = [i for i, q in enumerate(train.data.questions) if q.span is not None]
    optimizer = torch.optim.Adamax(model.parameters(), lr=learning_rate)  # DrQA trains with Adamax

    def batches(epoch: int):
        return [[usable[i] for i in batch] for batch in shuffled_batches(len(usable), batch_size, rng)]

    def loss(indices):
        start, end = model(*train.batch(indices))
        gold = torch.tensor([train.data.questions[i].span for i in indices])  # (B, 2)
        nll = nn.functional.cross_entropy(start, gold[:, 0]) + nn.functional.cross_entropy(end, gold[:, 1])
        return nll + model.penalty(), len(indices)

    def evaluate():
        scores = squad_scores(reader.predict(dev), dev.data.gold())
        return scores["f1"], {"dev_exact_match": scores["exact_match"]}

    result = train_epochs(model, optimizer, batches=batches, loss=loss, evaluate=evaluate, metric_name="dev_f1",
                          options=EpochOptions(max_epochs=max_epochs, patience=patience, grad_clip=10.0), log=log,
                          description="reader epoch")
    return reader, result
