"""A linear-chain conditional random field (Lafferty et al. 2001), written by hand in torch.

The output layer of the sequence tagger (Peters et al. 2018 use a BiLSTM-CRF for NER, after
Lample et al. 2016). For a label sequence y_1..y_n of a sentence with emission scores e,

    score(y) = start[y_1] + sum_t e_t[y_t] + sum_{t>1} A[y_{t-1}, y_t] + end[y_n]
    p(y | x) = exp(score(y)) / Z,   log Z = logsumexp over all label sequences (forward algorithm)

and decoding is the Viterbi argmax. Everything works in log space, batched, with a (B, T) mask
that is True on a prefix of each row (variable lengths in one batch).

Transition constraints (``allowed_transitions``) encode a tagging scheme (BIO/IOB2, BIOES, IOB1):
a forbidden transition (O -> I-PER, B-PER -> I-LOC, start -> I-x, ...) gets the large negative
constant ``FORBIDDEN`` added to its score, in the partition function as well as in decoding, so
forbidden sequences carry no probability mass (exp(-1e4) underflows to exactly 0) and are never
decoded. This is AllenNLP's ``ConditionalRandomField(constraints=...)`` semantics.

Shapes: B batch, T tokens, N labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

# Added to a forbidden transition's score; exp(FORBIDDEN) == 0 in float32 and float64.
FORBIDDEN = -10000.0

SCHEMES = ("BIO", "IOB2", "BIOES", "IOBES", "IOB1")


def _split_label(label: str, scheme: str) -> tuple[str, str]:
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', '')."""
    if label == "O":
        return "O", ""
    prefix, sep, entity = label.partition("-")
    valid = {"BIO": "BI", "IOB2": "BI", "IOB1": "BI", "BIOES": "BIES", "IOBES": "BIES"}[scheme]
    if not sep or len(prefix) != 1 or prefix not in valid or not entity:
        raise ValueError(f"label {label!r} does not fit the {scheme} scheme (expected O or one of "
                         f"{', '.join(p + '-TYPE' for p in valid)})")
    return prefix, entity


def _allowed(scheme: str, from_prefix: str, from_entity: str, to_prefix: str, to_entity: str) -> bool:
    """One transition of ``scheme``; 'START' and 'END' are the sentence boundaries."""
    same = from_entity == to_entity
    if scheme in ("BIO", "IOB2"):
        if to_prefix == "END":
            return True
        if to_prefix in ("O", "B"):
            return True
        # to I-x: only inside a chunk of the same type
        return from_prefix in ("B", "I") and same
    if scheme in ("BIOES", "IOBES"):
        if from_prefix == "START":
            return to_prefix in ("O", "B", "S")
        if to_prefix == "END":
            return from_prefix in ("O", "E", "S")
        if from_prefix in ("O", "E", "S"):
            return to_prefix in ("O", "B", "S")
        # inside a chunk (after B-x or I-x): only I-x or E-x of the same type
        return to_prefix in ("I", "E") and same
    if scheme == "IOB1":
        # I-x opens or continues a chunk; B-x only separates two adjacent chunks of type x.
        if to_prefix in ("END", "O", "I"):
            return True
        return from_prefix in ("B", "I") and same
    raise ValueError(f"unknown tagging scheme {scheme!r}; known: {', '.join(SCHEMES)}")


def allowed_transitions(labels: Sequence[str], scheme: str) -> torch.Tensor:
    """The transitions a tagging scheme allows, as a bool matrix of shape (N + 2, N + 2).

    Rows are the label transitioned from, columns the label transitioned to; index N is the
    sentence start and N + 1 the sentence end (only row N and column N + 1 are meaningful for them).
    ``scheme``: "BIO" (= "IOB2"), "BIOES" (= "IOBES") or "IOB1". Every label must be "O" or
    "P-TYPE" with a prefix P of the scheme, else ValueError names it.
    """
    scheme = scheme.upper()
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tagging scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    parts = [_split_label(label, scheme) for label in labels]
    n = len(labels)
    start, end = n, n + 1
    allowed = torch.zeros(n + 2, n + 2, dtype=torch.bool)
    for i, (fp, fe) in enumerate(parts):
        for j, (tp, te) in enumerate(parts):
            allowed[i, j] = _allowed(scheme, fp, fe, tp, te)
        allowed[start, i] = _allowed(scheme, "START", "", fp, fe)
        allowed[i, end] = _allowed(scheme, fp, fe, "END", "")
    return allowed


