"""The server's safety as an attacker or a careless client meets it: one test per guard. Each request
that would cost memory, CPU or a huge answer is refused before any work (the representation is never
called); bodies must be JSON; the Host header is checked; no CORS unless asked; no empty key; never
NaN or Infinity in a 200; shutdown answers the requests it cuts; slow clients are cut off."""

from __future__ import annotations

import importlib.util
import json
import signal
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
httpx = pytest.importorskip("httpx", reason="needs httpx")

from serve_testkit import Recording, ServeProcess, running  # noqa: E402

from elmokit.cli.main import main  # noqa: E402
from elmokit.errors import UserError  # noqa: E402
from elmokit.serve.config import ServeConfig  # noqa: E402


def strict_json(text: str):
    """JSON as the standard has it: NaN and Infinity are not numbers there."""
    def refuse(constant):
        raise AssertionError(f"{constant} in a JSON answer")
    return json.loads(text, parse_constant=refuse)


def refused(response, status: int, code_or_type: str) -> str:
    assert response.status_code == status, response.text
    body = strict_json(response.text)
    if "error_type" in body:
        assert body["error_type"] == code_or_type or code_or_type in body["error"], body
        return body["error"]
    assert body["error"]["code"] == code_or_type, body
    return body["error"]["message"]


# ---- bounded requests: refused before any work --------------------------------------------------------


@pytest.fixture
def recording(server_embedder):
    return Recording(server_embedder)


@pytest.mark.parametrize(("route", "body", "flag"), [
    ("/v1/elmo", {"tokens": [["a"] * 10], "layers": [0] * 2000}, "--max-layers"),
    ("/v1/elmo", {"tokens": [["a"] * 500], "layers": [0] * 20000}, "--max-layers"),
    ("/v1/explorer/similarity", {"a": "a b", "b": "c d", "layers": [0] * 500}, "--max-layers"),
    ("/v1/explorer/neighbors", {"inputs": "a b", "positions": [0, 1] * 200}, "--max-positions"),
    ("/tokenize", {"inputs": "a " * 600_000}, "--max-input-tokens"),
    ("/tokenize", {"inputs": ["a " * 500] * 300}, "--max-request-tokens"),
    ("/embed", {"inputs": ["a"] * 2049}, "--max-inputs"),
    ("/v1/elmo", {"inputs": ["w " * 100] * 64}, "--max-response-bytes"),
    ("/embed_all", {"inputs": ["w " * 100] * 64}, "--max-response-bytes"),
])
def test_requests_over_a_limit_are_refused_before_any_work(recording, route, body, flag):
    config = ServeConfig(max_response_bytes=500_000, max_body_bytes=3_000_000)
    with running(recording, config) as server:
        response = server.client.post(route, json=body)
    assert flag in refused(response, 422, "validation")
    assert recording.batches == []  # the model never ran


def test_repeated_positions_and_layers_are_refused(recording):
    with running(recording) as server:
        message = refused(server.client.post("/v1/explorer/similarity", json={"a": "a", "b": "b", "layers": [0, 0]}),
                          400, "validation")
    assert "twice" in message and recording.batches == []


def test_the_60kb_request_with_20000_layers_is_refused_within_a_second_and_memory_stays_flat(model_dir):
    body = json.dumps({"tokens": [["a"] * 500], "layers": [0] * 20000}).encode()
    assert 50_000 < len(body) < 70_000
    server = ServeProcess("--model", str(model_dir), "--log-level", "warning")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            client.post("/embed", json={"inputs": "warm up"})
            before = server.rss_bytes()
            started = time.monotonic()
            response = client.post("/v1/elmo", content=body, headers={"content-type": "application/json"})
            seconds = time.monotonic() - started
            after = server.rss_bytes()
        assert 400 <= response.status_code < 500 and "--max-layers" in response.json()["error"]
        assert seconds < 1.0, seconds
        assert after - before < 20_000_000, (before, after)  # the old server grew by gigabytes
    finally:
        server.stop()


