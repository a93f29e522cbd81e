"""Nearest-neighbour word sense disambiguation per layer (Peters et al. 2018, section 5.3, Table 5).

For one layer j of a frozen Representation:

* a sense's vector is the mean of layer j's vectors of every SemCor occurrence tagged with it
  (a multi-word occurrence contributes the mean of its tokens' vectors);
* a test instance (lemma, POS) takes, among the senses of that lemma and POS seen in SemCor,
  the one whose vector has the highest cosine with the instance's vector (1-nearest neighbour);
* a lemma + POS never seen in SemCor backs off to its first WordNet 3.0 sense (the most
  frequent sense baseline, from ``index.sense``).

Scoring is Raganato et al. (2017)'s: precision = correct / answered, recall = correct / gold
instances, F1; an answer is correct when it is any of the instance's gold keys.

Data: the evaluation framework of Raganato et al. (``<name>.data.xml`` + ``<name>.gold.key.txt``;
ALL = 7,253 instances), SemCor 3.0 as the TSV of ``../shared/data/wsd/semcor30.tsv`` (multi-word
tokens joined by ``_`` are split into their words for embedding), WordNet 3.0 as a folder with
``index.sense`` or the ``wordnet-3.0.tar.xz`` archive. Deviation, stated: this SemCor copy keeps
~3% more annotations than the framework's ``semcor.data.xml`` (see the data's SOURCE.txt).
"""

from __future__ import annotations

import os
import tarfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

import numpy as np

from elmokit.errors import InputNotFound, UserError
from elmokit.features import embed_in_chunks

# WordNet sense key ss_type -> the framework's POS (5 = adjective satellite).
SS_TYPE_POS = {"1": "NOUN", "2": "VERB", "3": "ADJ", "4": "ADV", "5": "ADJ"}


class WsdDataError(UserError):
    """A malformed WSD data file; the message names the file and line."""


@dataclass
class Occurrence:
    """One sense-annotated (or to-be-disambiguated) word: tokens ``positions`` of a sentence."""

    sentence: int
    positions: list[int]
    lemma: str
    pos: str  # NOUN, VERB, ADJ, ADV
    keys: tuple[str, ...] = ()  # gold sense keys (SemCor); empty for evaluation instances
    id: str | None = None  # the framework's instance id


@dataclass
class WsdCorpus:
    sentences: list[list[str]] = field(default_factory=list)
    occurrences: list[Occurrence] = field(default_factory=list)


def sense_key_lemma_pos(key: str) -> tuple[str, str]:
    """``'bank%1:14:00::'`` -> ``('bank', 'NOUN')``."""
    lemma, _, lexsense = key.partition("%")
    pos = SS_TYPE_POS.get(lexsense[:1])
    if not lemma or pos is None:
        raise ValueError(f"not a WordNet sense key: {key!r}")
    return lemma.lower(), pos


# ---------------------------------------------------------------------- readers
def read_raganato_xml(path: str | os.PathLike) -> WsdCorpus:
    """Sentences (``wf`` and ``instance`` tokens, an instance's text split on spaces) and instances."""
    corpus = WsdCorpus()
    state = {"tokens": None, "element": None, "text": []}
    parser = expat.ParserCreate("UTF-8")

    def where() -> str:
        return f"{path}:{parser.CurrentLineNumber}"

    def start(name, attributes):
        if name == "sentence":
            state["tokens"] = []
        elif name in ("wf", "instance"):
            if state["tokens"] is None:
                raise WsdDataError(f"{where()}: <{name}> outside a <sentence>")
            if name == "instance":
                missing = [a for a in ("id", "lemma", "pos") if not attributes.get(a)]
                if missing:
                    raise WsdDataError(f"{where()}: <instance> without {', '.join(missing)}")
            state["element"], state["attributes"], state["text"] = name, attributes, []

    def characters(data):
        if state["element"] is not None:
            state["text"].append(data)

    def end(name):
        if name == "sentence":
            corpus.sentences.append(state["tokens"])
            state["tokens"] = None
        elif name in ("wf", "instance"):
            words = "".join(state["text"]).split()
            if not words:
                raise WsdDataError(f"{where()}: empty <{name}>")
            tokens = state["tokens"]
            if name == "instance":
                attributes = state["attributes"]
                corpus.occurrences.append(Occurrence(
                    sentence=len(corpus.sentences), positions=list(range(len(tokens), len(tokens) + len(words))),
                    lemma=attributes["lemma"].lower(), pos=attributes["pos"], id=attributes["id"]))
            tokens.extend(words)
            state["element"] = None

    parser.StartElementHandler, parser.EndElementHandler, parser.CharacterDataHandler = start, end, characters
    try:
        with open(path, "rb") as handle:
            parser.ParseFile(handle)
    except expat.ExpatError as error:
        raise WsdDataError(f"{path}:{error.lineno}: malformed XML: {expat.ErrorString(error.code)}") from None
    return corpus


