"""Fixtures shared by the tests; helper functions live in testkit.py (importable by name)."""

import os

import pytest
from testkit import random_tf_weights, tiny_options, write_original_files


@pytest.fixture
def tiny_original(tmp_path):
    """(options_path, weights_path, options, weights) of a random tiny model."""
    options = tiny_options()
    weights = random_tf_weights(options)
    return (*write_original_files(tmp_path / "orig", options, weights), options, weights)


@pytest.fixture
def model_dir(tmp_path, tiny_original):
    """The tiny original-format model saved as a native folder."""
    from elmokit import load_original, save_native

    save_native(load_original(*tiny_original[:2]), tmp_path / "model")
    return tmp_path / "model"



@pytest.fixture(autouse=True)
def _one_torch_thread_per_worker():
    """Under pytest-xdist the workers already fill the cores: each test runs on one torch thread, so that two
    workers' OpenMP pools never spin against each other (a command run in-process may have set more)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
    yield
