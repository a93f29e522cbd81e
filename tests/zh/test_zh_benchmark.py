"""The Chinese data sets in the tagging benchmark: registered names, CWS scored as SIGHAN word F1, the
Chinese ELMo aligned to characters and rebuilt from a saved tagger's spec. Tiny files and configs."""

import json
import shutil

import pytest
from testkit import write_lines

from elmokit import Embedder
from elmokit.evaluation.segmentation import score_segmentation
from elmokit.evaluation.tagging import DATASETS, run_benchmark, segmentation_score
from elmokit.representation import CharAlignedWords
from elmokit.tasks.data import TaggedCorpus
from elmokit.tasks.tagger import SequenceTagger, TaggerConfig, TrainOptions, train_tagger
from elmokit.tasks.zh_data import cws_to_bio, read_weibo_ner

TINY = dict(word_dim=5, hidden_dim=3, min_word_count=1)
FAST = TrainOptions(epochs=1, batch_size=4, seed=0)
WEIBO = ["我0\tO", "在1\tO", "北0\tB-GPE.NAM", "京1\tI-GPE.NAM", "", "张0\tB-PER.NAM", "三1\tI-PER.NAM", "说0\tO", ""]


@pytest.fixture
def jieba_model(model_dir, tmp_path):
    folder = tmp_path / "zh-model"
    shutil.copytree(model_dir, folder)
    (folder / "lm.json").write_text(json.dumps({"format_version": 1, "tokenizer": {"kind": "jieba", "lowercase": False}}),
                                    encoding="utf-8")
    return folder


def test_chinese_sets_are_registered():
    assert {"weibo", "resume", "pku_cws", "pd_pos"} <= set(DATASETS)
    assert [DATASETS[n].task for n in ("weibo", "resume", "pku_cws", "pd_pos")] == ["ner", "ner", "cws", "pos"]
    assert [DATASETS[n].units for n in ("weibo", "pku_cws", "pd_pos")] == ["chars", "chars", "words"]


class FixedTagger:
    """A stand-in tagger whose predictions are given (the tagger's BIO words)."""

    def __init__(self, predictions):
        self.predictions = predictions

    def predict(self, sentences, features=None):
        return self.predictions


def test_segmentation_score_is_the_scorers_word_f1():
    corpus = TaggedCorpus([list("共同创造美好"), list("新世纪")], [["B", "E", "B", "E", "B", "E"], ["S", "B", "E"]])
    # predicted words: 共同 创 造 美好 / 新世纪
    predicted = [["B-W", "I-W", "B-W", "B-W", "B-W", "I-W"], ["B-W", "I-W", "I-W"]]
    result = segmentation_score(FixedTagger(predicted), corpus, frozenset({"共同", "美好"}))
    expected = score_segmentation(["共同 创造 美好", "新 世纪"], ["共同 创 造 美好", "新世纪"])
    assert (result["gold_words"], result["test_words"], result["correct"]) == (5, 5, 2)  # by hand: 共同, 美好
    assert result["f1"] == pytest.approx(expected.f1) == pytest.approx(0.4)
    assert (result["oov_words"], result["oov_recalled"]) == (3, 0)  # 创造, 新, 世纪 are out of the word list


def _data_dir(tmp_path):
    root = tmp_path / "data"
    for folder in ("zh/weibo_ner", "zh/peoples_daily_199801", "zh_sighan2005"):
        (root / folder).mkdir(parents=True)
    write_lines(root / "zh" / "weibo_ner" / "weiboNER_2nd_conll.train", WEIBO * 3)
    for split in ("dev", "test"):
        write_lines(root / "zh" / "weibo_ner" / f"weiboNER_2nd_conll.{split}", WEIBO)
    pd = [f"中国/ns  人民/n  第{i}/m  。/w" for i in range(1, 1001)]
    write_lines(root / "zh" / "peoples_daily_199801" / "199801.txt", pd)
    write_lines(root / "zh_sighan2005" / "pku_test_gold.utf8", ["中国  人民  第一  。", "", "人民  中国"])
    write_lines(root / "zh_sighan2005" / "pku_training_words.utf8", ["中国", "人民"])
    return root


