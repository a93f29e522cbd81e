"""ERNIE 1.0's knowledge masking (Sun et al. 2019, §3.2): where phrase and entity spans come from, and
the three-stage schedule basic -> phrase -> entity.

The paper: "a phrase is a small group of words or characters together acting as a conceptual unit";
"entities contain persons, locations, organizations, products" found by a named-entity tool; phrases
come from "lexical analysis and chunking tools". Training has three stages: basic-level masking
(for English a basic unit is a word: whole-word masking), then phrase-level masking, then
entity-level masking, each masking and predicting *all* units of a chosen phrase or entity.

Span sources, each ``(sentences: list[list[str]]) -> list[list[(start, end)]]`` (word ranges, end
exclusive):

- Phrases: base noun phrases from part-of-speech tags by a POS-pattern chunker
  (``noun_phrase_spans``: ``DET? (ADJ|NUM|ADV-before-ADJ)* (NOUN|PROPN)+`` over UD's UPOS, kept when two
  words or longer). The tags come from any tagger with ``predict(sentences) -> tags``: elmokit's
  ``SequenceTagger`` trained on UD (``elmokit tag``), or ``UnigramPosTagger`` fitted here from a
  CoNLL-U file in ~2 s (most frequent tag per word, suffix and shape back-off: 89.1% UPOS accuracy on
  UD EWT dev when fitted on its train set). Without either,
  ``content_word_phrase_spans`` is the stated heuristic: maximal runs of two
  or more words outside a closed list of English function words and punctuation.
- Entities: spans of BIO tags from a NER tagger (elmokit's ``SequenceTagger`` trained on CoNLL-2003),
  or the stated heuristic ``capitalised_entity_spans``: maximal runs of capitalised words, a run of one
  word at the start of a sentence excepted (a sentence-initial capital says nothing) and a
  sentence-initial function word left out.

Units of a stage (``knowledge_units``): the stage's spans, and every word outside them as a unit of
its own, so the 15% budget and 80/10/10 stay BERT's and a chosen phrase or entity is masked whole
(``masking.mask_phrases``); ERNIE's code likewise treats each word and each phrase/entity as one
segment to mask. A phrase that overlaps an earlier one is dropped.

The schedule (``ErnieSchedule``): the first ``basic_batches`` batches mask whole words, the next
``phrase_batches`` phrases, the rest entities. ``ErnieObjective.batches_done`` counts the batches
it has made; a resumed run must restore it (``state_dict`` / ``load_state_dict``).

Chinese (``ernie_language`` "zh", ``knowledge_zh``): the basic unit is a character, phrases are the
segmented corpus's words of 2+ characters, entities come from a cache of a character NER tagger's spans;
``ErnieObjective(chinese=ChineseUnits(...))`` masks over those units with the same budget and 80/10/10.
``ErnieSchedule.stages`` picks the stages run (``("basic",)``: character / whole-word masking throughout).

Deviations: ERNIE is Chinese, trained on heterogeneous corpora with a dialogue LM task (DLM) and NSP;
this objective has neither (the DLM and the corpus mix are ``dialogue``'s ``--objective ernie-dlm``).
Its chunker and NER tool are Baidu's; ours are the above.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from elmokit.errors import InputNotFound
from elmokit.pretraining.batching import ObjectiveLoss, chunks, collate, example_field
from elmokit.pretraining.knowledge_zh import ChineseUnits, EntityCache
from elmokit.pretraining.masking import BERT_RATES, MaskingRates, MaskingVocab, mask_phrases, mask_whole_words
from elmokit.pretraining.objectives import MaskedLMObjective
from elmokit.tasks.data import bio_spans
from elmokit.tasks.tagger.saved import SequenceTagger

Span = tuple[int, int]
SpanSource = Callable[[Sequence[Sequence[str]]], list[list[Span]]]
STAGES = ("basic", "phrase", "entity")

# --------------------------------------------------------------------------- phrases

_NP_LETTERS = {"DET": "D", "ADJ": "A", "NUM": "A", "NOUN": "N", "PROPN": "N", "ADV": "R"}
_NP_PATTERN = re.compile(r"D?(?:R?A)*N+")  # a base noun phrase over the letters above


def noun_phrase_spans(upos: Sequence[str], *, min_words: int = 2) -> list[Span]:
    """Base noun phrases of one sentence's UPOS tags: ``DET? (ADV? (ADJ|NUM))* (NOUN|PROPN)+``, longest
    match from left to right, of ``min_words`` words or more. [(start, end)] word ranges."""
    letters = "".join(_NP_LETTERS.get(tag, "x") for tag in upos)
    return [m.span() for m in _NP_PATTERN.finditer(letters) if m.end() - m.start() >= min_words]


FUNCTION_WORDS = frozenset("""a an the this that these those my your his her its our their some any no every each
all both either neither and or but nor so yet for of in on at to from by with about into onto over under after
before between through during without within upon against among i you he she it we they me him us them who whom
whose which what where when why how is am are was were be been being have has had do does did will would shall
should can could may might must not as if than then there here also very too just only""".split())


def content_word_phrase_spans(words: Sequence[str], *, min_words: int = 2) -> list[Span]:
    """The stated heuristic without a POS tagger: maximal runs of ``min_words`` or more words that are
    neither English function words (``FUNCTION_WORDS``, case-insensitive) nor punctuation."""
    spans, start = [], None
    for i, word in enumerate([*words, "."]):
        content = word.lower() not in FUNCTION_WORDS and any(c.isalnum() for c in word)
        if content and start is None:
            start = i
        elif not content and start is not None:
            if i - start >= min_words:
                spans.append((start, i))
            start = None
    return spans


class UnigramPosTagger:
    """The most frequent UPOS of each word in a tagged corpus; unseen words back off to the most
    frequent tag of their 3-letter suffix, then to a shape rule (digits NUM, capitalised PROPN,
    punctuation PUNCT, else NOUN). ``predict`` has ``SequenceTagger``'s signature."""

    def __init__(self, words: Mapping[str, str], suffixes: Mapping[str, str]) -> None:
        self.words, self.suffixes = dict(words), dict(suffixes)

    @classmethod
    def fit(cls, sentences: Sequence[Sequence[tuple[str, str]]]) -> UnigramPosTagger:
        by_word: dict[str, Counter] = defaultdict(Counter)
        by_suffix: dict[str, Counter] = defaultdict(Counter)
        for sentence in sentences:
            for word, tag in sentence:
                by_word[word][tag] += 1
                by_word[word.lower()][tag] += 1
                by_suffix[word.lower()[-3:]][tag] += 1
        best = {w: c.most_common(1)[0][0] for w, c in by_word.items()}
        return cls(best, {s: c.most_common(1)[0][0] for s, c in by_suffix.items()})

    @classmethod
    def from_conllu(cls, path: str | Path, *, limit: int | None = None) -> UnigramPosTagger:
        """Fit on the FORM and UPOS columns of a CoNLL-U file (multi-word token lines skipped)."""
        sentences, current = [], []
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line:
                    if current:
                        sentences.append(current)
                        current = []
                        if limit is not None and len(sentences) >= limit:
                            break
                    continue
                if line.startswith("#"):
                    continue
                columns = line.split("\t")
                if len(columns) != 10:
                    raise ValueError(f"{path}:{number}: a CoNLL-U token line has 10 tab-separated columns, got {len(columns)}")
                if "-" in columns[0] or "." in columns[0]:
                    continue
                current.append((columns[1], columns[3]))
        if current:
            sentences.append(current)
        return cls.fit(sentences)

    def tag(self, word: str) -> str:
        for key in (word, word.lower()):
            if key in self.words:
                return self.words[key]
        if any(c.isdigit() for c in word):
            return "NUM"
        if not any(c.isalnum() for c in word):
            return "PUNCT"
        if word[:1].isupper():
            return "PROPN"
        return self.suffixes.get(word.lower()[-3:], "NOUN")

    def predict(self, sentences: Sequence[Sequence[str]], **_) -> list[list[str]]:
        return [[self.tag(w) for w in sentence] for sentence in sentences]


