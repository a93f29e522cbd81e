"""Chinese through the model: 50-byte truncation, mixed-script determinism and batch invariance, and
each tokenizer recorded at training and used again when the model is loaded."""

import json
import shutil

import h5py
import numpy as np
import pytest
from testkit import write_lines

from elmokit import Embedder
from elmokit.cli.main import main
from elmokit.text.chars import BOW_CHAR, EOW_CHAR, PAD_CHAR, token_to_char_ids
from elmokit.text.segmenters import segment

ZH_LINES = ["我在2024年用iPhone15看了《三体》，真好！😀", "ELMo模型读ＵＴＦ－８字节：２０２４年１２月……",
            "他说：“你好——世界”", "👨‍👩‍👧一家人❤️👍🏽", "中华人民共和国全国人民代表大会常务委员会副委员长会议"]


def test_a_long_chinese_token_keeps_its_first_48_bytes_16_characters():
    token = "中华人民共和国全国人民代表大会常务委员会"  # 20 characters, 60 bytes
    ids = token_to_char_ids(token) - 1
    expected = list(token[:16].encode("utf-8"))  # 48 bytes = exactly 16 characters, no character cut
    assert ids[0] == BOW_CHAR and list(ids[1:49]) == expected and ids[49] == EOW_CHAR
    assert np.array_equal(token_to_char_ids(token), token_to_char_ids(token[:16]))


def test_the_byte_cut_may_split_a_character_as_the_reference_does():
    # 15 Han characters (45 bytes) + a 4-byte emoji: bytes 46-48 are the emoji's first three, the 4th is cut
    token = "一" * 15 + "😀"
    ids = token_to_char_ids(token) - 1
    emoji = "😀".encode()
    assert list(ids[46:49]) == list(emoji[:3]) and ids[49] == EOW_CHAR
    # 47 ASCII bytes + 中: only the first byte of 中 (0xE4) is kept
    ids = token_to_char_ids("a" * 47 + "中") - 1
    assert ids[48] == "中".encode()[0] and ids[49] == EOW_CHAR
    # a 16-character token is spelled whole, with room for nothing else
    ids = token_to_char_ids("一" * 16) - 1
    assert ids[49] == EOW_CHAR and PAD_CHAR not in ids


def test_tokens_equal_in_their_first_48_bytes_embed_identically(model_dir):
    embedder = Embedder.load(model_dir)
    long_a, long_b = "一" * 16 + "甲", "一" * 16 + "乙"
    a, b = embedder.embed([["你", long_a, "好"], ["你", long_b, "好"]])
    np.testing.assert_array_equal(a, b)


def test_mixed_script_text_is_deterministic_and_batch_invariant(model_dir):
    embedder = Embedder.load(model_dir, batch_size=2)
    sentences = [segment("chars", line) for line in ZH_LINES]
    together = embedder.embed(sentences)
    again = embedder.embed(sentences)
    alone = [Embedder.load(model_dir).embed([s])[0] for s in sentences]
    for s, x, y, z in zip(sentences, together, again, alone):
        assert x.shape == (3, len(s), 10)
        np.testing.assert_array_equal(x, y)  # the same call twice: bit-identical
        np.testing.assert_allclose(x, z, atol=1e-6, rtol=0)  # in a batch of others or alone: the same


def _with_recorded_tokenizer(model_dir, tmp_path, spec):
    folder = tmp_path / f"model-{spec['kind'] if spec else 'none'}"
    shutil.copytree(model_dir, folder)
    if spec is not None:
        (folder / "lm.json").write_text(json.dumps({"format_version": 1, "tokenizer": spec}), encoding="utf-8")
    return folder


