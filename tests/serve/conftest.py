"""Fixtures for the server tests; helpers live in serve_testkit.py. Each test module skips itself
(``pytest.importorskip``) where the serve extra is not installed."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """The tiny model's batches run in the server's worker thread while the event loop and the test's
    clients run beside it; on a small shared CPU, torch's intra-op threads then spin against them
    (measured: a 32-sentence batch 0.6 s with 2 threads, 0.03 s with 1). One thread keeps these
    tests fast; numbers are the same (the oracle embeds under the same setting)."""
    import torch
    from serve_testkit import join_stopping

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    join_stopping()  # every test server has stopped
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    from serve_testkit import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("serve") / "tiny")


@pytest.fixture(scope="session")
def oracle(model_dir):
    """An Embedder of its own (never the server's): what a client's vectors must equal."""
    from elmokit import Embedder

    return Embedder.load(str(model_dir))


@pytest.fixture(scope="session")
def server_embedder(model_dir):
    from elmokit import Embedder

    return Embedder.load(str(model_dir))


@pytest.fixture(scope="module")
def server(server_embedder):
    """A server with the default limits, shared by a module's tests."""
    from serve_testkit import running

    with running(server_embedder) as s:
        yield s