# --------------------------------------------------------------------------- entities


_SENTENCE_END = frozenset({".", "!", "?"})


def capitalised_entity_spans(words: Sequence[str]) -> list[Span]:
    """The stated heuristic without a NER tagger: maximal runs of capitalised words; at the start of a
    sentence (after ``. ! ?`` or at the start) a function word ("The", "Then") is left out of the run
    and a one-word run is not an entity."""
    spans, start = [], None
    for i, word in enumerate([*words, "."]):
        capital = word[:1].isupper()
        if capital and start is None:
            start = i
        elif not capital and start is not None:
            initial = start == 0 or words[start - 1] in _SENTENCE_END
            if initial and words[start].lower() in FUNCTION_WORDS:  # "The", "Then" opening a sentence
                start, initial = start + 1, False
            if start < i and not (initial and i - start == 1):
                spans.append((start, i))
            start = None
    return spans


# --------------------------------------------------------------------------- sources over a tagger


def tagger_phrases(tagger) -> SpanSource:
    """Noun phrases from a POS tagger with ``predict(sentences) -> UPOS tags``."""
    def source(sentences):
        return [noun_phrase_spans(tags) for tags in tagger.predict([list(s) for s in sentences])]
    return source


def tagger_entities(tagger) -> SpanSource:
    """Entities from a NER tagger with ``predict(sentences) -> BIO tags``."""
    def source(sentences):
        return [[(s, e) for s, e, _ in bio_spans(tags)] for tags in tagger.predict([list(s) for s in sentences])]
    return source


