"""`elmokit cove train|bleu`: train the CoVe MT-LSTM (McCann et al. 2017) and score its translations.

    elmokit static train --algo glove --corpus 'gutenberg/train.00.txt.xz' --out runs/glove
    elmokit cove train --src bible/en_kjv.tsv.xz --tgt bible/de_elberfelder1905.tsv.xz --vectors runs/glove \\
        --out runs/cove --epochs 4
    elmokit cove bleu --model runs/cove --split test

Verse files (``BB.CCC.VVV<TAB>text``) are split by whole books (``--valid-books``, ``--test-books``);
plain line-aligned files train whole (``--valid-src/--valid-tgt`` for validation). The trained encoder
is a representation: ``{"kind": "cove", "path": "runs/cove"}`` (``"mode": "glove_cove"`` for [GloVe; CoVe]).
"""

from __future__ import annotations

import argparse
import json
import sys

from elmokit.cli.common import (
    add_threads_argument,
    apply_threads,
    dataclass_defaults,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
)
from elmokit.cli.training_common import STEP_LOOP_FLAGS, add_config_flags, add_run_folder_arguments
from elmokit.errors import InputNotFound, UserError
from elmokit.transfer.cove_presets import PRESETS

# flag -> CoveTrainingConfig field; not given (None): the config's default
TRAINING_FLAGS = {
    **STEP_LOOP_FLAGS,
    "batch_size": ("--batch-size", positive_int, "sentence pairs per step"),
    "lr": ("--lr", positive_float, "Adam learning rate"),
    "clip_norm": ("--clip-norm", positive_float, "gradient norm clip"),
    "max_length": ("--max-length", positive_int, "leave out pairs with a longer side"),
    "target_vocab_size": ("--target-vocab-size", positive_int, "target words kept"),
    "target_min_count": ("--target-min-count", positive_int, "target words seen fewer times are <unk>"),
    "seed": ("--seed", non_negative_int, "initial weights, batch order, dropout"),
    "valid_every": ("--valid-every", positive_int, "steps between validation losses"),
}


def register(subparsers) -> None:
    parser = subparsers.add_parser("cove", help="CoVe: train a translation encoder (MT-LSTM) and score it with BLEU")
    sub = parser.add_subparsers(dest="cove_command", metavar="ACTION")
    _register_train(sub)
    _register_bleu(sub)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _book_list(text: str) -> list[int]:
    try:
        books = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of book numbers") from None
    if any(not 1 <= b <= 99 for b in books):
        raise argparse.ArgumentTypeError(f"book numbers are 1..99, got {text!r}")
    return books


def _register_train(sub) -> None:
    p = sub.add_parser("train", help="train the MT model; checkpoints, exact --resume, BLEU on held-out books at the end",
                       description="Trains a 2-layer biLSTM encoder over frozen word vectors with an attentional LSTM "
                       "decoder (McCann et al. 2017) on line-aligned parallel files.")
    p.add_argument("--src", default=None, help="source-language file (verse TSV or plain lines; .xz/.gz ok); "
                   "on --resume default: the run's")
    p.add_argument("--tgt", default=None, help="target-language file, line-aligned with --src (on --resume default: the run's)")
    p.add_argument("--vectors", default=None, help="frozen source word vectors: a folder of `elmokit static train` or a "
                   "word2vec text/binary file (on --resume default: the run's)")
    add_run_folder_arguments(p)
    p.add_argument("--valid-src", default=None, help="plain files only: validation source file (default: none)")
    p.add_argument("--valid-tgt", default=None, help="plain files only: validation target file (default: none)")
    p.add_argument("--valid-books", type=_book_list, default=[45], help="verse files: books held out for validation "
                   "(default: 45, Romans)")
    p.add_argument("--test-books", type=_book_list, default=[44], help="verse files: books held out for test (default: 44, Acts)")
    p.add_argument("--max-vectors", type=positive_int, default=None,
                   help="read only the first N words of --vectors (default: all)")
    m = p.add_argument_group("model")
    m.add_argument("--preset", choices=tuple(PRESETS), default="small",
                   help="sizes: paper (H 300, D 300), small (H 128, D 256), tiny (default: %(default)s)")
    m.add_argument("--hidden-dim", type=positive_int, default=None, help="encoder LSTM size per direction (default: preset's)")
    m.add_argument("--decoder-dim", type=positive_int, default=None, help="decoder LSTM size (default: preset's)")
    m.add_argument("--target-embedding-dim", type=positive_int, default=None,
                   help="target word embedding size (default: preset's)")
    m.add_argument("--dropout", type=probability, default=None, help="dropout (default: preset's)")
    t = p.add_argument_group("training (give --max-steps or --epochs)")
    add_config_flags(t, TRAINING_FLAGS, dataclass_defaults("elmokit.transfer.cove_train", "CoveTrainingConfig"))
    t.add_argument("--keep-target-case", action="store_true", help="do not lowercase the target side (default: lowercase)")
    t.add_argument("--no-bleu", action="store_true", help="skip BLEU on the held-out splits at the end")
    add_threads_argument(p)
    p.set_defaults(func=run_train)


