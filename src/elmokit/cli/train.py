"""`elmokit train`: train a biLM on your own corpus (resumable; data-parallel under torchrun).

    elmokit train --corpus 'data/train.*.txt.xz' --vocab vocab.txt --preset small --out runs/en \\
        --max-steps 20000 [--set lstm_dim=512] [--resume]
    torchrun --nproc_per_node 4 -m elmokit.cli.main train ...   # the same command, 4 ranks

The settings are resolved by ``elmokit.training.run_config.resolve_run_config``; this module only
maps flags onto it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from elmokit.cli.common import (
    THREADS_HELP,
    apply_threads,
    bilm_parameters,
    dataclass_defaults,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from elmokit.cli.training_common import (
    STEP_LOOP_FLAGS,
    SettingError,
    add_config_flags,
    add_run_folder_arguments,
    add_tokenizer_arguments,
    interrupted,
    tokenizer_changes_from_args,
)

# flag -> TrainingConfig field (flags default to None: "not given", so --resume can tell); the
# help shows TrainingConfig's default.
TRAINING_FLAGS = {
    "batch_size": ("--batch-size", positive_int, "sentences per global batch"),
    "batch_tokens": ("--batch-tokens", positive_int, "tokens per global batch instead of --batch-size"),
    "window": ("--window", non_negative_int,
               "train on --batch-size rows of running text in windows of N tokens, carrying the LSTM state "
               "across batches (bilm-tf: 20; Zaremba et al., Kim et al.: 35); 0 = whole sentences from a zero state"),
    "max_length": ("--max-length", positive_int, "cut longer lines into pieces of at most this many tokens"),
    "shuffle_buffer": ("--shuffle-buffer", positive_int, "sentences in the per-shard shuffle buffer"),
    "optimizer": ("--optimizer", str, "adagrad (bilm-tf's) or sgd (Zaremba's and Kim's PTB recipe)"),
    "lr": ("--lr", positive_float, "learning rate (Adagrad's default is bilm-tf's)"),
    "initial_accumulator": ("--initial-accumulator", positive_float, "Adagrad initial accumulator (as TF)"),
    "lr_decay": ("--lr-decay", positive_float,
                 "multiply the learning rate by this when a validation (--valid) gains no more than "
                 "--lr-decay-min-gain perplexity on the previous one (Kim et al.: 0.5; 1 = never)"),
    "lr_decay_min_gain": ("--lr-decay-min-gain", non_negative_float, "see --lr-decay (Kim et al.: 1.0)"),
    "clip_norm": ("--clip-norm", positive_float, "clip the global gradient norm to this (bilm-tf's)"),
    "loss_scale": ("--loss-scale", positive_float,
                   "multiply the mean per-token loss by this before differentiating (bilm-tf's unroll_steps)"),
    "softmax": ("--softmax", str, "full, sampled, or auto = full iff vocab <= 2 x negatives"),
    "n_negative_samples": ("--negatives", positive_int, "negative samples per step for the sampled softmax (bilm-tf's)"),
    "seed": ("--seed", non_negative_int, "seed of the weights, data order, negatives and dropout"),
    **STEP_LOOP_FLAGS,
    "valid_every": ("--valid-every", positive_int, "held-out perplexity every N steps, with --valid"),
    "valid_sentences": ("--valid-sentences", positive_int, "evaluate the first N sentences of --valid"),
}


def register(subparsers) -> None:

    parser = subparsers.add_parser(
        "train",
        help="train a biLM language model on a corpus (resumable, torchrun for data parallelism)",
        description="Train ELMo's biLM (forward + backward LM, shared token encoder and softmax) with "
        "bilm-tf's recipe. The run folder --out records the command, the resolved configs, metrics "
        "(metrics.jsonl), checkpoints, and at the end the model (--out/model). With --resume, every "
        "setting not given is the run's.",
    )
    parser.add_argument("--corpus", action="append", default=None,
                        help="training files or glob (plain, .xz, .gz), one sentence/paragraph per line; repeatable "
                        "(default: the resumed run's)")
    parser.add_argument("--vocab", default=None,
                        help="output vocabulary (bilm-tf format, from `elmokit vocab`) (default: the resumed run's)")
    parser.add_argument("--preset", default=None,
                        help="architecture from the presets table (tiny, small, compact, allennlp_small, allennlp_medium, "
                        "original) "
                        "(default: the resumed run's)")
    parser.add_argument("--config", default=None,
                        help="architecture from a file: an elmokit config.json or an original options.json (default: none)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a model or training config field, e.g. --set lstm_dim=512 (JSON values); repeatable")
    add_run_folder_arguments(parser)
    parser.add_argument("--init-from", default=None, metavar="MODEL",
                        help="start from the weights of a model folder written by `elmokit train` (or 'default'), "
                        "like bilm-tf's restart.py; its architecture, vocabulary and tokenizer are taken unless "
                        "given, and the optimizer starts fresh (default: random weights)")
    add_config_flags(parser, TRAINING_FLAGS, dataclass_defaults("elmokit.training.config", "TrainingConfig"))
    parser.add_argument("--valid", dest="valid_corpus", action="append", default=None,
                        help="held-out file or glob: full-softmax perplexity logged to metrics.jsonl every --valid-every steps "
                        "(default: none)")
    parser.add_argument("--bf16", action="store_true", default=None,
                        help="bfloat16 autocast of the forward pass (GPU; optional on CPU) (default: off)")
    add_tokenizer_arguments(parser)
    parser.add_argument("--threads", type=positive_int, default=None, help=THREADS_HELP)
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    parser.set_defaults(func=run)


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


def resolve(args: argparse.Namespace):
    """The library's RunConfig from the flags."""
    from elmokit.training.run_config import resolve_run_config

    training = {name: getattr(args, name) for name in TRAINING_FLAGS}
    training["bf16"], training["valid_corpus"] = args.bf16, args.valid_corpus
    return resolve_run_config(args.out, resume=args.resume, preset=args.preset, config=args.config, sets=parse_sets(args.set),
                              training=training, tokenizer=tokenizer_changes_from_args(args), corpus=args.corpus,
                              vocab=args.vocab, init_from=args.init_from)


def run(args: argparse.Namespace) -> int:
    from elmokit.training.trainer import train

    config = resolve(args)
    apply_threads(args, bilm_parameters(config.model_config))
    if args.verbose and os.environ.get("RANK", "0") == "0":  # the run folder records it; torchrun: say it once
        print("model config:", json.dumps(config.model_config.to_dict()), file=sys.stderr)
        print("training config:", json.dumps(config.training.to_dict()), file=sys.stderr)
    command = "elmokit " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["train"] else None
    try:
        result = train(args.out, **config.train_arguments(), resume=args.resume, command=command, device=args.device)
    except KeyboardInterrupt as stop:
        return interrupted("train", args.out, stop)
    if result.model_dir is not None:
        loss = f"{result.loss:.4f}" if result.loss is not None else "n/a"
        print(f"elmokit train: step {result.step}, {result.tokens:,} tokens, last loss {loss}; "
              f"model in {result.model_dir}", file=sys.stderr)
    return 0
