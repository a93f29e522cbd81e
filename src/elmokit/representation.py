"""The one interface every representation offers (ELMo, static tables, transformers), how any of
them is loaded, and its fingerprint.

Evaluation and task code only ever see the ``Representation`` surface, so they never ask which
kind they hold.

Loading. A representation is described by a *spec*: a small JSON dict, written into the
config.json of every task model trained on it so that prediction rebuilds the same features::

    {"kind": "elmo", "model": "default"}                        # shipped name or model folder
    {"kind": "elmo", "model": "/runs/lm", "initial_state": "warm"}
    {"kind": "elmo", "model": "zh", "align": "chars"}  # character tokens, each given its word's vectors
    {"kind": "elmo-original", "options_file": ".../options.json", "weight_file": ".../weights.hdf5"}
    {"kind": "vectors", "path": ".../vectors.txt"}              # a static table: run folder or file
    {}                                                          # no representation (a baseline)

``load_representation(spec)`` dispatches on ``spec["kind"]`` through ``REPRESENTATION_KINDS``;
``spec_from_flags(...)`` builds the spec from the command line's ``--model``,
``--options-file``/``--weight-file`` and ``--vectors``. A new kind of representation plugs in as one
class with ``kind``, ``fields``, ``path_fields`` and ``loader`` (``"module:Class.method"``, called as
``loader(spec, options)``), and one entry in the table; nothing else changes.

The registry is lazy: a loader is named by a string and imported when a spec of its kind is loaded.
The classes that load (``Embedder`` beside this module, ``TransformerRepresentation`` and
``CoveRepresentation`` in the recipes above it) depend on this module, never the reverse, so the
representations layer imports nothing above it and nothing here imports torch or transformers.

Folders. Every folder elmokit writes says what it is (``identify_folder``): the ``artifact`` of its
``.elmokit-output.json``, else its own files (config.json's fields, static.json, finetune.json...).
``FOLDER_KINDS`` says for each kind what it is and which representation kind loads it, or, for a
folder that is not a representation (a tagger, a classifier), what to do with it instead;
``folder_spec(DIR)`` is the spec of any of them. ``Embedder.load(DIR)``, ``--model DIR`` on every
command and ``load_representation`` read all of them through it.

Fingerprint. ``fingerprint(rep)`` is a string that changes whenever the representation's outputs
could change; it keys the feature caches and the neighbour indexes. A representation may bring its
own (a ``fingerprint`` attribute: ``Embedder`` hashes config, weights, precision and initial state);
a static table is fingerprinted by its vectors and words here.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from elmokit.errors import InputNotFound, UserError
from elmokit.formats import SHIPPED_MODELS, embedding_hdf5
from elmokit.io import read_output_record


@runtime_checkable
class Representation(Protocol):
    """Turns tokenised sentences into per-token vectors.

    Attributes:
        name: a short human-readable name ("elmo:default", "word2vec:skipgram", ...).
        num_layers: 1 for a static table, L + 1 for a biLM with L LSTM layers.
        dim: the size of each token vector.
    """

    name: str
    num_layers: int
    dim: int

    def embed(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One float32 array of shape (num_layers, n_tokens, dim) per sentence."""
        ...


class RepresentationError(UserError):
    """A representation that cannot be loaded as described; the message names the spec or flag and the fix."""


class EmbedsFiles:
    """What ``elmokit embed`` and ``Embedder`` users call beyond ``embed``, for a representation that carries no
    state between sentences (a CoVe encoder, a static table): ``tokenize`` a raw line (``tokenizer``, an
    ``elmokit.text.corpus.Tokenizer``, else whitespace), ``embed_batch``, and ``embed_file`` into the HDF5
    layout of ``Embedder.embed_file`` (``elmokit.formats.embedding_hdf5``)."""

    stateful = False
    tokenizer = None
    batch_size = 64  # sentences per ``embed`` call while embedding a file

    def tokenize(self, text: str) -> list[str]:
        return self.tokenizer(text) if self.tokenizer is not None else text.split()

    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        return self.embed(sentences)

    def embed_file(self, input_file, output_file, **options):
        return embedding_hdf5.embed_file(self, input_file, output_file, **options)


