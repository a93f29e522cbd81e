"""WordPiece training is deterministic: the same lines give the same vocabulary file every time, and that
vocabulary is the one a brute-force re-statement of the trainer gives with its ties taken in the order of
the initial pieces' code points (``tokenizers.py``, module docstring: deterministic WordPiece training)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pretraining_testkit import need_transformers

need_transformers()

from elmokit.text.subword_tokenizers import WORDPIECE_SPECIALS, train_wordpiece  # noqa: E402

PREFIX = "##"


def _tied_lines(seed: int = 7, words: int = 60) -> list[str]:
    """Lines of random letter words, each word repeated 1-4 times: many pairs share a count (ties)."""
    rng = random.Random(seed)
    letters = "abcdefghijkLMN"
    vocabulary = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 6))) for _ in range(words)]
    tokens = [w for w in vocabulary for _ in range(rng.randint(1, 4))]
    rng.shuffle(tokens)
    return [" ".join(tokens[i:i + 9]) for i in range(0, len(tokens), 9)]


def _brute_force_wordpiece(lines: list[str], vocab_size: int, min_frequency: int) -> list[str]:
    """BPE with the ``##`` prefix, as tokenizers' trainer: ids = specials, characters, ``##c`` (each by code
    point), then one new id per merge; each step merges the pair of the highest count over all words,
    ties to the smallest (left id, right id), until ``vocab_size`` entries or no pair of ``min_frequency``."""
    counts = Counter(word for line in lines for word in line.split())
    chars = sorted({c for w in counts for c in w})
    inside = sorted({PREFIX + c for w in counts for c in w[1:]})
    vocab = [*WORDPIECE_SPECIALS, *chars, *inside]
    ids = {t: i for i, t in enumerate(vocab)}
    words = {w: [ids[w[0]]] + [ids[PREFIX + c] for c in w[1:]] for w in counts}
    while len(vocab) < vocab_size:
        pairs = Counter()
        for w, pieces in words.items():
            for pair in zip(pieces, pieces[1:]):
                pairs[pair] += counts[w]
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < min_frequency:
            break
        token = vocab[best[0]] + vocab[best[1]].removeprefix(PREFIX)
        if token not in ids:
            ids[token] = len(vocab)
            vocab.append(token)
        for w, pieces in words.items():
            merged, i = [], 0
            while i < len(pieces):
                if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == best:
                    merged.append(ids[token])
                    i += 2
                else:
                    merged.append(pieces[i])
                    i += 1
            words[w] = merged
    return vocab


def _vocab_list(tokenizer) -> list[str]:
    vocab = tokenizer.get_vocab()
    return sorted(vocab, key=vocab.__getitem__)


@pytest.mark.parametrize("vocab_size,min_frequency", [(47, 2), (61, 1)])
def test_wordpiece_vocabulary_equals_the_brute_force_trainer(vocab_size, min_frequency):
    lines = _tied_lines()
    expected = _brute_force_wordpiece(lines, vocab_size, min_frequency)
    assert len(expected) == vocab_size  # the cut falls among merges, where ties decide
    assert _vocab_list(train_wordpiece(lines, vocab_size=vocab_size, min_frequency=min_frequency)) == expected


def test_repeated_wordpiece_trainings_write_identical_files(tmp_path):
    """Before the fix, the hash order of the words gave a different file almost every time (in one process too)."""
    lines = _tied_lines(seed=3, words=80)
    files = []
    for k in range(6):
        train_wordpiece(iter(lines), tmp_path / str(k), vocab_size=70)  # an iterator is read twice: listed first
        files.append((tmp_path / str(k) / "tokenizer.json").read_bytes())
    assert all(f == files[0] for f in files[1:])
    tokenizer = train_wordpiece(lines, vocab_size=70)
    assert [tokenizer.convert_tokens_to_ids(t) for t in WORDPIECE_SPECIALS] == [0, 1, 2, 3, 4]
    assert set(tokenizer.all_special_tokens) == set(WORDPIECE_SPECIALS)  # the seeded pieces are not special
    ids = tokenizer("abc [MASK] Lab")["input_ids"]
    assert ids.count(4) == 1 and tokenizer.decode(ids, skip_special_tokens=True) == "abc Lab"
