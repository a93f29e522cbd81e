"""ERNIE 1.0's Dialogue Language Model and heterogeneous corpus (Sun et al. 2019, §3.3-3.4), on dialogue
extracted from the quoted exchanges of novels.

**Extraction** (``extract_dialogues``: the paragraphs of one document -> its dialogues). Novels mark speech
with quotation marks and give each new speaker a new paragraph; the rule follows that convention:

- Quote style, per document: the primary quotation mark is double (straight ``"`` or curly “ ”) or single
  (curly ‘ ’ or straight ``'``), whichever opens more paragraphs (``quote_style``); the other kind inside a
  quote is a nested quote and stays part of the utterance.
- Quotes (``scan_quotes``): a straight double quote toggles; “ opens and ” closes. In single style ‘ always
  opens, a straight ``'`` opens after the paragraph start, a space or an opening bracket/dash when a
  non-space follows; ’ or ``'`` closes when a non-space precedes it and no letter or digit follows (so
  "don’t" and "’tis" are apostrophes; a plural possessive "the boys’ hats" is misread as a closing quote).
  An opener inside an open double quote means the earlier one was never closed: its text is dropped.
- An utterance is a closed quote of 3+ words, or of 1-2 words ending in ``. , ! ? ; :`` or a dash (so scare
  quotes and titles, 'the "Times"', are not speech).
- A quote still open at the end of a paragraph, its text ending a sentence (``. ! ?`` or a dash), continues
  when the next paragraph opens with a quote mark (the multi-paragraph speech convention): one utterance,
  one speaker. Otherwise it is unmatched and dropped.
- A paragraph with at least one utterance is a speech paragraph, unless its narration (words outside the
  quotes) is longer than 30 words and than its speech: then it is a story that quotes (fairy tales tell
  whole exchanges inside narrative paragraphs) and counts as narration; so does a paragraph where two quotes
  follow each other with nothing between them ('‘Whither away, Hans?’ ‘To Gretel.’': two speakers in one
  paragraph, against the convention). **A dialogue is a maximal run of
  consecutive speech paragraphs**, of at least two (two speakers); a paragraph of narration only, or the
  end of the document, ends it. Within a dialogue each new paragraph is a new speaker (speakers alternate
  0, 1, 0, ...; a continued quote keeps its speaker), and each utterance is one turn: two quotes of one
  paragraph ('"Yes," said he. "I will go."') are two consecutive turns of one speaker, unless the
  narration between them ends with a comma and the first does not end a sentence ('"To the mill," said
  Mary, "where I work."'): that is one sentence broken by its tag, one utterance.

**DLM sequences** (``dlm_windows``, ``dialogue_sequence``). Every three consecutive turns of a dialogue
that are not all one speaker's form a window; a turn's role is Q when its speaker is the window's first
speaker, else R, so the windows are QRQ, QRR or QQR (the paper's examples). The input is
``[CLS] t1 [SEP] t2 [SEP] t3 [SEP]``; its dialogue embedding (the role, in place of BERT's segment id:
Q = 0, R = 1, through the model's token-type embeddings) gives [CLS] the first turn's role and each turn's
[SEP] its turn's role (the paper's Figure 3). A fake sequence (probability ``fake_rate``) replaces one of
the three turns, chosen uniformly, by an utterance of another dialogue, drawn uniformly from all
utterances; the model judges real (0) or fake (1) from [CLS] (``DialogueHead``). Turns are cut from their
ends, longest first, to fit ``max_tokens``.

**The heterogeneous corpus** (``SourceMix``). Named sources with weights: ``text`` is the run's corpus
stream (``segments`` of the books, the Bible, ...), ``dialogue`` the DLM windows of the dialogue files, and
any other name an in-memory pool of ``segments`` from its files. Row ``b`` of batch ``k`` takes its source,
its window or pool entry and its fake draw from a generator seeded by ``(seed, k)``: a pure function of
the step; masking draws from the run's saved masking generator. A text row uses the stream's example at
that position; a row given to another source leaves that stream example unused.

**The objective** (``DialogueObjective``): every row is masked with ERNIE's knowledge masking at the
current stage (``knowledge.ErnieObjective.mask``: basic -> phrase -> entity by batch count; on a dialogue
row the phrase and entity spans are found over its three turns' words); loss = the MLM mean over the
masked tokens of all rows + the real/fake cross-entropy mean over the dialogue rows. Model: family
'bert-mlm' (two token types: the roles). ``batches_done`` and a digest of the pools are checkpointed. On
several ranks each rank's loss is weighted by its share of the MLM targets (``run``), so the DLM term is
close to, not equal to, one process's (as BERT's NSP).

Deviations from the paper: ERNIE's dialogue is Baidu Tieba threads (Chinese), whose roles are post and
reply; ours are quoted speech in English novels, where the speaker is inferred by the paragraph
convention, not known, and a three-speaker exchange is read as two. The paper does not give the fake
rate or which turn is replaced; we replace one turn of three, at 50% by default. The heterogeneous
corpus is Wikipedia, Baike, news and Tieba (21M, 51M, 47M, 54M sentences: dialogue ~31%); ours is
books and the Bible for text. Pools other than the stream are drawn with replacement, not in epochs.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from elmokit.errors import UserError
from elmokit.pretraining.batching import ObjectiveLoss, chunks, collate, example_field
from elmokit.pretraining.corpus import (
    SpecialIds,
    encode_document,
    read_documents,
    read_paragraph_documents,
    segments,
    split_sentences,
)
from elmokit.pretraining.heads import IGNORE_INDEX, masked_lm_loss
from elmokit.pretraining.knowledge import STAGES, ErnieObjective
from elmokit.text.corpus import expand_patterns
from elmokit.text.subword_tokenizers import encode_words

logger = logging.getLogger(__name__)

Q, R = 0, 1  # the dialogue embedding's ids (the model's token types)
ROLE_NAMES = "QR"

# --------------------------------------------------------------------------- quotes

_DOUBLE_OPEN, _DOUBLE_CLOSE = "\u201c", "\u201d"
_SINGLE_OPEN, _SINGLE_CLOSE = "\u2018", "\u2019"
_OPENS = {"double": ('"', _DOUBLE_OPEN), "single": ("'", _SINGLE_OPEN)}
_SPEECH_END = re.compile(r"[.,!?;:\u2014\u3002\uff0c\uff01\uff1f\uff1b\uff1a\u2026-]$")  # full-width forms too
_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"[.!?\u2014\u3002\uff01\uff1f\u2026-]$")


def quote_style(paragraphs: Sequence[str]) -> str:
    """'double' or 'single': the kind of quotation mark that opens more of the paragraphs (double on a tie)."""
    double = sum(p.lstrip()[:1] in _OPENS["double"] for p in paragraphs)
    single = sum(p.lstrip()[:1] in _OPENS["single"] for p in paragraphs)
    return "single" if single > double else "double"


def _opens_single(text: str, i: int) -> bool:
    c = text[i]
    if c == _SINGLE_OPEN:
        return True
    if c != "'":
        return False
    before = text[i - 1] if i > 0 else " "
    after = text[i + 1] if i + 1 < len(text) else " "
    return (before.isspace() or before in "([\u2014-") and not after.isspace()


def _closes_single(text: str, i: int) -> bool:
    if text[i] not in ("'", _SINGLE_CLOSE) or i == 0 or text[i - 1].isspace():
        return False
    after = text[i + 1] if i + 1 < len(text) else " "
    return not after.isalnum()


@dataclass
class ScannedParagraph:
    """quotes: the closed quotes' texts, in order; ``continued``: the first one continues a quote left open by
    the previous paragraph; ``open_tail``: the text of a quote still open at the paragraph's end (or None)."""

    quotes: list[str]
    continued: bool
    open_tail: str | None
    narration_words: int = 0  # words outside the quotes
    adjacent: bool = False  # two quotes with nothing between them: two speakers in one paragraph


