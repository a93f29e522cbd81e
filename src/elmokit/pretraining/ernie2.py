"""ERNIE 2.0 (Sun et al. 2020, "ERNIE 2.0: A Continual Pre-training Framework for Language Understanding"):
pre-training tasks built from documents, task embeddings, and the continual multi-task schedule.

Tasks (``TASKS``; a run picks a subsequence, in this order of introduction; the task id fed to the task
embedding is the task's index in the run's tuple, "an id ranging from 0 to N", §Model):

- ``km`` knowledge masking (word-aware): ERNIE 1.0's basic -> phrase -> entity masking (``knowledge``),
  its three stages spread over this task's own iterations; the model's MLM head.
- ``cap`` capitalization prediction (word-aware): is the word capitalised (first character upper case: 1,
  lower case: 0; a word starting with no cased letter is not predicted). The model's input is uncased
  (the run's WordPiece lower-cases), so the case is something to predict, not to read.
- ``tdr`` token-document relation (word-aware): does the word (case-folded) appear in another segment of
  the same document. Words without a letter or digit are not predicted.
- ``reorder`` sentence reordering (structure-aware): the segment is cut into n pieces, n uniform in 1..k
  (§Structure-aware: "randomly split into 1 to m segments"), at sentence boundaries when it has enough
  of them, else at word boundaries; the pieces are shown in a random order, separated by [SEP]; the class
  is the permutation among sum_{n=1..k} n! (``permutation_class``: n's offset plus the permutation's
  lexicographic rank).
- ``distance`` sentence distance (structure-aware): [CLS] A [SEP] B [SEP], 3 classes: 0 B is the sentence
  right after A, 1 B is in A's document at distance 2 or more, 2 B is from another document of the shard.
- ``discourse`` discourse relation (semantic-aware; not in the default tasks): the paper trains it on Sileo
  et al. (2019)'s data, sentence pairs whose second sentence opens with a discourse marker, the marker
  removed and predicted. Here the same labelling on the run's corpus with the fixed ``DISCOURSE_MARKERS``
  (the marker must be followed by a comma; ``discourse_marker``); a pair is drawn per example by marker
  first, then among that marker's pairs in the shard (Sileo et al. balance their markers). IR relevance is
  not built (no query logs).

Word labels sit at each word's first piece (-100 elsewhere); sentence labels are predicted from the
final [CLS] state by a dense + tanh + linear head (BERT's pooler shape: ``BertForMaskedLM`` has no
pooler).

Task embeddings (§Model: "token, segment, position and task embedding are taken as the input"):
``inputs_embeds = word_embeddings(input_ids) + task_embedding[task]``, so BERT's embedding layer adds
positions and segments and normalises the sum; exported (``export_model``) with the first task's vector
folded into every row of the segment table (each position adds exactly one segment vector, so the folded
model computes what the run computed for that task).

Schedule (``ContinualSchedule``, §Continual Multi-task Learning): tasks come in stages, stage s adding
task s and training it together with the earlier ones; the paper's rule is "allocating each task N training
iterations", which "the framework needs to automatically assign ... to different stages of training". How
the N are split across stages is not given in the source text at hand, so the split is ours: with S tasks,
r = N // (S + 1) iterations of every earlier task in each later stage, and a task's first stage takes the
rest of its N (4 tasks, N = 50: the first task 20, 10, 10, 10; the second 30, 10, 10; the third 40, 10; the
fourth 50). ``multitask`` (the ablation, the paper's "multi-task learning") trains every task from the
start: one stage, N each. Within a stage the
tasks' iterations are interleaved evenly (``interleave``), one task per iteration (batch). Beyond the
plan, the last stage's interleave repeats. The schedule is a function of the batch index alone;
``Ernie2Objective.batches_done`` is checkpointed (``state_dict``).

Shape legend: B batch, T tokens, H hidden, C classes.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from elmokit.errors import UserError
from elmokit.pretraining.batching import ObjectiveLoss, chunks, collate, example_field
from elmokit.pretraining.corpus import EXAMPLE_READERS
from elmokit.pretraining.heads import HeadLoss, masked_lm_loss
from elmokit.pretraining.knowledge import (
    ErnieObjective,
    ErnieSchedule,
    capitalised_entity_spans,
    content_word_phrase_spans,
)
from elmokit.pretraining.masking import IGNORE_INDEX, MaskingVocab

TASKS = ("km", "cap", "tdr", "reorder", "distance", "discourse")
DEFAULT_TASKS = TASKS[:5]  # discourse only when asked for: it needs marker-opened sentences in every shard
TASK_NAMES = {"km": "knowledge masking", "cap": "capitalization prediction", "tdr": "token-document relation",
              "reorder": "sentence reordering", "distance": "sentence distance", "discourse": "discourse relation"}
# Discourse markers (Sileo et al. 2019's method on a fixed list): a sentence opening with one of these and a
# comma is B, the sentence before it A; the marker (one to three words) is removed and is the class.
DISCOURSE_MARKERS = ("however", "but", "yet", "still", "nevertheless", "nonetheless", "instead", "thus", "therefore",
                     "hence", "consequently", "accordingly", "moreover", "besides", "furthermore", "indeed",
                     "meanwhile", "afterwards", "then", "finally", "otherwise", "for example", "for instance",
                     "in fact", "of course", "at last", "in short", "on the contrary", "in the meantime")
SCHEDULES = ("continual", "multitask")
MAX_PIECES = 4  # the reader leaves room for k - 1 extra [SEP]s of sentence reordering, k <= MAX_PIECES

# --------------------------------------------------------------------------- the schedule


def interleave(counts: Sequence[int]) -> np.ndarray:
    """Task indices of one stage, ``counts[i]`` of task i, spread evenly: task i's j-th iteration sits at
    (j + 0.5) / counts[i] of the stage, ties broken by task order."""
    keys = np.concatenate([(np.arange(c) + 0.5) / c for c in counts if c > 0] or [np.zeros(0)])
    tasks = np.concatenate([np.full(c, i) for i, c in enumerate(counts) if c > 0] or [np.zeros(0, dtype=np.int64)])
    return tasks[np.lexsort((tasks, keys))].astype(np.int64)


@dataclass(frozen=True)
class ContinualSchedule:
    """Which task trains at batch ``k`` (module docstring). ``n_tasks`` tasks, ``iterations`` (N) each."""

    n_tasks: int
    iterations: int
    mode: str = "continual"

    def __post_init__(self) -> None:
        if self.mode not in SCHEDULES:
            raise UserError(f"ERNIE 2.0 schedule {self.mode!r}: use one of {', '.join(SCHEDULES)}")
        if self.n_tasks < 1:
            raise UserError("ERNIE 2.0 needs at least one task")
        if self.mode == "continual" and self.iterations < self.n_tasks + 1:
            raise UserError(f"{self.iterations} iterations per task cannot be spread over {self.n_tasks} stages; "
                             f"give at least {self.n_tasks + 1}")
        if self.iterations < 1:
            raise UserError("iterations per task must be at least 1")

    @property
    def refresh(self) -> int:
        """r: iterations of each earlier task in every later stage (our split; the paper gives only N per task)."""
        return self.iterations // (self.n_tasks + 1)

    def allocation(self) -> list[list[int]]:
        """Per stage, the iterations of each task (0 before a task is introduced)."""
        S, N = self.n_tasks, self.iterations
        if self.mode == "multitask":
            return [[N] * S]
        r = self.refresh
        return [[(N - (S - 1 - t) * r if t == s else r) if t <= s else 0 for t in range(S)] for s in range(S)]

    @cached_property
    def _plan(self) -> tuple[np.ndarray, np.ndarray]:
        stages = [interleave(counts) for counts in self.allocation()]
        stage_of = np.concatenate([np.full(len(p), s) for s, p in enumerate(stages)])
        return np.concatenate(stages), stage_of

    @property
    def total(self) -> int:
        return len(self._plan[0])

    def task(self, batch_index: int) -> int:
        plan, _ = self._plan
        if batch_index < len(plan):
            return int(plan[batch_index])
        last = interleave(self.allocation()[-1])
        return int(last[(batch_index - len(plan)) % len(last)])

    def stage(self, batch_index: int) -> int:
        _, stage_of = self._plan
        return int(stage_of[batch_index]) if batch_index < len(stage_of) else len(self.allocation()) - 1

    def done_before(self, task: int, batch_index: int) -> int:
        """How many batches of ``task`` come before ``batch_index``."""
        plan, _ = self._plan
        if batch_index <= len(plan):
            return int((plan[:batch_index] == task).sum())
        last = interleave(self.allocation()[-1])
        extra = batch_index - len(plan)
        cycles, rest = divmod(extra, len(last))
        return int((plan == task).sum() + cycles * (last == task).sum() + (last[:rest] == task).sum())


# --------------------------------------------------------------------------- labels


def capitalization_labels(words: Sequence[str]) -> list[int]:
    """1 if the word's first character is an upper-case letter, 0 if lower-case, -100 if it has no case."""
    out = []
    for word in words:
        first = word[:1]
        out.append(1 if first.isupper() else 0 if first.islower() else IGNORE_INDEX)
    return out


