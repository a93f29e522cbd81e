"""Argument groups that several subcommands share (so that no subcommand imports another).

* ``add_representation_arguments``: which representation (``--model``, ``--options-file`` +
  ``--weight-file``, ``--initial-state``, ``--vectors``, ``--no-elmo``); ``common.load_representation``
  turns them into one.
* ``add_tagger_arguments`` + ``tagger_config_changes`` / ``tagger_train_options``: the tagger's shape
  and training (``tag train``, ``eval pos|ner``).
* ``add_classifier_training_arguments`` + ``classifier_training_options``: the sentence
  classifier's (``classify train``, ``eval sst``).
"""

from __future__ import annotations

import argparse
import os

from elmokit.cli.common import (
    add_model_arguments,
    add_threads_argument,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
)
from elmokit.tasks.modes import ELMO_MODES


def add_representation_arguments(parser: argparse.ArgumentParser, *, vectors: bool = True,
                                 no_elmo: bool = False) -> None:
    """The ELMo model flags, and instead of them ``--vectors`` (a static table) and ``--no-elmo``."""
    add_model_arguments(parser)
    if not (vectors or no_elmo):
        return
    group = parser.add_argument_group("instead of an ELMo model")
    if vectors:
        group.add_argument("--vectors", default=None, metavar="DIR|FILE",
                           help="a static table: run folder of `elmokit static train` or a word2vec/GloVe file")
    if no_elmo:
        group.add_argument("--no-elmo", action="store_true", help="no representation: the baseline, word vectors only")


def add_task_file_arguments(parser: argparse.ArgumentParser, *, dev: str, test: str, out: str) -> None:
    """``--train``, ``--dev``, ``--test`` and ``--out``: the same flags for the same roles in every
    command that trains a task model (``tag train``, ``classify train``)."""
    parser.add_argument("--train", required=True, metavar="FILE", help="training file")
    parser.add_argument("--dev", required=True, metavar="FILE", help=f"development file ({dev})")
    parser.add_argument("--test", default=None, metavar="FILE", help=f"test file, {test} (default: none)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help=f"the {out} folder to write: a new or empty folder, or an earlier {out} folder, replaced "
                        "atomically (anything else is refused, never deleted)")


# The flags that name what a command reads: its output may not be, hold or lie inside any of them.
INPUT_FLAGS = ("train", "dev", "test", "model", "options_file", "weight_file", "vectors", "cache_dir", "corpus", "index",
               "word_vectors")


def input_paths(args: argparse.Namespace) -> list[str]:
    """The paths the input flags of ``args`` name (``--model`` only where it is a path: ``default`` is a name;
    a ``--cache-dir`` still to be made counts too, so that training never fills the output folder)."""
    return [value for name in INPUT_FLAGS if isinstance(value := getattr(args, name, None), str)
            and (name != "model" or os.path.exists(value))]


def check_out(args: argparse.Namespace, command: str) -> list[str]:
    """Refuse ``--out`` before any work by the one output policy (``elmokit.io.check_output``); return the
    inputs, for the saver to check again when it writes."""
    from elmokit.io import check_output

    inputs = input_paths(args)
    check_output(args.out, command=command, inputs=inputs)
    return inputs


def add_word_input_arguments(group) -> None:
    """The strong baseline's token input (``elmokit.tasks.word_input``): pretrained vectors and a character CNN."""
    group.add_argument("--word-vectors", default=None, metavar="DIR|FILE",
                       help="initialise the word embedding from this table (run folder of `elmokit static train` or a "
                       "word2vec/GloVe file); its dimension replaces --word-dim, its words join the vocabulary")
    group.add_argument("--freeze-word-vectors", action="store_true",
                       help="keep the pretrained rows fixed (vocabulary: the table's words only; default: fine-tuned)")
    group.add_argument("--char-filters", type=non_negative_int, default=0,
                       help="character CNN filters beside the word embedding, max-pooled (default: 0, none)")
    group.add_argument("--char-width", type=positive_int, default=3, help="character CNN filter width (default: %(default)s)")
    group.add_argument("--char-dim", type=positive_int, default=30, help="character embedding size (default: %(default)s)")


def word_input_options(args: argparse.Namespace) -> dict:
    return dict(word_vectors=args.word_vectors or "", freeze_word_vectors=args.freeze_word_vectors,
                char_filters=args.char_filters, char_width=args.char_width, char_dim=args.char_dim)


def load_word_vectors(args: argparse.Namespace):
    """The ``--word-vectors`` table, or None (a bad file: a one-line error naming file and line)."""
    if not getattr(args, "word_vectors", None):
        return None
    from elmokit.static.vectors import StaticVectors

    return StaticVectors.load(args.word_vectors)