class ConditionalRandomField(nn.Module):
    """Linear-chain CRF over ``num_labels`` labels with start/end transitions.

    Args:
        num_labels: N.
        constraints: optional bool (N + 2, N + 2) from ``allowed_transitions``; forbidden
            transitions get ``FORBIDDEN`` added, in training and in decoding.
    """

    def __init__(self, num_labels: int, constraints: torch.Tensor | None = None) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.transitions = nn.Parameter(torch.empty(num_labels, num_labels))  # A[from, to]
        self.start_transitions = nn.Parameter(torch.zeros(num_labels))
        self.end_transitions = nn.Parameter(torch.zeros(num_labels))
        nn.init.xavier_normal_(self.transitions)
        if constraints is None:
            constraints = torch.ones(num_labels + 2, num_labels + 2, dtype=torch.bool)
        if tuple(constraints.shape) != (num_labels + 2, num_labels + 2):
            raise ValueError(f"constraints must have shape ({num_labels + 2}, {num_labels + 2}), "
                             f"got {tuple(constraints.shape)}")
        self.register_buffer("constraints", constraints.to(torch.bool), persistent=False)

    def _scores(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Transition, start and end scores with the constraint penalty added."""
        n = self.num_labels
        penalty = (~self.constraints).to(dtype) * FORBIDDEN  # (N + 2, N + 2)
        transitions = self.transitions.to(dtype) + penalty[:n, :n]  # (N, N)
        start = self.start_transitions.to(dtype) + penalty[n, :n]  # (N,)
        end = self.end_transitions.to(dtype) + penalty[:n, n + 1]  # (N,)
        return transitions, start, end

    @staticmethod
    def _check(emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if emissions.dim() != 3 or mask.shape != emissions.shape[:2]:
            raise ValueError(f"emissions (B, T, N) and mask (B, T) expected, got {tuple(emissions.shape)} "
                             f"and {tuple(mask.shape)}")
        mask = mask.to(torch.bool)
        if mask.shape[1] == 0 or not bool(mask[:, 0].all()):
            raise ValueError("every sequence needs at least one token (mask[:, 0] must be True)")
        return mask

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log Z per sentence by the forward algorithm: emissions (B, T, N), mask (B, T) -> (B,)."""
        mask = self._check(emissions, mask)
        transitions, start, end = self._scores(emissions.dtype)
        alpha = start + emissions[:, 0]  # (B, N): log-sum of every path ending in each label
        for t in range(1, emissions.shape[1]):
            # alpha_t[j] = logsumexp_i(alpha_{t-1}[i] + A[i, j]) + e_t[j]
            step = torch.logsumexp(alpha.unsqueeze(2) + transitions.unsqueeze(0), dim=1) + emissions[:, t]
            alpha = torch.where(mask[:, t].unsqueeze(1), step, alpha)  # finished rows keep their alpha
        return torch.logsumexp(alpha + end, dim=1)

    def path_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """score(y) of the given label sequences: emissions (B, T, N), tags (B, T) -> (B,)."""
        mask = self._check(emissions, mask)
        transitions, start, end = self._scores(emissions.dtype)
        tags = tags.masked_fill(~mask, 0)  # padding may hold any value
        maskf = mask.to(emissions.dtype)
        emitted = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # (B, T)
        score = start[tags[:, 0]] + (emitted * maskf).sum(1)
        if tags.shape[1] > 1:
            moves = transitions[tags[:, :-1], tags[:, 1:]]  # (B, T - 1)
            score = score + (moves * maskf[:, 1:]).sum(1)
        last = tags.gather(1, (mask.sum(1) - 1).unsqueeze(1)).squeeze(1)  # (B,)
        return score + end[last]

    def neg_log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """-log p(tags | x) per sentence, (B,)."""
        return self.log_partition(emissions, mask) - self.path_score(emissions, tags, mask)

    def forward(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The training loss per sentence: ``neg_log_likelihood``, (B,)."""
        return self.neg_log_likelihood(emissions, tags, mask)

    @torch.no_grad()
    def viterbi_decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The highest-scoring label sequence of each sentence (its length given by the mask)."""
        mask = self._check(emissions, mask)
        transitions, start, end = self._scores(emissions.dtype)
        batch, steps, n = emissions.shape
        stay = torch.arange(n, device=emissions.device).expand(batch, n)
        best = start + emissions[:, 0]  # (B, N): best path score ending in each label
        backpointers = []
        for t in range(1, steps):
            candidates = best.unsqueeze(2) + transitions.unsqueeze(0)  # (B, N from, N to)
            top, argtop = candidates.max(dim=1)
            active = mask[:, t].unsqueeze(1)
            best = torch.where(active, top + emissions[:, t], best)
            # on padding, point each label at itself so the backtrack passes through unchanged
            backpointers.append(torch.where(active, argtop, stay))
        label = (best + end).argmax(dim=1)  # (B,)
        path = [label]
        for pointers in reversed(backpointers):
            label = pointers.gather(1, label.unsqueeze(1)).squeeze(1)
            path.append(label)
        path = torch.stack(path[::-1], dim=1)  # (B, T)
        lengths = mask.sum(1).tolist()
        return [path[b, : lengths[b]].tolist() for b in range(batch)]


def tag_loss(crf: ConditionalRandomField | None, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over sentences of -log p(tags) under ``crf``, or without one the mean token cross-entropy (softmax)."""
    if crf is not None:
        return crf(emissions, tags, mask).mean()
    return nn.functional.cross_entropy(emissions[mask], tags[mask])


def decode_tags(crf: ConditionalRandomField | None, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """Each sentence's best tag ids: Viterbi under ``crf``, or without one the argmax per token."""
    if crf is not None:
        return crf.viterbi_decode(emissions, mask)
    best = emissions.argmax(-1)
    return [best[b, : int(n)].tolist() for b, n in enumerate(mask.sum(1))]
