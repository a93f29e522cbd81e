"""SQuAD v1.1 (Rajpurkar et al. 2016) as word-level span extraction, and the best-span decoder.

Reading. ``read_squad`` reads the official JSON (``.json`` or ``.json.xz``): articles -> paragraphs
(``context``) -> questions (``id``, ``question``, ``answers`` with ``text`` and the character offset
``answer_start``). The context is cut into words with their character spans (``\\w+`` runs and single
other non-space characters); a gold answer becomes the words from the one holding its first character
to the one holding its last. The predicted answer is the context's own text from the first word's
first character to the last word's last character, so the official scorer sees untouched text.

Split. Only the official dev set is public here, so it is split **by article** (no paragraph of a test
article is ever trained on): in file order, every 4th article (the 4th, 8th, ... of 48: 12 articles)
is the test set; of the other 36, every 6th (6 articles) is the dev set for early stopping, the other
30 the training set. ``split_by_article`` is the rule; it draws nothing at random.

Decoding. ``best_span`` gives the (start, end) word pair maximising start_score[i] + end_score[j] with
i <= j and j - i + 1 <= max_length (BERT §4.2: "the maximum scoring span where j >= i"; DrQA's
"best span from token i to token i' such that i <= i' <= i + 15").
"""

from __future__ import annotations

import dataclasses
import json
import lzma
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from elmokit.tasks.data import DataFileError

_WORD = re.compile(r"\w+|[^\w\s]")


def words_with_spans(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """The words of ``text`` and their (start, end) character offsets (end exclusive)."""
    matches = list(_WORD.finditer(text))
    return [m.group() for m in matches], [m.span() for m in matches]


@dataclass
class Paragraph:
    context: str
    words: list[str]
    spans: list[tuple[int, int]]

    def text(self, start: int, end: int) -> str:
        """The context's text of words start..end (inclusive)."""
        return self.context[self.spans[start][0]: self.spans[end][1]]


@dataclass
class Question:
    id: str
    words: list[str]
    paragraph: int  # index into SquadData.paragraphs
    answers: list[str]  # every gold answer text (scored by the official rule)
    span: tuple[int, int] | None  # the first gold answer as words (None: it does not align to words)


@dataclass
class SquadData:
    paragraphs: list[Paragraph] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    articles: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.questions)

    def gold(self) -> dict[str, list[str]]:
        return {q.id: q.answers for q in self.questions}

    def head(self, count: int | None) -> SquadData:
        """The first ``count`` questions (all when None) with only the paragraphs they read."""
        if count is None or count >= len(self.questions):
            return self
        questions = self.questions[:count]
        kept = sorted({q.paragraph for q in questions})
        index = {old: new for new, old in enumerate(kept)}
        return SquadData([self.paragraphs[i] for i in kept],
                         [dataclasses.replace(q, paragraph=index[q.paragraph]) for q in questions], list(self.articles))


def answer_span(spans: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """Words covering characters [start, end): the first word ending after ``start`` to the last word
    starting before ``end``; None when no word lies inside."""
    first = next((i for i, (a, b) in enumerate(spans) if b > start), None)
    last = next((i for i in range(len(spans) - 1, -1, -1) if spans[i][0] < end), None)
    if first is None or last is None or last < first:
        return None
    return first, last


def read_squad(path: str | os.PathLike) -> list[dict]:
    """The articles of an official SQuAD v1.1 JSON file (``.json`` or ``.json.xz``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    opener = lzma.open if path.suffix == ".xz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
    except (ValueError, lzma.LZMAError) as error:
        raise DataFileError(f"{path}: not a SQuAD JSON file ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataFileError(f"{path}: expected a JSON object with a 'data' list of articles (SQuAD v1.1)")
    return data["data"]


def squad_examples(articles: list[dict], source: str = "") -> SquadData:
    """Paragraphs and questions of ``articles`` (word-level; see the module docstring)."""
    out = SquadData()
    for a, article in enumerate(articles):
        out.articles.append(str(article.get("title", a)))
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            where = f"{source + ': ' if source else ''}article {a} ({article.get('title', '?')}), paragraph {p}"
            context = paragraph.get("context")
            if not isinstance(context, str) or not context.strip():
                raise DataFileError(f"{where}: no context text")
            words, spans = words_with_spans(context)
            out.paragraphs.append(Paragraph(context, words, spans))
            for qa in paragraph.get("qas", []):
                try:
                    answers = [str(x["text"]) for x in qa["answers"]]
                    first = qa["answers"][0]
                    start = int(first["answer_start"])
                    question = words_with_spans(qa["question"])[0]
                    qid = str(qa["id"])
                except (KeyError, IndexError, TypeError, ValueError):
                    raise DataFileError(f"{where}: a question lacks id, question or answers with text and "
                                        "answer_start") from None
                if not question:
                    raise DataFileError(f"{where}: question {qid} is empty")
                if context[start: start + len(first["text"])] != first["text"]:
                    raise DataFileError(f"{where}: question {qid}: answer_start {start} does not point at "
                                        f"{first['text']!r}")
                span = answer_span(spans, start, start + len(first["text"]))
                out.questions.append(Question(qid, question, len(out.paragraphs) - 1, answers, span))
    return out


def split_by_article(articles: list[dict]) -> dict[str, list[dict]]:
    """{"train", "dev", "test"} articles by the fixed rule of the module docstring."""
    test = [a for i, a in enumerate(articles) if i % 4 == 3]
    rest = [a for i, a in enumerate(articles) if i % 4 != 3]
    return {"train": [a for i, a in enumerate(rest) if i % 6 != 5], "dev": [a for i, a in enumerate(rest) if i % 6 == 5],
            "test": test}


def best_span(start: torch.Tensor, end: torch.Tensor, mask: torch.Tensor, max_length: int) -> list[tuple[int, int]]:
    """start, end (B, T) scores, mask (B, T) real words -> per row the (i, j) maximising start[i] + end[j]
    over i <= j < i + max_length, both real words."""
    steps = start.shape[1]
    scores = start.unsqueeze(2) + end.unsqueeze(1)  # (B, T, T): [b, i, j]
    i = torch.arange(steps).unsqueeze(1)
    j = torch.arange(steps).unsqueeze(0)
    allowed = (j >= i) & (j - i < max_length)  # (T, T)
    allowed = allowed.unsqueeze(0) & mask.unsqueeze(2) & mask.unsqueeze(1)
    flat = scores.masked_fill(~allowed, float("-inf")).flatten(1).argmax(dim=1)
    return [(int(f) // steps, int(f) % steps) for f in flat]
