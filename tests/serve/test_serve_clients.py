"""The clients people use, with their defaults, against one live `elmokit serve` process (a tiny
model, a free 127.0.0.1 port, an API key): the openai SDK (sync and async, float and base64, 2048
inputs, its error classes), huggingface_hub's InferenceClient (the root URL, /embed, /embed_all),
langchain-openai's OpenAIEmbeddings and llama-index's TextEmbeddingsInference and OpenAIEmbedding.
Every vector is compared with the library's own (``Embedder.embed``); nothing but loopback is reached
(a guard refuses any other connection in this process)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
openai = pytest.importorskip("openai", reason="needs the test extra's clients: pip install -e '.[test]'")

from serve_testkit import ServeProcess, random_texts  # noqa: E402

KEY = "test-key-123"


def unit_mean(oracle, text: str) -> np.ndarray:
    """The /embed and /v1/embeddings vector of ``text``: the unit mean of the top layer, in float64."""
    v = oracle.embed([text.split()])[0][-1].astype(np.float64).mean(axis=0)
    return v / np.linalg.norm(v)


def close(got, oracle, texts) -> None:
    want = np.stack([unit_mean(oracle, t) for t in texts])
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module", autouse=True)
def loopback_only():
    """Dummy credentials, no telemetry, no proxy, and any connection beyond loopback refused."""
    mp = pytest.MonkeyPatch()
    for name, value in {"OPENAI_API_KEY": "dummy", "HF_HUB_DISABLE_TELEMETRY": "1",
                        "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false", "DO_NOT_TRACK": "1",
                        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}.items():
        mp.setenv(name, value)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "OPENAI_BASE_URL",
                 "HF_HUB_OFFLINE"):
        mp.delenv(name, raising=False)
    connect = socket.socket.connect

    def loopback(host: str) -> bool:
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:  # a name: only localhost's
            return host == "localhost"

    def guarded(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not loopback(address[0]):
            raise ConnectionRefusedError(f"the client tests reach loopback only, not {address}")
        return connect(sock, address)

    mp.setattr(socket.socket, "connect", guarded)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def live(model_dir):
    server = ServeProcess("--model", str(model_dir), "--log-level", "warning", "--threads", "1",
                          env={"ELMOKIT_API_KEY": KEY})
    yield server
    server.stop()


# ---- openai ---------------------------------------------------------------------------------------------


def test_openai_sync_float_base64_and_2048_inputs(live, oracle):
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key=KEY)
    texts = random_texts(2048, seed=3, max_len=3)
    default = client.embeddings.create(model="elmo", input=texts)  # the SDK asks for base64 and decodes it
    assert len(default.data) == 2048 and [d.index for d in default.data] == list(range(2048))
    close([d.embedding for d in default.data[:5]], oracle, texts[:5])
    as_float = client.embeddings.create(model="elmo", input=texts[:3], encoding_format="float")
    close([d.embedding for d in as_float.data], oracle, texts[:3])
    assert as_float.usage.total_tokens == sum(len(t.split()) for t in texts[:3])
    assert [m.id for m in client.models.list()] == [oracle.name]


def test_openai_async(live, oracle):
    texts = random_texts(40, seed=4)

    async def run():
        client = openai.AsyncOpenAI(base_url=f"{live.url}/v1", api_key=KEY)
        answers = await asyncio.gather(*(client.embeddings.create(model="elmo", input=texts[i:i + 4])
                                         for i in range(0, 40, 4)))
        await client.close()
        return [d.embedding for a in answers for d in a.data]

    close(asyncio.run(run()), oracle, texts)


def test_openai_error_classes(live):
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as error:
        client.embeddings.create(model="elmo", input="word " * 600)  # over --max-input-tokens 512
    assert error.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="elmo", input=["a"] * 2049)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="elmo", input="a", dimensions=3)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{live.url}/v1", api_key="wrong", max_retries=0).embeddings.create(model="e", input="a")
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


# ---- huggingface_hub ----------------------------------------------------------------------------------


def test_huggingface_inference_client_root_embed_and_embed_all(live, oracle):
    from huggingface_hub import InferenceClient

    text = "the bank of the river"
    root = InferenceClient(model=live.url, token=KEY).feature_extraction(text)
    embed = InferenceClient(model=f"{live.url}/embed", token=KEY).feature_extraction(text)
    close(root, oracle, [text])
    assert np.array_equal(root, embed)
    tokens = InferenceClient(model=f"{live.url}/embed_all", token=KEY).feature_extraction(text)
    assert tokens.shape == (1, 5, oracle.dim)
    assert np.array_equal(tokens[0], oracle.embed([text.split()])[0][-1])
    left = InferenceClient(model=f"{live.url}/embed_all", token=KEY).feature_extraction(
        " ".join(["w"] * 510 + ["a", "b", "c"]), truncate=True, truncation_direction="left")
    assert left.shape == (1, 512, oracle.dim)


# ---- langchain-openai ---------------------------------------------------------------------------------


def test_langchain_openai_embeddings_with_the_default_chunk_size(live, oracle):
    langchain_openai = pytest.importorskip("langchain_openai")

    embeddings = langchain_openai.OpenAIEmbeddings(model="elmo", base_url=f"{live.url}/v1", api_key=KEY,
                                                   check_embedding_ctx_length=False)
    assert embeddings.chunk_size == 1000
    texts = random_texts(1200, seed=5, max_len=3)  # two requests: 1000 (more than the old limit of 64) and 200
    vectors = embeddings.embed_documents(texts)
    assert len(vectors) == 1200
    close([vectors[0], vectors[999], vectors[1199]], oracle, [texts[0], texts[999], texts[1199]])
    close([embeddings.embed_query(texts[7])], oracle, [texts[7]])


# ---- llama-index --------------------------------------------------------------------------------------


def test_llama_index_text_embeddings_inference_and_openai_embedding(live, oracle):
    tei = pytest.importorskip("llama_index.embeddings.text_embeddings_inference")
    llama_openai = pytest.importorskip("llama_index.embeddings.openai")

    texts = random_texts(130, seed=6, max_len=3)
    client = tei.TextEmbeddingsInference(model_name="elmo", base_url=live.url, auth_token=KEY)
    vectors = client.get_text_embedding_batch(texts)
    assert len(vectors) == 130
    close([vectors[0], vectors[129]], oracle, [texts[0], texts[129]])

    embedding = llama_openai.OpenAIEmbedding(api_base=f"{live.url}/v1", api_key=KEY)
    assert embedding.embed_batch_size == 100
    vectors = embedding.get_text_embedding_batch(texts)
    assert len(vectors) == 130
    close([vectors[5], vectors[128]], oracle, [texts[5], texts[128]])
