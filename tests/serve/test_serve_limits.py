"""Limits and errors as users of text-embeddings-inference and OpenAI clients meet them: the status,
the JSON shape of the route's server, and a message naming the limit or field."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
httpx = pytest.importorskip("httpx", reason="needs httpx")

from serve_testkit import Gated, Running, floats, metric, running  # noqa: E402

from elmokit.serve.app import create_app  # noqa: E402
from elmokit.serve.config import ServeConfig  # noqa: E402

JSON = {"content-type": "application/json"}


def tei_error(response, status: int, error_type: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type, body
    return body["error"]


def openai_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["code"] == code, body
    return body["error"]


@pytest.mark.parametrize("route", ["/embed", "/embed_all", "/v1/elmo"])
@pytest.mark.parametrize("body", [b"{not json", b"", b'{"inputs": 3}', b'{"inputs": [1, 2]}', b"[]", b'{"normalize": true}'])
def test_malformed_bodies_are_400_in_tei_style(server, route, body):
    message = tei_error(server.client.post(route, content=body, headers=JSON), 400, "validation")
    assert message


@pytest.mark.parametrize("inputs", [[], "", "   ", ["a b", "\t"]])
def test_empty_inputs_are_400(server, inputs):
    assert "inputs" in tei_error(server.client.post("/embed", json={"inputs": inputs}), 400, "empty")


def test_openai_errors_are_nested(server):
    error = openai_error(server.client.post("/v1/embeddings", content=b"{oops", headers=JSON), 400, "invalid_request")
    assert error["type"] == "invalid_request_error" and "JSON" in error["message"]
    openai_error(server.client.post("/v1/embeddings", json={"input": []}), 400, "empty")
    assert openai_error(server.client.post("/v1/embeddings", json={"input": [[1, 2, 3]]}), 400,
                        "token_ids_not_supported")["param"] == "input"
    openai_error(server.client.post("/v1/embeddings", json={"input": "a", "dimensions": 3}), 400, "invalid_dimensions")
    openai_error(server.client.post("/v1/embeddings", json={"input": "a", "encoding_format": "int8"}), 400, "invalid_request")


def test_unknown_routes_and_bad_layers(server):
    tei_error(server.client.get("/nowhere"), 404, "not_found")
    tei_error(server.client.get("/embed"), 405, "method_not_allowed")
    assert "3 layers" in tei_error(server.client.post("/embed", json={"inputs": "a", "layer": 3}), 400, "validation")
    tei_error(server.client.post("/v1/elmo", json={"inputs": "a", "tokens": [["a"]]}), 400, "validation")
    tei_error(server.client.post("/v1/elmo", json={"inputs": "a", "mix": [1.0]}), 400, "validation")
    tei_error(server.client.post("/v1/elmo", json={"inputs": "a", "mix": [1, 1, 1], "layers": [0]}), 400, "validation")
    tei_error(server.client.post("/v1/elmo", content=b'{"inputs": "a", "mix": [NaN, 1, 1]}', headers=JSON), 400, "validation")
    tei_error(server.client.post("/v1/elmo", json={"tokens": []}), 400, "empty")


def test_any_text_json_can_carry_is_answered(server):
    """A lone surrogate is valid JSON: it is tokenised, embedded (the model drops it, as the reference
    does) and echoed back escaped, never a 500."""
    body = b'{"inputs": "a \\ud800 \\u00fcber"}'
    tokens = server.client.post("/tokenize", content=body, headers=JSON).json()[0]
    assert [t["text"] for t in tokens] == ["a", "\ud800", "\u00fcber"]
    assert server.client.post("/embed_all", content=body.replace(b"}", b', "return_tokens": true}'),
                              headers=JSON).json()[0]["tokens"] == ["a", "\ud800", "\u00fcber"]


def test_body_size_too_many_inputs_and_tokens(server_embedder, oracle):
    config = ServeConfig(max_body_bytes=300, max_inputs=2, max_input_tokens=4)
    with running(server_embedder, config) as server:
        big = {"inputs": "word " * 100}
        assert "--max-body-bytes" in tei_error(server.client.post("/embed", json=big), 413, "payload_too_large")
        openai_error(server.client.post("/v1/embeddings", json={"input": "word " * 100}), 413, "payload_too_large")

        def chunks():  # no Content-Length: the limit is counted while reading
            for _ in range(10):
                yield b'{"inputs": "' + b"w " * 30 + b'"'

        tei_error(server.client.post("/embed", content=chunks(), headers=JSON), 413, "payload_too_large")
        message = tei_error(server.client.post("/embed", json={"inputs": ["a", "b", "c"]}), 422, "validation")
        assert "--max-inputs" in message and "2" in message
        message = tei_error(server.client.post("/embed_all", json={"inputs": "a b c d e"}), 422, "validation")
        assert "--max-input-tokens" in message and "4" in message
        assert openai_error(server.client.post("/v1/embeddings", json={"input": ["a", "b", "c"]}), 400,
                            "too_many_inputs")["param"] == "input"
        cut = server.client.post("/embed_all", json={"inputs": "a b c d e", "truncate": True,
                                                     "return_tokens": True}).json()[0]
        assert cut["tokens"] == ["a", "b", "c", "d"]
        assert np.array_equal(floats(cut["embeddings"]), oracle.embed([["a", "b", "c", "d"]])[0][-1])


def test_a_full_queue_answers_429_with_retry_after(server_embedder):
    gated = Gated(server_embedder)
    config = ServeConfig(max_queue=1, max_wait_ms=0)
    with running(gated, config) as server:
        results = {}

        def call(key):
            with httpx.Client(base_url=server.url, timeout=20) as client:
                results[key] = client.post("/embed", json={"inputs": f"request {key}"})

        first = threading.Thread(target=call, args=("first",))
        first.start()
        assert gated.entered.wait(10)  # the worker holds the first request at the gate
        second = threading.Thread(target=call, args=("second",))
        second.start()
        batcher = server.app.state.batcher
        deadline = time.monotonic() + 10
        while batcher.depth < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert batcher.depth == 1  # the queue is full now
        assert metric(server.client.get("/metrics").text, "elmokit_queue_depth") == 1
        refused = server.client.post("/embed", json={"inputs": "one too many"})
        assert "--max-queue" in tei_error(refused, 429, "overloaded")
        assert int(refused.headers["retry-after"]) >= 1
        refused = server.client.post("/v1/embeddings", json={"input": "one too many"})
        assert openai_error(refused, 429, "queue_full")["type"] == "rate_limit_error" and "retry-after" in refused.headers
        gated.release.set()
        first.join(10), second.join(10)
        assert results["first"].status_code == results["second"].status_code == 200
        metrics = server.client.get("/metrics").text
    assert metric(metrics, 'elmokit_requests_total{route="/embed",status="429"}') == 1


def test_a_request_past_its_timeout_gets_504_and_leaves_its_batch(server_embedder):
    gated = Gated(server_embedder)
    with running(gated, ServeConfig(request_timeout_s=0.2, max_wait_ms=0)) as server:
        held = threading.Thread(target=lambda: server.client.post("/embed", json={"inputs": "held"}))
        held.start()
        assert gated.entered.wait(10)
        with httpx.Client(base_url=server.url, timeout=20) as other:
            started = time.monotonic()
            late = other.post("/embed", json={"inputs": "late"})
        assert "--request-timeout-s" in tei_error(late, 504, "timeout") and time.monotonic() - started < 5
        gated.release.set()
        held.join(10)
        assert server.client.post("/embed", json={"inputs": "after"}).status_code == 200
    assert gated.calls == [1, 1]  # the timed-out request was never embedded


def test_the_api_key(server_embedder):
    with running(server_embedder, ServeConfig(api_key="s3cret-key")) as server:
        assert server.client.get("/health").status_code == 200  # probes need no key
        assert "Authorization" in tei_error(server.client.post("/embed", json={"inputs": "a"}), 401, "unauthorized")
        wrong = {"Authorization": "Bearer s3cret-kez"}
        tei_error(server.client.post("/embed", json={"inputs": "a"}, headers=wrong), 401, "unauthorized")
        tei_error(server.client.get("/metrics", headers=wrong), 401, "unauthorized")
        openai_error(server.client.post("/v1/embeddings", json={"input": "a"}, headers=wrong), 401, "invalid_api_key")
        right = {"Authorization": "Bearer s3cret-key"}
        assert server.client.post("/embed", json={"inputs": "a"}, headers=right).status_code == 200
        assert server.client.get("/info", headers=right).json()["limits"]["api_key_required"] is True
        assert "s3cret" not in server.client.get("/openapi.json", headers=right).text


def test_shutdown_finishes_accepted_requests(server_embedder, oracle):
    """should_exit (what SIGTERM sets) while one request is at the gate and two wait in the queue."""
    gated = Gated(server_embedder)
    config = ServeConfig(max_wait_ms=0)
    server = Running(create_app(gated, config), config)
    results = {}

    def call(text):
        with httpx.Client(base_url=server.url, timeout=20) as client:
            results[text] = client.post("/embed_all", json={"inputs": text, "return_tokens": True})

    threads = [threading.Thread(target=call, args=(text,)) for text in ("a b", "c d e", "f")]
    threads[0].start()
    assert gated.entered.wait(10)
    for thread in threads[1:]:
        thread.start()
    deadline = time.monotonic() + 10
    while server.app.state.batcher.depth < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    server.server.should_exit = True
    time.sleep(0.2)  # uvicorn stops listening and waits for the requests in flight
    assert server.thread.is_alive()
    gated.release.set()
    for thread in threads:
        thread.join(10)
    server.thread.join(10)
    assert not server.thread.is_alive()
    for text, response in results.items():
        assert response.status_code == 200
        assert np.array_equal(floats(response.json()[0]["embeddings"]), oracle.embed([text.split()])[0][-1])
    assert len(results) == 3 and server.app.state.batcher.closed
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{server.url}/embed", json={"inputs": "too late"}, timeout=5)