def scan_quotes(paragraph: str, style: str, *, inside: bool = False) -> ScannedParagraph:
    """The quotes of one paragraph (see the module docstring). ``inside``: a quote is open from the previous
    paragraph; it continues only if this paragraph opens with a quote mark."""
    text = paragraph.strip()
    continued = inside and text[:1] in _OPENS[style]
    quotes: list[str] = []
    buffer: list[str] | None = None
    outside: list[str] = []
    between: list[str] = []  # the narration since the last closed quote
    adjacent = False

    def closed(quote: str) -> None:
        nonlocal adjacent
        adjacent = adjacent or (bool(quotes) and not "".join(between).strip())
        # "To the mill," said Mary, "where I work." is one sentence broken by its tag: one utterance
        if quotes and "".join(between).strip().endswith(",") and not re.search(r"[.!?\u3002\uff01\uff1f]$", quotes[-1]):
            quotes[-1] = f"{quotes[-1]} {quote}"
        else:
            quotes.append(quote)
        between.clear()

    i = 0
    if continued:
        buffer, i = [], 1
    while i < len(text):
        c = text[i]
        if buffer is None:
            if (style == "double" and c in _OPENS["double"]) or (style == "single" and _opens_single(text, i)):
                buffer = []
            else:
                outside.append(c)
                between.append(c)
        elif style == "double" and c in ('"', _DOUBLE_CLOSE):
            closed("".join(buffer).strip())
            buffer = None
        elif style == "double" and c == _DOUBLE_OPEN:  # the open quote was never closed: drop it, start anew
            buffer = []
            continued = False if not quotes else continued
        elif style == "single" and _closes_single(text, i):
            closed("".join(buffer).strip())
            buffer = None
        else:
            buffer.append(c)
        i += 1
    if continued and not quotes and buffer is None:
        continued = False
    tail = "".join(buffer).strip() if buffer is not None else None
    if tail is not None and not _SENTENCE_END.search(tail):  # speech runs on only after a sentence's end
        tail = None
    return ScannedParagraph(quotes, continued, tail, len(_WORD.findall("".join(outside))), adjacent)


