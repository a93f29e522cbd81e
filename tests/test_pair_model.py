"""The InferSent-style pair model (elmokit.tasks.pair_model) and the GLUE suite's splits and table
(elmokit.evaluation.glue), on a fake representation with tiny, oddly sized layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elmokit.evaluation.glue import TASKS, dev_slice, format_table, read_task, summarize, task_metrics
from elmokit.features import InMemoryFeatures
from elmokit.tasks.pair_model import PairFeatures, PairModel, PairModelConfig, train_pair_model

torch.set_num_threads(1)
L, D = 3, 5


class FakeRepresentation:
    """Each word a fixed random vector per layer (no context): enough for a pair model to learn from."""

    name, num_layers, dim = "fake", L, D

    def __init__(self) -> None:
        self.table: dict[str, np.ndarray] = {}

    def embed(self, sentences):
        out = []
        for sentence in sentences:
            for word in sentence:
                if word not in self.table:
                    seed = sum(map(ord, word)) * 7919 + len(word)
                    self.table[word] = np.random.default_rng(seed).normal(size=(L, D)).astype(np.float32)
            out.append(np.stack([self.table[w] for w in sentence], axis=1) if sentence else np.zeros((L, 0, D), np.float32))
        return out


def _features(rep, first, second=None):
    return PairFeatures(InMemoryFeatures(rep.embed(first)), None if second is None else InMemoryFeatures(rep.embed(second)))


def test_the_pair_features_are_u_v_their_distance_and_product_of_max_pooled_encodings():
    rep = FakeRepresentation()
    first = [["a", "dog", "runs"], ["cats", "sleep", "all", "day", "long"], ["hi"]]
    second = [["the", "dog"], ["cats"], ["hello", "there", "you", "all"]]
    model = PairModel(PairModelConfig(num_outputs=3, pair=True, num_layers=L, dim=D, hidden_dim=4, mlp_dim=6)).eval()
    seen = {}

    def keep_input(module, inputs, output):
        seen["x"] = inputs[0]

    model.classifier[1].register_forward_hook(keep_input)
    features = _features(rep, first, second)
    with torch.no_grad():
        model(*features.batch([0, 1, 2]))
        for i in range(3):  # each sentence encoded alone: padding in the batch changes nothing
            u = model.encode(*InMemoryFeatures(rep.embed([first[i]])).batch([0]))[0].numpy()
            v = model.encode(*InMemoryFeatures(rep.embed([second[i]])).batch([0]))[0].numpy()
            expected = np.concatenate([u, v, np.abs(u - v), u * v])
            np.testing.assert_allclose(seen["x"][i].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert seen["x"].shape == (3, 8 * 4)


def _toy(n, rng):
    """Pairs labelled 'same' when both sentences name the same animal; the rest of the words are noise."""
    animals, noise = ["dog", "cat", "cow"], ["the", "a", "big", "small", "red", "runs", "sits", "here"]
    first, second, labels = [], [], []
    for i in range(n):
        a = animals[i % 3]
        b = a if i % 2 else animals[(i + 1) % 3]
        first.append(list(rng.choice(noise, 2)) + [a])
        second.append([b] + list(rng.choice(noise, 1 + i % 3)))
        labels.append("same" if a == b else "different")
    return first, second, labels


def test_the_pair_model_learns_a_toy_pair_task_on_the_epoch_loop():
    rep = FakeRepresentation()
    rng = np.random.default_rng(0)
    train, dev = _toy(96, rng), _toy(30, rng)
    task = TASKS["rte"]
    predictor, result = train_pair_model(
        (_features(rep, *train[:2]), train[2]), (_features(rep, *dev[:2]), dev[2]), pair=True, num_layers=L, dim=D,
        metric=lambda p, g: task_metrics(task, p, g)["score"], max_epochs=25, patience=25, batch_size=8,
        learning_rate=1e-2, hidden_dim=8, mlp_dim=16, dropout=0.0)
    assert task_metrics(task, predictor.predict(_features(rep, *dev[:2]), 30), dev[2])["accuracy"] >= 90
    assert result.best_epoch is not None and result.history[result.best_epoch - 1]["dev_metric"] == result.best_metric
    assert set(predictor.labels) == {"same", "different"}


def test_a_regression_task_predicts_floats_and_single_sentence_tasks_use_u_alone():
    rep = FakeRepresentation()
    first = [["good"], ["bad"], ["good", "good"], ["bad", "day"]] * 6
    scores = [4.0, 1.0, 4.5, 0.5] * 6
    task = TASKS["stsb"]
    predictor, _ = train_pair_model((_features(rep, first), scores), (_features(rep, first), scores), pair=False,
                                    num_layers=L, dim=D, regression=True, max_epochs=30, learning_rate=1e-2,
                                    metric=lambda p, g: task_metrics(task, p, g)["score"], hidden_dim=4, mlp_dim=8,
                                    dropout=0.0)
    predicted = predictor.predict(_features(rep, first), len(first))
    assert all(isinstance(p, float) for p in predicted)
    assert task_metrics(task, predicted, scores)["pearson"] > 90
    assert predictor.model.classifier[1].in_features == 2 * 4


def test_the_dev_slice_is_fixed_disjoint_and_a_tenth():
    train, dev = dev_slice(95)
    assert dev == dev_slice(95)[1] and len(dev) == 10 and sorted(train + dev) == list(range(95))
    assert dev != list(range(10))  # a shuffled slice, not the head of the file
    small_train, small_dev = dev_slice(3)
    assert len(small_dev) == 1 and sorted(small_train + small_dev) == [0, 1, 2]


def test_task_score_is_the_mean_of_the_metrics_and_the_table_shows_the_spread():
    mrpc = task_metrics(TASKS["mrpc"], ["1", "1", "0", "0"], ["1", "0", "0", "1"])
    assert mrpc["accuracy"] == 50.0 and mrpc["f1"] == 50.0 and mrpc["score"] == 50.0
    runs = [{"test": {"accuracy": 60.0, "score": 60.0}}, {"test": {"accuracy": 70.0, "score": 70.0}}]
    summary = summarize(runs)
    assert summary["mean"]["score"] == 65.0 and summary["std"]["score"] == pytest.approx(np.std([60, 70], ddof=1))
    one = summarize(runs[:1])
    table = format_table([{"representation": "elmo:default", "tasks": {"rte": summary, "cola": {
        "mean": {"matthews": 20.0, "score": 20.0}, "std": {"score": 0.0}, "seeds": 1}}}], ["cola", "rte"])
    lines = table.splitlines()
    assert lines[0].split() == ["representation", "cola", "rte", "avg"]
    assert lines[1].split() == ["elmo:default", "20.0", "65.0±7.1", "42.5"]
    assert one["std"]["score"] == 0.0


def test_the_real_splits_have_the_documented_sizes():
    from testkit import need_shared

    need_shared("data", "glue")
    sizes = {name: {k: len(v) for k, v in read_task(name).items()} for name in ("cola", "rte", "wnli")}
    assert sizes["cola"] == {"train": 7696, "dev": 855, "test": 1043}
    assert sizes["rte"] == {"train": 2241, "dev": 249, "test": 277}
    assert sizes["wnli"]["test"] == 71 and sizes["wnli"]["train"] + sizes["wnli"]["dev"] == 635


def test_every_parameter_of_the_pair_model_gets_a_gradient():
    rep = FakeRepresentation()
    model = PairModel(PairModelConfig(num_outputs=2, pair=True, num_layers=L, dim=D, hidden_dim=3, mlp_dim=5))
    features = _features(rep, [["a", "dog"], ["the", "big", "cat"]], [["cat"], ["a", "dog", "runs"]])
    (model(*features.batch([0, 1])).sum() + model.penalty()).backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


def _esim_by_hand(model, a_layers, b_layers):
    """ESIM on one unpadded pair, re-stated in numpy from the model's own BiLSTM states (eqs. 11-18 of Chen et al.)."""
    with torch.no_grad():
        a = model.words(a_layers, torch.ones(1, a_layers.shape[2], dtype=torch.bool))[0].numpy()
        b = model.words(b_layers, torch.ones(1, b_layers.shape[2], dtype=torch.bool))[0].numpy()
    e = a @ b.T

    def softmax(x, axis):
        x = np.exp(x - x.max(axis=axis, keepdims=True))
        return x / x.sum(axis=axis, keepdims=True)

    a_tilde, b_tilde = softmax(e, 1) @ b, softmax(e, 0).T @ a
    pooled = []
    with torch.no_grad():
        for x, x_tilde in ((a, a_tilde), (b, b_tilde)):
            enhanced = torch.from_numpy(np.concatenate([x, x_tilde, x - x_tilde, x * x_tilde], axis=1)).float()
            composed = model.composition(model.projection(enhanced)[None])[0][0].numpy()
            pooled += [composed.mean(0), composed.max(0)]
        return model.classifier(torch.from_numpy(np.concatenate(pooled)).float()[None])[0]


