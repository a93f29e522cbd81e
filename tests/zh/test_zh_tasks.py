"""Chinese task data: the Weibo and Resume NER readers, word segmentation as B/M/E/S tagging (People's
Daily, SIGHAN gold), People's Daily POS; each against small hand-written files, and the real shared
files against the counts in their SOURCE.txt."""

import random

import pytest
from testkit import write_lines

from elmokit.data_paths import shared_data
from elmokit.evaluation.segmentation import score_segmentation, words_of
from elmokit.tasks.data import TaggingDataError
from elmokit.tasks.zh_data import (
    bio_to_cws,
    bmes_to_words,
    cws_to_bio,
    peoples_daily_split,
    read_peoples_daily,
    read_peoples_daily_cws,
    read_resume_ner,
    read_segmented,
    read_weibo_ner,
    segmented_words,
    words_to_bmes,
)

# ---------------------------------------------------------------------------- Weibo


def test_weibo_strips_the_position_number_of_any_length(tmp_path):
    path = write_lines(tmp_path / "weibo.conll", [
        "我0\tO", "在1\tO", "北0\tB-GPE.NAM", "京1\tI-GPE.NAM", "", "",
        "p10\tO", "310\tO", "41\tO", "��0\tO", "哥2\tI-PER.NOM", "",
    ])
    corpus = read_weibo_ner(path)
    assert corpus.sentences == [["我", "在", "北", "京"], ["p", "3", "4", "��", "哥"]]
    # an I- that opens a chunk becomes B- (BIO), and the change is noted
    assert corpus.labels == [["O", "O", "B-GPE.NAM", "I-GPE.NAM"], ["O", "O", "O", "O", "B-PER.NOM"]]
    assert corpus.notes == ["1 chunk-opening I- labels made B- (BIO)"]


@pytest.mark.parametrize("line, problem", [("我\tO", "position number"), ("我0 O", "TAB"), ("我0\tX-PER", "X-PER"),
                                           ("我0\tO\tO", "TAB")])
def test_weibo_bad_lines_name_file_and_line(tmp_path, line, problem):
    path = write_lines(tmp_path / "weibo.conll", ["好0\tO", "", "你0\tO", line])
    with pytest.raises(TaggingDataError, match=rf"weibo.conll:4: .*{problem}"):
        read_weibo_ner(path)


# ---------------------------------------------------------------------------- Resume


def test_resume_reads_crlf_bmes_as_bio(tmp_path):
    path = tmp_path / "train.char.bmes"
    lines = ["高 B-NAME", "勇 E-NAME", "， O", "男 S-RACE", "", "中 B-ORG", "国 M-ORG", "银 M-ORG", "行 E-ORG", "", ""]
    path.write_bytes("\r\n".join(lines).encode("utf-8"))
    corpus = read_resume_ner(path)
    assert corpus.sentences == [["高", "勇", "，", "男"], ["中", "国", "银", "行"]]
    assert corpus.labels == [["B-NAME", "I-NAME", "O", "B-RACE"], ["B-ORG", "I-ORG", "I-ORG", "I-ORG"]]
    assert corpus.notes == []


def test_resume_notes_an_unclosed_chunk_and_repairs_the_known_broken_line(tmp_path):
    path = tmp_path / "train.char.bmes"
    lines = ["x O"] * 68946 + ["上 B-NAME", "汽 M-NAME", "-NAME", "同 E-NAME", "", "研 B-EDU", "究 M-EDU"]
    path.write_bytes("\r\n".join(lines).encode("utf-8"))
    corpus = read_resume_ner(path)
    assert corpus.sentences[0][-4:] == ["上", "汽", "-", "同"]
    assert corpus.labels[0][-4:] == ["B-NAME", "I-NAME", "I-NAME", "I-NAME"]
    assert corpus.labels[1] == ["B-EDU", "I-EDU"]
    assert "train.char.bmes:68949: '-NAME' read as '- M-NAME'" in corpus.notes[0]
    assert "1 sentences with ill-formed BMES" in corpus.notes[1]
    other = tmp_path / "dev.char.bmes"  # the repair is for that line of that file only
    other.write_bytes("\r\n".join(lines).encode("utf-8"))
    with pytest.raises(TaggingDataError, match=r"dev.char.bmes:68949: expected 'character tag'"):
        read_resume_ner(other)


