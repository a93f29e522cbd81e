"""A word-level Chinese ELMo on character tasks (``{"kind": "elmo", ..., "align": "chars"}``): each
character gets the vectors of its segmenter word, checked against ``np.repeat`` of the word vectors
``Embedder.embed`` gives for the segmented sentence."""

import json
import shutil

import numpy as np
import pytest

from elmokit import Embedder
from elmokit.representation import CharAlignedWords, RepresentationError, fingerprint, load_representation
from elmokit.text.segmenters import segment

pytest.importorskip("jieba")

LINES = ["我在北京学习中文", "ELMo模型读UTF-8字节，２０２４年！", "他说：“你好”", "中华人民共和国成立了"]


@pytest.fixture
def jieba_model(model_dir, tmp_path):
    """The tiny random model with jieba recorded as its tokenizer, as `elmokit train --tokenizer jieba` records it."""
    folder = tmp_path / "zh-model"
    shutil.copytree(model_dir, folder)
    (folder / "lm.json").write_text(json.dumps({"format_version": 1, "tokenizer": {"kind": "jieba", "lowercase": False}}),
                                    encoding="utf-8")
    return folder


def oracle(folder, line):
    """(L, n_chars, D): the jieba words of the line embedded alone, each repeated over its characters."""
    words = segment("jieba", line)
    assert "".join(words) == line.replace(" ", "")
    vectors = Embedder.load(folder).embed([words])[0]
    return np.repeat(vectors, [len(w) for w in words], axis=1)


def test_every_character_gets_the_vectors_of_its_jieba_word(jieba_model):
    rep = load_representation({"kind": "elmo", "model": str(jieba_model), "align": "chars"})
    assert isinstance(rep, CharAlignedWords) and (rep.num_layers, rep.dim) == (3, 10)
    out = rep.embed([list(line) for line in LINES])
    for line, array in zip(LINES, out):
        assert array.shape == (3, len(line), 10) and array.dtype == np.float32
        np.testing.assert_allclose(array, oracle(jieba_model, line), atol=1e-6, rtol=0)
    words = segment("jieba", LINES[0])
    assert len(words) < len(LINES[0])  # the test means something: some word has several characters


def test_batch_invariant_and_deterministic(jieba_model):
    rep = load_representation({"kind": "elmo", "model": str(jieba_model), "align": "chars"}, batch_size=2)
    sentences = [list(line) for line in LINES]
    together, again = rep.embed(sentences), rep.embed(sentences)
    for i, sentence in enumerate(sentences):
        alone = CharAlignedWords(Embedder.load(jieba_model)).embed([sentence])[0]
        np.testing.assert_array_equal(together[i], again[i])
        np.testing.assert_allclose(together[i], alone, atol=1e-6, rtol=0)


def test_tokens_of_several_characters_and_of_whitespace(jieba_model):
    rep = CharAlignedWords(Embedder.load(jieba_model))
    tokens = ["北", "京", " ", "��", "大", "学"]  # a whitespace token; a token of two characters
    words, owner = rep.segment(tokens)
    assert "".join(words) == "北京��大学"
    starts = np.cumsum([0] + [len(w) for w in words])  # the word holding each character, by hand
    first_chars = [0, 1, None, 2, 4, 5]  # offsets in the text without the space
    expected = [-1 if c is None else int(np.searchsorted(starts, c, side="right") - 1) for c in first_chars]
    assert owner == expected
    array = rep.embed([tokens])[0]
    assert not array[:, 2].any()  # the space: zeros
    word_vectors = Embedder.load(jieba_model).embed([words])[0]
    np.testing.assert_allclose(array[:, 3], word_vectors[:, owner[3]], atol=1e-6, rtol=0)
    assert rep.embed([[]])[0].shape == (3, 0, 10)


def test_alignment_needs_a_segmenter_and_a_known_value(model_dir, jieba_model):
    with pytest.raises(RepresentationError, match="needs a segmenter"):
        load_representation({"kind": "elmo", "model": str(model_dir), "align": "chars"})
    with pytest.raises(RepresentationError, match="align must be one of words, chars"):
        load_representation({"kind": "elmo", "model": str(jieba_model), "align": "bytes"})
    words = load_representation({"kind": "elmo", "model": str(jieba_model)})
    chars = load_representation({"kind": "elmo", "model": str(jieba_model), "align": "chars"})
    assert fingerprint(chars) != fingerprint(words) and fingerprint(chars).startswith(fingerprint(words))


def test_a_segmenter_that_changes_the_text_is_an_error(jieba_model):
    rep = CharAlignedWords(Embedder.load(jieba_model), tokenizer=lambda line: ["x" + line])
    with pytest.raises(RepresentationError, match="do not spell the text"):
        rep.embed([list("中文")])
