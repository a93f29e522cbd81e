"""The HTTP API (FastAPI): text-embeddings-inference's routes, the OpenAI-compatible embeddings route,
and elmokit's own per-layer route, over one representation and one batching worker.

    POST /embed, POST /    TEI: a pooled vector per input (mean of one layer over tokens), normalised
    POST /embed_all        TEI: every token's vector of one layer ([[[float]]]; the tokens on request)
    POST /tokenize         TEI: the tokens the server cuts each text into, with character offsets
    POST /v1/embeddings    OpenAI (also /embeddings): unit-length mean of the top layer, float or base64
    GET  /v1/models        OpenAI: the served model
    POST /v1/elmo          elmokit: per-layer per-token vectors, a layer selection or a scalar mix
    GET  /health (and HEAD), /info, /metrics (Prometheus), /openapi.json, /docs
    GET  /                 the explorer page (static files in ``serve/static/explorer``), over
    GET  /v1/explorer, POST /v1/explorer/neighbors, /similarity, /projection, GET /v1/explorer/layer-weights

Every vector comes from ``representation.embed`` through ``Batcher``; the per-token vectors a
client receives are bit-identical to ``Embedder.embed`` of its input alone (float32 values written
as the shortest decimal that reads back to the same float32, ``elmokit.serve.encode``). Limits and
the shape of errors: ``elmokit.serve.errors``; the settings: ``ServeConfig``.

Safety: every request is checked against the limits before any work (its inputs, tokens per input
and in all, layers, positions, and the estimated size of its answer); bodies must be JSON (415
otherwise, so a web page cannot post one without a CORS preflight, and no CORS is answered unless
``cors_origins`` says so); the Host header must be one of ``allowed_hosts`` (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import ipaddress
import json
import logging
import time
from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import FileResponse, Response

from elmokit.serve import explorer
from elmokit.serve.batcher import Batcher, QueueFull, ShuttingDown
from elmokit.serve.config import WILDCARD_HOSTS, ServeConfig
from elmokit.serve.encode import NonFinite, dumps
from elmokit.serve.errors import ServeError, error_response
from elmokit.serve.metrics import ServerMetrics
from elmokit.serve.schemas import (
    ElmoRequest,
    ElmoResponse,
    EmbedAllRequest,
    EmbedRequest,
    ExplorerInfo,
    ExplorerLayerWeightsResponse,
    ExplorerNeighborsRequest,
    ExplorerNeighborsResponse,
    ExplorerProjectionRequest,
    ExplorerProjectionResponse,
    ExplorerSimilarityRequest,
    ExplorerSimilarityResponse,
    OpenAIEmbeddingRequest,
    OpenAIEmbeddingResponse,
    OpenAIError,
    OpenAIModelList,
    TEIError,
    TokenInfo,
    TokenizeRequest,
    TokensAndEmbeddings,
)
from elmokit.text.corpus import Tokenizer

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static" / "explorer"
# The explorer page's files: path -> (file, media type).
PAGE_FILES = {"/": ("index.html", "text/html; charset=utf-8"),
              "/explorer/explorer.js": ("explorer.js", "text/javascript; charset=utf-8"),
              "/explorer/explorer.css": ("explorer.css", "text/css; charset=utf-8")}
# Answered to GET and HEAD without the API key: load balancers probe /health; the page's files hold
# no data (the page asks for the key and sends it with each API call).
OPEN_PATHS = ("/health", *PAGE_FILES)
_TEI_ERRORS = {code: {"model": TEIError} for code in (400, 401, 408, 413, 415, 422, 429, 500, 503, 504)}
_OPENAI_ERRORS = {code: {"model": OpenAIError} for code in (400, 401, 408, 413, 415, 429, 500, 503, 504)}
# The estimate of an answer's size: bytes per number written (a float32's shortest form is at most
# 15 characters, "-1.2345678e-05", and its comma).
BYTES_PER_NUMBER = 16
# Answers of at most this many numbers are written on the event loop (well under a millisecond).
INLINE_NUMBERS = 8192


class RequestCut(Exception):
    """The server stopped before this accepted request was answered."""


class Stopping:
    """The shutdown as the app sees it: ``begin`` (called by the server the moment it stops accepting)
    gives the accepted requests ``timeout_s``; then every request still waiting is cut (answered 503)
    and counted in ``cut``."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.begun = False
        self.past_deadline = False
        self.cut = 0
        self._waiting: set[asyncio.Future] = set()

    def begin(self) -> None:
        if not self.begun:
            self.begun = True
            asyncio.get_running_loop().call_later(self.timeout_s, self._cut_waiting)

    def _cut_waiting(self) -> None:
        self.past_deadline = True
        for waiter in list(self._waiting):
            self._cut(waiter)

    def _cut(self, waiter: asyncio.Future) -> None:
        if not waiter.done():
            waiter.set_exception(RequestCut())
            self.cut += 1

    def watch(self, waiter: asyncio.Future) -> None:
        self._waiting.add(waiter)
        if self.past_deadline:
            self._cut(waiter)

    def forget(self, waiter: asyncio.Future) -> None:
        self._waiting.discard(waiter)


