"""`elmokit vocab --corpus GLOB --out vocab.txt`: the output vocabulary in bilm-tf's format."""

from __future__ import annotations

import argparse
import sys

from elmokit.cli.common import positive_int
from elmokit.cli.training_common import add_tokenizer_arguments, tokenizer_from_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "vocab",
        help="count a corpus and write the output vocabulary (bilm-tf format)",
        description="Write <S>, </S>, <UNK>, then the corpus tokens by descending count (ties in code-point "
        "order), one per line. The corpus is streamed, never loaded whole.",
    )
    parser.add_argument("--corpus", action="append", required=True, help="corpus file or glob (plain, .xz, .gz); repeatable")
    parser.add_argument("--out", required=True, help="vocabulary file to write")
    parser.add_argument("--min-count", type=positive_int, default=1, help="keep tokens seen at least this often (default: 1)")
    parser.add_argument("--max-size", type=positive_int, default=None,
                        help="at most this many lines, the 3 special tokens included (default: no limit)")
    parser.add_argument("--counts", default=None, help="also write 'token<TAB>count' lines to this file (default: none)")
    add_tokenizer_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elmokit.io import atomic_path, check_output_file
    from elmokit.text.corpus import Corpus, CorpusError
    from elmokit.text.vocab import build_vocabulary, count_tokens, coverage

    corpus = Corpus(args.corpus, tokenizer=tokenizer_from_args(args), progress=True)
    for out in (args.out, args.counts):  # before the corpus is counted
        if out is not None:
            check_output_file(out, inputs=corpus.files)
    counts = count_tokens(corpus)
    if not counts:
        raise CorpusError(f"corpus {', '.join(args.corpus)}: no tokens (the files are empty or hold blank lines only); "
                          f"nothing written to {args.out}")
    vocabulary = build_vocabulary(counts, min_count=args.min_count, max_size=args.max_size)
    vocabulary.save(args.out)
    if args.counts:
        with atomic_path(args.counts) as tmp, open(tmp, "w", encoding="utf-8") as handle:
            for token in vocabulary.tokens[3:]:
                handle.write(f"{token}\t{counts[token]}\n")
    total = sum(counts.values())
    print(
        f"elmokit vocab: {len(counts):,} types, {total:,} tokens; wrote {len(vocabulary):,} entries to {args.out} "
        f"(coverage {100 * coverage(vocabulary, counts):.2f}% of running tokens)",
        file=sys.stderr,
    )
    return 0
