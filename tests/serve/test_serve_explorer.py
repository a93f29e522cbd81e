"""The explorer page's API (/v1/explorer/...) over real HTTP, each answer against an independent oracle:
the library's own neighbour search, a numpy cosine of ``Embedder.embed``, a numpy PCA by eigendecomposition
with brute-force checks of the k-means result, and the softmax of the parameters saved in the task
models' safetensors. Also: the page's files, the routes' errors, and a per-request initial state on /v1/elmo."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
pytest.importorskip("httpx", reason="needs httpx")

from serve_testkit import (  # noqa: E402
    CLASSIFIER_MIX,
    TAGGER_MIXES,
    Recording,
    floats,
    running,
    tiny_classifier,
    tiny_index,
    tiny_model_dir,
    tiny_tagger,
)

from elmokit.evaluation.neighbors import NeighborIndex, nearest_occurrences  # noqa: E402
from elmokit.serve import explorer  # noqa: E402
from elmokit.serve.batcher import Batcher  # noqa: E402
from elmokit.serve.config import ServeConfig  # noqa: E402

QUERY = "the umpire saw a play on the bank"


@pytest.fixture(scope="module")
def resources(tmp_path_factory, server_embedder):
    folder = tmp_path_factory.mktemp("explorer")
    index = tiny_index(server_embedder, folder / "index")
    tasks = [explorer.read_task_layer_weights(tiny_tagger(folder / "ner-tagger")),
             explorer.read_task_layer_weights(tiny_classifier(folder / "sst-classifier"))]
    return folder, index, tasks


@pytest.fixture(scope="module")
def explorer_server(server_embedder, resources):
    _, index, tasks = resources
    with running(server_embedder, index=index, task_models=tasks) as server:
        yield server


def _softmax(w):
    e = np.exp(np.asarray(w, dtype=np.float64))
    return e / e.sum()


def test_info_describes_the_index_and_the_task_models(explorer_server, resources, oracle):
    _, index, _ = resources
    info = explorer_server.client.get("/v1/explorer").json()
    assert (info["model"], info["num_layers"], info["dim"], info["tokenizer"]) == (oracle.name, 3, 10, "whitespace")
    assert info["index"]["n_tokens"] == len(index) == sum(len(s) for s in index.sentences)
    assert info["index"]["n_sentences"] == len(index.sentences) and info["index"]["dtype"] == "float32"
    assert info["task_models"] == ["ner-tagger", "sst-classifier"]
    assert info["initial_states"] == ["zero"] and info["api_key_required"] is False


def test_neighbors_are_the_librarys_search(explorer_server, resources, oracle):
    folder, _, _ = resources
    tokens = QUERY.split()
    body = explorer_server.client.post("/v1/explorer/neighbors", json={"inputs": QUERY, "top": 4, "window": 2}).json()
    assert body["tokens"] == tokens and [layer["layer"] for layer in body["layers"]] == [0, 1, 2]
    index = NeighborIndex(folder / "index")  # an index object of its own, and an Embedder of its own
    for position in range(len(tokens)):
        expected = nearest_occurrences(oracle, index, tokens, position, top=4)
        for layer in body["layers"]:
            got = layer["words"][position]
            assert (got["position"], got["word"]) == (position, tokens[position])
            hits = expected[layer["layer"]]
            assert [(h["sentence"], h["token"]) for h in got["neighbors"]] == [(h.sentence, h.token) for h in hits]
            assert [h["score"] for h in got["neighbors"]] == [h.score for h in hits]  # same bits: batch-invariant
            for h, hit in zip(got["neighbors"], hits):
                sentence = hit.tokens
                assert h["word"] == sentence[hit.token]
                assert h["left"] == " ".join(sentence[max(0, hit.token - 2):hit.token])
                assert h["right"] == " ".join(sentence[hit.token + 1:hit.token + 3])
                assert h["cut_right"] == (hit.token + 3 < len(sentence))


def test_neighbors_of_chosen_words_layers_and_same_form(explorer_server, resources, oracle):
    folder, _, _ = resources
    tokens = ["a", "play", "on", "words"]
    body = explorer_server.client.post("/v1/explorer/neighbors", json={
        "tokens": tokens, "positions": [1, -1], "layers": [-1], "top": 3, "same_form": True}).json()
    assert [layer["layer"] for layer in body["layers"]] == [2]
    words = body["layers"][0]["words"]
    assert [(w["position"], w["word"]) for w in words] == [(1, "play"), (3, "words")]
    expected = nearest_occurrences(oracle, NeighborIndex(folder / "index"), tokens, 1, layers=[2], top=3, same_form=True)
    assert [(h["sentence"], h["token"], h["score"]) for h in words[0]["neighbors"]] == \
        [(h.sentence, h.token, h.score) for h in expected[2]]
    assert {h["word"] for h in words[0]["neighbors"]} == {"play"} and len(words[0]["neighbors"]) == 3


def test_similarity_is_the_cosine_of_the_embedders_vectors(explorer_server, oracle):
    a, b = "Chico Ruiz made a play", "the bank made a loan on the river"
    body = explorer_server.client.post("/v1/explorer/similarity", json={"a": a, "b": b}).json()
    assert (body["tokens_a"], body["tokens_b"], body["layers"]) == (a.split(), b.split(), [0, 1, 2])
    ea, eb = (x.astype(np.float64) for x in oracle.embed([a.split(), b.split()]))
    for j, matrix in enumerate(body["cosine"]):
        expected = (ea[j] @ eb[j].T) / np.outer(np.linalg.norm(ea[j], axis=1), np.linalg.norm(eb[j], axis=1))
        assert np.asarray(matrix).shape == (5, 8)
        np.testing.assert_allclose(matrix, expected, rtol=0, atol=1e-12)
    one = explorer_server.client.post("/v1/explorer/similarity", json={"a": ["bank"], "b": ["bank", "x"],
                                                                       "layers": [0]}).json()
    assert one["layers"] == [0] and one["cosine"][0][0][0] == pytest.approx(1.0, abs=1e-12)


def _oracle_pca(points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PCA by eigendecomposition of the covariance (not SVD), signs by the largest loading."""
    mean = points.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov(points - mean, rowvar=False))
    order = np.argsort(values)[::-1][:2]
    components = vectors[:, order].T
    for row in components:
        if row[np.argmax(np.abs(row))] < 0:
            row *= -1
    return (points - mean) @ components.T, components, values[order] / values.sum()


