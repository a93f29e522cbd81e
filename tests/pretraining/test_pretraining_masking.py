"""Masking schemes against independent oracles: exact budgets, binomial bands for the rates, the
clipped-geometric mean computed in closed form, whole words and spans checked position by position."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pretraining_testkit import Z, assert_proportion, synthetic_sequence

from elmokit.pretraining.masking import (
    IGNORE_INDEX,
    KEEP,
    MASK,
    RANDOM,
    DynamicMasking,
    MaskingVocab,
    mask_phrases,
    mask_spans,
    mask_tokens,
    mask_whole_words,
    nsp_pairs,
    pack_full_sentences,
    sample_span_lengths,
    span_length_probabilities,
    words_of,
)

VOCAB = MaskingVocab(size=211, mask_id=4, special_ids=frozenset({0, 1, 2, 3, 4}))


def _words(word_ids):
    """Oracle: positions grouped by word id, specials (None) left out (word ids unique per sequence here)."""
    groups: dict[int, list[int]] = {}
    for position, w in enumerate(word_ids):
        if w is not None:
            groups.setdefault(w, []).append(position)
    return list(groups.values())


def _expected_budget(n: int) -> int:
    return max(1, int(math.floor(0.15 * n + 0.5)))


def _check_consistent(ids, masked):
    """Labels are the original ids exactly at the units; outside the units the input is unchanged;
    each unit is all [MASK], all kept, or all random non-special ids, as its decision says."""
    in_units = sorted(p for unit in masked.units for p in unit)
    assert len(in_units) == len(set(in_units))
    labelled = np.flatnonzero(masked.labels != IGNORE_INDEX)
    assert labelled.tolist() == in_units
    assert np.array_equal(masked.labels[labelled], ids[labelled])
    outside = np.setdiff1d(np.arange(len(ids)), labelled)
    assert np.array_equal(masked.input_ids[outside], ids[outside])
    for unit, decision in zip(masked.units, masked.decisions, strict=True):
        values = masked.input_ids[unit]
        if decision == MASK:
            assert (values == VOCAB.mask_id).all()
        elif decision == KEEP:
            assert np.array_equal(values, ids[unit])
        else:
            assert decision == RANDOM and not np.isin(values, list(VOCAB.special_ids)).any()


def test_bert_masks_exactly_the_budget_never_a_special_and_each_position_equally():
    rng = np.random.default_rng(0)
    ids, word_ids = synthetic_sequence(np.random.default_rng(1), 12)
    ids[5] = 0  # a [PAD] in the middle: special ids are never masked whatever their word id
    n = int(sum(w is not None for w in word_ids)) - 1
    k = _expected_budget(n)
    draws = 4000
    chosen = np.zeros(len(ids), dtype=np.int64)
    for _ in range(draws):
        masked = mask_tokens(ids, VOCAB, rng, word_ids=word_ids)
        _check_consistent(ids, masked)
        assert len(masked.units) == k and all(len(u) == 1 for u in masked.units)
        chosen[np.flatnonzero(masked.labels != IGNORE_INDEX)] += 1
    assert chosen[0] == chosen[-1] == chosen[5] == 0
    candidates = [p for p, w in enumerate(word_ids) if w is not None and p != 5]
    for p in candidates:  # each of the n candidates is chosen with probability k / n
        assert_proportion(int(chosen[p]), draws, k / n, f"position {p}")


def test_budget_is_round_half_up_at_least_one_and_capped():
    rng = np.random.default_rng(0)
    for n, expected in ((1, 1), (3, 1), (10, 2), (20, 3), (30, 5), (100, 15), (110, 17)):
        ids = np.array([2, *range(5, 5 + n), 3])
        assert len(mask_tokens(ids, VOCAB, rng).units) == expected, n
    ids = np.array([2, *range(5, 205), 3])
    assert len(mask_tokens(ids, VOCAB, rng, max_predictions=20).units) == 20
    assert mask_tokens(np.array([2, 3]), VOCAB, rng).units == []


SCHEMES = {
    "tokens": lambda ids, w, rng: mask_tokens(ids, VOCAB, rng, word_ids=w),
    "whole_words": lambda ids, w, rng: mask_whole_words(ids, w, VOCAB, rng),
    "spans": lambda ids, w, rng: mask_spans(ids, w, VOCAB, rng),
    "phrases": lambda ids, w, rng: mask_phrases(ids, w, [(0, 2), (3, 4), (5, 8), (9, 11), (12, 13), (14, 17)], VOCAB, rng),
}


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_80_10_10_is_decided_once_per_unit(scheme):
    rng = np.random.default_rng(2)
    shapes = np.random.default_rng(3)
    decisions = []
    for _ in range(1500):
        ids, word_ids = synthetic_sequence(shapes, 20)
        masked = SCHEMES[scheme](ids, word_ids, rng)
        _check_consistent(ids, masked)
        decisions += masked.decisions
    n = len(decisions)
    assert n > 1500
    for code, p in ((MASK, 0.8), (RANDOM, 0.1), (KEEP, 0.1)):
        assert_proportion(decisions.count(code), n, p, f"{scheme} decision {code}")


def test_random_replacements_are_uniform_over_the_non_special_vocabulary():
    rng = np.random.default_rng(4)
    ids = np.array([2, *range(5, 105), 3])
    drawn = []
    for _ in range(3000):
        masked = mask_tokens(ids, VOCAB, rng)
        drawn += [int(masked.input_ids[u[0]]) for u, d in zip(masked.units, masked.decisions) if d == RANDOM]
    counts = np.bincount(drawn, minlength=VOCAB.size)
    assert counts[:5].sum() == 0
    expected = len(drawn) / (VOCAB.size - 5)
    chi2 = float(((counts[5:] - expected) ** 2 / expected).sum())
    dof = VOCAB.size - 6
    assert chi2 < dof + Z * math.sqrt(2 * dof), (chi2, dof)  # chi-square's mean dof, sd sqrt(2 dof)


def test_whole_word_masking_never_splits_a_word_and_meets_the_budget():
    rng = np.random.default_rng(5)
    shapes = np.random.default_rng(6)
    total_masked = total_tokens = 0
    for _ in range(500):
        ids, word_ids = synthetic_sequence(shapes, int(shapes.integers(3, 30)))
        masked = mask_whole_words(ids, word_ids, VOCAB, rng)
        labelled = set(np.flatnonzero(masked.labels != IGNORE_INDEX).tolist())
        words = _words(word_ids)
        for word in words:
            assert set(word) <= labelled or not set(word) & labelled, word
        assert sorted(map(tuple, masked.units)) == sorted(tuple(w) for w in words if set(w) <= labelled)
        n = sum(map(len, words))
        k = _expected_budget(n)
        assert len(labelled) <= k
        if any(len(w) == 1 for w in words if not set(w) & labelled):  # a one-piece word was left: it fit
            assert len(labelled) == k
        total_masked += len(labelled)
        total_tokens += n
    assert 0.13 < total_masked / total_tokens <= 0.155


def test_words_are_runs_so_word_ids_may_restart_in_a_second_segment():
    ids = np.array([2, 10, 11, 12, 3, 13, 14, 3])
    word_ids = [None, 0, 0, 1, None, 0, 1, None]
    assert words_of(ids, word_ids, VOCAB) == [[1, 2], [3], [5], [6]]


def _truncated_geometric_mean(p: float, m: int) -> float:
    """Closed form of E[l] for P(l) ∝ p (1-p)^(l-1), l = 1..m: the derivative of the geometric series."""
    q = 1 - p
    return (1 - (m + 1) * q**m + m * q ** (m + 1)) / (p * (1 - q**m))


def test_span_lengths_follow_the_geometric_distribution_renormalised_over_1_to_10():
    mean = _truncated_geometric_mean(0.2, 10)
    assert abs(mean - 3.8) < 0.01  # SpanBERT §3.1: "mean span length = 3.8"
    clipped = sum((1 - 0.2) ** k for k in range(10))  # the tail piled onto 10 instead: not the paper's
    assert abs(clipped - 4.46) < 0.01
    q = 0.8
    probabilities = np.array([0.2 * q ** (l - 1) for l in range(1, 11)]) / (1 - q**10)
    assert np.allclose(span_length_probabilities(0.2, 10), probabilities)
    n = 20000
    lengths = sample_span_lengths(np.random.default_rng(7), n)
    assert lengths.min() >= 1 and lengths.max() <= 10
    variance = float((probabilities * np.arange(1, 11) ** 2).sum() - mean**2)
    assert abs(lengths.mean() - mean) < Z * math.sqrt(variance / n)
    for l in range(1, 11):
        assert_proportion(int((lengths == l).sum()), n, float(probabilities[l - 1]), f"length {l}")


def test_spans_are_contiguous_whole_words_with_boundary_targets():
    rng = np.random.default_rng(8)
    shapes = np.random.default_rng(9)
    span_words = []
    for _ in range(300):
        ids, word_ids = synthetic_sequence(shapes, int(shapes.integers(5, 60)))
        # a second segment: [SEP] then more words, word ids restarting; spans must not cross it
        ids2, word_ids2 = synthetic_sequence(shapes, int(shapes.integers(2, 10)))
        ids, word_ids = np.concatenate([ids, ids2[1:]]), [*word_ids, *(None if w is None else 1000 + w for w in word_ids2[1:])]
        masked = mask_spans(ids, word_ids, VOCAB, rng)
        _check_consistent(ids, masked)
        words = _words(word_ids)
        word_of = {p: i for i, w in enumerate(words) for p in w}
        n = sum(map(len, words))
        k = _expected_budget(n)
        labelled = np.flatnonzero(masked.labels != IGNORE_INDEX)
        assert len(labelled) >= k and len(labelled) < k + 3  # met; over by less than one word (<= 3 pieces)
        for unit in masked.units:
            assert unit == list(range(unit[0], unit[-1] + 1))  # contiguous: no special inside
            covered = sorted({word_of[p] for p in unit})
            assert [p for w in covered for p in words[w]] == unit  # whole words
            assert len(covered) <= 10
            span_words.append(len(covered))
            assert (masked.span_left[unit] == unit[0] - 1).all() and (masked.span_right[unit] == unit[-1] + 1).all()
            assert masked.span_offset[unit].tolist() == list(range(len(unit)))
        outside = masked.labels == IGNORE_INDEX
        assert (masked.span_left[outside] == -1).all() and (masked.span_offset[outside] == -1).all()
    assert 2.0 < np.mean(span_words) < 3.8  # realised spans are cut by the budget and by other spans


def test_phrase_masking_masks_only_whole_given_spans():
    rng = np.random.default_rng(10)
    ids, word_ids = synthetic_sequence(np.random.default_rng(11), 30)
    spans = [(0, 3), (4, 5), (6, 10), (12, 14), (20, 23), (25, 30)]
    words = _words(word_ids)
    span_positions = [[p for w in words[a:b] for p in w] for a, b in spans]
    for _ in range(200):
        masked = mask_phrases(ids, word_ids, spans, VOCAB, rng)
        assert all(unit in span_positions for unit in masked.units)
        assert len(np.flatnonzero(masked.labels != IGNORE_INDEX)) <= _expected_budget(sum(map(len, words)))
    with pytest.raises(ValueError, match="overlaps"):
        mask_phrases(ids, word_ids, [(0, 3), (2, 4)], VOCAB, rng)
    with pytest.raises(ValueError, match="not a word range"):
        mask_phrases(ids, word_ids, [(28, 31)], VOCAB, rng)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_masking_is_a_function_of_the_generator_state(scheme):
    ids, word_ids = synthetic_sequence(np.random.default_rng(12), 25)
    a = SCHEMES[scheme](ids, word_ids, np.random.default_rng(42))
    b = SCHEMES[scheme](ids, word_ids, np.random.default_rng(42))
    assert np.array_equal(a.input_ids, b.input_ids) and np.array_equal(a.labels, b.labels) and a.decisions == b.decisions
    others = [SCHEMES[scheme](ids, word_ids, np.random.default_rng(s)) for s in range(43, 48)]
    assert any(not np.array_equal(a.labels, o.labels) for o in others)


def test_dynamic_masking_redraws_every_time_and_replays_from_its_seed():
    ids, word_ids = synthetic_sequence(np.random.default_rng(13), 40)
    first, second = DynamicMasking(VOCAB, seed=3), DynamicMasking(VOCAB, seed=3)
    stream = [first(ids, word_ids) for _ in range(5)]
    replay = [second(ids, word_ids) for _ in range(5)]
    assert all(np.array_equal(a.input_ids, b.input_ids) for a, b in zip(stream, replay))
    label_sets = {tuple(np.flatnonzero(m.labels != IGNORE_INDEX)) for m in stream}
    assert len(label_sets) == 5  # the same sequence seen five times: five different masks


def test_full_sentence_packing_against_a_brute_force_restatement():
    rng = np.random.default_rng(14)
    documents = [[list(rng.integers(10, 99, size=int(rng.integers(1, 9)))) for _ in range(int(rng.integers(1, 6)))]
                 for _ in range(12)]
    documents[3].append(list(range(10, 40)))  # longer than a pack: cut
    max_tokens, bos, eos, sep = 12, 0, 2, 7
    packs = list(pack_full_sentences(documents, max_tokens, bos_id=bos, eos_id=eos, doc_separator_id=sep))
    assert all(p[0] == bos and p[-1] == eos and 3 <= len(p) <= max_tokens for p in packs)
    bodies = [p[1:-1] for p in packs]
    # everything in order, the separator exactly at the document boundaries inside a pack
    stream = [t for body in bodies for t in body]
    expected = []
    for d, document in enumerate(documents):
        expected += [("doc", d)] + [t for s in document for t in s]
    kept = [t for t in stream if t != sep]
    assert kept == [t for t in expected if not isinstance(t, tuple)]
    # greedy: a pack ends only when the next sentence (with its separator) would not fit
    sentences = [(d, list(s)) for d, doc in enumerate(documents) for s in doc]
    position = 0
    for body in bodies:
        used, last_doc = 0, None
        while position < len(sentences) and body[used:] != []:
            d, sentence = sentences[position]
            if last_doc is not None and d != last_doc:
                assert body[used] == sep
                used += 1
            chunk = body[used: used + len(sentence)]
            if chunk != sentence:  # a cut sentence: the rest starts the next pack
                assert len(sentence) > max_tokens - 2 - used and chunk == sentence[: len(chunk)]
                sentences[position] = (d, sentence[len(chunk):])
                used += len(chunk)
                break
            used, last_doc, position = used + len(sentence), d, position + 1
        assert used == len(body)
        if position < len(sentences) and last_doc is not None:
            d, nxt = sentences[position]
            assert used + len(nxt) + (d != last_doc) > max_tokens - 2  # it would not have fit


def test_nsp_pairs_are_bert_pairs_with_half_is_next():
    rng = np.random.default_rng(15)
    documents = [[list(range(10 + 100 * d + 10 * s, 10 + 100 * d + 10 * s + int(rng.integers(2, 8))))
                  for s in range(int(rng.integers(2, 9)))] for d in range(60)]
    cls_id, sep_id, max_tokens = 2, 3, 24
    pairs = []
    for _ in range(8):
        pairs += nsp_pairs(documents, max_tokens=max_tokens, cls_id=cls_id, sep_id=sep_id, rng=rng)
    for pair in pairs:
        ids, types = pair.input_ids, pair.token_type_ids
        assert len(ids) <= max_tokens and len(ids) == len(types) == len(pair.word_ids)
        first_sep = ids.index(sep_id)
        assert ids[0] == cls_id and ids[-1] == sep_id and ids.count(sep_id) == 2
        assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        assert [w is None for w in pair.word_ids] == [t in (cls_id, sep_id) for t in ids]
        a, b = ids[1:first_sep], ids[first_sep + 1: -1]
        (da, a0, a1), (db, b0, b1) = pair.a_source, pair.b_source
        source_a = [t for s in documents[da][a0:a1] for t in s]
        source_b = [t for s in documents[db][b0:b1] for t in s]
        assert _is_sub(a, source_a) and _is_sub(b, source_b)  # truncation removes from the ends only
        if pair.next_sentence_label == 0:
            assert db == da and b0 == a1  # B is what follows A
        else:
            assert db != da
    free = [p for p in pairs if not p.forced_random]
    assert len(free) > 500
    assert_proportion(sum(p.next_sentence_label == 0 for p in free), len(free), 0.5, "IsNext")
    assert all(p.next_sentence_label == 1 for p in pairs if p.forced_random)


def _is_sub(part: list, whole: list) -> bool:
    return any(whole[i: i + len(part)] == part for i in range(len(whole) - len(part) + 1))
