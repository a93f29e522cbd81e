"""`elmokit neighbors`: nearest occurrences of a word in context (Peters et al. 2018, Table 4).

    elmokit neighbors index --model M --corpus FILE --out DIR [--max-sentences N]
    elmokit neighbors --model M --index DIR "Chico Ruiz made a spectacular play on Alusik 's grounder" 5
    elmokit neighbors --model M --corpus FILE "..." 5 --vectors glove.txt --layers 1,2 --top 5

The first writes a reusable index of the corpus (every occurrence's vector per layer, unit length);
the second queries it: one matrix-vector product per layer. Without ``--index``, a temporary index
of ``--corpus`` is built for the one query.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from elmokit.cli.arguments import check_out
from elmokit.cli.common import (
    add_model_arguments,
    add_speed_arguments,
    add_threads_argument,
    add_tokenizer_argument,
    apply_threads,
    counted,
    load_embedder,
    non_negative_int,
    number_list,
    positive_int,
)
from elmokit.errors import InputNotFound


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "neighbors", add_help=False,
        help="nearest occurrences of a word in context in a corpus, per layer (the paper's Table 4)",
        usage="elmokit neighbors [options] SENTENCE WORD_INDEX\n       elmokit neighbors index --corpus FILE --out DIR [options]",
        description="For the word at WORD_INDEX (0-based) of SENTENCE, list per layer the corpus occurrences "
        "whose contextual vectors are nearest by cosine, each corpus sentence with the matched word in [[ ]]; "
        "with --vectors, also the nearest types of a static table. `neighbors index` embeds a corpus once "
        "into --out so that queries never re-embed it.",
    )
    parser.add_argument("-h", "--help", action=_NeighborsHelp, help="show this help message and exit "
                        "(after `index`: the help of `neighbors index`)")
    parser.add_argument("query", nargs="*", metavar="SENTENCE WORD_INDEX",
                        help="the query sentence (one argument, quoted) and the position of the word; "
                        "or the single word `index` to build an index")
    add_model_arguments(parser)
    corpus = parser.add_argument_group("corpus and index")
    corpus.add_argument("--corpus", default=None, metavar="FILE",
                        help="UTF-8 text (plain, .xz, .gz, .bz2), one sentence per line; needed to build an index")
    corpus.add_argument("--index", default=None, metavar="DIR", help="query this index (from `elmokit neighbors index`)")
    corpus.add_argument("--out", default=None, metavar="DIR", help="`index`: the folder to write (replaced only on success)")
    corpus.add_argument("--max-sentences", type=positive_int, default=None, metavar="N", help="index only the first N sentences")
    corpus.add_argument("--max-tokens", type=positive_int, default=100, metavar="N",
                        help="split corpus lines longer than N tokens into pieces (default 100)")
    corpus.add_argument("--dtype", choices=("float16", "float32"), default="float16",
                        help="stored vectors: float16 (default; half the size, cosines within ~1e-3) or float32")
    add_tokenizer_argument(corpus, default="whitespace", help_prefix="how the query sentence and the corpus lines are cut: ")
    corpus.add_argument("--batch-size", type=positive_int, default=64, help="sentences per batch when indexing (default 64)")
    query = parser.add_argument_group("query")
    query.add_argument("--layers", type=number_list(non_negative_int), default=None,
                       help="comma-separated layers to search (default: all)")
    query.add_argument("--top", type=positive_int, default=5, help="occurrences per layer (default 5)")
    query.add_argument("--same-form", action="store_true", help="search only occurrences of the same word form")
    query.add_argument("--context", type=non_negative_int, default=15, metavar="N",
                       help="show N tokens either side of each match (default 15; 0: whole sentences)")
    query.add_argument("--include-self", action="store_true",
                       help="keep the query's own occurrence when the corpus contains the query sentence")
    query.add_argument("--vectors", default=None, metavar="STATIC",
                       help="a static table (run folder of `elmokit static train`, or a word2vec/GloVe file): "
                       "print its nearest types too")
    add_speed_arguments(parser)
    add_threads_argument(parser)
    parser.set_defaults(func=run)


class _NeighborsHelp(argparse.Action):
    """``neighbors --help``, and ``neighbors index --help``: the index form's usage and only its options."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "query", None) != ["index"]:
            parser.print_help()
            parser.exit()
        formatter = parser._get_formatter()
        formatter.add_usage("elmokit neighbors index --corpus FILE --out DIR [options]", None, [])
        formatter.add_text("Embed every sentence of --corpus once and write the index to --out (a folder, replaced only "
                           "when the run succeeds); query it with `elmokit neighbors SENTENCE WORD_INDEX --index DIR`.")
        for group in parser._action_groups:
            actions = [a for a in group._group_actions if a.option_strings and a.dest not in _QUERY_ONLY]
            if actions and group.title != "query":
                formatter.start_section(group.title)
                formatter.add_arguments(actions)
                formatter.end_section()
        parser._print_message(formatter.format_help(), sys.stdout)
        parser.exit()


