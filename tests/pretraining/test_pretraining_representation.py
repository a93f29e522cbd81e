"""A saved transformers folder as a Representation: round trip, shapes, word pooling against the
library's own hidden states averaged by hand, batch invariance, fingerprints; and the presets."""

from __future__ import annotations

import numpy as np
import pytest
from pretraining_testkit import need_transformers

need_transformers()

import torch  # noqa: E402

from elmokit.pretraining.models import FAMILIES, build_model, non_embedding_parameters, preset  # noqa: E402
from elmokit.pretraining.representation import TransformerRepresentation  # noqa: E402
from elmokit.representation import fingerprint, load_representation  # noqa: E402
from elmokit.text.subword_tokenizers import train_byte_bpe  # noqa: E402

SENTENCES = [["the", "cats", "sat", "on", "a", "mat", "."], ["unbelievable", "!"], ["a", "doggy"], [], ["x"] * 9]
# pieces by hand (HAND_VOCAB, with [CLS] at 0): cats = cat ##s, unbelievable = un ##believ ##able, doggy = dog ##gy
HAND_PIECES = [[[1], [2, 3], [4], [5], [6], [7], [8]], [[1, 2, 3], [4]], [[1], [2, 3]], [], [[i] for i in range(1, 10)]]


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory, hand_tokenizer):
    folder = tmp_path_factory.mktemp("bert")
    model = build_model("bert", preset("tiny", max_positions=16), vocab_size=len(hand_tokenizer), seed=3)
    model.save_pretrained(str(folder))
    hand_tokenizer.save_pretrained(str(folder))
    return folder, model.eval()


def test_a_saved_bert_folder_embeds_each_word_as_the_mean_of_its_pieces(bert_folder, hand_tokenizer):
    folder, model = bert_folder
    rep = load_representation({"kind": "transformer", "path": str(folder)})
    assert isinstance(rep, TransformerRepresentation)
    assert (rep.num_layers, rep.dim) == (3, 32)
    arrays = rep.embed(SENTENCES)
    for words, pieces, array in zip(SENTENCES, HAND_PIECES, arrays):
        assert array.shape == (3, len(words), 32) and array.dtype == np.float32
        if not words:
            continue
        ids = hand_tokenizer(words, is_split_into_words=True, return_tensors="pt")["input_ids"]
        with torch.no_grad():  # the oracle: the original (unsaved) model's own hidden states
            hidden = torch.stack(model.bert(input_ids=ids, output_hidden_states=True).hidden_states)[:, 0].numpy()
        expected = np.stack([hidden[:, p].mean(axis=1) for p in pieces], axis=1)
        np.testing.assert_allclose(array, expected, rtol=1e-5, atol=1e-6)
    first = load_representation({"kind": "transformer", "path": str(folder), "pooling": "first"}).embed(SENTENCES[1:2])[0]
    last = TransformerRepresentation.load(folder, pooling="last").embed(SENTENCES[1:2])[0]
    mean = arrays[1]
    assert np.array_equal(first[:, 1], last[:, 1]) and np.array_equal(first[:, 1], mean[:, 1])  # "!" is one piece
    assert not np.allclose(first[:, 0], last[:, 0])  # "unbelievable": un ... ##able


def test_a_batch_embeds_exactly_like_its_sentences_one_by_one(bert_folder):
    rep = TransformerRepresentation.load(bert_folder[0])
    alone = [rep.embed([s])[0] for s in SENTENCES]
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1]):
        for index, array in zip(order, rep.embed([SENTENCES[i] for i in order])):
            assert np.array_equal(array, alone[index])
    bucketed = TransformerRepresentation.load(bert_folder[0], batch_size=4).embed(SENTENCES + [["a", "mat"], ["a", "cats"]])
    for array, expected in zip(bucketed, alone):
        np.testing.assert_allclose(array, expected, rtol=1e-5, atol=1e-5)


def test_fingerprint_follows_weights_tokenizer_and_pooling(bert_folder, tmp_path):
    folder, model = bert_folder
    a, b = TransformerRepresentation.load(folder), TransformerRepresentation.load(folder)
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(TransformerRepresentation.load(folder, pooling="first")) != fingerprint(a)
    changed = build_model("bert", preset("tiny", max_positions=16), vocab_size=model.config.vocab_size, seed=4)
    changed.save_pretrained(str(tmp_path))
    a.tokenizer.save_pretrained(str(tmp_path))
    assert fingerprint(TransformerRepresentation.load(tmp_path)) != fingerprint(a)


