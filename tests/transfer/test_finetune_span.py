"""BERT's SQuAD head (elmokit.transfer.finetune_span): the windows token by token on a toy tokenizer, the
maximum-context rule by hand, prediction against brute force over the per-window scores, and a toy
reading task learnt."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("transformers")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from elmokit.errors import UserError  # noqa: E402
from elmokit.pretraining.models import build_model, preset  # noqa: E402
from elmokit.tasks.metrics import squad_scores  # noqa: E402
from elmokit.tasks.squad_data import squad_examples  # noqa: E402
from elmokit.text.subword_tokenizers import wordpiece_from_vocab  # noqa: E402
from elmokit.transfer.finetune import FineTuneOptions, load_base  # noqa: E402
from elmokit.transfer.finetune_span import (  # noqa: E402
    SpanFineTuned,
    SpanInputs,
    SpanModel,
    finetune_span,
    max_context_windows,
    span_targets,
    word_windows,
)

torch.set_num_threads(1)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "cat", "cow", "owl", "eats", "bones", "fish",
         "grass", "mice", "what", "does", "eat", "?", ".", "big", "##gest"]


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    build_model("bert", preset("tiny", max_positions=16), vocab_size=len(VOCAB), seed=1).save_pretrained(str(folder))
    wordpiece_from_vocab(VOCAB).save_pretrained(str(folder))
    return folder


def test_word_windows_fit_overlap_and_cover_the_passage():
    counts = [1, 2, 1, 1, 3, 1, 1, 2, 1]
    windows = word_windows(counts, room=5, stride=2)
    # piece offsets 0 1 3 4 5 8 9 10 12 13: each window takes what fits 5 pieces; the next starts at the first
    # word 2 or more pieces after the current start
    assert windows == [(0, 4), (2, 5), (4, 7), (5, 9)]
    assert all(sum(counts[s:e]) <= 5 for s, e in windows)
    assert word_windows([1, 1], room=5, stride=2) == [(0, 2)]
    with pytest.raises(UserError, match="more than the 2"):
        word_windows([1, 3], room=2, stride=1)


def test_maximum_context_by_hand():
    # word 2 is in (0, 3) with context min(2, 0) = 0 and in (2, 5) with min(0, 2) = 0: a tie -> the first window
    # word 3: (2, 5) only; word 4: (2, 5) min(2, 0) + .03 vs (4, 6) min(0, 1) + .02 -> (2, 5)
    assert max_context_windows([(0, 3), (2, 5), (4, 6)], 6) == [0, 0, 0, 1, 1, 2]
    assert max_context_windows([(0, 5), (1, 4)], 5) == [0, 0, 0, 0, 0]  # longer window wins the tie at word 2 (.05)
    assert max_context_windows([(0, 4), (1, 6)], 6)[2] == 1  # min(2, 1) = 1 vs min(1, 3) = 1; .05 > .04


def test_windows_are_cls_question_sep_passage_sep_token_by_token(bert_folder):
    base, tokenizer = load_base(bert_folder)
    inputs = SpanInputs(tokenizer, base.config, stride=0.5)
    question = ["what", "does", "the", "dog", "eat", "?"]
    passage = ["the", "dog", "eats", "biggest", "bones", ".", "the", "cat", "eats", "fish", "."]
    windows = inputs.windows(question, passage)
    tokens = [tokenizer.convert_ids_to_tokens(w.input_ids) for w in windows]
    head = ["[CLS]", "what", "does", "the", "dog", "eat", "?", "[SEP]"]
    assert all(t[:8] == head and t[-1] == "[SEP]" and len(t) <= 16 for t in tokens)
    assert tokens[0] == head + ["the", "dog", "eats", "big", "##gest", "bones", ".", "[SEP]"]  # 7 pieces: the room
    assert windows[0].token_type_ids == [0] * 8 + [1] * 8
    assert windows[0].first == [8, 9, 10, 11, 13, 14] and windows[0].last == [8, 9, 10, 12, 13, 14]
    covered = sorted({k for w in windows for k in range(w.start, w.end)})
    assert covered == list(range(len(passage))) and windows[-1].end == len(passage)
    for w in windows:  # every word's pieces sit where the window says
        for k in range(w.start, w.end):
            spelled = "".join(t.removeprefix("##") for t in tokens[windows.index(w)][w.first[k - w.start]:
                                                                                   w.last[k - w.start] + 1])
            assert spelled == passage[k]
    # the answer "biggest bones" (words 3-4) lies in the first window, not in one starting after it
    assert span_targets(windows[0], (3, 4)) == (11, 13)
    later = next(w for w in windows if w.start > 3)
    assert span_targets(later, (3, 4)) == (0, 0)


class ScriptedModel(torch.nn.Module):
    """Start and end scores drawn at random for each window row (fixed by its ids), so prediction can be
    checked against an independent brute force."""

    def forward(self, ids, types, mask):
        out = []
        for row in ids:
            rng = np.random.default_rng(int(row.sum()) * 7 + int(row[-1]) + len(row))
            out.append(torch.from_numpy(rng.normal(size=(2, ids.shape[1]))).float())
        scores = torch.stack(out)  # (R, 2, P)
        return scores[:, 0], scores[:, 1]


def test_prediction_takes_each_word_from_its_maximum_context_window(bert_folder):
    base, tokenizer = load_base(bert_folder)
    inputs = SpanInputs(tokenizer, base.config, stride=0.5)
    context = "the dog eats bones . the cat eats fish . the cow eats grass . the owl eats mice ."
    data = squad_examples([{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q", "question": "what does the cow eat ?",
         "answers": [{"text": "grass", "answer_start": context.index("grass")}]}]}]}])
    tuned = SpanFineTuned(ScriptedModel(), inputs, 0, max_answer_words=4)
    windows = tuned.window_lists(data)[0]
    assert len(windows) >= 3
    # brute force: run every window alone, give each word the scores of the window where its context is largest
    # (computed here from the definition), then try every (i, j)
    words = data.paragraphs[0].words
    per_window = []
    for w in windows:
        ids = torch.tensor([w.input_ids])
        per_window.append(tuned.model(ids, None, torch.ones_like(ids)))
    start, end = [], []
    for k in range(len(words)):
        holders = [(min(k - w.start, w.end - 1 - k) + 0.01 * (w.end - w.start), -n) for n, w in enumerate(windows)
                   if w.start <= k < w.end]
        n = -max(holders)[1]
        w = windows[n]
        start.append(float(per_window[n][0][0, w.first[k - w.start]]))
        end.append(float(per_window[n][1][0, w.last[k - w.start]]))
    best = max(((i, j) for i, j in itertools.product(range(len(words)), repeat=2) if i <= j < i + 4),
               key=lambda p: start[p[0]] + end[p[1]])
    assert tuned.predict(data) == {"q": data.paragraphs[0].text(*best)}


def _toy(n, seed):
    rng = np.random.default_rng(seed)
    animals, foods = ["dog", "cat", "cow", "owl"], ["bones", "fish", "grass", "mice"]
    articles = []
    for i in range(n):
        order = rng.permutation(4)[:2]
        context = " ".join(f"the {animals[k]} eats {foods[(k + i) % 4]} ." for k in order)
        k = int(order[i % 2])
        food = foods[(k + i) % 4]
        start = context.index(f"the {animals[k]} eats ") + len(f"the {animals[k]} eats ")
        articles.append({"title": str(i), "paragraphs": [{"context": context, "qas": [
            {"id": str(i), "question": f"what does the {animals[k]} eat ?",
             "answers": [{"text": food, "answer_start": start}]}]}]})
    return squad_examples(articles)


def test_fine_tuning_learns_a_toy_reading_task(tmp_path):
    """Two facts per passage, the question names one animal: choosing the food by position alone scores 50."""
    build_model("bert", preset("tiny", max_positions=32), vocab_size=len(VOCAB), seed=1).save_pretrained(str(tmp_path))
    wordpiece_from_vocab(VOCAB).save_pretrained(str(tmp_path))
    train, dev = _toy(256, 0), _toy(24, 1)
    tuned, result = finetune_span(tmp_path, train, dev, patience=10, max_answer_words=2,
                                  options=FineTuneOptions(epochs=10, batch_size=16, learning_rate=3e-3, dropout=0.0,
                                                          seed=0))
    assert squad_scores(tuned.predict(dev), dev.gold())["exact_match"] >= 70, result.history
    assert SpanModel  # the head class is public: start/end are one Linear(H, 2)
    assert tuned.model.start_end.out_features == 2
