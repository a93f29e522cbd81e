"""The language model: which vector predicts which token (checked by hand-written loops), the
loss against numpy, gradients everywhere, dropout only in training, perplexity by hand."""

import math

import numpy as np
import pytest
import torch

from elmokit.bilm import PRESETS, BiLM
from elmokit.evaluation.perplexity import perplexity
from elmokit.lm import Candidates, LanguageModel, init_like_bilm_tf
from elmokit.text.chars import batch_to_ids
from elmokit.text.vocab import Vocabulary

# Oddly sized so that a swapped axis fails: P = 5, D = 7, 3 sentences of 4, 1 and 2 tokens.
CONFIG = PRESETS["tiny"].replace(lstm_dim=7, projection_dim=5, filters=((1, 3), (2, 4)))
VOCAB = Vocabulary(("<S>", "</S>", "<UNK>", "a", "b", "c", "d"))
SENTENCES = [["a", "b", "zz", "c"], ["d"], ["c", "a"]]


def make_model(seed=0, config=CONFIG):
    model = LanguageModel(config, len(VOCAB), bos_id=VOCAB.bos, eos_id=VOCAB.eos)
    init_like_bilm_tf(model, torch.Generator().manual_seed(seed))
    return model


def inputs(sentences=SENTENCES):
    width = max(len(s) for s in sentences)
    word_ids = torch.tensor([VOCAB.ids(s) + [0] * (width - len(s)) for s in sentences])
    return batch_to_ids(sentences), word_ids


def test_forward_predicts_the_next_token_and_backward_the_previous():
    model = make_model().eval()
    char_ids, word_ids = inputs()
    fwd, bwd, fwd_targets, bwd_targets = model.target_hidden(char_ids, word_ids)
    top = model.bilm(char_ids).layers[-1]  # (B, T2, 2P), position 0 is <S>
    P = CONFIG.projection_dim
    expect_f, expect_b, targets_f, targets_b = [], [], [], []
    for b, sentence in enumerate(SENTENCES):
        ids = [VOCAB.bos] + VOCAB.ids(sentence) + [VOCAB.eos]
        for k in range(len(ids) - 1):  # forward: position k predicts ids[k + 1]
            expect_f.append(top[b, k, :P])
            targets_f.append(ids[k + 1])
        for k in range(1, len(ids)):  # backward: position k predicts ids[k - 1]
            expect_b.append(top[b, k, P:])
            targets_b.append(ids[k - 1])
    assert torch.equal(fwd, torch.stack(expect_f)) and torch.equal(bwd, torch.stack(expect_b))
    assert fwd_targets.tolist() == targets_f and bwd_targets.tolist() == targets_b
    assert targets_f[:5] == [3, 4, 2, 5, 1]  # a b <UNK> c </S>
    assert targets_b[:5] == [0, 3, 4, 2, 5]  # <S> a b <UNK> c


def test_loss_is_the_mean_target_nll_of_both_directions_against_numpy():
    model = make_model().eval()
    char_ids, word_ids = inputs()
    with torch.no_grad():
        out = model(char_ids, word_ids)
        fwd, bwd, tf, tb = model.target_hidden(char_ids, word_ids)
    W, b = model.softmax_weight.detach().double().numpy(), model.softmax_bias.detach().double().numpy()

    def nll(h, t):
        logits = h.double().numpy() @ W.T + b
        return float(np.sum(np.log(np.exp(logits).sum(1)) - logits[np.arange(len(t)), t.numpy()]))

    assert out.num_targets == 4 + 1 + 1 + 1 + 2 + 1  # n + 1 per sentence
    assert float(out.forward_nll) == pytest.approx(nll(fwd, tf), rel=1e-6)
    assert float(out.backward_nll) == pytest.approx(nll(bwd, tb), rel=1e-6)
    assert float(out.loss) == pytest.approx((nll(fwd, tf) + nll(bwd, tb)) / (2 * out.num_targets), rel=1e-6)


@pytest.mark.parametrize("sampled", [False, True])
def test_every_parameter_gets_a_gradient(sampled):
    model = make_model(config=CONFIG.replace(dropout=0.1)).train()
    char_ids, word_ids = inputs()
    candidates = Candidates.draw(len(VOCAB), 4, seed=0, step=1) if sampled else None
    model(char_ids, word_ids, candidates=candidates).loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    # the padding character's embedding row never moves
    assert model.bilm.token_encoder.char_embedding.weight.grad[0].abs().sum() == 0


def test_token_dedup_gives_the_inference_models_exact_outputs():
    model = make_model().eval()
    plain = BiLM.from_state(CONFIG, model.bilm.state_dict())
    char_ids = batch_to_ids([["a", "b", "a", "a"], ["b", "a"], ["the", "a", "b"]])
    with torch.no_grad():
        assert torch.equal(model.bilm(char_ids).layers, plain(char_ids).layers)


def test_dropout_only_in_training_mode():
    model = make_model(config=CONFIG.replace(dropout=0.5))
    char_ids, _ = inputs()
    reference = BiLM.from_state(CONFIG, model.bilm.state_dict())  # dropout 0
    model.eval()
    with torch.no_grad():
        assert torch.equal(model.bilm(char_ids).layers, reference(char_ids).layers)
        model.train()
        first, second = model.bilm(char_ids).layers, model.bilm(char_ids).layers
    assert torch.equal(first[0], reference(char_ids).layers[0]), "layer 0 (token vectors) is not dropped"
    assert not torch.equal(first[1:], second[1:])


def test_perplexity_of_uniform_logits_is_the_vocabulary_size():
    model = make_model()
    with torch.no_grad():
        model.softmax_weight.zero_()
        model.softmax_bias.zero_()
    result = perplexity(model, VOCAB, SENTENCES + [["b", "b", "b"]], batch_size=2)
    assert result.forward == pytest.approx(len(VOCAB), rel=1e-6)
    assert result.backward == pytest.approx(len(VOCAB), rel=1e-6)
    assert result.average == pytest.approx(len(VOCAB), rel=1e-6)
    assert (result.num_targets, result.num_tokens, result.num_oov, result.num_sentences) == (14, 10, 1, 4)


def test_perplexity_by_hand_with_a_context_free_model():
    """Weights 0 and bias = log q: every prediction is q whatever the context, so the perplexity
    is exp(-mean log q(target)), counted by hand over the targets."""
    q = np.array([0.05, 0.3, 0.05, 0.2, 0.2, 0.1, 0.1])
    model = make_model()
    with torch.no_grad():
        model.softmax_weight.zero_()
        model.softmax_bias.copy_(torch.tensor(np.log(q)))
    sentences = [["a", "b"], ["d"]]
    # forward targets: a b </S> | d </S>; backward: <S> a b | <S> d
    forward = -(math.log(0.2) + math.log(0.2) + math.log(0.3) + math.log(0.1) + math.log(0.3)) / 5
    backward = -(math.log(0.05) + math.log(0.2) + math.log(0.2) + math.log(0.05) + math.log(0.1)) / 5
    result = perplexity(model, VOCAB, sentences)
    assert result.forward == pytest.approx(math.exp(forward), rel=1e-5)
    assert result.backward == pytest.approx(math.exp(backward), rel=1e-5)
    assert result.average == pytest.approx(math.exp((forward + backward) / 2), rel=1e-5)
