"""`elmokit vocab`: bilm-tf format, order by count then code point, --min-count, --max-size.

The expected files are written out by hand from counts done by hand on the tiny corpus below.
"""

import pytest

from elmokit.cli.main import main
from elmokit.text.vocab import Vocabulary, VocabularyError, build_vocabulary, count_tokens

CORPUS = "b a c a\nc a b d\n\nZ <S> a é\n"
# counts by hand: a 4, b 2, c 2, d 1, Z 1, é 1 (the literal <S> is never counted)


def write(tmp_path, text, name="corpus.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_order_is_specials_then_count_then_code_point(tmp_path):
    corpus = write(tmp_path, CORPUS)
    assert main(["vocab", "--corpus", str(corpus), "--out", str(tmp_path / "v.txt")]) == 0
    # ties (b, c: 2) and (Z, d, é: 1) in code-point order: "Z" (0x5A) < "d" (0x64) < "é" (0xE9)
    assert (tmp_path / "v.txt").read_text(encoding="utf-8") == "<S>\n</S>\n<UNK>\na\nb\nc\nZ\nd\né\n"


def test_min_count_and_max_size(tmp_path):
    corpus = write(tmp_path, CORPUS)
    assert main(["vocab", "--corpus", str(corpus), "--out", str(tmp_path / "m.txt"), "--min-count", "2"]) == 0
    assert (tmp_path / "m.txt").read_text().split("\n")[:-1] == ["<S>", "</S>", "<UNK>", "a", "b", "c"]
    assert main(["vocab", "--corpus", str(corpus), "--out", str(tmp_path / "s.txt"), "--max-size", "5"]) == 0
    assert (tmp_path / "s.txt").read_text().split("\n")[:-1] == ["<S>", "</S>", "<UNK>", "a", "b"]


def test_counts_file_and_tokenizer_flags(tmp_path):
    corpus = write(tmp_path, "Don't stop, don't!\n")
    args = ["vocab", "--corpus", str(corpus), "--out", str(tmp_path / "v.txt"), "--counts", str(tmp_path / "c.tsv"),
            "--tokenizer", "regex", "--lowercase"]
    assert main(args) == 0
    # regex \w+|[^\w\s] on "don't stop, don't!": don ' t stop , don ' t !
    assert (tmp_path / "c.tsv").read_text().splitlines() == ["'\t2", "don\t2", "t\t2", "!\t1", ",\t1", "stop\t1"]


def test_vocabulary_lookup_and_file_errors(tmp_path):
    vocab = build_vocabulary(count_tokens([["x", "y", "x"]]))
    assert vocab.tokens == ("<S>", "</S>", "<UNK>", "x", "y")
    assert (vocab.bos, vocab.eos, vocab.unk) == (0, 1, 2)
    assert vocab.ids(["y", "zzz", "<S>"]) == [4, 2, 0]
    assert Vocabulary.load(vocab.save(tmp_path / "v.txt")) == vocab

    bad = write(tmp_path, "<S>\n</S>\n<UNK>\nx\nx\n", "dup.txt")
    with pytest.raises(VocabularyError, match=r"dup.txt:5: 'x' already on line 4"):
        Vocabulary.load(bad)
    missing = write(tmp_path, "<S>\nx\n", "missing.txt")
    with pytest.raises(VocabularyError, match=r"lacks \['</S>', '<UNK>'\]"):
        Vocabulary.load(missing)


def test_bilm_tf_fixture_vocabulary_loads():
    from testkit import need_shared

    path = need_shared("fixtures", "bilm-tf", "train", "vocab.txt")
    vocab = Vocabulary.load(path)
    assert vocab.tokens[:3] == ("<S>", "</S>", "<UNK>")


def test_tokenizer_hook_from_the_command_line(tmp_path, capsys):
    corpus = write(tmp_path, 'a "b c" a\n')
    out = tmp_path / "v.txt"
    hook = ["--tokenizer", "hook", "--tokenizer-hook", "shlex:split"]
    assert main(["vocab", "--corpus", str(corpus), "--out", str(out), *hook]) == 0
    assert Vocabulary.load(out).tokens[3:] == ("a", "b c")  # one token per line, inner spaces allowed
    assert main(["vocab", "--corpus", str(corpus), "--out", str(out), "--tokenizer-hook", "nowhere:f"]) == 2
    assert "cannot be imported" in capsys.readouterr().err