def _register_bleu(sub) -> None:
    p = sub.add_parser("bleu", help="greedy-translate held-out text and score it with sacrebleu",
                       description="Scores a trained model: the held-out books of its run (--split), or any "
                       "line-aligned --src/--tgt pair.")
    p.add_argument("--model", required=True, help="run folder of `elmokit cove train` (or its model/ folder)")
    p.add_argument("--split", choices=("valid", "test", "both"), default="both",
                   help="held-out books of the run to score (default: %(default)s)")
    p.add_argument("--src", default=None, help="score this source file instead (plain lines, with --tgt)")
    p.add_argument("--tgt", default=None, help="reference translations of --src")
    p.add_argument("--batch-size", type=positive_int, default=64, help="sentences per decoding batch (default: %(default)s)")
    p.add_argument("--out", default=None, help="write the result as JSON here (default: print only)")
    add_threads_argument(p)
    p.set_defaults(func=run_bleu)


def run_train(args: argparse.Namespace) -> int:

    from elmokit.engine.run_folder import RunFolder
    from elmokit.transfer.cove import PRESETS, CoveConfig
    from elmokit.transfer.cove_train import RUN_KIND, CoveTrainingConfig, train_cove


    apply_threads(args)
    folder = RunFolder.open(args.out, kind=RUN_KIND, resume=args.resume)  # refused here when it does not fit
    saved = (folder.record or {}).get("data", {}) if args.resume else {}
    src, tgt = args.src or saved.get("src"), args.tgt or saved.get("tgt")
    vectors = args.vectors or saved.get("vectors", {}).get("path")
    if not (src and tgt and vectors):
        raise UserError("give --src, --tgt and --vectors (or --resume a run folder that has them)")
    sizes = {**PRESETS[args.preset], **{k: v for k, v in (("hidden_dim", args.hidden_dim), ("decoder_dim", args.decoder_dim),
             ("target_embedding_dim", args.target_embedding_dim), ("dropout", args.dropout)) if v is not None}}
    given = {name: getattr(args, name) for name in TRAINING_FLAGS if getattr(args, name) is not None}
    training = CoveTrainingConfig(**given, lowercase_target=not args.keep_target_case, valid_books=tuple(args.valid_books),
                                  test_books=tuple(args.test_books))
    result = train_cove(args.out, src=src, tgt=tgt, vectors=vectors, config=CoveConfig(**sizes), training=training,
                        valid_src=args.valid_src or saved.get("valid_src"), valid_tgt=args.valid_tgt or saved.get("valid_tgt"),
                        max_vectors=args.max_vectors, resume=args.resume, bleu=not args.no_bleu,
                        command="elmokit " + " ".join(getattr(args, "argv", sys.argv[1:])), progress=True, folder=folder)
    print(f"trained {result.step} steps in {result.elapsed_s / 60:.1f} min; model in {result.model_dir}")
    for name, value in (result.bleu or {}).items():
        print(f"{name} BLEU {value['bleu']:.2f} ({value['sentences']} sentences, greedy)")
    return 0


def run_bleu(args: argparse.Namespace) -> int:
    from pathlib import Path

    from elmokit.io import write_json
    from elmokit.transfer.cove import load_cove_model
    from elmokit.transfer.cove_train import CoveTrainingConfig, evaluate_bleu, read_parallel

    apply_threads(args)
    model, _, _ = load_cove_model(args.model)
    lowercase_source = model.config.source_lowercase
    if args.src or args.tgt:
        if not (args.src and args.tgt):
            raise UserError("--src and --tgt go together")
        run = Path(args.model) if (Path(args.model) / "training.json").is_file() else Path(args.model).parent
        lower_target = True
        if (run / "training.json").is_file():
            lower_target = json.loads((run / "training.json").read_text(encoding="utf-8"))["training"]["lowercase_target"]
        splits = {"given": read_parallel(args.src, args.tgt, source_lowercase=lowercase_source,
                                         target_lowercase=lower_target)["train"]}
    else:
        run = Path(args.model) if (Path(args.model) / "training.json").is_file() else Path(args.model).parent
        if not (run / "training.json").is_file():
            raise InputNotFound(f"{args.model}: no training.json to say which books were held out; give --src and --tgt")
        record = json.loads((run / "training.json").read_text(encoding="utf-8"))
        training = CoveTrainingConfig.from_dict(record["training"])
        data = record["data"]
        if data["format"] != "verses":
            raise UserError(f"{run}: trained on plain files, so no books were held out; give --src and --tgt")
        all_splits = read_parallel(data["src"], data["tgt"], source_lowercase=lowercase_source,
                                   target_lowercase=training.lowercase_target, valid_books=training.valid_books,
                                   test_books=training.test_books)
        wanted = ("valid", "test") if args.split == "both" else (args.split,)
        splits = {name: all_splits[name] for name in wanted}
    results = evaluate_bleu(args.model, splits, batch_size=args.batch_size)
    for name, value in results.items():
        print(f"{name} BLEU {value['bleu']:.2f} ({value['sentences']} sentences, greedy; precisions {value['precisions']}, "
              f"BP {value['bp']})")
    if args.out:
        write_json(args.out, results)
    return 0
