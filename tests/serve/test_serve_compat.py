"""Compatibility with text-embeddings-inference and OpenAI conventions, route by route: the root
route, /embed_all's shape, truncation_direction, dimensions, prompt_name, OpenAI's statuses and
routes, 2048 inputs in batches, HEAD, Retry-After, TCP_NODELAY and the shortest float32 form."""

from __future__ import annotations

import re
import socket
import statistics
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
httpx = pytest.importorskip("httpx", reason="needs httpx")

from serve_testkit import Recording, floats, running  # noqa: E402

from elmokit.serve.batcher import BatchCost, Batcher  # noqa: E402
from elmokit.serve.config import ServeConfig  # noqa: E402
from elmokit.serve.server import bind  # noqa: E402


def unit_mean(array: np.ndarray) -> np.ndarray:
    v = array[-1].astype(np.float64).mean(axis=0)
    return v / np.linalg.norm(v)


def test_the_root_route_is_embed(server, oracle):
    root = server.client.post("/", json={"inputs": ["the bank", "a loan"]})
    assert root.status_code == 200
    assert root.json() == server.client.post("/embed", json={"inputs": ["the bank", "a loan"]}).json()
    np.testing.assert_allclose(root.json()[1], unit_mean(oracle.embed([["a", "loan"]])[0]), rtol=1e-5, atol=1e-6)


def test_truncation_direction_left_keeps_the_last_tokens(server_embedder, oracle):
    with running(server_embedder, ServeConfig(max_input_tokens=3)) as server:
        for route in ("/embed_all", "/v1/elmo"):
            for direction, kept in (("Left", ["c", "d", "e"]), ("left", ["c", "d", "e"]), ("Right", ["a", "b", "c"])):
                body = {"inputs": "a b c d e", "truncate": True, "truncation_direction": direction}
                got = server.client.post(route, json=body).json()
                vectors = floats(got[0] if route == "/embed_all" else got["data"][0]["layers"][-1])
                assert np.array_equal(vectors, oracle.embed([kept])[0][-1]), (route, direction)


def test_dimensions_and_prompt_name_are_answered_as_tei_does(server):
    assert server.client.post("/embed", json={"inputs": "a", "dimensions": 10}).status_code == 200  # the model's own
    for body in ({"inputs": "a", "dimensions": 4}, {"inputs": "a", "prompt_name": "query"}):
        response = server.client.post("/embed", json=body)
        assert response.status_code == 422 and response.json()["error_type"] == "validation", response.text
    assert server.client.post("/embed_all", json={"inputs": "a", "prompt_name": "query"}).status_code == 422
    openai = server.client.post("/v1/embeddings", json={"input": "a", "dimensions": 4})
    assert openai.status_code == 400 and openai.json()["error"]["param"] == "dimensions"


def test_openai_context_length_is_a_400_with_a_hint_this_route_honours(server_embedder):
    with running(server_embedder, ServeConfig(max_input_tokens=3)) as server:
        for path in ("/v1/embeddings", "/embeddings"):
            response = server.client.post(path, json={"input": ["a", "a b c d"]})
            assert response.status_code == 400
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == "context_length_exceeded"
            assert "truncate" not in error["message"].replace("does not truncate", "") and "3 tokens" in error["message"]
        tei = server.client.post("/embed", json={"inputs": "a b c d"})
        assert tei.status_code == 422 and "truncate: true" in tei.json()["error"]


def test_openai_models_embeddings_alias_and_head_health(server, oracle):
    models = server.client.get("/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == [oracle.name]
    assert models["data"][0]["object"] == "model"
    assert server.client.get(f"/v1/models/{oracle.name}").json()["id"] == oracle.name
    missing = server.client.get("/v1/models/gpt-4")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    alias = server.client.post("/embeddings", json={"input": "the bank"}).json()
    assert alias == server.client.post("/v1/embeddings", json={"input": "the bank"}).json()
    head = server.client.head("/health")
    assert head.status_code == 200 and head.content == b""


def test_2048_inputs_are_answered_in_batches_of_the_batchers_size(server_embedder, oracle):
    recording = Recording(server_embedder)
    texts = [f"w{i % 7} the bank" for i in range(2048)]  # 3 tokens each
    with running(recording, ServeConfig(max_batch_tokens=600)) as server:
        response = server.client.post("/v1/embeddings", json={"input": texts})
        assert server.client.post("/v1/embeddings", json={"input": texts + ["one more"]}).status_code == 400
    data = response.json()["data"]
    assert [d["index"] for d in data] == list(range(2048))
    assert max(recording.batches) <= 200 and sum(recording.batches) == 2048 and len(recording.batches) >= 11
    for i in (0, 1, 2047):
        np.testing.assert_allclose(data[i]["embedding"], unit_mean(oracle.embed([texts[i].split()])[0]), rtol=1e-5,
                                   atol=1e-6)


def test_retry_after_comes_from_a_fitted_batch_cost_and_is_at_most_a_minute():
    cost = BatchCost()
    for tokens, seconds in ((1, 0.0501), (10, 0.051), (4000, 0.45), (2000, 0.25)) * 4:  # 0.05 s + 0.0001 s a token
        cost.observe(tokens, seconds)
    a, b = cost.fit()
    assert a == pytest.approx(0.05, rel=1e-3) and b == pytest.approx(1e-4, rel=1e-3)

    class Idle:
        name, num_layers, dim = "idle", 1, 1

        def embed(self, sentences):
            return [np.zeros((1, len(s), 1), np.float32) for s in sentences]

    batcher = Batcher(Idle(), max_batch_tokens=4096, max_queue=1000)  # never started: the queue stays
    batcher.cost = cost
    for _ in range(256):  # 256 requests of 70 tokens: ~18 000 tokens, 5 batches
        batcher.submit([["w"] * 70])
    assert batcher.retry_after() == int(np.ceil(5 * 0.05 + 256 * 70 * 1e-4))  # 3 s, where an average of
    for _ in range(600):  # seconds per token of small batches said 900
        cost.observe(1, 0.5)
    assert batcher.retry_after() == 60


def test_keep_alive_requests_are_not_delayed_by_nagle(server):
    sock = bind("127.0.0.1", 0)
    assert sock.proto == socket.IPPROTO_TCP and sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    sock.close()
    with httpx.Client(base_url=server.url, timeout=10) as client:  # one connection, kept alive
        client.post("/embed", json={"inputs": "warm"})
        times = []
        for _ in range(12):
            started = time.perf_counter()
            assert client.post("/embed", json={"inputs": "the bank"}).status_code == 200
            times.append(time.perf_counter() - started)
    assert statistics.median(times) < 0.03, times  # Nagle + delayed ACK: ~40 ms each


def test_floats_are_written_in_the_shortest_float32_form(server, oracle):
    text = server.client.post("/embed_all", json={"inputs": "the bank of the river"}).text
    numbers = re.findall(r"-?\d[\d.e+-]*", text)
    values = np.asarray(numbers, dtype=np.float64).astype(np.float32)
    assert [str(v) for v in values] == numbers  # numpy's str of a float32 is its shortest round-trip form
    assert max(len(n.lstrip("-").replace(".", "").split("e")[0].lstrip("0")) for n in numbers) <= 9
    assert np.array_equal(floats([[float(x) for x in numbers]]).reshape(-1),
                          oracle.embed([["the", "bank", "of", "the", "river"]])[0][-1].reshape(-1))
