"""BERT's and GPT's pair inputs (elmokit.transfer.finetune_pairs), token by token on toy tokenizers;
GPT's similarity sum against the two orders run by hand; a toy pair task learnt by fine-tuning."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from elmokit.pretraining.models import build_model, preset  # noqa: E402
from elmokit.text.subword_tokenizers import encode_words, train_byte_bpe, wordpiece_from_vocab  # noqa: E402
from elmokit.transfer.finetune import FineTuneOptions, load_base  # noqa: E402
from elmokit.transfer.finetune_pairs import (  # noqa: E402
    GPT_DELIMITER,
    GPT_EXTRACT,
    GPT_START,
    FineTunedPairModel,
    PairInputs,
    add_gpt_task_tokens,
    finetune_pairs,
    pad_rows,
    truncate_pair,
)

torch.set_num_threads(1)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "dog", "cat", "sat", "ran", "on", "mat", "far", ".",
         "same", "not"]
LINES = ["the dog sat on a mat .", "a cat ran far .", "the cat sat .", "a dog ran on the mat ."]


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    build_model("bert", preset("tiny", max_positions=12), vocab_size=len(VOCAB), seed=1).save_pretrained(str(folder))
    wordpiece_from_vocab(VOCAB).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    tokenizer = train_byte_bpe(LINES * 5, vocab_size=270, min_frequency=1, template="gpt2")
    build_model("gpt2", preset("tiny", max_positions=24), vocab_size=len(tokenizer), seed=1).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def _tokens(tokenizer, ids):
    return tokenizer.convert_ids_to_tokens(ids)


def test_bert_pair_input_is_cls_a_sep_b_sep_with_segments(bert_folder):
    base, tokenizer = load_base(bert_folder)
    inputs = PairInputs(tokenizer, base.config, "entailment")
    [(ids, types)] = inputs.rows(["the", "dog"], ["a", "cat", "sat"])
    assert _tokens(tokenizer, ids) == ["[CLS]", "the", "dog", "[SEP]", "a", "cat", "sat", "[SEP]"]
    assert types == [0, 0, 0, 0, 1, 1, 1, 1]
    [(ids, types)] = PairInputs(tokenizer, base.config, "single").rows(["the", "dog"], None)
    assert _tokens(tokenizer, ids) == ["[CLS]", "the", "dog", "[SEP]"] and types == [0, 0, 0, 0]
    # BERT uses one sequence for similarity too (both orders are GPT's device)
    assert len(PairInputs(tokenizer, base.config, "similarity").rows(["the"], ["a"])) == 1
    # 12 positions: 9 pieces of room; the longer (first) sentence loses its last pieces, then the second on a tie
    [(ids, types)] = inputs.rows(["the", "dog", "sat", "on", "a", "mat", "."], ["a", "cat", "ran", "far"])
    assert _tokens(tokenizer, ids) == ["[CLS]", "the", "dog", "sat", "on", "a", "[SEP]", "a", "cat", "ran", "far", "[SEP]"]
    assert truncate_pair([1, 2, 3], [4, 5, 6], 4) == ([1, 2], [4, 5])
    assert truncate_pair([1, 2, 3, 4, 5], [6], 3) == ([1, 2], [6])


def test_gpt_inputs_are_start_premise_delimiter_hypothesis_extract(gpt2_folder):
    base, tokenizer = load_base(gpt2_folder)
    size = len(tokenizer)
    with pytest.raises(ValueError, match="add_gpt_task_tokens"):
        PairInputs(tokenizer, base.config, "entailment")
    add_gpt_task_tokens(base, tokenizer)
    assert len(tokenizer) == size + 3 and base.get_input_embeddings().weight.shape[0] == size + 3
    a = _tokens(tokenizer, encode_words(tokenizer, ["the", "dog"], add_special_tokens=False).input_ids)
    b = _tokens(tokenizer, encode_words(tokenizer, ["a", "cat"], add_special_tokens=False).input_ids)
    assert "".join(a + b).replace("\u0120", " ").split() == ["the", "dog", "a", "cat"]  # byte-level BPE's space mark
    [(ids, _)] = PairInputs(tokenizer, base.config, "single").rows(["the", "dog"], None)
    assert _tokens(tokenizer, ids) == [GPT_START, *a, GPT_EXTRACT]
    [(ids, _)] = PairInputs(tokenizer, base.config, "entailment").rows(["the", "dog"], ["a", "cat"])
    assert _tokens(tokenizer, ids) == [GPT_START, *a, GPT_DELIMITER, *b, GPT_EXTRACT]
    both = PairInputs(tokenizer, base.config, "similarity").rows(["the", "dog"], ["a", "cat"])
    assert [_tokens(tokenizer, row) for row, _ in both] == [[GPT_START, *a, GPT_DELIMITER, *b, GPT_EXTRACT],
                                                            [GPT_START, *b, GPT_DELIMITER, *a, GPT_EXTRACT]]


def test_gpt_similarity_adds_the_extract_vectors_of_both_orders(gpt2_folder):
    base, tokenizer = load_base(gpt2_folder)
    add_gpt_task_tokens(base, tokenizer)
    inputs = PairInputs(tokenizer, base.config, "similarity")
    model = FineTunedPairModel(base, 1, dropout=0.0).eval()
    pairs = [(["the", "dog", "sat"], ["a", "cat"]), (["a", "mat"], ["the", "cat", "ran", "far", "."])]
    rows = [inputs.rows(a, b) for a, b in pairs]
    sequences = [pad_rows([r[k] for r in rows], tokenizer.pad_token_id or 0) for k in range(2)]
    with torch.no_grad():
        out, _ = model(sequences)
        for i, row in enumerate(rows):  # each order alone, unpadded: the extract token's final vector
            summed = sum(base(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0, -1]
                         for ids, _ in row)
            expected = summed @ model.output.weight.T + model.output.bias
            torch.testing.assert_close(out[i], expected, rtol=1e-4, atol=1e-5)


def _toy_pairs():
    """The label is the animal of the second sentence; the first names one too, independently (a distractor)."""
    animals = ["dog", "cat"]
    first, second, labels = [], [], []
    for i in range(40):
        a, b = animals[i % 2], animals[(i // 2) % 2]
        first.append(["the", a, "sat"][: 2 + i % 2])
        second.append(["a", b, "ran", "far"][: 2 + i % 3])
        labels.append(b)
    return first, second, labels


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_fine_tuning_learns_a_toy_pair_task(family, bert_folder, gpt2_folder):
    folder = bert_folder if family == "bert" else gpt2_folder
    data = _toy_pairs()
    accuracy = lambda p, g: 100 * sum(x == y for x, y in zip(p, g)) / len(g)  # noqa: E731
    tuned, result = finetune_pairs(folder, data, data, kind="entailment", metric=accuracy,
                                   options=FineTuneOptions(epochs=8, batch_size=8, learning_rate=3e-3, seed=1),
                                   patience=8)
    assert accuracy(tuned.predict(data[0], data[1]), data[2]) >= 90
    assert result.best_metric >= 90 and len(result.history) <= 8


def test_roberta_pair_input_doubles_the_separator_and_has_no_segments(tmp_path):
    tokenizer = train_byte_bpe(LINES * 5, vocab_size=270, min_frequency=1, template="roberta")
    build_model("roberta", preset("tiny", max_positions=24), vocab_size=len(tokenizer), seed=1,
                pad_id=tokenizer.pad_token_id).save_pretrained(str(tmp_path))
    tokenizer.save_pretrained(str(tmp_path))
    base, tokenizer = load_base(tmp_path)
    a = _tokens(tokenizer, encode_words(tokenizer, ["the", "dog"], add_special_tokens=False).input_ids)
    b = _tokens(tokenizer, encode_words(tokenizer, ["a", "cat"], add_special_tokens=False).input_ids)
    [(ids, _)] = PairInputs(tokenizer, base.config, "entailment").rows(["the", "dog"], ["a", "cat"])
    assert _tokens(tokenizer, ids) == ["<s>", *a, "</s>", "</s>", *b, "</s>"]
    assert not FineTunedPairModel(base, 2).uses_segments  # RoBERTa has one segment embedding: type ids are not passed


def test_gpt_similarity_regression_fine_tunes_to_scores(gpt2_folder):
    """STS-like: the score is 4 when both sentences name the same animal, else 1; both orders are summed."""
    first, second, scores = [], [], []
    for i in range(32):
        a, b = ["dog", "cat"][i % 2], ["dog", "cat"][(i // 2) % 2]
        first.append(["the", a, "sat"])
        second.append(["a", b, "ran"])
        scores.append(4.0 if a == b else 1.0)
    mse = lambda p, g: -sum((x - y) ** 2 for x, y in zip(p, g)) / len(g)  # noqa: E731
    tuned, result = finetune_pairs(gpt2_folder, (first, second, scores), (first, second, scores), kind="similarity",
                                   regression=True, metric=mse, patience=12,
                                   options=FineTuneOptions(epochs=12, batch_size=8, learning_rate=3e-3, seed=0))
    predicted = tuned.predict(first, second)
    assert all(isinstance(p, float) for p in predicted) and tuned.labels == []
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    assert -mse(predicted, scores) < 0.5 * float(torch.tensor(scores).var(unbiased=False))  # better than the mean
