"""Chinese ERNIE (issue 16): characters as tokens, jieba words as phrases, cached entities; masks keep a
chosen phrase or entity whole within BERT's budget and 80/10/10; People's Daily nr/ns/nt as BIO; a tiny
run records its language."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pretraining_testkit import assert_proportion, need_transformers

need_transformers()

from elmokit.pretraining import knowledge as K  # noqa: E402
from elmokit.pretraining.corpus import SpecialIds, encode_document, segments  # noqa: E402
from elmokit.pretraining.knowledge_zh import ChineseUnits, EntityCache, tag_entity_cache  # noqa: E402
from elmokit.pretraining.masking import MASK, RANDOM, MaskingVocab  # noqa: E402
from elmokit.tasks.zh_data import parse_peoples_daily_line, peoples_daily_entities_bio, read_peoples_daily_ner  # noqa: E402
from elmokit.text.subword_tokenizers import encode_words, train_wordpiece  # noqa: E402

# jieba-style words of three sentences; entities by hand as character ranges of each sentence's text
SENTENCES = [
    (["中国人民银行", "在", "北京", "召开", "会议", "。"], [(0, 6, "ORG"), (7, 9, "LOC")]),
    (["李明", "说", "：", "大家", "好", "！"], [(0, 2, "PER")]),
    (["今天", "天气", "很", "好", "2024", "年", "。"], []),
]


def _tokenizer():
    lines = [" ".join(words) for words, _ in SENTENCES] * 2
    return train_wordpiece(lines, vocab_size=120, min_frequency=1)


def _segment(tokenizer, repeats: int = 1):
    """One corpus segment ([CLS] sentences... [SEP]) built by the corpus reader from the sentences in order."""
    document = encode_document(tokenizer, [words for words, _ in SENTENCES] * repeats)
    (example,) = segments([document], max_tokens=128, special=SpecialIds.from_tokenizer(tokenizer),
                          rng=np.random.default_rng(0))
    return example


def _cache(tokenizer):
    return EntityCache([(" ".join(words), spans) for words, spans in SENTENCES if spans], tokenizer)


def test_chinese_characters_are_tokens_and_words_come_back():
    tokenizer = _tokenizer()
    for words, _ in SENTENCES:
        encoding = encode_words(tokenizer, words, add_special_tokens=False)
        tokens = tokenizer.convert_ids_to_tokens(encoding.input_ids)
        expected = [piece for w in words for piece in ([w] if w.isascii() else list(w))]  # a Han character each
        assert [t.removeprefix("##") for t in tokens] == expected
        assert K.words_from_pieces(tokenizer, encoding.input_ids, encoding.word_ids) == words
        assert tokenizer.decode(encoding.input_ids).replace(" ", "") == "".join(words)


def test_units_of_each_stage_by_hand():
    tokenizer = _tokenizer()
    example = _segment(tokenizer)
    vocab = MaskingVocab.from_tokenizer(tokenizer)
    units = ChineseUnits(vocab, _cache(tokenizer))
    text = "".join(w for words, _ in SENTENCES for w in words)  # one token per character except "2024"
    n_tokens = len(text) - len("2024") + 1
    token_ids, none = units.units(example["input_ids"], example["word_ids"], "basic")
    assert none == [] and token_ids == [None, *range(n_tokens), None]
    # phrases: the words of 2+ characters, as token ranges ("2024" is one token: not a phrase)
    starts = np.cumsum([0] + [1 if w == "2024" else len(w) for words, _ in SENTENCES for w in words])
    words = [w for words, _ in SENTENCES for w in words]
    expected = [(int(starts[i]), int(starts[i + 1])) for i, w in enumerate(words) if len(w) >= 2 and w != "2024"]
    assert units.units(example["input_ids"], example["word_ids"], "phrase")[1] == expected
    # entities: sentence 1 starts at token 0, sentence 2 after the 14 characters of sentence 1
    assert units.units(example["input_ids"], example["word_ids"], "entity")[1] == [(0, 6), (7, 9), (14, 16)]


def test_entity_cache_scans_past_unknown_sentences_and_takes_the_longest_line():
    tokenizer = _tokenizer()
    cache = EntityCache([("李明说：大家好！", [(0, 2, "PER")]), ("李明", [(0, 2, "PER")]),
                         ("在北京", [(1, 3, "LOC")])], tokenizer)
    ids = lambda text: encode_words(tokenizer, list(text), add_special_tokens=False).input_ids  # noqa: E731
    sequence = ids("今天天气很好") + ids("李明说：大家好！") + ids("在北京") + ids("李明")
    assert cache.spans(sequence) == [(6, 8), (15, 17), (17, 19)]
    assert cache.spans(ids("今天天气")) == []


def test_a_sentence_longer_than_a_segment_keeps_its_entities_in_each_window():
    tokenizer = _tokenizer()
    document = encode_document(tokenizer, [SENTENCES[0][0]])  # 中国人民银行 在 北京 召开 会议 。 (14 characters)
    examples = segments([document], max_tokens=7, special=SpecialIds.from_tokenizer(tokenizer),
                        rng=np.random.default_rng(0))
    # windows of 5 cut at word boundaries where a word fits: 中国人民银 | 行在北京 | 召开会议。
    units = ChineseUnits(MaskingVocab.from_tokenizer(tokenizer), EntityCache(
        [(" ".join(SENTENCES[0][0]), SENTENCES[0][1])], tokenizer, window=5))
    assert [len(e["input_ids"]) - 2 for e in examples] == [5, 4, 5]
    assert [units.units(e["input_ids"], e["word_ids"], "entity")[1] for e in examples] == [[(0, 5)], [(0, 1), (2, 4)], []]


def test_tagging_the_corpus_writes_the_cache_the_objective_reads(tmp_path):
    class ByHand:  # a "NER tagger" that knows the hand-made entities of SENTENCES
        def predict(self, sentences, **_):
            out = []
            for chars in sentences:
                tags = ["O"] * len(chars)
                for words, spans in SENTENCES:
                    if "".join(words) == "".join(chars):
                        for s, e, kind in spans:
                            tags[s:e] = [f"B-{kind}"] + [f"I-{kind}"] * (e - s - 1)
                out.append(tags)
            return out

    path = tmp_path / "corpus" / "entities.jsonl"  # a folder not made yet: the cache makes it
    counts = tag_entity_cache(ByHand(), [" ".join(w) for w, _ in SENTENCES], path)
    assert counts == {"lines": 3, "lines_with_entities": 2, "entities": {"ORG": 1, "LOC": 1, "PER": 1}}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert rows[0] == {"line": "中国人民银行 在 北京 召开 会议 。", "entities": [[0, 6, "ORG"], [7, 9, "LOC"]]}
    tokenizer = _tokenizer()
    assert EntityCache.from_file(path, tokenizer).index == _cache(tokenizer).index
    path.write_text('{"line": "a b", "entities": [[1, 5, "PER"]]}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"entities.jsonl:1: .*outside the line"):
        EntityCache.from_file(path, tokenizer)


@pytest.mark.parametrize("stage", ["phrase", "entity"])
def test_a_chosen_unit_is_masked_whole_within_the_budget_and_80_10_10(stage):
    tokenizer = _tokenizer()
    example = _segment(tokenizer, repeats=3)
    vocab = MaskingVocab.from_tokenizer(tokenizer)
    objective = K.ErnieObjective(vocab, pad_id=tokenizer.pad_token_id, schedule=K.ErnieSchedule(1, 1),
                                 chinese=ChineseUnits(vocab, _cache(tokenizer)))
    token_ids, spans = objective.chinese.units(example["input_ids"], example["word_ids"], stage)
    position = {u: p for p, u in enumerate(token_ids) if u is not None}
    span_positions = [set(position[u] for u in range(s, e)) for s, e in spans]
    n = len(position)
    k = int(np.floor(0.15 * n + 0.5))
    longest = max(e - s for s, e in spans)
    rng = np.random.default_rng(0)
    decisions, hits, predicted_total, draws = [], {i: 0 for i in range(len(spans))}, 0, 400
    for _ in range(draws):
        masked = objective.mask(example, stage, rng)
        predicted = set(np.flatnonzero(masked.labels != -100).tolist())
        assert k - longest < len(predicted) <= k  # BERT's 15% of the characters, units taken whole
        predicted_total += len(predicted)
        for i, positions in enumerate(span_positions):  # every character of a chosen unit together
            assert not predicted & positions or positions <= predicted
            hits[i] += positions <= predicted
        for unit, decision in zip(masked.units, masked.decisions):
            assert set(unit) in span_positions or len(unit) == 1
            ids = masked.input_ids[unit]
            if decision == MASK:
                assert (ids == vocab.mask_id).all()
            elif decision != RANDOM:
                assert (ids == np.asarray(example["input_ids"])[unit]).all()
            decisions.append(decision)
    assert all(hits.values()), hits  # every phrase / entity gets chosen some time
    assert_proportion(sum(d == MASK for d in decisions), len(decisions), 0.8, "MASK")
    assert_proportion(sum(d == RANDOM for d in decisions), len(decisions), 0.1, "random")
    assert abs(predicted_total / draws / n - 0.15) < 0.03


def test_basic_stage_masks_single_characters_and_the_schedule_stages():
    tokenizer = _tokenizer()
    example = _segment(tokenizer, repeats=2)
    objective = K.ernie_from_options(tokenizer, {"ernie_language": "zh", "ernie_stages": ("basic",)})
    assert [objective.schedule.stage(k) for k in (0, 10**6)] == ["basic", "basic"]
    masked = objective.mask(example, "basic", np.random.default_rng(3))
    n = sum(w is not None for w in example["word_ids"])
    assert all(len(u) == 1 for u in masked.units) and len(masked.units) == int(np.floor(0.15 * n + 0.5))
    assert [K.ErnieSchedule(2, 3, ("basic", "entity")).stage(k) for k in range(4)] == ["basic"] * 2 + ["entity"] * 2
    with pytest.raises(ValueError, match="in that order"):
        K.ErnieSchedule(1, 1, ("phrase", "basic"))
    with pytest.raises(ValueError, match="entity cache"):
        K.ernie_from_options(tokenizer, {"ernie_language": "zh"})
    with pytest.raises(ValueError, match="language"):
        K.ernie_from_options(tokenizer, {"ernie_language": "fr"})


def test_peoples_daily_names_become_bio_entities(tmp_path):
    line = "１２月/t  ，/w  中共中央/nt  主席/n  江/nr  泽民/nr  访问/v  北京/ns  上海/ns  、/w  李/nr  鹏/nr"
    words, tags = parse_peoples_daily_line(line, "test:1")
    chars, labels = peoples_daily_entities_bio(words, tags)
    assert "".join(chars) == "１２月，中共中央主席江泽民访问北京上海、李鹏"
    assert labels == ["O", "O", "O", "O", "B-ORG", "I-ORG", "I-ORG", "I-ORG", "O", "O", "B-PER", "I-PER", "I-PER",
                      "O", "O", "B-LOC", "I-LOC", "B-LOC", "I-LOC", "O", "B-PER", "I-PER"]
    path = tmp_path / "199801.txt"
    path.write_text(line + "\n\n" + "我们/r  去/v  深圳/ns\n", encoding="utf-8")
    corpus = read_peoples_daily_ner(path, "train")
    assert corpus.sentences[1] == list("我们去深圳") and corpus.labels[1] == ["O"] * 3 + ["B-LOC", "I-LOC"]


def test_a_tiny_chinese_run_records_its_language_and_stages(tmp_path):
    import torch

    from elmokit.pretraining.run import PretrainConfig, pretrain

    torch.set_num_threads(1)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(w) for w, _ in SENTENCES * 4) + "\n", encoding="utf-8")
    cache = tmp_path / "entities.jsonl"
    cache.write_text("".join(json.dumps({"line": " ".join(w), "entities": s}, ensure_ascii=False) + "\n"
                             for w, s in SENTENCES if s), encoding="utf-8")
    config = PretrainConfig(objective="ernie", preset="tiny", max_steps=3, batch_size=2, vocab_size=120, max_tokens=24,
                            log_every=1, ernie_language="zh", ernie_stage_batches=1, ernie_entities=str(cache))
    pretrain(tmp_path / "run", corpus=str(corpus), config=config, command="test", progress=False)
    record = json.loads((tmp_path / "run" / "training.json").read_text(encoding="utf-8"))
    assert record["pretraining"]["ernie_language"] == "zh"
    stages = [json.loads(line)["stage"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert stages == [0, 1, 2]
    with pytest.raises(ValueError, match="go with --objective ernie"):
        PretrainConfig(objective="bert", max_steps=1, ernie_language="zh")
    with pytest.raises(ValueError, match="in that order"):
        PretrainConfig(objective="ernie", max_steps=1, ernie_stages="entity,basic")
