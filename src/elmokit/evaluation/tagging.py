"""Downstream tagging benchmarks: UPOS accuracy on UD English-EWT, NER span F1 on WikiANN-en,
WNUT-17 and (when present) CoNLL-2003, each with a representation and without (the baseline);
and the Chinese tasks (``elmokit.tasks.zh_data``): NER on Weibo and Resume (characters), word
segmentation as B/M/E/S character tagging (People's Daily train -> SIGHAN-2005 PKU test, scored as
the bakeoff's word F1, ``elmokit.evaluation.segmentation``), POS on People's Daily (words, PKU tags).

Peters et al. (2018) report NER on CoNLL-2003 (Table 1) and POS on the PTB (Table 6); these are
the openly licensed sets beside them. NER F1 is seqeval's strict span F1 (IOB2), as the
results say. Each run trains the BiLSTM-CRF of :mod:`elmokit.tasks.tagger`, early-stopped on dev,
and reports dev and test scores plus the learned layer weights (softmax(w), gamma).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elmokit.data_paths import shared_data
from elmokit.errors import UserError
from elmokit.evaluation.segmentation import read_dictionary, score_segmentation
from elmokit.representation import CharAlignedWords
from elmokit.tasks.data import TaggedCorpus, read_conll, read_conllu
from elmokit.tasks.tagger import TaggerConfig, TrainOptions, main_metric, train_tagger
from elmokit.tasks.zh_data import (
    bio_to_cws,
    bmes_to_words,
    cws_to_bio,
    read_peoples_daily,
    read_peoples_daily_cws,
    read_resume_ner,
    read_segmented,
    read_weibo_ner,
)
from elmokit.text.segmenters import SEGMENTER_KINDS
from elmokit.transfer.finetune_tagger import TAGGING_DEFAULTS, finetune_tagger

logger = logging.getLogger(__name__)


def _pd_cws(path: Path, split: str) -> TaggedCorpus:
    """People's Daily train/dev paragraphs as B/M/E/S characters; the test split is SIGHAN's PKU gold."""
    return read_segmented(path) if split == "test" else read_peoples_daily_cws(path, split)


@dataclass(frozen=True)
class TaggingDataset:
    name: str
    task: str  # "pos", "ner" or "cws" (word segmentation: B/M/E/S characters, scored as SIGHAN word F1)
    folder: str  # under <shared>/data
    train: str  # file names under folder
    dev: str
    test: str
    token_prefix: str = ""
    optional: bool = False  # skipped quietly when absent (licence-restricted sets)
    reader: Callable[[Path, str], TaggedCorpus] | None = None  # (path, split) -> corpus; None: by task
    units: str = "words"  # "chars": the tokens are characters (a word-level model is aligned to them)
    dictionary: str = ""  # cws: the training word list (under folder) for OOV recall


DATASETS = {
    "ewt": TaggingDataset("ewt", "pos", "ud_english_ewt", "en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu",
                          "en_ewt-ud-test.conllu"),
    "wikiann": TaggingDataset("wikiann", "ner", "wikiann_en", "train.txt", "dev.txt", "test.txt", token_prefix="en:"),
    "wnut17": TaggingDataset("wnut17", "ner", "wnut17", "wnut17train.conll", "emerging.dev.conll",
                             "emerging.test.annotated"),
    "conll2003": TaggingDataset("conll2003", "ner", "conll2003_en", "train.txt", "valid.txt", "test.txt", optional=True),
    # Chinese (docs/chinese.md, "Chinese tasks")
    "weibo": TaggingDataset("weibo", "ner", "zh/weibo_ner", "weiboNER_2nd_conll.train", "weiboNER_2nd_conll.dev",
                            "weiboNER_2nd_conll.test", reader=lambda path, split: read_weibo_ner(path), units="chars"),
    "resume": TaggingDataset("resume", "ner", "zh/resume_ner", "train.char.bmes", "dev.char.bmes", "test.char.bmes",
                             reader=lambda path, split: read_resume_ner(path), units="chars"),
    "pku_cws": TaggingDataset("pku_cws", "cws", ".", "zh/peoples_daily_199801/199801.txt",
                              "zh/peoples_daily_199801/199801.txt", "zh_sighan2005/pku_test_gold.utf8", reader=_pd_cws,
                              units="chars", dictionary="zh_sighan2005/pku_training_words.utf8"),
    "pd_pos": TaggingDataset("pd_pos", "pos", "zh/peoples_daily_199801", "199801.txt", "199801.txt", "199801.txt",
                             reader=read_peoples_daily),
}


class BenchmarkDataError(UserError, FileNotFoundError):
    """A benchmark data folder or file is missing; the message says where it was looked for."""


def load_dataset(dataset: TaggingDataset, data_dir: str | os.PathLike | None = None) -> dict[str, TaggedCorpus] | None:
    """train/dev/test corpora; None for an optional set that is absent."""
    folder = Path(data_dir) if data_dir is not None else shared_data()
    folder = folder / dataset.folder
    paths = {split: folder / getattr(dataset, split) for split in ("train", "dev", "test")}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        if dataset.optional:
            return None
        raise BenchmarkDataError(f"{dataset.name}: missing {', '.join(missing)}; fix: set ELMOKIT_SHARED to the "
                                 "shared folder, or pass --data-dir (the folder holding the data sets)")
    if dataset.reader is not None:
        return {split: dataset.reader(path, split) for split, path in paths.items()}
    if dataset.task == "pos":
        return {split: read_conllu(path) for split, path in paths.items()}
    return {split: read_conll(path, token_prefix=dataset.token_prefix) for split, path in paths.items()}


def for_characters(representation, spec: dict | None) -> tuple[Any, dict, str]:
    """(representation, spec, how) for a data set whose tokens are characters.

    An ELMo model that records a segmenter (the Chinese model: jieba) is aligned: each character gets
    the vectors of its word (``elmokit.representation.CharAlignedWords``, spec ``"align": "chars"``).
    Any other representation is fed the characters as its tokens."""
    spec = dict(spec or {})
    if isinstance(representation, CharAlignedWords):
        return representation, spec, "characters given the vectors of their segmenter words"

    segmenter = getattr(getattr(representation, "tokenizer", None), "kind", None)  # elmokit's Tokenizer of a model
    if segmenter in SEGMENTER_KINDS and spec.get("kind") in ("elmo", None):
        how = f"characters given the vectors of their {segmenter} words"
        return CharAlignedWords(representation), {**spec, "align": "chars"} if spec else spec, how
    return representation, spec, "characters fed directly as tokens"


def segmentation_score(tagger, corpus: TaggedCorpus, dictionary: frozenset[str] = frozenset(), *,
                       features=None) -> dict[str, Any]:
    """Word P/R/F of a B/M/E/S tagger on ``corpus`` by the SIGHAN scorer's rules (words from the gold
    labels against words from the predicted ones, sentence by sentence; OOV recall against ``dictionary``)."""
    predicted = tagger.predict(corpus.sentences, features=features)
    gold_lines = ["  ".join(bmes_to_words(c, l)) for c, l in zip(corpus.sentences, corpus.labels)]
    test_lines = ["  ".join(bmes_to_words(c, bio_to_cws(p))) for c, p in zip(corpus.sentences, predicted)]
    result = score_segmentation(gold_lines, test_lines, dictionary=dictionary).to_dict()
    result["metric"] = "word F1, SIGHAN bakeoff scorer rules"
    return result


def _known_dataset(name: str):
    if name not in DATASETS:
        raise UserError(f"unknown tagging data set {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]


def _bounded_splits(corpora: dict, max_train: int | None, max_eval: int | None, max_dev: int | None):
    """(train, dev, test) cut to the bounds: dev to the smaller of max_eval and max_dev, test to max_eval."""
    dev_limit = min(n for n in (max_eval, max_dev, len(corpora["dev"])) if n is not None)
    return (corpora["train"].subset(max_train), corpora["dev"].subset(dev_limit),
            corpora["test"].subset(max_eval))


def run_benchmark(
    dataset_names: Sequence[str],
    representation=None,
    *,
    representation_spec: dict | None = None,
    baseline: bool = True,
    options: TrainOptions | None = None,
    config_changes: dict | None = None,
    max_train_sentences: int | None = None,
    max_eval_sentences: int | None = None,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    log=None,
    max_dev_sentences: int | None = None,
    word_table=None,
) -> list[dict[str, Any]]:
    """Train and score a tagger per data set, with the representation and (``baseline``) without.
    ``word_table`` (a ``StaticVectors``) initialises both taggers' word embedding.

    ``max_train_sentences`` / ``max_eval_sentences`` take the first N sentences of train and of
    dev/test (quick runs; the results record it); ``max_dev_sentences`` caps dev alone (the
    early-stopping set; the test set stays whole).
    """
    log = log or logger.info
    options = options or TrainOptions()
    results = []
    for name in dataset_names:
        dataset = _known_dataset(name)
        corpora = load_dataset(dataset, data_dir)
        if corpora is None:
            log(f"{name}: not present, skipped")
            continue
        train, dev, test = _bounded_splits(corpora, max_train_sentences, max_eval_sentences, max_dev_sentences)
        cws = dataset.task == "cws"
        bmes = {}  # cws: the B/M/E/S corpora; the tagger sees them as words = BIO chunks of type W
        if cws:
            bmes = {"dev": dev, "test": test}
            train, dev, test = (TaggedCorpus(c.sentences, [cws_to_bio(row) for row in c.labels], c.path, list(c.notes))
                                for c in (train, dev, test))
        rep_spec, alignment = representation_spec, "words"
        rep_for = representation
        if representation is not None and dataset.units == "chars":
            rep_for, rep_spec, alignment = for_characters(representation, representation_spec)
            log(f"{name}: {alignment}")
        systems = []
        if rep_for is not None:
            systems.append(("elmo", rep_for))
        if baseline or representation is None:
            systems.append(("none", None))
        for mode, rep in systems:
            changes = dict(config_changes or {})
            if rep is None:
                changes.update(elmo="none", elmo_at_output=False, fine_tune=False)
            if cws:  # B/M/E/S is BIOES over one chunk type, and its constrained CRF decodes only whole words
                changes.update(task="ner", scheme="BIOES")
            config = TaggerConfig(
                **{**dict(task=dataset.task, scheme="BIO" if dataset.task == "ner" else None,
                          elmo_layers=rep.num_layers if rep is not None else 0,
                          elmo_dim=rep.dim if rep is not None else 0,
                          representation=(rep_spec or {}) if rep is not None else {},
                          representation_name=rep.name if rep is not None else ""),
                   **changes})
            label = rep.name if rep is not None else "no representation (baseline)"
            log(f"{name}: training with {label} on {len(train)} sentences "
                f"({train.num_tokens} tokens), dev {len(dev)}, test {len(test)}")
            started = time.perf_counter()
            tagger = train_tagger(train, dev, config, representation=rep, options=options,
                                  cache_dir=cache_dir, word_table=word_table,
                                  log=lambda m, name=name, mode=mode: log(f"{name} [{mode}] {m}"))
            task = "ner" if cws else dataset.task  # both score F1
            if cws:
                root = Path(data_dir) if data_dir is not None else shared_data()
                dictionary = read_dictionary(root / dataset.folder / dataset.dictionary) if dataset.dictionary else frozenset()
                test_result = segmentation_score(tagger, bmes["test"], dictionary)
                dev_result = segmentation_score(tagger, bmes["dev"], dictionary)
            else:
                test_result = tagger.evaluate(test)
                dev_result = tagger.history[tagger.best_epoch - 1]["dev"]
            results.append({
                "dataset": name, "task": dataset.task, "representation": rep.name if rep is not None else "none",
                "tokens": dataset.units, "alignment": alignment if rep is not None else "",
                "elmo": config.elmo, "metric": dev_result["metric"],
                "dev": dev_result, "test": test_result,
                "dev_score": main_metric(dev_result, task), "test_score": main_metric(test_result, task),
                "best_epoch": tagger.best_epoch, "epochs_run": len(tagger.history),
                "mixing_weights": tagger.mixing_weights(),
                "train_sentences": len(train), "dev_sentences": len(dev), "test_sentences": len(test),
                "seconds": round(time.perf_counter() - started, 1),
                "config": dataclasses.asdict(tagger.config),
                "history": [{k: v for k, v in h.items() if k != "dev"} | {"dev_score": main_metric(h["dev"], task)}
                            for h in tagger.history],
                "notes": corpora["train"].notes,
            })
    return results


def run_finetune_benchmark(
    dataset_names: Sequence[str],
    folder: str | os.PathLike,
    *,
    scheme: str = "BIO",
    output: str = "softmax",
    options=None,
    patience: int | None = None,
    max_train_sentences: int | None = None,
    max_eval_sentences: int | None = None,
    max_dev_sentences: int | None = None,
    data_dir: str | os.PathLike | None = None,
    log=None,
) -> list[dict[str, Any]]:
    """``run_benchmark``'s rows for the fine-tuning recipe (``elmokit.transfer.finetune_tagger``): the
    transformer in ``folder`` trained end to end with a linear layer (or CRF) on each word's first
    sub-token; the same data, subsets and result fields (``elmo`` is "finetune", no layer weights).
    Word-level data sets only (NER, POS)."""
    log = log or logger.info
    results = []
    for name in dataset_names:
        dataset = _known_dataset(name)
        if dataset.units != "words" or dataset.task == "cws":
            raise UserError(f"{name}: the fine-tuning recipe tags words; {dataset.task} on {dataset.units} is not supported")
        corpora = load_dataset(dataset, data_dir)
        if corpora is None:
            log(f"{name}: not present, skipped")
            continue
        train, dev, test = _bounded_splits(corpora, max_train_sentences, max_eval_sentences, max_dev_sentences)
        log(f"{name}: fine-tuning {folder} on {len(train)} sentences ({train.num_tokens} tokens), "
            f"dev {len(dev)}, test {len(test)}")
        started = time.perf_counter()
        tagger = finetune_tagger(folder, train, dev, task=dataset.task, scheme=scheme, output=output,
                                 options=options or TAGGING_DEFAULTS, patience=patience,
                                 log=lambda m, name=name: log(f"{name} [finetune] {m}"))
        dev_result, test_result = tagger.history[tagger.best_epoch - 1]["dev"], tagger.evaluate(test)
        results.append({
            "dataset": name, "task": dataset.task, "representation": f"finetune:{Path(folder).name}",
            "tokens": dataset.units, "alignment": "first sub-token of each word", "elmo": "finetune",
            "metric": dev_result["metric"], "dev": dev_result, "test": test_result,
            "dev_score": main_metric(dev_result, dataset.task), "test_score": main_metric(test_result, dataset.task),
            "best_epoch": tagger.best_epoch, "epochs_run": len(tagger.history), "mixing_weights": {},
            "train_sentences": len(train), "dev_sentences": len(dev), "test_sentences": len(test),
            "seconds": round(time.perf_counter() - started, 1),
            "config": {"recipe": "finetune", "model": str(folder), "output": output, "scheme": tagger.scheme,
                       "options": dataclasses.asdict(tagger.options), "patience": patience},
            "history": [{k: v for k, v in h.items() if k != "dev"} | {"dev_score": main_metric(h["dev"], dataset.task)}
                        for h in tagger.history],
            "notes": corpora["train"].notes,
        })
    return results


def format_table(results: Sequence[dict[str, Any]]) -> str:
    """One row per (data set, representation): dev and test score, epochs, layer weights."""
    header = ["dataset", "representation", "metric", "dev", "test", "best epoch", "softmax(w) / gamma"]
    rows = []
    for r in results:
        mix = r["mixing_weights"].get("input")
        weights = f"[{', '.join(f'{w:.2f}' for w in mix['softmax_w'])}] / {mix['gamma']:.2f}" if mix else "-"
        metric = {"pos": "accuracy", "cws": "word F1 (SIGHAN)"}.get(r["task"], "span F1 (strict)")
        rows.append([r["dataset"], r["representation"], metric, f"{100 * r['dev_score']:.2f}",
                     f"{100 * r['test_score']:.2f}", f"{r['best_epoch']}/{r['epochs_run']}", weights])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
