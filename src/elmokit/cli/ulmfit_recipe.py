"""`elmokit classify train --recipe ulmfit`: ULMFiT's flags and the run (``elmokit.transfer.ulmfit``).

    elmokit classify train --recipe ulmfit --train train.tsv --dev dev.tsv --out runs/ulmfit
    elmokit classify train --recipe ulmfit --model runs/my_lm --lm-finetune-epochs 0 --directions forward ...

The language model is ``--model`` (default: the shipped default model), which must carry the LM
head (``lm.safetensors`` + ``vocab.txt``, written by ``elmokit train``). Defaults are the paper's
(Howard & Ruder 2018): ``--lr`` 0.01 for the classifier (0.004 for LM fine-tuning), decay 2.6,
cut_frac 0.1, ratio 32, gradual unfreezing, forward + backward averaged, head of 50 units.
Not a subcommand: helpers for ``cli/classify.py``, as ``cli/arguments.py`` is.
"""

from __future__ import annotations

import argparse
import logging

from elmokit.cli.arguments import input_paths, refuse_representation_flags
from elmokit.cli.common import non_negative_int, positive_float, positive_int, probability

ULMFIT_LR = 0.01  # the paper's classifier rate (--lr's default with this recipe)


def add_ulmfit_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--recipe ulmfit (Howard & Ruder 2018; defaults are the paper's)")
    group.add_argument("--lm-finetune-epochs", type=non_negative_int, default=10,
                       help="epochs of target-task LM fine-tuning on the training sentences; 0 skips it (default: %(default)s)")
    group.add_argument("--lm-lr", type=positive_float, default=0.004,
                       help="peak rate of LM fine-tuning (its top group, the softmax) (default: %(default)s)")
    group.add_argument("--lm-samples", type=non_negative_int, default=1024,
                       help="sampled-softmax negatives per LM fine-tuning step; 0: the full softmax (default: %(default)s)")
    group.add_argument("--lr-decay", type=positive_float, default=2.6,
                       help="discriminative rates: each lower layer group's rate is the one above / this; 1 disables "
                       "(default: %(default)s)")
    group.add_argument("--schedule", choices=("stlr", "constant"), default="stlr",
                       help="slanted triangular rates (eq. 3) or constant peak rates (default: %(default)s)")
    group.add_argument("--cut-frac", type=probability, default=0.1,
                       help="STLR: fraction of the steps spent increasing the rate (default: %(default)s)")
    group.add_argument("--ratio", type=positive_float, default=32.0,
                       help="STLR: how much smaller the lowest rate is than the peak (default: %(default)s)")
    group.add_argument("--unfreeze", choices=("gradual", "all"), default="gradual",
                       help="gradual: epoch 1 trains the head, each later epoch one more layer group from the top; "
                       "all: everything from the start (default: %(default)s)")
    group.add_argument("--directions", choices=("both", "forward", "backward"), default="both",
                       help="both: a forward and a backward classifier, their probabilities averaged (default: %(default)s)")
    group.add_argument("--head-dim", type=positive_int, default=50,
                       help="hidden units of the first linear block (default: %(default)s)")
    group.add_argument("--head-dropouts", type=probability, nargs=2, default=[0.4, 0.1], metavar=("P1", "P2"),
                       help="dropout before the first and the second linear layer (default: 0.4 0.1)")
    group.add_argument("--from-scratch", action="store_true",
                       help="a randomly initialised LM of --model's shape and vocabulary instead of its weights (the "
                       "paper's 'without pretraining' row)")


def run_ulmfit_train(args: argparse.Namespace, data: dict) -> int:
    """Train, report dev (and test) accuracy, save to ``--out``. ``data``: name -> (sentences, labels)."""
    import torch

    from elmokit.lm import LanguageModel, init_like_bilm_tf
    from elmokit.transfer.ulmfit import ClassifierOptions, LMFineTuneOptions, train_ulmfit

    refuse_representation_flags(args, "ulmfit", "a language model folder")
    lm, vocabulary, _ = LanguageModel.load(args.model or "default")
    if args.from_scratch:
        scratch = LanguageModel(lm.bilm.config, len(vocabulary), bos_id=vocabulary.bos, eos_id=vocabulary.eos)
        init_like_bilm_tf(scratch, torch.Generator().manual_seed(args.seed))
        lm = scratch.eval()
    rate = ULMFIT_LR if args.lr is None else args.lr  # --lr's default is the recipe's
    common = dict(decay=args.lr_decay, schedule=args.schedule, cut_frac=args.cut_frac, ratio=args.ratio, seed=args.seed)
    log = logging.getLogger("elmokit.classify").info
    classifier, history = train_ulmfit(
        data["train"], data["dev"], lm, vocabulary,
        lm_options=LMFineTuneOptions(epochs=args.lm_finetune_epochs, batch_size=args.train_batch_size,
                                     learning_rate=args.lm_lr, samples=args.lm_samples, **common),
        classifier_options=ClassifierOptions(epochs=args.epochs, batch_size=args.train_batch_size, learning_rate=rate,
                                             unfreeze=args.unfreeze, **common),
        directions=("forward", "backward") if args.directions == "both" else (args.directions,),
        head_dim=args.head_dim, head_dropouts=tuple(args.head_dropouts), log=log)
    print(f"dev accuracy {history['dev_accuracy']:.2f}")
    if "test" in data:
        print(f"test accuracy {classifier.accuracy(*data['test']):.2f}")
    classifier.save(args.out, inputs=input_paths(args))
    print(f"saved {args.out}")
    return 0
