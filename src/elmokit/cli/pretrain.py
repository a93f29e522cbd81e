"""`elmokit pretrain`: pretrain a transformer objective (BERT, RoBERTa, WWM, SpanBERT, GPT, GPT-2, ...) on a corpus.

    elmokit pretrain --objective bert --corpus 'data/train.*.txt.xz' --out runs/bert --preset small --max-steps 20000
    torchrun --nproc_per_node 2 -m elmokit.cli.main pretrain ...   # the same command, 2 ranks
    elmokit pretrain --out runs/bert --resume                         # continue exactly where it stopped
    elmokit pretrain --objective gpt2 --corpus ... --out runs/g --max-seconds 600 --warmup-steps 20 --threads 1
                                                                      # a compute budget: 600 CPU-seconds of steps

The library does the work (``elmokit.pretraining.run.pretrain``); this module maps flags onto a
``PretrainConfig``. With --resume every setting not given is the run's.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from elmokit.cli.common import (
    CORES_THREADS_HELP,
    apply_threads,
    dataclass_defaults,
    non_negative_int,
    positive_float,
    positive_int,
)
from elmokit.cli.training_common import STEP_LOOP_FLAGS, SettingError, add_config_flags, add_run_folder_arguments, interrupted
from elmokit.pretraining.names import OBJECTIVE_NAMES

# flag -> PretrainConfig field (flags default to None: "not given", so --resume can tell); the help
# shows PretrainConfig's default.
PRETRAIN_FLAGS = {
    "preset": ("--preset", str, "model size from models.PRESETS: tiny (2 x 32), mini (2 x 128), small (4 x 256)"),
    **STEP_LOOP_FLAGS,
    "max_seconds": ("--max-seconds", positive_float,
                    "stop at the first step boundary after this many CPU-seconds of training steps (process CPU time "
                    "of masking, forward, backward, update; summed over resumes; recorded as 'budget' in "
                    "training.json); alone, the learning rate stays constant after --warmup-steps"),
    "seed": ("--seed", non_negative_int, "seed of the weights, data order, masks and dropout"),
    "batch_size": ("--batch-size", positive_int, "examples per global batch"),
    "lr": ("--lr", positive_float, "peak AdamW learning rate"),
    "warmup_steps": ("--warmup-steps", positive_int, "linear warmup steps (none: 1%% of --max-steps)"),
    "weight_decay": ("--weight-decay", float, "AdamW decoupled weight decay (not on biases and LayerNorm)"),
    "beta2": ("--beta2", float, "AdamW beta2 (BERT 0.999, RoBERTa 0.98)"),
    "clip_norm": ("--clip-norm", positive_float, "clip the global gradient norm to this"),
    "max_tokens": ("--max-tokens", positive_int, "longest example in subword tokens (none: the preset's positions)"),
    "dropout": ("--dropout", float, "dropout everywhere (none: the preset's)"),
    "tokenizer_dir": ("--tokenizer", str, "a tokenizer folder to use instead of training one on the corpus"),
    "vocab_size": ("--vocab-size", positive_int, "subword vocabulary size of the tokenizer trained on the corpus"),
    "tokenizer_lines": ("--tokenizer-lines", positive_int, "train the tokenizer on the first N sentences of the corpus"),
    "ernie_language": ("--ernie-language", str, "ernie: en (words, POS-chunk phrases, NER/capitalised entities) or zh "
                       "(characters, the segmented corpus's words of 2+ characters, cached entities)"),
    "ernie_stages": ("--ernie-stages", str, "ernie: the stages run, comma-separated, of basic,phrase,entity in that "
                     "order (basic alone: character / whole-word masking throughout)"),
    "ernie_stage_batches": ("--ernie-stage-batches", positive_int,
                            "ernie: batches of each stage but the last (none: thirds of --max-steps, else 1000)"),
    "ernie_entities": ("--ernie-entities", str, "ernie: en: a NER tagger folder; zh: an entity cache (JSON lines of "
                       "knowledge_zh.tag_entity_cache; benchmarks/zh_ernie.py corpus writes one)"),
    "ernie2_tasks": ("--ernie2-tasks", str, "ernie2: the tasks, comma-separated, in order of introduction, of "
                     "km,cap,tdr,reorder,distance,discourse (knowledge masking, capitalization, token-document relation, "
                     "sentence reordering, sentence distance, discourse relation: marker-opened sentences)"),
    "ernie2_schedule": ("--ernie2-schedule", str, "ernie2: continual (tasks added in stages) or multitask (all tasks "
                        "from the start: the ablation)"),
    "ernie2_task_iterations": ("--ernie2-task-iterations", positive_int,
                               "ernie2: training iterations (batches) of each task, N (none: --max-steps / tasks)"),
    "ernie2_reorder_pieces": ("--ernie2-reorder-pieces", positive_int,
                              "ernie2: sentence reordering cuts a segment into 1..k pieces (sum of n! classes; k <= 4)"),
    "dlm_mix": ("--dlm-mix", str, "ernie-dlm: source weights NAME=W,...: text (the corpus), dialogue, or a --dlm-text pool"),
    "dlm_dialogues": ("--dlm-dialogues", str, "ernie-dlm: novels (glob) to extract quoted dialogue from (none: the corpus)"),
    "dlm_text": ("--dlm-text", str, "ernie-dlm: extra text pools NAME=GLOB,... held in memory (e.g. bible=FILE)"),
    "dlm_fake_rate": ("--dlm-fake-rate", float, "ernie-dlm: share of dialogue sequences with one turn replaced (fake)"),
    "ernie_thu_wordnet": ("--ernie-thu-wordnet", str, "ernie-thu: WordNet 3.0's database folder or wordnet-3.0.tar.xz"),
    "ernie_thu_transe": ("--ernie-thu-transe", str, "ernie-thu: TransE vectors of that WordNet's synsets (a folder of "
                         "knowledge_graph.train_wordnet_transe)"),
    "ernie_thu_mentions": ("--ernie-thu-mentions", str, "ernie-thu: SemCor's gold mentions (JSON lines of "
                           "knowledge_graph.write_semcor_corpus); other text gets the first-sense linker"),
    "ernie_thu_k_layers": ("--ernie-thu-k-layers", positive_int, "ernie-thu: K-Encoder layers on top (none: half the layers)"),
    "ernie_thu_fusion": ("--ernie-thu-fusion", str, "ernie-thu: paper (eq. 5: GELU outputs) or residual (the authors' "
                         "code: residual + LayerNorm)"),
}


def register(subparsers) -> None:
    defaults = dataclass_defaults("elmokit.pretraining.run", "PretrainConfig")  # without importing torch
    parser = subparsers.add_parser(
        "pretrain",
        help="pretrain a transformer (BERT, RoBERTa, WWM, SpanBERT, ERNIE, XLNet, UniLM, MASS, GPT, GPT-2) on a corpus "
        "(resumable, torchrun)",
        description="Pretrain a transformers model with one of the objectives that followed ELMo, on the training "
        "loop `elmokit train` uses. The run folder --out records the command, the resolved config, the tokenizer, "
        "metrics (metrics.jsonl), checkpoints, and at the end a standard HF model folder (--out/model) that "
        "`--model DIR` reads. Objectives: " + ", ".join(OBJECTIVE_NAMES) + " (docs/pretraining.md describes each).",
    )
    parser.add_argument("--objective", choices=sorted(OBJECTIVE_NAMES), default=None,
                        help="the pretraining objective (default: the resumed run's)")
    parser.add_argument("--corpus", action="append", default=None,
                        help="training files or glob (plain, .xz, .gz): one paragraph a line, documents separated by a "
                        "blank line; repeatable (default: the resumed run's)")
    add_run_folder_arguments(parser)
    parser.add_argument("--sbo", action="store_true", default=None,
                        help="spanbert: add the span boundary objective (default: off)")
    add_config_flags(parser, PRETRAIN_FLAGS, defaults)
    parser.add_argument("--threads", type=positive_int, default=None, help=CORES_THREADS_HELP)
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    parser.set_defaults(func=run)


def resolve(args: argparse.Namespace):
    """(PretrainConfig, corpus patterns, the run folder opened once) from the flags, over the resumed run's settings."""
    from elmokit.pretraining.run import PretrainConfig, open_pretrain_run

    given = {name: getattr(args, name) for name in PRETRAIN_FLAGS if getattr(args, name) is not None}
    if args.objective is not None:
        given["objective"] = args.objective
    if args.sbo is not None:
        given["sbo"] = bool(args.sbo)
    corpus = args.corpus
    base: dict = {}
    folder, saved = open_pretrain_run(args.out, args.resume)
    if args.resume and saved is not None:
        base = saved.to_dict()
        base.pop("format_version")
        corpus = corpus or folder.record["corpus"]["patterns"]  # the schedule (warmup, decay_steps) stays the run's
    else:
        missing = [flag for flag, value in (("--objective", args.objective), ("--corpus", corpus)) if value is None]
        if missing:
            raise SettingError(f"a new run needs {' and '.join(missing)}")
    try:
        return PretrainConfig(**{**base, **given}), corpus, folder
    except (TypeError, ValueError) as error:
        raise SettingError(str(error)) from None


def run(args: argparse.Namespace) -> int:
    from elmokit.pretraining.run import pretrain

    apply_threads(args)
    config, corpus, folder = resolve(args)
    if args.verbose and os.environ.get("RANK", "0") == "0":  # the run folder records it; torchrun: say it once
        print("pretraining config:", json.dumps(config.to_dict()), file=sys.stderr)
    argv = getattr(args, "argv", None) or sys.argv[1:]
    command = "elmokit " + " ".join(shlex.quote(a) for a in argv)
    try:
        result = pretrain(args.out, corpus=corpus, config=config, resume=args.resume, command=command, device=args.device,
                          folder=folder)
    except KeyboardInterrupt as stop:
        return interrupted("pretrain", args.out, stop)
    if result.model_dir is not None:
        loss = f"{result.loss:.4f}" if result.loss is not None else "n/a"
        print(f"elmokit pretrain: step {result.step}, {result.tokens:,} tokens, last loss {loss}; "
              f"model in {result.model_dir}", file=sys.stderr)
    return 0
