"""Pieces every subcommand shares: model selection flags, error reporting, threads."""

from __future__ import annotations

import argparse
import logging
import sys

from elmokit.formats import ModelFolderError, WeightFileError
from elmokit.formats.embedding_hdf5 import InputFileError

from elmokit.warm_state import WarmStateError

# Errors that are the user's input, reported as one line without a traceback.
USER_ERRORS = (InputFileError, WeightFileError, ModelFolderError, WarmStateError, FileNotFoundError)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model (default: the shipped default model)")
    group.add_argument("--model", default=None, help="'default', a native model folder, or a folder with options.json + weights.hdf5")
    group.add_argument("--options-file", default=None, help="original options.json (with --weight-file)")
    group.add_argument("--weight-file", default=None, help="original weights.hdf5 (with --options-file)")
    group.add_argument("--initial-state", choices=("zero", "warm"), default="zero",
                       help="where every sentence's LSTM state starts: zero (default) or the model's warm state "
                       "(warm_state.safetensors, written by `elmokit warm-state`)")


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")


def add_speed_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="fp32: exact (default); bf16: about 2x faster, ~1e-2 relative error (see docs/benchmarks.md)")
    parser.add_argument("--token-cache", type=int, default=20_000, metavar="N",
                        help="cache the token vectors of N spellings (exact; 0 disables; default 20000)")


def load_embedder(args: argparse.Namespace, *, stateful: bool = False, batch_size: int = 64):
    from elmokit.elmo import Embedder

    options = {
        "batch_size": batch_size,
        "precision": getattr(args, "precision", "fp32"),
        "token_cache_size": getattr(args, "token_cache", 20_000),
        "initial_state": getattr(args, "initial_state", "zero"),
    }
    if (args.options_file is None) != (args.weight_file is None):
        raise ModelFolderError("--options-file and --weight-file go together")
    if args.options_file is not None:
        if args.model is not None:
            raise ModelFolderError("give either --model or --options-file/--weight-file, not both")
        return Embedder.from_original(args.options_file, args.weight_file, stateful=stateful, **options)
    return Embedder.load(args.model or "default", stateful=stateful, **options)


def apply_threads(args: argparse.Namespace) -> None:
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def run_reporting_errors(command: str, func, args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        return int(func(args) or 0)
    except USER_ERRORS as error:
        print(f"elmokit {command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"elmokit {command}: interrupted; nothing was written to the output", file=sys.stderr)
        return 130
