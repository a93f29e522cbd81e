"""The shipped Chinese model (``zh``; or the folder named by ``ELMOKIT_ZH_MODEL``, e.g. the larger biLM that
``benchmarks/zh_results.py --steps large`` builds): its card tells the truth about it, raw Chinese lines are
cut by the segmenter it was trained with (``elmokit embed --model zh`` on raw lines), it fits the repository's
size rule, and it is a trained language model (slow: against a unigram oracle)."""

from __future__ import annotations

import math
import os
import re
from collections import Counter

import h5py
import numpy as np
import pytest

from elmokit import Embedder
from elmokit.formats import resolve_model_path

pytest.importorskip("jieba", reason="the zh model records jieba: pip install 'elmokit[zh]'")

NAME = os.environ.get("ELMOKIT_ZH_MODEL", "zh")
ZH = resolve_model_path(NAME)
RAW = ["我爱北京天安门。", "１９９８年新年讲话，iPhone 15 和 GPU 都是外来词😀", "神说：要有光！"]


def test_its_card_matches_the_files():
    card = (ZH / "README.md").read_text(encoding="utf-8")
    embedder = Embedder.load(NAME)
    params = int(re.search(r"parameters: ([\d,]+) in the biLM", card).group(1).replace(",", ""))
    assert sum(p.numel() for p in embedder.bilm.parameters()) == params
    assert '"kind": "jieba"' in card


@pytest.mark.skipif(NAME != "zh", reason="the size rule binds the shipped model only")
def test_the_shipped_model_has_every_file_under_5_mb_and_loads_by_name():
    files = {path.name: path.stat().st_size for path in ZH.iterdir()}
    assert {"config.json", "model.safetensors", "lm.safetensors", "lm.json", "vocab.txt"} <= set(files)
    assert max(files.values()) < 5_000_000, files
    assert Embedder.load("zh").dim == 2 * 96  # the compact preset: 2 x 96 (forward and backward projections)


def test_raw_chinese_lines_are_cut_by_jieba_and_embedded_as_those_words(tmp_path):
    from elmokit.text.segmenters import segment

    embedder = Embedder.load(NAME)
    words = [segment("jieba", line) for line in RAW]
    assert [embedder.tokenize(line) for line in RAW] == words
    (tmp_path / "zh.txt").write_text("".join(line + "\n" for line in RAW), encoding="utf-8")
    from elmokit.cli.main import main

    assert main(["embed", str(tmp_path / "zh.txt"), str(tmp_path / "out.h5"), "--all", "--model", NAME]) == 0
    alone = [embedder.embed([w])[0] for w in words]  # each sentence by itself: the batch changes no bit
    with h5py.File(tmp_path / "out.h5", "r") as h5:
        for i, expected in enumerate(alone):
            assert h5[str(i)].shape == (embedder.num_layers, len(words[i]), embedder.dim)
            np.testing.assert_array_equal(h5[str(i)][()], expected)


@pytest.mark.slow  # tens of seconds: run by CI with -m slow
def test_zh_model_predicts_held_out_peoples_daily_far_better_than_a_unigram_model():
    """Oracle: add-one unigram over the model's vocabulary, estimated on People's Daily train
    paragraphs, scored on the first test paragraphs with the same n + 1 targets per sentence."""
    from testkit import need_shared

    from elmokit.evaluation.perplexity import perplexity
    from elmokit.lm import LanguageModel
    from elmokit.tasks.zh_data import read_peoples_daily

    source = need_shared("data", "zh", "peoples_daily_199801", "199801.txt")
    model, vocabulary, info = LanguageModel.load(ZH)
    embedder = Embedder.load(NAME)
    cut = info["max_length"]
    test = read_peoples_daily(source, "test")
    sentences = [embedder.tokenize("".join(words))[:cut] for words in test.sentences[:80]]
    sentences = [s for s in sentences if s]
    result = perplexity(model, vocabulary, sentences)
    counts: Counter = Counter()
    for words in read_peoples_daily(source, "train").sentences[:4000]:
        tokens = embedder.tokenize("".join(words))
        counts.update(vocabulary.ids(tokens))
        counts["</S>"] += 1
    total = sum(counts.values()) + len(vocabulary.tokens)
    nll = -sum(math.log((counts[t] + 1) / total) for s in sentences for t in [*vocabulary.ids(s), "</S>"])
    unigram = math.exp(nll / result.num_targets)
    assert result.forward < 0.5 * unigram, (result.forward, unigram)