def token_document_labels(segments: Sequence[Sequence[str]]) -> list[list[int]]:
    """Per segment of one document, per word: 1 if the word (case-folded) appears in another segment of
    the document, else 0; -100 for a word without a letter or digit."""
    forms = [[w.casefold() for w in seg] for seg in segments]
    containing = Counter(f for seg in forms for f in set(seg))  # segments holding each form
    return [[(1 if containing[f] >= 2 else 0) if any(c.isalnum() for c in f) else IGNORE_INDEX for f in seg]
            for seg in forms]


def permutation_offsets(k: int) -> list[int]:
    """offsets[n] = sum_{j<n} j!: the first class of an n-piece permutation (n = 1..k)."""
    offsets, total = [0, 0], 0
    for n in range(1, k + 1):
        total += math.factorial(n)
        offsets.append(total)
    return offsets


def reorder_classes(k: int) -> int:
    """sum_{n=1..k} n! (§Structure-aware: "a k-class classification problem where k = sum n!")."""
    return permutation_offsets(k)[k + 1]


def permutation_class(order: Sequence[int]) -> int:
    """The class of showing original piece ``order[i]`` at position i: offset(n) + the permutation's
    lexicographic rank (its Lehmer code)."""
    n = len(order)
    rank, rest = 0, sorted(order)
    if rest != list(range(n)):
        raise ValueError(f"{list(order)} is not a permutation of 0..{n - 1}")
    for i, value in enumerate(order):
        position = rest.index(value)
        rank += position * math.factorial(n - 1 - i)
        rest.pop(position)
    return permutation_offsets(n)[n] + rank


