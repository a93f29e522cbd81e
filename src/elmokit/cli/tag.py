"""`elmokit tag`: train a BiLSTM-CRF sequence tagger with ELMo (or any representation), and predict.

    elmokit tag train --train en_ewt-ud-train.conllu --dev en_ewt-ud-dev.conllu --format conllu --out runs/pos
    elmokit tag train --train train.txt --dev dev.txt --format conll --token-prefix en: --model default --out runs/ner
    elmokit tag predict --tagger runs/ner --input sentences.txt --out tagged.conll

The representation is ``--model`` (an ELMo model, default 'default'), ``--options-file`` +
``--weight-file``, ``--vectors`` (a static table), or ``--no-elmo`` (the baseline tagger).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from elmokit.cli.common import add_threads_argument, apply_threads, run_reporting_errors


def register(subparsers) -> None:
    parser = subparsers.add_parser("tag", help="sequence tagging (POS, NER): train a BiLSTM-CRF with ELMo, predict")
    sub = parser.add_subparsers(dest="tag_command", metavar="ACTION")
    _register_train(sub)
    _register_predict(sub)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


# ------------------------------------------------------------------ shared with `elmokit eval pos|ner`


def add_representation_arguments(parser: argparse.ArgumentParser, *, allow_none: bool = True) -> None:
    group = parser.add_argument_group("representation (default: the shipped default ELMo model)")
    group.add_argument("--model", default=None, help="an ELMo model: 'default', a native model folder, or a folder "
                       "with options.json + weights.hdf5")
    group.add_argument("--options-file", default=None, help="original options.json (with --weight-file)")
    group.add_argument("--weight-file", default=None, help="original weights.hdf5 (with --options-file)")
    group.add_argument("--initial-state", choices=("zero", "warm"), default="zero",
                       help="ELMo: every sentence's LSTM state starts at zero (default) or at the model's warm state")
    group.add_argument("--vectors", default=None, metavar="DIR|FILE",
                       help="a static table instead: run folder of `elmokit static train` or a word2vec/GloVe file")
    if allow_none:
        group.add_argument("--no-elmo", action="store_true", help="no representation: the baseline tagger")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The task model's shape (TaggerConfig) and training options (TrainOptions)."""
    model = parser.add_argument_group("task model")
    model.add_argument("--output", choices=("crf", "softmax"), default="crf", help="CRF (default) or per-token softmax")
    model.add_argument("--scheme", choices=("BIO", "BIOES"), default="BIO",
                       help="NER: train in this label scheme (predictions and scores are always BIO/IOB2)")
    model.add_argument("--elmo", choices=("mix", "top"), default="mix",
                       help="mix: learned scalar mix of all layers (eq. 1); top: the top layer only")
    model.add_argument("--elmo-at-output", action="store_true", help="also add ELMo at the BiLSTM output, own mix")
    model.add_argument("--mix-l2", type=float, default=0.001, help="lambda of the L2 penalty on the mix weights")
    model.add_argument("--fine-tune", action="store_true", help="fine-tune the biLM (ELMo models only; slow)")
    model.add_argument("--word-dim", type=int, default=100, help="learned word embedding size")
    model.add_argument("--hidden-dim", type=int, default=200, help="BiLSTM hidden size per direction")
    model.add_argument("--dropout", type=float, default=0.5, help="dropout on word vectors and BiLSTM output")
    model.add_argument("--elmo-dropout", type=float, default=0.5, help="dropout on ELMo")
    model.add_argument("--no-lowercase", action="store_true", help="keep the case of words for the word embedding")
    model.add_argument("--min-word-count", type=int, default=2,
                       help="training words seen fewer times share the unknown-word vector")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=int, default=10, help="at most this many epochs")
    train.add_argument("--patience", type=int, default=3, help="stop after this many epochs without a better dev score")
    train.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    train.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate of the task model")
    train.add_argument("--fine-tune-lr", type=float, default=1e-4, help="Adam learning rate of the biLM (--fine-tune)")
    train.add_argument("--seed", type=int, default=0, help="random seed")
    train.add_argument("--max-train-sentences", type=int, default=None, help="use only the first N training sentences")
    train.add_argument("--cache-dir", default=None,
                       help="keep the frozen feature caches here (reused across runs; default: a temporary folder)")
    add_threads_argument(parser)


