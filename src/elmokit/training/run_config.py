"""What a run trains: the model and training configs, the corpus and the vocabulary, resolved once
from a preset or config file, field overrides and (on resume) the run folder's saved settings.

    from elmokit.training.run_config import resolve_run_config
    from elmokit.training.trainer import train

    run = resolve_run_config("runs/en", preset="small", corpus="data/*.txt", vocab="vocab.txt",
                             training={"max_steps": 20000}, sets={"lstm_dim": 512})
    train("runs/en", **run.train_arguments())
    # later, the same run continued: everything comes from the folder
    run = resolve_run_config("runs/en", resume=True, training={"max_steps": 40000})

``elmokit train`` is this function plus its flags.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elmokit.bilm import PRESETS, BiLMConfig
from elmokit.errors import UserError
from elmokit.formats import ModelFolderError, recorded_tokenizer, resolve_model_path
from elmokit.formats.bilm_hdf5 import config_from_options
from elmokit.lm import LM_WEIGHTS_NAME, VOCAB_NAME
from elmokit.text.vocab import Vocabulary
from elmokit.training.config import TrainingConfig
from elmokit.training.trainer import RUN_KIND, RunFolder, saved_configs

__all__ = ["ConfigError", "RunConfig", "resolve_run_config", "load_model_config_file"]


class ConfigError(UserError):
    """A setting that cannot be used; the message names it and the fix."""


@dataclass(frozen=True)
class RunConfig:
    model_config: BiLMConfig
    training: TrainingConfig
    corpus: list[str]
    vocab: str
    folder: Any = dataclasses.field(default=None, compare=False, repr=False)  # the run folder, opened (and read) once

    def train_arguments(self) -> dict[str, Any]:
        """Keyword arguments of ``trainer.train`` (with ``run_dir`` and ``resume`` beside)."""
        return {"corpus": self.corpus, "vocab": self.vocab, "model_config": self.model_config, "training": self.training,
                "folder": self.folder}


def load_model_config_file(path: str | os.PathLike) -> BiLMConfig:
    """An elmokit ``config.json`` (has ``format_version``) or an original ``options.json``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"--config {path}: not JSON (line {error.lineno}: {error.msg})") from None
    try:
        if isinstance(data, dict) and "format_version" in data:
            return BiLMConfig.from_dict(data)
        if isinstance(data, dict) and "lstm" in data and "char_cnn" in data:
            return config_from_options(data, path)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"--config {path}: {error}") from None
    raise ConfigError(f"--config {path}: neither an elmokit config.json (format_version) nor an options.json (lstm, char_cnn)")


def _saved_run(run_dir: Path, resume: bool):
    """(the run folder, opened once; (model config, training config, training.json) of its run when resumed, or None)."""
    folder = RunFolder.open(run_dir, kind=RUN_KIND, resume=resume)
    if not resume or folder.record is None:
        return folder, None  # nothing to resume (a folder made for a run that has not started): start it
    return folder, saved_configs(folder)


def _model_config(preset: str | None, config: str | os.PathLike | BiLMConfig | None, saved) -> BiLMConfig:
    if preset and config:
        raise ConfigError("give --preset or --config, not both")
    if preset:
        if preset not in PRESETS:
            raise ConfigError(f"--preset {preset!r}: not one of {', '.join(PRESETS)}")
        return PRESETS[preset]
    if isinstance(config, BiLMConfig):
        return config
    if config:
        return load_model_config_file(config)
    if saved:
        return saved[0]
    raise ConfigError("give --preset NAME or --config FILE (the architecture)")


def _split_sets(sets: dict[str, Any]) -> tuple[dict, dict]:
    model_fields = {f.name for f in dataclasses.fields(BiLMConfig)}
    training_fields = {f.name for f in dataclasses.fields(TrainingConfig)}
    unknown = sorted(set(sets) - model_fields - training_fields)
    if unknown:
        raise ConfigError(f"--set: unknown field(s) {unknown}; model fields: {sorted(model_fields)}; "
                          f"training fields: {sorted(training_fields)}")
    return ({k: v for k, v in sets.items() if k in model_fields}, {k: v for k, v in sets.items() if k in training_fields})


def merge_tokenizer_spec(requested: dict | None, saved: dict | None) -> dict:
    """The tokenizer fields ``requested`` laid over ``saved`` (or the default whitespace spec); another kind
    starts from that kind's own defaults."""
    base = dict(saved or {"kind": "whitespace", "lowercase": False})
    if not requested:
        return base
    if requested.get("kind", base.get("kind")) != base.get("kind"):
        base = {"lowercase": base.get("lowercase", False)}  # another kind: its own defaults
    return {**base, **requested}