def test_projection_is_the_pca_of_the_occurrences_coloured_by_a_kmeans_fixed_point(explorer_server, resources, oracle):
    folder, _, _ = resources
    index = NeighborIndex(folder / "index")
    rows = index.occurrences_of("play")
    assert len(rows) >= 8
    # layer 0 is context-independent: every "play" is the same point, so one cluster and no spread
    body = explorer_server.client.post("/v1/explorer/projection", json={"word": "play", "layer": 0, "clusters": 3}).json()
    assert body["clusters"] == 1 and {(p["x"], p["y"], p["cluster"]) for p in body["points"]} == {(0.0, 0.0, 0)}
    for layer in (1, 2):
        body = explorer_server.client.post("/v1/explorer/projection", json={
            "inputs": QUERY, "position": 4, "layer": layer, "clusters": 3, "window": 1}).json()
        assert (body["word"], body["layer"], body["n_occurrences"], body["truncated"]) == ("play", layer, len(rows), False)
        vectors = np.asarray(index.layers[layer][rows], dtype=np.float64)
        coords, components, explained = _oracle_pca(vectors)
        got = np.array([[p["x"], p["y"]] for p in body["points"]])
        np.testing.assert_allclose(got, coords, rtol=0, atol=1e-9)
        np.testing.assert_allclose(body["explained_variance"], explained, rtol=1e-9)
        assert [index.locate(int(r)) for r in rows] == [(p["sentence"], p["token"]) for p in body["points"]]
        # k-means: 3 clusters numbered by first appearance, each point nearest to its own cluster's mean
        labels = np.array([p["cluster"] for p in body["points"]])
        assert body["clusters"] == 3 and labels[0] == 0
        assert list(dict.fromkeys(labels.tolist())) == list(range(3))
        means = np.stack([vectors[labels == c].mean(axis=0) for c in range(3)])
        distances = ((vectors[:, None, :] - means[None]) ** 2).sum(-1)
        assert np.all(distances[np.arange(len(labels)), labels] <= distances.min(axis=1) + 1e-12)
        # the query's own "play", projected on the same axes
        vector = oracle.embed([QUERY.split()])[0][layer, 4].astype(np.float64)
        unit = vector / np.linalg.norm(vector)
        query = body["query"]
        assert (query["tokens"], query["position"]) == (QUERY.split(), 4)
        np.testing.assert_allclose([query["x"], query["y"]], (unit - vectors.mean(axis=0)) @ components.T, atol=1e-9)
        assert query["cluster"] == int(np.argmin(((means - unit) ** 2).sum(axis=1)))
    again = explorer_server.client.post("/v1/explorer/projection", json={
        "inputs": QUERY, "position": 4, "layer": 2, "clusters": 3, "window": 1}).json()
    assert again == body  # deterministic: fixed seed, fixed signs


