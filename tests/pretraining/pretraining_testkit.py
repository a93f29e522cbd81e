"""Helpers for the pretraining tests: a hand-built WordPiece vocabulary, binomial tolerances."""

from __future__ import annotations

import math

import numpy as np
import pytest

# A vocabulary small enough to tokenise by hand: the specials at BERT's ids 0-4, then words and pieces.
HAND_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
              "the", "cat", "##s", "un", "##believ", "##able", "sat", "on", "mat", ".", "!", "a", "dog", "##gy", "x"]

# Z for the statistical checks: with fixed seeds they are deterministic; 4.5 sigma means a correct
# implementation under another seed would fail a given check with probability < 1e-5.
Z = 4.5


def binomial_tolerance(p: float, n: int, z: float = Z) -> float:
    """Half-width of the band a proportion of n Bernoulli(p) draws stays in (normal approximation)."""
    return z * math.sqrt(p * (1 - p) / n)


def assert_proportion(successes: int, n: int, p: float, what: str = "") -> None:
    observed = successes / n
    tolerance = binomial_tolerance(p, n)
    assert abs(observed - p) <= tolerance, f"{what}: {observed:.4f} vs {p} (tolerance {tolerance:.4f}, n={n})"


def synthetic_sequence(rng: np.random.Generator, n_words: int, *, vocab_low: int = 5, vocab_high: int = 200,
                       max_pieces: int = 3, cls_id: int = 2, sep_id: int = 3):
    """[CLS] + n_words words of 1..max_pieces pieces each + [SEP]: (ids, word_ids)."""
    ids, word_ids = [cls_id], [None]
    for w in range(n_words):
        for _ in range(int(rng.integers(1, max_pieces + 1))):
            ids.append(int(rng.integers(vocab_low, vocab_high)))
            word_ids.append(w)
    ids.append(sep_id)
    word_ids.append(None)
    return np.array(ids), word_ids


def need_transformers() -> None:
    """Skip unless the 'transformers' extra (transformers + tokenizers) is installed."""
    for name in ("transformers", "tokenizers"):
        pytest.importorskip(name, reason="needs the 'transformers' extra: pip install -e '.[transformers]'")


# ---- pretraining runs (tests/pretraining/test_pretraining_run.py) ---------------------------------

CORPUS_WORDS = ("the cat sat on a mat while dogs ran over hills and rivers under bright skies of long summer days "
                "Anna told Boris that unbelievable stories travel far").split()


def write_document_corpus(path, *, documents: int = 8, seed: int = 1) -> None:
    """Documents separated by blank lines, one paragraph a line, 1-4 sentences a paragraph (seeded)."""
    import random

    rng = random.Random(seed)
    lines = []
    for _ in range(documents):
        for _ in range(6):
            sentences = [" ".join(rng.choice(CORPUS_WORDS) for _ in range(rng.randint(3, 12))).capitalize()
                         + rng.choice([".", "!", "?"]) for _ in range(rng.randint(1, 4))]
            lines.append(" ".join(sentences))
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def pretrain_ddp_worker(rank: int, world_size: int, init_method: str, run_dir: str, corpus: str, config: dict) -> None:
    """One rank of the data-parallel pretraining test (run by torch.multiprocessing in a fresh process)."""
    import torch

    from elmokit.engine.distributed import DistributedContext
    from elmokit.pretraining.run import PretrainConfig, pretrain

    torch.set_num_threads(1)
    pretrain(run_dir, corpus=corpus, config=PretrainConfig.from_dict(config), command="ddp test", progress=False,
             context=DistributedContext(rank, world_size, rank), init_method=init_method, dist_timeout_s=60, device="cpu")