def test_esim_matches_a_re_statement_pair_by_pair_inside_a_padded_batch():
    rep = FakeRepresentation()
    first = [["a", "dog", "runs"], ["cats", "sleep", "all", "day", "long"], ["hi"]]
    second = [["the", "dog"], ["cats"], ["hello", "there", "you", "all"]]
    model = PairModel(PairModelConfig(num_outputs=3, pair=True, num_layers=L, dim=D, hidden_dim=4, mlp_dim=6,
                                      architecture="esim")).eval()
    with torch.no_grad():
        out = model(*_features(rep, first, second).batch([0, 1, 2]))
    for i in range(3):
        a_layers = InMemoryFeatures(rep.embed([first[i]])).batch([0])[0]
        b_layers = InMemoryFeatures(rep.embed([second[i]])).batch([0])[0]
        torch.testing.assert_close(out[i], _esim_by_hand(model, a_layers, b_layers), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="ESIM aligns two sentences"):
        PairModelConfig(num_outputs=2, pair=False, num_layers=L, dim=D, architecture="esim")


def test_esim_learns_the_toy_pair_task_and_every_parameter_learns():
    rep = FakeRepresentation()
    rng = np.random.default_rng(0)
    train, dev = _toy(96, rng), _toy(30, rng)
    task = TASKS["rte"]
    predictor, _ = train_pair_model(
        (_features(rep, *train[:2]), train[2]), (_features(rep, *dev[:2]), dev[2]), pair=True, num_layers=L, dim=D,
        metric=lambda p, g: task_metrics(task, p, g)["score"], max_epochs=25, patience=25, batch_size=8,
        learning_rate=1e-2, hidden_dim=8, mlp_dim=16, dropout=0.0, architecture="esim")
    assert task_metrics(task, predictor.predict(_features(rep, *dev[:2]), 30), dev[2])["accuracy"] >= 90
    model = PairModel(PairModelConfig(num_outputs=2, pair=True, num_layers=L, dim=D, hidden_dim=3, mlp_dim=5,
                                      architecture="esim"))
    model(*_features(rep, *[x[:4] for x in train[:2]]).batch(range(4))).sum().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0] == []