def is_utterance(quote: str) -> bool:
    """Speech, not a scare quote or a title: 3+ words, or 1-2 words ending in sentence/clause punctuation or a dash."""
    words = _WORD.findall(quote)
    return len(words) >= 3 or (len(words) >= 1 and bool(_SPEECH_END.search(quote)))


# --------------------------------------------------------------------------- dialogues


@dataclass(frozen=True)
class Turn:
    """One utterance: its text, its speaker (0, 1 alternating by paragraph within a dialogue) and paragraph."""

    text: str
    speaker: int
    paragraph: int


def extract_dialogues(paragraphs: Sequence[str], *, style: str | None = None, max_narration: int = 30) -> list[list[Turn]]:
    """The dialogues of one document (its paragraphs in order): lists of turns (see the module docstring).
    ``max_narration``: a paragraph with more words outside its quotes than this and than inside is narration."""
    style = style or quote_style(paragraphs)
    dialogues: list[list[Turn]] = []
    current: list[Turn] = []
    speaker = -1
    pending: tuple[str, int] | None = None  # a quote open across paragraphs: (text so far, its speaker)

    def close() -> None:
        nonlocal current, speaker
        if len({t.speaker for t in current}) >= 2:  # an exchange: two speakers at least
            dialogues.append(current)
        current, speaker = [], -1

    for index, paragraph in enumerate(paragraphs):
        scanned = scan_quotes(paragraph, style, inside=pending is not None)
        quotes = list(scanned.quotes)
        if scanned.continued and pending is not None:
            turn_speaker = pending[1]
            if quotes:
                quotes[0] = f"{pending[0]} {quotes[0]}"
            else:  # the quote runs on through this paragraph too
                pending = (f"{pending[0]} {scanned.open_tail or ''}".strip(), turn_speaker)
                continue
        else:
            turn_speaker = None
        pending = None
        utterances = [q for q in quotes if is_utterance(q)]
        spoken = sum(len(_WORD.findall(u)) for u in utterances)
        if scanned.adjacent or scanned.narration_words > max(max_narration, spoken):  # a story that quotes
            utterances, scanned.open_tail = [], None
        if not utterances and scanned.open_tail is None:
            close()  # narration ends a dialogue
            continue
        if turn_speaker is None:
            speaker = 1 - speaker if speaker >= 0 else 0
            turn_speaker = speaker
        current += [Turn(u, turn_speaker, index) for u in utterances]
        if scanned.open_tail is not None:
            pending = (scanned.open_tail, turn_speaker)
    close()
    return dialogues


