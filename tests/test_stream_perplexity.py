"""Forward perplexity over a stream (the state carried from sentence to sentence), against the
stateless evaluation and hand counts."""

import math

import pytest
import torch
from test_train_lm import SENTENCES, VOCAB, make_model

from elmokit.evaluation.perplexity import NoSentencesError, perplexity, stream_forward_perplexity


def test_the_first_sentence_starts_from_zero_as_in_the_stateless_evaluation():
    model = make_model(seed=1)
    stream = stream_forward_perplexity(model, VOCAB, SENTENCES[:1])
    plain = perplexity(model, VOCAB, SENTENCES[:1])
    assert stream.num_targets == plain.num_targets == len(SENTENCES[0]) + 1
    assert math.isclose(stream.forward_nll, plain.forward_nll, rel_tol=1e-6)


def test_later_sentences_read_the_carried_state_and_order_matters():
    model = make_model(seed=1)
    whole = stream_forward_perplexity(model, VOCAB, SENTENCES + [[]])  # an empty line is skipped
    assert whole.num_sentences == 3 and whole.num_targets == sum(len(s) + 1 for s in SENTENCES)
    first = stream_forward_perplexity(model, VOCAB, SENTENCES[:1])
    second_after_first = whole.forward_nll - first.forward_nll
    second_alone = perplexity(model, VOCAB, SENTENCES[1:]).forward_nll
    assert abs(second_after_first - second_alone) > 1e-4, "the carried state must change the later sentences"
    reversed_order = stream_forward_perplexity(model, VOCAB, SENTENCES[::-1])
    assert abs(reversed_order.forward_nll - whole.forward_nll) > 1e-4
    assert math.isclose(whole.forward, math.exp(whole.forward_nll / whole.num_targets))

    # the same as driving the biLM's stateful mode by hand, one sentence per call
    model.bilm.stateful = True
    model.bilm.reset_states()
    with torch.no_grad():
        by_hand = sum(float(model(*_one(s)).forward_nll) for s in SENTENCES)
    model.bilm.stateful = False
    model.bilm.reset_states()
    assert by_hand == pytest.approx(whole.forward_nll, rel=1e-12)


def test_the_model_is_left_stateless_and_empty_input_is_an_error():
    model = make_model(seed=1)
    stream_forward_perplexity(model, VOCAB, SENTENCES)
    assert model.bilm.stateful is False
    once = perplexity(model, VOCAB, SENTENCES).forward_nll
    assert perplexity(model, VOCAB, SENTENCES).forward_nll == once  # nothing carried over
    with pytest.raises(NoSentencesError):
        stream_forward_perplexity(model, VOCAB, [[], []])


def _one(sentence):
    from elmokit.text.chars import batch_to_ids

    return batch_to_ids([sentence]), torch.tensor([VOCAB.ids(sentence)])