_QUERY_ONLY = {"index"}  # options of the query form outside its group


def _read_corpus(args):
    from elmokit.text.corpus import Corpus, Tokenizer

    if args.corpus is None:
        raise InputNotFound("give --corpus FILE (the text to index) or --index DIR (an index built before)")
    return list(Corpus(args.corpus, tokenizer=Tokenizer(kind=args.tokenizer), max_tokens=args.max_tokens,
                       limit_lines=args.max_sentences))


def run(args: argparse.Namespace) -> int:
    from elmokit.evaluation.neighbors import NeighborIndex, NeighborIndexError, format_neighbors, nearest_occurrences
    from elmokit.text.corpus import Tokenizer

    apply_threads(args)
    if args.query == ["index"]:
        if args.out is None:
            raise NeighborIndexError("`elmokit neighbors index` needs --out DIR")
        inputs = check_out(args, "neighbors index")  # before any work
        sentences = _read_corpus(args)
        rep = load_embedder(args, batch_size=args.batch_size)
        source = {"corpus": str(args.corpus), "tokenizer": args.tokenizer, "max_sentences": args.max_sentences,
                  "max_tokens": args.max_tokens}
        index = NeighborIndex.build(rep, sentences, args.out, dtype=args.dtype, batch_sentences=args.batch_size,
                                    progress=True, source=source, inputs=inputs)
        print(f"elmokit neighbors: indexed {counted(len(index.sentences), 'sentence')}, "
              f"{counted(len(index), 'occurrence')}, "
              f"{index.num_layers} layers of {index.dim} ({args.dtype}) with {rep.name} into {args.out}", file=sys.stderr)
        return 0
    if len(args.query) != 2:
        raise NeighborIndexError("give the query SENTENCE (quoted) and WORD_INDEX, or `index` to build an index")
    tokens = Tokenizer(kind=args.tokenizer)(args.query[0])
    try:
        word_index = int(args.query[1])
    except ValueError:
        raise NeighborIndexError(f"WORD_INDEX must be an integer, got {args.query[1]!r}") from None
    layers = args.layers
    rep = load_embedder(args, batch_size=args.batch_size)
    if args.index is not None:
        if not Path(args.index).exists():
            raise InputNotFound(f"--index {args.index}: no such folder")
        results = nearest_occurrences(rep, NeighborIndex(args.index), tokens, word_index, layers=layers, top=args.top,
                                      same_form=args.same_form, exclude_self=not args.include_self)
    else:
        sentences = _read_corpus(args)
        with tempfile.TemporaryDirectory(prefix="elmokit-neighbors-") as tmp:
            index = NeighborIndex.build(rep, sentences, Path(tmp) / "index", dtype="float32",
                                        batch_sentences=args.batch_size, progress=sys.stderr.isatty())
            results = nearest_occurrences(rep, index, tokens, word_index, layers=layers, top=args.top,
                                          same_form=args.same_form, exclude_self=not args.include_self)
            del index  # release the memory maps before the folder goes
    static = None
    if args.vectors is not None:
        static = _static_neighbors(args.vectors, tokens[word_index % len(tokens)], args.top)
    window = args.context if args.context > 0 else None
    print(format_neighbors(tokens, word_index, results, representation=rep.name, static=static, window=window))
    return 0


def _static_neighbors(path: str, word: str, top: int):
    from elmokit.representation import load_representation, spec_from_flags

    table = load_representation(spec_from_flags(vectors=path))
    key = word.lower() if table.lowercase else word
    try:
        return table.name, table.most_similar(key, topn=top)
    except KeyError:
        return table.name, []
