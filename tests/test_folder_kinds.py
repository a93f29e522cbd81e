"""One loader: every folder elmokit writes says what it is, and the one registry (elmokit.representation) loads it
for ``Embedder.load(DIR)``, ``--model DIR`` and ``load_representation``; ``convert`` on another folder says what it is.

The configs are written by the real config classes of each writer, so a sniffer that drifts from its writer fails here."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch

from elmokit import Embedder, load_original, save_native
from elmokit.cli.main import main
from elmokit.io import write_output_record
from elmokit.representation import (
    FOLDER_KINDS,
    REPRESENTATION_KINDS,
    RepresentationError,
    folder_spec,
    identify_folder,
    load_representation,
    resolve,
    spec_from_flags,
)
from elmokit.static.vectors import StaticVectors
from elmokit.tasks.classifier import ClassifierConfig
from elmokit.tasks.tagger.model import TaggerConfig
from elmokit.transfer.cove import PRESETS, CoveConfig, CoveModel, CoveRepresentation, save_cove_model
from elmokit.transfer.ulmfit import ULMFiTConfig

torch.set_num_threads(1)
WORDS = ["the", "cat", "sat", "on", "a", "mat", "."]
TAGGER = TaggerConfig(elmo_layers=3, elmo_dim=10)
SENTENCES = [["the", "cat", "sat", "on", "a", "mat", "."], ["a", "zebra"], ["mat"]]


def run_cli(capsys, *args):
    try:
        status = main([str(a) for a in args])
    except SystemExit as stop:
        status = stop.code
    return status, capsys.readouterr().err


@pytest.fixture
def cove(tmp_path):
    """(folder, the in-memory CoVe model it was saved from): E 5, H 8 (vectors 16 wide)."""
    torch.manual_seed(0)
    model = CoveModel(CoveConfig(input_dim=5, target_vocab_size=6, **PRESETS["tiny"]), torch.randn(len(WORDS), 5)).eval()
    folder = save_cove_model(tmp_path / "cove", model, WORDS, ["<pad>", "<unk>", "<s>", "</s>", "x", "y"])
    return folder, model


def _config_folder(path, config: dict):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


def test_the_lazy_registry_names_loaders_that_exist_and_every_folder_kind_maps_to_one():
    """The loaders are strings resolved at load time (the representations layer imports nothing above it): a typo
    would only show when that kind is loaded, so resolve each here."""
    for kind in REPRESENTATION_KINDS.values():
        module = kind.loader.partition(":")[0]
        assert module.startswith("elmokit.") and callable(resolve(kind.loader)), kind.loader
    assert {k.spec_kind for k in FOLDER_KINDS.values()} - {None} <= set(REPRESENTATION_KINDS)
    with pytest.raises(AttributeError):
        resolve("elmokit.transfer.cove:NoSuchClass.load")


def test_every_writer_s_folder_is_identified_by_its_own_files(tmp_path, tiny_original, cove):
    save_native(load_original(*tiny_original[:2]), tmp_path / "native")
    StaticVectors(WORDS, np.ones((len(WORDS), 3), np.float32)).save_folder(tmp_path / "static")
    _config_folder(tmp_path / "cove_run", CoveConfig(input_dim=5, **PRESETS["tiny"]).to_dict())
    folders = {
        "native": "elmo",
        "orig": "elmo",  # options.json + weights.hdf5
        "static": "static",
        "cove": "cove",
        "cove_run": "cove",
        _config_folder(tmp_path / "bert", {"model_type": "bert", "hidden_size": 8}).name: "transformer",
        _config_folder(tmp_path / "tagger", TAGGER.to_dict()).name: "tagger",
        _config_folder(tmp_path / "clf", ClassifierConfig(num_labels=2, vocab_size=3).to_dict()).name: "classifier",
        _config_folder(tmp_path / "ulmfit", ULMFiTConfig(bilm={}, num_labels=2).to_dict()).name: "ulmfit",
    }
    for name, file in (("ft_clf", "finetune.json"), ("ft_tag", "finetune_tagger.json")):
        (tmp_path / name).mkdir()
        (tmp_path / name / file).write_text("{}", encoding="utf-8")
    folders |= {"ft_clf": "finetuned-classifier", "ft_tag": "finetuned-tagger"}
    assert {name: identify_folder(tmp_path / name).name for name in folders} == folders
    assert set(folders.values()) == set(FOLDER_KINDS)  # every kind is exercised
    (tmp_path / "empty").mkdir()
    assert identify_folder(tmp_path / "empty") is None and identify_folder("default") is None
    assert identify_folder(tmp_path / "nowhere") is None


def test_the_output_record_s_artifact_says_what_a_folder_is_first(tmp_path, tiny_original):
    save_native(load_original(*tiny_original[:2]), tmp_path / "native")
    assert identify_folder(tmp_path / "native").name == "elmo"
    write_output_record(tmp_path / "native", command="tag train", artifact="tagger")
    assert identify_folder(tmp_path / "native").name == "tagger"
    write_output_record(tmp_path / "native", command="train", artifact="some-future-kind")  # unknown: read the files
    assert identify_folder(tmp_path / "native").name == "elmo"


def test_specs_of_each_kind_of_folder(tmp_path, cove):
    folder, _ = cove
    assert folder_spec(folder) == {"kind": "cove", "path": str(folder.resolve())}
    assert spec_from_flags(model=str(folder)) == {"kind": "cove", "path": str(folder.resolve())}
    StaticVectors(WORDS, np.ones((len(WORDS), 3), np.float32)).save_folder(tmp_path / "static")
    assert spec_from_flags(model=str(tmp_path / "static")) == {"kind": "vectors", "path": str((tmp_path / "static").resolve())}
    # `elmokit pretrain`'s run folder: the transformers config at the top, the exported model in model/
    run = _config_folder(tmp_path / "pretrain", {"model_type": "bert"})
    _config_folder(run / "model", {"model_type": "bert"})
    assert folder_spec(run) == {"kind": "transformer", "path": str((run / "model").resolve())}
    (tmp_path / "ft").mkdir()
    (tmp_path / "ft" / "finetune.json").write_text("{}", encoding="utf-8")
    assert folder_spec(tmp_path / "ft") == {"kind": "transformer", "path": str((tmp_path / "ft" / "model").resolve())}
    with pytest.raises(RepresentationError, match="initial-state applies to ELMo models, not to a CoVe"):
        spec_from_flags(model=str(folder), initial_state="warm")


def test_a_training_run_folder_loads_its_exported_model(tmp_path, tiny_original):
    bilm = load_original(*tiny_original[:2])
    run = _config_folder(tmp_path / "run", bilm.config.to_dict())  # `elmokit train`: the config at the top,
    save_native(bilm, run / "model")  # the model in model/ at the end
    assert identify_folder(run).name == "elmo"
    assert folder_spec(run) == {"kind": "elmo", "model": str((run / "model").resolve())}
    oracle = Embedder(bilm).embed(SENTENCES)
    for loaded in (Embedder.load(run), load_representation(spec_from_flags(model=str(run)))):
        assert loaded.name == "elmo:run"
        for got, want in zip(loaded.embed(SENTENCES), oracle):
            np.testing.assert_array_equal(got, want)


def test_embedder_load_and_load_representation_read_a_cove_folder_as_the_model_it_was_saved_from(cove):
    folder, model = cove
    oracle = CoveRepresentation(model, WORDS).embed(SENTENCES)  # the in-memory model: no loader involved
    loaded = Embedder.load(folder)
    assert isinstance(loaded, CoveRepresentation) and (loaded.num_layers, loaded.dim) == (1, 16)
    for got, want in zip(loaded.embed(SENTENCES), oracle):
        np.testing.assert_array_equal(got, want)
    both = Embedder.load(folder, mode="glove_cove", batch_size=2)
    assert both.dim == 21 and both.batch_size == 2
    np.testing.assert_array_equal(both.embed(SENTENCES)[1][0, :, 5:], oracle[1][0])
    via_spec = load_representation(spec_from_flags(model=str(folder)))
    np.testing.assert_array_equal(via_spec.embed(SENTENCES)[0], oracle[0])
    with pytest.raises(RepresentationError, match="CoVe MT model .* has no stateful, warm-state or bf16 mode"):
        Embedder.load(folder, precision="bf16")


def test_embedder_load_reads_a_static_table_folder_and_refuses_a_tagger_saying_what_to_do(tmp_path):
    vectors = np.arange(len(WORDS) * 3, dtype=np.float32).reshape(len(WORDS), 3)
    StaticVectors(WORDS, vectors).save_folder(tmp_path / "static")
    table = Embedder.load(tmp_path / "static")
    assert isinstance(table, StaticVectors)
    np.testing.assert_array_equal(table.embed([["mat", "the"]])[0][0], vectors[[5, 0]])
    _config_folder(tmp_path / "tagger", TAGGER.to_dict())
    with pytest.raises(RepresentationError, match=r"a sequence tagger .*not a representation; tag text with `elmokit tag "
                                                   r"predict --tagger DIR`"):
        Embedder.load(tmp_path / "tagger")


def test_model_flag_embeds_a_file_with_a_cove_folder(tmp_path, capsys, cove):
    folder, model = cove
    text = tmp_path / "in.txt"
    text.write_text("".join(" ".join(s) + "\n" for s in SENTENCES), encoding="utf-8")
    status, err = run_cli(capsys, "embed", text, tmp_path / "out.hdf5", "--model", folder, "--batch-size", 2)
    assert status == 0, err
    oracle = CoveRepresentation(model, WORDS).embed(SENTENCES)
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        for i, want in enumerate(oracle):
            np.testing.assert_array_equal(f[str(i)][...], want)


def test_model_flag_on_a_tagger_folder_is_one_line_naming_the_folder(tmp_path, capsys):
    tagger = _config_folder(tmp_path / "tagger", TAGGER.to_dict())
    text = tmp_path / "in.txt"
    text.write_text("a cat\n", encoding="utf-8")
    status, err = run_cli(capsys, "embed", text, tmp_path / "out.hdf5", "--model", tagger)
    assert status == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and str(tagger) in lines[0] and "a sequence tagger" in lines[0], err
    assert not (tmp_path / "out.hdf5").exists()


@pytest.mark.parametrize("kind", ["cove", "tagger", "static"])
def test_convert_on_a_folder_that_is_not_elmo_says_what_it_is_and_what_to_do(tmp_path, capsys, cove, kind):
    if kind == "cove":
        source, what, instead = cove[0], "a CoVe MT model", "`--model DIR` and `Embedder.load(DIR)` read it"
    elif kind == "tagger":
        source, what, instead = _config_folder(tmp_path / "tagger", TAGGER.to_dict()), "a sequence tagger", \
            "`elmokit tag predict --tagger DIR`"
    else:
        source = StaticVectors(WORDS, np.ones((len(WORDS), 3), np.float32)).save_folder(tmp_path / "static")
        what, instead = "a static word-vector table", "`--model DIR`"
    status, err = run_cli(capsys, "convert", source, tmp_path / "out")
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, err
    assert what in lines[0] and "not an ELMo model" in lines[0] and instead in lines[0]
    assert not (tmp_path / "out").exists()


def test_convert_still_converts_an_elmo_folder(tmp_path, capsys, tiny_original):
    save_native(load_original(*tiny_original[:2]), tmp_path / "native")
    status, err = run_cli(capsys, "convert", tmp_path / "native", tmp_path / "orig_again")
    assert status == 0, err
    assert (tmp_path / "orig_again" / "options.json").is_file()
