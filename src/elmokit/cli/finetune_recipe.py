"""`elmokit classify train --recipe finetune`: GPT's and BERT's fine-tuning of a transformer folder
(``elmokit.transfer.finetune``).

    elmokit classify train --recipe finetune --model runs/bert --train train.tsv --dev dev.tsv --out runs/bert-clf
    elmokit classify train --recipe finetune --model runs/gpt --aux-lm --train train.tsv --dev dev.tsv --out runs/gpt-clf

``--model`` is a folder written by ``elmokit pretrain`` or any local HF checkpoint folder with its
tokenizer. Encoders classify from [CLS] (BERT §4.1), left-to-right models from the last token, with
GPT's auxiliary LM loss (eq. 5, lambda 0.5) when ``--aux-lm`` is given. Defaults are BERT's §A.3 where
this recipe's flags are the shared ones: ``--lr`` 5e-5, warm-up 10%, weight decay 0.01; ``--epochs``
and ``--train-batch-size`` are the shared flags. Not a subcommand: helpers for ``cli/classify.py``.
"""

from __future__ import annotations

import argparse
import logging

from elmokit.cli.arguments import input_paths, refuse_representation_flags
from elmokit.cli.common import non_negative_float, probability

FINETUNE_LR = 5e-5  # BERT's fine-tuning rate (--lr's default with this recipe)


def add_finetune_arguments(parser: argparse.ArgumentParser, *, aux_lm: bool = True,
                           title: str = "--recipe finetune (GPT eq. 5, BERT §4.1/§A.3; defaults are BERT's)"):
    """The fine-tuning flags (``aux_lm=False``: without GPT's auxiliary LM, for tagging); returns the group."""
    group = parser.add_argument_group(title)
    if aux_lm:
        group.add_argument("--aux-lm", action="store_true",
                           help="add GPT's auxiliary language-model loss to the task loss (left-to-right models only)")
        group.add_argument("--aux-lm-weight", type=non_negative_float, default=0.5,
                           help="lambda of the auxiliary LM loss, L3 = L2 + lambda * L1 (default: %(default)s)")
    group.add_argument("--warmup", type=probability, default=0.1,
                       help="share of the steps with a linearly rising rate before the linear decay (default: %(default)s)")
    group.add_argument("--weight-decay", type=non_negative_float, default=0.01,
                       help="AdamW weight decay, not applied to biases and layer norms (default: %(default)s)")
    group.add_argument("--head-dropout", type=probability, default=0.1,
                       help="dropout before the classification layer (default: %(default)s)")
    return group


def run_finetune_train(args: argparse.Namespace, data: dict) -> int:
    """Fine-tune, report dev (and test) accuracy, save to ``--out``. ``data``: name -> (sentences, labels)."""
    from elmokit.transfer.finetune import FineTuneOptions, finetune_classifier

    refuse_representation_flags(args, "finetune", "a transformer folder", need_model=True)
    options = FineTuneOptions(epochs=args.epochs, batch_size=args.train_batch_size,
                              learning_rate=FINETUNE_LR if args.lr is None else args.lr,
                              weight_decay=args.weight_decay, warmup=args.warmup, dropout=args.head_dropout,
                              aux_lm=args.aux_lm, aux_lm_weight=args.aux_lm_weight, seed=args.seed)
    classifier = finetune_classifier(args.model, data["train"], data["dev"], options,
                                     log=logging.getLogger("elmokit.classify").info)
    print(f"dev accuracy {max(h['dev_accuracy'] for h in classifier.history):.2f}")
    if "test" in data:
        print(f"test accuracy {classifier.accuracy(*data['test']):.2f}")
    classifier.save(args.out, inputs=input_paths(args))
    print(f"saved {args.out}")
    return 0
