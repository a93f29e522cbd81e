"""`elmokit perplexity --model DIR --corpus FILE`: forward, backward and average perplexity."""

from __future__ import annotations

import argparse
import json
import sys

from elmokit.cli.common import add_threads_argument, apply_threads, positive_int
from elmokit.cli.training_common import add_tokenizer_arguments, tokenizer_from_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "perplexity",
        help="forward/backward/average perplexity of a trained biLM on a corpus (full softmax)",
        description="Every line (cut at --max-length tokens) is one sentence of n tokens with n + 1 targets per "
        "direction (</S> and <S> included). Out-of-vocabulary tokens are targets as <UNK> and count like any "
        "other; the OOV rate is printed. The average is exp(mean of the two directions' per-token loss).",
    )
    parser.add_argument("--model", required=True,
                        help="a model folder written by `elmokit train` (has lm.safetensors + vocab.txt), or 'default'")
    parser.add_argument("--corpus", action="append", required=True, help="evaluation file or glob (plain, .xz, .gz); repeatable")
    parser.add_argument("--max-length", type=positive_int, default=None,
                        help="cut longer lines into pieces (default: the model's training max_length)")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="sentences per batch (default: 64)")
    parser.add_argument("--limit-lines", type=positive_int, default=None,
                        help="evaluate only the first N non-empty lines (default: all)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object (default: text)")
    add_tokenizer_arguments(parser, default_help="the model's, from lm.json")
    add_threads_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elmokit.evaluation.perplexity import NoSentencesError, perplexity
    from elmokit.lm import LanguageModel
    from elmokit.text.corpus import Corpus, CorpusError

    apply_threads(args)
    model, vocabulary, info = LanguageModel.load(args.model)
    tokenizer = tokenizer_from_args(args, fallback=info.get("tokenizer"))
    max_length = args.max_length or info.get("max_length")
    corpus = Corpus(args.corpus, tokenizer=tokenizer, max_tokens=max_length, progress=True, limit_lines=args.limit_lines)
    try:
        result = perplexity(model, vocabulary, corpus, batch_size=args.batch_size)
    except NoSentencesError:
        raise CorpusError(f"corpus {', '.join(args.corpus)}: no sentences to evaluate "
                          "(the files are empty or hold blank lines only)") from None
    if args.json:
        print(json.dumps({"model": args.model, "corpus": args.corpus, "tokenizer": tokenizer.to_dict(),
                          "max_length": max_length, **result.to_dict()}))
    else:
        print(f"forward perplexity   {result.forward:.2f}")
        print(f"backward perplexity  {result.backward:.2f}")
        print(f"average perplexity   {result.average:.2f}")
        print(f"sentences {result.num_sentences:,}  tokens {result.num_tokens:,}  targets/direction {result.num_targets:,}  "
              f"OOV {result.num_oov:,} ({100 * result.num_oov / max(result.num_tokens, 1):.2f}%, predicted as <UNK>)")
    print(f"elmokit perplexity: tokenizer {json.dumps(tokenizer.to_dict())}, max length {max_length}", file=sys.stderr)
    return 0