def heuristic_phrases(sentences) -> list[list[Span]]:
    return [content_word_phrase_spans(s) for s in sentences]


def heuristic_entities(sentences) -> list[list[Span]]:
    return [capitalised_entity_spans(s) for s in sentences]


def knowledge_units(n_words: int, spans: Sequence[Span]) -> list[Span]:
    """The masking units of a phrase or entity stage: the spans (an overlapping later one dropped, an
    empty or out-of-range one refused) and every other word on its own, in word order."""
    covered = np.zeros(n_words, dtype=bool)
    kept = []
    for start, end in sorted(spans):
        if not 0 <= start < end <= n_words:
            raise ValueError(f"span ({start}, {end}) is not a word range of a sentence of {n_words} words")
        if covered[start:end].any():
            continue
        covered[start:end] = True
        kept.append((start, end))
    kept += [(w, w + 1) for w in range(n_words) if not covered[w]]
    return sorted(kept)


def words_from_pieces(tokenizer, ids, word_ids) -> list[str]:
    """The words of an encoded sequence, spelled back from its pieces (WordPiece ``##`` continuations,
    byte-level BPE ``Ġ`` prefixes): what the span sources read when the corpus kept only ids."""
    tokens = tokenizer.convert_ids_to_tokens([int(i) for i in ids])
    words: list[str] = []
    last = None
    for token, word in zip(tokens, word_ids):
        if word is None or (isinstance(word, (int, np.integer)) and word < 0):
            last = None
            continue
        piece = token[2:] if token.startswith("##") else token.lstrip("Ġ")
        if word == last:
            words[-1] += piece
        else:
            words.append(piece)
        last = word
    return words


# --------------------------------------------------------------------------- the objective


