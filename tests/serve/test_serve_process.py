"""`elmokit serve` as users run it: a real process on a free 127.0.0.1 port, every route over HTTP,
then SIGTERM while requests wait in its queue: they complete, and the process exits 0."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
httpx = pytest.importorskip("httpx", reason="needs httpx")

from serve_testkit import ServeProcess, floats, metric  # noqa: E402

from elmokit.cli.main import main  # noqa: E402


def test_serve_help_lists_every_limit(capsys):
    with pytest.raises(SystemExit) as done:
        main(["serve", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--model", "--vectors", "--host", "--port", "--precision", "--max-batch-tokens", "--max-wait-ms",
                 "--max-queue", "--max-inputs", "--max-input-tokens", "--max-request-tokens", "--max-layers",
                 "--max-positions", "--max-response-bytes", "--max-body-bytes", "--read-timeout-s", "--request-timeout-s",
                 "--shutdown-timeout-s", "--api-key", "--allowed-host", "--cors-origin", "--tokenizer"):
        assert flag in out
    assert "127.0.0.1" in out


def test_serve_names_a_missing_model(tmp_path, capsys):
    assert main(["serve", "--model", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err


@pytest.mark.slow
def test_elmokit_serve_process_every_route_then_sigterm_mid_load(model_dir, oracle):
    server = ServeProcess("--model", str(model_dir), "--max-wait-ms", "1500", "--max-batch-tokens", "100000",
                          "--log-level", "info", env={"ELMOKIT_API_KEY": "k-123"})
    try:
        auth = {"Authorization": "Bearer k-123"}
        client = httpx.Client(base_url=server.url, headers=auth, timeout=30)
        assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}  # open without the key
        assert httpx.post(f"{server.url}/embed", json={"inputs": "a"}).status_code == 401  # the key came from the env
        assert client.get("/info").json()["spec"] == {"kind": "elmo", "model": str(model_dir)}
        assert "/v1/elmo" in client.get("/openapi.json").json()["paths"]
        assert [t["text"] for t in client.post("/tokenize", json={"inputs": "a b"}).json()[0]] == ["a", "b"]
        assert len(client.post("/embed", json={"inputs": ["a b", "c"]}).json()) == 2
        assert client.post("/v1/embeddings", json={"input": "a b"}).json()["usage"]["total_tokens"] == 2
        # Mid-load: four clients' requests wait in the queue for company (--max-wait-ms 1500) when SIGTERM comes.
        texts = ["the bank of the river", "a loan", "play", "Chico Ruiz made a spectacular play"]
        results: dict[str, httpx.Response] = {}

        def call(text):
            with httpx.Client(base_url=server.url, headers=auth, timeout=30) as own:
                results[text] = own.post("/v1/elmo", json={"inputs": text})

        threads = [threading.Thread(target=call, args=(text,)) for text in texts]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while metric(client.get("/metrics").text, "elmokit_queue_depth") < len(texts) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert metric(client.get("/metrics").text, "elmokit_queue_depth") == len(texts)
        client.close()
        server.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(30)
        assert server.process.wait(30) == 0
        server.reader.join(5)
        for text in texts:
            assert results[text].status_code == 200, results[text].text
            assert np.array_equal(floats(results[text].json()["data"][0]["layers"]), oracle.embed([text.split()])[0])
        log = "".join(server.lines)
        assert "stopped by SIGTERM after finishing the accepted requests" in log, log
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/health", timeout=5)
    finally:
        server.stop()


@pytest.mark.slow  # a fresh server process: ~4 s
def test_elmokit_serve_process_answers_and_stops_on_sigterm(model_dir):
    """The quick one of the default suite: start, one request, SIGTERM, exit 0."""
    server = ServeProcess("--model", str(model_dir), "--log-level", "warning")
    try:
        response = httpx.post(f"{server.url}/embed", json={"inputs": "a b"}, timeout=30)
        assert response.status_code == 200 and np.asarray(response.json()).shape == (1, 10)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
    finally:
        server.stop()