def sentence_distance_class(doc_a: int, a: int, doc_b: int, b: int) -> int | None:
    """0: B is the sentence right after A; 1: same document, |b - a| >= 2; 2: other document; None else."""
    if doc_a != doc_b:
        return 2
    if b == a + 1:
        return 0
    if abs(b - a) >= 2:
        return 1
    return None


def reorder_example(ids: Sequence[int], word_ids: Sequence[int], sentence_cuts: Sequence[int], k: int,
                    rng: np.random.Generator, *, cls_id: int, sep_id: int) -> dict:
    """Sentence reordering of one segment (ids without specials, word index per id, ``sentence_cuts``:
    token positions where a sentence other than the first starts). Returns input_ids, token_type_ids,
    label, and ``order`` (original piece index shown at each position)."""
    n = int(rng.integers(1, k + 1))
    word_cuts = [p for p in range(1, len(ids)) if word_ids[p] != word_ids[p - 1]]
    candidates = list(sentence_cuts) if len(sentence_cuts) >= n - 1 else word_cuts
    n = min(n, len(candidates) + 1)
    cuts = sorted(int(c) for c in rng.choice(candidates, n - 1, replace=False)) if n > 1 else []
    bounds = [0, *cuts, len(ids)]
    pieces = [list(ids[bounds[i]:bounds[i + 1]]) for i in range(n)]
    order = [int(i) for i in rng.permutation(n)]
    shown = [cls_id]
    for i in order:
        shown += pieces[i] + [sep_id]
    return {"input_ids": np.asarray(shown, dtype=np.int64), "token_type_ids": np.zeros(len(shown), dtype=np.int64),
            "label": permutation_class(order), "order": order}