def create_app(representation, config: ServeConfig | None = None, *, spec: dict | None = None,
               index=None, task_models: Sequence[explorer.TaskLayerWeights] = (),
               initial_states: dict | None = None) -> FastAPI:
    """The app serving ``representation`` (anything with ``name``, ``num_layers``, ``dim``, ``embed``).

    ``spec``: the representation's spec (``elmokit.representation``), shown by /info. The batching
    worker starts with the app's lifespan and, at shutdown, finishes every accepted request.
    The app's ``state`` holds ``batcher``, ``metrics`` and ``config``.

    The explorer page: ``index`` (a ``NeighborIndex`` built with this representation) feeds its
    neighbour and projection views, ``task_models`` (``explorer.read_task_layer_weights``) its
    layer-weights view; without them those views say so. ``initial_states``: the same model started
    from other initial LSTM states, by name (``{"warm": Embedder.load(..., initial_state="warm")}``),
    which a ``/v1/elmo`` request may choose with ``initial_state``.
    """
    config = config or ServeConfig()
    if index is not None:
        index.check_representation(representation)  # NeighborIndexError naming the folder
        index.occurrences_of("")  # build the word-form table now, not inside concurrent requests
    own_state = getattr(representation, "initial_state", None)
    variants = {state: rep for state, rep in (initial_states or {}).items() if state != own_state}
    for state, rep in variants.items():
        if (rep.num_layers, rep.dim) != (representation.num_layers, representation.dim):
            raise ValueError(f"initial state {state!r}: {rep.name} has {rep.num_layers} layers of {rep.dim}, "
                             f"not the {representation.num_layers} of {representation.dim} of {representation.name}")
    # A table trained on lowercased text (StaticVectors.lowercase) is queried in lowercase, as its evaluators do.
    tokenizer = Tokenizer(kind=config.tokenizer, lowercase=getattr(representation, "lowercase", False) is True)
    batcher_holder: list[Batcher] = []
    metrics = ServerMetrics(lambda: batcher_holder[0].depth if batcher_holder else 0)
    # A batch of at most one biLM call's sentences (Embedder's batch_size): never a ragged last chunk.
    batch_size = getattr(representation, "batch_size", None)
    batcher = Batcher(representation, max_batch_tokens=config.max_batch_tokens, max_wait_ms=config.max_wait_ms,
                      max_batch_sentences=batch_size if isinstance(batch_size, int) and batch_size > 0 else None,
                      max_queue=config.max_queue, on_batch=metrics.observe_batch, variants=variants)
    batcher_holder.append(batcher)
    num_layers, dim, name = int(representation.num_layers), int(representation.dim), str(representation.name)

    stopping = Stopping(config.shutdown_timeout_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        logger.info("elmokit serve: %s ready (%d layers of %d)", name, num_layers, dim)
        yield
        # uvicorn has stopped accepting and the requests in flight are answered (or were cut at the
        # shutdown timeout, 503); stop the worker (a batch it is inside of cannot be interrupted).
        stopping.begin()
        stopped = await anyio.to_thread.run_sync(batcher.close, 1.0 if stopping.cut else config.shutdown_timeout_s)
        if stopping.cut:
            logger.warning("elmokit serve: %d accepted request(s) were not answered within the shutdown timeout "
                           "(--shutdown-timeout-s %g) and were answered 503", stopping.cut, config.shutdown_timeout_s)
        else:
            logger.info("elmokit serve: every accepted request was answered; batcher %s",
                        "stopped" if stopped else "still inside a batch")

    from elmokit import __version__

    app = FastAPI(title="elmokit", version=__version__, lifespan=lifespan,
                  description="Deep contextualized word representations over HTTP: text-embeddings-inference routes, "
                  "an OpenAI-compatible /v1/embeddings, and elmokit's per-layer /v1/elmo. See docs/serve.md.")
    app.state.batcher, app.state.metrics, app.state.config, app.state.stopping = batcher, metrics, config, stopping

    # ---- errors: every one as JSON in the route's style -----------------------------------------

    @app.exception_handler(ServeError)
    async def _serve_error(request: Request, error: ServeError):
        return error_response(request.url.path, error)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError):
        return error_response(request.url.path, _validation_error(error))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException):
        kind = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "invalid_request")
        return error_response(request.url.path, ServeError(error.status_code, str(error.detail), kind,
                                                           headers=dict(error.headers or {})))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception):
        return unexpected_error(request.url.path, error)

    # ---- the shared steps --------------------------------------------------------------------------

    def too_many(what: str, count: int, limit: int, flag: str, param: str | None, code: str, fix: str) -> ServeError:
        return ServeError(422, f"{count} {what} in one request, more than the limit of {limit} ({flag}); {fix}",
                          "validation", param=param, code=code)

    def texts_of(inputs: Any, param: str) -> list[str]:
        if isinstance(inputs, str):
            return [inputs]
        if not inputs:
            raise ServeError(400, f"`{param}` is an empty list; send a text or a list of texts", "empty", param=param)
        if not all(isinstance(t, str) for t in inputs):
            raise ServeError(400, f"`{param}` holds token ids; this server reads text (ELMo spells words by characters)",
                             "validation", param=param, code="token_ids_not_supported")
        if len(inputs) > config.max_inputs:
            raise too_many("inputs", len(inputs), config.max_inputs, "--max-inputs", param, "too_many_inputs",
                           "split the request")
        return list(inputs)

    def checked(sentences: list[list[str]], truncate: bool, param: str, direction: str = "Right",
                openai: bool = False, allow_empty: bool = False) -> list[list[str]]:
        """The sentences within the limits (cut where ``truncate`` asks), or the 422 naming the limit."""
        if len(sentences) > config.max_inputs:
            raise too_many("inputs", len(sentences), config.max_inputs, "--max-inputs", param, "too_many_inputs",
                           "split the request")
        out, limit = [], config.max_input_tokens
        for i, tokens in enumerate(sentences):
            if not tokens and not allow_empty:
                raise ServeError(400, f"`{param}` item {i} has no tokens (empty or only spaces); every input needs at "
                                 "least one token", "empty", param=param)
            if len(tokens) > limit:
                if openai:  # OpenAI's context-length error: a 400 there (errors.error_response)
                    raise ServeError(422, f"`{param}` item {i} has {len(tokens)} tokens, more than this model's maximum "
                                     f"context length of {limit} tokens (--max-input-tokens); shorten or split the "
                                     "text (this route does not truncate)", "validation", param=param,
                                     code="context_length_exceeded")
                if not truncate:
                    raise ServeError(422, f"`{param}` item {i} has {len(tokens)} tokens, more than the limit of "
                                     f"{limit} (--max-input-tokens); send truncate: true to cut it", "validation",
                                     param=param, code="too_many_tokens")
                tokens = tokens[-limit:] if direction.lower() == "left" else tokens[:limit]
            out.append(tokens)
        total = sum(len(tokens) for tokens in out)
        if total > config.max_request_tokens:
            raise too_many("tokens", total, config.max_request_tokens, "--max-request-tokens", param,
                           "too_many_request_tokens", "send fewer or shorter texts per request")
        return out

    def tokenised(inputs: Any, truncate: bool, param: str, direction: str = "Right", openai: bool = False):
        return checked([tokenizer(text) for text in texts_of(inputs, param)], truncate, param, direction, openai)

    def answer_fits(numbers: int, extra_bytes: int = 0, what: str = "") -> None:
        """Refuse (before any work) an answer estimated larger than --max-response-bytes."""
        estimate = numbers * BYTES_PER_NUMBER + extra_bytes
        if estimate > config.max_response_bytes:
            raise ServeError(422, f"the answer would be about {estimate / 1e6:.1f} MB ({numbers} numbers{what}), more "
                             f"than the limit of {config.max_response_bytes} bytes (--max-response-bytes); ask for "
                             "fewer texts, tokens or layers per request", "validation", code="response_too_large")

    def no_prompts(prompt_name: str | None) -> None:
        if prompt_name is not None:
            raise ServeError(422, f"`prompt_name` {prompt_name!r}: this model has no prompts; leave it out",
                             "validation", param="prompt_name", code="prompt_not_found")

    def same_dimensions(dimensions: int | None) -> None:
        if dimensions is not None and dimensions != dim:
            raise ServeError(422, f"`dimensions` {dimensions}: this model gives vectors of {dim} and was not trained to "
                             "be shortened (Matryoshka); leave it out", "validation", param="dimensions",
                             code="invalid_dimensions")

    def layer_index(layer: int, param: str = "layer") -> int:
        if not -num_layers <= layer < num_layers:
            raise ServeError(400, f"`{param}` {layer}: the model has {num_layers} layers (0..{num_layers - 1}, or "
                             f"-1 for the top)", "validation", param=param, code="invalid_layer")
        return layer % num_layers

    def layer_list(layers: list[int] | None, param: str = "layers", distinct: bool = False) -> list[int]:
        if layers is not None and len(layers) > config.max_layers:
            raise too_many("layers", len(layers), config.max_layers, "--max-layers", param, "too_many_layers",
                           f"the model has {num_layers}")
        out = [layer_index(i, param) for i in (layers or range(num_layers))]
        if distinct and len(set(out)) < len(out):
            raise ServeError(400, f"`{param}` names a layer twice; name each once", "validation", param=param,
                             code="repeated_layer")
        return out

    def pieces_of(sentences: list[list[str]]) -> list[list[list[str]]]:
        """A request's sentences in pieces of at most --max-batch-tokens (one sentence always fits)."""
        pieces, piece, tokens = [], [], 0
        for sentence in sentences:
            if piece and tokens + len(sentence) > config.max_batch_tokens:
                pieces.append(piece)
                piece, tokens = [], 0
            piece.append(sentence)
            tokens += len(sentence)
        return [*pieces, piece] if piece else pieces

    async def embedded(sentences: list[list[str]], variant: str | None = None) -> list[np.ndarray]:
        pieces = pieces_of(sentences)
        if len(pieces) > config.max_queue:  # could never be queued: refuse rather than answer 429 forever
            raise too_many("batches", len(pieces), config.max_queue, "--max-queue", None, "too_many_batches",
                           "send fewer tokens per request")
        try:
            futures = batcher.submit_many(pieces, variant)
        except QueueFull as full:
            raise ServeError(429, str(full), "overloaded", code="queue_full",
                             headers={"Retry-After": str(full.retry_after)}) from None
        except ShuttingDown as stopping_now:
            raise ServeError(503, str(stopping_now), "unhealthy", code="shutting_down") from None
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        left = [len(futures)]

        def arrived() -> None:
            left[0] -= 1
            if left[0] == 0 and not waiter.done():
                waiter.set_result(None)

        def done(_future) -> None:  # in the worker thread
            try:
                loop.call_soon_threadsafe(arrived)
            except RuntimeError:  # the loop has closed: nobody waits any more
                pass

        def timed_out() -> None:
            if not waiter.done():
                waiter.set_exception(TimeoutError())

        for future in futures:
            future.add_done_callback(done)
        timer = loop.call_later(config.request_timeout_s, timed_out)  # one timer: cheaper than wait_for(shield(...))
        stopping.watch(waiter)
        try:
            await waiter
        except TimeoutError:
            raise ServeError(504, f"the request was not answered within {config.request_timeout_s:g} s "
                             "(--request-timeout-s); retry later or send fewer texts", "timeout", code="timeout") from None
        except RequestCut:
            raise ServeError(503, "the server stopped before this request was answered (--shutdown-timeout-s); retry "
                             "on a running server", "unhealthy", code="shutting_down") from None
        finally:
            timer.cancel()
            stopping.forget(waiter)
            for future in futures:
                future.cancel()  # leaves its batch if the worker has not taken it (no-op once done)
        arrays = []
        for future in futures:
            error = future.exception()
            if error is not None:  # the model failed on this batch
                raise ServeError(500, f"the model failed: {type(error).__name__}: {error}", "backend")
            arrays.extend(future.result())
        return arrays

    async def json_response(build, numbers: int = INLINE_NUMBERS + 1) -> Response:
        """Turn arrays into JSON bytes: float32 in its shortest form, non-ASCII escaped, and never NaN or
        Infinity (a 500 naming the cause instead). Large answers (milliseconds of work) are written off the
        event loop; small ones (``numbers`` at most INLINE_NUMBERS) on it, which is cheaper than the thread hop."""
        try:
            if numbers <= INLINE_NUMBERS:
                body = dumps(build())
            else:
                body = await anyio.to_thread.run_sync(lambda: dumps(build()))
        except NonFinite as error:
            raise ServeError(500, f"the answer holds a value that is not finite ({error}); JSON cannot carry it. The "
                             "model or the request's scale (gamma) overflows float32", "backend",
                             code="non_finite") from None
        return Response(body, media_type="application/json")

    def pooled(array: np.ndarray, layer: int, normalize: bool) -> np.ndarray:
        vector = array[layer].mean(axis=0)  # (dim,) float32: the mean over the text's tokens
        if normalize:
            norm = np.linalg.norm(vector)
            if norm > 0:
                vector = vector / norm
        return vector.astype(np.float32, copy=False)

    # ---- text-embeddings-inference routes -----------------------------------------------------------

    async def embed(body: EmbedRequest):
        layer = layer_index(body.layer)
        no_prompts(body.prompt_name)
        same_dimensions(body.dimensions)
        texts = texts_of(body.inputs, "inputs")
        answer_fits(len(texts) * dim)
        arrays = await embedded(checked([tokenizer(t) for t in texts], body.truncate, "inputs", body.truncation_direction))
        return await json_response(lambda: [pooled(a, layer, body.normalize) for a in arrays], len(arrays) * dim)

    for embed_path in ("/embed", "/"):  # TEI serves its root as /embed (InferenceClient(model=URL) posts there)
        app.add_api_route(embed_path, embed, methods=["POST"], response_model=list[list[float]], responses=_TEI_ERRORS,
                          tags=["text-embeddings-inference"], include_in_schema=embed_path == "/embed",
                          summary="A pooled vector per input: the mean over tokens of one layer (default the top)")

    @app.post("/embed_all", response_model=list[list[list[float]]] | list[TokensAndEmbeddings], responses=_TEI_ERRORS,
              tags=["text-embeddings-inference"], summary="Every token's vector of one layer (with the tokens on request)")
    async def embed_all(body: EmbedAllRequest):
        layer = layer_index(body.layer)
        no_prompts(body.prompt_name)
        sentences = tokenised(body.inputs, body.truncate, "inputs", body.truncation_direction)
        tokens = sum(len(s) for s in sentences)
        answer_fits(tokens * dim, sum(len(t) + 8 for s in sentences for t in s) if body.return_tokens else 0)
        arrays = await embedded(sentences)
        if body.return_tokens:
            return await json_response(lambda: [{"tokens": s, "embeddings": a[layer]} for s, a in zip(sentences, arrays)])
        return await json_response(lambda: [a[layer] for a in arrays])

    @app.post("/tokenize", response_model=list[list[TokenInfo]], responses=_TEI_ERRORS,
              tags=["text-embeddings-inference"], summary="The tokens of each text, with character offsets")
    async def tokenize(body: TokenizeRequest):
        no_prompts(body.prompt_name)
        texts = texts_of(body.inputs, "inputs")
        sentences = checked([tokenizer(text) for text in texts], False, "inputs", allow_empty=True)
        # each token: {"text": ..., "start": n, "stop": n, "special": false} (about 50 bytes and its text, escaped)
        answer_fits(0, sum(56 + 6 * len(t) for s in sentences for t in s), " of token records")
        return await json_response(lambda: [_spans(text, tokens, tokenizer) for text, tokens in zip(texts, sentences)])

    @app.get("/health", tags=["service"], summary="200 while serving, 503 while shutting down (HEAD too)")
    async def health():
        if batcher.closed or not batcher.alive:
            raise ServeError(503, "the server is shutting down" if batcher.closed else "the batching worker is not running",
                             "unhealthy")
        return {"status": "ok"}

    app.add_api_route("/health", health, methods=["HEAD"], include_in_schema=False)

    @app.get("/info", tags=["service"], summary="The model, its shape, the limits and the version")
    async def info():
        precision = getattr(getattr(representation, "bilm", None), "precision", "fp32")
        return {
            "model_id": name,
            "model_dtype": {"fp32": "float32", "bf16": "bfloat16"}.get(precision, precision),
            "model_type": {"embedding": {"pooling": "mean"}},
            "spec": spec,
            "fingerprint": getattr(representation, "fingerprint", None),
            "num_layers": num_layers,
            "dim": dim,
            "initial_state": getattr(representation, "initial_state", None),
            "tokenizer": tokenizer.to_dict(),
            "max_input_length": config.max_input_tokens,
            "max_client_batch_size": config.max_inputs,
            "max_batch_tokens": config.max_batch_tokens,
            "max_concurrent_requests": config.max_queue,
            "auto_truncate": False,
            "limits": config.limits(),
            "version": __version__,
            "router": "elmokit",
        }

    @app.get("/metrics", tags=["service"], summary="Prometheus metrics (text exposition format)")
    async def prometheus():
        return Response(metrics.render(), media_type=metrics.content_type)

    # ---- OpenAI-compatible --------------------------------------------------------------------------

    async def openai_embeddings(body: OpenAIEmbeddingRequest):
        same_dimensions(body.dimensions)  # a 400 on this route (errors.error_response)
        texts = texts_of(body.input, "input")
        answer_fits(len(texts) * dim)
        sentences = checked([tokenizer(t) for t in texts], False, "input", openai=True)
        arrays = await embedded(sentences)
        as_base64 = body.encoding_format == "base64"

        def build():
            data = []
            for i, array in enumerate(arrays):
                vector = pooled(array, num_layers - 1, True)
                if as_base64 and not np.isfinite(vector).all():
                    raise NonFinite(f"input {i}'s vector")
                encoded = base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii") if as_base64 else vector
                data.append({"object": "embedding", "index": i, "embedding": encoded})
            tokens = sum(len(s) for s in sentences)
            return {"object": "list", "data": data, "model": name, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

        return await json_response(build, len(arrays) * dim)

    for openai_path in ("/v1/embeddings", "/embeddings"):
        app.add_api_route(openai_path, openai_embeddings, methods=["POST"], response_model=OpenAIEmbeddingResponse,
                          responses=_OPENAI_ERRORS, tags=["openai"], include_in_schema=openai_path == "/v1/embeddings",
                          summary="OpenAI-compatible embeddings: the unit-length mean of the top layer per input")

    started_at = int(time.time())

    def model_card() -> dict:
        return {"id": name, "object": "model", "created": started_at, "owned_by": "elmokit"}

    @app.get("/v1/models", response_model=OpenAIModelList, responses=_OPENAI_ERRORS, tags=["openai"],
             summary="OpenAI-compatible: the one model served")
    async def openai_models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}", responses=_OPENAI_ERRORS, tags=["openai"], summary="OpenAI-compatible: a model")
    async def openai_model(model_id: str):
        if model_id != name:
            raise ServeError(404, f"no model {model_id!r}: this server serves {name!r} (GET /v1/models)", "not_found",
                             param="model", code="model_not_found")
        return model_card()

    # ---- elmokit's own ------------------------------------------------------------------------------

    @app.post("/v1/elmo", response_model=ElmoResponse, responses=_TEI_ERRORS, tags=["elmokit"],
              summary="Per-layer per-token vectors: all layers, a selection, or a scalar mix")
    async def elmo(body: ElmoRequest):
        if (body.inputs is None) == (body.tokens is None):
            raise ServeError(400, "give `inputs` (text the server tokenises) or `tokens` (tokenised sentences), one of them",
                             "validation", param="inputs")
        if body.mix is not None and body.layers is not None:
            raise ServeError(400, "give `layers` or `mix`, not both (a mix covers every layer)", "validation", param="mix")
        weights = None
        if body.mix is not None:
            finite = (len(body.mix) == num_layers and all(np.isfinite(body.mix))
                      and abs(body.gamma) <= float(np.finfo(np.float32).max))
            if not finite:
                got = f"{len(body.mix)}" if len(body.mix) != num_layers else "a weight, or a gamma that float32 cannot hold"
                raise ServeError(400, f"`mix` needs {num_layers} finite weights (one per layer) and a gamma finite in "
                                 f"float32 (|gamma| < 3.4e38); got {got}", "validation", param="mix", code="invalid_mix")
            w = np.asarray(body.mix, dtype=np.float64)
            weights = np.exp(w - w.max())
            weights /= weights.sum()  # softmax, as ScalarMix
        layers = None if weights is not None else layer_list(body.layers)
        if body.tokens is not None:
            if not body.tokens:
                raise ServeError(400, "`tokens` is an empty list; send a list of tokenised sentences", "empty", param="tokens")
            if len(body.tokens) > config.max_inputs:
                raise too_many("inputs", len(body.tokens), config.max_inputs, "--max-inputs", "tokens",
                               "too_many_inputs", "split the request")
            sentences = checked([list(s) for s in body.tokens], body.truncate, "tokens", body.truncation_direction)
        else:
            sentences = tokenised(body.inputs, body.truncate, "inputs", body.truncation_direction)
        tokens = sum(len(s) for s in sentences)
        answer_fits(tokens * dim * (1 if layers is None else len(layers)), sum(len(t) + 8 for s in sentences for t in s))
        state = body.initial_state if body.initial_state is not None else own_state
        variant = None if state == own_state else state
        if variant is not None and variant not in variants:
            served = (f"starts every sentence from the {own_state!r} state only; start it with --per-request-state "
                      "(and, for 'warm', a model folder with warm_state.safetensors from `elmokit warm-state`) to "
                      "let requests choose" if own_state is not None else f"serves {name}, which has no LSTM state; "
                      "leave `initial_state` out")
            raise ServeError(400, f"`initial_state` {state!r}: this server {served}", "validation",
                             param="initial_state", code="initial_state_unavailable")
        arrays = await embedded(sentences, variant)

        def build():
            data = []
            for i, (tokens, array) in enumerate(zip(sentences, arrays)):
                item: dict[str, Any] = {"index": i, "tokens": tokens}
                if weights is not None:
                    mixed = np.float32(body.gamma) * np.tensordot(weights.astype(np.float32), array, axes=1)
                    item["mixed"] = mixed.astype(np.float32)
                else:
                    item["layers"] = array[layers]
                data.append(item)
            return {"model": name, "num_layers": num_layers, "dim": dim, "initial_state": state, "layers": layers,
                    "mix_weights": None if weights is None else weights.tolist(),
                    "gamma": body.gamma if weights is not None else None, "data": data}

        return await json_response(build)

    # ---- the explorer page and its API --------------------------------------------------------------

    task_weights = [t.to_dict() for t in task_models]

    def page_file(path: str):
        filename, media_type = PAGE_FILES[path]

        async def send_file():
            return FileResponse(STATIC_DIR / filename, media_type=media_type, headers={"Cache-Control": "no-cache"})

        return send_file

    for page_path in PAGE_FILES:
        app.add_api_route(page_path, page_file(page_path), methods=["GET"], include_in_schema=False)

    def no_index() -> ServeError:
        return ServeError(404, "no neighbour index is loaded: start the server with --index DIR (built with "
                          "`elmokit neighbors index --model M --corpus FILE --out DIR` and the same model)",
                          "not_configured", code="no_index")

    def one_sentence(inputs: str | None, tokens: list[str] | None, truncate: bool = False) -> list[str]:
        if (inputs is None) == (tokens is None):
            raise ServeError(400, "give `inputs` (text the server tokenises) or `tokens` (a tokenised sentence), "
                             "one of them", "validation", param="inputs")
        if tokens is not None:
            return checked([list(tokens)], truncate, "tokens")[0]
        return tokenised(inputs, truncate, "inputs")[0]

    def position_in(tokens: list[str], position: int, param: str = "position") -> int:
        if not -len(tokens) <= position < len(tokens):
            raise ServeError(400, f"`{param}` {position} is outside the sentence ({len(tokens)} tokens: "
                             + " ".join(f"{i}:{t}" for i, t in enumerate(tokens)) + ")", "validation", param=param,
                             code="invalid_position")
        return position % len(tokens)

    @app.get("/v1/explorer", response_model=ExplorerInfo, responses=_TEI_ERRORS, tags=["explorer"],
             summary="What the explorer page can show: the model, the --index and the --task-model folders")
    async def explorer_info():
        index_info = None
        if index is not None:
            index_info = {"representation": index.representation, "n_sentences": len(index.sentences),
                          "n_tokens": len(index), "num_layers": index.num_layers, "dim": index.dim,
                          "dtype": str(index.meta.get("dtype", ""))}
        states = [own_state, *variants] if own_state is not None else []
        return {"model": name, "num_layers": num_layers, "dim": dim, "tokenizer": tokenizer.kind, "index": index_info,
                "task_models": [t["name"] for t in task_weights], "initial_states": states,
                "api_key_required": config.api_key is not None}

    @app.post("/v1/explorer/neighbors", response_model=ExplorerNeighborsResponse, responses=_TEI_ERRORS,
              tags=["explorer"], summary="Per layer, each word's nearest occurrences in context in the --index "
              "(Peters et al. 2018, Table 4)")
    async def explorer_neighbors(body: ExplorerNeighborsRequest):
        if body.positions is not None and len(body.positions) > config.max_positions:
            raise too_many("positions", len(body.positions), config.max_positions, "--max-positions", "positions",
                           "too_many_positions", "ask for fewer words")
        layers = layer_list(body.layers, distinct=True)
        tokens = one_sentence(body.inputs, body.tokens)
        positions = [position_in(tokens, p, "positions") for p in (body.positions or range(len(tokens)))]
        if len(set(positions)) < len(positions):
            raise ServeError(400, "`positions` names a word twice; name each once", "validation", param="positions",
                             code="repeated_position")
        if len(positions) > config.max_positions:
            raise too_many("words to search", len(positions), config.max_positions, "--max-positions", "positions",
                           "too_many_positions", "give `positions`")
        if index is None:
            raise no_index()
        # each hit: its score, place and context (about 100 bytes and 2 x window tokens of some 8 bytes)
        answer_fits(0, len(layers) * len(positions) * body.top * (100 + 16 * body.window), " of neighbour records")
        array = (await embedded([tokens]))[0]  # (L, n, D)

        def search():
            out = []
            for layer in layers:
                words = []
                for position in positions:
                    hits = index.query(layer, array[layer, position], top=body.top,
                                       same_form=tokens[position] if body.same_form else None,
                                       exclude=(tokens, position))
                    words.append({"position": position, "word": tokens[position],
                                  "neighbors": [{"score": hit.score, "sentence": hit.sentence, "token": hit.token,
                                                 **explorer.hit_context(hit.tokens, hit.token, body.window)}
                                                for hit in hits]})
                out.append({"layer": layer, "words": words})
            return {"model": name, "tokens": tokens, "top": body.top, "layers": out}

        return await json_response(search)

    @app.post("/v1/explorer/similarity", response_model=ExplorerSimilarityResponse, responses=_TEI_ERRORS,
              tags=["explorer"], summary="Token-by-token cosine similarity of two sentences, per layer")
    async def explorer_similarity(body: ExplorerSimilarityRequest):
        layers = layer_list(body.layers, distinct=True)
        sentences = []
        for param, value in (("a", body.a), ("b", body.b)):
            sentences += checked([list(value)], False, param) if isinstance(value, list) else tokenised(value, False, param)
        answer_fits(len(layers) * len(sentences[0]) * len(sentences[1]))
        a, b = await embedded(sentences)  # (L, n1, D), (L, n2, D)
        return await json_response(lambda: {
            "model": name, "tokens_a": sentences[0], "tokens_b": sentences[1], "layers": layers,
            "cosine": [explorer.cosine_matrix(a[j], b[j]) for j in layers]})

    @app.post("/v1/explorer/projection", response_model=ExplorerProjectionResponse, responses=_TEI_ERRORS,
              tags=["explorer"], summary="A word's occurrences in the --index on two principal components, "
              "coloured by k-means")
    async def explorer_projection(body: ExplorerProjectionRequest):
        if index is None:
            raise no_index()
        layer = layer_index(body.layer)
        query_tokens, position = None, None
        if body.inputs is not None or body.tokens is not None:
            query_tokens = one_sentence(body.inputs, body.tokens)
            if body.position is None:
                raise ServeError(400, "`position` is missing: which word of the sentence to place", "validation",
                                 param="position")
            position = position_in(query_tokens, body.position)
        word = body.word if body.word is not None else (query_tokens[position] if query_tokens else None)
        if not word:
            raise ServeError(400, "give `word`, or a sentence (`inputs` or `tokens`) and the `position` of the word",
                             "validation", param="word")
        rows = index.occurrences_of(word)
        shown = rows[: body.max_points]
        query_vector = (await embedded([query_tokens]))[0][layer, position] if query_tokens is not None else None

        def project():
            vectors = np.asarray(index.layers[layer][shown], dtype=np.float64)  # (n, D), unit rows
            projection = explorer.pca_2d(vectors)
            labels, centroids = explorer.kmeans(vectors, body.clusters, seed=body.seed)
            points = []
            for row, (x, y), cluster in zip(shown.tolist(), projection.coords.tolist(), labels.tolist()):
                sentence, token = index.locate(row)
                context = explorer.hit_context(index.sentences[sentence], token, body.window)
                points.append({"x": x, "y": y, "cluster": cluster, "sentence": sentence, "token": token,
                               "left": context["left"], "word": context["word"], "right": context["right"]})
            query = None
            if query_vector is not None:
                unit = explorer.unit_rows(query_vector[None])  # as the index stores its rows
                (x, y), = projection.project(unit).tolist()
                cluster = int(np.argmin(explorer.squared_distances(unit, centroids)[0])) if len(centroids) else 0
                query = {"x": x, "y": y, "cluster": cluster, "tokens": query_tokens, "position": position}
            return {"model": name, "word": word, "layer": layer, "n_occurrences": len(rows),
                    "truncated": len(rows) > len(shown), "clusters": len(centroids),
                    "explained_variance": projection.explained.tolist(), "points": points, "query": query}

        return await json_response(project)

    @app.get("/v1/explorer/layer-weights", response_model=ExplorerLayerWeightsResponse, responses=_TEI_ERRORS,
             tags=["explorer"], summary="The learned layer weights (softmax(w), gamma) of the --task-model folders")
    async def explorer_layer_weights():
        return {"num_layers": num_layers, "task_models": task_weights}

    known = {route.path for route in app.routes}
    # The embedding routes' fast path (``_Guard``): their body model and function, called directly.
    fast_routes = {"/embed": (EmbedRequest, embed), "/": (EmbedRequest, embed), "/embed_all": (EmbedAllRequest, embed_all),
                   "/tokenize": (TokenizeRequest, tokenize), "/v1/embeddings": (OpenAIEmbeddingRequest, openai_embeddings),
                   "/embeddings": (OpenAIEmbeddingRequest, openai_embeddings), "/v1/elmo": (ElmoRequest, elmo)}
    app.add_middleware(_Guard, config=config, metrics=metrics, known_paths=known, fast_routes=fast_routes)
    if config.cors_origins:  # outermost: it answers the browsers' preflights itself
        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"], max_age=600)
    return app


