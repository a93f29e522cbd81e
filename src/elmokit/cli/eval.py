"""`elmokit eval similarity|pos|ner|cws|probe|wsd|sst`: evaluate any representation.

    elmokit eval similarity --vectors runs/static/sgns --vectors glove.6B.100d.txt --out sim.json
    elmokit eval pos --model default --epochs 3 --max-train-sentences 2000 --out pos.json
    elmokit eval ner --vectors runs/static/sgns --datasets wnut17 --out ner.json
    elmokit eval ner --model zh --datasets weibo,resume --out zh_ner.json
    elmokit eval cws --model zh --max-train-sentences 2000 --max-dev-sentences 300 --out zh_cws.json

similarity: word similarity (Spearman) and analogy (3CosAdd).
pos / ner: a BiLSTM-CRF tagger trained with the representation and without it (UPOS accuracy on
UD English-EWT; strict span F1 on WikiANN-en, WNUT-17 and CoNLL-2003 when present).
cws: Chinese word segmentation as B/M/E/S tagging, scored as the SIGHAN bakeoff's word F1.

``--vectors`` takes a run folder of `elmokit static train` or a word2vec/GloVe file (text with or
without header, or binary); repeat it to compare several in one table. ``--model`` loads an ELMo
model (when the ELMo core is present) and evaluates layer ``--layer`` of each word embedded as a
one-token sentence. Further evaluations (perplexity, probes) add their own actions here.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from elmokit.cli.arguments import (
    add_classifier_training_arguments,
    add_representation_arguments,
    add_tagger_arguments,
    classifier_training_options,
    load_word_vectors,
    tagger_config_changes,
    tagger_train_options,
)
from elmokit.cli.common import (
    add_threads_argument,
    non_negative_float,
    non_negative_int,
    number_list,
    positive_int,
)
from elmokit.cli.eval_glue import register_glue, register_squad
from elmokit.errors import UserError


def register(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="evaluate representations (similarity, analogy, probes, WSD, SST)")
    sub = parser.add_subparsers(dest="eval_command", metavar="BENCHMARK")
    _register_similarity(sub)
    _register_tagging(sub, "pos")
    _register_tagging(sub, "ner")
    _register_tagging(sub, "cws")
    _register_probe(sub)
    _register_wsd(sub)
    _register_sst(sub)
    register_glue(sub)
    register_squad(sub)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _register_similarity(sub) -> None:
    from elmokit.evaluation.datasets import ANALOGY_DATASETS, DEFAULT_ANALOGY, DEFAULT_SIMILARITY, SIMILARITY_DATASETS

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
    p.add_argument("--layer", type=non_negative_int, default=0,
                   help="layer of a multi-layer representation (0: context-independent)")
    p.add_argument("--datasets", default=",".join(DEFAULT_SIMILARITY),
                   help=f"comma-separated similarity sets from: {', '.join(SIMILARITY_DATASETS)} ('' for none)")
    p.add_argument("--analogies", default=",".join(DEFAULT_ANALOGY),
                   help=f"comma-separated analogy sets from: {', '.join(ANALOGY_DATASETS)} ('' for none)")
    p.add_argument("--top-n", type=positive_int, default=30000, help="analogy candidates: this many most frequent words")
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
    from elmokit.representation import load_representation, spec_from_flags

    specs = [spec_from_flags(vectors=path) for path in args.vectors] + [spec_from_flags(model=m) for m in args.model]
    return [load_representation(spec) for spec in specs]


def _clean(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def run_similarity(args: argparse.Namespace) -> int:
    from elmokit.evaluation.word_similarity import evaluate, format_table

    if not args.vectors and not args.model:
        raise UserError("give --vectors DIR|FILE or --model MODEL")
    _check_out(args)
    datasets = [d for d in args.datasets.split(",") if d]
    analogies = [a for a in args.analogies.split(",") if a]
    lowercase = None if args.lowercase == "auto" else args.lowercase == "yes"
    vocab = None
    if args.analogy_vocab:
        try:
            lines = Path(args.analogy_vocab).read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as error:
            raise UserError(f"{args.analogy_vocab}: not UTF-8 text (byte {error.start}); give a word list") from None
        vocab = [line.split()[0] for line in lines if line.strip()]
    results = []
    for rep in _load(args):
        use = analogies if (vocab is not None or hasattr(rep, "words")) else []
        if use != analogies:
            print(f"elmokit eval similarity: {rep.name}: no word list, analogies skipped (give --analogy-vocab)",
                  file=sys.stderr)
        results.append(evaluate(rep, datasets=datasets, analogies=use, layer=args.layer, lowercase=lowercase,
                                top_n=args.top_n, vocab=vocab, data_dir=args.data_dir,
                                in_vocab_only=args.in_vocab_only))
    print(format_table(results))
    if args.out:
        _write_json(args.out, results[0] if len(results) == 1 else {"results": results})
    return 0


def _register_tagging(sub, task: str) -> None:
    from elmokit.evaluation.datasets import CHINESE_DATASETS, CWS_DATASETS, NER_DATASETS, POS_DATASETS

    datasets = {"pos": POS_DATASETS, "ner": NER_DATASETS, "cws": CWS_DATASETS}[task]
    what = {"pos": "UPOS accuracy on UD English-EWT test (pd_pos: PKU-tag accuracy on People's Daily)",
            "ner": "span F1 (seqeval strict mode, IOB2) on WikiANN-en, WNUT-17 and CoNLL-2003 (when present), "
                   "or the Chinese Weibo and Resume (characters)",
            "cws": "Chinese word segmentation as B/M/E/S character tagging, People's Daily train -> SIGHAN-2005 PKU "
                   "test, word P/R/F1 by the bakeoff scorer's rules"}[task]
    known = datasets + [d for d in CHINESE_DATASETS.get(task, []) if d not in datasets]
    p = sub.add_parser(task, help=f"{what}, tagger with and without the representation",
                       description=f"{what}. A BiLSTM-CRF is trained with the representation (learned scalar mix "
                       "of its layers) and without it (the baseline), early-stopped on dev; the JSON holds dev and "
                       "test scores and the learned layer weights softmax(w) and gamma.")
    add_representation_arguments(p)
    p.add_argument("--datasets", default=",".join(datasets), help=f"comma-separated, from: {', '.join(known)} "
                   "(default: %(default)s); Chinese character sets give a model with a segmenter "
                   "each character its word's vectors")
    p.add_argument("--no-baseline", action="store_true", help="skip the tagger without the representation")
    p.add_argument("--max-eval-sentences", type=positive_int, default=None, help="use only the first N dev and test sentences")
    p.add_argument("--max-dev-sentences", type=positive_int, default=None,
                   help="use only the first N dev sentences (the early-stopping set), the test set whole")
    p.add_argument("--data-dir", default=None, help="the folder holding the data sets (default: $ELMOKIT_SHARED/data "
                   "or ../shared/data)")
    add_tagger_arguments(p)
    if task != "cws":
        from elmokit.cli.finetune_tag_recipe import add_recipe_arguments

        add_recipe_arguments(p)
    p.add_argument("--out", default=None, help="write all results as JSON here")
    p.set_defaults(func=run_tagging, task=task)


def run_tagging(args: argparse.Namespace) -> int:
    from elmokit.cli.common import apply_threads, load_representation
    from elmokit.evaluation.tagging import format_table, run_benchmark

    apply_threads(args)
    _check_out(args)
    if getattr(args, "recipe", "feature") == "finetune":  # BERT §5.3: cli/finetune_tag_recipe.py
        from elmokit.cli.finetune_tag_recipe import run_eval

        results = run_eval(args)
    else:
        representation, spec = load_representation(args)
        results = run_benchmark(
            [d for d in args.datasets.split(",") if d], representation, representation_spec=spec,
            baseline=not args.no_baseline, options=tagger_train_options(args),
            config_changes={**tagger_config_changes(args), **({"scheme": args.scheme} if args.task == "ner" else {})},
            max_train_sentences=args.max_train_sentences, max_eval_sentences=args.max_eval_sentences,
            max_dev_sentences=args.max_dev_sentences, data_dir=args.data_dir, cache_dir=args.cache_dir,
            word_table=load_word_vectors(args),
        )
    pos = "UPOS token accuracy" if "pd_pos" not in args.datasets else "token accuracy (UPOS; PKU tags on pd_pos)"
    metric = {"pos": pos, "ner": "span F1, seqeval strict mode (IOB2)", "cws": "word F1, SIGHAN bakeoff scorer rules"}[args.task]
    print(f"{metric}, in %; best epoch by dev score")
    print(format_table(results))
    if args.out:
        _write_json(args.out, {"benchmark": args.task, "metric": metric, "command": _command(args), "results": results})
    return 0


# ---------------------------------------------------------------------- layer probes
def _add_representation_arguments(parser) -> None:
    add_representation_arguments(parser)
    parser.add_argument("--batch-size", type=positive_int, default=64, help="sentences per biLM batch")
    add_threads_argument(parser)


def _representation(args):
    from elmokit.cli.common import apply_threads, load_representation

    apply_threads(args)
    return load_representation(args, batch_size=args.batch_size)[0]


def _check_out(args) -> None:
    """Refuse ``--out`` before any work: a folder, or one of the inputs (``elmokit.io.check_output_file``)."""
    from elmokit.cli.arguments import input_paths
    from elmokit.io import check_output_file

    if getattr(args, "out", None):
        check_output_file(args.out, inputs=[*input_paths(args), getattr(args, "analogy_vocab", None)])


def _write_json(path, payload) -> None:
    from elmokit.io import write_json

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, _clean(payload), ensure_ascii=False)


def _command(args) -> list[str]:
    return ["elmokit"] + list(getattr(args, "argv", []))


def _report(args, result: dict, table: str) -> int:
    """Print a probe's table; write its result, with the command that made it, to ``--out`` when given."""
    result["command"] = _command(args)
    print(table)
    if args.out:
        _write_json(args.out, result)
    return 0


