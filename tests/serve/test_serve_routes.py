"""Every route over real HTTP against a uvicorn server on 127.0.0.1, each answer checked against an
independent oracle: a separate Embedder's own output, and numpy re-statements of pooling,
normalisation and the scalar mix."""

from __future__ import annotations

import base64

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
pytest.importorskip("httpx", reason="needs httpx")

from serve_testkit import floats, metric, running  # noqa: E402

from elmokit import __version__  # noqa: E402

TEXTS = ["Chico Ruiz made a spectacular play on Alusik 's grounder", "the  bank", "x"]


def _mean_unit(array: np.ndarray, layer: int = -1, normalize: bool = True) -> np.ndarray:
    vector = array[layer].astype(np.float64).mean(axis=0)
    return vector / np.linalg.norm(vector) if normalize else vector


def test_embed_pools_the_top_layer_and_normalises(server, oracle):
    response = server.client.post("/embed", json={"inputs": TEXTS})
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    got = floats(response.json())
    assert got.shape == (3, oracle.dim)
    for text, vector in zip(TEXTS, got):
        np.testing.assert_allclose(vector, _mean_unit(oracle.embed([text.split()])[0]), rtol=1e-5, atol=1e-6)
        assert abs(np.linalg.norm(vector.astype(np.float64)) - 1) < 1e-5


def test_embed_single_string_layer_and_no_normalize(server, oracle):
    response = server.client.post("/embed", json={"inputs": TEXTS[1], "normalize": False, "layer": 0})
    got = floats(response.json())
    assert got.shape == (1, oracle.dim)  # TEI: always a list, one vector per input
    np.testing.assert_allclose(got[0], _mean_unit(oracle.embed([["the", "bank"]])[0], 0, False), rtol=1e-5, atol=1e-6)


def test_embed_all_gives_tokens_beside_their_exact_vectors(server, oracle):
    response = server.client.post("/embed_all", json={"inputs": TEXTS, "return_tokens": True})
    assert response.status_code == 200
    for text, item in zip(TEXTS, response.json()):
        assert item["tokens"] == text.split()
        assert np.array_equal(floats(item["embeddings"]), oracle.embed([text.split()])[0][-1])


def test_embed_all_answers_tei_shape_by_default(server, oracle):
    response = server.client.post("/embed_all", json={"inputs": "the bank", "layer": 1})
    got = response.json()
    assert isinstance(got, list) and isinstance(got[0][0], list)
    assert np.array_equal(floats(got[0]), oracle.embed([["the", "bank"]])[0][1])


def test_tokenize_gives_the_tokens_and_their_offsets(server):
    text = "  Chico  Ruiz 's\tplay "
    response = server.client.post("/tokenize", json={"inputs": [text, ""]})
    assert response.status_code == 200
    tokens, empty = response.json()
    assert [t["text"] for t in tokens] == text.split() and empty == []
    assert all(text[t["start"]:t["stop"]] == t["text"] and t["special"] is False for t in tokens)


def test_openai_embeddings_float_and_base64(server, oracle):
    response = server.client.post("/v1/embeddings", json={"input": TEXTS[:2], "model": "whatever"})
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list" and body["model"] == oracle.name
    n_tokens = sum(len(t.split()) for t in TEXTS[:2])
    assert body["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", 0), ("embedding", 1)]
    for text, item in zip(TEXTS, body["data"]):
        np.testing.assert_allclose(floats(item["embedding"]), _mean_unit(oracle.embed([text.split()])[0]), rtol=1e-5, atol=1e-6)
    encoded = server.client.post("/v1/embeddings", json={"input": TEXTS[0], "encoding_format": "base64"}).json()
    decoded = np.frombuffer(base64.b64decode(encoded["data"][0]["embedding"]), dtype="<f4")
    assert np.array_equal(decoded, floats(body["data"][0]["embedding"]))


