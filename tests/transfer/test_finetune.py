"""GPT / BERT fine-tuning (elmokit.transfer.finetune): the schedule, GPT's eq. 5, the heads, a round trip.

Oracles: the schedule by hand; eq. 5 against a re-statement that computes the LM loss from the LM
head's logits with an explicit shift and log-softmax; the BERT head against the pooler applied by
hand; a separable toy task learnt; a saved model predicting as before.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from elmokit.pretraining.models import build_model, preset  # noqa: E402
from elmokit.text.subword_tokenizers import train_byte_bpe, wordpiece_from_vocab  # noqa: E402
from elmokit.transfer.finetune import (  # noqa: E402
    FineTuned,
    FineTunedClassifier,
    FineTuneOptions,
    combined_loss,
    encode_batch,
    finetune_classifier,
    load_base,
    warmup_then_linear_decay,
)

torch.set_num_threads(1)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "dog", "cat", "sat", "ran", "on", "mat", "far", "."]
LINES = ["the dog sat on a mat .", "a cat ran far .", "the cat sat .", "a dog ran on the mat ."]


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    build_model("bert", preset("tiny", max_positions=24), vocab_size=len(VOCAB), seed=1).save_pretrained(str(folder))
    wordpiece_from_vocab(VOCAB).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    tokenizer = train_byte_bpe(LINES * 5, vocab_size=270, min_frequency=1, template="gpt2")
    build_model("gpt2", preset("tiny", max_positions=24), vocab_size=len(tokenizer), seed=1).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def test_warm_up_then_linear_decay_by_hand():
    # 10 steps, 20% warm-up: 2 rising steps, then (10 - s) / 8
    assert [warmup_then_linear_decay(s, 10, 0.2) for s in range(10)] == [0.5, 1.0, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8,
                                                                         3 / 8, 2 / 8, 1 / 8]
    assert warmup_then_linear_decay(0, 4, 0.0) == 1.0


def test_gpt_eq5_adds_half_the_lm_loss_of_the_same_input(gpt2_folder):
    base, tokenizer = load_base(gpt2_folder)
    model = FineTunedClassifier(base, 3, dropout=0.0).eval()
    sentences = [s.split() for s in LINES[:3]]
    ids, mask = encode_batch(tokenizer, sentences, 24)
    assert bool((mask.sum(1) < ids.shape[1]).any())  # a padded row is in the batch
    logits, lm = model(ids, mask, lm_loss=True)
    with torch.no_grad():  # L1 by hand: next-token log-likelihood over the real tokens only
        vocab_logits = base(input_ids=ids, attention_mask=mask).logits[:, :-1]
        log_p = torch.log_softmax(vocab_logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
        real = mask[:, 1:].bool()
        expected_l1 = -(log_p[real]).mean()
    torch.testing.assert_close(lm, expected_l1, rtol=1e-5, atol=1e-6)
    targets = torch.tensor([0, 2, 1])
    l2 = -torch.log_softmax(logits, -1)[torch.arange(3), targets].mean()
    torch.testing.assert_close(combined_loss(logits, targets, lm, 0.5), l2 + 0.5 * expected_l1, rtol=1e-6, atol=1e-6)
    # the summary is the last real token: a sentence's logits are the same alone as in the padded batch
    alone, _ = model(*encode_batch(tokenizer, sentences[1:2], 24))
    torch.testing.assert_close(alone[0], logits[1], rtol=1e-5, atol=1e-5)


def test_bert_head_is_the_pooler_on_cls_then_a_linear_layer(bert_folder):
    base, tokenizer = load_base(bert_folder)
    model = FineTunedClassifier(base, 2, dropout=0.0).eval()
    ids, mask = encode_batch(tokenizer, [s.split() for s in LINES[:2]], 24)
    assert ids[0, 0] == VOCAB.index("[CLS]")
    logits, lm = model(ids, mask)
    with torch.no_grad():
        cls = base(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        pooled = torch.tanh(cls @ base.pooler.dense.weight.T + base.pooler.dense.bias)
        expected = pooled @ model.classifier.weight.T + model.classifier.bias
    assert lm is None
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-6)


def test_the_auxiliary_lm_loss_is_refused_for_an_encoder(bert_folder):
    with pytest.raises(ValueError, match="left-to-right"):
        finetune_classifier(bert_folder, ([["the", "dog"]], ["x"]), ([["the", "dog"]], ["x"]), FineTuneOptions(aux_lm=True))


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_fine_tuning_learns_a_toy_task_and_round_trips(family, bert_folder, gpt2_folder, tmp_path):
    folder = bert_folder if family == "bert" else gpt2_folder
    animals, places = ["dog", "cat"], ["mat", "far"]
    rng = torch.Generator().manual_seed(0)
    sentences, labels = [], []
    for i in range(48):  # the label is which animal the sentence names
        animal = animals[i % 2]
        place = places[int(torch.randint(0, 2, (1,), generator=rng))]
        sentences.append(["the", animal, "sat", "on", "a", place, "."][: 4 + i % 4] + [animal])
        labels.append(animal)
    options = FineTuneOptions(epochs=6, batch_size=8, learning_rate=3e-3, warmup=0.1, aux_lm=family == "gpt2", seed=1)
    tuned = finetune_classifier(folder, (sentences, labels), (sentences[:16], labels[:16]), options)
    assert tuned.accuracy(sentences, labels) >= 90
    assert len(tuned.history) == 6
    tuned.save(tmp_path / "clf")
    loaded = FineTuned.load(tmp_path / "clf")
    assert loaded.labels == ["cat", "dog"] and loaded.options == options
    torch.testing.assert_close(loaded.logits(sentences), tuned.logits(sentences), rtol=0, atol=0)


def test_classify_cli_recipe_finetune_trains_evaluates_and_predicts(bert_folder, tmp_path, capsys):
    from elmokit.cli.main import main

    rows = [("dog", "the dog sat ."), ("cat", "a cat ran ."), ("dog", "a dog ran far ."), ("cat", "the cat sat on a mat .")]
    data = tmp_path / "train.tsv"
    data.write_text("".join(f"{y}\t{x}\n" for y, x in rows * 6), encoding="utf-8")
    assert main(["classify", "train", "--recipe", "finetune", "--model", str(bert_folder), "--train", str(data),
                 "--dev", str(data), "--out", str(tmp_path / "clf"), "--epochs", "4", "--lr", "3e-3",
                 "--train-batch-size", "8", "--threads", "1"]) == 0
    saved = FineTuned.load(tmp_path / "clf")
    assert saved.options.learning_rate == 3e-3 and saved.options.epochs == 4 and not saved.options.aux_lm
    sentences = [x.split() for _, x in rows]
    expected = saved.predict(sentences)
    capsys.readouterr()
    assert main(["classify", "eval", "--classifier", str(tmp_path / "clf"), "--data", str(data)]) == 0
    accuracy = 100 * sum(p == y for p, (y, _) in zip(expected, rows)) / len(rows)
    assert f"accuracy {accuracy:.2f}" in capsys.readouterr().out
    (tmp_path / "in.txt").write_text("".join(x + "\n" for _, x in rows), encoding="utf-8")
    assert main(["classify", "predict", "--classifier", str(tmp_path / "clf"), "--input", str(tmp_path / "in.txt"),
                 "--out", str(tmp_path / "pred.tsv")]) == 0
    assert [line.split("\t")[0] for line in (tmp_path / "pred.tsv").read_text().splitlines()] == expected


def test_classify_cli_recipe_finetune_needs_a_model_folder(tmp_path, capsys):
    from elmokit.cli.main import main

    (tmp_path / "t.tsv").write_text("a\tthe dog\n", encoding="utf-8")
    code = main(["classify", "train", "--recipe", "finetune", "--train", str(tmp_path / "t.tsv"), "--dev",
                 str(tmp_path / "t.tsv"), "--out", str(tmp_path / "o")])
    assert code != 0 and "--recipe finetune fine-tunes a transformer folder given by --model" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
