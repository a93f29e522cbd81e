"""Damaged or mismatched model files are refused at load with one line naming the file (and the
tensor, the shapes, both files where they matter), never a traceback or a silently wrong model."""

import json

import h5py
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from testkit import random_tf_weights, tiny_options, write_original_files

from elmokit import Embedder, load_bilm, load_original, save_native
from elmokit.cli.main import main
from elmokit.formats import ModelFolderError, WeightFileError
from elmokit.warm_state import WarmStateError, compute_warm_state, save_warm_state

LSTM_WEIGHT = "forward_lstm.0.input_linear.weight"  # (4D, P) = (44, 5) for the tiny options (D 11, P 5)


@pytest.fixture
def native(tmp_path, tiny_original):
    folder = tmp_path / "model"
    save_native(load_original(*tiny_original[:2]), folder)
    return folder


def test_zero_byte_safetensors_names_the_file(native):
    (native / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelFolderError) as caught:
        load_bilm(native)
    message = str(caught.value)
    assert message.startswith(f"{native / 'model.safetensors'}: not a readable safetensors file")
    assert "(empty: 0 bytes)" in message and "\n" not in message


def test_truncated_safetensors_names_the_file(native):
    path = native / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFolderError, match=rf"^{path}: not a readable safetensors file \({len(data) // 2} bytes") as caught:
        load_bilm(native)
    assert "damaged or incomplete" in str(caught.value) and "\n" not in str(caught.value)


def test_config_that_does_not_fit_the_weights_names_tensor_shapes_and_both_files(native):
    config = json.loads((native / "config.json").read_text())
    config["lstm_dim"] = 12  # the weights were saved with 11
    (native / "config.json").write_text(json.dumps(config))
    expected = (
        f"{native / 'model.safetensors'}: tensor '{LSTM_WEIGHT}' has shape (44, 5), "
        f"but {native / 'config.json'} describes (48, 5)"
    )
    with pytest.raises(ModelFolderError) as caught:
        load_bilm(native)
    assert str(caught.value).startswith(expected)


def test_missing_and_extra_tensors_are_named(native):
    path = native / "model.safetensors"
    state = load_file(str(path))
    removed = state.pop(LSTM_WEIGHT)
    save_file(state, str(path))
    with pytest.raises(ModelFolderError,
                       match=rf"^{path}: no tensor '{LSTM_WEIGHT}' \(shape \(44, 5\) per {native / 'config.json'}\)"):
        load_bilm(native)
    save_file({**state, LSTM_WEIGHT: removed, "extra.weight": np.zeros(3, np.float32)}, str(path))
    with pytest.raises(ModelFolderError, match=rf"^{path}: tensor 'extra.weight' \(1 in all\) is not part of the model"):
        load_bilm(native)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_native_weights_holding_nan_or_inf_are_refused(native, bad):
    path = native / "model.safetensors"
    state = load_file(str(path))
    state[LSTM_WEIGHT][3, 1] = bad
    save_file(state, str(path))
    with pytest.raises(ModelFolderError) as caught:
        Embedder.load(native)
    assert str(caught.value) == (
        f"{path}: tensor '{LSTM_WEIGHT}' holds 1 non-finite value (first: {bad} at (3, 1)); refusing a damaged model"
    )


def test_original_weights_holding_nan_are_refused(tmp_path):
    options = tiny_options()
    weights = random_tf_weights(options)
    weights["CNN_high_0/W_carry"][2, 4] = np.nan
    weights["CNN_high_0/W_carry"][0, 1] = np.inf
    options_path, weights_path = write_original_files(tmp_path, options, weights)
    with pytest.raises(WeightFileError) as caught:
        load_original(options_path, weights_path)
    assert str(caught.value) == (
        f"{weights_path}: dataset 'CNN_high_0/W_carry' holds 2 non-finite values (first: inf at (0, 1)); "
        "refusing a damaged model"
    )


def test_truncated_original_weights_name_the_file(tmp_path):
    options = tiny_options()
    options_path, weights_path = write_original_files(tmp_path, options, random_tf_weights(options))
    data = weights_path.read_bytes()
    weights_path.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightFileError, match=rf"^{weights_path}: "):
        load_original(options_path, weights_path)
    weights_path.write_bytes(b"")
    with pytest.raises(WeightFileError, match=rf"^{weights_path}: not a readable HDF5 file"):
        load_original(options_path, weights_path)


def test_original_options_that_do_not_fit_name_both_files(tmp_path):
    options = tiny_options()
    options_path, weights_path = write_original_files(tmp_path, options, random_tf_weights(options))
    options["lstm"]["dim"] = 12
    options_path.write_text(json.dumps(options))
    with pytest.raises(WeightFileError) as caught:
        load_original(options_path, weights_path)
    assert str(caught.value).startswith(
        f"{weights_path}: dataset 'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' has shape (10, 44), "
        f"expected (10, 48) by {options_path}"
    )


def write_warm_state(native):
    save_warm_state(native, compute_warm_state(load_bilm(native), [["It", "was", "late", "."]]))
    return native / "warm_state.safetensors"


def test_warm_state_holding_nan_is_refused(native):
    path = write_warm_state(native)
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        metadata, arrays = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    arrays["c"][1, 0, 2] = np.nan  # everything else, the weights' fingerprint included, still fits
    save_file(arrays, str(path), metadata=metadata)
    with pytest.raises(WarmStateError, match=rf"^{path}: tensor 'c' holds 1 non-finite value \(first: nan at \(1, 0, 2\)\)"):
        load_bilm(native, initial_state="warm")
    assert load_bilm(native).initial_state == "zero"  # the zero start does not read the file


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_damaged_warm_state_names_the_file(native, damage):
    path = write_warm_state(native)
    data = path.read_bytes()
    path.write_bytes(b"" if damage == "empty" else data[: len(data) // 2])
    with pytest.raises(WarmStateError, match=rf"^{path}: not a readable safetensors file") as caught:
        Embedder.load(native, initial_state="warm")
    assert ("(empty: 0 bytes)" in str(caught.value)) == (damage == "empty") and "\n" not in str(caught.value)


@pytest.mark.parametrize("damage", ["empty", "nan", "config"])
def test_cli_embed_with_a_bad_model_exits_2_with_one_line(tmp_path, native, capsys, damage):
    weights = native / "model.safetensors"
    if damage == "empty":
        weights.write_bytes(b"")
    elif damage == "nan":
        state = load_file(str(weights))
        state[LSTM_WEIGHT][0, 0] = np.nan
        save_file(state, str(weights))
    else:
        config = json.loads((native / "config.json").read_text())
        (native / "config.json").write_text(json.dumps({**config, "projection_dim": 6}))
    text, output = tmp_path / "s.txt", tmp_path / "o.h5"
    text.write_text("a b\n", encoding="utf-8")
    with h5py.File(output, "w") as f:  # something already written is kept
        f.create_dataset("old", data=np.arange(3))
    assert main(["embed", str(text), str(output), "--top", "--model", str(native)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("elmokit embed:")]
    assert len(lines) == 1 and lines[0].startswith(f"elmokit embed: error: {weights}: ") and "Traceback" not in err
    with h5py.File(output, "r") as f:
        assert list(f) == ["old"]
