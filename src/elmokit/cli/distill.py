"""`elmokit distill --teacher DIR --out DIR --corpus FILE`: DistilBERT's recipe, TinyBERT's losses optional."""

from __future__ import annotations

import argparse
import sys

from elmokit.cli.common import (
    CORES_THREADS_HELP,
    apply_threads,
    non_negative_float,
    positive_float,
    positive_int,
    run_reporting_errors,
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "distill",
        help="distil a BERT teacher folder into a half-depth DistilBERT student",
        description="Soft-target cross-entropy at temperature T (x T^2) + MLM + cosine loss on the last hidden "
        "states, weights 5/2/1 (Sanh et al. 2019); the student starts from teacher layers 0, 2, ... "
        "Optional TinyBERT hidden-state and attention MSE. See docs/pretraining.md.",
    )
    parser.add_argument("--teacher", required=True, help="the teacher: a transformers BERT masked-LM folder with its tokenizer")
    parser.add_argument("--out", required=True, help="folder to write the student to (replaced atomically)")
    parser.add_argument("--corpus", action="append", required=True, help="text file, one segment a line; repeatable")
    parser.add_argument("--steps", type=positive_int, default=1000, help="optimizer steps (default: 1000)")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="segments per batch (default: 32)")
    parser.add_argument("--max-tokens", type=positive_int, default=128, help="longest segment in pieces (default: 128)")
    parser.add_argument("--lr", type=positive_float, default=5e-4, help="Adam learning rate (default: 5e-4, DistilBERT's)")
    parser.add_argument("--temperature", type=positive_float, default=2.0, help="softmax temperature T (default: 2.0)")
    parser.add_argument("--alpha-ce", type=non_negative_float, default=5.0, help="weight of the soft cross-entropy (default: 5)")
    parser.add_argument("--alpha-mlm", type=non_negative_float, default=2.0, help="weight of the MLM loss (default: 2)")
    parser.add_argument("--alpha-cos", type=non_negative_float, default=1.0, help="weight of the cosine loss (default: 1)")
    parser.add_argument("--tinybert-hidden", type=non_negative_float, default=0.0,
                        help="weight of TinyBERT's layer-to-layer hidden MSE (default: 0 = off)")
    parser.add_argument("--tinybert-attention", type=non_negative_float, default=0.0,
                        help="weight of TinyBERT's attention MSE (default: 0 = off)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the student's masks and order (default: 0)")
    parser.add_argument("--threads", type=positive_int, default=None, help=CORES_THREADS_HELP)
    parser.set_defaults(func=lambda args: run_reporting_errors("distill", run, args))


def run(args: argparse.Namespace) -> int:
    from elmokit.pretraining.distill import DistillationConfig, distill

    apply_threads(args)
    config = DistillationConfig(temperature=args.temperature, alpha_ce=args.alpha_ce, alpha_mlm=args.alpha_mlm,
                                alpha_cos=args.alpha_cos, alpha_hidden=args.tinybert_hidden,
                                alpha_attention=args.tinybert_attention)
    last = distill(args.teacher, args.out, args.corpus, steps=args.steps, batch_size=args.batch_size,
                   max_tokens=args.max_tokens, lr=args.lr, seed=args.seed, config=config,
                   log=lambda line: print(f"elmokit distill: {line}", file=sys.stderr))
    print(f"elmokit distill: wrote the student to {args.out} after {last['step']} steps (loss {last['loss']:.4f})",
          file=sys.stderr)
    return 0
