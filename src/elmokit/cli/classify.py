"""`elmokit classify train|predict`: a sentence classifier on [x_k; ELMo_k] (or word vectors alone).

    elmokit classify train --train train.tsv --dev dev.tsv --out runs/clf            # label<TAB>sentence lines
    elmokit classify train --format sst2 --train trees/train.txt --dev trees/dev.txt --out runs/sst2
    elmokit classify predict runs/clf sentences.txt --out predictions.tsv

``predict`` reads one whitespace-tokenised sentence per line and writes ``label<TAB>probability``
per line; it embeds with the representation recorded in the model's config.json unless
``--model``/``--options-file`` say otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def register(subparsers) -> None:
    from elmokit.cli.common import add_model_arguments
    from elmokit.cli.eval import add_classifier_training_arguments

    parser = subparsers.add_parser("classify", help="train or apply a sentence classifier (with or without ELMo)")
    sub = parser.add_subparsers(dest="classify_command", metavar="ACTION")
    train = sub.add_parser("train", help="train a classifier; keeps the epoch with the best dev accuracy")
    train.add_argument("--train", required=True, help="training data")
    train.add_argument("--dev", required=True, help="development data (model selection)")
    train.add_argument("--test", default=None, help="optional test data: accuracy reported and recorded")
    train.add_argument("--format", choices=("tsv", "sst5", "sst2"), default="tsv",
                       help="tsv: label<TAB>sentence lines; sst5/sst2: SST PTB trees (root label)")
    train.add_argument("--out", required=True, help="model folder to write")
    train.add_argument("--no-elmo", action="store_true", help="the baseline: learned word vectors only")
    train.add_argument("--batch-size", type=int, default=64, help="sentences per biLM batch when embedding")
    train.add_argument("--cache-dir", default=None, help="keep the feature caches here (default: a temporary folder)")
    train.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    add_model_arguments(train)
    add_classifier_training_arguments(train)
    train.set_defaults(func=lambda args: _run("classify train", run_train, args))

    predict = sub.add_parser("predict", help="label the sentences of a file with a saved classifier")
    predict.add_argument("model_dir", help="a folder written by `elmokit classify train`")
    predict.add_argument("input", help="one whitespace-tokenised sentence per line")
    predict.add_argument("--out", default=None, help="label<TAB>probability per line (default: stdout)")
    predict.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    predict.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    add_model_arguments(predict)
    predict.set_defaults(func=lambda args: _run("classify predict", run_predict, args))
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _run(command, func, args) -> int:
    from elmokit.cli.common import run_reporting_errors

    try:
        return run_reporting_errors(command, func, args)
    except ValueError as error:  # malformed data or model files: the message names the file
        print(f"elmokit {command}: error: {error}", file=sys.stderr)
        return 2


def _read(path: str, data_format: str):
    from elmokit.tasks.classifier import read_labelled_tsv, read_sst, sst_task

    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if data_format == "tsv":
        return read_labelled_tsv(path)
    sentences, labels = read_sst(path)
    kept, names = sst_task(sentences, labels, binary=data_format == "sst2")
    return [sentences[i] for i in kept], names


def _model_spec(args) -> str | None:
    """What predict loads by default: the --model given (None for --options-file models)."""
    if args.options_file is not None:
        return None
    return str(Path(args.model).resolve()) if args.model and args.model != "default" else "default"


def run_train(args: argparse.Namespace) -> int:
    import tempfile

    from elmokit.cli.common import apply_threads, load_embedder
    from elmokit.cli.eval import classifier_training_options
    from elmokit.tasks.classifier import train_classifier

    apply_threads(args)
    data = {name: _read(path, args.format) for name, path in (("train", args.train), ("dev", args.dev),
                                                               ("test", args.test)) if path}
    log = logging.getLogger("elmokit.classify").info
    with tempfile.TemporaryDirectory(prefix="elmokit-classify-") as scratch:
        features, rep = {}, None
        if not args.no_elmo:
            from elmokit.tasks.features import FeatureCache

            rep = load_embedder(args, batch_size=args.batch_size)
            root = Path(args.cache_dir) if args.cache_dir else Path(scratch)
            features = {name: FeatureCache.for_dataset(rep, d[0], root) for name, d in data.items()}
        classifier, history = train_classifier(
            data["train"], data["dev"], train_features=features.get("train"), dev_features=features.get("dev"),
            use_elmo=not args.no_elmo, elmo_layers=rep.num_layers if rep else 0, elmo_dim=rep.dim if rep else 0,
            representation=_model_spec(args) if rep else None, log=log, **classifier_training_options(args))
        print(f"dev accuracy {max(h['dev_accuracy'] for h in history):.2f}")
        if "test" in data:
            print(f"test accuracy {classifier.accuracy(*data['test'], features.get('test')):.2f}")
    if classifier.model.layer_weights():
        print("layer weights " + ", ".join(f"{w:.3f}" for w in classifier.model.layer_weights()["weights"]))
    classifier.save(args.out)
    print(f"saved {args.out}")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    import torch

    from elmokit.cli.common import apply_threads, load_embedder
    from elmokit.io import atomic_path
    from elmokit.tasks.classifier import Classifier, InMemoryFeatures

    apply_threads(args)
    classifier = Classifier.load(args.model_dir)
    if not Path(args.input).is_file():
        raise FileNotFoundError(f"{args.input}: no such file")
    lines = Path(args.input).read_text(encoding="utf-8").splitlines()
    empty = [i + 1 for i, line in enumerate(lines) if not line.split()]
    if empty:
        raise ValueError(f"{args.input}: empty lines at {', '.join(map(str, empty[:10]))}: one sentence per line")
    sentences = [line.split() for line in lines]
    features = None
    if classifier.model.config.use_elmo:
        if args.model is None and args.options_file is None:
            args.model = classifier.model.config.representation
            if args.model is None:
                raise ValueError(f"{args.model_dir}: trained on original-format files; give --options-file/--weight-file")
        rep = load_embedder(args, batch_size=args.batch_size)
        if (rep.num_layers, rep.dim) != (classifier.model.config.elmo_layers, classifier.model.config.elmo_dim):
            raise ValueError(f"the representation gives {rep.num_layers} layers of {rep.dim}; the classifier was "
                             f"trained on {classifier.model.config.elmo_layers} of {classifier.model.config.elmo_dim}")
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
