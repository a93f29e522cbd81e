"""The shipped default model: its card tells the truth about it, and it is a trained language model."""

from __future__ import annotations

import lzma
import math
import re
from collections import Counter
from pathlib import Path

import pytest
from testkit import need_shared

import elmokit
from elmokit import Embedder
from elmokit.evaluation.perplexity import perplexity
from elmokit.lm import LanguageModel
from elmokit.text.corpus import Corpus
from elmokit.training.data import make_tokenizer

DEFAULT = Path(elmokit.__file__).parent / "models" / "default"


def test_card_matches_the_shipped_files():
    card = (DEFAULT / "README.md").read_text(encoding="utf-8")
    embedder = Embedder.load("default")
    layers, dim = map(int, re.search(r"Outputs: (\d+) layers of (\d+) dimensions", card).groups())
    assert (embedder.num_layers, embedder.dim) == (layers, dim)
    biLM_params = int(re.search(r"parameters: ([\d,]+) in the biLM", card).group(1).replace(",", ""))
    assert sum(p.numel() for p in embedder.bilm.parameters()) == biLM_params
    assert sum(f.stat().st_size for f in DEFAULT.iterdir()) <= 40 * 2**20, "shipping limit: 40 MB"
    assert "## Perplexity" in card and "wikitext" in card.lower() and "PTB" in card


@pytest.mark.slow  # several seconds: run by CI with -m slow
def test_default_model_predicts_held_out_text_far_better_than_a_unigram_model():
    """Oracle: an add-one unigram model over the same vocabulary, estimated on gutenberg_en valid,
    scored on the same test sentences with the same n + 1 targets per sentence (</S> included)."""
    valid = need_shared("data", "gutenberg_en", "valid.txt.xz")
    test = need_shared("data", "gutenberg_en", "test.txt.xz")
    model, vocabulary, info = LanguageModel.load("default")
    tokenizer = make_tokenizer(info["tokenizer"])
    sentences = list(Corpus(str(test), tokenizer=tokenizer, max_tokens=info["max_length"], limit_lines=60))
    result = perplexity(model, vocabulary, sentences)

    counts: Counter = Counter()
    with lzma.open(valid, "rt", encoding="utf-8") as handle:
        for lineno, line in enumerate(handle):
            if lineno == 20_000:
                break
            tokens = tokenizer(line)
            if tokens:
                counts.update(vocabulary.ids(tokens))
                counts["</S>"] += 1
    total = sum(counts.values()) + len(vocabulary.tokens)
    nll = 0.0
    for sentence in sentences:
        for target in [*vocabulary.ids(sentence), "</S>"]:
            nll -= math.log((counts[target] + 1) / total)
    unigram = math.exp(nll / result.num_targets)
    assert result.num_targets == sum(len(s) + 1 for s in sentences)
    assert result.forward < 0.5 * unigram and result.backward < 0.5 * unigram, (result, unigram)
