"""`elmokit serve --precision bf16`: what the batching promise is under bf16.

What holds (checked here): a client's vectors are bit-identical to a bf16 ``Embedder.embed`` of its
input alone, however the server batches it with other clients (elmokit's GEMMs are batch-invariant
in bf16 as in fp32). What does not: equality with the fp32 numbers — bf16 arithmetic differs from
fp32 by up to about 1e-2 (docs/benchmarks.md), so compare a bf16 server with bf16 references."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
httpx = pytest.importorskip("httpx", reason="needs httpx")

from serve_testkit import Gated, floats, random_texts, running  # noqa: E402

from elmokit import Embedder  # noqa: E402
from elmokit.serve.config import ServeConfig  # noqa: E402


def test_bf16_clients_get_the_bf16_vectors_of_their_input_alone_in_shared_batches(model_dir, oracle):
    served = Gated(Embedder.load(str(model_dir), precision="bf16"))
    reference = Embedder.load(str(model_dir), precision="bf16")  # its own model: never the server's
    requests = [random_texts(int(n), seed=50 + i) for i, n in enumerate(np.random.default_rng(4).integers(1, 4, size=9))]
    with running(served, ServeConfig(max_wait_ms=0, max_batch_tokens=200)) as server:

        def open_the_gate_when_all_wait():
            served.entered.wait(20)
            deadline = time.monotonic() + 20
            while server.app.state.batcher.accepted < len(requests) and time.monotonic() < deadline:
                time.sleep(0.005)
            served.release.set()

        opener = threading.Thread(target=open_the_gate_when_all_wait)
        opener.start()

        async def all_at_once():
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                return await asyncio.gather(*(client.post("/v1/elmo", json={"inputs": texts}) for texts in requests))

        responses = asyncio.run(all_at_once())
        opener.join(20)
    assert max(served.calls) > 3  # a request has at most 3 texts: batches were shared
    largest_fp32_gap = 0.0
    for texts, response in zip(requests, responses):
        assert response.status_code == 200, response.text
        for text, item in zip(texts, response.json()["data"]):
            got = floats(item["layers"])
            assert np.array_equal(got, reference.embed([text.split()])[0]), text
            largest_fp32_gap = max(largest_fp32_gap, float(np.abs(got - oracle.embed([text.split()])[0]).max()))
    assert 0 < largest_fp32_gap < 0.1  # bf16 is not fp32, and stays near it