def corpus_dialogues(patterns: str | Sequence[str]) -> list[list[Turn]]:
    """Every dialogue of every document of the files, in file and document order."""
    return [d for path in expand_patterns(patterns) for document in read_paragraph_documents(path)
            for d in extract_dialogues(document)]


# --------------------------------------------------------------------------- DLM sequences


def role_pattern(turns: Sequence[Turn]) -> str:
    """'QRQ', 'QRR', 'QQR', ...: Q for the first turn's speaker, R for the other."""
    return "".join("Q" if t.speaker == turns[0].speaker else "R" for t in turns)


def dlm_windows(dialogue: Sequence[Turn]) -> list[int]:
    """Start indices of the three-turn windows that are an exchange (not all one speaker's)."""
    return [i for i in range(len(dialogue) - 2) if len({t.speaker for t in dialogue[i:i + 3]}) > 1]


@dataclass
class EncodedTurn:
    """A turn's pieces and each piece's word index (int32 arrays in a pool: a corpus holds millions)."""

    ids: Sequence[int]
    word_ids: Sequence[int]


def encode_turn(tokenizer, text: str) -> EncodedTurn:
    words = [w for s in split_sentences(text) for w in s]
    encoding = encode_words(tokenizer, words, add_special_tokens=False)
    return EncodedTurn(np.asarray(encoding.input_ids, dtype=np.int32), np.asarray(encoding.word_ids, dtype=np.int32))


def _fit(lengths: list[int], capacity: int) -> list[int]:
    """Cut the longest turn by one token until the three fit (BERT's truncate_seq_pair, for three)."""
    lengths = list(lengths)
    while sum(lengths) > capacity:
        longest = max(range(len(lengths)), key=lambda k: (lengths[k], -k))
        lengths[longest] -= 1
    return lengths


def dialogue_sequence(turns: Sequence[EncodedTurn], roles: Sequence[int], *, special: SpecialIds,
                      max_tokens: int) -> dict:
    """``[CLS] t1 [SEP] t2 [SEP] t3 [SEP]`` with ``token_type_ids`` the roles ([CLS] the first turn's, each
    [SEP] its turn's) and ``word_ids`` numbered across the turns (None at the specials)."""
    capacity = max_tokens - 1 - len(turns)
    if capacity < len(turns):
        raise UserError(f"--max-tokens {max_tokens}: a dialogue sequence needs room for its 4 specials and a token a turn; "
                        "fix: give --max-tokens 7 or more")
    keep = _fit([len(t.ids) for t in turns], capacity)
    ids, roles_out, word_ids = [special.cls], [roles[0]], [None]
    offset = 0
    for turn, role, n in zip(turns, roles, keep):
        words = [int(w) for w in turn.word_ids[:n]]
        ids += [int(i) for i in turn.ids[:n]] + [special.sep]
        roles_out += [role] * (n + 1)
        word_ids += [w + offset for w in words] + [None]
        offset += (max(words) + 1) if words else 0
    return {"input_ids": np.asarray(ids, dtype=np.int64), "token_type_ids": np.asarray(roles_out, dtype=np.int64),
            "word_ids": word_ids}