# ---- what a web page can and cannot do -------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None])
def test_bodies_that_are_not_declared_json_get_415(server, content_type):
    headers = {"content-type": content_type} if content_type else {}
    response = server.client.post("/embed", content=b'{"inputs": "a"}', headers=headers)
    assert "Content-Type: application/json" in refused(response, 415, "unsupported_media_type")
    ok = server.client.post("/embed", content=b'{"inputs": "a"}', headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code == 200


def test_the_host_header_must_be_a_local_name_or_an_allowed_one(server_embedder):
    with running(server_embedder) as server:
        for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", "LOCALHOST", f"[::1]:{server.port}"):
            assert server.client.get("/health", headers={"host": host}).status_code == 200, host
        for host in ("evil.example", f"evil.example:{server.port}", "localhost.evil.example", "10.1.2.3"):
            message = refused(server.client.post("/embed", json={"inputs": "a"}, headers={"host": host}), 400, "invalid_host")
            assert "--allowed-host" in message
    with running(server_embedder, ServeConfig(allowed_hosts=("localhost", "api.example"))) as server:
        assert server.client.post("/embed", json={"inputs": "a"}, headers={"host": "api.example:443"}).status_code == 200
    with running(server_embedder, ServeConfig(allowed_hosts=("0.0.0.0",))) as server:  # bound everywhere: any IP
        assert server.client.get("/health", headers={"host": "10.1.2.3:8080"}).status_code == 200
        assert server.client.get("/health", headers={"host": "evil.example"}).status_code == 400


def test_no_cors_unless_asked(server_embedder):
    preflight = {"origin": "https://evil.example", "access-control-request-method": "POST",
                 "access-control-request-headers": "content-type"}
    with running(server_embedder) as server:
        answer = server.client.options("/embed", headers=preflight)
        assert "access-control-allow-origin" not in answer.headers
        posted = server.client.post("/embed", json={"inputs": "a"}, headers={"origin": "https://evil.example"})
        assert "access-control-allow-origin" not in posted.headers
    with running(server_embedder, ServeConfig(cors_origins=("https://app.example",))) as server:
        answer = server.client.options("/embed", headers={**preflight, "origin": "https://app.example"})
        assert answer.headers["access-control-allow-origin"] == "https://app.example"
        assert "access-control-allow-origin" not in server.client.options("/embed", headers=preflight).headers


def test_the_page_is_open_but_posting_to_the_root_needs_the_key(server_embedder):
    with running(server_embedder, ServeConfig(api_key="k")) as server:
        assert server.client.get("/").status_code == 200
        assert server.client.post("/", json={"inputs": "a"}).status_code == 401
        assert server.client.post("/", json={"inputs": "a"}, headers={"authorization": "Bearer k"}).status_code == 200


@pytest.mark.parametrize("env_or_flag", ["env", "flag"])
def test_an_empty_api_key_is_refused_from_the_environment_too(monkeypatch, capsys, model_dir, env_or_flag):
    if env_or_flag == "env":
        monkeypatch.setenv("ELMOKIT_API_KEY", "")
        args = []
    else:
        monkeypatch.delenv("ELMOKIT_API_KEY", raising=False)
        args = ["--api-key", " "]
    assert main(["serve", "--model", str(model_dir), "--port", "0", *args]) == 2
    err = capsys.readouterr().err
    assert ("ELMOKIT_API_KEY" if env_or_flag == "env" else "--api-key") in err and "empty" in err


# ---- finite JSON ------------------------------------------------------------------------------------


def test_a_gamma_float32_cannot_hold_is_refused_and_an_overflow_is_an_error_not_infinity(server):
    message = refused(server.client.post("/v1/elmo", json={"inputs": "a b", "mix": [0, 0, 0], "gamma": 1e39}),
                      400, "validation")
    assert "gamma" in message
    response = server.client.post("/v1/elmo", json={"inputs": "the bank river loan", "mix": [0, 0, 0], "gamma": 3.4e38})
    assert response.status_code in (200, 500)
    body = strict_json(response.text)  # never Infinity
    if response.status_code == 500:
        assert body["error_type"] == "backend" and "finite" in body["error"]


def test_a_table_with_a_nan_row_is_refused_at_start_and_never_answered_as_nan(tmp_path, capsys):
    from elmokit.representation import load_representation, spec_from_flags

    path = tmp_path / "vectors.txt"
    path.write_text("3 2\nthe 1 0\nbank nan 1\nriver 0 2\n", encoding="utf-8")
    assert main(["serve", "--vectors", str(path), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "nan" in err.lower() and "'bank'" in err
    with pytest.raises(UserError, match="'bank'"):  # the library refuses it at load too
        load_representation(spec_from_flags(vectors=str(path)))
    path.write_text("3 2\nthe 1 0\nbank 0 1\nriver 0 2\n", encoding="utf-8")
    spec = spec_from_flags(vectors=str(path))
    table = load_representation(spec)
    table.vectors[table.index["bank"], 0] = np.nan  # a NaN past every load check
    with running(table, spec=spec) as server:  # the app must still never answer it
        for route, body in (("/embed", {"inputs": "bank"}), ("/embed_all", {"inputs": "bank"}),
                            ("/v1/embeddings", {"input": "bank", "encoding_format": "base64"})):
            response = server.client.post(route, json=body)
            assert response.status_code == 500, response.text
            strict_json(response.text)
        assert server.client.post("/embed", json={"inputs": "the river"}).status_code == 200


# ---- shutdown -------------------------------------------------------------------------------------------


@pytest.mark.slow  # a fresh server process: ~4 s
def test_sigterm_answers_the_requests_it_cuts_with_503_json_and_exits_1(model_dir):
    """The queue outlasts --shutdown-timeout-s (requests wait 20 s for company): each is answered 503
    JSON, the log says so without a traceback, and the exit status is not 0."""
    server = ServeProcess("--model", str(model_dir), "--max-wait-ms", "20000", "--max-batch-tokens", "100000",
                          "--shutdown-timeout-s", "0.5", "--log-level", "info")
    try:
        results = {}

        def call(i):
            with httpx.Client(base_url=server.url, timeout=30) as client:
                results[i] = client.post("/embed", json={"inputs": f"text {i}"})

        threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if 'elmokit_queue_depth 6.0' in httpx.get(f"{server.url}/metrics").text:
                break
            time.sleep(0.02)
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(30)
        assert server.process.wait(30) == 1
        assert time.monotonic() - started < 10
        server.reader.join(5)
        for response in results.values():
            assert response.status_code == 503 and response.headers["content-type"] == "application/json"
            assert response.json()["error_type"] == "unhealthy" and "--shutdown-timeout-s" in response.json()["error"]
        log = "".join(server.lines)
        assert len(results) == 6 and "6 accepted request(s) were not finished" in log, log
        assert "Traceback" not in log and "after finishing the accepted requests" not in log
    finally:
        server.stop()


# ---- slow clients ---------------------------------------------------------------------------------------


HTTP_PROTOCOLS = ["h11", pytest.param("httptools", marks=pytest.mark.skipif(
    importlib.util.find_spec("httptools") is None, reason="needs httptools (the serve extra)"))]


@pytest.mark.parametrize("http", HTTP_PROTOCOLS)
def test_a_slow_client_is_cut_off(server_embedder, http):
    with running(server_embedder, ServeConfig(read_timeout_s=0.5), http=http) as server:
        # the head never completes: the connection is closed
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as slow:
            slow.sendall(b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            started = time.monotonic()
            assert slow.recv(1000) == b""  # closed by the server (a timeout here raises)
            assert time.monotonic() - started < 3
        # the body never completes: 408 JSON
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as slow:
            slow.sendall(b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"inputs\": ")
            answer = b""
            while chunk := slow.recv(10000):  # until the server closes
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408") and b"--read-timeout-s" in answer
        assert server.client.get("/health").status_code == 200


@pytest.mark.parametrize("http", HTTP_PROTOCOLS)
def test_a_head_over_16_kb_is_refused_and_one_under_it_with_a_large_body_is_not(server_embedder, http):
    with running(server_embedder, ServeConfig(read_timeout_s=5), http=http) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as big:
            big.sendall(b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            for _ in range(40):  # 40 headers of 1 KB, a few at a time: the head never fits
                try:
                    big.sendall(b"X-Filler: " + b"a" * 1000 + b"\r\n")
                except OSError:  # closed by the server mid-head
                    break
                time.sleep(0.002)
            answer = b""
            while chunk := big.recv(10000):  # until the server closes
                answer += chunk
        assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 431")), answer[:200]
        # a 15 KB head and a 1 MB body sent in one write: the body is not counted as head
        body = b'{"inputs": "the bank", "unread": "' + b"a" * 1_000_000 + b'"}'  # unknown fields are ignored
        head = (b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"X-Filler: " + b"b" * 15_000 + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as fine:
            fine.sendall(head + body)
            answer = fine.recv(100)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        # heads of 10 KB with bodies of 20 KB, three on one connection: no head is counted with another's
        body = b'{"inputs": "the bank", "unread": "' + b"a" * 20_000 + b'"}'
        head = (b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"X-Filler: " + b"b" * 10_000 + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        with httpx.Client(base_url=server.url, timeout=20) as client:
            for _ in range(3):
                answer = client.post("/embed", content=body, headers={"content-type": "application/json",
                                                                       "x-filler": "b" * 10_000})
                assert answer.status_code == 200, answer.text
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as fine:
            fine.sendall((head + body) * 3)  # pipelined, in one write
            answer = b""
            while answer.count(b"HTTP/1.1 200") < 3:
                chunk = fine.recv(100_000)
                assert chunk, answer
                answer += chunk
        assert server.client.get("/health").status_code == 200


# ---- /tokenize offsets ------------------------------------------------------------------------------


def test_tokenize_offsets_of_a_lowercased_table_stay_inside_the_text(tmp_path):
    from elmokit.static.vectors import StaticVectors

    table = StaticVectors(["bank", "river", "the"], np.eye(3, dtype=np.float32), name="lower", lowercase=True)
    text = "The BANK of the RIVER"
    with running(table) as server:
        tokens = server.client.post("/tokenize", json={"inputs": text}).json()[0]
    assert [t["text"] for t in tokens] == ["the", "bank", "of", "the", "river"]
    for t in tokens:
        assert 0 <= t["start"] <= t["stop"] <= len(text)
        assert text[t["start"]:t["stop"]].lower() == t["text"]