def _register_probe(sub) -> None:
    p = sub.add_parser(
        "probe", help="linear POS probe on each layer (UD English-EWT; the paper's Table 6)",
        description="For each layer, a softmax regression on the frozen token vectors of UD English-EWT train "
        "(UPOS), weight decay chosen on dev, accuracy on test.",
    )
    _add_representation_arguments(p)
    p.add_argument("--data-dir", default=None,
                   help="folder with en_ewt-ud-{train,dev,test}.conllu (default: $ELMOKIT_SHARED/data/ud_english_ewt)")
    p.add_argument("--max-sentences", type=positive_int, default=None, help="use only the first N sentences of each split")
    p.add_argument("--weight-decays", type=number_list(non_negative_float), default="0,1e-5,1e-4,1e-3",
                   help="comma-separated L2 strengths tried on dev")
    p.add_argument("--layers", type=number_list(non_negative_int), default=None, help="comma-separated layers (default: all)")
    p.add_argument("--max-iter", type=positive_int, default=200, help="L-BFGS iterations per fit")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.set_defaults(func=run_probe)


def run_probe(args: argparse.Namespace) -> int:
    import logging

    from elmokit.evaluation.probe import format_probe_table, probe_layers, ud_ewt_splits

    _check_out(args)
    splits = ud_ewt_splits(args.data_dir, max_sentences=args.max_sentences)
    rep = _representation(args)
    result = probe_layers(rep, splits["train"], splits["dev"], splits["test"], weight_decays=args.weight_decays,
                          layers=args.layers, max_iter=args.max_iter, log=logging.getLogger("elmokit.probe").info)
    return _report(args, result, format_probe_table(result))


