"""One loader for every kind of representation (elmokit.representation), and one fingerprint."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from elmokit import Embedder, load_original, save_native
from elmokit.representation import (
    REPRESENTATION_KINDS,
    RepresentationError,
    fingerprint,
    load_representation,
    spec_from_flags,
)
from elmokit.static.subwords import SubwordTable
from elmokit.static.vectors import StaticVectors

torch.set_num_threads(1)
SENTENCES = [["The", "cat", "sat"], ["zebra"]]


@pytest.fixture
def native(tmp_path, tiny_original):
    folder = tmp_path / "native"
    save_native(load_original(*tiny_original[:2]), folder)
    return folder


def _table(tmp_path, name="v.txt", scale=1.0):
    words = ["The", "cat", "sat"]
    vectors = np.array([[1, 0, 2], [0, 1, 3], [5, -1, 0]], dtype=np.float32) * scale
    StaticVectors(words, vectors).save(tmp_path / name)
    return tmp_path / name, vectors


def test_the_table_has_one_entry_per_kind():
    assert sorted(REPRESENTATION_KINDS) == ["cove", "elmo", "elmo-original", "transformer", "vectors"]
    for kind, loader in REPRESENTATION_KINDS.items():
        assert loader.kind == kind and set(loader.path_fields) <= set(loader.fields) and callable(loader.load)


def test_each_kind_loads_and_embeds_as_the_direct_constructor(tmp_path, tiny_original, native):
    options_path, weights_path = tiny_original[:2]
    direct = Embedder.from_original(options_path, weights_path).embed(SENTENCES)
    original = load_representation({"kind": "elmo-original", "options_file": str(options_path),
                                     "weight_file": str(weights_path)})
    folder = load_representation({"kind": "elmo", "model": str(native)})
    for rep in (original, folder):
        assert isinstance(rep, Embedder) and (rep.num_layers, rep.dim) == (3, 10)  # 2 LSTM layers, 2 x projection 5
        for got, want in zip(rep.embed(SENTENCES), direct):
            np.testing.assert_array_equal(got, want)
    shipped = load_representation({"kind": "elmo", "model": "default"})
    assert shipped.name == "elmo:default"

    path, vectors = _table(tmp_path)
    table = load_representation({"kind": "vectors", "path": str(path)})
    assert isinstance(table, StaticVectors)
    got = table.embed([["cat", "The", "unseen"]])[0]  # (1, 3, 3): the rows written, zeros for the unknown word
    np.testing.assert_array_equal(got[0], np.stack([vectors[1], vectors[0], np.zeros(3, np.float32)]))

    assert load_representation({}) is None  # the baseline: no representation


def test_relative_paths_in_a_saved_spec_are_read_from_its_folder(tmp_path, native):
    rep = load_representation({"kind": "elmo", "model": native.name}, base=tmp_path)
    assert rep.dim == 10
    path, _ = _table(tmp_path)
    assert load_representation({"kind": "vectors", "path": path.name}, base=tmp_path).dim == 3


def test_options_reach_elmo_and_a_table_refuses_modes_it_lacks(tmp_path, native):
    rep = load_representation({"kind": "elmo", "model": str(native)}, batch_size=3, token_cache_size=0, stateful=True)
    assert (rep.batch_size, rep.stateful) == (3, True)
    path, _ = _table(tmp_path)
    with pytest.raises(RepresentationError, match="no stateful or bf16 mode"):
        load_representation({"kind": "vectors", "path": str(path)}, precision="bf16")
    with pytest.raises(TypeError, match="unexpected options"):
        load_representation({"kind": "vectors", "path": str(path)}, layers=2)


def test_unknown_kind_or_fields_give_one_clear_error():
    with pytest.raises(RepresentationError) as error:
        load_representation({"kind": "bert", "model": "x"}, source="runs/t/config.json")
    assert str(error.value) == ("runs/t/config.json: unknown representation kind 'bert'; known kinds: elmo, "
                                "elmo-original, vectors, transformer, cove (is this elmokit older than the file?)")
    with pytest.raises(RepresentationError, match="missing path"):
        load_representation({"kind": "vectors"})
    with pytest.raises(RepresentationError, match=r"unknown fields \['layer'\]"):
        load_representation({"kind": "elmo", "model": "default", "layer": 2})


def test_spec_from_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    path, _ = _table(tmp_path)
    assert spec_from_flags() == {"kind": "elmo", "model": "default"}
    assert spec_from_flags(default_model=None) == {}
    assert spec_from_flags(model="m", initial_state="warm") == {"kind": "elmo", "model": str(tmp_path / "m"),
                                                                 "initial_state": "warm"}
    assert spec_from_flags(options_file="o.json", weight_file="w.hdf5") == {
        "kind": "elmo-original", "options_file": str(tmp_path / "o.json"), "weight_file": str(tmp_path / "w.hdf5")}
    assert spec_from_flags(vectors="v.txt") == {"kind": "vectors", "path": str(path)}
    with pytest.raises(RepresentationError, match="go together"):
        spec_from_flags(options_file="o.json")
    with pytest.raises(RepresentationError, match="not --model and --vectors"):
        spec_from_flags(model="m", vectors="v.txt")
    with pytest.raises(RepresentationError, match="applies to ELMo models"):
        spec_from_flags(vectors="v.txt", initial_state="warm")
    with pytest.raises(FileNotFoundError, match="--vectors missing.txt: no such file or folder"):
        spec_from_flags(vectors="missing.txt")


def test_fingerprint_same_representation_same_string_other_weights_other_string(tmp_path, tiny_original, native):
    options_path, weights_path = tiny_original[:2]
    first, again = (Embedder.from_original(options_path, weights_path) for _ in range(2))
    assert fingerprint(first) == fingerprint(again)
    changed = Embedder.from_original(options_path, weights_path)
    with torch.no_grad():
        next(changed.bilm.parameters()).view(-1)[0] += 1e-3
    assert fingerprint(changed) != fingerprint(first)

    path, vectors = _table(tmp_path)
    assert fingerprint(StaticVectors.load(path)) == fingerprint(StaticVectors.load(path))
    other = vectors.copy()
    other[2, 1] += 1e-3
    base = StaticVectors(["The", "cat", "sat"], vectors)
    assert fingerprint(StaticVectors(["The", "cat", "sat"], other)) != fingerprint(base)
    assert fingerprint(StaticVectors(["The", "sat", "cat"], vectors)) != fingerprint(base)

    def fasttext(row):  # fastText: unseen words are built from n-gram rows, so they count too
        subwords = SubwordTable(min_n=3, max_n=4, bucket=11, bucket_ids=np.array([1, 5]),
                                vectors=np.array([[0, 0, 1], row], dtype=np.float32))
        return StaticVectors(["The", "cat", "sat"], vectors, subwords=subwords)

    assert fingerprint(fasttext([1, 2, 3])) == fingerprint(fasttext([1, 2, 3]))
    assert fingerprint(fasttext([1, 2, 3])) != fingerprint(fasttext([1, 2, 4]))

    class Fake:
        name, num_layers, dim = "fake", 1, 2

    with pytest.raises(TypeError, match="cannot fingerprint representation 'fake'"):
        fingerprint(Fake())


def test_cli_flag_conflicts_are_one_line_errors(tmp_path, capsys):
    from elmokit.cli.main import main

    (tmp_path / "t.conll").write_text("John\tB-PER\n\n", encoding="utf-8")
    path, _ = _table(tmp_path)
    code = main(["tag", "train", "--train", str(tmp_path / "t.conll"), "--dev", str(tmp_path / "t.conll"),
                 "--format", "conll", "--model", "default", "--vectors", str(path), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err == ("elmokit tag train: error: give one of --model, --options-file/--weight-file or "
                                 "--vectors, not --model and --vectors\n")
    assert not (tmp_path / "o").exists()


def test_a_classifier_saved_by_format_1_loads_with_its_representation_as_a_spec(tmp_path):
    from elmokit.tasks.classifier import ClassifierConfig

    old = {"num_labels": 2, "vocab_size": 5, "use_elmo": True, "elmo_layers": 3, "elmo_dim": 4, "word_dim": 3,
           "hidden_dim": 2, "dropout": 0.5, "mix_l2": 0.001, "format_version": 1}
    assert ClassifierConfig.from_dict({**old, "representation": "default"}).representation == {
        "kind": "elmo", "model": "default"}
    assert ClassifierConfig.from_dict({**old, "representation": None}).representation == {}  # original files
    assert json.loads(json.dumps(ClassifierConfig.from_dict({**old, "representation": None}).to_dict()))[
        "format_version"] == 2
