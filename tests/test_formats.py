"""Original <-> native round trips (bit-exact) and errors that name the file, dataset and shape."""

import json

import h5py
import numpy as np
import pytest
import torch
from testkit import need_shared, random_tf_weights, tiny_options, write_original_files

from elmokit import Embedder, batch_to_ids, load_bilm, load_original, save_native, save_original
from elmokit.cli.main import main
from elmokit.formats import ModelFolderError, WeightFileError


def read_all_datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[...]) if isinstance(obj, h5py.Dataset) else None)
    return out


@pytest.mark.parametrize("skip", [True, False])
def test_original_native_original_is_bit_exact(tmp_path, skip):
    options = tiny_options(skip=skip, n_layers=3)
    weights = random_tf_weights(options, seed=7)
    options_path, weights_path = write_original_files(tmp_path / "orig", options, weights)

    assert main(["convert", str(tmp_path / "orig"), str(tmp_path / "native")]) == 0
    assert (tmp_path / "native" / "config.json").exists() and (tmp_path / "native" / "README.md").exists()
    assert main(["convert", str(tmp_path / "native"), str(tmp_path / "back")]) == 0

    written = read_all_datasets(tmp_path / "back" / "weights.hdf5")
    assert sorted(written) == sorted(weights)
    for name, value in weights.items():
        assert written[name].dtype == np.float32
        np.testing.assert_array_equal(written[name], value, err_msg=name)
    assert json.loads((tmp_path / "back" / "options.json").read_text()) == options


def test_native_round_trip_gives_identical_outputs(tmp_path, tiny_original):
    options_path, weights_path, *_ = tiny_original
    bilm = load_original(options_path, weights_path)
    save_native(bilm, tmp_path / "native")
    again = load_bilm(tmp_path / "native")
    assert again.config == bilm.config
    ids = batch_to_ids([["a", "b"], ["c"]])
    with torch.no_grad():
        assert torch.equal(bilm(ids).layers, again(ids).layers)
    for name, value in bilm.state_dict().items():
        assert torch.equal(value, again.state_dict()[name]), name


def test_allennlp_fixture_round_trip_is_bit_exact(tmp_path):
    root = need_shared("fixtures", "allennlp")
    bilm = load_original(root / "options.json", root / "lm_weights.hdf5")
    save_original(load_bilm(_native(bilm, tmp_path)), tmp_path / "back")
    original = read_all_datasets(root / "lm_weights.hdf5")
    written = read_all_datasets(tmp_path / "back" / "weights.hdf5")
    assert sorted(original) == sorted(written)
    for name in original:
        np.testing.assert_array_equal(written[name], original[name], err_msg=name)


def _native(bilm, tmp_path):
    save_native(bilm, tmp_path / "native")
    return tmp_path / "native"


def test_262_row_char_table_is_accepted(tmp_path):
    options = tiny_options()
    weights = random_tf_weights(options)
    padded = dict(weights, char_embed=np.vstack([np.zeros((1, 3), np.float32), weights["char_embed"]]))
    a = load_original(*write_original_files(tmp_path / "a", options, weights))
    b = load_original(*write_original_files(tmp_path / "b", options, padded))
    assert torch.equal(a.token_encoder.char_embedding.weight, b.token_encoder.char_embedding.weight)


def test_missing_dataset_names_file_dataset_and_shape(tmp_path):
    options = tiny_options()
    weights = random_tf_weights(options)
    del weights["CNN/W_cnn_2"]
    _, weights_path = write_original_files(tmp_path, options, weights)
    with pytest.raises(WeightFileError) as error:
        load_original(tmp_path / "options.json", weights_path)
    message = str(error.value)
    assert str(weights_path) in message and "'CNN/W_cnn_2'" in message and "(1, 4, 3, 7)" in message


def test_wrong_shape_names_expected_and_found(tmp_path):
    options = tiny_options()
    weights = random_tf_weights(options)
    weights["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0"] = np.zeros((11, 6), np.float32)
    write_original_files(tmp_path, options, weights)
    with pytest.raises(WeightFileError, match=r"Cell1/LSTMCell/W_P_0.*\(11, 6\), expected \(11, 5\)"):
        load_original(tmp_path / "options.json", tmp_path / "weights.hdf5")


def test_bad_options_are_named(tmp_path):
    (tmp_path / "options.json").write_text('{"lstm": {"dim": 4}, "char_cnn": {}}')
    with pytest.raises(WeightFileError, match=r"options.json: missing 'char_cnn.filters'"):
        load_original(tmp_path / "options.json", tmp_path / "weights.hdf5")
    (tmp_path / "options.json").write_text('{"lstm": \n oops}')
    with pytest.raises(WeightFileError, match=r"not valid JSON \(line 2"):
        load_original(tmp_path / "options.json", tmp_path / "weights.hdf5")


def test_not_a_model_folder(tmp_path):
    with pytest.raises(ModelFolderError, match="neither config.json nor options.json"):
        Embedder.load(tmp_path)
    with pytest.raises(ModelFolderError, match="not a model folder"):
        Embedder.load(tmp_path / "nowhere")


def test_native_config_version_and_fields(tmp_path, tiny_original):
    save_native(load_original(*tiny_original[:2]), tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (config["format_version"] == 2 and config["lstm_dim"] == 11 and config["dropout"] == 0.0
            and config["filters"] == [[1, 3], [2, 5], [4, 7]])
    config["format_version"] = 99
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFolderError, match="format_version 99 is newer"):
        load_bilm(tmp_path / "m")


def test_version_1_config_without_dropout_loads_with_dropout_zero(tmp_path, tiny_original):
    """format_version 2 added `dropout`; a version-1 file (no such field) means 0.0."""
    save_native(load_original(*tiny_original[:2]), tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["format_version"] = 1
    del config["dropout"]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    assert load_bilm(tmp_path / "m").config.dropout == 0.0
