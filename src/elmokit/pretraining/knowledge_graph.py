"""WordNet 3.0 as a knowledge graph for ERNIE (Tsinghua) (Zhang et al. 2019): synsets as entities, pointers as
triples, TransE embeddings (Bordes et al. 2013) trained with PyKEEN, SemCor's gold senses as entity mentions.

- ``read_wordnet(path)``: the Princeton database files (``data.{noun,verb,adj,adv}``, ``index.sense``,
  ``lexnames``) from their folder or the ``wordnet-3.0.tar.xz`` archive. An entity is a synset, named
  ``OFFSET-P`` (P in n, v, a, r: the data file; adjective satellites are ``a``). A triple is
  ``(synset, pointer symbol, synset)`` for every pointer of the data files; lexical pointers (between two
  words of two synsets) are lifted to their synsets, and repeated triples are kept once.
- ``train_transe``: TransE with PyKEEN (the ``kg`` extra): score ``f(h, r, t) = -||e_h + r_r - e_t||_p``,
  the margin ranking loss ``max(0, margin - f(pos) + f(neg))`` with negatives made by corrupting the head
  or the tail, entity vectors renormalised to unit L2 length (Bordes et al. 2013, Algorithm 1).
- ``TransEVectors``: the trained tables in a folder (``entities.txt`` + ``transe.safetensors``), what
  ``elmokit pretrain --objective ernie-thu`` reads.
- ``read_semcor(path)``: SemCor 3.0's SGML tagfiles (``<wf ... lemma=L lexsn=S>``, sense key ``L%S``) as
  sentences of words with their gold synsets.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from elmokit.errors import UserError
from elmokit.formats.checks import describe_non_finite
from elmokit.io import atomic_directory, atomic_path

POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
_SS_TYPE = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}  # sense-key ss_type -> data file (5: satellite)


class KnowledgeGraphError(UserError):
    """A WordNet, SemCor or TransE input that cannot be read."""


# --------------------------------------------------------------------------- WordNet


@dataclass
class WordNet:
    """Synsets (entities), their lexicographer file, the lemma index and the pointer triples.

    ``senses[lemma]``: the synsets of a lemma (lower case, words joined by ``_``), per POS in WordNet's sense
    order, as ``(synset index, pos, sense number, tag count)``. ``sense_keys``: sense key -> synset index."""

    synsets: list[str]
    lexnames: list[str]
    triples: np.ndarray  # (N, 3) int64: head synset, relation, tail synset
    relations: list[str]
    senses: dict[str, list[tuple[int, str, int, int]]] = field(default_factory=dict)
    sense_keys: dict[str, int] = field(default_factory=dict)
    exceptions: dict[str, list[str]] = field(default_factory=dict)  # inflected form -> base forms (*.exc)

    @property
    def index(self) -> dict[str, int]:
        if not hasattr(self, "_index"):
            self._index = {name: i for i, name in enumerate(self.synsets)}
        return self._index

    def first_sense(self, lemma: str) -> int | None:
        """The synset of ``lemma``'s sense number 1 in the POS whose first sense is most frequent in the tag
        counts (``index.sense``); ties go to noun, verb, adjective, adverb. None when WordNet lacks it."""
        candidates = [s for s in self.senses.get(lemma, ()) if s[2] == 1]
        if not candidates:
            return None
        order = "nvar"
        return max(candidates, key=lambda s: (s[3], -order.index(s[1])))[0]


class _Files:
    """The WordNet database files of a folder or a tar archive, by base name."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise KnowledgeGraphError(f"{self.path}: no such file or folder; fix: give WordNet 3.0's database folder "
                                      "(data.noun, index.sense, ...) or wordnet-3.0.tar.xz")
        self.members: dict[str, bytes] | None = None
        if self.path.is_file():
            try:
                with tarfile.open(self.path) as archive:
                    self.members = {Path(m.name).name: archive.extractfile(m).read()
                                    for m in archive.getmembers() if m.isfile()}
            except (tarfile.TarError, OSError, EOFError) as error:
                raise KnowledgeGraphError(f"{self.path}: not a readable tar archive ({error}); fix: give "
                                          "wordnet-3.0.tar.xz or the unpacked folder") from None

    def lines(self, name: str) -> Iterator[str]:
        if self.members is not None:
            if name not in self.members:
                raise KnowledgeGraphError(f"{self.path}: the archive holds no {name}; fix: give WordNet 3.0's files")
            yield from io.StringIO(self.members[name].decode("utf-8"))
            return
        file = self.path / name
        if not file.exists():
            raise KnowledgeGraphError(f"{file}: no such file; fix: give WordNet 3.0's database folder")
        with open(file, encoding="utf-8") as handle:
            yield from handle