@pytest.mark.parametrize("line", ["中 I-ORG", "中", "中 B-ORG x", "中 BB-ORG"])
def test_resume_bad_lines_name_file_and_line(tmp_path, line):
    path = tmp_path / "dev.char.bmes"
    path.write_bytes("\r\n".join(["好 O", "", line]).encode("utf-8"))
    with pytest.raises(TaggingDataError, match=r"dev.char.bmes:3: "):
        read_resume_ner(path)


# ---------------------------------------------------------------------------- word segmentation


def test_words_to_bmes_by_hand():
    assert words_to_bmes(["中华人民共和国", "成立", "了", "５０", "年"]) == (
        list("中华人民共和国成立了５０年"), ["B", "M", "M", "M", "M", "M", "E", "B", "E", "S", "B", "E", "S"])
    with pytest.raises(ValueError, match="empty word"):
        words_to_bmes(["中", ""])


def test_bmes_round_trip_on_random_segmentations():
    rng = random.Random(7)
    alphabet = "中国人民的新世纪和平ab１"
    for _ in range(300):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(1, 9))]
        chars, labels = words_to_bmes(words)
        assert bmes_to_words(chars, labels) == words
        assert bio_to_cws(cws_to_bio(labels)) == labels  # through the tagger's BIO and back


def test_bmes_to_words_cuts_ill_formed_labels_where_they_say():
    chars = list("abcdef")
    assert bmes_to_words(chars, ["E", "B", "B", "M", "S", "M"]) == ["a", "b", "cd", "e", "f"]
    assert bmes_to_words(chars, ["M", "M", "E", "E", "M", "B"]) == ["abc", "d", "e", "f"]
    with pytest.raises(ValueError, match="not one of B, M, E, S"):
        bmes_to_words(["a"], ["X"])


def test_segmented_words_agree_with_the_scorer():
    line = "  共同\u3000创造\t美好  的\u00a0新 世纪\r\n"  # NBSP is no separator for the scorer
    assert segmented_words(line) == words_of(line) == ["共同", "创造", "美好", "的\u00a0新", "世纪"]


def test_read_segmented_and_score_predictions_by_the_scorer(tmp_path):
    gold_lines = ["共同  创造  美好  的  新  世纪", "", "（  附  图片  1  张  ）"]
    corpus = read_segmented(write_lines(tmp_path / "gold.utf8", gold_lines))
    assert corpus.sentences[0] == list("共同创造美好的新世纪")
    assert corpus.labels[0] == ["B", "E", "B", "E", "B", "E", "S", "S", "B", "E"]
    assert len(corpus) == 2  # the empty line is skipped, as the scorer skips it
    predicted = [["B", "E", "B", "E", "B", "M", "E", "S", "B", "E"], ["S", "S", "B", "M", "E", "S", "S"]]
    test_lines = ["  ".join(bmes_to_words(c, p)) for c, p in zip(corpus.sentences, predicted)]
    result = score_segmentation([g for g in gold_lines if g], test_lines)
    # by hand: test 共同 创造 美好的 新 世纪 / （ 附 图片1 张 ）: gold 6 + 6 words, test 5 + 5,
    # correct 4 (共同 创造 新 世纪) + 4 (（ 附 张 ）)
    assert test_lines[1] == "（  附  图片1  张  ）"
    assert (result.gold_words, result.test_words, result.correct) == (12, 10, 8)