def discourse_marker(words: Sequence[str]) -> tuple[int, int] | None:
    """(class, words to drop) if the sentence opens with a marker of ``DISCOURSE_MARKERS`` and a comma and goes
    on after it (the longest marker wins), else None."""
    lower = [w.casefold() for w in words]
    best = None
    for index, marker in enumerate(DISCOURSE_MARKERS):
        n = len(parts := marker.split())
        rest = any(c.isalnum() for w in lower[n + 1:] for c in w)
        if lower[:n] == parts and len(lower) > n and lower[n] == "," and rest and (best is None or n + 1 > best[1]):
            best = (index, n + 1)
    return best


def first_piece_labels(word_ids: Sequence[int | None], per_word: Sequence[int]) -> np.ndarray:
    """(T,) the word's label at its first piece, -100 at other pieces and specials."""
    out = np.full(len(word_ids), IGNORE_INDEX, dtype=np.int64)
    last = None
    for t, w in enumerate(word_ids):
        if w is not None and w != last:
            out[t] = per_word[w]
        last = w
    return out


# --------------------------------------------------------------------------- the corpus reader


def _pair(a: Sequence[int], b: Sequence[int], capacity: int) -> tuple[list[int], list[int]]:
    a, b = list(a), list(b)
    while len(a) + len(b) > capacity:  # cut the longer one's end
        (a if len(a) >= len(b) else b).pop()
    return a, b


def _segments(document, capacity: int) -> list[tuple[list[int], list[int], list[int], list[str]]]:
    """(sentence indices, ids, word ids, words) of each segment of one document: whole sentences up to
    ``capacity`` tokens; a longer sentence cut into windows at word boundaries, each its own segment."""
    segs: list = []
    current: tuple = ([], [], [], [])
    for s, (ids, wids, words) in enumerate(zip(document.ids, document.word_ids, document.words)):
        if not ids:
            continue
        if current[1] and len(current[1]) + len(ids) > capacity:
            segs.append(current)
            current = ([], [], [], [])
        if len(ids) > capacity:
            start = 0
            while start < len(ids):
                end = min(start + capacity, len(ids))
                if end < len(ids) and wids[end] == wids[end - 1]:  # would split a word: cut before it
                    cut = end - 1
                    while cut > start and wids[cut] == wids[cut - 1]:
                        cut -= 1
                    end = cut if cut > start else end
                first = wids[start]
                segs.append(([s], list(ids[start:end]), [w - first for w in wids[start:end]],
                             list(words[first:wids[end - 1] + 1])))
                start = end
            continue
        shift = len(current[3])  # word indices continue across the segment's sentences
        current[0].append(s)
        current[1].extend(ids)
        current[2].extend(w + shift for w in wids)
        current[3].extend(words)
    if current[1]:
        segs.append(current)
    return segs