def test_errors_name_the_problem(bert_folder, tmp_path):
    rep = TransformerRepresentation.load(bert_folder[0])
    with pytest.raises(ValueError, match="sentence 1, word 2: 16 subword pieces, more than the 14"):
        rep.embed([["x"], ["a", "cats", "cat" + "s" * 15]])  # cat ##s x 15
    with pytest.raises(TypeError, match="tokenised"):
        rep.embed(["the cat"])
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_representation({"kind": "transformer", "path": str(tmp_path)})
    with pytest.raises(Exception, match="bf16"):
        load_representation({"kind": "transformer", "path": str(bert_folder[0])}, precision="bf16")


def test_a_gpt2_folder_with_byte_bpe_is_a_representation(tmp_path):
    tokenizer = train_byte_bpe(["the cat sat on the mat", "a dog ran far away"] * 10, vocab_size=280, min_frequency=1,
                               template="gpt2")
    model = build_model("gpt2", preset("tiny", max_positions=32), vocab_size=len(tokenizer))
    model.save_pretrained(str(tmp_path))
    tokenizer.save_pretrained(str(tmp_path))
    rep = load_representation({"kind": "transformer", "path": str(tmp_path)})
    arrays = rep.embed([["the", "cat"], ["Zebras", "ran", "🦓"]])
    assert [a.shape for a in arrays] == [(3, 2, 32), (3, 3, 32)]
    assert np.array_equal(arrays[0], rep.embed([["the", "cat"]])[0])


def test_every_family_builds_at_tiny_and_runs_a_batch_of_three_by_seven():
    ids = torch.randint(5, 97, (3, 7))
    for family in FAMILIES:
        model = build_model(family, "tiny", vocab_size=97, seed=0).eval()
        again = build_model(family, "tiny", vocab_size=97, seed=0)
        assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))
        with torch.no_grad():
            logits = model(input_ids=ids).logits if family != "bert" else model(input_ids=ids).prediction_logits
        assert logits.shape == (3, 7, 97), family
    assert type(build_model("gpt", "tiny", vocab_size=97)).__name__ == "OpenAIGPTLMHeadModel"


def test_the_small_preset_is_about_three_million_non_embedding_parameters():
    model = build_model("bert-mlm", "small", vocab_size=300)
    H, I, L = 256, 1024, 4
    per_layer = 4 * (H * H + H) + 2 * H + (H * I + I) + (I * H + H) + 2 * H  # attention, 2 LayerNorms, feed-forward
    assert non_embedding_parameters(model.base_model) == L * per_layer == 3_159_040