@dataclass(frozen=True)
class ErnieSchedule:
    """Stage of batch ``k``: basic for k < basic_batches, then phrase for phrase_batches, then entity.

    ``stages`` are the stages run, in this order (a subsequence of ``STAGES``); one left out lasts no
    batch, and the last one runs to the end: ``("basic",)`` is basic (character / whole-word) masking
    throughout, the control of a knowledge-masking comparison."""

    basic_batches: int
    phrase_batches: int
    stages: tuple[str, ...] = STAGES

    def __post_init__(self) -> None:
        stages = tuple(self.stages)
        if not stages or any(s not in STAGES for s in stages) or list(stages) != sorted(stages, key=STAGES.index) \
                or len(set(stages)) != len(stages):
            raise ValueError(f"ERNIE stages {stages!r}: give some of {', '.join(STAGES)}, each once, in that order")
        object.__setattr__(self, "stages", stages)

    def stage(self, batch_index: int) -> str:
        lengths = {"basic": self.basic_batches, "phrase": self.phrase_batches}
        for name in self.stages[:-1]:
            if batch_index < lengths[name]:
                return name
            batch_index -= lengths[name]
        return self.stages[-1]

    @classmethod
    def thirds(cls, total_batches: int) -> ErnieSchedule:
        third = max(total_batches // 3, 1)
        return cls(third, third)


class ErnieObjective:
    """ERNIE 1.0 knowledge masking with the three-stage schedule (see the module docstring).

    Examples: ``input_ids`` + ``word_ids`` of one segment (words numbered in order), and optionally
    ``phrases`` / ``entities`` (word ranges). Missing spans are computed from the words
    (``words_from_pieces`` with ``tokenizer``) by ``phrase_source`` / ``entity_source``.
    Model: family 'bert-mlm'. The loss is BERT's MLM on the masked positions."""

    name = "ernie"

    def __init__(self, vocab: MaskingVocab, *, pad_id: int, schedule: ErnieSchedule, tokenizer=None,
                 phrase_source: SpanSource = heuristic_phrases, entity_source: SpanSource = heuristic_entities,
                 rates: MaskingRates = BERT_RATES, chinese=None) -> None:
        self.vocab, self.pad_id, self.schedule, self.tokenizer = vocab, pad_id, schedule, tokenizer
        self.chinese = chinese  # a knowledge_zh.ChineseUnits: characters / jieba words / cached entities
        self.sources = {"phrase": phrase_source, "entity": entity_source}
        self.rates = rates
        self.mlm = MaskedLMObjective("ernie", vocab, pad_id=pad_id, scheme="phrases", rates=rates)
        self.batches_done = 0

    def modules(self) -> dict[str, nn.Module]:
        return {}

    def state_dict(self) -> dict:
        return {"batches_done": self.batches_done}

    def load_state_dict(self, state: Mapping) -> None:
        self.batches_done = int(state["batches_done"])

    def spans(self, example, stage: str) -> list[Span]:
        key = "phrases" if stage == "phrase" else "entities"
        given = example_field(example, key)
        if given is not None:
            return [tuple(s) for s in given]
        if self.tokenizer is None:
            raise ValueError(f"example has no {key!r} and the objective has no tokenizer to read its words")
        words = words_from_pieces(self.tokenizer, example_field(example, "input_ids"), example_field(example, "word_ids"))
        return self.sources[stage]([words])[0]

    def mask(self, example, stage: str, rng: np.random.Generator):
        ids, word_ids = example_field(example, "input_ids"), example_field(example, "word_ids")
        if self.chinese is not None:  # every character a unit; phrases and entities as ranges of characters
            token_word_ids, spans = self.chinese.units(ids, word_ids, stage)
            if stage == "basic":
                return mask_whole_words(ids, token_word_ids, self.vocab, rng, rates=self.rates)
            n_units = sum(w is not None for w in token_word_ids)
            return mask_phrases(ids, token_word_ids, knowledge_units(n_units, spans), self.vocab, rng, rates=self.rates)
        if stage == "basic":
            return mask_whole_words(ids, word_ids, self.vocab, rng, rates=self.rates)
        n_words = len({w for w in word_ids if w is not None and w >= 0})
        return mask_phrases(ids, word_ids, knowledge_units(n_words, self.spans(example, stage)), self.vocab, rng,
                            rates=self.rates)

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        """BERT-style batches (input_ids, labels, attention_mask (B, T)) plus ``stage`` () 0/1/2."""
        for chunk in chunks(examples, batch_size):
            stage = self.schedule.stage(self.batches_done)
            rows = []
            for e in chunk:
                masked = self.mask(e, stage, rng)
                rows.append({"input_ids": masked.input_ids, "labels": masked.labels})
            batch = collate(rows, pad_id=self.pad_id)
            batch["stage"] = torch.tensor(STAGES.index(stage))
            self.batches_done += 1
            yield batch

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss:
        out = self.mlm.loss(model, batch)
        out.parts["stage"] = float(batch["stage"])
        return out


def load_tagger(path: str | Path):
    """A tagger for the span sources: a CoNLL-U file (fits ``UnigramPosTagger``) or an elmokit tagger folder."""
    path = Path(path)
    if path.is_file() and path.suffix in (".conllu", ".conll"):
        return UnigramPosTagger.from_conllu(path)
    if path.is_dir():
        return SequenceTagger.load(path)
    raise InputNotFound(f"{path}: not a CoNLL-U file (.conllu) nor an elmokit tagger folder")


LANGUAGES = ("en", "zh")


def ernie_from_options(tokenizer, options: Mapping) -> ErnieObjective:
    """The ``elmokit pretrain --objective ernie`` set-up. options:

    - ``ernie_language``: "en" (default; words are the corpus's words, phrases and entities from the
      sources below) or "zh" (``knowledge_zh``: characters, jieba words of the segmented corpus, entities
      from the cache ``ernie_entities``);
    - ``ernie_stages``: the stages run, a subsequence of basic, phrase, entity (default: all three);
    - ``max_tokens``: the examples' length (zh: where the corpus reader cuts a long sentence into windows);
    - ``ernie_stage_batches``: batches of each stage but the last (an int), or (basic, phrase); default:
      thirds of ``max_steps`` (3 x 1000 batches without it);
    - ``pos_tagger`` (en: CoNLL-U file or tagger folder; default: the content-word heuristic);
    - ``ner_tagger`` (en: tagger folder; default: capitalisation) or ``ernie_entities`` (en: a tagger folder;
      zh: an entity cache of ``knowledge_zh.tag_entity_cache``, needed by its entity stage)."""
    language = options.get("ernie_language") or "en"
    if language not in LANGUAGES:
        raise ValueError(f"ERNIE language {language!r}: use one of {', '.join(LANGUAGES)}")
    stages = tuple(options.get("ernie_stages") or STAGES)
    per_stage = options.get("ernie_stage_batches")
    if per_stage is None:
        schedule = ErnieSchedule.thirds(int(options.get("max_steps") or 3000))
        schedule = ErnieSchedule(schedule.basic_batches, schedule.phrase_batches, stages)
    elif isinstance(per_stage, (int, np.integer)):
        schedule = ErnieSchedule(int(per_stage), int(per_stage), stages)
    else:
        schedule = ErnieSchedule(int(per_stage[0]), int(per_stage[1]), stages)
    vocab = MaskingVocab.from_tokenizer(tokenizer)
    entities = options.get("ernie_entities") or options.get("ner_tagger")
    if language == "zh":
        if options.get("pos_tagger"):
            raise ValueError("Chinese ERNIE's phrases are the segmented corpus's words; it takes no POS tagger")
        if "entity" in stages and not entities:
            raise ValueError("Chinese ERNIE's entity stage needs an entity cache (--ernie-entities FILE, written by "
                             "knowledge_zh.tag_entity_cache); or leave the entity stage out (--ernie-stages)")
        window = int(options["max_tokens"]) - 2 if options.get("max_tokens") else None  # segments' capacity
        cache = EntityCache.from_file(entities, tokenizer, window=window) if entities and "entity" in stages else None
        return ErnieObjective(vocab, pad_id=tokenizer.pad_token_id, schedule=schedule, tokenizer=tokenizer,
                              chinese=ChineseUnits(vocab, cache))
    phrases = tagger_phrases(load_tagger(options["pos_tagger"])) if options.get("pos_tagger") else heuristic_phrases
    entity_source = tagger_entities(load_tagger(entities)) if entities else heuristic_entities
    return ErnieObjective(vocab, pad_id=tokenizer.pad_token_id, schedule=schedule,
                          tokenizer=tokenizer, phrase_source=phrases, entity_source=entity_source)