def read_gold_keys(path: str | os.PathLike) -> dict[str, set[str]]:
    """``instance_id key [key ...]`` per line -> {id: {keys}}."""
    gold: dict[str, set[str]] = {}
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 2:
                raise WsdDataError(f"{path}:{line_number}: expected 'instance_id sense_key [sense_key ...]', "
                                   f"found {line.strip()!r}")
            if fields[0] in gold:
                raise WsdDataError(f"{path}:{line_number}: instance {fields[0]!r} listed twice")
            for key in fields[1:]:
                try:
                    sense_key_lemma_pos(key)
                except ValueError as error:
                    raise WsdDataError(f"{path}:{line_number}: {error}") from None
            gold[fields[0]] = set(fields[1:])
    return gold


def read_semcor_tsv(path: str | os.PathLike, *, max_sentences: int | None = None) -> WsdCorpus:
    """SemCor as ``idx word lemma pos keys synsets`` lines, ``#`` comments, blank line between sentences.

    A token's keys are ``|``-separated (``_`` = none); ``took_place`` is embedded as ``took place``.
    Each key becomes its own occurrence (a token tagged with two senses counts for both).
    """
    corpus = WsdCorpus()
    tokens: list[str] = []

    def close():
        nonlocal tokens
        if tokens:
            corpus.sentences.append(tokens)
        tokens = []

    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                close()
                if max_sentences is not None and len(corpus.sentences) >= max_sentences:
                    break
                continue
            if line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 6:
                raise WsdDataError(f"{path}:{line_number}: expected 6 tab-separated fields, found {len(fields)}")
            words = [w for w in fields[1].split("_") if w] or [fields[1]]
            positions = list(range(len(tokens), len(tokens) + len(words)))
            if fields[4] != "_":
                for key in fields[4].split("|"):
                    try:
                        lemma, pos = sense_key_lemma_pos(key)
                    except ValueError as error:
                        raise WsdDataError(f"{path}:{line_number}: {error}") from None
                    corpus.occurrences.append(Occurrence(len(corpus.sentences), positions, lemma, pos, keys=(key,)))
            tokens.extend(words)
    close()
    return corpus


def read_first_senses(wordnet: str | os.PathLike) -> dict[tuple[str, str], str]:
    """{(lemma, POS): the key of WordNet sense number 1} from ``index.sense``.

    ``wordnet``: the ``index.sense`` file, a folder holding it, or the ``wordnet-3.0.tar.xz`` archive.
    Lines are ``sense_key synset_offset sense_number tag_count``.
    """
    wordnet = Path(wordnet)
    if wordnet.is_dir():
        wordnet = wordnet / "index.sense"
    if not wordnet.exists():
        raise InputNotFound(f"{wordnet}: no such file; fix: give WordNet 3.0's index.sense, its folder, "
                            f"or wordnet-3.0.tar.xz")
    if wordnet.name.endswith((".tar.xz", ".tar.gz", ".tar", ".tgz")):
        with tarfile.open(wordnet) as archive:
            member = next((m for m in archive.getmembers() if m.name.endswith("/index.sense")), None)
            if member is None:
                raise InputNotFound(f"{wordnet}: the archive holds no index.sense")
            lines = archive.extractfile(member).read().decode("utf-8").splitlines()
        source = f"{wordnet}!{member.name}"
    else:
        lines = wordnet.read_text(encoding="utf-8").splitlines()
        source = str(wordnet)
    first: dict[tuple[str, str], str] = {}
    for line_number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 4 or not fields[2].isdigit():
            raise WsdDataError(f"{source}:{line_number}: expected 'sense_key offset sense_number tag_count'")
        if fields[2] == "1":
            first.setdefault(sense_key_lemma_pos(fields[0]), fields[0])
    return first


# ---------------------------------------------------------------------- the method
def _occurrence_vectors(rep, corpus: WsdCorpus, occurrences: Sequence[Occurrence], *, progress=None,
                        description="embedding") -> Iterable[tuple[int, np.ndarray]]:
    """Yield (occurrence index, (L, D) float64 mean of its tokens' vectors), embedding only the
    sentences that hold an occurrence."""
    by_sentence: dict[int, list[int]] = defaultdict(list)
    for index, occurrence in enumerate(occurrences):
        by_sentence[occurrence.sentence].append(index)
    sentence_ids = sorted(by_sentence)
    sentences = [corpus.sentences[s] for s in sentence_ids]
    for start, arrays in embed_in_chunks(rep, sentences, progress=progress, description=description):
        for offset, array in enumerate(arrays):
            for index in by_sentence[sentence_ids[start + offset]]:
                yield index, array[:, occurrences[index].positions].astype(np.float64).mean(axis=1)


def build_sense_vectors(rep, semcor: WsdCorpus, *, keep: set[tuple[str, str]] | None = None,
                        progress=None) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """({sense key: (L, D) mean vector}, {sense key: occurrences}) from a sense-tagged corpus.

    ``keep``: only senses of these (lemma, POS) (the evaluation's), to bound memory and time;
    the vectors of the kept senses are the same either way.
    """
    occurrences = [o for o in semcor.occurrences if keep is None or (o.lemma, o.pos) in keep]
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = defaultdict(int)
    for index, vector in _occurrence_vectors(rep, semcor, occurrences, progress=progress,
                                             description="embedding SemCor"):
        for key in occurrences[index].keys:
            if key in sums:
                sums[key] += vector
            else:
                sums[key] = vector.copy()
            counts[key] += 1
    return {key: total / counts[key] for key, total in sums.items()}, dict(counts)


