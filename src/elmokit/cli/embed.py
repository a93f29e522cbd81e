"""`elmokit embed INPUT OUTPUT (--all | --top | --average)`: the old `allennlp elmo` command."""

from __future__ import annotations

import argparse
import sys

from elmokit.cli.common import (
    add_model_arguments,
    add_speed_arguments,
    add_threads_argument,
    apply_threads,
    load_embedder,
    positive_int,
    run_reporting_errors,
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "embed",
        help="embed a file of sentences (one whitespace-tokenised sentence per line) into HDF5",
        description="Embed one whitespace-tokenised sentence per line into HDF5, one dataset per line "
        "keyed by line number (0-based), in the layout of the old `allennlp elmo` command. The output is "
        "written under a temporary name beside it (.OUTPUT.elmokit-tmp-HOST-PID) and renamed at the end: "
        "an interrupted run (Ctrl-C, SIGTERM) removes it and leaves an existing OUTPUT as it was; one left by "
        "a killed run is removed by the next run for the same OUTPUT.",
    )
    parser.add_argument("input_file", help="UTF-8 text, one tokenised sentence per line; '-' reads standard input")
    parser.add_argument("output_file", help="HDF5 file to write (replaced only when the run succeeds; never the input)")
    layers = parser.add_mutually_exclusive_group(required=True)
    layers.add_argument("--all", dest="output_format", action="store_const", const="all", help="all layers: (L+1, n, 2P)")
    layers.add_argument("--top", dest="output_format", action="store_const", const="top", help="top layer: (n, 2P)")
    layers.add_argument("--average", dest="output_format", action="store_const", const="average",
                        help="mean of the layers: (n, 2P)")
    add_model_arguments(parser)
    parser.add_argument("--batch-size", type=positive_int, default=64, help="sentences per batch (default 64)")
    parser.add_argument(
        "--stateful", action="store_true",
        help="carry LSTM states across batches in file order, exactly as the reference did "
        "(vectors then depend on the batch and order; default: every sentence starts from zero)",
    )
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--use-sentence-keys", action="store_true",
                      help="key datasets by the sentence text instead of the line number")
    keys.add_argument("--forget-sentences", action="store_true", help="do not write the sentence_to_index dataset")
    parser.add_argument("--allow-empty-lines", action="store_true",
                        help="write zeros of shape (L+1, 0, 2P) for empty lines instead of failing")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar (default: only on a terminal)")
    add_speed_arguments(parser)
    add_threads_argument(parser)
    parser.set_defaults(func=lambda args: run_reporting_errors("embed", run, args))


def run(args: argparse.Namespace) -> int:
    from elmokit.formats.embedding_hdf5 import check_paths

    check_paths(args.input_file, args.output_file)  # before the model is loaded: a wrong path fails at once
    apply_threads(args)
    embedder = load_embedder(args, stateful=args.stateful, batch_size=args.batch_size)
    print(
        f"elmokit embed: model={embedder.name} layers={embedder.num_layers} dim={embedder.dim} "
        f"format={args.output_format} batch_size={args.batch_size} stateful={args.stateful} "
        f"precision={args.precision} token_cache={args.token_cache}",
        file=sys.stderr,
    )
    embedder.embed_file(
        args.input_file,
        args.output_file,
        output_format=args.output_format,
        use_sentence_keys=args.use_sentence_keys,
        forget_sentences=args.forget_sentences,
        allow_empty_lines=args.allow_empty_lines,
        progress=args.progress,
    )
    return 0