def test_peoples_daily_cws_and_pos_follow_the_block_split(tmp_path):
    lines = [f"中国/ns  人民/n  第{i}/m  。/w" for i in range(1, 1001)]
    path = write_lines(tmp_path / "199801.txt", lines)
    pos = read_peoples_daily(path, "dev")
    assert len(pos) == 100 and pos.sentences[0] == ["中国", "人民", "第801", "。"]
    assert pos.labels[0] == ["ns", "n", "m", "w"]
    cws = read_peoples_daily_cws(path, "test")
    assert len(cws) == 100 and cws.sentences[0] == list("中国人民第901。")
    assert cws.labels[0] == ["B", "E", "B", "E", "B", "M", "M", "E", "S"]
    assert len(read_peoples_daily_cws(path, "train")) == 800


def test_peoples_daily_bad_item_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "199801.txt", ["中国/ns  人民/n", "中国/ns  人民"])
    with pytest.raises(TaggingDataError, match=r"199801.txt:2: '人民' is not word/TAG"):
        read_peoples_daily_cws(path)


# ---------------------------------------------------------------------------- the real files

ZH = shared_data("zh")
needs_zh = pytest.mark.skipif(not ZH.is_dir(), reason=f"the shared Chinese data is absent ({ZH}); set ELMOKIT_SHARED")


@needs_zh
@pytest.mark.parametrize("split, sentences, chars", [("train", 1350, 73778), ("dev", 270, 14509), ("test", 270, 14842)])
def test_weibo_counts_match_source(split, sentences, chars):
    corpus = read_weibo_ner(ZH / "weibo_ner" / f"weiboNER_2nd_conll.{split}")
    assert (len(corpus), corpus.num_tokens) == (sentences, chars)


@needs_zh
@pytest.mark.parametrize("split, sentences, chars", [("train", 3821, 124098), ("dev", 463, 13890), ("test", 477, 15100)])
def test_resume_counts_match_source(split, sentences, chars):
    corpus = read_resume_ner(ZH / "resume_ner" / f"{split}.char.bmes")
    repaired = 1 if split == "train" else 0  # SOURCE.txt counts the lines "char tag"; the broken one is not
    assert (len(corpus), corpus.num_tokens) == (sentences, chars + repaired)
    assert {label.split("-")[-1] for row in corpus.labels for label in row} == {
        "O", "NAME", "CONT", "RACE", "TITLE", "EDU", "ORG", "PRO", "LOC"}


@pytest.mark.slow  # reads the whole corpus (~5 s): the default suite stays under a minute; CI runs -m slow
@needs_zh
def test_peoples_daily_counts_match_source_and_the_split_covers_every_line():
    path = ZH / "peoples_daily_199801" / "199801.txt"
    corpora = {split: read_peoples_daily(path, split) for split in ("train", "dev", "test")}
    assert sum(map(len, corpora.values())) == 19484  # no empty line in the file
    assert sum(c.num_tokens for c in corpora.values()) == 1121447
    chars = {split: read_peoples_daily_cws(path, split) for split in corpora}
    assert sum(c.num_tokens for c in chars.values()) == 1841657
    assert [len(corpora[s]) for s in ("train", "dev", "test")] == [15684, 1900, 1900]
    assert sum(peoples_daily_split(n) == "dev" for n in range(1, 19485)) == 1900


@needs_zh
def test_pku_test_gold_reads_as_the_scorer_counts_it():
    gold = shared_data("zh_sighan2005", "pku_test_gold.utf8")
    corpus = read_segmented(gold)
    lines = gold.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1945 and len(corpus) == sum(1 for line in lines if words_of(line))
    back = ["  ".join(bmes_to_words(c, l)) for c, l in zip(corpus.sentences, corpus.labels)]
    result = score_segmentation([line for line in lines if words_of(line)], back)
    assert result.f1 == 1.0 and result.gold_words == sum(len(words_of(line)) for line in lines)