def test_v1_elmo_all_layers_a_selection_and_pre_tokenised(server, oracle):
    expected = oracle.embed([TEXTS[0].split()])[0]
    body = server.client.post("/v1/elmo", json={"inputs": TEXTS[0]}).json()
    assert (body["num_layers"], body["dim"], body["layers"], body["initial_state"]) == (3, 10, [0, 1, 2], "zero")
    assert np.array_equal(floats(body["data"][0]["layers"]), expected)
    body = server.client.post("/v1/elmo", json={"tokens": [["a", "bank loan"]], "layers": [-1, 0]}).json()
    assert body["layers"] == [2, 0] and body["data"][0]["tokens"] == ["a", "bank loan"]
    assert np.array_equal(floats(body["data"][0]["layers"]), oracle.embed([["a", "bank loan"]])[0][[2, 0]])


def test_v1_elmo_scalar_mix_is_the_papers_equation(server, oracle):
    w, gamma = np.array([0.5, -1.0, 2.0]), 0.7
    body = server.client.post("/v1/elmo", json={"inputs": TEXTS[1], "mix": w.tolist(), "gamma": gamma}).json()
    s = np.exp(w) / np.exp(w).sum()  # Peters et al. 2018, eq. 1
    np.testing.assert_allclose(body["mix_weights"], s, rtol=1e-12)
    h = oracle.embed([TEXTS[1].split()])[0].astype(np.float64)
    np.testing.assert_allclose(floats(body["data"][0]["mixed"]), gamma * np.einsum("j,jtd->td", s, h), rtol=1e-5, atol=1e-6)


def test_health_info_and_openapi(server, oracle):
    assert server.client.get("/health").json() == {"status": "ok"}
    info = server.client.get("/info").json()
    assert (info["model_id"], info["num_layers"], info["dim"], info["version"]) == (oracle.name, 3, 10, __version__)
    assert info["fingerprint"] == oracle.fingerprint and info["model_dtype"] == "float32"
    assert info["limits"]["max_inputs"] == info["max_client_batch_size"] == 2048 and "api_key" not in info["limits"]
    schema = server.client.get("/openapi.json").json()
    routes = {"/embed", "/embed_all", "/tokenize", "/health", "/info", "/metrics", "/v1/embeddings", "/v1/elmo"}
    assert routes <= set(schema["paths"])
    assert {"EmbedRequest", "OpenAIEmbeddingRequest", "ElmoRequest", "TEIError"} <= set(schema["components"]["schemas"])


def test_metrics_count_requests_batches_and_tokens(server_embedder):
    with running(server_embedder) as server:
        for _ in range(2):
            assert server.client.post("/embed", json={"inputs": ["a b c", "d e"]}).status_code == 200
        assert server.client.post("/embed", json={"inputs": []}).status_code == 400
        text = server.client.get("/metrics").text
    assert metric(text, 'elmokit_requests_total{route="/embed",status="200"}') == 2
    assert metric(text, 'elmokit_requests_total{route="/embed",status="400"}') == 1
    assert metric(text, 'elmokit_request_duration_seconds_count{route="/embed"}') == 3
    assert metric(text, "elmokit_tokens_embedded_total") == 10 and metric(text, "elmokit_inputs_embedded_total") == 4
    assert metric(text, "elmokit_batch_sentences_count") == 2 and metric(text, "elmokit_batch_tokens_sum") == 10
    assert "elmokit_queue_depth 0.0" in text


def test_a_static_table_is_served_too(tmp_path):
    from elmokit.representation import load_representation, spec_from_flags

    path = tmp_path / "vectors.txt"
    path.write_text("3 4\nthe 1 0 0 0\nbank 0 3 4 0\nriver 0 0 0 2\n", encoding="utf-8")
    spec = spec_from_flags(vectors=str(path))
    with running(load_representation(spec), spec=spec) as server:
        got = floats(server.client.post("/embed", json={"inputs": "bank river unknown", "normalize": False}).json())
        assert server.client.get("/info").json()["spec"] == spec
    np.testing.assert_allclose(got[0], [0, 1, 4 / 3, 2 / 3], rtol=1e-6)