class DialoguePool:
    """Dialogues encoded once: their turns, the DLM windows, and every utterance (the fakes' source)."""

    def __init__(self, dialogues: Sequence[Sequence[Turn]], tokenizer) -> None:
        self.turns: list[list[EncodedTurn]] = [[encode_turn(tokenizer, t.text) for t in d] for d in dialogues]
        self.speakers = [[t.speaker for t in d] for d in dialogues]
        self.windows = [(d, i) for d, dialogue in enumerate(dialogues) for i in dlm_windows(dialogue)]
        self.utterances = [(d, k) for d, dialogue in enumerate(dialogues) for k in range(len(dialogue))]

    def __len__(self) -> int:
        return len(self.windows)

    def digest(self, hasher) -> None:
        for dialogue, speakers in zip(self.turns, self.speakers):
            hasher.update(np.asarray(speakers, dtype=np.int64).tobytes())
            for turn in dialogue:
                hasher.update(np.asarray(turn.ids, dtype=np.int64).tobytes() + b"|")

    def draw(self, rng: np.random.Generator, fake_rate: float) -> tuple[int, int, int | None, tuple[int, int] | None]:
        """(dialogue, window start, replaced turn or None, replacing (dialogue, utterance) or None), from ``rng``."""
        d, start = self.windows[int(rng.integers(len(self.windows)))]
        if rng.random() >= fake_rate:
            return d, start, None, None
        turn = int(rng.integers(3))
        if len(self.turns) < 2:
            raise UserError("dialogue corpus: a fake dialogue needs a sentence of another dialogue and there is only "
                            "one; fix: give more dialogue text (--dlm-dialogues)")
        while True:  # an utterance of another dialogue, uniformly among all utterances
            other = self.utterances[int(rng.integers(len(self.utterances)))]
            if other[0] != d:
                return d, start, turn, other

    def sequence(self, drawn, *, special: SpecialIds, max_tokens: int) -> dict:
        d, start, replaced, other = drawn
        turns = list(self.turns[d][start:start + 3])
        speakers = self.speakers[d][start:start + 3]
        roles = [Q if s == speakers[0] else R for s in speakers]
        if replaced is not None:
            turns[replaced] = self.turns[other[0]][other[1]]
        row = dialogue_sequence(turns, roles, special=special, max_tokens=max_tokens)
        row["dialogue_label"] = int(replaced is not None)
        return row


# --------------------------------------------------------------------------- the mix and the objective


def parse_mix(text: str, pools: Sequence[str] | None = None) -> dict[str, float]:
    """'text=0.7,dialogue=0.3' -> normalised weights (a name once, weights finite and >= 0, some > 0; with
    ``pools``, every name 'text', 'dialogue' or one of them)."""
    weights: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        name = name.strip()
        try:
            weight = float(value)
        except ValueError:
            weight = float("nan")
        if not sep or not name or name in weights or not np.isfinite(weight) or weight < 0:
            raise UserError(f"--dlm-mix {text!r}: give NAME=WEIGHT pairs, comma-separated, each name once, weights >= 0")
        weights[name] = weight
    total = sum(weights.values())
    if not weights or total <= 0:
        raise UserError(f"--dlm-mix {text!r}: some weight must be > 0")
    unknown = [n for n in weights if pools is not None and n not in ("text", "dialogue", *pools)]
    if unknown:
        raise UserError(f"--dlm-mix {text!r}: {', '.join(unknown)} is neither text, dialogue nor a --dlm-text pool "
                        f"({', '.join(pools) or 'none given'}); fix: name it in --dlm-text NAME=GLOB")
    return {k: v / total for k, v in weights.items()}


def parse_pools(text: str | None) -> dict[str, str]:
    """'bible=PATH,news=GLOB' -> {name: pattern}."""
    pools: dict[str, str] = {}
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        name, sep, pattern = part.partition("=")
        if not sep or not name.strip() or not pattern.strip() or name.strip() in pools:
            raise UserError(f"--dlm-text {text!r}: give NAME=GLOB pairs, comma-separated, each name once")
        pools[name.strip()] = pattern.strip()
    return pools


@dataclass(frozen=True)
class SourceMix:
    """Which source each row of a batch takes, and its draw, as a function of (seed, batch index) only."""

    weights: Mapping[str, float]
    seed: int = 0

    def generator(self, batch_index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, batch_index, 0xD1A1])

    def sources(self, batch_index: int, rows: int) -> tuple[list[str], np.random.Generator]:
        """The rows' sources and the generator, positioned after them, that then draws the rows' entries."""
        rng = self.generator(batch_index)
        names = list(self.weights)
        picks = rng.choice(len(names), size=rows, p=np.asarray([self.weights[n] for n in names]))
        return [names[i] for i in picks], rng


class DialogueHead(nn.Module):
    """Real/fake dialogue: BERT's pooler (dense + tanh on [CLS]) and a linear layer to two classes."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.classifier = nn.Linear(hidden_size, 2)
        for layer in (self.dense, self.classifier):
            nn.init.normal_(layer.weight, std=0.02)  # BERT's initializer_range
            nn.init.zeros_(layer.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, H) -> logits (B, 2)."""
        return self.classifier(torch.tanh(self.dense(hidden[:, 0])))