def load_representation(args: argparse.Namespace):
    """(representation, spec for the saved config) from the flags; (None, {}) for --no-elmo."""
    from elmokit.formats import ModelFolderError

    if getattr(args, "no_elmo", False):
        if args.model or args.options_file or args.vectors:
            raise ModelFolderError("--no-elmo takes no --model, --options-file or --vectors")
        return None, {}
    if args.vectors:
        if args.model or args.options_file:
            raise ModelFolderError("give either --vectors or an ELMo model, not both")
        from elmokit.static.vectors import StaticVectors

        if not Path(args.vectors).exists():
            raise FileNotFoundError(f"--vectors {args.vectors}: no such file or folder")
        return StaticVectors.load(args.vectors), {"kind": "vectors", "path": str(Path(args.vectors).resolve())}
    from elmokit.cli.common import load_embedder

    embedder = load_embedder(args)
    if args.options_file:
        spec = {"kind": "elmo-original", "options_file": str(Path(args.options_file).resolve()),
                "weight_file": str(Path(args.weight_file).resolve())}
    else:
        model = args.model or "default"
        spec = {"kind": "elmo", "model": model if model == "default" else str(Path(model).resolve())}
    if getattr(args, "initial_state", "zero") != "zero":
        spec["initial_state"] = args.initial_state
    return embedder, spec


def config_changes(args: argparse.Namespace) -> dict:
    return dict(output=args.output, elmo=args.elmo, elmo_at_output=args.elmo_at_output, mix_l2=args.mix_l2,
                fine_tune=args.fine_tune, word_dim=args.word_dim, hidden_dim=args.hidden_dim, dropout=args.dropout,
                elmo_dropout=args.elmo_dropout, lowercase=not args.no_lowercase, min_word_count=args.min_word_count)


def train_options(args: argparse.Namespace):
    from elmokit.tasks.tagger import TrainOptions

    return TrainOptions(epochs=args.epochs, patience=args.patience, batch_size=args.batch_size, learning_rate=args.lr,
                        fine_tune_learning_rate=args.fine_tune_lr, seed=args.seed)


# ------------------------------------------------------------------------------------ train


def _register_train(sub) -> None:
    p = sub.add_parser("train", help="train a tagger, early-stopped on dev; writes a tagger folder",
                       description="Metrics: token accuracy (POS, --format conllu) or span F1 with seqeval in "
                       "strict mode, IOB2 (NER, --format conll).")
    p.add_argument("--train", required=True, help="training file")
    p.add_argument("--dev", required=True, help="development file (early stopping)")
    p.add_argument("--test", default=None, help="test file, scored once with the best model")
    p.add_argument("--format", choices=("conllu", "conll"), required=True,
                   help="conllu: UD CoNLL-U, UPOS labels (POS); conll: token ... label columns, BIO/IOB1 (NER)")
    p.add_argument("--column", choices=("upos", "xpos"), default="upos", help="CoNLL-U label column")
    p.add_argument("--token-prefix", default="", help="strip this prefix from tokens (WikiANN: 'en:')")
    p.add_argument("--task", choices=("pos", "ner"), default=None,
                   help="metric: pos = accuracy, ner = span F1 (default: pos for conllu, ner for conll)")
    add_representation_arguments(p)
    add_model_arguments(p)
    p.add_argument("--out", required=True, help="the tagger folder to write (replaced atomically)")
    p.set_defaults(func=lambda args: run_reporting_errors("tag train", _train, args))


def _read(args, path):
    from elmokit.tasks.data import read_conll, read_conllu

    if args.format == "conllu":
        return read_conllu(path, column=args.column)
    return read_conll(path, token_prefix=args.token_prefix)