def read_wordnet(path: str | os.PathLike) -> WordNet:
    """WordNet 3.0 from its database folder or archive (module docstring)."""
    files = _Files(path)
    lexnames = {}
    for line in files.lines("lexnames"):
        parts = line.split()
        if len(parts) >= 2:
            lexnames[int(parts[0])] = parts[1]
    synsets: list[str] = []
    synset_lex: list[str] = []
    pointers: list[tuple[str, str, str]] = []
    for pos, name in POS_FILES.items():
        for number, line in enumerate(files.lines(f"data.{name}"), 1):
            if line.startswith("  "):  # the licence header
                continue
            fields = line.split(" | ", 1)[0].split()
            try:
                offset, lex, n_words = fields[0], int(fields[1]), int(fields[3], 16)
                at = 4 + 2 * n_words
                n_pointers = int(fields[at])
                synset = f"{offset}-{pos}"
                synsets.append(synset)
                synset_lex.append(lexnames.get(lex, str(lex)))
                for k in range(n_pointers):
                    symbol, target, target_pos = fields[at + 1 + 4 * k: at + 4 + 4 * k]
                    pointers.append((synset, symbol, f"{target}-{'a' if target_pos == 's' else target_pos}"))
            except (IndexError, ValueError):
                raise KnowledgeGraphError(f"{path}: data.{name}:{number}: not a WordNet data line; fix: give "
                                          "WordNet 3.0's files unchanged (LF line endings)") from None
    index = {s: i for i, s in enumerate(synsets)}
    relations = sorted({symbol for _, symbol, _ in pointers})
    relation_id = {r: i for i, r in enumerate(relations)}
    triples = sorted({(index[h], relation_id[r], index[t]) for h, r, t in pointers if t in index})
    senses: dict[str, list[tuple[int, str, int, int]]] = {}
    sense_keys: dict[str, int] = {}
    for number, line in enumerate(files.lines("index.sense"), 1):
        parts = line.split()
        if len(parts) != 4:
            continue
        key, offset, sense_number, count = parts
        try:
            lemma, rest = key.split("%", 1)
            pos = _SS_TYPE[rest[0]]
            synset = index[f"{offset}-{pos}"]
        except (ValueError, KeyError, IndexError):
            raise KnowledgeGraphError(f"{path}: index.sense:{number}: sense key {key!r} names no synset of the data "
                                      "files; fix: give WordNet 3.0's files unchanged") from None
        sense_keys[key] = synset
        senses.setdefault(lemma, []).append((synset, pos, int(sense_number), int(count)))
    for entries in senses.values():
        entries.sort(key=lambda s: ("nvar".index(s[1]), s[2]))
    exceptions: dict[str, list[str]] = {}
    for name in POS_FILES.values():
        for line in files.lines(f"{name}.exc"):
            parts = line.split()
            if len(parts) >= 2:
                exceptions.setdefault(parts[0], []).extend(b for b in parts[1:] if b not in exceptions.get(parts[0], ()))
    return WordNet(synsets, synset_lex, np.asarray(triples, dtype=np.int64).reshape(-1, 3), relations, senses,
                   sense_keys, exceptions)


# --------------------------------------------------------------------------- TransE