def disambiguate(
    rep, corpus: WsdCorpus, sense_vectors: dict[str, np.ndarray], first_senses: dict[tuple[str, str], str], *,
    progress=None,
) -> dict[str, object]:
    """Predictions for every instance of ``corpus``: ``{"layers": [{id: key}], "mfs": {id: key},
    "backed_off": n}``. Instances whose lemma+POS has no sense vector take the WordNet first sense
    on every layer; those unknown to WordNet too are left unanswered."""
    candidates: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key in sorted(sense_vectors):
        candidates[sense_key_lemma_pos(key)].append(key)
    # per (lemma, POS): candidate matrix (L, S, D), unit length rows
    unit = {}
    for lemma_pos, keys in candidates.items():
        matrix = np.stack([sense_vectors[k] for k in keys], axis=1)  # (L, S, D)
        unit[lemma_pos] = matrix / np.maximum(np.linalg.norm(matrix, axis=2, keepdims=True), 1e-12)
    layers: list[dict[str, str]] = [{} for _ in range(rep.num_layers)]
    mfs: dict[str, str] = {}
    backed_off = 0
    instances = corpus.occurrences
    needs_vector = [o for o in instances if (o.lemma, o.pos) in candidates]
    for o in instances:
        first = first_senses.get((o.lemma, o.pos))
        if first is not None:
            mfs[o.id] = first
        if (o.lemma, o.pos) not in candidates:
            backed_off += 1
            if first is not None:
                for layer in layers:
                    layer[o.id] = first
    for index, vector in _occurrence_vectors(rep, corpus, needs_vector, progress=progress,
                                             description="embedding test"):
        o = needs_vector[index]
        keys = candidates[(o.lemma, o.pos)]
        query = vector / np.maximum(np.linalg.norm(vector, axis=1, keepdims=True), 1e-12)  # (L, D)
        cosines = np.einsum("lsd,ld->ls", unit[(o.lemma, o.pos)], query)  # (L, S)
        for layer, best in enumerate(cosines.argmax(axis=1)):
            layers[layer][o.id] = keys[best]
    return {"layers": layers, "mfs": mfs, "backed_off": backed_off}


def score(predictions: dict[str, str], gold: dict[str, set[str]]) -> dict[str, float]:
    """Raganato's scorer: P = correct/answered, R = correct/gold instances, F1 (percent)."""
    answered = [i for i in predictions if i in gold]
    correct = sum(predictions[i] in gold[i] for i in answered)
    precision = 100 * correct / len(answered) if answered else 0.0
    recall = 100 * correct / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "correct": correct, "answered": len(answered),
            "instances": len(gold)}


def evaluate_wsd(rep, semcor: WsdCorpus, test: WsdCorpus, gold: dict[str, set[str]],
                 first_senses: dict[tuple[str, str], str], *, progress=None) -> dict:
    """Everything of Table 5 for one representation, JSON-ready."""
    missing = [o.id for o in test.occurrences if o.id not in gold]
    if missing:
        raise WsdDataError(f"{len(missing)} instances have no gold key, e.g. {missing[0]!r}")
    keep = {(o.lemma, o.pos) for o in test.occurrences}
    sense_vectors, counts = build_sense_vectors(rep, semcor, keep=keep, progress=progress)
    predictions = disambiguate(rep, test, sense_vectors, first_senses, progress=progress)
    return {
        "representation": rep.name,
        "num_layers": rep.num_layers,
        "dim": rep.dim,
        "instances": len(test.occurrences),
        "semcor_sentences": len(semcor.sentences),
        "senses_with_vectors": len(sense_vectors),
        "backed_off_to_first_sense": predictions["backed_off"],
        "layers": [{"layer": j, **score(p, gold)} for j, p in enumerate(predictions["layers"])],
        "wordnet_first_sense": score(predictions["mfs"], gold),
    }


def format_wsd_table(result: dict, test_name: str = "ALL") -> str:
    lines = [f"1-NN WSD on {result['representation']}: {test_name}, {result['instances']} instances, "
             f"{result['senses_with_vectors']} SemCor senses, {result['backed_off_to_first_sense']} backed off "
             f"to the WordNet first sense",
             f"{'':>22}  {'P':>6}  {'R':>6}  {'F1':>6}"]
    for row in result["layers"]:
        lines.append(f"{'layer ' + str(row['layer']):>22}  {row['precision']:>6.2f}  {row['recall']:>6.2f}  "
                     f"{row['f1']:>6.2f}")
    mfs = result["wordnet_first_sense"]
    lines.append(f"{'WordNet first sense':>22}  {mfs['precision']:>6.2f}  {mfs['recall']:>6.2f}  {mfs['f1']:>6.2f}")
    lines.append("paper (Table 5, ALL, F1): biLM first layer 67.4, second layer 69.0; WordNet 1st sense 65.9")
    return "\n".join(lines)