class DialogueObjective:
    """ERNIE 1.0 with DLM over a heterogeneous corpus (see the module docstring)."""

    name = "ernie-dlm"

    def __init__(self, ernie: ErnieObjective, mix: SourceMix, dialogues: DialoguePool | None, *, special: SpecialIds,
                 max_tokens: int, hidden_size: int, fake_rate: float = 0.5, pools: Mapping[str, list] | None = None) -> None:
        pools = dict(pools or {})
        known = {"text", "dialogue", *pools}
        unknown = [n for n in mix.weights if n not in known]
        if unknown:
            raise ValueError(f"mix names {', '.join(unknown)} are neither 'text', 'dialogue' nor a text pool")
        if mix.weights.get("dialogue", 0) > 0 and (dialogues is None or len(dialogues) == 0):
            raise UserError("the dialogue files hold no three-turn dialogue (consecutive quoted paragraphs); fix: give "
                            "novels with dialogue (--dlm-dialogues), or set the dialogue weight of --dlm-mix to 0")
        for name, pool in pools.items():
            if mix.weights.get(name, 0) > 0 and not pool:
                raise UserError(f"text pool {name!r} holds no text; fix: give files with text, or weight it 0")
        if not 0 <= fake_rate <= 1:
            raise ValueError(f"fake_rate must be in [0, 1], got {fake_rate}")
        self.ernie, self.mix, self.dialogues, self.pools = ernie, mix, dialogues, pools
        self.special, self.max_tokens, self.fake_rate = special, max_tokens, fake_rate
        self.head = DialogueHead(hidden_size)
        self.batches_done = 0
        self.digest = self._digest()

    def _digest(self) -> str:
        hasher = hashlib.sha256()
        if self.dialogues is not None:
            self.dialogues.digest(hasher)
        for name in sorted(self.pools):
            hasher.update(name.encode() + b"\0")
            for row in self.pools[name]:
                hasher.update(np.asarray(row["input_ids"], dtype=np.int64).tobytes() + b"|")
        return hasher.hexdigest()

    def modules(self) -> dict[str, nn.Module]:
        return {"dialogue_head": self.head}

    def state_dict(self) -> dict:
        return {"batches_done": self.batches_done, "pools_sha256": self.digest}

    def load_state_dict(self, state: Mapping) -> None:
        if state.get("pools_sha256") not in (None, self.digest):
            raise UserError("--resume: the dialogue files or text pools differ from the run's (their content digest "
                            "changed); fix: resume with the files the run started with")
        self.batches_done = int(state["batches_done"])
        self.ernie.batches_done = self.batches_done

    def rows(self, examples: Sequence, batch_index: int) -> list[dict]:
        """The unmasked rows of batch ``batch_index``: stream examples, pool entries and dialogue sequences."""
        sources, rng = self.mix.sources(batch_index, len(examples))
        rows = []
        for example, source in zip(examples, sources):
            if source == "text":
                rows.append({"input_ids": example_field(example, "input_ids"), "word_ids": example_field(example, "word_ids"),
                             "dialogue_label": IGNORE_INDEX})
            elif source == "dialogue":
                drawn = self.dialogues.draw(rng, self.fake_rate)
                rows.append(self.dialogues.sequence(drawn, special=self.special, max_tokens=self.max_tokens))
            else:
                entry = self.pools[source][int(rng.integers(len(self.pools[source])))]
                rows.append({**entry, "dialogue_label": IGNORE_INDEX})
        return rows

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        """(B, T) input_ids, labels, token_type_ids (roles; 0 on text rows), attention_mask; dialogue_label (B,)
        (-100 on text rows, 0 real, 1 fake); stage () 0/1/2."""
        for chunk in chunks(examples, batch_size):
            stage = self.ernie.schedule.stage(self.batches_done)
            out = []
            for row in self.rows(chunk, self.batches_done):
                masked = self.ernie.mask(row, stage, rng)
                roles = row.get("token_type_ids")
                out.append({"input_ids": masked.input_ids, "labels": masked.labels,
                            "token_type_ids": np.zeros(len(masked.input_ids), dtype=np.int64) if roles is None else roles,
                            "dialogue_label": int(row["dialogue_label"])})
            batch = collate(out, pad_id=self.ernie.pad_id)
            batch["stage"] = torch.tensor(STAGES.index(stage))
            self.batches_done += 1
            self.ernie.batches_done = self.batches_done
            yield batch

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss:
        hidden = model.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                  token_type_ids=batch["token_type_ids"])[0]  # (B, T, H)
        mlm = masked_lm_loss(model, hidden, batch["labels"])
        labels = batch["dialogue_label"]  # (B,)
        dialogue = labels != IGNORE_INDEX
        # the same parts on every batch (ranks sum them): dlm and dlm_accuracy are 0 on a batch without dialogue rows
        total, parts = mlm.mean, {"mlm": float(mlm.mean.detach()), "stage": float(batch["stage"]),
                                  "dialogue_rows": float(dialogue.float().mean()), "dlm": 0.0, "dlm_accuracy": 0.0}
        if bool(dialogue.any()):
            logits = self.head(hidden[dialogue])  # (D, 2)
            dlm = F.cross_entropy(logits.float(), labels[dialogue])
            total = total + dlm
            parts["dlm"] = float(dlm.detach())
            parts["dlm_accuracy"] = float((logits.argmax(-1) == labels[dialogue]).float().mean())
        return ObjectiveLoss(total, parts, mlm.count, int(batch["attention_mask"].sum()))


