"""The deterministic warm start: every sentence starts from the state after a fixed warm-up text.

Oracles: the NumPy re-statement of ELMo (tests/numpy_elmo.py) carrying state through the
warm-up text; the reference's stateful mode reading the text and then the sentence.
"""

import numpy as np
import pytest
import torch
from numpy_elmo import NumpyELMo

from elmokit import BiLM, Embedder, batch_to_ids, load_bilm, load_original, save_native
from elmokit.warm_state import (
    WARM_STATE_NAME,
    WarmStateError,
    compute_warm_state,
    save_warm_state,
    warmup_sentences,
)

WARMUP = [["It", "was", "late", "."], ["Call", "me", "Ishmael", "."], ["The", "end", "came", "soon", "!"]]
SENTENCES = [
    ["The", "cat", "sat", "."],
    ["A"],
    ["Ünïcödé", "tokens", "and", "an", "emoji", "🙂", "here", "!"],
    [],
    ["x" * 60, "short"],
    ["play", "the", "game"],
]


@pytest.fixture
def models(tiny_original):
    options_path, weights_path, options, weights = tiny_original
    return load_original(options_path, weights_path), NumpyELMo(options, weights), options


def oracle_state_after(oracle_template: NumpyELMo, sentences):
    """(h, c) per (direction, layer) after a fresh NumPy model reads ``sentences`` in row 0."""
    oracle = NumpyELMo(oracle_template.o, oracle_template.w)
    for sentence in sentences:
        oracle.sentence(sentence, row=0)
    return oracle.state


def test_warm_state_is_the_state_after_the_text_forwards_and_backwards(models):
    bilm, oracle, options = models
    warm = compute_warm_state(bilm, WARMUP)
    L, P, D = options["lstm"]["n_layers"], options["lstm"]["projection_dim"], options["lstm"]["dim"]
    assert warm.h.shape == (L, 2, P) and warm.c.shape == (L, 2, D) and warm.h.dtype == torch.float32
    read_forwards = oracle_state_after(oracle, WARMUP)
    read_backwards = oracle_state_after(oracle, WARMUP[::-1])
    for layer in range(L):
        for direction, states in ((0, read_forwards), (1, read_backwards)):
            h, c = states[(direction, layer, 0)]
            np.testing.assert_allclose(warm.h[layer, direction].numpy(), h, atol=2e-5, rtol=1e-4)
            np.testing.assert_allclose(warm.c[layer, direction].numpy(), c, atol=2e-5, rtol=1e-4)
    assert warm.metadata["n_sentences"] == 3 and warm.metadata["text"] == "user"
    assert compute_warm_state(bilm).metadata["text"] == "shipped"


def test_warm_outputs_match_numpy_oracle_started_from_that_state(models):
    bilm, oracle, _ = models
    warm = compute_warm_state(bilm, WARMUP)
    bilm.set_initial_state(warm)
    with torch.no_grad():
        output = bilm(batch_to_ids(SENTENCES))
    for b, sentence in enumerate(SENTENCES):
        started = NumpyELMo(oracle.o, oracle.w)
        for d in (0, 1):
            for layer in range(oracle.L):
                started.state[(d, layer, 0)] = (warm.h[layer, d].double().numpy(), warm.c[layer, d].double().numpy())
        expected = started.sentence(sentence, row=0)
        n = len(sentence) + 2
        np.testing.assert_allclose(output.layers[:, b, :n].numpy(), expected, atol=2e-5, rtol=1e-4)
        assert (output.layers[:, b, n:] == 0).all()


def test_warm_outputs_equal_the_stateful_model_after_reading_the_text(models):
    """Forward half = the reference's stateful mode having just read the text; backward half =
    having read it backwards (sentences in reverse order). Bit-equal: the same recurrence from
    the same state."""
    bilm, _, options = models
    P = options["lstm"]["projection_dim"]
    bilm.set_initial_state(compute_warm_state(bilm, WARMUP))
    for sentence in [s for s in SENTENCES if s]:
        with torch.no_grad():
            warm = bilm(batch_to_ids([sentence])).layers
        for text, half in ((WARMUP, slice(0, P)), (WARMUP[::-1], slice(P, 2 * P))):
            reader = BiLM(bilm.config, stateful=True)
            reader.load_state_dict(bilm.state_dict())
            with torch.no_grad():
                for s in text:
                    reader(batch_to_ids([s]))
                carried = reader(batch_to_ids([sentence])).layers
            np.testing.assert_array_equal(warm[1:, ..., half].numpy(), carried[1:, ..., half].numpy())


def test_warm_is_bit_exact_across_batch_sizes_and_orders_on_both_paths(models):
    bilm, _, _ = models
    bilm.set_initial_state(compute_warm_state(bilm))
    embedder = Embedder(bilm, batch_size=1)
    alone = [embedder.embed([s])[0] for s in SENTENCES]
    rng = np.random.default_rng(0)
    for batch_size in (1, 2, 3, 6):  # the inference path (Embedder runs under inference_mode)
        embedder.batch_size = batch_size
        order = rng.permutation(len(SENTENCES))
        shuffled = embedder.embed([SENTENCES[i] for i in order])
        for position, index in enumerate(order):
            np.testing.assert_array_equal(shuffled[position], alone[index])

    def differentiable(batch):  # autograd on: ProjectedLSTM takes its differentiable path
        output = bilm(batch_to_ids(batch), keep_boundaries=False)
        assert output.layers.requires_grad
        return [output.layers[:, b, : len(s)].detach().numpy() for b, s in enumerate(batch)]

    slow_alone = [differentiable([s])[0] for s in SENTENCES]
    for order in (rng.permutation(len(SENTENCES)), np.arange(len(SENTENCES))[::-1]):
        for position, array in enumerate(differentiable([SENTENCES[i] for i in order])):
            np.testing.assert_array_equal(array, slow_alone[order[position]])
    for slow, fast in zip(slow_alone, alone):  # the two paths agree to float32 rounding
        np.testing.assert_allclose(slow, fast, atol=2e-6, rtol=1e-5)


