"""ERNIE 1.0 span sources and stages: chunker and entity spans by hand, masks aligned to entity and
phrase boundaries, the basic -> phrase -> entity schedule, a few steps lower the loss."""

from __future__ import annotations

import numpy as np
from pretraining_testkit import need_transformers

need_transformers()

import torch  # noqa: E402

from elmokit.pretraining import knowledge as K  # noqa: E402
from elmokit.pretraining.models import build_model, preset  # noqa: E402
from elmokit.text.subword_tokenizers import encode_words, train_wordpiece  # noqa: E402

WORDS = "Harry Potter is a famous novel by J. K. Rowling and the old black cat sat on the mat .".split()
UPOS = "PROPN PROPN AUX DET ADJ NOUN ADP PROPN PROPN PROPN CCONJ DET ADJ ADJ NOUN VERB ADP DET NOUN PUNCT".split()


def test_span_sources_by_hand():
    assert K.noun_phrase_spans(UPOS) == [(0, 2), (3, 6), (7, 10), (11, 15), (17, 19)]
    assert K.capitalised_entity_spans(WORDS) == [(0, 2), (7, 10)]
    sentences = "The cat met Mary . Then Bob Smith left . The Queen ran".split()
    assert K.capitalised_entity_spans(sentences) == [(3, 4), (6, 8), (11, 12)]
    # the heuristic's known weakness: a verb after a noun joins the run ("old black cat sat")
    assert K.content_word_phrase_spans(WORDS) == [(0, 2), (4, 6), (7, 10), (12, 16)]
    assert K.bio_spans("B-PER I-PER O I-LOC B-ORG B-ORG I-MISC S-PER".split()) == [
        (0, 2, "PER"), (3, 4, "LOC"), (4, 5, "ORG"), (5, 6, "ORG"), (6, 7, "MISC"), (7, 8, "PER")]
    assert K.knowledge_units(6, [(3, 5), (1, 3), (2, 4)]) == [(0, 1), (1, 3), (3, 5), (5, 6)]
    tagger = K.UnigramPosTagger.fit([[("the", "DET"), ("cat", "NOUN"), ("old", "ADJ"), ("ran", "VERB")]])
    assert K.tagger_phrases(tagger)([["the", "old", "cat", "ran"]]) == [[(0, 3)]]


def test_masks_follow_entity_and_phrase_boundaries():
    words = WORDS * 3  # long enough that the 15% budget fits a 3-word entity ("J. K. Rowling" is 5 pieces)
    tokenizer = train_wordpiece([" ".join(WORDS)] * 3, vocab_size=200, min_frequency=1)
    enc = encode_words(tokenizer, words)
    example = {"input_ids": enc.input_ids, "word_ids": enc.word_ids}
    assert K.words_from_pieces(tokenizer, enc.input_ids, enc.word_ids) == words
    objective = K.ErnieObjective(K.MaskingVocab.from_tokenizer(tokenizer), pad_id=0, schedule=K.ErnieSchedule(1, 1),
                                 tokenizer=tokenizer)
    rng = np.random.default_rng(0)
    n = len(WORDS)
    for stage, base in (("entity", [(0, 2), (7, 10)]), ("phrase", [(0, 2), (4, 6), (7, 10), (12, 16)])):
        spans = [(s + k * n, e + k * n) for k in range(3) for s, e in base]
        units = K.knowledge_units(len(words), objective.spans(example, stage))
        assert [u for u in units if u[1] - u[0] > 1] == spans
        hit = {s: 0 for s in spans}
        for _ in range(200):
            masked = objective.mask(example, stage, rng)
            predicted = {enc.word_ids[p] for p in np.flatnonzero(masked.labels != -100)}
            for s, e in spans:  # a span is predicted whole or not at all
                inside = predicted & set(range(s, e))
                assert inside in (set(), set(range(s, e)))
                hit[(s, e)] += bool(inside)
            for unit in masked.units:  # every unit is whole words
                unit_words = {enc.word_ids[p] for p in unit}
                assert sorted(unit) == [p for p, w in enumerate(enc.word_ids) if w in unit_words]
        assert all(v > 0 for v in hit.values()), hit


def test_schedule_and_a_few_steps_lower_the_loss():
    torch.set_num_threads(1)
    tokenizer = train_wordpiece([" ".join(WORDS)] * 3, vocab_size=60, min_frequency=1)
    enc = encode_words(tokenizer, WORDS)
    examples = [{"input_ids": enc.input_ids, "word_ids": enc.word_ids}] * 4
    objective = K.ernie_from_options(tokenizer, {"ernie_stage_batches": (2, 2)})
    stages = [int(b["stage"]) for b in objective.batches(examples * 3, batch_size=2, rng=np.random.default_rng(0))]
    assert stages == [0, 0, 1, 1, 2, 2] and objective.state_dict() == {"batches_done": 6}
    batch = next(objective.batches(examples, batch_size=4, rng=np.random.default_rng(1)))
    model = build_model("bert-mlm", preset("tiny", dropout=0.0), vocab_size=len(tokenizer), seed=0, pad_id=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        out = objective.loss(model, batch)
        out.loss.backward()
        optimizer.step()
        losses.append(float(out.loss.detach()))
    assert losses[-1] < 0.6 * losses[0], losses
