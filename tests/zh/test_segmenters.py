"""Tokenizers for unsegmented text: the `chars` rules, jieba/rjieba determinism, missing packages."""

import sys
import unicodedata

import pytest

from elmokit.cli.main import main
from elmokit.text.corpus import TOKENIZER_KINDS, Tokenizer
from elmokit.text.segmenters import HAN_RANGES, SEGMENTER_KINDS, SegmenterError, is_han, segment, split_chars

MIXED = [
    "我在2024年用iPhone15看了《三体》，真好！😀",
    "ELMo模型读ＵＴＦ－８字节：２０２４年１２月，价格¥3.5元……",
    "  他说：“你好——世界”  ",
    "👨‍👩‍👧一家人❤️👍🏽",
]


@pytest.mark.parametrize(("line", "expected"), [
    ("中国人", ["中", "国", "人"]),
    ("我用iPhone15拍了——照片！！😀", ["我", "用", "iPhone15", "拍", "了", "——", "照", "片", "！！", "😀"]),
    ("２０２４年", ["２０２４", "年"]),  # full-width digits are word characters (rule 3)
    ("ab,cd", ["ab", ",", "cd"]),
    ("，。", ["，", "。"]),  # different punctuation: one token each (rule 4)
    ("……", ["……"]),
    ("a  b\tc\u3000中", ["a", "b", "c", "中"]),  # every whitespace separates, U+3000 included
    ("👨\u200d👩\u200d👧家", ["👨\u200d👩\u200d👧", "家"]),  # a ZWJ sequence is one token (rule 5)
    ("❤️👍🏽", ["❤️", "👍🏽"]),  # variation selector and skin tone stay with their emoji
    ("cafe\u0301中", ["cafe\u0301", "中"]),  # a combining accent stays with its letter
    ("カタカナ漢字", ["カタカナ", "漢", "字"]),
    ("", []),
])
def test_chars_rules_on_hand_made_lines(line, expected):
    assert split_chars(line) == expected
    assert Tokenizer(kind="chars")(line) == expected


def test_han_ranges_match_the_unicode_han_script():
    """Oracle: the `regex` package's \\p{Han} (Unicode Scripts.txt) over the whole code space (a
    `regex` built on a newer Unicode than 17 may add ideographs: then extend HAN_RANGES)."""
    regex = pytest.importorskip("regex")
    han = regex.compile(r"\p{Han}")
    wrong = [hex(c) for c in range(0x110000) if 0xD800 > c or c > 0xDFFF
             if bool(han.match(chr(c))) != is_han(chr(c))]
    assert wrong == [], f"{len(wrong)} code points disagree, e.g. {wrong[:10]} (regex {regex.__version__})"


def test_every_cjk_ideograph_is_han_and_neighbours_are_not():
    """A second oracle needing nothing: the Unicode names of the ideographs."""
    for low, high in HAN_RANGES:
        for code in (low, high):
            assert is_han(chr(code))
    ideograph = ("CJK UNIFIED", "CJK COMPATIBILITY IDEOGRAPH")
    named = [c for c in range(0x3000, 0x32400) if unicodedata.name(chr(c), "").startswith(ideograph)]
    assert len(named) > 90_000 and all(is_han(chr(c)) for c in named)
    assert not any(is_han(c) for c in "aZ9_，。！？：「」ー々"[:-1] + "カ한ㄅ")


@pytest.mark.parametrize("kind", ["chars", "jieba", "rjieba"])
def test_segmenters_keep_every_character_and_never_return_whitespace(kind):
    pytest.importorskip({"chars": "unicodedata", "jieba": "jieba", "rjieba": "rjieba"}[kind])
    for line in MIXED:
        tokens = segment(kind, line)
        assert tokens and all(t and not any(ch.isspace() for ch in t) for t in tokens)
        assert "".join(tokens) == "".join(line.split())
        assert segment(kind, line) == tokens  # deterministic within a process


def test_jieba_is_jiebas_default_cut_and_ignores_words_added_to_the_global_tokenizer():
    """Oracle: jieba's global tokenizer, initialised by jieba itself (its default dictionary)."""
    jieba = pytest.importorskip("jieba")
    jieba.setLogLevel(60)
    reference = jieba.dt  # also the tokenizer that jieba.add_word changes below: one dictionary load, not two
    for line in MIXED + ["南京市长江大桥", "他来到了网易杭研大厦"]:
        expected = [t for t in reference.lcut(line, HMM=True) if t.strip()]
        assert segment("jieba", line) == expected
    before = segment("jieba", "南京市长江大桥")
    jieba.add_word("京市长江")  # the global tokenizer; ours is private
    try:
        assert segment("jieba", "南京市长江大桥") == before
    finally:
        jieba.del_word("京市长江")


@pytest.mark.slow
def test_jieba_cuts_the_same_in_a_fresh_process(tmp_path):
    pytest.importorskip("jieba")
    import subprocess

    code = "from elmokit.text.segmenters import segment; import sys; print('|'.join(segment('jieba', sys.argv[1])))"
    out = subprocess.run([sys.executable, "-c", code, MIXED[0]], capture_output=True, text=True, check=True)
    assert out.stdout.strip().split("|") == segment("jieba", MIXED[0])
    assert out.stderr == ""  # initialised quietly: no "Building prefix dict" log, no cache file message


def test_tokenizer_kinds_round_trip_through_their_recorded_form():
    for kind in TOKENIZER_KINDS:
        if kind == "pkuseg":
            continue
        tokenizer = Tokenizer(kind=kind, lowercase=True)
        assert Tokenizer.from_dict(tokenizer.to_dict()) == tokenizer
        assert tokenizer.to_dict()["kind"] == kind
    assert Tokenizer(kind="chars", lowercase=True)("ELMo模型") == ["elmo", "模", "型"]


def test_a_missing_segmenter_package_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "jieba", None)  # import jieba now raises ImportError
    from elmokit.text import segmenters

    segmenters._jieba.cache_clear()
    try:
        with pytest.raises(SegmenterError, match=r"pip install 'elmokit\[zh\]'"):
            Tokenizer(kind="jieba")
    finally:
        segmenters._jieba.cache_clear()


def test_pkuseg_is_refused_with_the_reason_when_it_is_not_installed():
    pytest.importorskip("jieba")
    try:
        import pkuseg  # noqa: F401
        pytest.skip("pkuseg is installed here")
    except ImportError:
        pass
    with pytest.raises(SegmenterError, match=r"pkuseg.*no wheel for Python >= 3.11"):
        Tokenizer(kind="pkuseg")


def test_unknown_tokenizer_kind_is_refused():
    with pytest.raises(ValueError, match=r"not one of .*'jieba'"):
        Tokenizer(kind="jeiba")
    assert set(SEGMENTER_KINDS) <= set(TOKENIZER_KINDS)


def test_cli_unknown_tokenizer_and_missing_extra_are_one_line_errors(tmp_path, capsys, monkeypatch):
    text = tmp_path / "zh.txt"
    text.write_text("我爱北京\n", encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        main(["vocab", "--corpus", str(text), "--out", str(tmp_path / "vocab.txt"), "--tokenizer", "jeiba"])
    assert stop.value.code == 2 and "invalid choice: 'jeiba'" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "pkuseg", None)
    code = main(["embed", str(text), str(tmp_path / "out.h5"), "--all", "--tokenizer", "pkuseg"])
    err = capsys.readouterr().err
    assert code == 2 and "elmokit embed: error: tokenizer 'pkuseg' needs the pkuseg package" in err
    assert "Traceback" not in err and not (tmp_path / "out.h5").exists()