@dataclass
class TransEVectors:
    """TransE tables: ``entities`` (E, d) for ``names`` (synset names), ``relations`` (R, d), the norm ``p``."""

    names: list[str]
    entities: np.ndarray
    relations: np.ndarray
    p: int = 1
    info: dict = field(default_factory=dict)

    def save(self, folder: str | os.PathLike) -> Path:
        folder = Path(folder)
        with atomic_directory(folder) as tmp:
            (tmp / "entities.txt").write_text("\n".join(self.names) + "\n", encoding="utf-8")
            save_file({"entities": np.ascontiguousarray(self.entities, dtype=np.float32),
                       "relations": np.ascontiguousarray(self.relations, dtype=np.float32)},
                      str(tmp / "transe.safetensors"))
            (tmp / "transe.json").write_text(json.dumps({"p": self.p, **self.info}, indent=1) + "\n", encoding="utf-8")
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike) -> TransEVectors:
        folder = Path(folder)
        needed = [folder / n for n in ("entities.txt", "transe.safetensors", "transe.json")]
        missing = [str(p) for p in needed if not p.exists()]
        if missing:
            raise KnowledgeGraphError(f"{', '.join(missing)}: missing; fix: give a folder written by "
                                      "knowledge_graph.TransEVectors.save (train_wordnet_transe)")
        names = folder.joinpath("entities.txt").read_text(encoding="utf-8").split()
        tables = load_file(str(needed[1]))
        info = json.loads(needed[2].read_text(encoding="utf-8"))
        entities, relations = tables["entities"], tables["relations"]
        if entities.shape[0] != len(names):
            raise KnowledgeGraphError(f"{needed[1]}: {entities.shape[0]} entity rows for {len(names)} names in "
                                      f"{needed[0]}; fix: write the folder again")
        for name, table in (("entities", entities), ("relations", relations)):
            problem = describe_non_finite(table)  # names the first (row, column)
            if problem:
                raise KnowledgeGraphError(f"{needed[1]}: {name} holds {problem}; fix: train TransE again")
        return cls(names, entities, relations, int(info.pop("p", 1)), info)


def transe_score(entities: np.ndarray, relations: np.ndarray, triples: np.ndarray, p: int = 1) -> np.ndarray:
    """TransE's plausibility ``f(h, r, t) = -||e_h + r_r - e_t||_p`` per triple (numpy; higher is better)."""
    diff = entities[triples[:, 0]] + relations[triples[:, 1]] - entities[triples[:, 2]]
    return -np.linalg.norm(diff, ord=p, axis=1)


def train_transe(triples: np.ndarray, num_entities: int, num_relations: int, *, dim: int = 100, epochs: int = 5,
                 batch_size: int = 4096, lr: float = 0.01, margin: float = 1.0, p: int = 1, seed: int = 0,
                 progress: bool = False) -> tuple[np.ndarray, np.ndarray, dict]:
    """TransE trained with PyKEEN's ``TransE`` model and sLCWA loop (one negative per positive: the head or
    the tail replaced by a uniform entity; margin ranking loss; entity vectors normalised before each
    step, as Bordes et al.). Returns (entities (E, dim), relations (R, dim), a record of the settings)."""
    try:
        from pykeen.losses import MarginRankingLoss
        from pykeen.models import TransE
        from pykeen.training import SLCWATrainingLoop
        from pykeen.triples import CoreTriplesFactory
    except ImportError as error:
        raise KnowledgeGraphError(f"TransE needs PyKEEN ({error}); fix: pip install -e '.[kg]'") from None
    mapped = torch.as_tensor(np.asarray(triples, dtype=np.int64))
    factory = CoreTriplesFactory(mapped_triples=mapped, num_entities=num_entities, num_relations=num_relations)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TransE(triples_factory=factory, embedding_dim=dim, scoring_fct_norm=p,
                       loss=MarginRankingLoss(margin=margin), random_seed=seed)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        loop = SLCWATrainingLoop(model=model, triples_factory=factory, optimizer=optimizer)
        losses = loop.train(triples_factory=factory, num_epochs=epochs, batch_size=batch_size, use_tqdm=progress,
                            use_tqdm_batch=False)
    entities = model.entity_representations[0]().detach().cpu().numpy().astype(np.float32)
    relations = model.relation_representations[0]().detach().cpu().numpy().astype(np.float32)
    record = {"library": "pykeen", "model": "TransE", "dim": dim, "epochs": epochs, "batch_size": batch_size,
              "lr": lr, "optimizer": "Adam", "margin": margin, "seed": seed, "negatives": "sLCWA basic (head or tail)",
              "losses": [float(x) for x in losses]}
    return entities, relations, record