def resolve_run_config(
    run_dir: str | os.PathLike,
    *,
    resume: bool = False,
    preset: str | None = None,
    config: str | os.PathLike | BiLMConfig | None = None,
    sets: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    tokenizer: dict | None = None,
    corpus: str | list[str] | None = None,
    vocab: str | os.PathLike | None = None,
    init_from: str | os.PathLike | None = None,
) -> RunConfig:
    """The settings of a run in ``run_dir``, in this order of precedence (later wins):

    1. the architecture: ``preset`` (a name in ``bilm.PRESETS``) or ``config`` (a BiLMConfig, an
       elmokit config.json or an original options.json); with ``resume`` and neither, the run's;
    2. the training config: ``TrainingConfig``'s defaults, or the resumed run's saved one;
    3. ``sets``: field -> value for either config (``--set FIELD=VALUE``);
    4. ``training``: TrainingConfig field -> value (the explicit flags);
    5. ``tokenizer``: the fields of the tokenizer spec to change (``{"kind": "regex"}``,
       ``{"lowercase": True}``) over the saved (or default whitespace) one.

    ``corpus`` and ``vocab`` default, on resume, to the run's corpus patterns and its vocab.txt.
    ``init_from`` (a model folder written by ``elmokit train``, or a shipped name such as ``default``)
    starts a new run from that model's weights; the architecture, the vocabulary and the tokenizer
    then default to the model's own, and must equal them when given.
    Raises ConfigError (a bad setting) or RunError (a run folder the request does not fit).
    """
    run_dir = Path(run_dir)
    folder, saved = _saved_run(run_dir, resume)
    start = _start_model(init_from) if init_from is not None else None
    if start is not None and not (preset or config):
        config = start["config"]
    model_config = _model_config(preset, config, saved)
    model_sets, training_sets = _split_sets(dict(sets or {}))
    try:
        model_config = model_config.replace(**model_sets)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"--set: {error}") from None

    values = {k: v for k, v in saved[1].to_dict().items() if k != "format_version"} if saved else {}
    values.update(training_sets)
    values.update({k: v for k, v in (training or {}).items() if v is not None})
    if start is not None:
        values["init_from"] = os.fspath(init_from)
        values.setdefault("tokenizer", start["tokenizer"])
    try:
        values["tokenizer"] = merge_tokenizer_spec(tokenizer, values.get("tokenizer"))
        resolved = TrainingConfig(**values)
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None

    if isinstance(corpus, (str, os.PathLike)):
        corpus = [os.fspath(corpus)]
    corpus = list(corpus) if corpus else (saved[2]["corpus"]["patterns"] if saved else None)
    vocab = os.fspath(vocab) if vocab else (str(run_dir / "vocab.txt") if saved else start and start["vocab"])
    if not corpus or not vocab:
        raise ConfigError("give --corpus and --vocab (or --resume an existing run folder)")
    if start is not None:
        _check_start_model(start, model_config, resolved, vocab)
    return RunConfig(model_config, resolved, corpus, vocab, folder)


def _start_model(init_from: str | os.PathLike) -> dict:
    """What a run started from a trained model takes from it: its folder, config, vocabulary, tokenizer."""
    try:
        folder = resolve_model_path(init_from)
    except (ModelFolderError, OSError) as error:
        raise ConfigError(f"--init-from {init_from}: {error}") from None
    missing = [name for name in ("config.json", LM_WEIGHTS_NAME, VOCAB_NAME) if not (folder / name).exists()]
    if missing:
        raise ConfigError(f"--init-from {init_from}: {folder} has no {', '.join(missing)}; a run starts from a "
                          "folder written by `elmokit train` (the biLM and its softmax)")
    try:
        tokenizer = recorded_tokenizer(folder)
    except ModelFolderError as error:
        raise ConfigError(f"--init-from {init_from}: {error}") from None
    return {"folder": folder, "config": load_model_config_file(folder / "config.json"),
            "vocab": str(folder / VOCAB_NAME), "tokenizer": tokenizer}


def _check_start_model(start: dict, model_config: BiLMConfig, training: TrainingConfig, vocab: str) -> None:
    """The run must be able to take the model's weights as they are, and read text as the model did."""
    problems = []
    if start["config"] != model_config:
        diff = {k: (v, getattr(model_config, k)) for k, v in vars(start["config"]).items() if getattr(model_config, k) != v}
        problems.append(f"the architecture differs {diff} (model, requested)")
    if Vocabulary.load(vocab).tokens != Vocabulary.load(start["vocab"]).tokens:
        problems.append(f"--vocab {vocab} is not the model's vocabulary (its softmax has one row per entry of {start['vocab']})")
    if start["tokenizer"] is not None and start["tokenizer"] != training.tokenizer:
        problems.append(f"the tokenizer {training.tokenizer} is not the model's {start['tokenizer']}")
    if problems:
        raise ConfigError(f"--init-from {training.init_from}: " + "; ".join(problems)
                          + ". Fix: leave --preset/--config, --vocab and --tokenizer out to take the model's own")