# ---------------------------------------------------------------------- word sense disambiguation
def _register_wsd(sub) -> None:
    p = sub.add_parser(
        "wsd", help="1-nearest-neighbour WSD per layer (SemCor -> Raganato ALL; the paper's Table 5)",
        description="Sense vectors are SemCor means of each layer; a test word takes its lemma's sense with the "
        "highest cosine; lemmas unseen in SemCor back off to the WordNet first sense.",
    )
    _add_representation_arguments(p)
    p.add_argument("--data-dir", default=None,
                   help="the wsd folder with semcor30.tsv and Evaluation_Datasets/ (default: $ELMOKIT_SHARED/data/wsd)")
    p.add_argument("--test", default="ALL", help="evaluation set under Evaluation_Datasets/ (ALL, senseval2, ...)")
    p.add_argument("--wordnet", default=None,
                   help="WordNet 3.0 index.sense, its folder, or wordnet-3.0.tar.xz (default: $ELMOKIT_SHARED/data/wordnet3.0)")
    p.add_argument("--max-semcor-sentences", type=positive_int, default=None, help="use only the first N SemCor sentences")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.set_defaults(func=run_wsd)


def run_wsd(args: argparse.Namespace) -> int:
    from elmokit.data_paths import need_file, shared_data
    from elmokit.evaluation.wsd import (
        evaluate_wsd,
        format_wsd_table,
        read_first_senses,
        read_gold_keys,
        read_raganato_xml,
        read_semcor_tsv,
    )

    _check_out(args)
    folder = Path(args.data_dir) if args.data_dir else shared_data("wsd")
    wordnet = Path(args.wordnet) if args.wordnet else shared_data("wordnet3.0", "wordnet-3.0.tar.xz")
    test_dir = folder / "Evaluation_Datasets" / args.test
    for path in (folder / "semcor30.tsv", test_dir / f"{args.test}.data.xml", test_dir / f"{args.test}.gold.key.txt"):
        need_file(path, "the wsd folder")
    first_senses = read_first_senses(wordnet)
    test = read_raganato_xml(test_dir / f"{args.test}.data.xml")
    gold = read_gold_keys(test_dir / f"{args.test}.gold.key.txt")
    semcor = read_semcor_tsv(folder / "semcor30.tsv", max_sentences=args.max_semcor_sentences)
    rep = _representation(args)
    result = evaluate_wsd(rep, semcor, test, gold, first_senses)
    result["test_set"] = args.test
    return _report(args, result, format_wsd_table(result, args.test))


