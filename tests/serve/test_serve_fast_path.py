"""The embedding routes' fast path (``_Guard`` calls the route's function itself for a JSON body its
model accepts) answers byte for byte what FastAPI's own path answers: the oracle is the same request
sent as ``application/x-test+json``, which the guard lets through and FastAPI reads as JSON, but the
fast path leaves to FastAPI."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
httpx = pytest.importorskip("httpx", reason="needs httpx")

FAST = {"content-type": "application/json"}
VIA_FASTAPI = {"content-type": "application/x-test+json"}

ANSWERED = [  # bodies the route's model accepts: answers and the route's own errors
    ("/embed", {"inputs": ["the bank", "of the river"]}),
    ("/embed", {"inputs": "the bank", "normalize": False, "layer": 0, "truncate": True}),
    ("/", {"inputs": "the bank"}),
    ("/embed_all", {"inputs": ["the bank"], "return_tokens": True}),
    ("/embed_all", {"inputs": "the bank of the river"}),
    ("/tokenize", {"inputs": ["the bank of the river", "  "]}),
    ("/v1/embeddings", {"input": ["the bank", "a river"], "encoding_format": "base64", "model": "m"}),
    ("/embeddings", {"input": "the bank"}),
    ("/v1/elmo", {"inputs": ["the bank"], "layers": [0, -1]}),
    ("/v1/elmo", {"tokens": [["the", "bank"]], "mix": [0.1, 0.2, 0.3], "gamma": 0.5}),
    ("/embed", {"inputs": []}),  # 400 empty
    ("/embed", {"inputs": "the bank", "prompt_name": "query"}),  # 422 as TEI
    ("/embed", {"inputs": "the bank", "layer": 7}),  # 400 no such layer
    ("/embed", {"inputs": ["the bank"] * 3000}),  # 422 over --max-inputs
    ("/v1/embeddings", {"input": "the bank", "dimensions": 3}),  # OpenAI's 400
    ("/v1/embeddings", {"input": [[1, 2, 3]]}),  # token ids: 400 in OpenAI's shape
    ("/v1/elmo", {"inputs": "the bank", "tokens": [["the"]]}),  # 400 one of them
]
REFUSED = [  # bodies the model refuses (or not a JSON object): FastAPI answers on both paths
    ("/embed", {"inputs": 5}),
    ("/embed", [1, 2]),
    ("/embed", {}),
    ("/v1/embeddings", {"input": "x", "encoding_format": "hex"}),
    ("/v1/elmo", {"inputs": "x", "layers": "all"}),
]


def counting_route_apps(app, monkeypatch) -> dict[str, list[int]]:
    """Count the calls of each POST route's FastAPI handler (the fast path never calls it)."""
    calls = {}
    for route in app.routes:
        if "POST" in getattr(route, "methods", ()):
            inner, count = route.app, calls.setdefault(route.path, [0])

            async def counted(scope, receive, send, inner=inner, count=count):
                count[0] += 1
                await inner(scope, receive, send)

            monkeypatch.setattr(route, "app", counted)
    return calls


@pytest.mark.parametrize("path, body", ANSWERED + REFUSED)
def test_the_fast_path_answers_as_fastapi_does(server, monkeypatch, path, body):
    calls = counting_route_apps(server.app, monkeypatch)
    fast = server.client.post(path, json=body, headers=FAST)
    took_fast_path = calls[path][0] == 0
    slow = server.client.post(path, json=body, headers=VIA_FASTAPI)
    assert calls[path][0] == (1 if took_fast_path else 2)
    assert took_fast_path == ((path, body) in ANSWERED)
    assert (fast.status_code, fast.headers["content-type"], fast.content) == \
        (slow.status_code, slow.headers["content-type"], slow.content)
    assert {k: v for k, v in fast.headers.items() if k not in ("date", "content-length")} == \
        {k: v for k, v in slow.headers.items() if k not in ("date", "content-length")}


def test_an_unexpected_error_on_the_fast_path_is_the_apps_500(server, monkeypatch):
    batcher = server.app.state.batcher

    def broken(*args, **kwargs):
        raise KeyError("lost")

    monkeypatch.setattr(batcher, "submit_many", broken)
    fast = server.client.post("/embed", json={"inputs": "the bank"}, headers=FAST)
    slow = server.client.post("/embed", json={"inputs": "the bank"}, headers=VIA_FASTAPI)
    assert fast.status_code == slow.status_code == 500
    assert fast.json() == slow.json() == {"error": "internal error: KeyError: 'lost'", "error_type": "backend"}