def train_wordnet_transe(wordnet: str | os.PathLike | WordNet, out: str | os.PathLike, **options) -> TransEVectors:
    """TransE over all of WordNet's synsets and pointers, saved to ``out`` (``TransEVectors``)."""
    graph = wordnet if isinstance(wordnet, WordNet) else read_wordnet(wordnet)
    p = int(options.get("p", 1))
    entities, relations, record = train_transe(graph.triples, len(graph.synsets), len(graph.relations), **options)
    vectors = TransEVectors(graph.synsets, entities, relations, p,
                            {**record, "relations": graph.relations, "triples": int(len(graph.triples))})
    vectors.save(out)
    return vectors


# --------------------------------------------------------------------------- SemCor


@dataclass
class SenseSentence:
    """One SemCor sentence: its words (multi-word units split at ``_``) and the gold mentions as
    ``(first word, end word, synset index)``, end exclusive."""

    words: list[str]
    mentions: list[tuple[int, int, int]]


_WF = re.compile(r"<(wf|punc)([^>]*)>([^<]*)</(?:wf|punc)>")
_ATTRIBUTE = re.compile(r"(\w+)=(\S+)")


def read_semcor(path: str | os.PathLike, wordnet: WordNet) -> list[list[SenseSentence]]:
    """SemCor 3.0's documents (tagfiles ``br-*`` of a folder tree or of ``semcor3.0.tar.xz``) as sentences.

    A ``<wf>`` with ``lemma`` and ``lexsn`` is a gold mention of the synset of sense key ``lemma%lexsn``
    (the first of several ``;``-separated ones); one whose key WordNet lacks is left unlinked."""
    path = Path(path)
    if not path.exists():
        raise KnowledgeGraphError(f"{path}: no such file or folder; fix: give semcor3.0.tar.xz or its folder")
    texts: list[tuple[str, str]] = []
    if path.is_file():
        with tarfile.open(path) as archive:
            for member in sorted(archive.getmembers(), key=lambda m: m.name):
                if member.isfile() and "/tagfiles/" in member.name:
                    texts.append((member.name, archive.extractfile(member).read().decode("utf-8", "replace")))
    else:
        texts = [(str(p), p.read_text(encoding="utf-8", errors="replace"))
                 for p in sorted(path.rglob("*")) if p.is_file() and p.parent.name == "tagfiles"]
    documents = []
    for _name, text in texts:
        sentences = []
        for block in re.findall(r"<s [^>]*>(.*?)</s>", text, flags=re.S):
            words: list[str] = []
            mentions: list[tuple[int, int, int]] = []
            for _kind, attributes, surface in _WF.findall(block):
                parts = [w for w in surface.strip().split("_") if w]
                if not parts:
                    continue
                attrs = dict(_ATTRIBUTE.findall(attributes))
                start = len(words)
                words.extend(parts)
                if "lemma" in attrs and "lexsn" in attrs:
                    lemma = attrs["lemma"].split(";")[0].lower()
                    key = f"{lemma}%{attrs['lexsn'].split(';')[0]}"
                    if key in wordnet.sense_keys:
                        mentions.append((start, len(words), wordnet.sense_keys[key]))
            if words:
                sentences.append(SenseSentence(words, mentions))
        if sentences:
            documents.append(sentences)
    return documents


def write_semcor_corpus(documents: Sequence[Sequence[SenseSentence]], text: str | os.PathLike,
                        mentions: str | os.PathLike, wordnet: WordNet) -> None:
    """SemCor as a pretraining corpus (a document per tagfile, a sentence a line) and its gold mentions
    (JSON lines ``{"words": [...], "mentions": [[start, end, "OFFSET-P"], ...]}``), for
    ``--ernie-thu-mentions``."""
    with atomic_path(text) as tmp_text, atomic_path(mentions) as tmp_mentions:
        with open(tmp_text, "w", encoding="utf-8") as out_text, open(tmp_mentions, "w", encoding="utf-8") as out_m:
            for document in documents:
                for sentence in document:
                    out_text.write(" ".join(sentence.words) + "\n")
                    out_m.write(json.dumps({"words": sentence.words, "mentions": [
                        [s, e, wordnet.synsets[k]] for s, e, k in sentence.mentions]}) + "\n")
                out_text.write("\n")