def test_warm_differs_from_zero_and_zero_stays_the_default(models):
    bilm, oracle, _ = models
    zero = Embedder(bilm).embed(SENTENCES)
    for array, sentence in zip(zero, SENTENCES):  # the default is untouched: the zero-state oracle
        np.testing.assert_allclose(array, oracle.sentence(sentence)[:, 1:-1], atol=2e-5, rtol=1e-4)
    bilm.set_initial_state(compute_warm_state(bilm))
    assert bilm.initial_state == "warm"
    warm = Embedder(bilm).embed(SENTENCES)
    for a, b, sentence in zip(zero, warm, SENTENCES):
        np.testing.assert_array_equal(a[0], b[0])  # the token layer has no state
        if sentence:
            assert np.abs(a[1:] - b[1:]).max() > 1e-3
    bilm.set_initial_state(None)
    np.testing.assert_array_equal(Embedder(bilm).embed(SENTENCES)[2], zero[2])


def test_stateful_rows_start_warm(models):
    bilm, _, _ = models
    warm = compute_warm_state(bilm, WARMUP)
    stateless = BiLM(bilm.config).eval()
    stateless.load_state_dict(bilm.state_dict())
    stateless.set_initial_state(warm)
    bilm.stateful = True
    bilm.set_initial_state(warm)
    batch = batch_to_ids(SENTENCES[:3])
    with torch.no_grad():
        first = bilm(batch).layers
        second = bilm(batch).layers
        expected = stateless(batch).layers
    np.testing.assert_array_equal(first.numpy(), expected.numpy())
    assert not torch.allclose(second[1:], first[1:]), "stateful mode still carries state"


def test_folder_round_trip_cli_and_clear_errors(models, tmp_path, capsys):
    from elmokit.cli.main import main

    bilm, _, _ = models
    folder = tmp_path / "model"
    save_native(bilm, folder)
    with pytest.raises(WarmStateError, match=f"no {WARM_STATE_NAME}.*elmokit warm-state --model"):
        Embedder.load(folder, initial_state="warm")
    with pytest.raises(ValueError, match="initial_state must be one of"):
        Embedder.load(folder, initial_state="hot")
    assert main(["warm-state", "--model", str(folder), "--text", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err and not (folder / WARM_STATE_NAME).exists()
    text = tmp_path / "warm.txt"
    text.write_text("\n".join(" ".join(s) for s in WARMUP) + "\n\n")
    assert main(["warm-state", "--model", str(folder), "--text", str(text)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors", WARM_STATE_NAME]
    loaded = Embedder.load(folder, initial_state="warm")
    assert loaded.initial_state == "warm" and loaded.name.endswith("+warm")
    direct = Embedder(BiLM.from_state(bilm.config, bilm.numpy_state()).set_initial_state(compute_warm_state(bilm, WARMUP)))
    for a, b in zip(loaded.embed(SENTENCES), direct.embed(SENTENCES)):
        np.testing.assert_array_equal(a, b)
    assert loaded.fingerprint != Embedder.load(folder).fingerprint
    # the shipped text by default; the CLI's --initial-state flag reaches load_embedder
    assert main(["warm-state", "--model", str(folder)]) == 0
    capsys.readouterr()
    (tmp_path / "in.txt").write_text("the cat sat\n")
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.h5"), "--all", "--model", str(folder),
                 "--initial-state", "warm"]) == 0
    import h5py

    with h5py.File(tmp_path / "out.h5") as f:
        np.testing.assert_array_equal(f["0"][...], Embedder.load(folder, initial_state="warm").embed([["the", "cat", "sat"]])[0])
    # convert carries the state (keyed by the parameters, valid in either format); Elmo takes it too
    assert main(["convert", str(folder), str(tmp_path / "original")]) == 0
    converted = Embedder.load(tmp_path / "original", initial_state="warm")
    for a, b in zip(converted.embed(SENTENCES), Embedder.load(folder, initial_state="warm").embed(SENTENCES)):
        np.testing.assert_array_equal(a, b)
    from elmokit import Elmo

    assert Elmo.from_pretrained(tmp_path / "original", initial_state="warm").bilm.initial_state == "warm"
    # a state left beside other weights is refused
    other = BiLM.from_state(bilm.config, {k: v * 1.5 for k, v in bilm.numpy_state().items()})
    save_native(other, folder)
    with pytest.raises(WarmStateError, match="other weights"):
        Embedder.load(folder, initial_state="warm")


def test_warm_state_of_an_original_format_folder(tiny_original):
    options_path, weights_path, _, _ = tiny_original
    bilm = load_original(options_path, weights_path)
    save_warm_state(weights_path.parent, compute_warm_state(bilm))
    warm = Embedder.from_original(options_path, weights_path, initial_state="warm")
    assert warm.initial_state == "warm"
    assert load_bilm(weights_path.parent, initial_state="warm").initial_state == "warm"


def test_shipped_warmup_text_is_tokenised_prose():
    sentences = warmup_sentences()
    assert len(sentences) >= 5 and all(s[-1] in {".", "!", "?"} for s in sentences)
    assert all("," not in token or token == "," for s in sentences for token in s), "punctuation split off"
