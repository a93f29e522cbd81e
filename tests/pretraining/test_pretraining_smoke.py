"""End to end on the real corpus, small: WordPiece trained on 300 Gutenberg lines, a tiny BERT, 20
optimizer steps of MLM + NSP on one fixed batch: the loss goes down and every parameter gets a gradient."""

from __future__ import annotations

import lzma
import re

import numpy as np
from pretraining_testkit import need_transformers
from testkit import need_shared

need_transformers()

import torch  # noqa: E402

from elmokit.pretraining import objectives  # noqa: E402
from elmokit.pretraining.masking import MaskingVocab, nsp_pairs  # noqa: E402
from elmokit.pretraining.models import build_model, preset, special_ids  # noqa: E402
from elmokit.text.subword_tokenizers import encode_words, train_wordpiece  # noqa: E402


def _gutenberg_lines(n: int) -> list[str]:
    path = need_shared("data", "gutenberg_en", "train.00.txt.xz")
    lines = []
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(line.strip())
            if len(lines) == n:
                break
    return lines


def test_tiny_bert_learns_mlm_and_nsp_on_a_fixed_batch():
    lines = _gutenberg_lines(300)
    tokenizer = train_wordpiece(lines, vocab_size=400, min_frequency=2)
    # a paragraph is a document; its sentences split at . ! ?; each sentence encoded word by word
    documents, word_ids = [], []
    for paragraph in lines[40:]:
        sentences = [s.split() for s in re.split(r"(?<=[.!?])\s+", paragraph) if s.split()]
        if len(sentences) < 2:
            continue
        encodings = [encode_words(tokenizer, s, add_special_tokens=False) for s in sentences]
        documents.append([e.input_ids for e in encodings])
        word_ids.append([e.word_ids for e in encodings])
        if len(documents) == 12:
            break
    rng = np.random.default_rng(0)
    pairs = nsp_pairs(documents, max_tokens=24, cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id, rng=rng,
                      word_ids=word_ids)
    chosen = [next(p for p in pairs if p.next_sentence_label == 0), *[p for p in pairs if p.next_sentence_label == 1][:2]]
    objective = objectives.bert(MaskingVocab.from_tokenizer(tokenizer), pad_id=tokenizer.pad_token_id)
    batch = next(objective.batches(chosen, batch_size=3, rng=rng))  # masked once: a fixed batch
    assert batch["input_ids"].shape[0] == 3 and batch["input_ids"].shape[1] <= 24
    model = build_model("bert", preset("tiny", dropout=0.0), vocab_size=len(tokenizer), seed=0, **special_ids(tokenizer))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(20):
        optimizer.zero_grad()
        out = objective.loss(model, batch)
        out.loss.backward()
        if step == 0:
            assert set(out.parts) == {"mlm", "nsp"} and out.n_targets >= 3
            no_grad = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
            assert no_grad == []
        optimizer.step()
        losses.append(float(out.loss.detach()))
    assert losses[-1] < 0.6 * losses[0] and all(b < a for a, b in zip(losses, losses[1:])), losses
