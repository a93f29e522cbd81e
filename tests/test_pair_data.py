"""Readers of the GLUE and SICK files (elmokit.tasks.pair_data) on tiny hand-written files, and the real
files' official sizes when the shared data is present."""

from __future__ import annotations

import pytest
from testkit import need_shared

from elmokit.tasks.data import DataFileError
from elmokit.tasks.pair_data import read_cola, read_id_pairs, read_mrpc, read_nli_tsv, read_sick, read_stsb, tokenize


def test_tokenize_splits_punctuation_and_clitics_like_the_treebank():
    assert tokenize("It won't cost $2.50, John's dog said.") == ["It", "wo", "n't", "cost", "$", "2.50", ",", "John", "'s",
                                                                 "dog", "said", "."]
    assert tokenize("They'll DON'T (1,000)") == ["They", "'ll", "DO", "N'T", "(", "1,000", ")"]


def test_cola_reader_and_its_errors(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("gj04\t1\t\tThe dog barked.\ngj04\t0\t*\tDog the barked\n", encoding="utf-8")
    data = read_cola(path)
    assert data.first == [["The", "dog", "barked", "."], ["Dog", "the", "barked"]] and data.second is None
    assert data.targets == ["1", "0"]
    path.write_text("gj04\t1\t\tfine.\ngj04\t2\t\tThe dog.\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"train.tsv:2: label '2' is not one of 0, 1"):
        read_cola(path)
    path.write_text("gj04\t1\tThe dog.\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"train.tsv:1: expected 4 tab-separated columns, got 3"):
        read_cola(path)


def test_rte_and_stsb_readers(tmp_path):
    rte = tmp_path / "rte.tsv"
    rte.write_text("index\tsentence1\tsentence2\tlabel\n0\tA man sleeps.\tA person sleeps.\tentailment\n", encoding="utf-8")
    data = read_nli_tsv(rte, ("entailment", "not_entailment"))
    assert data.first == [["A", "man", "sleeps", "."]] and data.second == [["A", "person", "sleeps", "."]]
    assert data.targets == ["entailment"]
    rte.write_text("idx\tsentence1\tsentence2\tlabel\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"rte.tsv:1: expected a header starting with 'index'"):
        read_nli_tsv(rte, ("entailment",))
    stsb = tmp_path / "stsb.tsv"
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    stsb.write_text(header + "0\tg\tf\t2012\t1\tnone\tnone\tA plane.\tAn air plane.\t3.800\n", encoding="utf-8")
    assert read_stsb(stsb).targets == [3.8]
    stsb.write_text(header + "0\tg\tf\t2012\t1\tnone\tnone\tA plane.\tAn air plane.\t5.5\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"stsb.tsv:2: score '5.5' is outside \[0, 5\]"):
        read_stsb(stsb)
    stsb.write_text(header + "0\tg\tf\t2012\t1\tnone\tnone\t \tAn air plane.\t1\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"stsb.tsv:2: empty sentence"):
        read_stsb(stsb)


def test_mrpc_train_leaves_out_the_dev_pairs(tmp_path):
    train = tmp_path / "msr.txt"
    train.write_text("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                     "1\t11\t12\tHe said so .\tHe did say so .\n0\t21\t22\tA b .\tC d .\n", encoding="utf-8")
    ids = tmp_path / "dev_ids.tsv"
    ids.write_text("21\t22\n", encoding="utf-8")
    data = read_mrpc(train, exclude=read_id_pairs(ids))
    assert data.targets == ["1"] and data.first == [["He", "said", "so", "."]]
    assert len(read_mrpc(train)) == 2


def test_sick_gives_both_tasks(tmp_path):
    path = tmp_path / "SICK_trial.txt"
    path.write_text("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\r\n"
                    "1\tA kid plays\tA child plays\t4.5\tENTAILMENT\r\n", encoding="utf-8")
    assert read_sick(path, "entailment").targets == ["ENTAILMENT"]
    assert read_sick(path, "relatedness").targets == [4.5]
    assert read_sick(path, "relatedness").first == [["A", "kid", "plays"]]


def test_the_real_files_have_the_official_sizes():
    glue = need_shared("data", "glue")
    sick = need_shared("data", "sick", "semeval2014")
    assert len(read_cola(glue / "cola" / "train.tsv")) == 8551 and len(read_cola(glue / "cola" / "dev.tsv")) == 1043
    assert len(read_nli_tsv(glue / "rte" / "train.tsv", ("entailment", "not_entailment"))) == 2490
    assert len(read_nli_tsv(glue / "wnli" / "dev.tsv", ("0", "1"))) == 71
    assert len(read_stsb(glue / "stsb" / "train.tsv")) == 5749
    dev_ids = read_id_pairs(glue / "mrpc" / "dev_ids.tsv")
    assert len(read_mrpc(glue / "mrpc" / "msr_paraphrase_train.txt", exclude=dev_ids)) == 3668
    assert len(read_mrpc(glue / "mrpc" / "dev.tsv")) == 408
    assert [len(read_sick(sick / f, "entailment")) for f in ("SICK_train.txt", "SICK_trial.txt",
                                                             "SICK_test_annotated.txt")] == [4500, 500, 4927]
