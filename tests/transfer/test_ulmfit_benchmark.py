"""benchmarks/ulmfit_trec.py's own code paths: each direction's error and the averaged one against a
numpy re-statement of the argmax over softmaxes, and the SST-2 split's sizes (SOURCE.txt's counts)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from testkit import load_benchmark, need_shared

from elmokit.bilm import PRESETS
from elmokit.lm import LanguageModel, init_like_bilm_tf
from elmokit.text.chars import batch_to_ids
from elmokit.text.vocab import Vocabulary
from elmokit.transfer.ulmfit import DirectionalClassifier, ULMFiTClassifier, ULMFiTConfig

CONFIG = PRESETS["tiny"].replace(lstm_dim=7, projection_dim=5, filters=((1, 3), (2, 4)), n_layers=2)
VOCAB = Vocabulary(("<S>", "</S>", "<UNK>", "the", "film", "was", "great", "awful", "a", "plot"))
SENTENCES = [["the", "film", "was", "great"], ["awful"], ["a", "plot"], ["great", "film"], ["the", "plot", "was"],
             ["awful", "film"], ["was", "it", "great", "?"], ["a"], ["plot", "plot", "great"]]
LABELS = ["neg", "pos", "q"]


@pytest.fixture(scope="module")
def benchmark():
    return load_benchmark("ulmfit_trec", "ulmfit_benchmark")


def test_per_direction_and_averaged_errors_match_numpy(benchmark):
    torch.set_num_threads(1)
    lm = LanguageModel(CONFIG, len(VOCAB), bos_id=VOCAB.bos, eos_id=VOCAB.eos)
    init_like_bilm_tf(lm, torch.Generator().manual_seed(0))
    config = ULMFiTConfig(bilm=CONFIG.to_dict(), num_labels=3, head_dim=6)
    models = {}
    for seed, direction in enumerate(("forward", "backward")):
        torch.manual_seed(seed + 3)
        models[direction] = DirectionalClassifier(config, direction).eval()
        models[direction].encoder.load_from_bilm(lm.bilm)
    classifier = ULMFiTClassifier(config, models, LABELS)
    with torch.no_grad():
        logits = {d: m(batch_to_ids(SENTENCES)).numpy().astype(np.float64) for d, m in models.items()}  # (N, K)
    softmax = {d: np.exp(z - z.max(1, keepdims=True)) / np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True)
               for d, z in logits.items()}
    # gold labels = the forward argmax with every third one moved on: the forward error is 3/9 by construction
    forward_guess = softmax["forward"].argmax(1)
    gold = [LABELS[(g + (i % 3 == 0)) % 3] for i, g in enumerate(forward_guess)]
    target = np.array([LABELS.index(y) for y in gold])

    def numpy_error(probabilities):
        return 100 * float(np.mean(probabilities.argmax(1) != target))

    assert abs(numpy_error(softmax["forward"]) - 100 / 3) < 1e-9
    errors = benchmark.per_direction_error(classifier, (SENTENCES, gold))
    assert set(errors) == {"forward", "backward"}
    for direction in errors:
        assert errors[direction] == pytest.approx(numpy_error(softmax[direction]), abs=1e-9)
    averaged = (softmax["forward"] + softmax["backward"]) / 2  # §3.3: the mean of the two softmaxes
    assert benchmark.error(classifier, (SENTENCES, gold)) == pytest.approx(numpy_error(averaged), abs=1e-9)


def test_sst2_split_has_the_standard_sizes(benchmark):
    need_shared("data", "sst", "trees", "train.txt")
    train, valid, test, description = benchmark.load_task("sst2")
    assert [len(part[0]) for part in (train, valid, test)] == [6920, 872, 1821]  # SOURCE.txt's SST-2 counts
    for sentences, labels in (train, valid, test):
        assert len(sentences) == len(labels) and set(labels) == {"negative", "positive"}
        assert all(sentence and all(isinstance(w, str) for w in sentence) for sentence in sentences)
    assert "6920" in description
