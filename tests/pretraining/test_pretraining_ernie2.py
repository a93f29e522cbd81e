"""ERNIE 2.0: the stage schedule's task mix counted against hand-written allocations, each task's labels
on hand-made documents, the permutation classes against itertools' enumeration, the task embedding against
the segment table it folds into, exact resume, and a tiny `elmokit pretrain --objective ernie2` run."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter

import numpy as np
import pytest
from pretraining_testkit import need_transformers, pretrain_ddp_worker, write_document_corpus
from testkit import run_two_ranks
from train_helpers import one_thread

need_transformers()

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from elmokit.engine.run_folder import read_metrics  # noqa: E402
from elmokit.pretraining import ernie2 as E  # noqa: E402
from elmokit.pretraining.corpus import Document, SpecialIds  # noqa: E402

TIMING = ("tokens_per_s", "elapsed_s", "cpu_s")


# --------------------------------------------------------------------------- the schedule


def _counts(schedule, start, stop):
    return Counter(schedule.task(k) for k in range(start, stop))


def test_continual_stages_give_every_task_n_iterations_by_counting():
    # the paper's rule: every task N iterations, spread over the stages from its introduction on; the split
    # is ours (r = N // (S + 1) per later stage), written out by hand: 4 tasks, N = 50:
    # km 20 10 10 10; cap 30 10 10; tdr 40 10; reorder 50
    schedule = E.ContinualSchedule(4, 50)
    stages = [(0, 20, {0: 20}), (20, 60, {0: 10, 1: 30}), (60, 120, {0: 10, 1: 10, 2: 40}),
              (120, 200, {0: 10, 1: 10, 2: 10, 3: 50})]
    for s, (start, stop, expected) in enumerate(stages):
        assert _counts(schedule, start, stop) == expected
        assert {schedule.stage(k) for k in range(start, stop)} == {s}
    assert schedule.total == 200 and _counts(schedule, 0, 200) == {t: 50 for t in range(4)}
    # five tasks, N = 60: r = 10; a task's first stage takes the rest of its 60
    five = E.ContinualSchedule(5, 60)
    bounds = np.cumsum([0, 20, 40, 60, 80, 100])
    hand = [{0: 20}, {0: 10, 1: 30}, {0: 10, 1: 10, 2: 40}, {0: 10, 1: 10, 2: 10, 3: 50},
            {0: 10, 1: 10, 2: 10, 3: 10, 4: 60}]
    for s in range(5):
        assert _counts(five, bounds[s], bounds[s + 1]) == hand[s]
    # past the plan the last stage's mix repeats
    assert _counts(schedule, 200, 360) == {0: 20, 1: 20, 2: 20, 3: 100}
    # the ablation: every task from the start, N each, one stage
    multi = E.ContinualSchedule(4, 50, "multitask")
    assert _counts(multi, 0, 200) == {t: 50 for t in range(4)} and {multi.stage(k) for k in range(200)} == {0}
    assert _counts(multi, 0, 8) == {t: 2 for t in range(4)}  # interleaved, not one task after another


def test_a_stage_interleaves_its_tasks_evenly_and_done_before_counts():
    schedule = E.ContinualSchedule(4, 50)
    for start, stop in ((20, 60), (120, 200)):
        tasks = np.array([schedule.task(k) for k in range(start, stop)])
        n_tasks = len(set(tasks.tolist()))
        for task in set(tasks.tolist()):
            # every prefix of the stage holds the task's share of it, within half the number of tasks + 1
            share = np.cumsum(tasks == task) - np.arange(1, len(tasks) + 1) * (tasks == task).mean()
            assert np.abs(share).max() <= n_tasks / 2 + 1, (task, np.abs(share).max())
    plan = [schedule.task(k) for k in range(300)]
    for task in range(4):
        for k in (0, 1, 19, 20, 77, 200, 250, 300):
            assert schedule.done_before(task, k) == plan[:k].count(task)
    with pytest.raises(ValueError, match="at least 5"):
        E.ContinualSchedule(4, 4)


# --------------------------------------------------------------------------- labels by hand


def test_capitalization_and_token_document_labels_by_hand():
    words = ["The", "cat", "Émile", "42", ",", "iPhone", "ÉCOLE", "über"]
    assert E.capitalization_labels(words) == [1, 0, 1, -100, -100, 0, 1, 0]
    segments = [["The", "cat", "sat", "."], ["the", "dog", "."], ["A", "cat", "!", "Dog"]]
    # "the": segments 0, 1; "cat": 0, 2; "dog": 1, 2 (case-folded); "sat", "a" once; punctuation not predicted
    assert E.token_document_labels(segments) == [[1, 1, 0, -100], [1, 1, -100], [0, 1, -100, 1]]
    # a word twice in one segment and nowhere else does not count
    assert E.token_document_labels([["x", "x"], ["y"]]) == [[0, 0], [0]]
    assert E.first_piece_labels([None, 0, 0, 1, 2, 2, None], [1, 0, 1]).tolist() == [-100, 1, -100, 0, 1, -100, -100]


def test_permutation_classes_by_hand_and_against_itertools():
    by_hand = {(0,): 0, (0, 1): 1, (1, 0): 2, (0, 1, 2): 3, (0, 2, 1): 4, (1, 0, 2): 5, (1, 2, 0): 6, (2, 0, 1): 7,
               (2, 1, 0): 8}
    assert {p: E.permutation_class(p) for p in by_hand} == by_hand and E.reorder_classes(3) == 9
    # k = 4: classes 0..32 in the order itertools enumerates (lexicographic per n, n = 1..4)
    enumerated = [p for n in range(1, 5) for p in itertools.permutations(range(n))]
    assert [E.permutation_class(p) for p in enumerated] == list(range(33)) == list(range(E.reorder_classes(4)))
    with pytest.raises(ValueError):
        E.permutation_class((0, 2))


def test_reordering_cuts_at_sentence_boundaries_and_its_label_names_the_shuffle():
    # three sentences of 3, 3 and 2 tokens (one word each), ids 10.. so pieces are recognisable
    ids, words = list(range(10, 18)), list(range(8))
    rng = np.random.default_rng(0)
    seen = Counter()
    for _ in range(600):
        row = E.reorder_example(ids, words, [3, 6], 3, rng, cls_id=2, sep_id=3)
        shown = row["input_ids"].tolist()
        assert shown[0] == 2 and shown[-1] == 3
        pieces, current = [], []
        for t in shown[1:]:
            if t == 3:
                pieces.append(current)
                current = []
            else:
                current.append(t)
        order = row["order"]
        assert sorted(order) == list(range(len(pieces)))
        original = [None] * len(pieces)
        for position, piece in zip(order, pieces):
            original[position] = piece
        assert sum(original, []) == ids  # the pieces in their original order are the segment
        assert {sum(len(p) for p in original[:i]) for i in range(1, len(original))} <= {3, 6}  # sentence cuts only
        assert row["label"] == E.permutation_class(order)
        seen[row["label"]] += 1
    assert set(seen) == set(range(9))  # every class reached; n uniform in 1..3
    n1, n2 = seen[0], seen[1] + seen[2]
    assert abs(n1 / 600 - 1 / 3) < 0.1 and abs(n2 / 600 - 1 / 3) < 0.1
    # one sentence: cut at word boundaries instead (3 pieces of a 4-word segment)
    for _ in range(50):
        row = E.reorder_example([10, 11, 12, 13], [0, 0, 1, 2], [], 3, rng, cls_id=2, sep_id=3)
        shown = row["input_ids"].tolist()
        assert shown.count(3) == len(row["order"]) and not any(
            shown[i - 1] == 10 and shown[i] == 3 for i in range(1, len(shown)))  # "10 11" is one word: never cut


def _hand_documents():
    # sentence s of document d holds ids 100 d + 10 s + (0, 1, ...): every sentence recognisable
    def doc(d, sentences):
        ids = [[100 * d + 10 * s + i for i in range(len(words))] for s, words in enumerate(sentences)]
        return Document(ids, [list(range(len(w))) for w in sentences], [list(w) for w in sentences])

    return [doc(1, [["Anna", "met", "Bob", "."], ["the", "cat", "sat", "."], ["Bob", "left", "."], ["a", "dog", "!"]]),
            doc(2, [["The", "dog", "ran", "."], ["Rain", "fell", "."]])]


def test_the_reader_labels_hand_made_documents():
    documents = _hand_documents()
    special = SpecialIds(cls=2, sep=3)
    # max_tokens 10: capacity 10 - 1 - 4 = 5 tokens, so every sentence is a segment of its own
    rows = E.examples(documents, max_tokens=10, special=special, rng=np.random.default_rng(0))
    assert [r["words"] for r in rows] == [s for d in documents for s in d.words]
    assert rows[0]["cap"] == [1, 0, 1, -100] and rows[4]["cap"] == [1, 0, 0, -100]
    # document 1: "bob" in segments 0 and 2; "." in three; "the" only in document 2 besides segment 1
    assert rows[0]["tdr"] == [0, 0, 1, -100] and rows[1]["tdr"] == [0, 0, 0, -100] and rows[2]["tdr"] == [1, 0, -100]
    assert rows[4]["tdr"] == [0, 0, 0, -100] and rows[0]["entities"] == [(2, 3)]  # a lone capital opening a sentence is no entity
    # a wide window: document 1 is one segment of four sentences, cut points after 4, 8 and 11 tokens
    wide = E.examples(documents, max_tokens=40, special=special, rng=np.random.default_rng(0))
    assert len(wide) == 2 and wide[0]["sentence_cuts"] == [4, 8, 11] and wide[0]["word_ids"][1:6] == [0, 1, 2, 3, 4]


def test_sentence_distance_pairs_and_their_classes():
    assert [E.sentence_distance_class(1, 2, 1, 3), E.sentence_distance_class(1, 2, 1, 0), E.sentence_distance_class(1, 2, 1, 4),
            E.sentence_distance_class(1, 2, 2, 3), E.sentence_distance_class(1, 2, 1, 1),
            E.sentence_distance_class(1, 2, 1, 2)] == [0, 1, 1, 2, None, None]
    documents = _hand_documents()
    where = {s[0]: (d, i) for d, doc in enumerate(documents) for i, s in enumerate(doc.ids)}  # first ids are unique
    seen = Counter()
    for seed in range(80):
        for row in E.examples(documents, max_tokens=10, special=SpecialIds(cls=2, sep=3), rng=np.random.default_rng(seed)):
            a, b = where[row["pair_a"][0]], where[row["pair_b"][0]]
            for pair, (d, i) in ((row["pair_a"], a), (row["pair_b"], b)):  # a sentence, its end cut to fit
                assert pair == documents[d].ids[i][:len(pair)]
            assert len(row["pair_a"]) + len(row["pair_b"]) <= 10 - 3
            assert row["input_ids"][1] == row["pair_a"][0]  # A is the segment's own sentence
            assert row["distance"] == E.sentence_distance_class(*a, *b)
            seen[row["distance"]] += 1
    assert set(seen) == {0, 1, 2} and min(seen.values()) > 80
    # one document: no "other document" class
    one = E.examples(documents[:1], max_tokens=10, special=SpecialIds(cls=2, sep=3), rng=np.random.default_rng(0))
    assert all(r["distance"] in (0, 1) for r in one)


def test_discourse_pairs_drop_the_marker_and_balance_the_markers():
    assert E.discourse_marker("However , he left .".split()) == (E.DISCOURSE_MARKERS.index("however"), 2)
    assert E.discourse_marker("In the meantime , we ate".split()) == (E.DISCOURSE_MARKERS.index("in the meantime"), 4)
    assert E.discourse_marker("for example , x".split()) == (E.DISCOURSE_MARKERS.index("for example"), 3)
    assert [E.discourse_marker(w.split()) for w in ("In fact he did", "But , .", "However he left", "Then")] == [None] * 4

    def doc(d, sentences):  # word w of sentence s: id 1000 d + 100 s + w, one piece each
        return Document([[1000 * d + 100 * s + w for w in range(len(x))] for s, x in enumerate(sentences)],
                        [list(range(len(x))) for x in sentences], [list(x) for x in sentences])

    thus = [["It", "rained", "."], ["Thus", ",", "we", "stayed", "."]]
    documents = [doc(0, [["A", "b", "."], ["However", ",", "c", "d", "."]]),
                 doc(1, thus * 5), doc(2, [["Then", "we", "left", "."]])]  # "Then" without a comma: no pair
    label_of = {E.DISCOURSE_MARKERS.index("however"): 0, E.DISCOURSE_MARKERS.index("thus"): 0}
    n = 0
    for seed in range(40):
        for row in E.examples(documents, max_tokens=20, special=SpecialIds(cls=2, sep=3), rng=np.random.default_rng(seed)):
            a, b, label = row["discourse_a"], row["discourse_b"], row["discourse"]
            d, s = b[0] // 1000, b[0] % 1000 // 100
            assert b == [1000 * d + 100 * s + w for w in range(2, len(documents[d].ids[s]))]  # marker and comma gone
            assert a == documents[d].ids[s - 1] and E.DISCOURSE_MARKERS[label] == documents[d].words[s][0].lower()
            label_of[label] += 1
            n += 1
    # one "however" pair against five "thus" pairs, yet each marker half the draws (marker first)
    assert abs(label_of[E.DISCOURSE_MARKERS.index("however")] / n - 0.5) <= 4.5 * (0.25 / n) ** 0.5


# --------------------------------------------------------------------------- the model side


@pytest.fixture(scope="module")
def tiny():
    from elmokit.pretraining.models import build_model, preset
    from elmokit.text.subword_tokenizers import train_wordpiece

    lines = ["Anna met Bob in the old town .", "the cat sat on the mat !", "Bob left the town . Rain fell ."] * 3
    tokenizer = train_wordpiece(lines, vocab_size=80, min_frequency=1, lowercase=True)
    model = build_model("bert-mlm", preset("tiny", dropout=0.0), vocab_size=len(tokenizer), seed=0, pad_id=0)
    return tokenizer, model


def test_task_embedding_is_added_to_the_input_and_folds_into_the_segment_table(tiny):
    tokenizer, model = tiny
    objective = E.Ernie2Objective(tokenizer, hidden_size=32, schedule=E.ContinualSchedule(5, 6))
    ids = torch.tensor([[2, 7, 9, 11, 3], [2, 8, 3, 0, 0]])
    batch = {"input_ids": ids, "attention_mask": (ids != 0).long(), "task": torch.tensor(0)}
    model.eval()
    with torch.no_grad():
        plain = model.base_model(input_ids=ids, attention_mask=batch["attention_mask"])[0]
        objective.task_embedding.weight.zero_()
        assert torch.equal(objective.encode(model, batch), plain)  # a zero task vector changes nothing, bit for bit
        torch.manual_seed(3)
        objective.task_embedding.weight.normal_()
        with_task = objective.encode(model, batch)
        assert not torch.allclose(with_task, plain)
        folded = objective.export_model(model).base_model(input_ids=ids, attention_mask=batch["attention_mask"])[0]
    torch.testing.assert_close(folded, with_task, rtol=1e-5, atol=1e-5)
    assert not torch.equal(model.base_model.embeddings.token_type_embeddings.weight,
                           objective.export_model(model).base_model.embeddings.token_type_embeddings.weight)


def test_every_task_builds_a_batch_and_its_loss_gets_gradients(tiny):
    tokenizer, model = tiny
    from elmokit.pretraining.corpus import encode_document

    sentences = [["Anna", "met", "Bob", "in", "the", "old", "town", "."], ["The", "cat", "sat", "on", "the", "mat", "!"],
                 ["However", ",", "Bob", "left", "the", "town", "."], ["Rain", "fell", "."]]
    documents = [encode_document(tokenizer, sentences), encode_document(tokenizer, sentences[::-1])]
    rows = E.examples(documents, max_tokens=24, special=SpecialIds.from_tokenizer(tokenizer), rng=np.random.default_rng(0))
    objective = E.Ernie2Objective(tokenizer, hidden_size=32, tasks=E.TASKS, schedule=E.ContinualSchedule(6, 6, "multitask"))
    model.train()
    for _ in range(6):
        batch = next(objective.batches(rows, batch_size=len(rows), rng=np.random.default_rng(1)))
        task = E.TASKS[int(batch["task"])]
        model.zero_grad()
        objective.task_embedding.zero_grad()
        out = objective.loss(model, batch)
        out.loss.backward()
        assert math.isfinite(float(out.loss.detach())) and out.n_targets > 0 and task in out.parts
        row = int(batch["task"])
        assert objective.task_embedding.weight.grad[row].abs().sum() > 0  # only this task's vector learns
        assert objective.task_embedding.weight.grad[[r for r in range(6) if r != row]].abs().sum() == 0
        if task in objective.heads:
            assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in objective.heads[task].parameters())
    assert objective.state_dict() == {"batches_done": 6} and objective.heads["discourse"].out.out_features == 29


def test_a_few_steps_on_one_batch_lower_every_tasks_loss(tiny):
    from elmokit.pretraining.corpus import encode_document
    from elmokit.pretraining.models import build_model, preset

    tokenizer, _ = tiny
    sentences = [["Anna", "met", "Bob", "in", "the", "old", "town", "."], ["The", "cat", "sat", "on", "the", "mat", "!"],
                 ["However", ",", "Bob", "left", "the", "town", "."], ["Rain", "fell", "."]]
    documents = [encode_document(tokenizer, sentences), encode_document(tokenizer, sentences[::-1])]
    rows = E.examples(documents, max_tokens=24, special=SpecialIds.from_tokenizer(tokenizer), rng=np.random.default_rng(0))
    torch.set_num_threads(1)
    for index, task in enumerate(E.TASKS):
        model = build_model("bert-mlm", preset("tiny", dropout=0.0), vocab_size=len(tokenizer), seed=0, pad_id=0)
        objective = E.Ernie2Objective(tokenizer, hidden_size=32, tasks=E.TASKS, schedule=E.ContinualSchedule(6, 12))
        objective.batches_done = next(k for k in range(200) if objective.schedule.task(k) == index)
        batch = next(objective.batches(rows, batch_size=len(rows), rng=np.random.default_rng(1)))
        assert int(batch["task"]) == index
        parameters = [*model.parameters(), *objective.task_embedding.parameters(), *objective.heads.parameters()]
        optimizer = torch.optim.Adam(parameters, lr=3e-3)
        losses = []
        for _ in range(20):
            optimizer.zero_grad()
            out = objective.loss(model, batch)
            out.loss.backward()
            optimizer.step()
            losses.append(float(out.loss.detach()))
        assert losses[-1] < 0.8 * losses[0], (task, losses)


# --------------------------------------------------------------------------- runs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    write_document_corpus(path)
    return path


def _untimed(metrics):
    return [{k: v for k, v in e.items() if k not in TIMING} for e in metrics]


@pytest.mark.parametrize("schedule, iterations, steps, split", [("multitask", 2, 10, 5), ("continual", 6, 8, 5)])
def test_resume_is_bit_identical(tmp_path, corpus, schedule, iterations, steps, split):
    from elmokit.pretraining.run import PretrainConfig, pretrain

    config = PretrainConfig(objective="ernie2", preset="tiny", max_steps=steps, batch_size=4, vocab_size=300, max_tokens=32,
                            log_every=1, checkpoint_every=split, lr=2e-3, ernie2_schedule=schedule,
                            ernie2_task_iterations=iterations)
    with one_thread():
        pretrain(tmp_path / "straight", corpus=str(corpus), config=config, command="test", progress=False)
        config = config.replace(tokenizer_dir=str(tmp_path / "straight" / "tokenizer"))
        pretrain(tmp_path / "split", corpus=str(corpus), config=config.replace(max_steps=split), command="test",
                 progress=False)
        pretrain(tmp_path / "split", corpus=str(corpus), config=config, resume=True, command="test", progress=False)
    state = json.loads((tmp_path / "split" / "checkpoints" / f"step_{split:08d}" / "state.json").read_text())
    assert state["objective_state"] == {"batches_done": split}
    metrics = read_metrics(tmp_path / "split")
    assert _untimed(metrics) == _untimed(read_metrics(tmp_path / "straight"))
    plan = E.ContinualSchedule(5, iterations, schedule)
    assert [int(e["task"]) for e in metrics] == [plan.task(k) for k in range(steps)]
    if schedule == "multitask":
        assert {int(e["task"]) for e in metrics[split:]} == set(range(5))
    last = f"step_{steps:08d}"
    for name in ("model.safetensors", "optimizer.safetensors"):
        a = load_file(str(tmp_path / "straight" / "checkpoints" / last / name))
        b = load_file(str(tmp_path / "split" / "checkpoints" / last / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        if name == "model.safetensors":
            assert any(k.startswith("task_embedding.") for k in a) and any(k.startswith("ernie2_heads.reorder") for k in a)


def test_cli_smoke_run_trains_every_task_and_exports_the_folded_model(tmp_path, corpus, capsys):
    from transformers import AutoModel, AutoTokenizer

    from elmokit.cli.main import main

    out = tmp_path / "run"
    with one_thread():
        code = main(["pretrain", "--objective", "ernie2", "--corpus", str(corpus), "--out", str(out), "--preset", "tiny",
                     "--max-steps", "30", "--batch-size", "4", "--vocab-size", "300", "--max-tokens", "32", "--lr", "3e-3",
                     "--dropout", "0", "--log-every", "1", "--threads", "1", "--ernie2-task-iterations", "6"])
    assert code == 0, capsys.readouterr().err
    metrics = read_metrics(out)
    plan = E.ContinualSchedule(5, 6)
    assert [int(e["task"]) for e in metrics] == [plan.task(k) for k in range(30)]
    for e in metrics:
        assert math.isfinite(e[E.TASKS[int(e["task"])]])
    record = json.loads((out / "training.json").read_text())
    assert record["pretraining"]["ernie2_schedule"] == "continual" and record["tokenizer"]["kind"] == "wordpiece-uncased"
    tokenizer = AutoTokenizer.from_pretrained(str(out / "model"))
    assert tokenizer("Anna Boris")["input_ids"] == tokenizer("anna boris")["input_ids"]  # the input has no case
    # the exported model is the trained one with task 0's vector folded in
    weights = load_file(str(out / "checkpoints" / "step_00000030" / "model.safetensors"))
    model = AutoModel.from_pretrained(str(out / "model")).eval()
    exported = model.embeddings.token_type_embeddings.weight.detach()
    expected = weights["model.bert.embeddings.token_type_embeddings.weight"] + weights["task_embedding.weight"][0]
    torch.testing.assert_close(exported, expected, rtol=0, atol=0)
    capsys.readouterr()
    code = main(["pretrain", "--objective", "bert", "--corpus", str(corpus), "--out", str(tmp_path / "bad"), "--max-steps", "2",
                 "--ernie2-schedule", "multitask"])
    assert code == 2 and "ernie2_schedule go with --objective ernie2" in capsys.readouterr().err
    code = main(["pretrain", "--objective", "ernie2", "--corpus", str(corpus), "--out", str(tmp_path / "bad"), "--max-steps",
                 "2", "--ernie2-task-iterations", "5"])
    assert code == 2 and "ernie2_task_iterations 5 cannot be spread over 5 stages; give at least 6" in capsys.readouterr().err


@pytest.mark.slow  # two fresh processes import transformers: ~20 s
def test_two_processes_train_every_task_like_one(tmp_path, corpus, monkeypatch):
    """Every task's loss is a mean over its targets (masked tokens, labelled words, pairs), each rank weighted
    by its share: two ranks on the same global batch match one process. Dropout off (drawn per rank)."""
    from elmokit.pretraining.run import PretrainConfig, pretrain

    config = PretrainConfig(objective="ernie2", preset="tiny", max_steps=6, batch_size=6, vocab_size=300, max_tokens=32,
                            log_every=1, checkpoint_every=100, lr=2e-3, dropout=0.0, ernie2_schedule="multitask",
                            ernie2_task_iterations=2, ernie2_tasks="km,cap,tdr,reorder,distance")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with one_thread():
        single = pretrain(tmp_path / "single", corpus=str(corpus), config=config, command="test", progress=False)
    config = config.replace(tokenizer_dir=str(tmp_path / "single" / "tokenizer"))
    run_two_ranks(pretrain_ddp_worker, (2, f"file://{tmp_path / 'rendezvous'}", str(tmp_path / "ddp"), str(corpus),
                                        config.to_dict()))
    ddp = read_metrics(tmp_path / "ddp")
    assert [int(e["task"]) for e in ddp] == [int(e["task"]) for e in single.history] and len({e["task"] for e in ddp}) == 5
    np.testing.assert_allclose([e["loss"] for e in ddp], [e["loss"] for e in single.history], rtol=1e-5)
    a = load_file(str(tmp_path / "single" / "checkpoints" / "step_00000006" / "model.safetensors"))
    b = load_file(str(tmp_path / "ddp" / "checkpoints" / "step_00000006" / "model.safetensors"))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)