def _train(args: argparse.Namespace) -> int:
    from elmokit.tasks.data import TaggingDataError
    from elmokit.tasks.tagger import TaggerConfig, main_metric, train_tagger

    apply_threads(args)
    task = args.task or ("pos" if args.format == "conllu" else "ner")
    try:
        train, dev = _read(args, args.train).subset(args.max_train_sentences), _read(args, args.dev)
        test = _read(args, args.test) if args.test else None
        representation, spec = load_representation(args)
        changes = config_changes(args)
        if representation is None:
            changes.update(elmo="none", elmo_at_output=False)
        config = TaggerConfig(
            task=task, scheme=args.scheme if task == "ner" else None,
            elmo_layers=representation.num_layers if representation else 0,
            elmo_dim=representation.dim if representation else 0,
            representation=spec, representation_name=representation.name if representation else "", **changes)
    except (TaggingDataError, ValueError) as error:
        print(f"elmokit tag train: error: {error}", file=sys.stderr)
        return 2
    for corpus in (train, dev, test):
        for note in (corpus.notes if corpus else []):
            logging.info("%s: %s", corpus.path, note)
    print(json.dumps({"config": config.to_dict(), "train": args.train, "train_sentences": len(train)}, indent=2),
          file=sys.stderr)
    tagger = train_tagger(train, dev, config, representation=representation, options=train_options(args),
                          cache_dir=args.cache_dir)
    results = {"dev": tagger.history[tagger.best_epoch - 1]["dev"]}
    if test is not None:
        results["test"] = tagger.evaluate(test)
    tagger.results = {"command": ["elmokit"] + list(getattr(args, "argv", [])), **results}
    tagger.save(args.out)
    name = "span F1 (seqeval strict, IOB2)" if task == "ner" else "token accuracy"
    for split, result in results.items():
        print(f"{split}: {name} {100 * main_metric(result, task):.2f}")
    if tagger.mixing_weights():
        print(f"layer weights: {json.dumps(tagger.mixing_weights())}")
    print(f"tagger written to {args.out}")
    return 0


# ---------------------------------------------------------------------------------- predict


def _register_predict(sub) -> None:
    p = sub.add_parser("predict", help="tag a file with a trained tagger",
                       description="Writes 'token<TAB>label' lines, a blank line after each sentence. With a "
                       "labelled input (--format conll/conllu) it also prints the score.")
    p.add_argument("--tagger", required=True, help="a folder written by `elmokit tag train`")
    p.add_argument("--input", required=True, help="the file to tag")
    p.add_argument("--format", choices=("text", "conll", "conllu"), default="text",
                   help="text: one whitespace-tokenised sentence per line (default); conll/conllu: labelled files")
    p.add_argument("--token-prefix", default="", help="strip this prefix from tokens (conll)")
    p.add_argument("--out", required=True, help="output file (written atomically)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    add_threads_argument(p)
    p.set_defaults(func=lambda args: run_reporting_errors("tag predict", _predict, args))


def _predict(args: argparse.Namespace) -> int:
    from elmokit.tasks.data import TaggingDataError, read_conll, read_conllu, read_text, write_conll
    from elmokit.tasks.tagger import SequenceTagger, TaggerFolderError, main_metric, score

    apply_threads(args)
    try:
        tagger = SequenceTagger.load(args.tagger)
        gold = None
        if args.format == "text":
            sentences = read_text(args.input)
        else:
            gold = read_conllu(args.input) if args.format == "conllu" else read_conll(args.input, token_prefix=args.token_prefix)
            sentences = gold.sentences
    except (TaggingDataError, TaggerFolderError) as error:
        print(f"elmokit tag predict: error: {error}", file=sys.stderr)
        return 2
    predictions = tagger.predict(sentences, batch_size=args.batch_size)
    write_conll(args.out, sentences, predictions)
    print(f"{len(sentences)} sentences tagged, written to {args.out}")
    if gold is not None:
        result = score(gold.labels, predictions, tagger.config.task)
        name = "span F1 (seqeval strict, IOB2)" if tagger.config.task == "ner" else "token accuracy"
        print(f"{name}: {100 * main_metric(result, tagger.config.task):.2f}")
    return 0
