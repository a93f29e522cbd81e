"""`elmokit tag`: train a BiLSTM-CRF sequence tagger with ELMo (or any representation), and predict.

    elmokit tag train --train en_ewt-ud-train.conllu --dev en_ewt-ud-dev.conllu --format conllu --out runs/pos
    elmokit tag train --train train.txt --dev dev.txt --format conll --token-prefix en: --model default --out runs/ner
    elmokit tag train --recipe finetune --model runs/bert/model --train train.txt --dev dev.txt --format conll --out runs/bert-ner
    elmokit tag predict --tagger runs/ner --input sentences.txt --out tagged.conll

The representation is ``--model`` (an ELMo model, default 'default'), ``--options-file`` +
``--weight-file``, ``--vectors`` (a static table), or ``--no-elmo`` (the baseline tagger).
``--recipe finetune`` instead trains the transformer folder ``--model`` names end to end with a linear
layer on each word's first sub-token (BERT §5.3; ``cli/finetune_tag_recipe.py``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from elmokit.cli.arguments import (
    add_representation_arguments,
    add_tagger_arguments,
    add_task_file_arguments,
    check_out,
    load_word_vectors,
    tagger_config_changes,
    tagger_train_options,
)
from elmokit.cli.common import (
    add_threads_argument,
    add_tokenizer_argument,
    apply_threads,
    counted,
    load_representation,
    positive_int,
)
from elmokit.cli.finetune_tag_recipe import add_recipe_arguments, run_tag_train, save_and_report


def register(subparsers) -> None:
    parser = subparsers.add_parser("tag", help="sequence tagging (POS, NER): train a BiLSTM-CRF with ELMo, predict")
    sub = parser.add_subparsers(dest="tag_command", metavar="ACTION")
    _register_train(sub)
    _register_predict(sub)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


# ------------------------------------------------------------------------------------ train


def _register_train(sub) -> None:
    p = sub.add_parser("train", help="train a tagger, early-stopped on dev; writes a tagger folder",
                       description="Metrics: token accuracy (POS, --format conllu) or span F1 with seqeval in "
                       "strict mode, IOB2 (NER, --format conll).")
    add_task_file_arguments(p, dev="early stopping", test="scored once with the best model", out="tagger")
    p.add_argument("--format", choices=("conllu", "conll"), required=True,
                   help="conllu: UD CoNLL-U, UPOS labels (POS); conll: token ... label columns, BIO/IOB1 (NER)")
    p.add_argument("--column", choices=("upos", "xpos"), default="upos", help="CoNLL-U label column")
    p.add_argument("--token-prefix", default="", help="strip this prefix from tokens (WikiANN: 'en:')")
    p.add_argument("--task", choices=("pos", "ner"), default=None,
                   help="metric: pos = accuracy, ner = span F1 (default: pos for conllu, ner for conll)")
    add_representation_arguments(p, no_elmo=True)
    add_tagger_arguments(p)
    add_recipe_arguments(p)
    p.set_defaults(func=_train)


def _read(args, path):
    from elmokit.tasks.data import read_conll, read_conllu

    if args.format == "conllu":
        return read_conllu(path, column=args.column)
    return read_conll(path, token_prefix=args.token_prefix)


def _train(args: argparse.Namespace) -> int:
    from elmokit.tasks.tagger import TaggerConfig, train_tagger

    apply_threads(args)
    check_out(args, "tag train")  # before any work
    task = args.task or ("pos" if args.format == "conllu" else "ner")
    train, dev = _read(args, args.train).subset(args.max_train_sentences), _read(args, args.dev)
    test = _read(args, args.test) if args.test else None
    if args.recipe == "finetune":
        return run_tag_train(args, task, train, dev, test)
    representation, spec = load_representation(args)
    changes = tagger_config_changes(args)
    if representation is None:
        changes.update(elmo="none", elmo_at_output=False)
    config = TaggerConfig(
        task=task, scheme=args.scheme if task == "ner" else None,
        elmo_layers=representation.num_layers if representation else 0,
        elmo_dim=representation.dim if representation else 0,
        representation=spec, representation_name=representation.name if representation else "", **changes)
    for corpus in (train, dev, test):
        for note in (corpus.notes if corpus else []):
            logging.info("%s: %s", corpus.path, note)
    if args.verbose:  # the resolved configuration, only when asked for
        print(json.dumps({"config": config.to_dict(), "train": args.train, "train_sentences": len(train)}, indent=2),
              file=sys.stderr)
    tagger = train_tagger(train, dev, config, representation=representation, options=tagger_train_options(args),
                          cache_dir=args.cache_dir, word_table=load_word_vectors(args))
    save_and_report(tagger, args, task, test)
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
    add_tokenizer_argument(p, default="whitespace", help_prefix="--format text: how lines are cut: ")
    p.add_argument("--out", required=True, help="output file (written atomically)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="sentences per batch")
    add_threads_argument(p)
    p.set_defaults(func=_predict)


def _predict(args: argparse.Namespace) -> int:
    from elmokit.io import check_output_file
    from elmokit.tasks.data import read_conll, read_conllu, read_text, write_conll
    from elmokit.tasks.tagger import SequenceTagger, main_metric, score
    from elmokit.text.corpus import Tokenizer
    from elmokit.transfer.finetune_tagger import FineTunedTagger, is_finetuned_tagger_folder

    apply_threads(args)
    check_output_file(args.out, inputs=[args.input])  # before any work
    if is_finetuned_tagger_folder(args.tagger):  # --recipe finetune: the transformer reads the words itself
        tagger = FineTunedTagger.load(args.tagger)
        task = tagger.task
    else:
        tagger = SequenceTagger.load(args.tagger)
        task = tagger.config.task
    gold = None
    if args.format == "text":
        sentences = read_text(args.input, Tokenizer(kind=args.tokenizer))
    else:
        gold = read_conllu(args.input) if args.format == "conllu" else read_conll(args.input, token_prefix=args.token_prefix)
        sentences = gold.sentences
    predictions = tagger.predict(sentences, batch_size=args.batch_size)
    write_conll(args.out, sentences, predictions)
    print(f"{counted(len(sentences), 'sentence')} tagged, written to {args.out}")
    if gold is not None:
        result = score(gold.labels, predictions, task)
        name = "span F1 (seqeval strict, IOB2)" if task == "ner" else "token accuracy"
        print(f"{name}: {100 * main_metric(result, task):.2f}")
    return 0