# ---------------------------------------------------------------------- SST
def _register_sst(sub) -> None:
    p = sub.add_parser(
        "sst", help="SST-5 / SST-2 sentence classification with and without ELMo",
        description="A BiLSTM classifier on [x_k; ELMo_k] (or x_k alone), trained on the root labels of the SST "
        "train trees, best epoch on dev, accuracy on test.",
    )
    _add_representation_arguments(p)
    p.add_argument("--data-dir", default=None, help="the SST trees folder (default: $ELMOKIT_SHARED/data/sst/trees)")
    p.add_argument("--tasks", default="sst5,sst2", help="comma-separated: sst5, sst2")
    p.add_argument("--variants", default="baseline,elmo", help="comma-separated: baseline (no ELMo), elmo")
    p.add_argument("--max-train", type=positive_int, default=None, help="use only the first N training trees")
    p.add_argument("--cache-dir", default=None, help="keep the feature caches here (default: a temporary folder)")
    add_classifier_training_arguments(p)
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.set_defaults(func=run_sst)


def run_sst(args: argparse.Namespace) -> int:
    import logging

    from elmokit.evaluation.sst import evaluate_sst, format_sst_table

    tasks = [t for t in args.tasks.split(",") if t]
    variants = [v for v in args.variants.split(",") if v]
    for name, given, allowed in (("--tasks", tasks, {"sst5", "sst2"}), ("--variants", variants, {"baseline", "elmo"})):
        if not given or set(given) - allowed:
            raise UserError(f"{name} takes {', '.join(sorted(allowed))}")
    _check_out(args)
    word_table = load_word_vectors(args)
    rep = _representation(args)
    result = evaluate_sst(rep, data_dir=args.data_dir, tasks=tasks, variants=variants, cache_dir=args.cache_dir,
                          max_train=args.max_train, log=logging.getLogger("elmokit.sst").info,
                          word_table=word_table, **classifier_training_options(args))
    return _report(args, result, format_sst_table(result))