def test_projection_of_a_word_alone_truncated_or_absent(explorer_server, resources):
    _, index, _ = resources
    rows = index.occurrences_of("the")
    body = explorer_server.client.post("/v1/explorer/projection", json={"word": "the", "max_points": 5}).json()
    assert (body["n_occurrences"], len(body["points"]), body["truncated"], body["query"]) == (len(rows), 5, True, None)
    absent = explorer_server.client.post("/v1/explorer/projection", json={"word": "zebra"}).json()
    assert (absent["n_occurrences"], absent["points"], absent["clusters"]) == (0, [], 0)


def test_kmeans_finds_separated_groups_and_pca_handles_few_points():
    rng = np.random.default_rng(3)
    centres = np.array([[5.0, 0, 0, 0, 0], [0, 5.0, 0, 0, 0], [0, 0, 0, 5.0, 0]])
    truth = rng.permutation(np.repeat(np.arange(3), [7, 5, 9]))
    points = centres[truth] + 0.1 * rng.standard_normal((21, 5))
    labels, centroids = explorer.kmeans(points, 3, seed=4)
    mapping = dict(zip(truth.tolist(), labels.tolist()))
    assert len(set(mapping.values())) == 3 and [mapping[t] for t in truth] == labels.tolist()
    np.testing.assert_allclose(centroids, [points[labels == c].mean(axis=0) for c in range(3)], rtol=1e-12)
    assert explorer.kmeans(points[:2].repeat(3, axis=0), 5)[1].shape == (2, 5)  # k capped by distinct points
    single = explorer.pca_2d(points[:1])
    assert np.array_equal(single.coords, np.zeros((1, 2))) and np.array_equal(single.explained, [0, 0])
    pair = explorer.pca_2d(points[:2])
    distance = np.linalg.norm(points[0] - points[1])
    np.testing.assert_allclose(np.abs(pair.coords[:, 0]), [distance / 2] * 2, rtol=1e-12)
    assert np.allclose(pair.coords[:, 1], 0) and pair.explained[0] == pytest.approx(1.0)


