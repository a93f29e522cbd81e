"""`elmokit distill --teacher DIR --out RUN --corpus FILE`: DistilBERT's recipe, TinyBERT's losses optional, trained
on the engine's step loop into a run folder (``--resume``, checkpoints, metrics like ``elmokit pretrain``)."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys

from elmokit.cli.common import (
    CORES_THREADS_HELP,
    apply_threads,
    dataclass_defaults,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from elmokit.cli.training_common import STEP_LOOP_FLAGS, SettingError, add_config_flags, add_run_folder_arguments

# flag -> DistillRunConfig field; flags default to None ("not given"), so --resume can tell
RUN_FLAGS = {
    **{name: STEP_LOOP_FLAGS[name] for name in STEP_LOOP_FLAGS if name != "epochs"},
    "max_steps": (("--max-steps", "--steps"), positive_int, "stop after this many optimiser steps"),
    "batch_size": (("--batch-size",), positive_int, "segments per batch"),
    "max_tokens": (("--max-tokens",), positive_int, "longest segment in pieces"),
    "lr": (("--lr",), positive_float, "Adam learning rate (DistilBERT's 5e-4)"),
    "clip_norm": (("--clip-norm",), positive_float, "clip the gradient norm to this (the reference distiller's 5)"),
    "seed": (("--seed",), non_negative_int, "seed of the student's masks, order and dropout"),
}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "distill",
        help="distil a BERT teacher folder into a half-depth DistilBERT student (resumable)",
        description="Soft-target cross-entropy at temperature T (x T^2) + MLM + cosine loss on the last hidden "
        "states, weights 5/2/1 (Sanh et al. 2019); the student starts from teacher layers 0, 2, ... "
        "Optional TinyBERT hidden-state and attention MSE. The run folder --out records the command, the settings, "
        "metrics.jsonl and checkpoints; the student ends in --out/model. See docs/pretraining.md.",
    )
    parser.add_argument("--teacher", default=None,
                        help="the teacher: a transformers BERT masked-LM folder with its tokenizer (default: the resumed run's)")
    add_run_folder_arguments(parser)
    parser.add_argument("--corpus", action="append", default=None,
                        help="text file, one segment a line; repeatable (default: the resumed run's)")
    add_config_flags(parser, RUN_FLAGS, dataclass_defaults("elmokit.pretraining.distill", "DistillRunConfig"))
    parser.add_argument("--temperature", type=positive_float, default=2.0, help="softmax temperature T (default: 2.0)")
    parser.add_argument("--alpha-ce", type=non_negative_float, default=5.0, help="weight of the soft cross-entropy (default: 5)")
    parser.add_argument("--alpha-mlm", type=non_negative_float, default=2.0, help="weight of the MLM loss (default: 2)")
    parser.add_argument("--alpha-cos", type=non_negative_float, default=1.0, help="weight of the cosine loss (default: 1)")
    parser.add_argument("--tinybert-hidden", type=non_negative_float, default=0.0,
                        help="weight of TinyBERT's layer-to-layer hidden MSE (default: 0 = off)")
    parser.add_argument("--tinybert-attention", type=non_negative_float, default=0.0,
                        help="weight of TinyBERT's attention MSE (default: 0 = off)")
    parser.add_argument("--threads", type=positive_int, default=None, help=CORES_THREADS_HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elmokit.engine.run_folder import RunFolder
    from elmokit.pretraining.distill import RUN_KIND, DistillationConfig, DistillRunConfig, distill

    apply_threads(args)
    folder = RunFolder.open(args.out, kind=RUN_KIND, resume=args.resume)
    saved = folder.record if args.resume and folder.record is not None else {}
    base = {k: v for k, v in saved.get("distill", {}).items() if k != "format_version"}
    teacher = args.teacher or saved.get("teacher", {}).get("path")
    corpus = args.corpus or saved.get("corpus", {}).get("patterns")
    if not (teacher and corpus):
        raise SettingError("give --teacher and --corpus (or --resume a run folder that has them)")
    try:
        config = DistillRunConfig(**{**base, **{k: getattr(args, k) for k in RUN_FLAGS if getattr(args, k) is not None}})
    except (TypeError, ValueError) as error:
        raise SettingError(str(error)) from None
    losses = DistillationConfig(temperature=args.temperature, alpha_ce=args.alpha_ce, alpha_mlm=args.alpha_mlm,
                                alpha_cos=args.alpha_cos, alpha_hidden=args.tinybert_hidden,
                                alpha_attention=args.tinybert_attention)
    if saved.get("losses"):  # a resumed run keeps its losses unless flags change them (then it is refused)
        given = {k: v for k, v in dataclasses.asdict(losses).items() if v != getattr(DistillationConfig(), k)}
        losses = DistillationConfig(**{**saved["losses"], **given})
    argv = getattr(args, "argv", None) or sys.argv[1:]
    result = distill(teacher, args.out, corpus, config=config, losses=losses, resume=args.resume,
                     command="elmokit " + " ".join(shlex.quote(a) for a in argv), folder=folder)
    loss = f"{result.loss:.4f}" if result.loss is not None else "n/a"
    print(f"elmokit distill: step {result.step}, last loss {loss}; the student is in {result.model_dir}", file=sys.stderr)
    return 0
