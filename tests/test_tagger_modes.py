"""The tagger's feature modes: BERT's Table 7 feature-based rows and TagLM (Peters et al. 2017).

Oracle: numpy re-statements of each mode on a fake 5-layer representation (so "last four" and
"all" differ), and the TagLM wiring checked by perturbation: layers other than the top never
reach the emissions, the top layer does, and it enters above the first BiLSTM.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_tagger import HiddenBitRepresentation, _hidden_bit_task

from elmokit.tasks.tagger import SequenceTagger, TaggerConfig, TaggerModel, TrainOptions, train_tagger
from elmokit.tasks.tagger.model import ELMO_MODES, feature_dim

torch.set_num_threads(1)
B, L, T, D = 3, 5, 7, 5


def _model(mode: str, layers: int = L) -> TaggerModel:
    config = TaggerConfig(task="pos", output="softmax", scheme=None, elmo=mode, elmo_layers=layers, elmo_dim=D,
                          word_dim=4, hidden_dim=6, dropout=0.0, elmo_dropout=0.0, min_word_count=1)
    torch.manual_seed(0)
    model = TaggerModel(config, vocab_size=9, num_labels=3, labels=["X", "Y", "Z"]).eval()
    if model.input_mix is not None:  # away from the uniform start, so a wrong layer choice shows
        with torch.no_grad():
            model.input_mix.scalar_parameters.copy_(torch.randn(model.input_mix.scalar_parameters.shape))
            model.input_mix.gamma.fill_(1.7)
    return model


def _numpy_mix(layers: np.ndarray, w: np.ndarray, gamma: float) -> np.ndarray:
    """gamma * sum_j softmax(w)_j h_j over axis 1 of (B, J, T, D)."""
    s = np.exp(w - w.max()) / np.exp(w - w.max()).sum()
    return gamma * np.einsum("j,bjtd->btd", s, layers)


@pytest.mark.parametrize("num_layers", [L, 3])
@pytest.mark.parametrize("mode", ["mix", "mix-last-four", "top", "embeddings", "second-to-last", "concat-last-four"])
def test_each_mode_selects_what_its_name_says(mode, num_layers):
    model = _model(mode, num_layers)
    layers = np.random.default_rng(1).standard_normal((B, num_layers, T, D)).astype(np.float32)
    got = model._elmo(torch.from_numpy(layers), model.input_mix).detach().numpy()
    top_k = min(4, num_layers)
    if mode in ("mix", "mix-last-four"):
        chosen = layers if mode == "mix" else layers[:, num_layers - top_k:]
        w = model.input_mix.scalar_parameters.detach().numpy().astype(np.float64)
        expected = _numpy_mix(chosen.astype(np.float64), w, 1.7)
    else:
        expected = {
            "top": layers[:, -1], "embeddings": layers[:, 0], "second-to-last": layers[:, -2],
            "concat-last-four": np.concatenate([layers[:, j] for j in range(num_layers - top_k, num_layers)], axis=-1),
        }[mode]
    assert got.shape == expected.shape == (B, T, feature_dim(mode, num_layers, D))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_taglm_reads_only_the_top_layer_and_puts_it_above_the_first_bilstm():
    model = _model("taglm")
    assert model.lstm.input_size == 4  # the word embedding alone below
    assert model.upper_lstm.input_size == 2 * 6 + D  # [h_k,1; h_k^LM]
    word_ids = torch.tensor([[2, 3, 4, 5, 6, 7, 8]] * B)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 5:] = False
    features = torch.randn(B, L, T, D, generator=torch.Generator().manual_seed(2))
    base = model.emissions(word_ids, mask, features=features)
    lower = features.clone()
    lower[:, :-1] += 3.0  # every layer but the top
    assert torch.equal(model.emissions(word_ids, mask, features=lower), base)
    top = features.clone()
    top[:, -1, 2] += 1.0  # one token's top layer
    changed = (model.emissions(word_ids, mask, features=top) - base).abs().amax(-1)  # (B, T)
    assert bool((changed[:, 2] > 0).all())  # the token itself, through the upper BiLSTM, in both directions:
    assert bool((changed[0, [0, 6]] > 0).all())


def test_modes_table_is_what_the_config_accepts():
    for mode in ELMO_MODES:
        layers = 0 if mode == "none" else 3
        TaggerConfig(elmo=mode, elmo_layers=layers, elmo_dim=0 if mode == "none" else D)
    with pytest.raises(ValueError, match="elmo_at_output does not apply"):
        TaggerConfig(elmo="taglm", elmo_layers=3, elmo_dim=D, elmo_at_output=True)
    with pytest.raises(ValueError, match="2 or more layers"):
        TaggerConfig(elmo="second-to-last", elmo_layers=1, elmo_dim=D)


@pytest.fixture(scope="module")
def hidden_bit():
    bits: dict = {}
    train = _hidden_bit_task(160, seed=1, bits=bits)
    dev = _hidden_bit_task(60, seed=2, bits=bits)
    return train, dev, HiddenBitRepresentation(bits)


def _train(hidden_bit, mode):
    train, dev, rep = hidden_bit
    config = TaggerConfig(task="pos", output="crf", scheme=None, elmo=mode, elmo_layers=3, elmo_dim=5, word_dim=8,
                          hidden_dim=12, dropout=0.0, elmo_dropout=0.0, min_word_count=1)
    options = TrainOptions(epochs=8, patience=8, batch_size=16, learning_rate=0.02, seed=0, progress=False)
    return train_tagger(train, dev, config, representation=rep, options=options, log=lambda m: None), dev, rep


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_second_to_last_sees_the_bit_and_embeddings_do_not(hidden_bit):
    # HiddenBitRepresentation carries the answer in layer 1 of 3: the second-to-last.
    seen, dev, _ = _train(hidden_bit, "second-to-last")
    unseen, _, _ = _train(hidden_bit, "embeddings")
    assert seen.evaluate(dev)["accuracy"] > 0.95
    assert unseen.evaluate(dev)["accuracy"] < 0.7


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_concat_and_taglm_taggers_save_and_load_exactly(hidden_bit, tmp_path):
    for mode in ("concat-last-four", "taglm"):
        tagger, dev, rep = _train(hidden_bit, mode)
        tagger.save(tmp_path / mode)
        loaded = SequenceTagger.load(tmp_path / mode, representation=rep)
        assert loaded.config.elmo == mode
        assert loaded.predict(dev.sentences) == tagger.predict(dev.sentences)
