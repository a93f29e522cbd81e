"""`elmokit classify train|predict|eval`: a sentence classifier on [x_k; ELMo_k] (or word vectors alone),
with ``--recipe ulmfit`` the fine-tuned language model itself (``cli/ulmfit_recipe.py``), or with
``--recipe finetune`` a fine-tuned transformer folder (GPT/BERT, ``cli/finetune_recipe.py``).

    elmokit classify train --train train.tsv --dev dev.tsv --out runs/clf            # label<TAB>sentence lines
    elmokit classify train --format sst2 --train trees/train.txt --dev trees/dev.txt --out runs/sst2
    elmokit classify train --recipe ulmfit --train train.tsv --dev dev.tsv --out runs/ulmfit
    elmokit classify train --recipe finetune --model runs/bert --train train.tsv --dev dev.tsv --out runs/bert-clf
    elmokit classify predict --classifier runs/clf --input sentences.txt --out predictions.tsv
    elmokit classify eval --classifier runs/clf --data test.tsv                      # accuracy and error

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
    check_out,
    classifier_training_options,
    input_paths,
    load_word_vectors,
)
from elmokit.cli.common import (
    add_threads_argument,
    add_tokenizer_argument,
    apply_threads,
    load_representation,
    positive_int,
)
from elmokit.cli.finetune_recipe import add_finetune_arguments, run_finetune_train
from elmokit.cli.ulmfit_recipe import add_ulmfit_arguments, run_ulmfit_train
from elmokit.errors import InputNotFound, UserError

# How the pretrained model is transferred: feature = frozen layers through a learned scalar mix
# (ELMo's way, tasks/classifier.py); ulmfit = Howard & Ruder's fine-tuning of the LM (transfer/ulmfit.py);
# finetune = GPT's / BERT's fine-tuning of a whole transformer (transfer/finetune.py).
RECIPES = ("feature", "ulmfit", "finetune")


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
    add_tokenizer_argument(train, default="whitespace", help_prefix="how tsv sentences are cut: ")
    add_threads_argument(train)
    add_representation_arguments(train, no_elmo=True)
    add_classifier_training_arguments(train)
    train.add_argument("--recipe", choices=RECIPES, default="feature",
                       help="feature: the frozen representation's layers mixed into a BiLSTM classifier; ulmfit: "
                       "fine-tune --model's language model itself (ULMFiT; flags below); finetune: fine-tune the "
                       "transformer folder --model with a classification layer (GPT/BERT; flags below) (default: %(default)s)")
    add_ulmfit_arguments(train)
    add_finetune_arguments(train)
    train.set_defaults(func=run_train)

    predict = sub.add_parser("predict", help="label the sentences of a file with a saved classifier",
                             description="Writes 'label<TAB>probability' per input line. The representation is the one "
                             "recorded in the classifier's config.json unless --model, --options-file or --vectors is given.")
    predict.add_argument("--classifier", default=None, metavar="DIR", help="a folder written by `elmokit classify train`")
    predict.add_argument("--input", default=None, metavar="FILE",
                         help="the file to label: one whitespace-tokenised sentence per line")
    predict.add_argument("positional", nargs="*", metavar="", help=argparse.SUPPRESS)  # the older `DIR FILE` form
    predict.add_argument("--out", default=None, help="label<TAB>probability per line (default: stdout)")
    predict.add_argument("--batch-size", type=positive_int, default=64, help="sentences per batch (default: %(default)s)")
    add_tokenizer_argument(predict, default="whitespace",
                           help_prefix="how input lines are cut (give the one the classifier was trained with): ")
    add_threads_argument(predict)
    add_representation_arguments(predict)
    predict.set_defaults(func=run_predict)

    evaluate = sub.add_parser("eval", help="accuracy of a saved classifier on labelled data",
                              description="Prints the accuracy and error of a classifier written by `elmokit classify "
                              "train` (either recipe) on labelled data; the representation as for predict.")
    evaluate.add_argument("--classifier", required=True, metavar="DIR", help="a folder written by `elmokit classify train`")
    evaluate.add_argument("--data", required=True, metavar="FILE", help="labelled data, in --format")
    evaluate.add_argument("--format", choices=("tsv", "sst5", "sst2"), default="tsv",
                          help="tsv: label<TAB>sentence lines; sst5/sst2: SST PTB trees, root label (default: %(default)s)")
    evaluate.add_argument("--batch-size", type=positive_int, default=64, help="sentences per batch (default: %(default)s)")
    add_tokenizer_argument(evaluate, default="whitespace", help_prefix="how tsv sentences are cut: ")
    add_threads_argument(evaluate)
    add_representation_arguments(evaluate)
    evaluate.set_defaults(func=run_eval)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _read(path: str, data_format: str, tokenizer: str = "whitespace"):
    from elmokit.tasks.data import read_labelled_tsv
    from elmokit.text.corpus import Tokenizer

    if data_format == "tsv":
        return read_labelled_tsv(path, Tokenizer(kind=tokenizer))
    from elmokit.evaluation.sst import read_sst, sst_task

    if not Path(path).is_file():
        raise InputNotFound(f"{path}: no such file")
    sentences, labels = read_sst(path)
    kept, names = sst_task(sentences, labels, binary=data_format == "sst2")
    return [sentences[i] for i in kept], names


def run_train(args: argparse.Namespace) -> int:
    import tempfile

    from elmokit.tasks.classifier import train_classifier

    apply_threads(args)
    check_out(args, "classify train")  # before any work
    data = {name: _read(path, args.format, args.tokenizer) for name, path in (("train", args.train), ("dev", args.dev),
                                                               ("test", args.test)) if path}
    if args.recipe == "ulmfit":
        return run_ulmfit_train(args, data)
    if args.recipe == "finetune":
        return run_finetune_train(args, data)
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
            representation=spec, log=log, word_table=load_word_vectors(args), **classifier_training_options(args))
        print(f"dev accuracy {max(h['dev_accuracy'] for h in history):.2f}")
        if "test" in data:
            print(f"test accuracy {classifier.accuracy(*data['test'], features.get('test')):.2f}")
    if classifier.model.layer_weights():
        print("layer weights " + ", ".join(f"{w:.3f}" for w in classifier.model.layer_weights()["weights"]))
    classifier.save(args.out, inputs=input_paths(args))
    print(f"saved {args.out}")
    return 0


def _predict_paths(args: argparse.Namespace) -> tuple[str, str]:
    """--classifier and --input, or the older positional form `DIR FILE`."""
    if args.positional:
        if len(args.positional) != 2 or args.classifier or args.input:
            raise UserError("give --classifier DIR --input FILE (or the older form: DIR FILE)")
        return args.positional[0], args.positional[1]
    if not args.classifier or not args.input:
        raise UserError("give --classifier DIR (from `elmokit classify train`) and --input FILE")
    return args.classifier, args.input


def _classifier_and_features(args: argparse.Namespace, model_dir: str, sentences):
    """The saved classifier (any recipe) and, for a feature classifier with ELMo, the representation's
    layers of ``sentences`` (None otherwise)."""
    from elmokit.features import InMemoryFeatures
    from elmokit.representation import load_representation as load_spec
    from elmokit.tasks.classifier import Classifier
    from elmokit.transfer.finetune import CONFIG_FILE, FineTuned
    from elmokit.transfer.ulmfit import ULMFiTClassifier, is_ulmfit_folder

    if (Path(model_dir) / CONFIG_FILE).is_file():  # --recipe finetune: the transformer reads the text itself
        return FineTuned.load(model_dir), None
    ulmfit = is_ulmfit_folder(model_dir)  # --recipe ulmfit: the folder holds the fine-tuned LMs themselves
    classifier = ULMFiTClassifier.load(model_dir) if ulmfit else Classifier.load(model_dir)
    features = None
    config = None if ulmfit else classifier.model.config
    if config is not None and config.use_elmo:
        rep, _ = load_representation(args, batch_size=args.batch_size, default_model=None)
        if rep is None:  # no flag: the representation the classifier was trained with
            if not config.representation:
                raise UserError(f"{model_dir}: the config does not say which representation it was trained on; "
                                "give --model, --options-file/--weight-file or --vectors")
            rep = load_spec(config.representation, base=model_dir, source=str(Path(model_dir) / "config.json"),
                            batch_size=args.batch_size)
        if (rep.num_layers, rep.dim) != (config.elmo_layers, config.elmo_dim):
            raise UserError(f"the representation gives {rep.num_layers} layers of {rep.dim}; the classifier was "
                            f"trained on {config.elmo_layers} of {config.elmo_dim}")
        features = InMemoryFeatures(rep.embed(sentences))
    return classifier, features


def run_predict(args: argparse.Namespace) -> int:
    import torch

    from elmokit.io import atomic_path, check_output_file
    from elmokit.tasks.data import read_text
    from elmokit.text.corpus import Tokenizer

    apply_threads(args)
    model_dir, input_path = _predict_paths(args)
    if args.out:
        check_output_file(args.out, inputs=[input_path])  # before any work
    sentences = read_text(input_path, Tokenizer(kind=args.tokenizer))
    classifier, features = _classifier_and_features(args, model_dir, sentences)
    probabilities = torch.softmax(classifier.logits(sentences, features, batch_size=args.batch_size), dim=1)
    best = probabilities.max(dim=1)
    text = "".join(f"{classifier.labels[i]}\t{p:.4f}\n" for p, i in zip(best.values.tolist(), best.indices.tolist()))
    if args.out:
        with atomic_path(args.out) as tmp:
            Path(tmp).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def run_eval(args: argparse.Namespace) -> int:
    apply_threads(args)
    sentences, labels = _read(args.data, args.format, args.tokenizer)
    classifier, features = _classifier_and_features(args, args.classifier, sentences)
    accuracy = classifier.accuracy(sentences, labels, features)
    print(f"accuracy {accuracy:.2f}, error {100 - accuracy:.2f} ({len(sentences)} sentences of {args.data})")
    return 0
