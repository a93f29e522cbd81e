"""Train a static word-vector table: word2vec (CBOW, skip-gram; HS or NS), fastText, GloVe, LSA, Doc2Vec.

One entry point, :func:`train_static`, writes a run folder::

    vectors.txt          word2vec text format with its header line (every algorithm)
    vectors.bin          word2vec binary format (what StaticVectors.load reads, faster)
    static.json          what the loader needs (name, dim, tokenizer, fastText n-gram settings)
    run.json             the exact command, resolved options, seed, corpus files, tokenizer, timings
    native files         gensim: model.gensim (gensim's own save format, for continued training and
                         Doc2Vec inference); fastText: subwords.safetensors; GloVe: glove.safetensors
                         (W, W~, biases); LSA: lsa.safetensors (U, S); Doc2Vec: docvecs.safetensors

The folder is written under a temporary name and renamed into place at the end, so an interrupted
run never leaves a half-written folder where a finished one should be.

Defaults are those of the original tools (see ``DEFAULTS``):

* word2vec (``word2vec.c``): dim 100, window 5 (randomly shrunk), min-count 5, sample 1e-3,
  negative 5 / hs 0, 5 epochs, alpha 0.025 for skip-gram and 0.05 for CBOW, decaying linearly to
  alpha * 1e-4, CBOW averages its context.
* fastText (``fasttext skipgram``): dim 100, window 5, min-count 5, negative 5, sample 1e-4,
  5 epochs, lr 0.05, n-grams 3..6 hashed into 2,000,000 buckets.
* Doc2Vec (gensim; Le & Mikolov 2014 gives no tool): PV-DM, dim 100, window 5, min-count 5,
  negative 5, sample 1e-3, 10 epochs, alpha 0.025; PV-DBOW trains word vectors too (dbow_words),
  else its word table would be random.
* GloVe (``glove.c`` / ``cooccur.c``): window 15 symmetric with 1/d weighting, min-count 5,
  x_max 100, alpha 0.75, AdaGrad lr 0.05, 25 epochs; dim 100 (glove.c's default is 50; we use
  word2vec's 100 so the tables compare at equal size).
* LSA: window 5 with 1/d weighting, min-count 5, PPMI with cds 0.75, U S^0.5, dim 100.

``workers`` defaults to 1, so runs are reproducible (gensim is deterministic only with one worker).

Tokenisation is not the tools' (they read pre-tokenised text split on whitespace, case kept): on
raw text that glues punctuation to words ("word,") and splits words by case ("Word"), which
lowers word-similarity coverage and scores. So :func:`static_tokenizer` defaults to the regex
``\\w+|[^\\w\\s]`` (words and punctuation apart), lowercased; ``pretokenized=True``
(``--pretokenized``) restores the tools' whitespace split with case kept.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import shlex
import shutil
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from elmokit.errors import UserError
from elmokit.formats.checks import refuse_non_finite_read
from elmokit.io import atomic_path, output_directory, write_json
from elmokit.static.cooccurrence import CooccurrenceConfig, build_vocab, count_cooccurrences
from elmokit.static.defaults import ALGOS, DEFAULTS
from elmokit.static.glove import GloveConfig, train_glove
from elmokit.static.lsa import LsaConfig, lsa_vectors
from elmokit.static.subwords import SubwordTable, ngram_buckets
from elmokit.static.vectors import StaticVectors
from elmokit.text.corpus import Corpus, Tokenizer

log = logging.getLogger(__name__)

RUN_FORMAT_VERSION = 1
SAVED_BY = "static train"  # the command whose output a run folder is: with --force it may replace it



class StaticSettingError(UserError):
    """A setting that does not apply to the algorithm, or that leaves nothing to train; the message says which."""


def static_tokenizer(kind: str | None = None, lowercase: bool | None = None, *, pretokenized: bool = False) -> Tokenizer:
    """The tokenizer of a static run: by default one for raw text (regex words and punctuation,
    lowercased); ``pretokenized=True``: the original tools' (whitespace, case kept). ``kind`` and
    ``lowercase`` override either."""
    base = Tokenizer(kind="whitespace", lowercase=False) if pretokenized else Tokenizer(kind="regex", lowercase=True)
    return Tokenizer(kind=kind or base.kind, lowercase=base.lowercase if lowercase is None else lowercase)


@dataclass(frozen=True, kw_only=True)
class StaticTrainConfig:
    """Resolved training options; fields that do not apply to ``algo`` are None.

    Build with :meth:`for_algo`, which fills the original tool's defaults (``DEFAULTS``).
    ``alpha`` is the (initial) learning rate for every algorithm; GloVe's weighting exponent is
    ``weight_alpha``.
    """

    algo: str
    dim: int
    window: int
    min_count: int
    seed: int
    workers: int = 1
    epochs: int | None = None
    alpha: float | None = None
    negative: int | None = None
    hs: bool | None = None
    sample: float | None = None
    min_n: int | None = None
    max_n: int | None = None
    bucket: int | None = None
    ft_model: str | None = None
    dm: bool | None = None
    dbow_words: bool | None = None
    x_max: float | None = None
    weight_alpha: float | None = None
    batch_size: int | None = None
    weighting: str | None = None
    cds: float | None = None
    eig_power: float | None = None
    chunk_tokens: int | None = None
    max_pairs_in_memory: int | None = None
    max_vocab: int | None = None

    @classmethod
    def for_algo(cls, algo: str, **overrides) -> StaticTrainConfig:
        if algo not in ALGOS:
            raise StaticSettingError(f"unknown algorithm {algo!r}; choose one of {', '.join(ALGOS)}")
        values = dict(DEFAULTS[algo])
        for key, value in overrides.items():
            if value is None:
                continue
            if key not in {f.name for f in dataclasses.fields(cls)}:
                raise StaticSettingError(f"unknown option {key!r}")
            if key not in values and key not in ("max_vocab", "workers", "seed"):
                raise StaticSettingError(f"option {key!r} does not apply to {algo} (its options: {', '.join(sorted(values))})")
            values[key] = value
        if algo in ("cbow", "skipgram", "doc2vec", "fasttext") and not values.get("hs") and not values.get("negative"):
            raise StaticSettingError(f"{algo}: choose --hs or --negative N > 0 (otherwise nothing is trained)")
        return cls(algo=algo, **values)

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @property
    def name(self) -> str:
        if self.algo in ("cbow", "skipgram"):
            parts = ([f"ns{self.negative}"] if self.negative else []) + (["hs"] if self.hs else [])
            return f"word2vec:{self.algo}-{'+'.join(parts)}"
        if self.algo == "fasttext":
            return f"fasttext:{self.ft_model}"
        if self.algo == "doc2vec":
            return f"doc2vec:{'pv-dm' if self.dm else 'pv-dbow'}"
        if self.algo == "lsa":
            return f"lsa:{self.weighting}"
        return "glove"


def stable_hash(text: str) -> int:
    """A hash that does not change between processes (Python's str hash is salted)."""
    return zlib.crc32(text.encode("utf-8"))


class _TaggedLines:
    """Doc2Vec documents: each non-empty line of the corpus, tagged by its position (0, 1, ...)."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus

    def __iter__(self) -> Iterator:
        from gensim.models.doc2vec import TaggedDocument

        for i, tokens in enumerate(self.corpus):
            yield TaggedDocument(tokens, [i])


def _gensim_common(c: StaticTrainConfig) -> dict:
    return dict(vector_size=c.dim, window=c.window, min_count=c.min_count, sample=c.sample, epochs=c.epochs,
                alpha=c.alpha, min_alpha=c.alpha * 1e-4, workers=c.workers, seed=c.seed,
                negative=c.negative or 0, hs=int(bool(c.hs)), hashfxn=stable_hash, max_vocab_size=None)


def _train_gensim(c: StaticTrainConfig, corpus: Corpus, folder: Path) -> tuple[StaticVectors, dict]:
    import gensim
    from gensim.models import Doc2Vec, FastText, Word2Vec

    common = _gensim_common(c)
    if c.max_vocab:
        common["max_final_vocab"] = c.max_vocab
    info: dict = {"gensim": gensim.__version__}
    if c.algo in ("cbow", "skipgram"):
        model = Word2Vec(sg=int(c.algo == "skipgram"), cbow_mean=1, **common)
        sentences = corpus
    elif c.algo == "fasttext":
        model = FastText(sg=int(c.ft_model == "skipgram"), min_n=c.min_n, max_n=c.max_n, bucket=c.bucket, **common)
        sentences = corpus
    else:
        model = Doc2Vec(dm=int(bool(c.dm)), dbow_words=int(bool(c.dbow_words)), **common)
        sentences = _TaggedLines(corpus)
    model.build_vocab(sentences)
    info["corpus_tokens"] = int(model.corpus_total_words)
    info["corpus_lines"] = int(model.corpus_count)
    model.train(sentences, total_examples=model.corpus_count, total_words=model.corpus_total_words, epochs=c.epochs)
    model.save(str(folder / "model.gensim"))
    wv = model.wv
    words = list(wv.index_to_key)
    vectors = np.asarray(wv.vectors[: len(words)], dtype=np.float32)
    subwords = None
    if c.algo == "fasttext":
        touched = sorted({b for w in words for b in ngram_buckets(w, c.min_n, c.max_n, c.bucket)})
        ids = np.asarray(touched, dtype=np.int64)
        subwords = SubwordTable(min_n=c.min_n, max_n=c.max_n, bucket=c.bucket, bucket_ids=ids,
                                vectors=np.asarray(wv.vectors_ngrams[ids], dtype=np.float32))
    if c.algo == "doc2vec":
        with atomic_path(folder / "docvecs.safetensors") as tmp:
            save_file({"docvecs": np.asarray(model.dv.vectors, dtype=np.float32)}, tmp)
        info["docvecs"] = {"file": "docvecs.safetensors", "n_docs": len(model.dv),
                           "tags": "position of the non-empty line in the corpus stream, from 0"}
    table = StaticVectors(words, vectors, name=c.name, lowercase=corpus.tokenizer.lowercase, subwords=subwords)
    return table, info


def _count(c: StaticTrainConfig, corpus: Corpus, folder: Path):
    t0 = time.time()
    words, counts = build_vocab(corpus, min_count=c.min_count, max_size=c.max_vocab)
    if not words:
        raise StaticSettingError(f"no word occurs {c.min_count} times in the corpus; fix: lower --min-count")
    cfg = CooccurrenceConfig(window=c.window, chunk_tokens=c.chunk_tokens, max_pairs_in_memory=c.max_pairs_in_memory)
    matrix = count_cooccurrences(corpus, {w: i for i, w in enumerate(words)}, cfg, spill_dir=folder / "spill")
    shutil.rmtree(folder / "spill", ignore_errors=True)
    info = {"cooccurrence": dataclasses.asdict(cfg) | {"nonzeros": int(matrix.nnz), "seconds": round(time.time() - t0, 1)},
            "vocab_size": len(words), "corpus_tokens_in_vocab": int(counts.sum())}
    log.info("co-occurrence matrix: %d words, %d nonzeros (%.1f s)", len(words), matrix.nnz, time.time() - t0)
    return words, matrix, info


def _train_glove(c: StaticTrainConfig, corpus: Corpus, folder: Path, progress: bool):
    words, matrix, info = _count(c, corpus, folder)
    torch.set_num_threads(max(1, c.workers))
    cfg = GloveConfig(dim=c.dim, x_max=c.x_max, alpha=c.weight_alpha, lr=c.alpha, epochs=c.epochs,
                      batch_size=c.batch_size, seed=c.seed)
    model, losses = train_glove(matrix, cfg, progress=progress)
    with atomic_path(folder / "glove.safetensors") as tmp:
        save_file({"W": model.W.numpy(), "W_tilde": model.C.numpy(), "b": model.bw.numpy(),
                   "b_tilde": model.bc.numpy()}, tmp)
    info["epoch_costs"] = [round(x, 6) for x in losses]
    table = StaticVectors(words, model.word_vectors(), name=c.name, lowercase=corpus.tokenizer.lowercase)
    return table, info


def _train_lsa(c: StaticTrainConfig, corpus: Corpus, folder: Path):
    words, matrix, info = _count(c, corpus, folder)
    cfg = LsaConfig(dim=c.dim, weighting=c.weighting, cds=c.cds, eig_power=c.eig_power, seed=c.seed)
    t0 = time.time()
    vectors, S, U = lsa_vectors(matrix, cfg)
    info["svd_seconds"] = round(time.time() - t0, 1)
    with atomic_path(folder / "lsa.safetensors") as tmp:
        save_file({"U": U.astype(np.float32), "S": S.astype(np.float32)}, tmp)
    return StaticVectors(words, vectors, name=c.name, lowercase=corpus.tokenizer.lowercase), info


def _versions() -> dict:
    out = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("gensim", "torch", "sklearn", "scipy"):
        if mod in sys.modules:
            out[mod] = getattr(sys.modules[mod], "__version__", "?")
    return out


def train_static(
    config: StaticTrainConfig,
    corpus: Corpus,
    out_dir: str | os.PathLike,
    *,
    command: str | None = None,
    force: bool = False,
    progress: bool = True,
) -> StaticVectors:
    """Train ``config.algo`` on ``corpus`` and write the run folder ``out_dir`` (see module doc), under the
    output policy (``elmokit.io.output_directory``): a new or empty folder, or with ``force`` an earlier run
    folder of this command, which the complete new one replaces; never a file, the corpus, or a folder
    holding anything else (refused before training)."""
    out_dir = Path(out_dir)
    started = datetime.now(UTC)
    t0 = time.time()
    with output_directory(out_dir, command=SAVED_BY, inputs=corpus.files, replace=force,
                          replace_flag="--force", artifact="static") as partial:
        if config.algo in ("cbow", "skipgram", "fasttext", "doc2vec"):
            table, info = _train_gensim(config, corpus, partial)
        elif config.algo == "glove":
            table, info = _train_glove(config, corpus, partial, progress)
        else:
            table, info = _train_lsa(config, corpus, partial)
        train_seconds = time.time() - t0
        table.save_folder(partial, extra={"algo": config.algo, "tokenizer": corpus.tokenizer.to_dict()})
        record = {
            "format_version": RUN_FORMAT_VERSION,
            "command": command if command is not None else shlex.join(sys.argv),
            "algo": config.algo,
            "name": config.name,
            "config": config.to_dict(),
            "seed": config.seed,
            "corpus": corpus.describe(),
            "vocab_size": len(table),
            "training_seconds": round(train_seconds, 1),
            "total_seconds": round(time.time() - t0, 1),
            "started_utc": started.isoformat(timespec="seconds"),
            "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                        "cpu_count": os.cpu_count()},
            "versions": _versions(),
            "details": info,
        }
        write_json(partial / "run.json", record, ensure_ascii=False)
    log.info("%s: %d words x %d written to %s in %.1f s", config.name, len(table), table.dim, out_dir, train_seconds)
    return table


def infer_doc_vectors(run_dir: str | os.PathLike, documents, *, epochs: int | None = None) -> np.ndarray:
    """Doc2Vec inference: (n_docs, dim) float32 vectors for new tokenised documents.

    ``run_dir`` is a folder written by ``elmokit static train --algo doc2vec``; tokenise the
    documents the way its run.json says (StaticVectors.load(run_dir).metadata["tokenizer"]).
    """
    from gensim.models import Doc2Vec

    model = Doc2Vec.load(str(Path(run_dir) / "model.gensim"))
    return np.stack([model.infer_vector(list(doc), epochs=epochs) for doc in documents]).astype(np.float32)


def load_doc_vectors(run_dir: str | os.PathLike) -> np.ndarray:
    """The trained document vectors (n_docs, dim); row i is the i-th non-empty corpus line."""
    path = Path(run_dir) / "docvecs.safetensors"
    return refuse_non_finite_read(load_file(str(path)), path)["docvecs"]
