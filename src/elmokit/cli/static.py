"""`elmokit static train|neighbors`: train a static word-vector table, or query one.

    elmokit static train --algo skipgram --negative 5 --corpus 'data/train.0[0-2].txt.xz' --out runs/sgns
    elmokit static neighbors --vectors runs/sgns king queen

Every option left out takes the original tool's default for that algorithm (printed before
training, and recorded in run.json); see elmokit.static.defaults for the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys

from elmokit.cli.common import (
    add_tokenizer_argument,
    finite_float,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from elmokit.static.defaults import ALGOS, DEFAULTS


def register(subparsers) -> None:
    parser = subparsers.add_parser("static", help="static word vectors: word2vec, fastText, GloVe, LSA, Doc2Vec")
    sub = parser.add_subparsers(dest="static_command", metavar="ACTION")
    _register_train(sub)
    _register_neighbors(sub)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _defaults_help() -> str:
    lines = ["defaults per algorithm (those of word2vec.c, fastText, glove.c; see elmokit.static.defaults):"]
    for algo in ALGOS:
        lines.append(f"  {algo}: " + ", ".join(f"{k}={v}" for k, v in DEFAULTS[algo].items()))
    return "\n".join(lines)


def _register_train(sub) -> None:
    p = sub.add_parser(
        "train", help="train a table and write vectors.txt + native files + run.json",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_defaults_help(),
        description="Train static word vectors on a corpus (a glob of UTF-8 text files, plain/.xz/.gz, one "
        "sentence or paragraph per line, streamed). Options left out take the original tool's defaults.",
    )
    p.add_argument("--algo", required=True, choices=ALGOS, help="cbow/skipgram (word2vec), fasttext, glove, lsa, doc2vec")
    p.add_argument("--corpus", required=True, action="append", metavar="GLOB",
                   help="glob of corpus files (quote it); repeat for several")
    p.add_argument("--out", required=True, help="run folder to write (refused if it exists and is not empty, unless --force)")
    p.add_argument("--force", action="store_true", help="replace an existing run folder (only once the new one is complete)")
    t = p.add_argument_group("tokenisation")
    add_tokenizer_argument(t, default=None, default_help="regex, words and punctuation apart; whitespace with --pretokenized")
    t.add_argument("--lowercase", action="store_true", default=None, help="lowercase lines before tokenising (default)")
    t.add_argument("--keep-case", dest="lowercase", action="store_false", help="do not lowercase")
    t.add_argument("--pretokenized", action="store_true",
                   help="text already tokenised: whitespace split, case kept (the original tools' behaviour)")
    t.add_argument("--limit-lines", type=positive_int, default=None, help="use only the first N non-empty lines (quick trials)")
    g = p.add_argument_group("common (default: per algorithm, see below)")
    g.add_argument("--dim", type=positive_int, default=None, help="vector size")
    g.add_argument("--window", type=positive_int, default=None, help="context window (words each side)")
    g.add_argument("--min-count", type=non_negative_int, default=None, help="drop words seen fewer times")
    g.add_argument("--max-vocab", type=positive_int, default=None, help="keep at most this many most frequent words")
    g.add_argument("--epochs", type=positive_int, default=None, help="passes over the corpus (GloVe: over the nonzeros)")
    g.add_argument("--alpha", type=positive_float, default=None, help="initial learning rate")
    g.add_argument("--seed", type=non_negative_int, default=None, help="random seed (recorded)")
    g.add_argument("--workers", type=positive_int, default=None, help="threads (default 1: reproducible, and polite)")
    w = p.add_argument_group("word2vec / fastText / Doc2Vec")
    w.add_argument("--hs", action="store_true", default=None, help="hierarchical softmax (implies --negative 0 unless given)")
    w.add_argument("--negative", type=non_negative_int, default=None, help="negative samples (0: none)")
    w.add_argument("--sample", type=non_negative_float, default=None, help="sub-sampling threshold of frequent words")
    w.add_argument("--min-n", type=positive_int, default=None, help="fastText: shortest character n-gram")
    w.add_argument("--max-n", type=non_negative_int, default=None, help="fastText: longest character n-gram")
    w.add_argument("--bucket", type=positive_int, default=None, help="fastText: hash buckets for n-grams")
    w.add_argument("--ft-model", choices=("skipgram", "cbow"), default=None, help="fastText: architecture")
    w.add_argument("--mode", choices=("dm", "dbow"), default=None, help="Doc2Vec: PV-DM (default) or PV-DBOW")
    w.add_argument("--no-dbow-words", action="store_true", help="Doc2Vec PV-DBOW: do not train word vectors")
    c = p.add_argument_group("GloVe / LSA")
    c.add_argument("--x-max", type=positive_float, default=None, help="GloVe: weighting cutoff x_max")
    c.add_argument("--weight-alpha", type=non_negative_float, default=None, help="GloVe: weighting exponent alpha")
    c.add_argument("--batch-size", type=positive_int, default=None, help="GloVe: nonzeros per AdaGrad minibatch")
    c.add_argument("--weighting", choices=("ppmi", "log", "counts"), default=None, help="LSA: matrix to factorise")
    c.add_argument("--cds", type=positive_float, default=None, help="LSA: context-distribution smoothing exponent")
    c.add_argument("--eig-power", type=finite_float, default=None, help="LSA: vectors are U S^p")
    c.add_argument("--max-pairs-in-memory", type=positive_int, default=None,
                   help="co-occurrence nonzeros held before spilling to disk")
    c.add_argument("--chunk-tokens", type=positive_int, default=None, help="co-occurrence: tokens windowed per chunk")
    p.add_argument("--quiet", action="store_true", help="only warnings on stderr")
    p.set_defaults(func=run_train)
    per_algo = {name for values in DEFAULTS.values() for name in values}
    for action in p._actions:  # left out: the --algo's own default, from the table in the epilog
        if action.dest in per_algo and action.default is None:
            action.help = f"{action.help} (default: the --algo's, below)"


def _register_neighbors(sub) -> None:
    p = sub.add_parser("neighbors", help="print the nearest words of some words")
    p.add_argument("--vectors", required=True, help="run folder or vector file")
    p.add_argument("words", nargs="+", help="query words")
    p.add_argument("--topn", type=positive_int, default=10, help="neighbours per word")
    p.set_defaults(func=run_neighbors)


def _config_from_args(args: argparse.Namespace):
    from elmokit.static.train import StaticTrainConfig

    overrides = dict(
        dim=args.dim, window=args.window, min_count=args.min_count, max_vocab=args.max_vocab, epochs=args.epochs,
        alpha=args.alpha, seed=args.seed, workers=args.workers, hs=args.hs, negative=args.negative,
        sample=args.sample, min_n=args.min_n, max_n=args.max_n, bucket=args.bucket, ft_model=args.ft_model,
        x_max=args.x_max, weight_alpha=args.weight_alpha, batch_size=args.batch_size, weighting=args.weighting,
        cds=args.cds, eig_power=args.eig_power, max_pairs_in_memory=args.max_pairs_in_memory,
        chunk_tokens=args.chunk_tokens,
    )
    if args.mode is not None:
        overrides["dm"] = args.mode == "dm"
    if args.no_dbow_words:
        overrides["dbow_words"] = False
    if args.hs and args.negative is None and args.algo in ("cbow", "skipgram", "fasttext", "doc2vec"):
        overrides["negative"] = 0  # word2vec.c: -hs 1 is used with -negative 0
    return StaticTrainConfig.for_algo(args.algo, **overrides)


def run_train(args: argparse.Namespace) -> int:
    from elmokit.io import check_output
    from elmokit.static.train import static_tokenizer, train_static
    from elmokit.text.corpus import Corpus

    logging.getLogger().setLevel(logging.WARNING if args.quiet else logging.INFO)  # the handler: the one set by cli.main
    if args.algo not in ("glove",):
        logging.getLogger("gensim").setLevel(logging.WARNING if args.quiet else logging.INFO)
    config = _config_from_args(args)
    tokenizer = static_tokenizer(args.tokenizer, args.lowercase, pretokenized=args.pretokenized)
    max_tokens = 10_000 if args.algo in ("cbow", "skipgram", "fasttext") else None
    corpus = Corpus(args.corpus, tokenizer=tokenizer, max_tokens=max_tokens, progress=True, limit_lines=args.limit_lines)
    check_output(args.out, command="static train", inputs=corpus.files, replace=args.force, replace_flag="--force")
    if args.verbose:  # run.json records it
        print("elmokit static train: " + json.dumps({"config": config.to_dict(), "corpus": corpus.patterns,
                                                     "tokenizer": tokenizer.to_dict()}), file=sys.stderr)
    # Recorded as the equivalent `elmokit ...` command line, however the CLI was started.
    command = shlex.join(["elmokit"] + (getattr(args, "argv", None) or sys.argv[1:]))
    table = train_static(config, corpus, args.out, command=command, force=args.force, progress=not args.quiet)
    print(f"elmokit static train: {table!r} -> {args.out}", file=sys.stderr)
    return 0


def run_neighbors(args: argparse.Namespace) -> int:
    from elmokit.static.vectors import StaticVectors

    table = StaticVectors.load(args.vectors)
    for word in args.words:
        query = word.lower() if table.lowercase else word
        try:
            near = table.most_similar(query, topn=args.topn)
        except KeyError as error:
            print(f"{word}: {error.args[0]}")
            continue
        print(f"{word}: " + ", ".join(f"{w} {s:.3f}" for w, s in near))
    return 0