def examples(documents, *, max_tokens: int, special, rng: np.random.Generator, source: str = "") -> list[dict]:
    """The ``ernie2`` reader: segments of whole sentences of one document (as ``corpus.segments``, with room
    for the reordering task's [SEP]s), each with every task's labels and a sentence-distance pair.

    Needs ``Document.words`` (the original words, for capitalisation and the entity heuristic)."""
    capacity = max_tokens - 1 - MAX_PIECES
    if capacity < 1:
        raise UserError(f"max_tokens={max_tokens}: ERNIE 2.0 segments need room for [CLS], {MAX_PIECES} [SEP]s and a token")
    for document in documents:
        if document.words is None:
            raise ValueError("the ernie2 reader needs the documents' words (corpus.encode_document keeps them)")
    segments_of = [_segments(document, capacity) for document in documents]
    sentence_docs = [d for d, doc in enumerate(documents) if any(doc.ids)]
    marked: dict[int, list[tuple[int, int, int]]] = {}  # marker -> (document, sentence, words dropped)
    for d, document in enumerate(documents):
        for i in range(1, len(document.ids)):
            found = discourse_marker(document.words[i])
            if found is not None and document.ids[i - 1]:
                marked.setdefault(found[0], []).append((d, i, found[1]))
    markers = sorted(marked)
    out = []
    for d, segs in enumerate(segments_of):
        tdr = token_document_labels([seg[3] for seg in segs])
        n_sentences = len(documents[d].ids)
        for seg, tdr_labels in zip(segs, tdr):
            sentences, ids, wids, words = seg
            # sentence-distance pair: A from this segment, the class uniform among those this A allows
            a = int(sentences[int(rng.integers(len(sentences)))])
            classes = [c for c, ok in ((0, a + 1 < n_sentences), (1, n_sentences >= 3 and (a >= 2 or a + 2 < n_sentences)),
                                       (2, len(sentence_docs) >= 2)) if ok]
            label, b_ids = None, None
            if classes:
                label = int(classes[int(rng.integers(len(classes)))])
                if label == 0:
                    b_ids = documents[d].ids[a + 1]
                elif label == 1:
                    far = [j for j in range(n_sentences) if abs(j - a) >= 2]
                    b_ids = documents[d].ids[far[int(rng.integers(len(far)))]]
                else:
                    others = [e for e in sentence_docs if e != d]
                    e = others[int(rng.integers(len(others)))]
                    nonempty = [s for s in documents[e].ids if s]
                    b_ids = nonempty[int(rng.integers(len(nonempty)))]
            cuts, position = [], 0
            for s in sentences:  # token positions where a later sentence of the segment starts
                if position:
                    cuts.append(position)
                position += len(documents[d].ids[s])
            cuts = [c for c in cuts if c < len(ids)] if len(sentences) > 1 else []
            example = {"input_ids": np.asarray([special.cls, *ids, special.sep], dtype=np.int64),
                       "word_ids": [None, *wids, None], "words": words, "sentence_cuts": cuts,
                       "cap": capitalization_labels(words), "tdr": tdr_labels,
                       "phrases": content_word_phrase_spans(words), "entities": capitalised_entity_spans(words)}
            if label is not None:
                pa, pb = _pair(documents[d].ids[a], b_ids, max_tokens - 3)
                example.update(pair_a=pa, pair_b=pb, distance=label)
            if markers:  # a discourse pair of the shard: a marker, then one of its pairs
                m = markers[int(rng.integers(len(markers)))]
                e, i, drop = marked[m][int(rng.integers(len(marked[m])))]
                b_kept = [t for t, w in zip(documents[e].ids[i], documents[e].word_ids[i]) if w >= drop]
                pa, pb = _pair(documents[e].ids[i - 1], b_kept, max_tokens - 3)
                example.update(discourse_a=pa, discourse_b=pb, discourse=m)
            out.append(example)
    return out


# --------------------------------------------------------------------------- heads and the objective


class SentenceHead(nn.Module):
    """[CLS] state -> dense -> tanh -> linear: (B, H) -> (B, C)."""

    def __init__(self, hidden: int, classes: int) -> None:
        super().__init__()
        self.dense, self.out = nn.Linear(hidden, hidden), nn.Linear(hidden, classes)
        for layer in (self.dense, self.out):
            nn.init.normal_(layer.weight, std=0.02)  # BERT's initializer_range
            nn.init.zeros_(layer.bias)

    def forward(self, cls_state: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.dense(cls_state)))


def _token_head(hidden: int) -> nn.Linear:
    layer = nn.Linear(hidden, 2)
    nn.init.normal_(layer.weight, std=0.02)
    nn.init.zeros_(layer.bias)
    return layer


def _labelled_loss(logits_of, hidden: torch.Tensor, labels: torch.Tensor) -> HeadLoss:
    index = (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)  # (M,)
    rows = hidden.reshape(-1, hidden.size(-1)).index_select(0, index)  # (M, H)
    targets = labels.reshape(-1).index_select(0, index)
    return HeadLoss(F.cross_entropy(logits_of(rows).float(), targets, reduction="sum"), int(index.numel()))


