"""Tokenizers trained here load in transformers; word alignment checked against hand tokenisation."""

from __future__ import annotations

import pytest
from pretraining_testkit import HAND_VOCAB, need_transformers

need_transformers()

from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

from elmokit.text.subword_tokenizers import encode_words, train_byte_bpe, train_wordpiece  # noqa: E402

LINES = ["The quick brown fox jumps over the lazy dog.", "Unbelievably, she said: 'hello there'!",
         "A caterpillar's metamorphosis is slow.", "Ünïcödé words and émigrés, naïve café."] * 20


def test_wordpiece_folder_loads_in_transformers_with_bert_specials_and_template(tmp_path):
    trained = train_wordpiece(LINES, tmp_path / "wp", vocab_size=150, min_frequency=1)
    loaded = PreTrainedTokenizerFast.from_pretrained(str(tmp_path / "wp"))
    auto = AutoTokenizer.from_pretrained(str(tmp_path / "wp"))
    assert [loaded.convert_tokens_to_ids(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    assert loaded.mask_token == "[MASK]" and loaded.pad_token_id == 0
    pair = loaded("the quick fox", "a lazy dog")
    tokens = loaded.convert_ids_to_tokens(pair["input_ids"])
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and tokens[-1] == "[SEP]"
    first_sep = tokens.index("[SEP]")
    assert pair["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
    for tokenizer in (trained, auto):
        assert tokenizer("Unbelievably slow café")["input_ids"] == loaded("Unbelievably slow café")["input_ids"]


def test_byte_bpe_has_no_unknowns_and_the_two_templates(tmp_path):
    roberta = train_byte_bpe(LINES, tmp_path / "rb", vocab_size=320, min_frequency=1)
    loaded = AutoTokenizer.from_pretrained(str(tmp_path / "rb"))
    assert [loaded.convert_tokens_to_ids(t) for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")] == [0, 1, 2, 3, 4]
    text = "Zebras 🦓 eat ŋ-grams"  # unseen characters: bytes, never <unk>
    ids = loaded(text)["input_ids"]
    assert ids[0] == 0 and ids[-1] == 2 and 3 not in ids
    assert loaded.decode(ids, skip_special_tokens=True).strip() == text
    pair = roberta("a b", "c")["input_ids"]
    assert roberta.convert_ids_to_tokens(pair).count("</s>") == 3  # <s> A </s></s> B </s>
    gpt2 = train_byte_bpe(LINES, tmp_path / "g2", vocab_size=300, min_frequency=1, template="gpt2")
    ids = AutoTokenizer.from_pretrained(str(tmp_path / "g2"))(text)["input_ids"]
    assert gpt2.eos_token == "<|endoftext|>" and gpt2.convert_tokens_to_ids("<|endoftext|>") not in ids
    with pytest.raises(ValueError, match="template"):
        train_byte_bpe(LINES, template="bert")


def test_word_alignment_matches_a_hand_tokenisation(hand_tokenizer):
    words = ["the", "cats", "unbelievable", "dog!", "", "zebra", "a"]
    encoding = encode_words(hand_tokenizer, words)
    v = {t: i for i, t in enumerate(HAND_VOCAB)}
    # by hand: [CLS] the | cat ##s | un ##believ ##able | dog ! | "" -> [UNK] | zebra -> [UNK] | a [SEP]
    expected = ["[CLS]", "the", "cat", "##s", "un", "##believ", "##able", "dog", "!", "[UNK]", "[UNK]", "a", "[SEP]"]
    assert encoding.input_ids == [v[t] for t in expected]
    assert encoding.word_ids == [None, 0, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6, None]
    assert encoding.pieces == [[1], [2, 3], [4, 5, 6], [7, 8], [9], [10], [11]]
    assert encoding.special_mask == [True] + [False] * 11 + [True]
    assert encode_words(hand_tokenizer, [], add_special_tokens=True).input_ids == [v["[CLS]"], v["[SEP]"]]
    with pytest.raises(TypeError, match="list of words"):
        encode_words(hand_tokenizer, "the cat")


def test_byte_bpe_word_pieces_decode_to_their_word(tmp_path):
    tokenizer = train_byte_bpe(LINES, vocab_size=300, min_frequency=1)
    words = ["Unbelievably", ",", "naïve", "🦓", "don't", "\u200b", ""]
    encoding = encode_words(tokenizer, words)
    assert len(encoding.pieces) == len(words)
    for word, pieces in zip(words, encoding.pieces):
        decoded = tokenizer.decode([encoding.input_ids[p] for p in pieces])
        assert decoded.strip() == (word if word.strip("\u200b") else "<unk>") or decoded == " " + word