# --------------------------------------------------------------------------- the kinds


class ElmoModel:
    """An ELMo model by shipped name ('default') or folder (native, or options.json + weights.hdf5).

    ``align``: ``"words"`` (default: the tokens given are the model's words) or ``"chars"`` (the tokens
    are characters of unsegmented text, as in Chinese NER: each gets the vectors of the word of the
    model's recorded segmenter that contains it; ``CharAlignedWords``)."""

    kind = "elmo"
    fields = ("model", "initial_state", "align")
    path_fields = ("model",)
    loader = "elmokit.elmo:Embedder.load"

    @classmethod
    def load(cls, spec: Mapping[str, Any], options: Mapping[str, Any]):
        align = spec.get("align", "words")
        if align not in ALIGNMENTS:
            raise RepresentationError(f"representation {dict(spec)!r}: align must be one of {', '.join(ALIGNMENTS)}, "
                                      f"not {align!r}")
        embedder = resolve(cls.loader)(spec["model"], initial_state=spec.get("initial_state", "zero"), **options)
        return CharAlignedWords(embedder) if align == "chars" else embedder


class ElmoOriginalFiles:
    """An ELMo model in the original format given as two files (options.json, weights.hdf5)."""

    kind = "elmo-original"
    fields = ("options_file", "weight_file", "initial_state")
    path_fields = ("options_file", "weight_file")
    loader = "elmokit.elmo:Embedder.from_original"

    @classmethod
    def load(cls, spec: Mapping[str, Any], options: Mapping[str, Any]):
        return resolve(cls.loader)(spec["options_file"], spec["weight_file"],
                                   initial_state=spec.get("initial_state", "zero"), **options)


class StaticTable:
    """A static word-vector table: a run folder of ``elmokit static train`` or a word2vec/GloVe file.

    Of the loading options only ``stateful`` and ``precision`` could change a table's outputs; it has
    neither mode, so asking for one is an error (``batch_size``, ``token_cache_size`` do not apply)."""

    kind = "vectors"
    fields = ("path",)
    path_fields = ("path",)
    loader = "elmokit.static.vectors:StaticVectors.load"

    @classmethod
    def load(cls, spec: Mapping[str, Any], options: Mapping[str, Any]):
        _fp32_only(spec, options, "a static table")
        return resolve(cls.loader)(spec["path"])


class TransformerFolder:
    """A transformers model folder (config.json, weights, fast tokenizer): one vector per word per layer.

    ``pooling`` ("mean" default, "first", "last") pools a word's subword vectors. Sentences run one at a
    time by default, so a batch embeds bit-identically to its sentences alone: the loading option
    ``batch_size`` and ``token_cache_size`` do not apply; bf16 and stateful are errors. The spec's own
    ``batch_size`` (> 1: equal-length sentences grouped, equal within float rounding) changes outputs, so it
    is a field of the spec, not a loading option."""

    kind = "transformer"
    fields = ("path", "pooling", "batch_size")
    path_fields = ("path",)
    loader = "elmokit.pretraining.representation:TransformerRepresentation.load"

    @classmethod
    def load(cls, spec: Mapping[str, Any], options: Mapping[str, Any]):
        _fp32_only(spec, options, "a transformer representation")
        return resolve(cls.loader)(spec["path"], pooling=spec.get("pooling", "mean"), batch_size=int(spec.get("batch_size", 1)))


class CoveEncoderFolder:
    """The encoder of a CoVe MT model (``elmokit cove train``; run folder or its model/): ``mode`` "cove"
    (default: the top layer, 2H) or "glove_cove" ([GloVe; CoVe], E + 2H, the paper's task input).
    Batch-invariant, so ``batch_size`` only sets the chunking; bf16 and stateful are errors."""

    kind = "cove"
    fields = ("path", "mode")
    path_fields = ("path",)
    loader = "elmokit.transfer.cove:CoveRepresentation.load"

    @classmethod
    def load(cls, spec: Mapping[str, Any], options: Mapping[str, Any]):
        _fp32_only(spec, options, "a CoVe representation")
        return resolve(cls.loader)(spec["path"], mode=spec.get("mode", "cove"), batch_size=options.get("batch_size", 64))


