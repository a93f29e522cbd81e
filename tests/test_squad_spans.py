"""SQuAD as spans (elmokit.tasks.squad_data), the best-span decoder against brute force, the split by
article, and the DrQA-style reader (elmokit.tasks.span_reader) learning a toy task on fake features."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from elmokit.features import InMemoryFeatures
from elmokit.tasks.data import DataFileError
from elmokit.tasks.metrics import squad_scores
from elmokit.tasks.span_reader import SquadFeatures, train_reader
from elmokit.tasks.squad_data import answer_span, best_span, split_by_article, squad_examples, words_with_spans

torch.set_num_threads(1)


def _brute_force(start, end, length, max_length):
    best, where = -np.inf, None
    for i, j in itertools.product(range(length), repeat=2):
        if i <= j < i + max_length and start[i] + end[j] > best:
            best, where = start[i] + end[j], (i, j)
    return where


def test_best_span_matches_brute_force_over_all_pairs():
    rng = np.random.default_rng(0)
    for _ in range(40):
        batch, steps = 3, int(rng.integers(1, 9))
        start = torch.from_numpy(rng.normal(size=(batch, steps)))
        end = torch.from_numpy(rng.normal(size=(batch, steps)))
        lengths = rng.integers(1, steps + 1, size=batch)
        mask = torch.arange(steps)[None] < torch.from_numpy(lengths)[:, None]
        max_length = int(rng.integers(1, 5))
        got = best_span(start, end, mask, max_length)
        for b in range(batch):
            assert got[b] == _brute_force(start[b].numpy(), end[b].numpy(), int(lengths[b]), max_length)
    # the unconstrained argmaxes (end before start, too long) are not taken
    every = torch.ones(1, 3, dtype=torch.bool)
    assert best_span(torch.tensor([[0.0, 9.0, 0.0]]), torch.tensor([[9.0, 1.0, 0.0]]), every, 3) == [(1, 1)]  # not (1, 0)
    assert best_span(torch.tensor([[9.0, 1.0, 0.0]]), torch.tensor([[0.0, 0.0, 9.0]]), every, 2) == [(1, 2)]  # not (0, 2)


def _article(title, n_paragraphs=1):
    context = "Denver Broncos won Super Bowl 50, beating the Carolina Panthers 24-10."
    return {"title": title, "paragraphs": [{"context": context, "qas": [
        {"id": f"{title}-{p}-a", "question": "Who won Super Bowl 50?",
         "answers": [{"text": "Denver Broncos", "answer_start": 0}, {"text": "the Denver Broncos", "answer_start": 0}]},
        {"id": f"{title}-{p}-b", "question": "What was the score?",
         "answers": [{"text": "24-10", "answer_start": context.index("24-10")}]},
    ]} for p in range(n_paragraphs)]}


def test_answers_become_word_spans_whose_text_is_the_context_own():
    words, spans = words_with_spans("won 24-10.")
    assert words == ["won", "24", "-", "10", "."] and spans[1] == (4, 6)
    data = squad_examples([_article("SB")])
    paragraph = data.paragraphs[0]
    assert data.questions[0].span == (0, 1) and paragraph.text(0, 1) == "Denver Broncos"
    assert data.questions[1].span == (11, 13) and paragraph.text(11, 13) == "24-10"
    assert answer_span(spans, 5, 7) == (1, 2)  # an answer starting inside a word takes the whole word
    predictions = {q.id: paragraph.text(*q.span) for q in data.questions}
    assert squad_scores(predictions, data.gold()) == {"exact_match": 100.0, "f1": 100.0}
    broken = _article("X")
    broken["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] = 60
    with pytest.raises(DataFileError, match=r"article 0 \(X\), paragraph 0: question X-0-b: answer_start 60"):
        squad_examples([broken])


def test_the_split_by_article_is_fixed_and_disjoint():
    articles = [_article(f"a{i}") for i in range(48)]
    split = split_by_article(articles)
    titles = {k: [a["title"] for a in v] for k, v in split.items()}
    assert [len(titles[k]) for k in ("train", "dev", "test")] == [30, 6, 12]
    assert titles["test"][:3] == ["a3", "a7", "a11"]
    assert sorted(sum(titles.values(), []), key=lambda t: int(t[1:])) == [f"a{i}" for i in range(48)]


class FakeRepresentation:
    name, num_layers, dim = "fake", 2, 6

    def embed(self, sentences):
        out = []
        for sentence in sentences:
            rows = []
            for word in sentence:
                rng = np.random.default_rng(sum(map(ord, word)) * 31 + len(word))
                rows.append(rng.normal(size=(2, 6)))
            out.append(np.stack(rows, axis=1).astype(np.float32))
        return out


def _toy_squad(n, rng):
    """'what does the X eat ?' over a passage listing animals and foods; the answer is X's food."""
    animals, foods = ["dog", "cat", "cow", "owl"], ["bones", "fish", "grass", "mice"]
    articles = []
    for i in range(n):
        order = rng.permutation(4)
        context = " ".join(f"the {animals[k]} eats {foods[(k + i) % 4]} ." for k in order)
        k = int(rng.integers(4))
        food = foods[(k + i) % 4]
        start = context.index(f"the {animals[k]} eats ") + len(f"the {animals[k]} eats ")
        articles.append({"title": str(i), "paragraphs": [{"context": context, "qas": [
            {"id": str(i), "question": f"what does the {animals[k]} eat ?",
             "answers": [{"text": food, "answer_start": start}]}]}]})
    return squad_examples(articles)


def _features(rep, data):
    return SquadFeatures(data, InMemoryFeatures(rep.embed([p.words for p in data.paragraphs])),
                         InMemoryFeatures(rep.embed([q.words for q in data.questions])))


def test_the_reader_learns_a_toy_reading_task():
    rep, rng = FakeRepresentation(), np.random.default_rng(0)
    train, dev = _toy_squad(160, rng), _toy_squad(24, rng)
    reader, result = train_reader(_features(rep, train), _features(rep, dev), num_layers=2, dim=6, max_epochs=12,
                                  patience=12, batch_size=16, learning_rate=1e-2, hidden_dim=12, dropout=0.0,
                                  max_answer_words=3)
    scores = squad_scores(reader.predict(_features(rep, dev)), dev.gold())
    assert scores["exact_match"] >= 80, result.history
    assert result.best_metric == max(h["dev_f1"] for h in result.history)


def test_every_reader_parameter_learns_and_a_question_reads_the_same_alone_as_in_a_batch():
    from elmokit.tasks.span_reader import DocumentReader

    rep, rng = FakeRepresentation(), np.random.default_rng(1)
    data = _toy_squad(5, rng)
    features = _features(rep, data)
    model = DocumentReader(2, 6, hidden_dim=5, dropout=0.0)
    start, end = model(*features.batch(range(5)))
    gold = torch.tensor([q.span for q in data.questions])
    (torch.nn.functional.cross_entropy(start, gold[:, 0]) + torch.nn.functional.cross_entropy(end, gold[:, 1])
     + model.penalty()).backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []
    model.eval()
    with torch.no_grad():
        batch_start, _ = model(*features.batch([0, 3, 4]))
        alone, _ = model(*features.batch([3]))
    n = len(data.paragraphs[data.questions[3].paragraph].words)
    torch.testing.assert_close(batch_start[1, :n], alone[0, :n], rtol=1e-5, atol=1e-6)
