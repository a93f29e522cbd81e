"""`elmokit eval similarity|pos|ner`: evaluate any representation.

    elmokit eval similarity --vectors runs/static/sgns --vectors glove.6B.100d.txt --out sim.json
    elmokit eval pos --model default --epochs 3 --max-train-sentences 2000 --out pos.json
    elmokit eval ner --vectors runs/static/sgns --datasets wnut17 --out ner.json

similarity: word similarity (Spearman) and analogy (3CosAdd).
pos / ner: a BiLSTM-CRF tagger trained with the representation and without it (UPOS accuracy on
UD English-EWT; strict span F1 on WikiANN-en, WNUT-17 and CoNLL-2003 when present).

``--vectors`` takes a run folder of `elmokit static train` or a word2vec/GloVe file (text with or
without header, or binary); repeat it to compare several in one table. ``--model`` loads an ELMo
model (when the ELMo core is present) and evaluates layer ``--layer`` of each word embedded as a
one-token sentence. Further evaluations (perplexity, probes) add their own actions here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="evaluate representations (word similarity and analogy)")
    sub = parser.add_subparsers(dest="eval_command", metavar="BENCHMARK")
    _register_similarity(sub)
    _register_tagging(sub, "pos")
    _register_tagging(sub, "ner")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _register_similarity(sub) -> None:
    from elmokit.evaluation.word_similarity import ANALOGY_DATASETS, DEFAULT_ANALOGY, DEFAULT_SIMILARITY, SIMILARITY_DATASETS

    p = sub.add_parser(
        "similarity", help="Spearman on word-similarity sets, accuracy on analogy sets",
        description="Pairs with an uncovered word are left out: the table shows Spearman over covered pairs "
        "and the coverage. Analogies: 3CosAdd over the --top-n most frequent words, question words excluded.",
    )
    src = p.add_argument_group("what to evaluate (at least one)")
    src.add_argument("--vectors", action="append", default=[], metavar="DIR|FILE",
                     help="run folder or word2vec/GloVe vector file; repeatable")
    src.add_argument("--model", action="append", default=[], metavar="MODEL",
                     help="an ELMo model ('default' or a folder; needs the ELMo core); repeatable")
    p.add_argument("--layer", type=int, default=0, help="layer of a multi-layer representation (0: context-independent)")
    p.add_argument("--datasets", default=",".join(DEFAULT_SIMILARITY),
                   help=f"comma-separated similarity sets from: {', '.join(SIMILARITY_DATASETS)} ('' for none)")
    p.add_argument("--analogies", default=",".join(DEFAULT_ANALOGY),
                   help=f"comma-separated analogy sets from: {', '.join(ANALOGY_DATASETS)} ('' for none)")
    p.add_argument("--top-n", type=int, default=30000, help="analogy candidates: this many most frequent words")
    p.add_argument("--analogy-vocab", default=None,
                   help="file of candidate words, most frequent first (needed for analogies with --model)")
    p.add_argument("--lowercase", choices=("auto", "yes", "no"), default="auto",
                   help="lowercase the benchmark words (auto: if the table was trained lowercased)")
    p.add_argument("--in-vocab-only", action="store_true",
                   help="tables: count only words with their own row as covered (no fastText n-gram vectors)")
    p.add_argument("--data-dir", default=None, help="the wordsim folder (default: $ELMOKIT_SHARED/data/wordsim or ../shared)")
    p.add_argument("--out", default=None, help="write all results as JSON here")
    p.set_defaults(func=run_similarity)


def _load(args) -> list:
    from elmokit.static.vectors import StaticVectors

    reps = []
    for path in args.vectors:
        if not Path(path).exists():
            raise FileNotFoundError(f"--vectors {path}: no such file or folder")
        reps.append(StaticVectors.load(path))
    for model in args.model:
        try:
            from elmokit.elmo import Embedder
        except ImportError:
            raise SystemExit("elmokit eval similarity: error: --model needs the ELMo core (elmokit.elmo), "
                             "which this installation lacks") from None
        reps.append(Embedder.load(model))
    return reps


def _clean(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def run_similarity(args: argparse.Namespace) -> int:
    from elmokit.evaluation.word_similarity import DatasetError, evaluate, format_table
    from elmokit.formats.word2vec import VectorFileError
    from elmokit.io import atomic_path

    if not args.vectors and not args.model:
        print("elmokit eval similarity: error: give --vectors DIR|FILE or --model MODEL", file=sys.stderr)
        return 2
    datasets = [d for d in args.datasets.split(",") if d]
    analogies = [a for a in args.analogies.split(",") if a]
    lowercase = None if args.lowercase == "auto" else args.lowercase == "yes"
    vocab = None
    try:
        if args.analogy_vocab:
            vocab = [line.split()[0] for line in Path(args.analogy_vocab).read_text(encoding="utf-8").splitlines() if line.strip()]
        results = []
        for rep in _load(args):
            use = analogies if (vocab is not None or hasattr(rep, "words")) else []
            if use != analogies:
                print(f"elmokit eval similarity: {rep.name}: no word list, analogies skipped (give --analogy-vocab)",
                      file=sys.stderr)
            results.append(evaluate(rep, datasets=datasets, analogies=use, layer=args.layer, lowercase=lowercase,
                                    top_n=args.top_n, vocab=vocab, data_dir=args.data_dir,
                                    in_vocab_only=args.in_vocab_only))
    except (DatasetError, VectorFileError, FileNotFoundError, ValueError) as error:
        print(f"elmokit eval similarity: error: {error}", file=sys.stderr)
        return 2
    print(format_table(results))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = results[0] if len(results) == 1 else {"results": results}
        with atomic_path(out) as tmp:
            Path(tmp).write_text(json.dumps(_clean(payload), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


def _register_tagging(sub, task: str) -> None:
    from elmokit.cli.tag import add_model_arguments, add_representation_arguments
    from elmokit.evaluation.tagging import NER_DATASETS, POS_DATASETS

    datasets = POS_DATASETS if task == "pos" else NER_DATASETS
    what = ("UPOS accuracy on UD English-EWT test" if task == "pos" else
            "span F1 (seqeval strict mode, IOB2) on WikiANN-en, WNUT-17 and CoNLL-2003 (when present)")
    p = sub.add_parser(task, help=f"{what}, tagger with and without the representation",
                       description=f"{what}. A BiLSTM-CRF is trained with the representation (learned scalar mix "
                       "of its layers) and without it (the baseline), early-stopped on dev; the JSON holds dev and "
                       "test scores and the learned layer weights softmax(w) and gamma.")
    add_representation_arguments(p, allow_none=False)
    p.add_argument("--datasets", default=",".join(datasets), help=f"comma-separated, from: {', '.join(datasets)}")
    p.add_argument("--no-baseline", action="store_true", help="skip the tagger without the representation")
    p.add_argument("--max-eval-sentences", type=int, default=None, help="use only the first N dev and test sentences")
    p.add_argument("--data-dir", default=None, help="the folder holding the data sets (default: $ELMOKIT_SHARED/data "
                   "or ../shared/data)")
    add_model_arguments(p)
    p.add_argument("--out", default=None, help="write all results as JSON here")
    p.set_defaults(func=lambda args: _run_reporting(f"eval {task}", run_tagging, args), task=task)


def _run_reporting(command: str, func, args) -> int:
    from elmokit.cli.common import run_reporting_errors

    return run_reporting_errors(command, func, args)


def run_tagging(args: argparse.Namespace) -> int:
    from elmokit.cli.common import apply_threads
    from elmokit.cli.tag import config_changes, load_representation, train_options
    from elmokit.evaluation.tagging import format_table, run_benchmark
    from elmokit.io import atomic_path
    from elmokit.tasks.data import TaggingDataError

    apply_threads(args)
    try:
        representation, spec = load_representation(args)
        results = run_benchmark(
            [d for d in args.datasets.split(",") if d], representation, representation_spec=spec,
            baseline=not args.no_baseline, options=train_options(args),
            config_changes={**config_changes(args), **({"scheme": args.scheme} if args.task == "ner" else {})},
            max_train_sentences=args.max_train_sentences, max_eval_sentences=args.max_eval_sentences,
            data_dir=args.data_dir, cache_dir=args.cache_dir,
        )
    except (TaggingDataError, ValueError) as error:
        print(f"elmokit eval {args.task}: error: {error}", file=sys.stderr)
        return 2
    metric = "UPOS token accuracy" if args.task == "pos" else "span F1, seqeval strict mode (IOB2)"
    print(f"{metric}, in %; best epoch by dev score")
    print(format_table(results))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"benchmark": args.task, "metric": metric, "command": ["elmokit"] + list(getattr(args, "argv", [])),
                   "results": results}
        with atomic_path(out) as tmp:
            Path(tmp).write_text(json.dumps(_clean(payload), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0