def test_layer_weights_are_the_softmax_of_the_saved_parameters(explorer_server):
    body = explorer_server.client.get("/v1/explorer/layer-weights").json()
    assert body["num_layers"] == 3
    tagger, classifier = body["task_models"]
    assert (tagger["name"], tagger["kind"], tagger["representation"]) == ("ner-tagger", "tagger", "elmo:tiny")
    assert [m["parameter"] for m in tagger["mixes"]] == ["input_mix", "output_mix"]
    for mix in tagger["mixes"]:
        w, gamma = TAGGER_MIXES[mix["parameter"]]
        np.testing.assert_allclose(mix["softmax_w"], _softmax(np.float32(w)), rtol=1e-12)
        assert mix["gamma"] == float(np.float32(gamma)) and mix["layers"] == [0, 1, 2]
    (mix,) = classifier["mixes"]
    assert (classifier["kind"], mix["name"]) == ("classifier", "input")
    np.testing.assert_allclose(mix["softmax_w"], _softmax(np.float32(CLASSIFIER_MIX[0])), rtol=1e-12)
    assert mix["gamma"] == float(np.float32(CLASSIFIER_MIX[1]))


def test_without_index_or_task_models_the_routes_say_so(server):
    info = server.client.get("/v1/explorer").json()
    assert info["index"] is None and info["task_models"] == []
    for path, body in (("/v1/explorer/neighbors", {"inputs": "a play"}), ("/v1/explorer/projection", {"word": "play"})):
        response = server.client.post(path, json=body)
        assert response.status_code == 404
        assert response.json()["error_type"] == "not_configured" and "--index" in response.json()["error"]
    assert server.client.get("/v1/explorer/layer-weights").json() == {"num_layers": 3, "task_models": []}
    assert server.client.post("/v1/explorer/similarity", json={"a": "a b", "b": "c"}).status_code == 200


def test_bad_explorer_requests_are_named(explorer_server):
    post = explorer_server.client.post
    cases = [
        ("/v1/explorer/neighbors", {"inputs": "a play", "positions": [2]}, "positions", "outside the sentence"),
        ("/v1/explorer/neighbors", {"inputs": "a", "tokens": ["a"]}, None, "one of them"),
        ("/v1/explorer/neighbors", {"inputs": "   "}, None, "no tokens"),
        ("/v1/explorer/neighbors", {"inputs": "a", "top": 0}, None, "top"),
        ("/v1/explorer/similarity", {"a": "a b", "b": ""}, None, "no tokens"),
        ("/v1/explorer/similarity", {"a": "a b", "b": "c", "layers": [3]}, None, "3 layers"),
        ("/v1/explorer/projection", {"inputs": "a play"}, None, "`position` is missing"),
        ("/v1/explorer/projection", {}, None, "give `word`"),
        ("/v1/explorer/projection", {"word": "play", "clusters": 9}, None, "clusters"),
    ]
    for path, body, _, words in cases:
        response = post(path, json=body)
        assert response.status_code == 400, (path, body, response.text)
        assert words in response.json()["error"], (path, body, response.json())


def test_the_page_and_its_files_are_served_and_the_routes_published(explorer_server):
    page = explorer_server.client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'src="explorer/explorer.js"' in page.text and "http" not in page.text.split("<footer")[0].replace(
        "http-equiv", "")  # no CDN: every resource is the server's own
    for path, kind in (("/explorer/explorer.js", "text/javascript"), ("/explorer/explorer.css", "text/css")):
        response = explorer_server.client.get(path)
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind) and response.text
    assert explorer_server.client.get("/explorer/secret.py").status_code == 404
    schema = explorer_server.client.get("/openapi.json").json()
    assert {"/v1/explorer", "/v1/explorer/neighbors", "/v1/explorer/similarity", "/v1/explorer/projection",
            "/v1/explorer/layer-weights"} <= set(schema["paths"])
    assert "/" not in schema["paths"]
    assert {"ExplorerNeighborsRequest", "ExplorerSimilarityRequest", "ExplorerProjectionRequest",
            "ExplorerLayerWeightsResponse"} <= set(schema["components"]["schemas"])