def text_pool(patterns: str, tokenizer, *, max_tokens: int, special: SpecialIds) -> list[dict]:
    """The ``segments`` of the files, in order (held in memory: keep a pool small)."""
    documents = [encode_document(tokenizer, d) for path in expand_patterns(patterns) for d in read_documents(path)]
    return segments(documents, max_tokens=max_tokens, special=special, rng=np.random.default_rng(0))


def dialogue_from_options(tokenizer, model, options: Mapping, ernie: ErnieObjective) -> DialogueObjective:
    """The ``elmokit pretrain --objective ernie-dlm`` set-up. options: ``dlm_mix`` ('text=0.7,dialogue=0.3'),
    ``dlm_dialogues`` (glob of novels to extract dialogue from; default ``corpus_files``), ``dlm_text``
    ('NAME=GLOB,...': text pools the mix may name), ``dlm_fake_rate``, ``max_tokens``, ``seed``."""
    if options.get("ernie_language", "en") != "en":
        raise UserError("--objective ernie-dlm: English only (the Chinese data here holds no dialogue); fix: drop "
                        "--ernie-language zh")
    special = SpecialIds.from_tokenizer(tokenizer)
    max_tokens = int(options["max_tokens"])
    weights = parse_mix(options.get("dlm_mix") or "text=0.7,dialogue=0.3")
    source = options.get("dlm_dialogues") or options.get("corpus_files")
    pool = DialoguePool(corpus_dialogues(source), tokenizer) if weights.get("dialogue", 0) > 0 and source else None
    pools = {name: text_pool(pattern, tokenizer, max_tokens=max_tokens, special=special)
             for name, pattern in parse_pools(options.get("dlm_text")).items()}
    if pool is not None:
        patterns = Counter(role_pattern([Turn("", s, 0) for s in pool.speakers[d][i:i + 3]]) for d, i in pool.windows)
        logger.info("ernie-dlm: %d dialogues, %d utterances, %d three-turn windows (%s); text pools: %s", len(pool.turns),
                    len(pool.utterances), len(pool), ", ".join(f"{k} {v}" for k, v in patterns.most_common()),
                    ", ".join(f"{k} {len(v)} segments" for k, v in pools.items()) or "none")
    fake_rate = options.get("dlm_fake_rate")
    return DialogueObjective(ernie, SourceMix(weights, int(options.get("seed") or 0)), pool, special=special,
                             max_tokens=max_tokens, hidden_size=int(model.config.hidden_size),
                             fake_rate=0.5 if fake_rate is None else float(fake_rate), pools=pools)
