"""MASS: fragment, encoder input, decoder input and targets by brute force on a few sentences; the
fragment is ~50% of the sentence; a few steps lower the loss."""

from __future__ import annotations

import numpy as np
from pretraining_testkit import HAND_VOCAB, need_transformers

need_transformers()

import torch  # noqa: E402

from elmokit.pretraining.masking import MaskingRates, MaskingVocab  # noqa: E402
from elmokit.pretraining.models import build_model, preset  # noqa: E402
from elmokit.pretraining.seq2seq import mass, mass_example  # noqa: E402
from elmokit.text.subword_tokenizers import encode_words, wordpiece_from_vocab  # noqa: E402

SENTENCES = [["the", "cat", "sat", "on", "the", "mat", "."], ["a", "doggy", "!"], ["unbelievable"],
             ["the", "cats", "sat", "on", "a", "dog", "x", "x", "."]]


def test_fragment_and_decoder_by_brute_force():
    tokenizer = wordpiece_from_vocab(HAND_VOCAB)
    vocab = MaskingVocab.from_tokenizer(tokenizer)
    all_mask = MaskingRates(mask=1.0, random=0.0)
    for words in SENTENCES:
        ids = np.array(encode_words(tokenizer, words).input_ids)
        m = len(ids) - 2
        k = max(1, int(np.floor(0.5 * m + 0.5)))
        starts = set()
        for seed in range(60):
            x = mass_example(ids, vocab, np.random.default_rng(seed), rates=all_mask)
            u, end = x.fragment
            starts.add(u)
            assert end - u == k and 1 <= u and end <= len(ids) - 1
            for t in range(len(ids)):
                inside = u <= t < end
                assert x.input_ids[t] == (4 if inside else ids[t])  # [MASK] = 4 in the fragment only
                assert x.labels[t] == (ids[t] if inside else -100)
                expected = ids[t - 1] if u < t < end else 4  # fragment shifted right; [M] elsewhere
                assert x.decoder_input_ids[t] == expected
        assert starts == set(range(1, m - k + 2))  # every place the fragment fits


def test_fragment_is_half_and_80_10_10():
    tokenizer = wordpiece_from_vocab(HAND_VOCAB)
    vocab = MaskingVocab.from_tokenizer(tokenizer)
    rng = np.random.default_rng(0)
    decisions = []
    for n in range(1, 40):
        ids = np.array([2, *rng.integers(5, 20, size=n), 3])
        x = mass_example(ids, vocab, rng)
        u, end = x.fragment
        assert abs((end - u) - n / 2) <= 0.5
        inside = slice(u, end)
        decisions += [0 if a == 4 else (2 if a == b else 1) for a, b in zip(x.input_ids[inside], ids[inside])]
    decisions = np.array(decisions)
    assert abs((decisions == 0).mean() - 0.8) < 0.08 and (decisions == 1).mean() > 0.03


def test_a_few_steps_lower_the_loss():
    torch.set_num_threads(1)
    tokenizer = wordpiece_from_vocab(HAND_VOCAB)
    objective = mass(tokenizer)
    examples = [{"input_ids": encode_words(tokenizer, w).input_ids} for w in SENTENCES]
    batch = next(objective.batches(examples, batch_size=4, rng=np.random.default_rng(0)))
    assert batch["decoder_input_ids"].shape == batch["input_ids"].shape
    model = build_model("mass", preset("tiny", dropout=0.0), vocab_size=len(tokenizer), seed=0, pad_id=0)
    with torch.no_grad():  # the masked-rows loss equals the library's own full loss
        full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     decoder_input_ids=batch["decoder_input_ids"], decoder_attention_mask=batch["decoder_attention_mask"],
                     labels=batch["labels"]).loss
        assert torch.allclose(objective.loss(model, batch).loss, full, atol=1e-5)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        out = objective.loss(model, batch)
        out.loss.backward()
        optimizer.step()
        losses.append(float(out.loss.detach()))
    assert losses[-1] < 0.6 * losses[0], losses