def test_with_an_api_key_the_page_loads_but_its_data_needs_the_key(server_embedder):
    with running(server_embedder, ServeConfig(api_key="k3y")) as server:
        assert server.client.get("/").status_code == 200
        assert server.client.get("/explorer/explorer.js").status_code == 200
        assert server.client.get("/v1/explorer").status_code == 401
        info = server.client.get("/v1/explorer", headers={"Authorization": "Bearer k3y"}).json()
    assert info["api_key_required"] is True


def test_v1_elmo_takes_a_per_request_initial_state(tmp_path):
    from elmokit import Embedder
    from elmokit.formats import load_bilm
    from elmokit.warm_state import compute_warm_state, save_warm_state

    folder = tiny_model_dir(tmp_path / "tiny")
    save_warm_state(folder, compute_warm_state(load_bilm(folder)))
    zero, warm = Embedder.load(str(folder)), Embedder.load(str(folder), initial_state="warm")
    oracle_zero, oracle_warm = Embedder.load(str(folder)), Embedder.load(str(folder), initial_state="warm")
    tokens = ["a", "play", "on", "words"]
    with running(zero, initial_states={"warm": warm, "zero": zero}) as server:
        assert server.client.get("/v1/explorer").json()["initial_states"] == ["zero", "warm"]
        got = {}
        for state in (None, "zero", "warm"):
            body = server.client.post("/v1/elmo", json={"tokens": [tokens], "initial_state": state}).json()
            got[state] = (body["initial_state"], floats(body["data"][0]["layers"]))
    assert got[None][0] == got["zero"][0] == "zero" and got["warm"][0] == "warm"
    assert np.array_equal(got["zero"][1], oracle_zero.embed([tokens])[0])
    assert np.array_equal(got["warm"][1], oracle_warm.embed([tokens])[0])
    assert not np.array_equal(got["warm"][1][1], got["zero"][1][1])  # the LSTM layers differ, layer 0 does not
    assert np.array_equal(got["warm"][1][0], got["zero"][1][0])


def test_v1_elmo_refuses_an_initial_state_it_was_not_started_with(server):
    response = server.client.post("/v1/elmo", json={"inputs": "a b", "initial_state": "warm"})
    assert response.status_code == 400 and "--per-request-state" in response.json()["error"]
    assert server.client.post("/v1/elmo", json={"inputs": "a b", "initial_state": "zero"}).status_code == 200


def test_a_batch_holds_one_initial_state_and_the_queue_keeps_its_order(server_embedder):
    main, other = Recording(server_embedder), Recording(server_embedder)
    batcher = Batcher(main, max_wait_ms=0, variants={"warm": other})
    futures = [batcher.submit([["a", "b"]], variant) for variant in (None, "warm", None, "warm", None)]
    batcher.start()
    results = [f.result(20) for f in futures]
    batcher.close(20)
    assert main.batches == [3] and other.batches == [2]  # never mixed; each variant's requests together
    for result in results:
        assert np.array_equal(result[0], server_embedder.embed([["a", "b"]])[0])
    with pytest.raises(KeyError, match="cold"):
        batcher.submit([["a"]], "cold")


def test_serve_refuses_an_index_of_another_model_and_a_folder_that_is_no_task_model(tmp_path, model_dir, capsys):
    from serve_testkit import random_tf_weights, tiny_options, write_original_files

    from elmokit import Embedder
    from elmokit.cli.main import main

    options = tiny_options()
    other = write_original_files(tmp_path / "other", options, random_tf_weights(options, seed=9))[0].parent
    tiny_index(Embedder.load(str(other)), tmp_path / "index", extra=0)
    assert main(["serve", "--model", str(model_dir), "--index", str(tmp_path / "index"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "index") in err and "rebuild the index" in err
    (tmp_path / "empty").mkdir()
    assert main(["serve", "--model", str(model_dir), "--task-model", str(tmp_path / "empty"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "empty") in err and "not a saved tagger" in err
    assert main(["serve", "--model", str(model_dir), "--index", str(tmp_path / "nowhere"), "--port", "0"]) == 2
    assert "no such folder" in capsys.readouterr().err