def test_a_sentence_longer_than_the_positions_is_embedded_in_overlapping_windows(bert_folder, hand_tokenizer):
    folder, model = bert_folder  # 16 positions: 14 pieces a window besides [CLS] and [SEP]
    rep = TransformerRepresentation.load(folder)
    words = (["the", "cats", "sat", "on", "a", "mat", ".", "unbelievable", "!", "a", "doggy"] * 3)[:31]
    sizes = [len(p) for p in rep.encode(words).pieces]
    windows = rep.windows(0, rep.encode(words))
    # by hand: each window as many words as fit in 14 pieces, the next starting half-way through it
    expected, start = [], 0
    while True:
        end, used = start, 0
        while end < len(words) and used + sizes[end] <= 14:
            used, end = used + sizes[end], end + 1
        expected.append((start, end))
        if end == len(words):
            break
        start = max(start + 1, start + (end - start) // 2)
    assert windows == expected and len(windows) > 2
    array = rep.embed([words])[0]
    assert array.shape == (3, len(words), 32)
    for word in range(len(words)):
        context = {w: min(word - s, e - 1 - word) for w, (s, e) in enumerate(windows) if s <= word < e}
        chosen = max(context, key=lambda w: (context[w], -w))
        s, e = windows[chosen]
        ids = hand_tokenizer(words[s:e], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():  # the oracle: the HF model's own hidden states on that window alone
            hidden = torch.stack(model.bert(input_ids=ids["input_ids"], output_hidden_states=True).hidden_states)[:, 0]
        positions = [p for p, w in enumerate(ids.word_ids()) if w == word - s]
        np.testing.assert_allclose(array[:, word], hidden[:, positions].mean(1).numpy(), rtol=1e-5, atol=1e-6)
    # the same in any batch, and a word's vector comes from a window where it has context on both sides
    assert np.array_equal(rep.embed([["a", "mat"], words, ["x"]])[1], array)
    middle = len(words) // 2
    s, e = windows[max(range(len(windows)), key=lambda w: min(middle - windows[w][0], windows[w][1] - 1 - middle))]
    assert min(middle - s, e - 1 - middle) >= (e - s) // 4


def test_embedder_load_and_elmokit_embed_take_a_transformer_folder(bert_folder, tmp_path):
    import h5py

    from elmokit import Embedder
    from elmokit.cli.main import main

    folder, _ = bert_folder
    sentences = [["the", "dog", "sat"], ["a", "cat", "ran", "far", "."]]
    embedder = Embedder.load(folder, pooling="first")
    direct = TransformerRepresentation.load(folder, pooling="first")
    assert isinstance(embedder, TransformerRepresentation) and embedder.pooling == "first"
    for got, expected in zip(embedder.embed(sentences), direct.embed(sentences)):
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="no stateful, warm-state or bf16 mode"):
        Embedder.load(folder, precision="bf16")
    (tmp_path / "in.txt").write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.h5"), "--all", "--model", str(folder)]) == 0
    mean = TransformerRepresentation.load(folder).embed(sentences)  # the command's pooling: mean
    with h5py.File(tmp_path / "out.h5", "r") as h5:
        for i, expected in enumerate(mean):
            np.testing.assert_allclose(h5[str(i)][()], expected, rtol=1e-6, atol=1e-6)


def test_an_xlnet_folder_has_no_position_limit_and_embeds_a_long_sentence_in_one_pass(tmp_path, hand_tokenizer):
    """XLNet's positions are relative (its config says max_position_embeddings = -1): no windows, and the
    vectors are the model's own hidden states (one-piece words, so pooling is the identity)."""
    model = build_model("xlnet", preset("tiny"), vocab_size=len(hand_tokenizer), seed=5).eval()
    model.save_pretrained(str(tmp_path))
    hand_tokenizer.save_pretrained(str(tmp_path))
    rep = TransformerRepresentation.load(tmp_path)
    assert rep.max_pieces is None
    words = ["the", "cat", "sat", "on", "a", "mat", "."] * 30  # 210 words: more than the tiny preset's 128 positions
    vectors = rep.embed([words])[0]
    encoded = hand_tokenizer(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        hidden = torch.stack(rep.model(**encoded, output_hidden_states=True).hidden_states)[:, 0].numpy()
    positions = [t for t, w in enumerate(encoded.word_ids(0)) if w is not None]
    assert vectors.shape == (rep.num_layers, len(words), 32) and len(positions) == len(words)
    np.testing.assert_allclose(vectors, hidden[:, positions], rtol=1e-5, atol=1e-5)


def test_an_encoder_decoder_folder_is_read_through_its_encoder(tmp_path, hand_tokenizer):
    """MASS's BART folder: the vectors are the encoder's hidden states (embedding output + each encoder block)."""
    model = build_model("mass", preset("tiny"), vocab_size=len(hand_tokenizer), seed=2).eval()
    model.save_pretrained(str(tmp_path))
    hand_tokenizer.save_pretrained(str(tmp_path))
    rep = TransformerRepresentation.load(tmp_path)
    words = ["the", "cat", "sat", "on", "a", "mat", "."]
    vectors = rep.embed([words])[0]
    encoded = hand_tokenizer(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        hidden = torch.stack(model.get_encoder()(input_ids=encoded["input_ids"], output_hidden_states=True)
                             .hidden_states)[:, 0].numpy()
    positions = [t for t, w in enumerate(encoded.word_ids(0)) if w is not None]
    assert vectors.shape == (3, len(words), 32)
    np.testing.assert_allclose(vectors, hidden[:, positions], rtol=1e-5, atol=1e-5)


def test_a_transformer_folder_holding_one_nan_is_refused_at_load_naming_file_and_tensor(bert_folder, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from elmokit.formats.checks import NonFiniteFile
    from elmokit.transfer.finetune import load_base

    folder = tmp_path / "bert"
    shutil.copytree(bert_folder[0], folder)
    weights = folder / "model.safetensors"
    tensors = load_file(str(weights))
    name = next(n for n in sorted(tensors) if n.endswith("word_embeddings.weight"))
    tensors[name][4, 1] = float("nan")
    save_file(tensors, str(weights), metadata={"format": "pt"})
    for load in (lambda: load_representation({"kind": "transformer", "path": str(folder)}), lambda: load_base(folder)):
        with pytest.raises(NonFiniteFile) as caught:
            load()
        assert str(caught.value).startswith(f"{weights}: tensor '") and "word_embeddings.weight' holds 1 non-finite value " \
            "(first: nan at (4, 1))" in str(caught.value)
