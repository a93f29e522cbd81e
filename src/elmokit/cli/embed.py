"""`elmokit embed INPUT OUTPUT [--all | --top | --average]`: the old `allennlp elmo` command (which required
one of the three; here --all, every layer, is the default)."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from elmokit.cli.common import (
    add_model_arguments,
    add_speed_arguments,
    add_threads_argument,
    add_tokenizer_argument,
    apply_threads,
    load_embedder,
    positive_int,
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "embed",
        help="embed a file of sentences (one whitespace-tokenised sentence per line) into HDF5",
        description="Embed one whitespace-tokenised sentence per line into HDF5, one dataset per line "
        "keyed by line number (0-based), in the layout of the old `allennlp elmo` command. The output is "
        "written under a temporary name beside it (.OUTPUT.elmokit-tmp-HOST-PID) and renamed at the end: "
        "an interrupted run (Ctrl-C, SIGTERM) removes it and leaves an existing OUTPUT as it was; one left by "
        "a killed run is removed by the next run for the same OUTPUT. Shapes: L+1 layers (the token layer and the L "
        "biLSTM layers), n tokens of the line, 2P values per vector (the model's output width: 1024 for the original).",
    )
    parser.add_argument("input_file", help="UTF-8 text, one sentence per line (whitespace-tokenised, or raw text "
                        "for a model trained with a segmenter such as jieba); '-' reads standard input")
    parser.add_argument("output_file", help="HDF5 file to write (replaced only when the run succeeds; never the input)")
    layers = parser.add_mutually_exclusive_group()
    parser.set_defaults(output_format="all")
    layers.add_argument("--all", dest="output_format", action="store_const", const="all",
                        help="all layers: an (L+1, n, 2P) dataset per line (the default)")
    layers.add_argument("--top", dest="output_format", action="store_const", const="top", help="top layer only: (n, 2P)")
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
    add_tokenizer_argument(parser, default=None, help_prefix="how input lines are cut: ",
                           default_help="the segmenter the model was trained with, recorded in its lm.json "
                           "(jieba, chars, ...); else whitespace")
    add_speed_arguments(parser)
    add_threads_argument(parser)
    bulk = parser.add_argument_group(
        "sharded embedding (OUTPUT is then a folder of shards and index.json; rerunning resumes)")
    bulk.add_argument("--ray", action="store_true",
                      help="embed with Ray Data over a pool of actors, writing shards, an index and resuming by shard")
    bulk.add_argument("--ray-address", default=None, metavar="ADDR",
                      help="the cluster: 'auto' (started with `ray start --head`), ray://HOST:PORT or HOST:PORT "
                      "(default: a local cluster for this run)")
    bulk.add_argument("--actors", type=positive_int, default=2, help="actors, each holding one model (default 2)")
    bulk.add_argument("--shard-lines", type=positive_int, default=10_000, metavar="N",
                      help="input lines per shard (default 10000)")
    bulk.add_argument("--format", dest="file_format", choices=("hdf5", "parquet"), default="hdf5",
                      help="shard files: hdf5 (the layout of this command; default) or parquet (a list column)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.ray:
        return run_sharded(args)
    from elmokit.formats.embedding_hdf5 import check_paths

    check_paths(args.input_file, args.output_file)  # before the model is loaded: a wrong path fails at once
    apply_threads(args)
    from elmokit.text.corpus import Tokenizer

    tokenizer = Tokenizer(kind=args.tokenizer) if args.tokenizer is not None else None  # a missing package fails now
    embedder = load_embedder(args, stateful=args.stateful, batch_size=args.batch_size)
    words = "word_tokenizer" if hasattr(embedder, "word_tokenizer") else "tokenizer"  # a transformer's own
    if tokenizer is not None:  # `tokenizer` is its subword tokenizer; words are cut before it
        setattr(embedder, words, tokenizer)
    cut = json.dumps(getattr(embedder, words).to_dict()) if getattr(embedder, words) is not None else "whitespace"
    print(
        f"elmokit embed: model={embedder.name} layers={embedder.num_layers} dim={embedder.dim} tokenizer={cut} "
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


def run_sharded(args: argparse.Namespace) -> int:
    """`--ray`: OUTPUT is a folder; shards run on Ray actors; complete, verified shards are kept."""
    from elmokit.bulk.shards import JobSettings, prepare_outdir, run_job
    from elmokit.formats.embedding_hdf5 import InputFileError
    from elmokit.representation import spec_from_flags

    if args.stateful:
        raise InputFileError("--stateful carries states from line to line in file order, which shards cannot; "
                             "drop --stateful or --ray")
    if args.use_sentence_keys and args.file_format != "hdf5":
        raise InputFileError("--use-sentence-keys applies to --format hdf5 (Parquet rows hold the line and sentence)")
    prepare_outdir(args.input_file, args.output_file)  # before the model loads: a wrong path fails at once
    try:
        import ray  # noqa: F401
    except ModuleNotFoundError:
        raise InputFileError("--ray needs Ray; pip install 'elmokit[bulk]'") from None
    from elmokit.bulk.ray_runner import ray_runner

    apply_threads(args)
    from elmokit.text.corpus import Tokenizer

    tokenizer = Tokenizer(kind=args.tokenizer) if getattr(args, "tokenizer", None) is not None else None
    embedder = load_embedder(args, batch_size=args.batch_size)  # here for the fingerprint and early model errors
    if tokenizer is not None:
        embedder.tokenizer = tokenizer
    cut = json.dumps(embedder.tokenizer.to_dict()) if getattr(embedder, "tokenizer", None) is not None else "whitespace"
    spec = spec_from_flags(model=args.model, options_file=args.options_file, weight_file=args.weight_file,
                           initial_state=args.initial_state)
    settings = JobSettings(fingerprint=embedder.fingerprint, output_format=args.output_format,
                           file_format=args.file_format, use_sentence_keys=args.use_sentence_keys,
                           forget_sentences=args.forget_sentences, allow_empty_lines=args.allow_empty_lines,
                           tokenizer=cut)
    print(f"elmokit embed --ray: model={embedder.name} layers={embedder.num_layers} dim={embedder.dim} "
          f"tokenizer={cut} format={args.output_format}/{args.file_format} shard_lines={args.shard_lines} actors={args.actors} "
          f"address={args.ray_address or 'local'} precision={args.precision}", file=sys.stderr)
    runner = ray_runner(spec=spec, load_options={"batch_size": args.batch_size, "precision": args.precision,
                                                 "token_cache_size": args.token_cache},
                        input_file=args.input_file, outdir=args.output_file, settings=settings, actors=args.actors,
                        threads=args.threads or 1, address=args.ray_address,
                        tokenizer=getattr(args, "tokenizer", None),
                        init_options=None if args.verbose else {"logging_level": logging.WARNING})
    index = run_job(args.input_file, args.output_file, settings=settings, shard_lines=args.shard_lines, runner=runner,
                    model_name=embedder.name, num_layers=embedder.num_layers, dim=embedder.dim)
    print(f"elmokit embed --ray: {len(index['shards'])} shards, {index['input_lines']} lines in {args.output_file}",
          file=sys.stderr)
    return 0
