"""The original ELMo files: ``options.json`` + ``weights.hdf5`` as dumped by bilm-tf's
``dump_weights`` and read by allennlp.

One literal table maps every hdf5 dataset to our parameters, with a named transform each way.
The weight file is in TensorFlow's layout (``x @ W``), ours in PyTorch's (``W @ x``); every
transform is a transpose, a split or a padding row, so the conversion is exact both ways.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elmokit.bilm_config import BiLMConfig
from elmokit.errors import UserError
from elmokit.formats.checks import describe_non_finite, refuse_non_finite
from elmokit.io import atomic_path, write_json

Array = np.ndarray


class WeightFileError(UserError):
    """A weight or options file that does not match what the architecture needs."""


# ---- options.json ---------------------------------------------------------------------------


def config_from_options(options: dict, source: str = "options.json") -> BiLMConfig:
    """An ``options.json`` dict -> BiLMConfig. Missing/0 clips mean no clipping (as allennlp)."""

    def need(*keys: str):
        node = options
        for depth, key in enumerate(keys):
            if not isinstance(node, dict) or key not in node:
                raise WeightFileError(f"{source}: missing {'.'.join(keys[: depth + 1])!r}")
            node = node[key]
        return node

    char_cnn, lstm = need("char_cnn"), need("lstm")
    n_characters = char_cnn.get("n_characters", 262)
    if n_characters not in (261, 262):
        raise WeightFileError(f"{source}: char_cnn.n_characters must be 261 or 262, got {n_characters}")
    filters = tuple((int(w), int(n)) for w, n in need("char_cnn", "filters"))
    projection_dim = int(need("lstm", "projection_dim"))
    fields = dict(
        char_embedding_dim=int(need("char_cnn", "embedding", "dim")),
        filters=filters,
        activation=char_cnn.get("activation", "relu"),
        n_highway=int(char_cnn.get("n_highway") or 0),
        n_characters=262,  # 261 (training) and 262 (inference) describe the same weights
        max_characters_per_token=int(char_cnn.get("max_characters_per_token", 50)),
        lstm_dim=int(need("lstm", "dim")),
        projection_dim=projection_dim,
        n_layers=int(lstm.get("n_layers", 1)),
        cell_clip=float(lstm["cell_clip"]) if lstm.get("cell_clip") else None,
        proj_clip=float(lstm["proj_clip"]) if lstm.get("proj_clip") else None,
        use_skip_connections=bool(lstm.get("use_skip_connections", False)),
        token_projection=sum(n for _, n in filters) != projection_dim,
    )
    try:
        return BiLMConfig(**fields)
    except ValueError as error:  # an impossible setting: a negative clip, an unknown activation
        raise WeightFileError(f"{source}: {error}") from None


def options_from_config(config: BiLMConfig) -> dict:
    if not config.token_projection and config.n_filters != config.projection_dim:
        raise WeightFileError("the original format has a token projection whenever filters != projection_dim")
    if config.token_projection and config.n_filters == config.projection_dim:
        raise WeightFileError(
            "the original format cannot express a token projection when sum(filters) == projection_dim"
        )
    return {
        "lstm": {
            "dim": config.lstm_dim,
            "projection_dim": config.projection_dim,
            "n_layers": config.n_layers,
            "cell_clip": config.cell_clip or 0,
            "proj_clip": config.proj_clip or 0,
            "use_skip_connections": config.use_skip_connections,
        },
        "char_cnn": {
            "embedding": {"dim": config.char_embedding_dim},
            "filters": [list(f) for f in config.filters],
            "n_highway": config.n_highway,
            "n_characters": config.n_characters,
            "max_characters_per_token": config.max_characters_per_token,
            "activation": config.activation,
        },
    }


# ---- the weight table -----------------------------------------------------------------------


def transpose(w: Array) -> tuple[Array]:
    return (np.ascontiguousarray(w.T),)


def untranspose(w: Array) -> Array:
    return np.ascontiguousarray(w.T)


def identity(w: Array) -> tuple[Array]:
    return (w,)


def unidentity(w: Array) -> Array:
    return w


def pad_char_table(w: Array) -> tuple[Array]:
    """(261, E) -> (262, E): ids are shifted by +1 at inference, row 0 is the padding id."""
    return (np.concatenate([np.zeros((1, w.shape[1]), w.dtype), w]),)


def unpad_char_table(w: Array) -> Array:
    return np.ascontiguousarray(w[1:])


def conv_tf_to_torch(w: Array) -> tuple[Array]:
    """(1, width, E, n) -> Conv1d (n, E, width)."""
    return (np.ascontiguousarray(w[0].transpose(2, 1, 0)),)


def conv_torch_to_tf(w: Array) -> Array:
    return np.ascontiguousarray(w.transpose(2, 1, 0)[None])


def split_lstm_kernel(input_size: int) -> Callable[[Array], tuple[Array, Array]]:
    """W_0 (I + P, 4D), rows [input; previous h] -> W_x (4D, I), W_h (4D, P). Gate order kept."""

    def split(w: Array) -> tuple[Array, Array]:
        return np.ascontiguousarray(w[:input_size].T), np.ascontiguousarray(w[input_size:].T)

    return split


def join_lstm_kernel(w_x: Array, w_h: Array) -> Array:
    return np.ascontiguousarray(np.concatenate([w_x.T, w_h.T], axis=0))


@dataclass(frozen=True)
class WeightMapping:
    dataset: str  # name inside weights.hdf5
    params: tuple[str, ...]  # our state_dict keys
    shape: tuple[int, ...]  # what the file must hold
    to_native: Callable[[Array], tuple[Array, ...]]
    to_original: Callable[..., Array]


def weight_table(config: BiLMConfig) -> list[WeightMapping]:
    """Every dataset of the weight file for this architecture, in file order."""
    E, F, P, D = config.char_embedding_dim, config.n_filters, config.projection_dim, config.lstm_dim
    M = WeightMapping
    table = [M("char_embed", ("token_encoder.char_embedding.weight",), (261, E), pad_char_table, unpad_char_table)]
    for i, (width, num) in enumerate(config.filters):
        table += [
            M(f"CNN/W_cnn_{i}", (f"token_encoder.convs.{i}.weight",), (1, width, E, num), conv_tf_to_torch, conv_torch_to_tf),
            M(f"CNN/b_cnn_{i}", (f"token_encoder.convs.{i}.bias",), (num,), identity, unidentity),
        ]
    for h in range(config.n_highway):
        for tf_name, ours in (("carry", "carry"), ("transform", "transform")):
            prefix = f"token_encoder.highway.{ours}.{h}"
            table += [
                M(f"CNN_high_{h}/W_{tf_name}", (f"{prefix}.weight",), (F, F), transpose, untranspose),
                M(f"CNN_high_{h}/b_{tf_name}", (f"{prefix}.bias",), (F,), identity, unidentity),
            ]
    if config.token_projection:
        table += [
            M("CNN_proj/W_proj", ("token_encoder.projection.weight",), (F, P), transpose, untranspose),
            M("CNN_proj/b_proj", ("token_encoder.projection.bias",), (P,), identity, unidentity),
        ]
    for direction, stack in ((0, "forward_lstm"), (1, "backward_lstm")):
        for layer in range(config.n_layers):
            cell = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            ours = f"{stack}.{layer}"
            table += [
                M(f"{cell}/W_0", (f"{ours}.input_linear.weight", f"{ours}.hidden_linear.weight"),
                  (P + P, 4 * D), split_lstm_kernel(P), join_lstm_kernel),
                M(f"{cell}/B", (f"{ours}.input_linear.bias",), (4 * D,), identity, unidentity),
                M(f"{cell}/W_P_0", (f"{ours}.projection.weight",), (D, P), transpose, untranspose),
            ]
    return table


# ---- reading and writing --------------------------------------------------------------------


def read_options(options_file: str | os.PathLike) -> BiLMConfig:
    path = Path(options_file)
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WeightFileError(f"{path}: options file not found") from None
    except json.JSONDecodeError as error:
        raise WeightFileError(f"{path}: not valid JSON (line {error.lineno}: {error.msg})") from None
    return config_from_options(options, source=str(path))


def read_weights(
    weight_file: str | os.PathLike, config: BiLMConfig, options_file: str | os.PathLike | None = None
) -> dict[str, Array]:
    """weights.hdf5 -> our state dict (numpy float32), checking every dataset's shape against the
    architecture (``options_file``, named in errors) and that every value is finite."""
    import h5py

    path = Path(weight_file)
    described_by = f"by {options_file}" if options_file is not None else "by the options file"
    if not path.exists():
        raise WeightFileError(f"{path}: weight file not found")
    state: dict[str, Array] = {}
    try:
        handle = h5py.File(path, "r")
    except OSError as error:
        raise WeightFileError(f"{path}: not a readable HDF5 file ({error})") from None
    with handle:
        for entry in weight_table(config):
            if entry.dataset not in handle:
                raise WeightFileError(
                    f"{path}: dataset {entry.dataset!r} is missing (expected shape {entry.shape} {described_by}); "
                    "does the options file describe these weights?"
                )
            try:
                array = np.asarray(handle[entry.dataset][...], dtype=np.float32)
            except (OSError, ValueError, TypeError) as error:  # a truncated file fails here, not at open
                raise WeightFileError(f"{path}: dataset {entry.dataset!r} cannot be read ({error}); "
                                      "the file is damaged or incomplete") from None
            problem = describe_non_finite(array)
            if problem:
                raise WeightFileError(f"{path}: dataset {entry.dataset!r} holds {problem}; refusing a damaged model")
            expected = entry.shape
            if entry.dataset == "char_embed" and array.shape == (262, expected[1]):
                state[entry.params[0]] = array  # already carries the padding row
                continue
            if array.shape != expected:
                raise WeightFileError(
                    f"{path}: dataset {entry.dataset!r} has shape {array.shape}, expected {expected} "
                    f"{described_by}; the options and the weights do not belong together"
                )
            for name, value in zip(entry.params, entry.to_native(array)):
                state[name] = value
    return state


def write_original(
    directory: str | os.PathLike,
    config: BiLMConfig,
    state: dict[str, Array],
    *,
    options_name: str = "options.json",
    weights_name: str = "weights.hdf5",
) -> tuple[Path, Path]:
    """Write ``options.json`` + ``weights.hdf5`` (each via a temporary file, then rename)."""
    import h5py

    directory = Path(directory)
    options_path, weights_path = directory / options_name, directory / weights_name
    refuse_non_finite(state, weights_path)  # before anything is written
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_path(weights_path) as tmp:
        with h5py.File(tmp, "w") as out:
            for entry in weight_table(config):
                arrays = [np.asarray(state[name], dtype=np.float32) for name in entry.params]
                out.create_dataset(entry.dataset, data=entry.to_original(*arrays))
    write_json(options_path, options_from_config(config))
    return options_path, weights_path
