"""Bug 10: `elmokit static train` defaults suit raw text (regex tokens, lowercased); the original
tools' whitespace split with case kept is one flag away."""

import json

import pytest

from elmokit.cli.main import main
from elmokit.static.vectors import StaticVectors

pytest.importorskip("gensim")

RAW = "The word, the Word and the word.\nWord: a word; the word!\n" * 3
REGEX = {"kind": "regex", "lowercase": True, "pattern": r"\w+|[^\w\s]"}
WHITESPACE = {"kind": "whitespace", "lowercase": False}


def train(tmp_path, name, *flags):
    (tmp_path / "raw.txt").write_text(RAW, encoding="utf-8")
    out = tmp_path / name
    argv = ["static", "train", "--algo", "skipgram", "--corpus", str(tmp_path / "raw.txt"), "--out", str(out),
            "--min-count", "1", "--dim", "4", "--epochs", "1", "--quiet", *flags]
    assert main(argv) == 0
    return set(StaticVectors.load(out).words), json.loads((out / "run.json").read_text())["corpus"]["tokenizer"]


def test_defaults_split_punctuation_and_lowercase(tmp_path):
    words, tokenizer = train(tmp_path, "default")
    assert words == {"the", "word", "and", "a", ",", ".", ":", ";", "!"}
    assert tokenizer == REGEX
    assert StaticVectors.load(tmp_path / "default").lowercase


@pytest.mark.parametrize("flags", [["--pretokenized"], ["--tokenizer", "whitespace", "--keep-case"]])
def test_one_flag_restores_the_original_tools_tokens(tmp_path, flags):
    words, tokenizer = train(tmp_path, "pre", *flags)
    assert words == {"The", "the", "word,", "Word", "and", "word.", "Word:", "a", "word;", "word!"}
    assert tokenizer == WHITESPACE
    assert not StaticVectors.load(tmp_path / "pre").lowercase


def test_each_setting_can_be_overridden(tmp_path):
    words, tokenizer = train(tmp_path, "ws-lower", "--tokenizer", "whitespace")
    assert "word," in words and "Word" not in words and tokenizer == {"kind": "whitespace", "lowercase": True}
    words, tokenizer = train(tmp_path, "re-case", "--keep-case")
    assert {"Word", "word", ","} <= words and "word," not in words and tokenizer == REGEX | {"lowercase": False}
    words, tokenizer = train(tmp_path, "pre-lower", "--pretokenized", "--lowercase")
    assert "word," in words and "Word" not in words and tokenizer == {"kind": "whitespace", "lowercase": True}