@pytest.mark.parametrize("kind", ["chars", "jieba", "rjieba"])
def test_a_recorded_segmenter_cuts_raw_lines_when_the_model_is_loaded(model_dir, tmp_path, kind):
    pytest.importorskip({"chars": "unicodedata", "jieba": "jieba", "rjieba": "rjieba"}[kind])
    folder = _with_recorded_tokenizer(model_dir, tmp_path, {"kind": kind, "lowercase": False})
    embedder = Embedder.load(folder)
    assert embedder.tokenizer.kind == kind
    source = write_lines(tmp_path / "zh.txt", ZH_LINES)
    assert main(["embed", str(source), str(tmp_path / "out.h5"), "--all", "--model", str(folder)]) == 0
    oracle = Embedder.load(model_dir).embed([segment(kind, line) for line in ZH_LINES])
    with h5py.File(tmp_path / "out.h5", "r") as f:
        for i, expected in enumerate(oracle):
            np.testing.assert_allclose(f[str(i)][...], expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("spec", [None, {"kind": "whitespace", "lowercase": False},
                                  {"kind": "regex", "lowercase": False, "pattern": r"\w+|[^\w\s]"}])
def test_models_without_a_segmenter_keep_whitespace_input(model_dir, tmp_path, spec):
    folder = _with_recorded_tokenizer(model_dir, tmp_path, spec)
    embedder = Embedder.load(folder)
    assert embedder.tokenizer is None and embedder.tokenize("do n't 中国") == ["do", "n't", "中国"]


def test_embed_tokenizer_flag_overrides_the_model(model_dir, tmp_path):
    source = write_lines(tmp_path / "zh.txt", ZH_LINES[:2])
    assert main(["embed", str(source), str(tmp_path / "out.h5"), "--top", "--model", str(model_dir),
                 "--tokenizer", "chars"]) == 0
    with h5py.File(tmp_path / "out.h5", "r") as f:
        assert [f[str(i)].shape[0] for i in range(2)] == [len(segment("chars", line)) for line in ZH_LINES[:2]]


def test_a_broken_lm_json_is_a_clear_error(model_dir, tmp_path):
    from elmokit.formats import ModelFolderError

    folder = _with_recorded_tokenizer(model_dir, tmp_path, None)
    (folder / "lm.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelFolderError, match=r"lm.json: not readable JSON"):
        Embedder.load(folder)


def test_train_records_the_segmenter_and_embed_uses_it_on_raw_lines(tmp_path):
    """The round trip: `vocab` and `train --tokenizer jieba` on raw Chinese lines, then `embed` on raw lines."""
    pytest.importorskip("jieba")
    corpus = write_lines(tmp_path / "zh_train.txt", [
        "我爱北京天安门", "天安门上太阳升", "北京是中国的首都", "我们在北京学习中文", "中文分词是第一步",
        "今天天气很好", "我们明天去天安门", "学习中文很有意思", "北京的天气今天很好", "太阳升起来了",
    ] * 3)
    assert main(["vocab", "--corpus", str(corpus), "--out", str(tmp_path / "vocab.txt"), "--tokenizer", "jieba"]) == 0
    assert "天安门" in (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert main(["train", "--corpus", str(corpus), "--vocab", str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "run"),
                 "--preset", "tiny", "--tokenizer", "jieba", "--max-steps", "3", "--batch-size", "5",
                 "--threads", "1"]) == 0
    model = tmp_path / "run" / "model"
    assert json.loads((model / "lm.json").read_text(encoding="utf-8"))["tokenizer"] == {"kind": "jieba", "lowercase": False}
    assert '"kind": "jieba"' in (model / "README.md").read_text(encoding="utf-8")
    source = write_lines(tmp_path / "zh.txt", ZH_LINES[:3])
    assert main(["embed", str(source), str(tmp_path / "out.h5"), "--all", "--model", str(model)]) == 0
    oracle = Embedder.load(model, tokenizer=None)
    assert oracle.tokenizer.kind == "jieba"  # None asks for the recorded one
    with h5py.File(tmp_path / "out.h5", "r") as f:
        for i, line in enumerate(ZH_LINES[:3]):
            np.testing.assert_allclose(f[str(i)][...], oracle.embed([segment("jieba", line)])[0], atol=1e-6, rtol=0)
