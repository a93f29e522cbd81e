"""`elmokit tag train --recipe finetune` and `elmokit eval ner|pos --recipe finetune`: BERT's fine-tuning of
a transformer folder for tagging (``elmokit.transfer.finetune_tagger``).

    elmokit tag train --recipe finetune --model runs/bert/model --train train.txt --dev dev.txt --format conll --out runs/bert-ner
    elmokit eval ner --recipe finetune --model runs/bert/model --datasets conll2003 --out ner.json

``--model`` is a folder written by ``elmokit pretrain`` or any local HF BERT-family folder with its
tokenizer. The whole transformer is trained with a linear layer on each word's first sub-token (BERT
§5.3); ``--output`` is softmax by default (the paper's, no CRF), ``--output crf`` puts the tagger's CRF
on top. Defaults are BERT's §A.3: ``--lr`` 5e-5 (AdamW), ``--batch-size`` 32, ``--epochs`` 3, warm-up
10% then linear decay, weight decay 0.01, dropout 0.1 before the output layer. The flags of the frozen
representation and of the feature-based BiLSTM tagger make no sense here and are refused by name.
Not a subcommand: helpers for ``cli/tag.py`` and ``cli/eval.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from elmokit.cli.arguments import add_tagger_arguments, input_paths, refuse_representation_flags
from elmokit.cli.finetune_recipe import FINETUNE_LR, add_finetune_arguments
from elmokit.errors import UserError

FINETUNE_EPOCHS = 3  # BERT §A.3 (2, 3 or 4 recommended)
# The feature-based tagger's flags (dest names), refused with --recipe finetune when set to anything but
# their default: the BiLSTM-CRF's shape, the frozen features, the biLM's fine-tuning.
FEATURE_ONLY = ("elmo", "elmo_at_output", "mix_l2", "fine_tune", "word_dim", "hidden_dim", "dropout", "elmo_dropout",
                "no_lowercase", "min_word_count", "fine_tune_lr", "cache_dir", "word_vectors", "freeze_word_vectors",
                "char_filters", "char_width", "char_dim")


def add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """``--recipe`` and the fine-tuning flags (after ``add_tagger_arguments``)."""
    group = add_finetune_arguments(parser, aux_lm=False,
                                   title="--recipe finetune (BERT §5.3, §A.3; defaults are BERT's)")
    group.add_argument("--recipe", choices=("feature", "finetune"), default="feature",
                       help="feature: a frozen representation's features into the BiLSTM-CRF (default); finetune: "
                       "train the transformer folder --model names end to end with a linear layer on each word's "
                       "first sub-token (BERT §5.3)")


def _feature_defaults() -> dict:
    parser = argparse.ArgumentParser(add_help=False)
    add_tagger_arguments(parser)
    return vars(parser.parse_args([]))


def refuse_feature_flags(args: argparse.Namespace) -> None:
    """Refuse, by flag name, what only the frozen-representation tagger uses (UserError)."""
    refuse_representation_flags(args, "finetune", "a transformer folder", need_model=True)
    defaults = _feature_defaults()
    used = ["--" + dest.replace("_", "-") for dest in FEATURE_ONLY
            if hasattr(args, dest) and getattr(args, dest) != defaults[dest]]
    if used:
        raise UserError(f"--recipe finetune trains the transformer with a linear layer, not the feature-based "
                        f"BiLSTM-CRF: {', '.join(used)} cannot be used with it")


def finetune_settings(args: argparse.Namespace) -> dict:
    """Keyword arguments of ``finetune_tagger`` (less the data) from the flags."""
    from elmokit.transfer.finetune import FineTuneOptions

    options = FineTuneOptions(epochs=args.epochs or FINETUNE_EPOCHS, batch_size=args.batch_size,
                              learning_rate=FINETUNE_LR if args.lr is None else args.lr, weight_decay=args.weight_decay,
                              warmup=args.warmup, dropout=args.head_dropout, seed=args.seed)
    return {"output": args.output or "softmax", "options": options, "patience": args.patience}


def run_tag_train(args: argparse.Namespace, task: str, train, dev, test) -> int:
    """``tag train --recipe finetune``: fine-tune, report dev (and test), save to ``--out``."""
    from elmokit.transfer.finetune_tagger import finetune_tagger

    refuse_feature_flags(args)
    settings = finetune_settings(args)
    if args.verbose:  # the resolved settings, only when asked for
        print(json.dumps({"recipe": "finetune", "model": args.model, "task": task, "output": settings["output"],
                          "train": args.train, "train_sentences": len(train)}, indent=2), file=sys.stderr)
    tagger = finetune_tagger(args.model, train, dev, task=task, scheme=args.scheme, **settings,
                             log=logging.getLogger("elmokit.tag").info)
    save_and_report(tagger, args, task, test)
    print(f"tagger written to {args.out}")
    return 0


def save_and_report(tagger, args: argparse.Namespace, task: str, test) -> None:
    """Either recipe's trained tagger: its best dev epoch's scores (and the test set's) recorded with the
    command, the folder saved to ``--out``, the scores printed."""
    from elmokit.tasks.tagger import main_metric

    results = {"dev": tagger.history[tagger.best_epoch - 1]["dev"]}
    if test is not None:
        results["test"] = tagger.evaluate(test)
    tagger.results = {"command": ["elmokit"] + list(getattr(args, "argv", [])), **results}
    tagger.save(args.out, inputs=input_paths(args))
    name = "span F1 (seqeval strict, IOB2)" if task == "ner" else "token accuracy"
    for split, result in results.items():
        print(f"{split}: {name} {100 * main_metric(result, task):.2f}")


def run_eval(args: argparse.Namespace) -> list[dict]:
    """``eval ner|pos --recipe finetune``: the benchmark's result rows (UserError on refused flags)."""
    from elmokit.evaluation.tagging import run_finetune_benchmark

    refuse_feature_flags(args)
    if args.task == "cws":
        raise UserError("--recipe finetune tags words (NER, POS); word segmentation is not supported")
    return run_finetune_benchmark(
        [d for d in args.datasets.split(",") if d], args.model, scheme=args.scheme, **finetune_settings(args),
        max_train_sentences=args.max_train_sentences, max_eval_sentences=args.max_eval_sentences,
        max_dev_sentences=args.max_dev_sentences, data_dir=args.data_dir)
