"""`elmokit train`: train a biLM on your own corpus (resumable; data-parallel under torchrun).

    elmokit train --corpus 'data/train.*.txt.xz' --vocab vocab.txt --preset small --out runs/en \\
        --max-steps 20000 [--set lstm_dim=512] [--resume]
    torchrun --nproc_per_node 4 -m elmokit.cli.main train ...   # the same command, 4 ranks
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path

from elmokit.cli.training_common import (
    SettingError,
    add_tokenizer_arguments,
    run_training_command,
    tokenizer_spec_from_args,
)

# flag -> TrainingConfig field (flags default to None: "not given", so --resume can tell).
TRAINING_FLAGS = {
    "batch_size": ("--batch-size", int, "sentences per global batch (default 64)"),
    "batch_tokens": ("--batch-tokens", int, "tokens per global batch instead of --batch-size (default: off)"),
    "max_length": ("--max-length", int, "cut longer lines into pieces of at most this many tokens (default 50)"),
    "shuffle_buffer": ("--shuffle-buffer", int, "sentences in the per-shard shuffle buffer (default 10000)"),
    "lr": ("--lr", float, "Adagrad learning rate (default 0.2, bilm-tf)"),
    "initial_accumulator": ("--initial-accumulator", float, "Adagrad initial accumulator (default 1.0, as TF)"),
    "clip_norm": ("--clip-norm", float, "clip the global gradient norm to this (default 10.0, bilm-tf)"),
    "loss_scale": ("--loss-scale", float, "multiply the mean per-token loss by this before differentiating (default 20, bilm-tf's unroll_steps)"),
    "softmax": ("--softmax", str, "full, sampled, or auto = full iff vocab <= 2 x negatives (default auto)"),
    "n_negative_samples": ("--negatives", int, "negative samples per step for the sampled softmax (default 8192, bilm-tf)"),
    "seed": ("--seed", int, "seed of the weights, data order, negatives and dropout (default 0)"),
    "max_steps": ("--max-steps", int, "stop after this many optimiser steps"),
    "epochs": ("--epochs", int, "stop after this many passes over the corpus"),
    "checkpoint_every": ("--checkpoint-every", int, "write a checkpoint every N steps (default 1000; always at the end)"),
    "keep_checkpoints": ("--keep-checkpoints", int, "keep the newest N checkpoints (default 2)"),
    "log_every": ("--log-every", int, "append to metrics.jsonl every N steps (default 10)"),
    "valid_every": ("--valid-every", int, "held-out perplexity every N steps, with --valid (default 1000)"),
    "valid_sentences": ("--valid-sentences", int, "evaluate the first N sentences of --valid (default 1000)"),
}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a biLM language model on a corpus (resumable, torchrun for data parallelism)",
        description="Train ELMo's biLM (forward + backward LM, shared token encoder and softmax) with "
        "bilm-tf's recipe. The run folder --out records the command, the resolved configs, metrics "
        "(metrics.jsonl), checkpoints, and at the end the model (--out/model).",
    )
    parser.add_argument("--corpus", action="append", default=None, help="training files or glob (plain, .xz, .gz), one sentence/paragraph per line; repeatable")
    parser.add_argument("--vocab", default=None, help="output vocabulary (bilm-tf format, from `elmokit vocab`)")
    parser.add_argument("--preset", default=None, help="architecture from the presets table (tiny, small, allennlp_small, allennlp_medium, original)")
    parser.add_argument("--config", default=None, help="architecture from a file: an elmokit config.json or an original options.json")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a model or training config field, e.g. --set lstm_dim=512 (JSON values); repeatable")
    parser.add_argument("--out", required=True, help="run folder (created; must be new unless --resume)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint, exactly")
    for field_name, (flag, kind, text) in TRAINING_FLAGS.items():
        parser.add_argument(flag, dest=field_name, type=kind, default=None, help=text)
    parser.add_argument("--valid", dest="valid_corpus", action="append", default=None, help="held-out file or glob: full-softmax perplexity logged to metrics.jsonl every --valid-every steps")
    parser.add_argument("--bf16", action="store_true", default=None, help="bfloat16 autocast of the forward pass (GPU; optional on CPU)")
    add_tokenizer_arguments(parser)
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    parser.set_defaults(func=lambda args: run_training_command("train", run, args))


def parse_sets(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingError(f"--set {item!r}: expected FIELD=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def load_model_config_file(path: str):
    from elmokit.bilm import BiLMConfig
    from elmokit.formats.bilm_hdf5 import config_from_options

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingError(f"--config {path}: no such file") from None
    except json.JSONDecodeError as error:
        raise SettingError(f"--config {path}: not JSON (line {error.lineno}: {error.msg})") from None
    try:
        if "format_version" in data:
            return BiLMConfig.from_dict(data)
        if "lstm" in data and "char_cnn" in data:
            return config_from_options(data, path)
    except (TypeError, ValueError) as error:
        raise SettingError(f"--config {path}: {error}") from None
    raise SettingError(f"--config {path}: neither an elmokit config.json (format_version) nor an options.json (lstm, char_cnn)")


def resolve(args: argparse.Namespace):
    """(model config, training config, corpus patterns, vocabulary path) from flags + a resumed run."""
    from elmokit.bilm import PRESETS, BiLMConfig
    from elmokit.training.config import TrainingConfig
    from elmokit.training.trainer import read_run

    run_dir = Path(args.out)
    saved = read_run(run_dir) if args.resume and (run_dir / "training.json").exists() else None
    if args.preset and args.config:
        raise SettingError("give --preset or --config, not both")
    if args.preset:
        if args.preset not in PRESETS:
            raise SettingError(f"--preset {args.preset!r}: not one of {', '.join(PRESETS)}")
        model_config = PRESETS[args.preset]
    elif args.config:
        model_config = load_model_config_file(args.config)
    elif saved:
        model_config = saved[0]
    else:
        raise SettingError("give --preset NAME or --config FILE (the architecture)")

    sets = parse_sets(args.set)
    model_fields = {f.name for f in dataclasses.fields(BiLMConfig)}
    training_fields = {f.name for f in dataclasses.fields(TrainingConfig)}
    unknown = sorted(set(sets) - model_fields - training_fields)
    if unknown:
        raise SettingError(f"--set: unknown field(s) {unknown}; model fields: {sorted(model_fields)}; "
                           f"training fields: {sorted(training_fields)}")
    try:
        model_config = model_config.replace(**{k: v for k, v in sets.items() if k in model_fields})
    except (TypeError, ValueError) as error:
        raise SettingError(f"--set: {error}") from None

    values = {k: v for k, v in saved[1].to_dict().items() if k != "format_version"} if saved else {}
    values.update({k: v for k, v in sets.items() if k in training_fields})
    for field_name in TRAINING_FLAGS:
        if getattr(args, field_name) is not None:
            values[field_name] = getattr(args, field_name)
    if args.bf16 is not None:
        values["bf16"] = args.bf16
    if args.valid_corpus is not None:
        values["valid_corpus"] = args.valid_corpus
    try:
        values["tokenizer"] = tokenizer_spec_from_args(args, fallback=values.get("tokenizer"))
        training = TrainingConfig(**values)
    except (TypeError, ValueError) as error:
        raise SettingError(str(error)) from None

    corpus = args.corpus or (saved[2]["corpus"]["patterns"] if saved else None)
    vocab = args.vocab or (str(run_dir / "vocab.txt") if saved else None)
    if not corpus or not vocab:
        raise SettingError("give --corpus and --vocab (or --resume an existing run folder)")
    return model_config, training, corpus, vocab


def run(args: argparse.Namespace) -> int:
    import torch

    from elmokit.training.trainer import train

    if args.threads:
        torch.set_num_threads(args.threads)
    model_config, training, corpus, vocab = resolve(args)
    if os.environ.get("RANK", "0") == "0":  # torchrun: say it once
        print("model config:", json.dumps(model_config.to_dict()), file=sys.stderr)
        print("training config:", json.dumps(training.to_dict()), file=sys.stderr)
    command = "elmokit " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["train"] else None
    result = train(args.out, corpus=corpus, vocab=vocab, model_config=model_config, training=training,
                   resume=args.resume, command=command, device=args.device)
    if result.model_dir is not None:
        loss = f"{result.loss:.4f}" if result.loss is not None else "n/a"
        print(f"elmokit train: step {result.step}, {result.tokens:,} tokens, last loss {loss}; "
              f"model in {result.model_dir}", file=sys.stderr)
    return 0