def test_cws_trains_on_peoples_daily_and_scores_pku_gold_as_words(tmp_path):
    root = _data_dir(tmp_path)
    (row,) = run_benchmark(["pku_cws"], None, options=FAST, config_changes=TINY, max_train_sentences=12,
                           max_dev_sentences=5, data_dir=root, log=lambda m: None)
    assert row["task"] == "cws" and row["config"]["scheme"] == "BIOES" and row["config"]["task"] == "ner"
    assert (row["train_sentences"], row["dev_sentences"], row["test_sentences"]) == (12, 5, 2)
    test = row["test"]
    assert test["metric"].startswith("word F1, SIGHAN") and test["gold_words"] == 6 and test["lines"] == 2
    assert test["oov_words"] == 2  # 第一 and 。 are not in the word list
    assert row["test_score"] == test["f1"]


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_weibo_with_the_chinese_elmo_aligns_characters_and_the_saved_tagger_rebuilds_it(tmp_path, jieba_model):
    root = _data_dir(tmp_path)
    spec = {"kind": "elmo", "model": str(jieba_model)}
    rows = run_benchmark(["weibo"], Embedder.load(jieba_model), representation_spec=spec, baseline=True, options=FAST,
                         config_changes=TINY, data_dir=root, log=lambda m: None)
    elmo, base = rows
    assert elmo["alignment"] == "characters given the vectors of their jieba words" and base["alignment"] == ""
    assert elmo["config"]["representation"] == {**spec, "align": "chars"} and base["config"]["representation"] == {}
    assert elmo["representation"].endswith("+chars")

    corpus = read_weibo_ner(root / "zh" / "weibo_ner" / "weiboNER_2nd_conll.train")
    config = TaggerConfig(task="ner", elmo_layers=3, elmo_dim=10, representation={**spec, "align": "chars"}, **TINY)
    tagger = train_tagger(corpus, corpus, config, representation=CharAlignedWords(Embedder.load(jieba_model)),
                          options=FAST)
    tagger.save(tmp_path / "tagger")
    loaded = SequenceTagger.load(tmp_path / "tagger")
    assert isinstance(loaded.representation, CharAlignedWords)
    assert loaded.predict(corpus.sentences) == tagger.predict(corpus.sentences)


def test_cws_labels_reach_the_tagger_as_bio_words():
    assert cws_to_bio(["B", "M", "E", "S", "S"]) == ["B-W", "I-W", "I-W", "B-W", "B-W"]


def test_eval_cws_command_scores_both_systems_as_words(tmp_path, jieba_model):
    from elmokit.cli.main import main

    root = _data_dir(tmp_path)
    out = tmp_path / "cws.json"
    code = main(["eval", "cws", "--model", str(jieba_model), "--data-dir", str(root), "--epochs", "1", "--word-dim", "5",
                 "--hidden-dim", "3", "--min-word-count", "1", "--max-train-sentences", "12", "--max-dev-sentences", "5",
                 "--threads", "1", "--out", str(out)])
    assert code == 0
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert payload["metric"] == "word F1, SIGHAN bakeoff scorer rules"
    elmo, base = payload["results"]
    assert elmo["config"]["representation"]["align"] == "chars" and base["config"]["representation"] == {}
    assert elmo["dev_sentences"] == 5 and elmo["test"]["gold_words"] == base["test"]["gold_words"] == 6


def test_only_a_model_with_a_segmenter_is_aligned_to_characters(model_dir, jieba_model):
    from elmokit.evaluation.tagging import for_characters

    plain = Embedder.load(model_dir)  # records no segmenter: whitespace tokens
    rep, spec, how = for_characters(plain, {"kind": "elmo", "model": str(model_dir)})
    assert rep is plain and spec == {"kind": "elmo", "model": str(model_dir)} and how == "characters fed directly as tokens"
    rep, spec, how = for_characters(Embedder.load(jieba_model), {"kind": "elmo", "model": str(jieba_model)})
    assert isinstance(rep, CharAlignedWords) and spec["align"] == "chars"
    again = for_characters(rep, spec)
    assert again[0] is rep and again[1] == spec  # already aligned: unchanged