def unexpected_error(path: str, error: Exception) -> Response:
    """The 500 for an error no route expected (logged with its traceback)."""
    logger.exception("elmokit serve: unexpected error on %s", path, exc_info=error)
    return error_response(path, ServeError(500, f"internal error: {type(error).__name__}: {error}", "backend"))


def _spans(text: str, tokens: list[str], tokenizer: Tokenizer | None = None) -> list[dict]:
    """Each token with its character offsets in ``text``, found left to right; never past its end.

    A lowercasing tokenizer's tokens need not occur in the text as written: their places are those of
    the same tokenizer's tokens without lowercasing (the same cuts), when it gives as many."""
    places = tokens
    if tokenizer is not None and tokenizer.lowercase:
        from dataclasses import replace

        as_written = replace(tokenizer, lowercase=False)(text)
        if len(as_written) == len(tokens):
            places = as_written
    out, position = [], 0
    for token, place in zip(tokens, places):
        start = text.find(place, position)
        if start < 0:  # a segmenter that rewrote the text: the next place we can vouch for
            start, stop = position, position
        else:
            stop = start + len(place)
        position = stop
        out.append({"text": token, "start": start, "stop": stop, "special": False})
    return out


def _validation_error(error: RequestValidationError) -> ServeError:
    """FastAPI's 422 for a body it cannot read, as a 400 that names the field and what was wrong."""
    problems = error.errors()
    first = problems[0] if problems else {}
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    field = loc[0] if loc else None
    if first.get("type") == "json_invalid":
        message = f"the body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg', ''))}"
    elif first.get("type") == "missing" and not loc:
        message = "the body is empty; send a JSON object"
    elif not loc:
        message = f"the body must be a JSON object: {first.get('msg', 'invalid')}"
    elif first.get("type") == "missing":
        message = f"`{field}` is missing"
    else:
        # A field with several allowed types (text or list of texts) fails once per type: say each once.
        same = [p for p in problems if [str(x) for x in p.get("loc", ()) if x != "body"][:1] == [field]]
        reasons = list(dict.fromkeys(str(p.get("msg", "invalid")) for p in same))
        message = f"`{field}`: {'; or '.join(reasons)} (got {_short(first.get('input'))})"
    others = {str(p.get("loc", ("", ""))[1:2]) for p in problems} - {str(first.get("loc", ("", ""))[1:2])}
    if others:
        message += f" (and problems in {len(others)} more field{'s' if len(others) > 1 else ''})"
    return ServeError(400, message, "validation", param=field, code="invalid_request")


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _host_name(value: bytes) -> str:
    """The name in a Host header, without its port: ``[::1]:8080`` -> ``::1``, ``Localhost:80`` -> ``localhost``."""
    text = value.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    return text.rpartition(":")[0] if text.count(":") == 1 else text


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class _Guard:
    """ASGI middleware in front of every route: the Host allow-list, the API key, JSON-only bodies,
    the body size limit and read deadline, and the request metrics (by route template, so unknown
    paths share one label).

    The fast path: a POST to an embedding route (``fast_routes``: path -> (body model, route function))
    whose body is a JSON object (one ``Content-Type: application/json``) that the route's model accepts
    calls the route's function itself, with FastAPI's steps for such a body done here (``json.loads``,
    the model's validation) and its exception handlers' answers (``error_response``, ``unexpected_error``).
    Everything else, and every body the model refuses, goes through FastAPI, whose 400 names the field.
    FastAPI's routing, dependency solving and middleware stack cost about as much CPU as the rest of a
    small request together, on the core the model runs on."""

    def __init__(self, app, *, config: ServeConfig, metrics: ServerMetrics, known_paths: set[str],
                 fast_routes: dict | None = None) -> None:
        self.app = app
        self.config = config
        self.metrics = metrics
        self.known = known_paths
        self.fast_routes = dict(fast_routes or {})
        self.key = config.api_key.encode("utf-8") if config.api_key is not None else None
        self.hosts = {h.lower().strip("[]") for h in config.allowed_hosts}
        self.any_ip = bool(self.hosts & set(WILDCARD_HOSTS))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        started = time.perf_counter()
        status = [500]

        async def send_and_note(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            error = self._check_host(scope) or self._check_key(scope)
            fast = None
            if error is None and scope["method"] in ("POST", "PUT", "PATCH"):
                error = self._check_json(scope)
            if error is None and scope["method"] in ("POST", "PUT", "PATCH"):
                body, error, gone = await self._read_body(scope, receive)
                if gone:
                    status[0] = 499  # the client closed the connection before sending its body
                    return
                if error is None:
                    if scope["method"] == "POST" and path in self.fast_routes and _plain_json(scope):
                        fast = await self._fast_response(path, body)
                    receive = _replay(body, receive)
            if error is not None:
                await error_response(path, error)(scope, receive, send_and_note)
            elif fast is not None:
                await fast(scope, receive, send_and_note)
            else:
                await self.app(scope, receive, send_and_note)
        finally:
            route = path if path in self.known else "other"
            self.metrics.observe_request(route, status[0], time.perf_counter() - started)

    async def _fast_response(self, path: str, body: bytes) -> Response | None:
        """The route's answer, or None where FastAPI must answer (a body that is not a JSON object the
        route's model accepts: FastAPI's 400 then names the field)."""
        model, route = self.fast_routes[path]
        try:
            data = json.loads(body)  # as FastAPI reads a JSON body
            if not isinstance(data, dict):
                return None
            request = model.model_validate(data)
        except Exception:  # noqa: BLE001 - FastAPI reads it again and answers as it does
            return None
        try:
            return await route(request)
        except ServeError as error:
            return error_response(path, error)
        except Exception as error:  # noqa: BLE001 - as the app's handler of unexpected errors
            return unexpected_error(path, error)

    def _check_host(self, scope) -> ServeError | None:
        """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1 sends ``Host: evil.example``."""
        if "*" in self.hosts:
            return None
        for header, value in scope.get("headers", ()):
            if header == b"host":
                name = _host_name(value)
                if name in self.hosts or (self.any_ip and _is_ip(name)):
                    return None
                return ServeError(400, f"the Host header {value.decode('latin-1')[:100]!r} is not one this server answers "
                                  "to (a web page's DNS rebinding?); start it with --allowed-host NAME to allow that name",
                                  "invalid_host", code="invalid_host")
        return None  # HTTP/1.0 without Host: not a browser

    def _check_json(self, scope) -> ServeError | None:
        """Bodies must say they are JSON: a web page can post text/plain or a form anywhere without
        asking (no CORS preflight), but not application/json."""
        kind = b""
        for header, value in scope.get("headers", ()):
            if header == b"content-type":
                kind = value.split(b";")[0].strip().lower()
        if kind == b"application/json" or kind.endswith(b"+json"):
            return None
        got = kind.decode("latin-1")[:100] or "none"
        return ServeError(415, f"the body must be JSON sent with `Content-Type: application/json` (got {got}); with "
                          "curl, add -H 'Content-Type: application/json'", "unsupported_media_type",
                          code="unsupported_media_type")

    def _check_key(self, scope) -> ServeError | None:
        if self.key is None or (scope["path"] in OPEN_PATHS and scope["method"] in ("GET", "HEAD")):
            return None
        given = b""
        for header, value in scope.get("headers", ()):
            if header == b"authorization":
                scheme, _, token = value.partition(b" ")
                given = token.strip() if scheme.lower() == b"bearer" else b""
        if given and hmac.compare_digest(given, self.key):
            return None
        what = "a wrong API key" if given else "no API key"
        return ServeError(401, f"{what}: send the header `Authorization: Bearer KEY` with the server's key "
                          "(--api-key or ELMOKIT_API_KEY)", "unauthorized", code="invalid_api_key",
                          headers={"WWW-Authenticate": "Bearer"})

    async def _read_body(self, scope, receive) -> tuple[bytes, ServeError | None, bool]:
        limit = self.config.max_body_bytes

        def too_large() -> ServeError:
            return ServeError(413, f"the request body is larger than the limit of {limit} bytes (--max-body-bytes); "
                              "send fewer or shorter texts per request", "payload_too_large", code="payload_too_large")

        for header, value in scope.get("headers", ()):
            if header == b"content-length":
                try:
                    if int(value) > limit:
                        return b"", too_large(), False
                except ValueError:
                    return b"", ServeError(400, "the Content-Length header is not a number", "validation"), False
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.config.read_timeout_s):  # asyncio's own: a third of anyio's cost
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return b"", None, True
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        return b"", too_large(), False
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks), None, False
        except TimeoutError:
            return b"", ServeError(408, f"the request body did not arrive within {self.config.read_timeout_s:g} s "
                                   "(--read-timeout-s)", "timeout", code="read_timeout",
                                   headers={"Connection": "close"}), False


def _plain_json(scope) -> bool:
    """One Content-Type header, ``application/json`` (parameters aside): the body FastAPI reads as JSON."""
    kinds = [value for header, value in scope.get("headers", ()) if header == b"content-type"]
    return len(kinds) == 1 and kinds[0].split(b";")[0].strip().lower() == b"application/json"


def _replay(body: bytes, receive):
    """A ``receive`` that hands the app the body already read, then waits on the client as before."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
