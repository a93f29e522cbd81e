"""Finite or refused: every table a command reads is checked at load (vector rows, config settings), naming
the file and the row or field; nothing non-finite is ever written."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch

from elmokit.cli.main import main
from elmokit.formats.checks import NonFiniteWeights
from elmokit.formats.word2vec import VectorFileError, read_word2vec, write_word2vec

torch.set_num_threads(1)

NER = "John\tB-PER\nlives\tO\nin\tO\nNew\tB-LOC\nYork\tI-LOC\n\nMary\tB-PER\nsaw\tO\nParis\tB-LOC\n\n"


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def _nan_vectors(path, *, header: bool = True):
    """Five words of dimension 3; the fourth (``York``, line 5 with the header) holds a NaN."""
    rows = ["John 0.1 0.2 0.3", "lives 0.3 -0.1 0.2", "New 0.5 0.5 0.1", "York 0.2 nan 0.4", "Paris 1 2 3"]
    path.write_text(("5 3\n" if header else "") + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("header", [True, False])
def test_a_text_vector_file_with_a_nan_row_is_refused_naming_file_line_and_word(tmp_path, header):
    path = _nan_vectors(tmp_path / "v.txt", header=header)
    with pytest.raises(VectorFileError) as caught:
        read_word2vec(path)
    line = 5 if header else 4
    assert str(caught.value).startswith(f"{path}:{line}: the vector of 'York' holds nan (value 2 of 3)")


def test_a_binary_vector_file_with_an_infinite_value_is_refused_naming_the_word(tmp_path):
    path = tmp_path / "v.bin"
    rows = [("a", [1.0, 2.0]), ("b", [float("inf"), 0.0])]
    path.write_bytes(b"2 2\n" + b"".join(w.encode() + b" " + struct.pack("<2f", *v) + b"\n" for w, v in rows))
    with pytest.raises(VectorFileError, match=r"v\.bin: word #2: the vector of 'b' holds inf \(value 1 of 2\)"):
        read_word2vec(path)


def test_tag_train_with_a_nan_vector_row_exits_2_naming_the_file_and_row(tmp_path, capsys):
    (tmp_path / "ner.conll").write_text(NER)
    vectors = _nan_vectors(tmp_path / "glove.txt")
    code = main(["tag", "train", "--train", str(tmp_path / "ner.conll"), "--dev", str(tmp_path / "ner.conll"),
                 "--format", "conll", "--vectors", str(vectors), "--epochs", "1", "--word-dim", "3", "--hidden-dim", "2",
                 "--out", str(tmp_path / "tagger")])
    assert code == 2
    assert f"{vectors}:5: the vector of 'York' holds nan" in _one_line_error(capsys)
    assert not (tmp_path / "tagger").exists()


def test_cove_train_with_a_nan_vector_row_exits_2_naming_the_file_and_row(tmp_path, capsys):
    (tmp_path / "en.txt").write_text("john lives in york\nmary saw paris\n")
    (tmp_path / "de.txt").write_text("john wohnt in york\nmary sah paris\n")
    vectors = _nan_vectors(tmp_path / "glove.txt")
    code = main(["cove", "train", "--src", str(tmp_path / "en.txt"), "--tgt", str(tmp_path / "de.txt"),
                 "--vectors", str(vectors), "--out", str(tmp_path / "run"), "--preset", "tiny", "--max-steps", "1",
                 "--batch-size", "2", "--threads", "1"])
    assert code == 2
    assert f"{vectors}:5: the vector of 'York' holds nan" in _one_line_error(capsys)


# ---- configs: an impossible setting is refused at load, naming the file and the field --------------------------


@pytest.mark.parametrize(("field", "value", "message"), [
    ("cell_clip", -1, "field cell_clip must be a finite number > 0, or null for no clipping; got -1"),
    ("proj_clip", -0.5, "field proj_clip must be a finite number > 0, or null for no clipping; got -0.5"),
    ("activation", "swish", "field activation must be 'relu' or 'tanh', got 'swish'"),
    ("n_layers", 0, "field n_layers must be an integer >= 1, got 0"),
])
def test_an_impossible_setting_in_config_json_is_refused_naming_file_and_field(model_dir, tmp_path, capsys, field, value,
                                                                                 message):
    from elmokit.elmo import Embedder
    from elmokit.formats import ModelFolderError

    config = json.loads((model_dir / "config.json").read_text())
    config[field] = value
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFolderError) as caught:
        Embedder.load(model_dir)
    assert str(caught.value) == f"{model_dir / 'config.json'}: {message}"
    (tmp_path / "in.txt").write_text("a b\n")
    assert main(["embed", "--model", str(model_dir), str(tmp_path / "in.txt"), str(tmp_path / "out.h5")]) == 2
    assert _one_line_error(capsys) == f"elmokit embed: error: {model_dir / 'config.json'}: {message}"
    assert not (tmp_path / "out.h5").exists()


def test_a_negative_clip_in_options_json_is_refused_naming_the_file(tiny_original):
    from elmokit.formats import WeightFileError, load_original

    options_path, weights_path, options, _ = tiny_original
    options["lstm"]["cell_clip"] = -1
    options_path.write_text(json.dumps(options))
    with pytest.raises(WeightFileError, match=f"^{options_path}: field cell_clip must be a finite number > 0"):
        load_original(options_path, weights_path)


# ---- writers: nothing non-finite is ever written -------------------------------------------------------------------


def test_the_native_writer_refuses_non_finite_weights_and_writes_nothing(tmp_path):
    from elmokit.bilm import BiLM, BiLMConfig
    from elmokit.formats import save_native

    bilm = BiLM(BiLMConfig(char_embedding_dim=3, filters=((1, 4), (2, 5)), n_highway=1, lstm_dim=7, projection_dim=5))
    with torch.no_grad():
        next(bilm.parameters())[0, 1] = float("nan")
    name = next(n for n, _ in bilm.named_parameters())
    with pytest.raises(NonFiniteWeights, match=rf"model\.safetensors: not written: tensor '{name}' holds 1 non-finite value"):
        save_native(bilm, tmp_path / "model")
    assert not (tmp_path / "model").exists()


def test_the_tagger_saver_refuses_non_finite_weights_and_keeps_the_earlier_tagger(tmp_path):
    from elmokit.tasks.tagger import SequenceTagger, TaggerConfig

    tagger = SequenceTagger(TaggerConfig(task="ner", elmo="none", word_dim=3, hidden_dim=2), ["a", "b"], ["B-X", "O"])
    out = tagger.save(tmp_path / "tagger")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with torch.no_grad():
        next(tagger.model.parameters()).fill_(float("inf"))
    with pytest.raises(NonFiniteWeights, match="not written"):
        tagger.save(out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_the_word2vec_writer_refuses_non_finite_vectors(tmp_path):
    with pytest.raises(NonFiniteWeights, match=r"v\.txt: not written: tensor 'vectors' holds 1 non-finite value"):
        write_word2vec(tmp_path / "v.txt", ["a", "b"], np.array([[1.0, 2.0], [np.nan, 0.0]], dtype=np.float32))
    assert not (tmp_path / "v.txt").exists()


def test_a_saved_tagger_or_classifier_holding_nan_is_refused_at_load(tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    from elmokit.formats.checks import NonFiniteFile
    from elmokit.tasks.classifier import Classifier

    data = tmp_path / "ner.conll"
    data.write_text(NER)
    (tmp_path / "train.tsv").write_text("pos\tgreat fun\nneg\tdull mess\n")
    assert main(["tag", "train", "--train", str(data), "--dev", str(data), "--format", "conll", "--no-elmo", "--epochs", "1",
                 "--word-dim", "3", "--hidden-dim", "2", "--out", str(tmp_path / "tagger")]) == 0
    assert main(["classify", "train", "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "train.tsv"),
                 "--no-elmo", "--epochs", "1", "--word-dim", "3", "--hidden-dim", "2", "--out", str(tmp_path / "clf")]) == 0
    for folder in (tmp_path / "tagger", tmp_path / "clf"):
        state = load_file(str(folder / "model.safetensors"))
        name = sorted(state)[0]
        state[name] = state[name].clone().fill_(float("nan"))
        save_file(state, str(folder / "model.safetensors"))
    capsys.readouterr()
    assert main(["tag", "predict", "--tagger", str(tmp_path / "tagger"), "--input", str(data), "--format", "conll",
                 "--out", str(tmp_path / "tagged.conll")]) == 2
    weights = tmp_path / "tagger" / "model.safetensors"
    assert f"{weights}: tensor " in _one_line_error(capsys) and not (tmp_path / "tagged.conll").exists()
    with pytest.raises(NonFiniteFile, match=r"clf/model\.safetensors: tensor '.+' holds \d+ non-finite values \(first: nan"):
        Classifier.load(tmp_path / "clf")
