"""SIGHAN scorer rules: hand-computed counts, brute-force LCS, and GNU diff as the alignment oracle."""

import itertools
import random
import shutil
import subprocess

import pytest

from elmokit.evaluation.segmentation import (
    SegmentationScoreError,
    lcs_length,
    score_files,
    score_segmentation,
    words_of,
)

# Three lines scored by hand. Line 1: gold 共同/创造/美好/的/新/世纪, test 共同/创造/美好/的/新世纪:
# 4 words kept. Line 2: gold 女士/们/，/先生/们 (U+3000 between 先生 and 们), test 女士们/，/先生/们: 3 kept.
# Line 3: empty gold, skipped even though the test has words.
GOLD = ["共同 创造  美好 的 新 世纪", "女士 们 ， 先生\u3000们", "", "2001年 钟声"]
TEST = ["共同 创造 美好 的 新世纪", "女士们 ， 先生 们", "多余", "2001 年 钟声"]
DICTIONARY = {"共同", "创造", "美好", "的", "新", "世纪", "们", "，", "先生", "钟声"}


def test_hand_computed_counts_and_scores():
    score = score_segmentation(GOLD, TEST, dictionary=DICTIONARY)
    # gold words 6 + 5 + 2 = 13; test words 5 + 4 + 3 = 12; kept 4 + 3 + 1 (钟声) = 8
    assert (score.gold_words, score.test_words, score.correct, score.lines) == (13, 12, 8, 3)
    assert score.recall == pytest.approx(8 / 13) and score.precision == pytest.approx(8 / 12)
    assert score.f1 == pytest.approx(2 * (8 / 12) * (8 / 13) / (8 / 12 + 8 / 13))
    # OOV gold words: 女士, 2001年 -> neither recalled; IV 11, of which 新, 世纪, 们 (line 2 first) missed
    assert (score.oov_words, score.oov_recalled, score.iv_words, score.iv_recalled) == (2, 0, 11, 8)
    assert score.mismatched_lines == []


def test_words_split_at_ascii_whitespace_and_the_ideographic_space_only():
    assert words_of(" 甲\u3000乙\t丙  ") == ["甲", "乙", "丙"]
    assert words_of("甲\u00a0乙 丙") == ["甲\u00a0乙", "丙"]  # Perl's \s on bytes does not match U+00A0


def test_lcs_equals_brute_force_dynamic_programming():
    def dp(a, b):
        table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i, j in itertools.product(range(len(a)), range(len(b))):
            table[i + 1][j + 1] = table[i][j] + 1 if a[i] == b[j] else max(table[i][j + 1], table[i + 1][j])
        return table[-1][-1]

    rng = random.Random(7)
    for _ in range(300):
        a = [rng.choice("abcd") for _ in range(rng.randint(0, 70))]
        b = [rng.choice("abcde") for _ in range(rng.randint(0, 70))]
        assert lcs_length(a, b) == dp(a, b)


@pytest.mark.skipif(shutil.which("diff") is None, reason="needs GNU diff, which the official scorer calls")
def test_kept_words_are_what_diff_minimal_keeps(tmp_path):
    rng = random.Random(3)
    words = ["中国", "人民", "的", "新", "世纪", "年", "1", "月"]
    for case in range(20):
        gold = [rng.choice(words) for _ in range(rng.randint(1, 25))]
        test = [rng.choice(words) for _ in range(rng.randint(1, 25))]
        (tmp_path / "g").write_text("".join(w + "\n" for w in gold), encoding="utf-8")
        (tmp_path / "t").write_text("".join(w + "\n" for w in test), encoding="utf-8")
        out = subprocess.run(["diff", "--minimal", "-y", str(tmp_path / "g"), str(tmp_path / "t")],
                             capture_output=True, text=True, encoding="utf-8").stdout
        kept = sum(1 for line in out.splitlines() if not any(f" {m}" in line for m in "|<>"))
        assert lcs_length(gold, test) == kept, case


def test_span_matches_never_exceed_the_alignment():
    # gold 甲/乙甲 vs test 甲乙/甲: the LCS keeps one word (甲) at different places; no span matches
    score = score_segmentation(["甲 乙甲"], ["甲乙 甲"])
    assert (score.correct, score.span_correct) == (1, 0)


def test_different_line_counts_are_an_error_and_changed_characters_are_listed():
    with pytest.raises(SegmentationScoreError, match="1 lines, the gold file has 2"):
        score_segmentation(["甲", "乙"], ["甲"], name="out.txt")
    assert score_segmentation(["甲 乙", "丙"], ["甲 乙", "丁"]).mismatched_lines == [2]


def test_files_on_the_real_pku_sample(tmp_path):
    """The first 40 lines of PKU test: the gold against itself is perfect, the characters one by one are not."""
    from testkit import need_shared

    folder = need_shared("data", "zh_sighan2005")
    gold = (folder / "pku_test_gold.utf8").read_text(encoding="utf-8").splitlines()[:40]
    (tmp_path / "gold").write_text("\n".join(gold) + "\n", encoding="utf-8")
    perfect = score_files(tmp_path / "gold", tmp_path / "gold", folder / "pku_training_words.utf8")
    assert perfect.f1 == 1.0 and perfect.oov_recall == 1.0 and 0 < perfect.oov_rate < 0.2
    chars = [" ".join("".join(words_of(line))) for line in gold]
    (tmp_path / "chars").write_text("\n".join(chars) + "\n", encoding="utf-8")
    score = score_files(tmp_path / "gold", tmp_path / "chars")
    single = sum(len(w) == 1 for line in gold for w in words_of(line))
    assert score.correct == single  # only one-character gold words survive a cut at every character
