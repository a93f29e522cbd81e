import json

import pytest
import torch
from testkit import need_shared

from elmokit.text import batch_to_ids, token_to_char_ids


def test_the_by_hand():
    # spec §3.3: "The" -> [259, 85, 105, 102, 260, 261 x 45] (bytes T=84 h=104 e=101, all +1)
    expected = [259, 85, 105, 102, 260] + [261] * 45
    assert token_to_char_ids("The").tolist() == expected


def test_boundaries_and_empty_by_hand():
    assert token_to_char_ids("<S>").tolist() == [259, 257, 260] + [261] * 47
    assert token_to_char_ids("</S>").tolist() == [259, 258, 260] + [261] * 47
    assert token_to_char_ids("").tolist() == [259, 260] + [261] * 48


def test_truncation_is_bytewise_and_can_split_a_character():
    token = "a" * 47 + "é"  # 49 bytes: the 2-byte é is cut after its first byte
    ids = token_to_char_ids(token)
    assert ids.tolist() == [259] + [ord("a") + 1] * 47 + [0xC3 + 1, 260]
    assert len(token_to_char_ids("x" * 48)) == 50 and token_to_char_ids("x" * 48)[-1] == 260


def test_lone_surrogate_is_dropped_not_an_error():
    assert token_to_char_ids("a\ud800b").tolist() == token_to_char_ids("ab").tolist()


def test_reference_cases():
    cases = json.loads(need_shared("fixtures", "derived", "char_ids_cases.json").read_text())
    assert len(cases) == 18
    for case in cases:
        assert token_to_char_ids(case["token"]).tolist() == case["char_ids"], case["token"]


def test_batch_to_ids_reference_example():
    example = json.loads(need_shared("fixtures", "derived", "batch_to_ids_example.json").read_text())
    ids = batch_to_ids(example["sentences"])
    assert ids.dtype == torch.int64
    assert list(ids.shape) == example["shape"]
    assert ids.tolist() == example["char_ids"]


def test_batch_pads_with_zero_rows():
    ids = batch_to_ids([["a", "b", "c"], [], ["d"]])
    assert ids.shape == (3, 3, 50)
    assert (ids[1] == 0).all() and (ids[2, 1:] == 0).all() and (ids[2, 0] > 0).all()


def test_batch_of_strings_is_a_clear_error():
    with pytest.raises(TypeError, match="tokenised"):
        batch_to_ids(["not", "tokenised"][0])
    with pytest.raises(TypeError, match="tokenised"):
        batch_to_ids(["a sentence as one string"])
