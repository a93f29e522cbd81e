"""UniLM: the four self-attention masks against their definitions, enforced in the model (perturbing a
token a position may not see leaves its output unchanged bit for bit), the mode mix, loss goes down."""

from __future__ import annotations

import numpy as np
import pytest
from pretraining_testkit import HAND_VOCAB, assert_proportion, need_transformers

need_transformers()

import torch  # noqa: E402

from elmokit.pretraining import unilm as U  # noqa: E402
from elmokit.pretraining.models import build_model, preset  # noqa: E402
from elmokit.text.subword_tokenizers import wordpiece_from_vocab  # noqa: E402


def _expected(mode, n, src):
    """The masks written out pair by pair."""
    out = np.zeros((n, n), dtype=bool)
    for i in range(n):
        for j in range(n):
            out[i, j] = {U.BIDIRECTIONAL: True, U.LEFT_TO_RIGHT: j <= i, U.RIGHT_TO_LEFT: j >= i,
                         U.SEQ2SEQ: j < src or (i >= src and j <= i)}[mode]
    return out


@pytest.mark.parametrize("mode", range(4))
def test_mask_matches_the_definition(mode):
    got = U.attention_mask(mode, 7, 4, 9)
    assert np.array_equal(got[:7, :7], _expected(mode, 7, 4))
    assert not got[:7, 7:].any() and not got[7:, :7].any() and np.array_equal(got[7:, 7:], np.eye(2, dtype=bool))


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    tokenizer = wordpiece_from_vocab(HAND_VOCAB)
    objective = U.unilm(tokenizer, max_tokens=32)
    model = build_model("unilm", preset("tiny", dropout=0.0, hidden=20, heads=2, intermediate=36), vocab_size=len(tokenizer),
                        seed=0, pad_id=0).eval()
    return tokenizer, objective, model


@pytest.mark.parametrize("mode", range(4))
def test_model_sees_only_what_the_mask_allows(setup, mode):
    _, objective, model = setup
    rng = np.random.default_rng(mode)
    rows = [objective.example({"a": [5, 6, 7, 11], "b": [12, 13, 14]}, rng, mode=mode),
            objective.example({"a": [16, 17], "b": [18, 15]}, rng, mode=mode)]
    batch = objective.collate(rows)
    assert batch["input_ids"].shape == (2, 10 if mode in (U.BIDIRECTIONAL, U.SEQ2SEQ) else 9)
    types = set(batch["token_type_ids"][0].tolist())
    assert types == set(U.MODE_TOKEN_TYPES[mode])
    with torch.no_grad():
        base = objective.hidden(model, batch)
    n = len(rows[0]["input_ids"])
    allowed = U.attention_mask(mode, n, rows[0]["source_length"])
    for j in range(n):
        perturbed = dict(batch, input_ids=batch["input_ids"].clone())
        perturbed["input_ids"][0, j] = 19 if batch["input_ids"][0, j] != 19 else 5
        with torch.no_grad():
            out = objective.hidden(model, perturbed)
        for i in range(n):
            assert torch.equal(out[0, i], base[0, i]) == (not allowed[i, j]), (mode, i, j)
        assert torch.equal(out[1], base[1])


def test_a_segment_splits_at_the_middle_word():
    example = {"input_ids": [2, 5, 6, 7, 8, 9, 10, 11, 3], "word_ids": [None, 0, 0, 1, 2, 2, 2, 3, None]}
    assert U.source_and_target(example) == ([5, 6, 7], [8, 9, 10, 11])
    assert U.source_and_target({"a": [5], "b": [6, 7]}) == ([5], [6, 7])


def test_a_one_token_text_trains_without_seq2seq(setup):
    """A one-token segment (a one-word line of a book) has no target: seq2seq is never drawn for
    it and the other modes keep their relative rates (1/2, 1/4, 1/4); before, it stopped the run."""
    _, objective, _ = setup
    one = {"input_ids": [2, 9, 3], "word_ids": [None, 0, None]}
    assert U.source_and_target(one) == ([9], [])
    rng = np.random.default_rng(0)
    modes = np.concatenate([b["mode"].numpy() for b in objective.batches([one] * 3000, batch_size=7, rng=rng)])
    assert not (modes == U.SEQ2SEQ).any()
    for mode, p in ((U.BIDIRECTIONAL, 0.5), (U.LEFT_TO_RIGHT, 0.25), (U.RIGHT_TO_LEFT, 0.25)):
        assert_proportion(int((modes == mode).sum()), len(modes), p, U.MODE_NAMES[mode])
    with pytest.raises(ValueError, match="at least one token"):
        U.source_and_target({"input_ids": [2, 3], "word_ids": [None, None]})


def test_modes_are_mixed_as_the_paper_says(setup):
    _, objective, _ = setup
    rng = np.random.default_rng(0)
    examples = [{"a": [5, 6, 7], "b": [11, 12]}] * 3000
    modes = np.concatenate([b["mode"].numpy() for b in objective.batches(examples, batch_size=7, rng=rng)])
    for mode, p in enumerate(U.MODE_PROBABILITIES):
        assert_proportion(int((modes == mode).sum()), len(modes), p, U.MODE_NAMES[mode])
    assert len(set(modes[:7].tolist())) > 1  # mixed within a batch


def test_a_few_steps_lower_the_loss(setup):
    tokenizer, objective, _ = setup
    rng = np.random.default_rng(3)
    examples = [{"a": list(rng.integers(5, 20, size=6)), "b": list(rng.integers(5, 20, size=5))} for _ in range(8)]
    batch = next(objective.batches(examples, batch_size=8, rng=rng))
    model = build_model("unilm", preset("tiny", dropout=0.0), vocab_size=len(tokenizer), seed=0, pad_id=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        out = objective.loss(model, batch)
        out.loss.backward()
        optimizer.step()
        losses.append(float(out.loss.detach()))
    assert losses[-1] < 0.6 * losses[0], losses