class Ernie2Objective:
    """ERNIE 2.0's tasks on one BERT (family 'bert-mlm') with task embeddings and the stage schedule.

    Examples: the ``ernie2`` reader's (``examples``). Each batch is one task's (``schedule.task``), with a
    0-dim ``task`` entry (the task id); the loss is that task's mean loss."""

    name = "ernie2"

    def __init__(self, tokenizer, *, hidden_size: int, tasks: Sequence[str] = DEFAULT_TASKS, schedule: ContinualSchedule,
                 reorder_pieces: int = 3, seed: int = 0) -> None:
        tasks = tuple(tasks)
        if not tasks or any(t not in TASKS for t in tasks) or len(set(tasks)) != len(tasks):
            raise UserError(f"ERNIE 2.0 tasks {tasks!r}: give some of {', '.join(TASKS)}, each once")
        if not 1 <= reorder_pieces <= MAX_PIECES:
            raise UserError(f"sentence reordering pieces must be 1..{MAX_PIECES}, got {reorder_pieces}")
        if schedule.n_tasks != len(tasks):
            raise UserError(f"the schedule is for {schedule.n_tasks} tasks, {len(tasks)} given")
        self.tokenizer, self.tasks, self.schedule, self.k = tokenizer, tasks, schedule, reorder_pieces
        self.vocab = MaskingVocab.from_tokenizer(tokenizer)
        self.pad_id, self.cls_id, self.sep_id = tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id
        # ERNIE 1.0's knowledge masking; its basic -> phrase -> entity stages in thirds of this task's iterations
        self.km = ErnieObjective(self.vocab, pad_id=self.pad_id, schedule=ErnieSchedule.thirds(schedule.iterations),
                                 tokenizer=tokenizer)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.task_embedding = nn.Embedding(len(tasks), hidden_size)
            nn.init.normal_(self.task_embedding.weight, std=0.02)
            self.heads = nn.ModuleDict()
            if "cap" in tasks:
                self.heads["cap"] = _token_head(hidden_size)
            if "tdr" in tasks:
                self.heads["tdr"] = _token_head(hidden_size)
            if "reorder" in tasks:
                self.heads["reorder"] = SentenceHead(hidden_size, reorder_classes(reorder_pieces))
            if "distance" in tasks:
                self.heads["distance"] = SentenceHead(hidden_size, 3)
            if "discourse" in tasks:
                self.heads["discourse"] = SentenceHead(hidden_size, len(DISCOURSE_MARKERS))
        self.batches_done = 0

    def modules(self) -> dict[str, nn.Module]:
        return {"task_embedding": self.task_embedding, **({"ernie2_heads": self.heads} if len(self.heads) else {})}

    def state_dict(self) -> dict:
        return {"batches_done": self.batches_done}

    def load_state_dict(self, state: Mapping) -> None:
        self.batches_done = int(state["batches_done"])

    # ---- batches

    def row(self, example, task: str, rng: np.random.Generator, km_stage: str = "basic") -> dict:
        """One example's input for ``task`` (numpy arrays; labels -100 where nothing is predicted)."""
        ids, word_ids = np.asarray(example_field(example, "input_ids"), dtype=np.int64), example_field(example, "word_ids")
        if task == "km":
            masked = self.km.mask(example, km_stage, rng)
            return {"input_ids": masked.input_ids, "labels": masked.labels}
        if task in ("cap", "tdr"):
            return {"input_ids": ids, "labels": first_piece_labels(word_ids, example_field(example, task))}
        if task == "reorder":
            inner = [w for w in word_ids if w is not None]
            row = reorder_example(ids[1:-1], inner, example_field(example, "sentence_cuts"), self.k, rng,
                                  cls_id=self.cls_id, sep_id=self.sep_id)
            return {"input_ids": row["input_ids"], "token_type_ids": row["token_type_ids"], "label": row["label"]}
        prefix = "pair" if task == "distance" else "discourse"
        a, b = example_field(example, f"{prefix}_a"), example_field(example, f"{prefix}_b")
        if a is None:
            raise UserError(f"ERNIE 2.0's {TASK_NAMES[task]} task found no pair in a corpus file: "
                            + ("it needs two sentences or two documents" if task == "distance" else
                               "no sentence opens with a marker of ernie2.DISCOURSE_MARKERS and a comma")
                            + f"; fix: give such text in every file, or leave '{task}' out of --ernie2-tasks")
        input_ids = [self.cls_id, *a, self.sep_id, *b, self.sep_id]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        return {"input_ids": np.asarray(input_ids, dtype=np.int64), "token_type_ids": np.asarray(types, dtype=np.int64),
                "label": int(example_field(example, task))}

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        for chunk in chunks(examples, batch_size):
            index = self.schedule.task(self.batches_done)
            task = self.tasks[index]
            stage = "basic"
            if task == "km":
                stage = self.km.schedule.stage(self.schedule.done_before(index, self.batches_done))
            if task in ("distance", "discourse"):
                key = "pair_a" if task == "distance" else "discourse_a"
                chunk = [e for e in chunk if example_field(e, key) is not None] or chunk
            batch = collate([self.row(e, task, rng, stage) for e in chunk], pad_id=self.pad_id)
            batch["task"] = torch.tensor(index)
            self.batches_done += 1
            yield batch

    # ---- loss

    def encode(self, model, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The encoder's last layer (B, T, H) with the batch's task embedding added to the input."""
        ids = batch["input_ids"]
        embeds = model.get_input_embeddings()(ids) + self.task_embedding.weight[batch["task"]]  # (B, T, H)
        types = batch.get("token_type_ids")
        if types is None:
            types = torch.zeros_like(ids)
        return model.base_model(inputs_embeds=embeds, attention_mask=batch["attention_mask"], token_type_ids=types)[0]

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss:
        task = self.tasks[int(batch["task"])]
        hidden = self.encode(model, batch)  # (B, T, H)
        if task == "km":
            part = masked_lm_loss(model, hidden, batch["labels"])
        elif task in ("cap", "tdr"):
            part = _labelled_loss(self.heads[task], hidden, batch["labels"])
        else:
            logits = self.heads[task](hidden[:, 0])  # (B, C)
            part = HeadLoss(F.cross_entropy(logits.float(), batch["label"], reduction="sum"), int(logits.size(0)))
        return ObjectiveLoss(part.mean, {task: float(part.mean.detach()), "task": float(batch["task"])}, part.count,
                             int(batch["attention_mask"].sum()))

    def export_model(self, model):
        """A copy of ``model`` with the first task's embedding folded into every segment-type row."""
        out = copy.deepcopy(model)
        table = out.base_model.embeddings.token_type_embeddings.weight
        with torch.no_grad():
            table += self.task_embedding.weight[0].to(table.device)
        return out


def ernie2_from_options(tokenizer, model, options: Mapping) -> Ernie2Objective:
    """``elmokit pretrain --objective ernie2``. options: ``ernie2_tasks`` (tuple, default all), ``ernie2_schedule``
    (continual | multitask), ``ernie2_task_iterations`` (N; default ``max_steps`` // the number of tasks, 1000
    without it), ``ernie2_reorder_pieces`` (k, 3), ``seed``."""
    tasks = tuple(options.get("ernie2_tasks") or DEFAULT_TASKS)
    n = options.get("ernie2_task_iterations")
    if n is None:
        n = max(int(options.get("max_steps") or 1000 * len(tasks)) // len(tasks), len(tasks) + 1)
    schedule = ContinualSchedule(len(tasks), int(n), options.get("ernie2_schedule") or "continual")
    return Ernie2Objective(tokenizer, hidden_size=int(model.config.hidden_size), tasks=tasks, schedule=schedule,
                           reorder_pieces=int(options.get("ernie2_reorder_pieces") or 3),
                           seed=int(options.get("seed") or 0))


EXAMPLE_READERS["ernie2"] = examples  # segments with every task's labels and a sentence-distance pair
