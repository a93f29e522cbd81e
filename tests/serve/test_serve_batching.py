"""Dynamic batching: concurrent clients share batches, and each gets exactly the vectors that
``Embedder.embed`` gives its input alone (np.array_equal, not allclose)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
httpx = pytest.importorskip("httpx", reason="needs httpx")

from serve_testkit import Gated, floats, random_texts, running  # noqa: E402

from elmokit.serve.batcher import Batcher, QueueFull, ShuttingDown  # noqa: E402
from elmokit.serve.config import ServeConfig  # noqa: E402


def test_concurrent_clients_get_the_vectors_of_their_input_alone(server_embedder, oracle):
    """20 async clients at once, 1 to 3 texts each, through /v1/elmo (every layer) and /embed_all. The
    first batch is held at a gate until every request is in, so the others share batches."""
    gated = Gated(server_embedder)
    requests = [random_texts(int(n), seed=i) for i, n in enumerate(np.random.default_rng(0).integers(1, 4, size=20))]
    with running(gated, ServeConfig(max_wait_ms=0, max_batch_tokens=150)) as server:

        def open_the_gate_when_all_wait():
            gated.entered.wait(20)
            deadline = time.monotonic() + 20
            while server.app.state.batcher.accepted < len(requests) and time.monotonic() < deadline:
                time.sleep(0.005)
            gated.release.set()

        opener = threading.Thread(target=open_the_gate_when_all_wait)
        opener.start()

        async def all_at_once():
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                return await asyncio.gather(*(
                    client.post("/v1/elmo" if i % 2 else "/embed_all", json={"inputs": texts, "return_tokens": True})
                    for i, texts in enumerate(requests)))

        responses = asyncio.run(all_at_once())
        opener.join(20)
    assert max(gated.calls) > 3  # one request has at most 3 texts: batches were shared
    assert sum(gated.calls) == sum(len(r) for r in requests)
    for i, (texts, response) in enumerate(zip(requests, responses)):
        assert response.status_code == 200, response.text
        for text, item in zip(texts, response.json()["data"] if i % 2 else response.json()):
            alone = oracle.embed([text.split()])[0]  # (L+1, n, dim)
            got = floats(item["layers"]) if i % 2 else floats(item["embeddings"])
            assert np.array_equal(got, alone if i % 2 else alone[-1]), text


def test_threads_through_the_openai_route_get_exact_base64_vectors(server_embedder, oracle):
    texts = random_texts(12, seed=99)
    with running(server_embedder, ServeConfig(max_wait_ms=20)) as server:
        def call(text):
            with httpx.Client(base_url=server.url, timeout=30) as client:
                return client.post("/v1/embeddings", json={"input": text, "encoding_format": "base64"}).json()

        with ThreadPoolExecutor(max_workers=6) as pool:
            bodies = list(pool.map(call, texts))
        pooled = floats(server.client.post("/embed", json={"inputs": texts}).json())
    import base64

    for text, body, together in zip(texts, bodies, pooled):
        vector = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
        alone = oracle.embed([text.split()])[0][-1].mean(axis=0)
        assert np.array_equal(vector, (alone / np.linalg.norm(alone)).astype(np.float32))  # same float32 steps
        assert np.array_equal(vector, together)  # alone, or in one request with 11 others


# ---- the Batcher on its own -----------------------------------------------------------------------


class Echo:
    """A representation whose output is checkable by eye: token i of a sentence -> [len(token), i]."""

    name, num_layers, dim = "echo", 1, 2

    def __init__(self):
        self.calls = []

    def embed(self, sentences):
        self.calls.append([list(s) for s in sentences])
        return [np.array([[[len(t), i] for i, t in enumerate(s)]], dtype=np.float32).reshape(1, len(s), 2)
                for s in sentences]


def test_batcher_gathers_waiting_requests_within_the_token_budget():
    echo = Echo()
    gate = Gated(echo)
    batcher = Batcher(gate, max_batch_tokens=5, max_wait_ms=0, max_queue=10).start()
    first = batcher.submit([["held"]])
    assert gate.entered.wait(5)
    futures = [batcher.submit([["a", "bb"]]), batcher.submit([["ccc"], ["d"]]), batcher.submit([["e", "f", "g"]])]
    gate.release.set()
    results = [f.result(5) for f in (first, *futures)]
    batcher.close(5)
    assert gate.calls == [1, 3, 1]  # 2 + 2 tokens fit in 5; the 3-token request waits for the next batch
    np.testing.assert_array_equal(results[2][0], [[[3, 0]]])
    np.testing.assert_array_equal(results[2][1], [[[1, 0]]])
    np.testing.assert_array_equal(results[3][0], [[[1, 0], [1, 1], [1, 2]]])


def test_a_batch_holds_at_most_max_batch_sentences_and_a_larger_request_runs_alone():
    echo = Echo()
    gate = Gated(echo)
    batcher = Batcher(gate, max_batch_sentences=3, max_wait_ms=0, max_queue=10).start()
    first = batcher.submit([["held"]])
    assert gate.entered.wait(5)
    sizes = (2, 1, 2, 5, 1, 1, 1)
    futures = [batcher.submit([[f"w{i}"] for i in range(n)]) for n in sizes]
    assert batcher.retry_after() >= 1
    gate.release.set()
    results = [f.result(5) for f in (first, *futures)]
    batcher.close(5)
    # 2 + 1 fit in 3; 2 then waits (2 + 5 > 3); 5 runs alone; 1 + 1 + 1
    assert gate.calls == [1, 3, 2, 5, 3]
    assert [len(r) for r in results[1:]] == list(sizes)
    np.testing.assert_array_equal(results[4][4], [[[2, 0]]])  # the 5-sentence request's last sentence, "w4"


def test_the_app_batches_at_most_the_representations_batch_size(server_embedder):
    from elmokit.serve.app import create_app

    assert create_app(server_embedder).state.batcher.max_batch_sentences == server_embedder.batch_size == 64
    assert create_app(Echo()).state.batcher.max_batch_sentences is None  # no batch_size: no sentence limit


def test_batcher_bounds_its_queue_and_drains_on_close():
    gate = Gated(Echo())
    batcher = Batcher(gate, max_wait_ms=0, max_queue=2).start()
    running_one = batcher.submit([["x"]])
    assert gate.entered.wait(5)
    waiting = [batcher.submit([["y"]]), batcher.submit([["z"]])]
    with pytest.raises(QueueFull, match="--max-queue 2") as full:
        batcher.submit([["w"]])
    assert full.value.retry_after >= 1
    closer = threading.Thread(target=batcher.close, args=(5,))
    closer.start()
    with pytest.raises(ShuttingDown):
        batcher.submit([["v"]])
    gate.release.set()
    closer.join(5)
    assert [f.result(0)[0][0, 0, 0] for f in (running_one, *waiting)] == [1, 1, 1]


def test_batcher_reports_model_failures_to_each_client_and_keeps_going():
    class Failing(Echo):
        def embed(self, sentences):
            if any("boom" in s for s in sentences):
                raise RuntimeError("boom")
            return super().embed(sentences)

    batcher = Batcher(Failing(), max_wait_ms=0).start()
    with pytest.raises(RuntimeError, match="boom"):
        batcher.submit([["boom"]]).result(5)
    assert batcher.submit([["fine"]]).result(5)[0].shape == (1, 1, 2)
    batcher.close(5)


def test_batcher_refuses_a_stateful_representation():
    class Stateful(Echo):
        stateful = True

    with pytest.raises(ValueError, match="stateful"):
        Batcher(Stateful())
