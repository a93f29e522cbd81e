
import pytest
from static_testkit import tiny_lines

from elmokit.text.corpus import Corpus, CorpusError, Tokenizer


def test_reads_xz_and_gz_in_order_and_skips_blank_lines(tiny_corpus):
    expected = [line.split() for line in tiny_lines() if line.strip()]
    corpus = Corpus(tiny_corpus)
    assert [f.name for f in corpus.files] == ["part.00.txt.xz", "part.01.txt.gz"]
    assert list(corpus) == expected
    assert list(corpus) == expected  # restartable: a second pass gives the same stream


def test_regex_lowercase_tokenizer():
    tok = Tokenizer(kind="regex", lowercase=True)
    assert tok("“Hello,” said Dupin--twice.") == ["“", "hello", ",", "”", "said", "dupin", "-", "-", "twice", "."]
    assert Tokenizer()("  A  b\tc\n") == ["A", "b", "c"]
    assert tok.to_dict() == {"kind": "regex", "lowercase": True, "pattern": r"\w+|[^\w\s]"}
    assert Tokenizer.from_dict(tok.to_dict()) == tok
    with pytest.raises(ValueError, match="not one of"):
        Tokenizer(kind="spacy")


def test_long_lines_are_split_not_truncated(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(" ".join(str(i) for i in range(23)) + "\nshort line\n", encoding="utf-8")
    pieces = list(Corpus(str(path), max_tokens=10))
    assert [len(p) for p in pieces] == [10, 10, 3, 2]
    assert sum(pieces, [])[:23] == [str(i) for i in range(23)]
    assert list(Corpus(str(path), limit_lines=1)) == [[str(i) for i in range(23)]]


def test_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(CorpusError, match="matches no file"):
        Corpus(str(tmp_path / "nothing*.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\nsecond\n" + b"caf\xe9 latin-1\n")
    with pytest.raises(CorpusError, match=r"bad\.txt:3: not valid UTF-8"):
        list(Corpus(str(bad)))


def test_describe_records_files_and_tokenizer(tiny_corpus):
    info = Corpus(tiny_corpus, tokenizer=Tokenizer(kind="regex")).describe()
    assert info["patterns"] == [tiny_corpus]
    assert [f["path"].rsplit("/", 1)[-1] for f in info["files"]] == ["part.00.txt.xz", "part.01.txt.gz"]
    assert all(f["bytes"] > 0 for f in info["files"])
    assert info["tokenizer"]["kind"] == "regex"