def add_tagger_arguments(parser: argparse.ArgumentParser) -> None:
    """The task model's shape (TaggerConfig) and training options (TrainOptions)."""
    model = parser.add_argument_group("task model")
    model.add_argument("--output", choices=("crf", "softmax"), default=None,
                       help="CRF or per-token softmax (default: crf; --recipe finetune: softmax, BERT §5.3's linear layer)")
    model.add_argument("--scheme", choices=("BIO", "BIOES"), default="BIO",
                       help="NER: train in this label scheme (predictions and scores are always BIO/IOB2)")
    modes = [mode for mode in ELMO_MODES if mode != "none"]  # --no-elmo is the baseline
    model.add_argument("--elmo", choices=modes, default="mix", metavar="MODE",
                       help="how the layers become features: " + "; ".join(f"{m}: {ELMO_MODES[m]}" for m in modes))
    model.add_argument("--elmo-at-output", action="store_true", help="also add ELMo at the BiLSTM output, own mix")
    model.add_argument("--mix-l2", type=non_negative_float, default=0.001, help="lambda of the L2 penalty on the mix weights")
    model.add_argument("--fine-tune", action="store_true", help="fine-tune the biLM (ELMo models only; slow)")
    model.add_argument("--word-dim", type=positive_int, default=100, help="learned word embedding size")
    model.add_argument("--hidden-dim", type=positive_int, default=200, help="BiLSTM hidden size per direction")
    model.add_argument("--dropout", type=probability, default=0.5, help="dropout on word vectors and BiLSTM output")
    model.add_argument("--elmo-dropout", type=probability, default=0.5, help="dropout on ELMo")
    model.add_argument("--no-lowercase", action="store_true", help="keep the case of words for the word embedding")
    model.add_argument("--min-word-count", type=non_negative_int, default=2,
                       help="training words seen fewer times share the unknown-word vector")
    add_word_input_arguments(model)
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=positive_int, default=None,
                       help="at most this many epochs (default: 10; --recipe finetune: 3, BERT §A.3)")
    train.add_argument("--patience", type=positive_int, default=3, help="stop after this many epochs without a better dev score")
    train.add_argument("--batch-size", type=positive_int, default=32, help="sentences per batch")
    train.add_argument("--lr", type=positive_float, default=None,
                       help="Adam learning rate of the task model (default: 0.001; --recipe finetune: AdamW peak rate, 5e-5)")
    train.add_argument("--fine-tune-lr", type=positive_float, default=1e-4, help="Adam learning rate of the biLM (--fine-tune)")
    train.add_argument("--seed", type=non_negative_int, default=0, help="random seed")
    train.add_argument("--max-train-sentences", type=positive_int, default=None, help="use only the first N training sentences")
    train.add_argument("--cache-dir", default=None,
                       help="keep the frozen feature caches here (reused across runs; default: a temporary folder)")
    add_threads_argument(parser)


def tagger_config_changes(args: argparse.Namespace) -> dict:
    return dict(output=args.output or "crf", elmo=args.elmo, elmo_at_output=args.elmo_at_output, mix_l2=args.mix_l2,
                fine_tune=args.fine_tune, word_dim=args.word_dim, hidden_dim=args.hidden_dim, dropout=args.dropout,
                elmo_dropout=args.elmo_dropout, lowercase=not args.no_lowercase, min_word_count=args.min_word_count,
                **word_input_options(args))


def tagger_train_options(args: argparse.Namespace):
    from elmokit.tasks.tagger import TrainOptions

    return TrainOptions(epochs=args.epochs or 10, patience=args.patience, batch_size=args.batch_size,
                        learning_rate=1e-3 if args.lr is None else args.lr,
                        fine_tune_learning_rate=args.fine_tune_lr, seed=args.seed)


def add_classifier_training_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=positive_int, default=10,
                   help="training epochs, the best on dev is kept (default: %(default)s)")
    p.add_argument("--train-batch-size", type=positive_int, default=32, help="sentences per training step (default: %(default)s)")
    p.add_argument("--lr", type=positive_float, default=None,
                   help="Adam learning rate (default: 0.001); the ulmfit recipe's head peak rate (default 0.01); the "
                   "finetune recipe's peak rate (default 5e-5)")
    p.add_argument("--word-dim", type=positive_int, default=50,
                   help="size of the learned word vectors x_k (default: %(default)s)")
    p.add_argument("--hidden-dim", type=positive_int, default=64, help="BiLSTM hidden size per direction (default: %(default)s)")
    p.add_argument("--dropout", type=probability, default=0.5,
                   help="dropout on the BiLSTM input and the pooled vector (default: %(default)s)")
    p.add_argument("--mix-l2", type=non_negative_float, default=0.001,
                   help="lambda of the L2 penalty on the layer weights (default: %(default)s)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--patience", type=positive_int, default=None,
                   help="stop after this many epochs without a better dev accuracy (default: run all --epochs)")
    add_word_input_arguments(p)


def classifier_training_options(args: argparse.Namespace) -> dict:
    return {"epochs": args.epochs, "batch_size": args.train_batch_size, "learning_rate": 1e-3 if args.lr is None else args.lr,
            "word_dim": args.word_dim, "hidden_dim": args.hidden_dim, "dropout": args.dropout,
            "mix_l2": args.mix_l2, "seed": args.seed, "patience": args.patience, **word_input_options(args)}


def refuse_representation_flags(args: argparse.Namespace, recipe: str, what: str, *, need_model: bool = False) -> None:
    """The fine-tuning recipes train the folder --model names itself: the frozen-representation flags make no
    sense with them, and are refused by name (``what``: the kind of folder, for the message)."""
    from elmokit.representation import RepresentationError

    used = [flag for flag, value in (("--options-file", args.options_file), ("--weight-file", args.weight_file),
                                     ("--vectors", getattr(args, "vectors", None)),
                                     ("--no-elmo", getattr(args, "no_elmo", False))) if value]
    if used or (need_model and not args.model):
        raise RepresentationError(f"--recipe {recipe} fine-tunes {what} given by --model"
                                  + (f"; {', '.join(used)} cannot be used with it" if used else ""))
