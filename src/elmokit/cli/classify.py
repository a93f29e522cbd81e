"""`elmokit classify train|predict`: a sentence classifier on [x_k; ELMo_k] (or word vectors alone).

    elmokit classify train --train train.tsv --dev dev.tsv --out runs/clf            # label<TAB>sentence lines
    elmokit classify train --format sst2 --train trees/train.txt --dev trees/dev.txt --out runs/sst2
    elmokit classify predict --classifier runs/clf --input sentences.txt --out predictions.tsv

The flags are those of `elmokit tag` for the same roles (--train, --dev, --test, --out;
--classifier and --input as --tagger and --input). ``predict`` reads one whitespace-tokenised
sentence per line and writes ``label<TAB>probability`` per line; it embeds with the
representation recorded in the model's config.json unless ``--model``/``--options-file``/``--vectors``
say otherwise. (The older form ``classify predict DIR FILE`` still works.)
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from elmokit.cli.arguments import (
    add_classifier_training_arguments,
    add_representation_arguments,
    add_task_file_arguments,
    classifier_training_options,
)
from elmokit.cli.common import add_threads_argument, apply_threads, load_representation, positive_int, run_reporting_errors


def register(subparsers) -> None:
    parser = subparsers.add_parser("classify", help="train or apply a sentence classifier (with or without ELMo)")
    sub = parser.add_subparsers(dest="classify_command", metavar="ACTION")
    train = sub.add_parser("train", help="train a classifier; keeps the epoch with the best dev accuracy",
                           description="Trains a BiLSTM sentence classifier on [x_k; ELMo_k] (or x_k alone with "
                           "--no-elmo) and keeps the epoch with the best dev accuracy.")
    add_task_file_arguments(train, dev="model selection", test="accuracy reported and recorded", out="classifier")
    train.add_argument("--format", choices=("tsv", "sst5", "sst2"), default="tsv",
                       help="tsv: label<TAB>sentence lines; sst5/sst2: SST PTB trees, root label (default: %(default)s)")
    train.add_argument("--batch-size", type=positive_int, default=64,
                       help="sentences per batch when embedding (default: %(default)s)")
    train.add_argument("--cache-dir", default=None,
                       help="keep the feature caches here (reused across runs; default: a temporary folder)")
    add_threads_argument(train)
    add_representation_arguments(train, no_elmo=True)
    add_classifier_training_arguments(train)
    train.set_defaults(func=lambda args: _run("classify train", run_train, args))

    predict = sub.add_parser("predict", help="label the sentences of a file with a saved classifier",
                             description="Writes 'label<TAB>probability' per input line. The representation is the one "
                             "recorded in the classifier's config.json unless --model, --options-file or --vectors is given.")
    predict.add_argument("--classifier", default=None, metavar="DIR", help="a folder written by `elmokit classify train`")
    predict.add_argument("--input", default=None, metavar="FILE",
                         help="the file to label: one whitespace-tokenised sentence per line")
    predict.add_argument("positional", nargs="*", metavar="", help=argparse.SUPPRESS)  # the older `DIR FILE` form
    predict.add_argument("--out", default=None, help="label<TAB>probability per line (default: stdout)")
    predict.add_argument("--batch-size", type=positive_int, default=64, help="sentences per batch (default: %(default)s)")
    add_threads_argument(predict)
    add_representation_arguments(predict)
    predict.set_defaults(func=lambda args: _run("classify predict", run_predict, args))
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _run(command, func, args) -> int:
    try:
        return run_reporting_errors(command, func, args)
    except ValueError as error:  # malformed data or model files: the message names the file
        print(f"elmokit {command}: error: {error}", file=sys.stderr)
        return 2


def _read(path: str, data_format: str):
    from elmokit.tasks.data import read_labelled_tsv

    if data_format == "tsv":
        return read_labelled_tsv(path)
    from elmokit.evaluation.sst import read_sst, sst_task

    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    sentences, labels = read_sst(path)
    kept, names = sst_task(sentences, labels, binary=data_format == "sst2")
    return [sentences[i] for i in kept], names


def run_train(args: argparse.Namespace) -> int:
    import tempfile

    from elmokit.tasks.classifier import train_classifier

    apply_threads(args)
    data = {name: _read(path, args.format) for name, path in (("train", args.train), ("dev", args.dev),
                                                               ("test", args.test)) if path}
    log = logging.getLogger("elmokit.classify").info
    rep, spec = load_representation(args, batch_size=args.batch_size)
    with tempfile.TemporaryDirectory(prefix="elmokit-classify-") as scratch:
        features = {}
        if rep is not None:
            from elmokit.features import feature_source

            root = Path(args.cache_dir) if args.cache_dir else Path(scratch)
            features = {name: feature_source(rep, d[0], root) for name, d in data.items()}
        classifier, history = train_classifier(
            data["train"], data["dev"], train_features=features.get("train"), dev_features=features.get("dev"),
            use_elmo=rep is not None, elmo_layers=rep.num_layers if rep else 0, elmo_dim=rep.dim if rep else 0,
            representation=spec, log=log, **classifier_training_options(args))
        print(f"dev accuracy {max(h['dev_accuracy'] for h in history):.2f}")
        if "test" in data:
            print(f"test accuracy {classifier.accuracy(*data['test'], features.get('test')):.2f}")
    if classifier.model.layer_weights():
        print("layer weights " + ", ".join(f"{w:.3f}" for w in classifier.model.layer_weights()["weights"]))
    classifier.save(args.out)
    print(f"saved {args.out}")
    return 0


def _predict_paths(args: argparse.Namespace) -> tuple[str, str]:
    """--classifier and --input, or the older positional form `DIR FILE`."""
    if args.positional:
        if len(args.positional) != 2 or args.classifier or args.input:
            raise ValueError("give --classifier DIR --input FILE (or the older form: DIR FILE)")
        return args.positional[0], args.positional[1]
    if not args.classifier or not args.input:
        raise ValueError("give --classifier DIR (from `elmokit classify train`) and --input FILE")
    return args.classifier, args.input


def run_predict(args: argparse.Namespace) -> int:
    import torch

    from elmokit.features import InMemoryFeatures
    from elmokit.io import atomic_path
    from elmokit.representation import load_representation as load_spec
    from elmokit.tasks.classifier import Classifier
    from elmokit.tasks.data import read_text

    apply_threads(args)
    model_dir, input_path = _predict_paths(args)
    classifier = Classifier.load(model_dir)
    sentences = read_text(input_path)
    features = None
    config = classifier.model.config
    if config.use_elmo:
        rep, _ = load_representation(args, batch_size=args.batch_size, default_model=None)
        if rep is None:  # no flag: the representation the classifier was trained with
            if not config.representation:
                raise ValueError(f"{model_dir}: the config does not say which representation it was trained on; "
                                 "give --model, --options-file/--weight-file or --vectors")
            rep = load_spec(config.representation, base=model_dir, source=str(Path(model_dir) / "config.json"),
                            batch_size=args.batch_size)
        if (rep.num_layers, rep.dim) != (config.elmo_layers, config.elmo_dim):
            raise ValueError(f"the representation gives {rep.num_layers} layers of {rep.dim}; the classifier was "
                             f"trained on {config.elmo_layers} of {config.elmo_dim}")
        features = InMemoryFeatures(rep.embed(sentences))
    probabilities = torch.softmax(classifier.logits(sentences, features, batch_size=args.batch_size), dim=1)
    best = probabilities.max(dim=1)
    text = "".join(f"{classifier.labels[i]}\t{p:.4f}\n" for p, i in zip(best.values.tolist(), best.indices.tolist()))
    if args.out:
        with atomic_path(args.out) as tmp:
            Path(tmp).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