def _fp32_only(spec: Mapping[str, Any], options: Mapping[str, Any], what: str) -> None:
    if options.get("stateful") or options.get("precision", "fp32") != "fp32":
        raise RepresentationError(f"{spec['path']}: {what} has no stateful or bf16 mode")


def resolve(target: str):
    """The object ``"package.module:Name.attribute"`` names, its module imported now (the lazy registry)."""
    module, _, path = target.partition(":")
    value = importlib.import_module(module)
    for name in path.split("."):
        value = getattr(value, name)
    return value


# How the tokens given to a representation relate to the words it embeds (the ``align`` field of the elmo kind).
ALIGNMENTS = ("words", "chars")


class CharAlignedWords:
    """A word-level representation used on characters: each character gets the vectors of the word that
    contains it (a character-level task, e.g. Chinese NER or word segmentation as B/M/E/S tagging, on a
    model trained on segmenter words).

    For a sentence of tokens c_1..c_n (characters; any strings) the tokens are joined without spaces,
    the joined text is cut by ``tokenizer`` (default: the representation's own, the segmenter a model
    records in lm.json), the words w_1..w_m are embedded by the word representation in one call, and
    token i gets the vectors of the word holding its first non-space character:
    out[:, i] = words_out[:, owner(i)], shape (num_layers, n, dim). A token of whitespace only gets
    zeros. Batch-invariant whenever the word representation is (ELMo's zero-state embedding is).

    Feeding the characters directly to a word-level model instead would give every character the
    vectors of a one-character "word" in a sentence of one-character words: text unlike anything a
    jieba-trained biLM read, so its context layers would carry little of what it learned.
    """

    def __init__(self, words, tokenizer=None) -> None:
        tokenizer = tokenizer if tokenizer is not None else getattr(words, "tokenizer", None)
        if tokenizer is None:
            raise RepresentationError(f"{getattr(words, 'name', words)}: align='chars' needs a segmenter: the model "
                                      "records none (train it with --tokenizer jieba), and none was given")
        self.words = words
        self.tokenizer = tokenizer
        self.name = f"{words.name}+chars"
        self.num_layers = words.num_layers
        self.dim = words.dim

    @property
    def fingerprint(self) -> str:
        how = self.tokenizer.to_dict() if hasattr(self.tokenizer, "to_dict") else repr(self.tokenizer)
        return f"{fingerprint(self.words)}+chars:{json.dumps(how, sort_keys=True)}"

    def segment(self, tokens: Sequence[str]) -> tuple[list[str], list[int]]:
        """(words of the joined tokens, the index of each token's word, -1 for a whitespace-only token)."""
        text = "".join(tokens)
        words = self.tokenizer(text) if text.strip() else []
        reference = text.lower() if getattr(self.tokenizer, "lowercase", False) else text
        if len(reference) != len(text):
            raise RepresentationError(f"{self.name}: lowercasing changes the length of {text[:40]!r}; characters "
                                      "cannot be aligned to words")
        owner = [-1] * len(text)  # the word of each character of the joined text
        position = 0
        for index, word in enumerate(words):
            for char in word:
                while position < len(text) and reference[position].isspace():
                    position += 1
                if position == len(text) or reference[position] != char:
                    raise RepresentationError(f"{self.name}: the segmenter's words {words[:8]!r}... do not spell "
                                              f"the text {text[:40]!r}; characters cannot be aligned to words")
                owner[position] = index
                position += 1
        token_owner, start = [], 0
        for token in tokens:
            inside = [owner[i] for i in range(start, start + len(token)) if owner[i] >= 0]
            token_owner.append(inside[0] if inside else -1)
            start += len(token)
        return words, token_owner

    def embed(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One float32 array (num_layers, n_tokens, dim) per sentence of character tokens."""
        if isinstance(sentences, str) or any(isinstance(s, str) for s in sentences):
            raise TypeError("embed expects tokenised sentences (lists of characters)")
        segmented = [self.segment(tokens) for tokens in sentences]
        with_words = [i for i, (words, _) in enumerate(segmented) if words]
        vectors = dict(zip(with_words, self.words.embed([segmented[i][0] for i in with_words])))
        out = []
        for i, (_, owner) in enumerate(segmented):
            array = np.zeros((self.num_layers, len(owner), self.dim), dtype=np.float32)
            index = np.asarray(owner, dtype=np.int64)
            if i in vectors and len(owner):
                array[:, index >= 0] = vectors[i][:, index[index >= 0]]
            out.append(array)
        return out


# kind -> the class that loads it. One entry per kind of representation.
REPRESENTATION_KINDS: dict[str, Any] = {k.kind: k for k in (ElmoModel, ElmoOriginalFiles, StaticTable, TransformerFolder,
                                                            CoveEncoderFolder)}
# Options a caller may pass to load_representation; each kind uses the ones that apply to it.
ELMO_OPTIONS = ("batch_size", "precision", "token_cache_size", "stateful")


def load_representation(spec: Mapping[str, Any], *, base: str | os.PathLike | None = None, source: str = "",
                        **options):
    """The representation a spec describes; None for the empty spec (no representation).

    ``base``: the folder the spec was saved in; relative paths in it are read from there.
    ``source``: where the spec came from (a config.json), named in errors.
    ``options``: ``batch_size``, ``precision``, ``token_cache_size``, ``stateful`` (ELMo kinds).
    """
    where = f"{source}: " if source else ""
    if not spec:
        return None
    kind = spec.get("kind")
    loader = REPRESENTATION_KINDS.get(kind)
    if loader is None:
        raise RepresentationError(f"{where}unknown representation kind {kind!r}; known kinds: "
                                  f"{', '.join(REPRESENTATION_KINDS)} (is this elmokit older than the file?)")
    unknown = sorted(set(spec) - {"kind", *loader.fields})
    missing = [f for f in loader.path_fields if not spec.get(f)]
    if unknown or missing:
        raise RepresentationError(f"{where}representation {dict(spec)!r}: "
                                  + (f"unknown fields {unknown}" if unknown else f"missing {', '.join(missing)}"))
    unused = sorted(set(options) - set(ELMO_OPTIONS))
    if unused:
        raise TypeError(f"load_representation got unexpected options {unused}")
    resolved = dict(spec)
    if base is not None:
        for name in loader.path_fields:
            value = str(resolved[name])
            if not (name == "model" and _is_shipped(value)) and not Path(value).is_absolute():
                resolved[name] = str(Path(base) / value)
    return loader.load(resolved, {k: v for k, v in options.items() if v is not None})


def is_transformer_folder(path: str | os.PathLike) -> bool:
    """A transformers checkpoint folder: a config.json with transformers' ``model_type`` (an elmokit
    model's config.json has a ``format_version`` instead)."""
    return _transformer_config(_read_json(Path(path) / "config.json"))


def _is_shipped(name: str) -> bool:
    return name in SHIPPED_MODELS


# --------------------------------------------------------------------------- what a folder is


@dataclass(frozen=True)
class FolderKind:
    """A kind of folder elmokit writes. ``name``: the ``artifact`` its ``.elmokit-output.json`` records.
    ``spec_kind``: the representation kind that loads it (None: it is not a representation, and ``instead``
    says what to do with it)."""

    name: str
    what: str
    spec_kind: str | None
    instead: str = ""


FOLDER_KINDS: dict[str, FolderKind] = {k.name: k for k in (
    FolderKind("elmo", "an ELMo model folder", "elmo"),
    FolderKind("transformer", "a transformers model folder", "transformer"),
    FolderKind("cove", "a CoVe MT model (`elmokit cove train`)", "cove"),
    FolderKind("static", "a static word-vector table (`elmokit static train`)", "vectors"),
    # the transformer a fine-tuning recipe trained, in model/, is a representation; the task head is not
    FolderKind("finetuned-classifier", "a fine-tuned transformer classifier (`elmokit classify train --recipe finetune`)",
               "transformer"),
    FolderKind("finetuned-tagger", "a fine-tuned transformer tagger (`elmokit tag train --recipe finetune`)",
               "transformer"),
    FolderKind("tagger", "a sequence tagger (`elmokit tag train`)", None,
               "tag text with `elmokit tag predict --tagger DIR`; give --model the representation it was trained on"),
    FolderKind("classifier", "a text classifier (`elmokit classify train`)", None,
               "label text with `elmokit classify predict --classifier DIR`; give --model the representation it was "
               "trained on"),
    FolderKind("ulmfit", "a ULMFiT classifier (`elmokit classify train --recipe ulmfit`)", None,
               "label text with `elmokit classify predict --classifier DIR`"),
)}


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _transformer_config(config) -> bool:
    return isinstance(config, dict) and "model_type" in config and "format_version" not in config


def identify_folder(path: str | os.PathLike) -> FolderKind | None:
    """What the folder ``path`` is: the ``artifact`` of its ``.elmokit-output.json`` when it names a known kind,
    else read from its files; None for a shipped model's name, a file, or a folder of none of the kinds."""
    folder = Path(path)
    if str(path) in SHIPPED_MODELS or not folder.is_dir():
        return None
    record = read_output_record(folder) or {}
    if record.get("artifact") in FOLDER_KINDS:
        return FOLDER_KINDS[record["artifact"]]
    config = _read_json(folder / "config.json")
    if isinstance(config, dict):  # each writer's config has fields no other has
        if _transformer_config(config):  # with model/ beside it: `elmokit pretrain`'s run folder
            return FOLDER_KINDS["transformer"]
        if config.get("recipe") == "ulmfit":
            return FOLDER_KINDS["ulmfit"]
        if {"encoder_layers", "decoder_layers", "target_vocab_size"} <= config.keys():  # CoveConfig
            return FOLDER_KINDS["cove"]
        if {"task", "output", "elmo", "scheme"} <= config.keys():  # TaggerConfig
            return FOLDER_KINDS["tagger"]
        if {"num_labels", "vocab_size"} <= config.keys():  # ClassifierConfig
            return FOLDER_KINDS["classifier"]
        return FOLDER_KINDS["elmo"]  # a native biLM folder (its loader names any field it does not know)
    if (folder / "finetune.json").is_file():
        return FOLDER_KINDS["finetuned-classifier"]
    if (folder / "finetune_tagger.json").is_file():
        return FOLDER_KINDS["finetuned-tagger"]
    if (folder / "static.json").is_file():
        return FOLDER_KINDS["static"]
    if (folder / "options.json").is_file():  # the original format
        return FOLDER_KINDS["elmo"]
    return None


def require_elmo_folder(path: str | os.PathLike, command: str) -> None:
    """For commands that read ELMo models only (``convert``, ``warm-state``): a ``RepresentationError`` saying
    what another folder elmokit wrote is and what to do with it instead."""
    kind = identify_folder(path)
    if kind is None or kind.name == "elmo":
        return
    instead = kind.instead or "use it as it is: `--model DIR` and `Embedder.load(DIR)` read it"
    raise RepresentationError(f"{path}: {kind.what}, not an ELMo model, so `{command}` does not apply; {instead}")


def folder_spec(path: str | os.PathLike, kind: FolderKind | None = None) -> dict[str, Any]:
    """The spec that loads the folder ``path`` (absolute path), by its kind (``identify_folder``, or ``kind``);
    ``RepresentationError`` for a folder that is not a representation, naming what it is and what to do."""
    kind = kind or identify_folder(path)
    folder = Path(path).resolve()
    if kind is None:
        raise RepresentationError(f"{path}: not a folder elmokit wrote (no config.json, static.json or options.json); "
                                  "fix: give a model folder, a shipped model's name, or --vectors FILE")
    if kind.spec_kind is None:
        raise RepresentationError(f"{path}: {kind.what}, not a representation; {kind.instead}")
    if kind.name.startswith("finetuned-"):
        folder = folder / "model"  # the fine-tuned transformer
    key = "model" if kind.spec_kind == "elmo" else "path"
    return {"kind": kind.spec_kind, key: str(exported_model(folder))}


def exported_model(path: str | os.PathLike) -> Path:
    """A run folder's exported ``model/`` (``elmokit train``, ``pretrain``, ``cove train``: the run's config.json at
    the top, the model in model/ once the run ends), else ``path`` itself."""
    folder = Path(path)
    run_only = not (folder / "model.safetensors").is_file() and not (folder / "options.json").is_file()
    return folder / "model" if run_only and (folder / "model" / "config.json").is_file() else folder


def spec_from_flags(
    *, model: str | None = None, options_file: str | None = None, weight_file: str | None = None,
    vectors: str | None = None, initial_state: str = "zero", default_model: str | None = "default",
) -> dict[str, Any]:
    """The spec the command-line flags describe, with absolute paths (so a saved spec works from
    any working directory). ``model`` defaults to ``default_model`` when no flag names a
    representation; with ``default_model=None`` that gives ``{}`` (none)."""
    if (options_file is None) != (weight_file is None):
        raise RepresentationError("--options-file and --weight-file go together")
    given = [flag for flag, value in (("--model", model), ("--options-file/--weight-file", options_file),
                                      ("--vectors", vectors)) if value is not None]
    if len(given) > 1:
        raise RepresentationError(f"give one of --model, --options-file/--weight-file or --vectors, not {' and '.join(given)}")
    if vectors is not None:
        if initial_state != "zero":
            raise RepresentationError("--initial-state applies to ELMo models, not to --vectors")
        if not Path(vectors).exists():
            raise InputNotFound(f"--vectors {vectors}: no such file or folder")
        return {"kind": StaticTable.kind, "path": str(Path(vectors).resolve())}
    if options_file is not None:
        spec = {"kind": ElmoOriginalFiles.kind, "options_file": str(Path(options_file).resolve()),
                "weight_file": str(Path(weight_file).resolve())}
    else:
        model = model if model is not None else default_model
        if model is None:
            return {}
        kind = None if _is_shipped(model) else identify_folder(model)
        if kind is not None and kind.name != "elmo":  # a transformer, CoVe, static table, or not a representation
            spec = folder_spec(model, kind)
            if initial_state != "zero":
                raise RepresentationError(f"--initial-state applies to ELMo models, not to {kind.what}")
            return spec
        spec = {"kind": ElmoModel.kind, "model": model if _is_shipped(model) else str(Path(model).resolve())}
    if initial_state != "zero":
        spec["initial_state"] = initial_state
    return spec


# --------------------------------------------------------------------------- fingerprints


def fingerprint(rep) -> str:
    """A string that changes whenever the representation's outputs could change.

    Raises TypeError for a representation that cannot say (a test fake without a ``fingerprint``
    attribute): callers then keep its features in memory instead of in a keyed cache.
    """
    own = getattr(rep, "fingerprint", None)
    if own is not None:
        return str(own)
    vectors = getattr(rep, "vectors", None)  # a static table
    if isinstance(vectors, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(vectors).tobytes())
        digest.update("\n".join(getattr(rep, "words", [])).encode("utf-8"))
        subwords = getattr(rep, "subwords", None)  # fastText: unseen words are built from these rows
        if subwords is not None:
            digest.update(f"subwords {subwords.min_n} {subwords.max_n} {subwords.bucket}".encode())
            digest.update(np.ascontiguousarray(subwords.bucket_ids, dtype=np.int64).tobytes())
            digest.update(np.ascontiguousarray(subwords.vectors, dtype=np.float32).tobytes())
        return f"{rep.name}:{digest.hexdigest()[:16]}"
    raise TypeError(
        f"cannot fingerprint representation {getattr(rep, 'name', rep)!r}: give it a `fingerprint` "
        "attribute (a string that changes when its outputs change) or pass an explicit cache directory"
    )
