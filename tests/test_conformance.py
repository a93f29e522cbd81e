"""The reference fixtures: allennlp and bilm-tf test models and the derived all-layer data."""

import json

import h5py
import numpy as np
import pytest
import torch
from testkit import need_shared

from elmokit import batch_to_ids, load_original
from elmokit.nn.scalar_mix import ScalarMix

# The reference's own check: numpy.allclose(atol=1e-6) with its default rtol=1e-5.
ATOL, RTOL = 1e-6, 1e-5


def fixture_batches(sentences):
    """Batch i = [sentences[0][i], sentences[1][i], sentences[2][i]], whitespace-tokenised."""
    return [[sentences[k][i].split() for k in range(3)] for i in range(10)]


@pytest.mark.parametrize(
    "folder, sentences_file",
    [("allennlp", "sentences.json"), ("bilm-tf/model", "lm_embeddings_sentences.json")],
)
def test_stateful_top_layer_matches_reference(folder, sentences_file):
    root = need_shared("fixtures", *folder.split("/"))
    bilm = load_original(root / "options.json", root / "lm_weights.hdf5", stateful=True)
    batches = fixture_batches(json.loads((root / sentences_file).read_text()))
    expected_files = [h5py.File(root / f"lm_embeddings_{k}.hdf5", "r") for k in range(3)]
    compared = 0
    with torch.no_grad():
        for i, batch in enumerate(batches):  # one instance, states carried, in order
            output = bilm(batch_to_ids(batch), keep_boundaries=False)
            assert output.mask.sum(1).tolist() == [len(s) for s in batch]
            for k, sentence in enumerate(batch):
                expected = expected_files[k][str(i)][...]  # (2, n, P): forward, backward
                expected = np.concatenate([expected[0], expected[1]], axis=-1)
                actual = output.layers[2, k, : len(sentence)].numpy()
                np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=RTOL)
                compared += 1
    assert compared == 30


def test_token_embeddings_match_reference():
    root = need_shared("fixtures", "allennlp")
    bilm = load_original(root / "options.json", root / "lm_weights.hdf5")
    vocab = (root / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    assert len(vocab) == 458
    # As the upstream test: 10 "sentences" of 50 tokens, the last one padded.
    chunks = [vocab[i : i + 50] for i in range(0, len(vocab), 50)]
    with torch.no_grad():
        output = bilm(batch_to_ids(chunks), keep_boundaries=False)
    P = bilm.config.projection_dim
    actual = output.layers[0][output.mask][:, :P].numpy()  # layer 0 = [token; token]
    expected = h5py.File(root / "elmo_token_embeddings.hdf5", "r")["embedding"][...]
    assert actual.shape == expected.shape == (458, 16)
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=RTOL)


def test_literal_boundary_tokens_embed_like_added_ones():
    root = need_shared("fixtures", "allennlp")
    bilm = load_original(root / "options.json", root / "lm_weights.hdf5")
    with torch.no_grad():
        output = bilm(batch_to_ids([["<S>", "</S>"]]))  # with boundaries: <S> <S> </S> </S>
    layer0 = output.layers[0, 0]
    assert torch.equal(layer0[0], layer0[1]) and torch.equal(layer0[2], layer0[3])


@pytest.mark.parametrize("mode", ["stateful", "stateless"])
def test_all_layers_match_derived_fixture(mode):
    root = need_shared("fixtures", "allennlp")
    derived = h5py.File(need_shared("fixtures", "derived", "allennlp_fixture_all_layers.hdf5"), "r")[mode]
    bilm = load_original(root / "options.json", root / "lm_weights.hdf5", stateful=(mode == "stateful"))
    with torch.no_grad():
        for i in range(10):
            group = derived[f"batch_{i}"]
            sentences = json.loads(group.attrs["sentences"])
            batch = [s.split() if isinstance(s, str) else s for s in sentences]
            ids = batch_to_ids(batch)
            with_b = bilm(ids)
            if mode == "stateful":
                # the second call must not touch the state: compare without re-running the LSTM
                without_layers, without_mask = _remove(with_b)
            else:
                without = bilm(ids, keep_boundaries=False)
                without_layers, without_mask = without.layers, without.mask
            np.testing.assert_array_equal(with_b.mask.numpy(), group["mask_with_boundaries"][...])
            np.testing.assert_array_equal(without_mask.sum(1).numpy(), group["lengths"][...])
            expected_with = group["with_boundaries"][...]  # (B, layers, T2, 2P)
            expected_without = group["without_boundaries"][...]
            np.testing.assert_allclose(with_b.layers.permute(1, 0, 2, 3).numpy(), expected_with, atol=ATOL, rtol=RTOL)
            np.testing.assert_allclose(without_layers.permute(1, 0, 2, 3).numpy(), expected_without, atol=ATOL, rtol=RTOL)


def _remove(output):
    from elmokit.bilm import remove_boundaries

    return remove_boundaries(output.layers, output.mask)


def test_scalar_mix_matches_derived_fixture():
    root = need_shared("fixtures", "allennlp")
    path = need_shared("fixtures", "derived", "allennlp_fixture_scalar_mix.hdf5")
    settings = [([0.1, 0.3, 0.5], 1.1), ([0.2, 0.4, 0.6], 0.88), ([0.0, 0.0, 0.0], 1.0)]
    sentences = json.loads((root / "sentences.json").read_text())
    batch = fixture_batches(sentences)[0]
    bilm = load_original(root / "options.json", root / "lm_weights.hdf5")  # fresh model, batch 0
    with torch.no_grad():
        output = bilm(batch_to_ids(batch))
    from elmokit.bilm import remove_boundaries

    with h5py.File(path, "r") as fixture:
        checked = 0
        for j, (weights, gamma) in enumerate(settings):
            for layer_norm in (0, 1):
                mix = ScalarMix(3, do_layer_norm=bool(layer_norm), initial_scalar_parameters=weights)
                with torch.no_grad():
                    mix.gamma.fill_(gamma)
                    mixed, _ = remove_boundaries(mix(output.layers, output.mask), output.mask)
                expected = fixture[f"mix_{j}_layer_norm_{layer_norm}/output_without_boundaries"][...]
                np.testing.assert_allclose(mixed.numpy(), expected, atol=2e-6, rtol=RTOL)
                checked += 1
    assert checked == 6
