"""The HTTP API (FastAPI): text-embeddings-inference's routes, the OpenAI-compatible embeddings route,
and elmokit's own per-layer route, over one representation and one batching worker.

    POST /embed            TEI: a pooled vector per input (mean of one layer over tokens), normalised
    POST /embed_all        TEI: every token's vector of one layer, with the token texts beside them
    POST /tokenize         TEI: the tokens the server cuts each text into, with character offsets
    POST /v1/embeddings    OpenAI: unit-length mean of the top layer, float or base64
    POST /v1/elmo          elmokit: per-layer per-token vectors, a layer selection or a scalar mix
    GET  /health, /info, /metrics (Prometheus), /openapi.json, /docs
    GET  /                 the explorer page (static files in ``serve/static/explorer``), over
    GET  /v1/explorer, POST /v1/explorer/neighbors, /similarity, /projection, GET /v1/explorer/layer-weights

Every vector comes from ``representation.embed`` through ``Batcher``; the per-token vectors a
client receives are bit-identical to ``Embedder.embed`` of its input alone (float32 values written
as the shortest decimal that reads back to the same float). Limits and the shape of errors:
``elmokit.serve.errors``; the settings: ``ServeConfig``.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
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
from starlette.responses import FileResponse, Response

from elmokit.serve import explorer
from elmokit.serve.batcher import Batcher, QueueFull, ShuttingDown
from elmokit.serve.config import ServeConfig
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
# Answered without the API key: load balancers probe /health; the page's files hold no data (the
# page asks for the key and sends it with each API call).
OPEN_PATHS = ("/health", *PAGE_FILES)
_TEI_ERRORS = {code: {"model": TEIError} for code in (400, 401, 413, 422, 429, 500, 503, 504)}
_OPENAI_ERRORS = {code: {"model": OpenAIError} for code in (400, 401, 413, 422, 429, 500, 503, 504)}


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
    batcher = Batcher(representation, max_batch_tokens=config.max_batch_tokens, max_wait_ms=config.max_wait_ms,
                      max_queue=config.max_queue, on_batch=metrics.observe_batch, variants=variants)
    batcher_holder.append(batcher)
    num_layers, dim, name = int(representation.num_layers), int(representation.dim), str(representation.name)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        logger.info("elmokit serve: %s ready (%d layers of %d)", name, num_layers, dim)
        yield
        # uvicorn has stopped accepting and waited for the requests in flight; finish what is queued.
        stopped = await anyio.to_thread.run_sync(batcher.close, config.shutdown_timeout_s)
        logger.info("elmokit serve: batcher %s", "drained" if stopped else "still busy after the shutdown timeout")

    from elmokit import __version__

    app = FastAPI(title="elmokit", version=__version__, lifespan=lifespan,
                  description="Deep contextualized word representations over HTTP: text-embeddings-inference routes, "
                  "an OpenAI-compatible /v1/embeddings, and elmokit's per-layer /v1/elmo. See docs/serve.md.")
    app.state.batcher, app.state.metrics, app.state.config = batcher, metrics, config

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
        logger.exception("elmokit serve: unexpected error on %s", request.url.path)
        return error_response(request.url.path, ServeError(500, f"internal error: {type(error).__name__}: {error}", "backend"))

    # ---- the shared steps --------------------------------------------------------------------------

    def texts_of(inputs: Any, param: str) -> list[str]:
        if isinstance(inputs, str):
            return [inputs]
        if not inputs:
            raise ServeError(400, f"`{param}` is an empty list; send a text or a list of texts", "empty", param=param)
        if not all(isinstance(t, str) for t in inputs):
            raise ServeError(400, f"`{param}` holds token ids; this server reads text (ELMo spells words by characters)",
                             "validation", param=param, code="token_ids_not_supported")
        if len(inputs) > config.max_inputs:
            raise ServeError(422, f"{len(inputs)} inputs in one request, more than the limit of {config.max_inputs} "
                             "(--max-inputs); split the request", "validation", param=param, code="too_many_inputs")
        return list(inputs)

    def checked(sentences: list[list[str]], truncate: bool, param: str) -> list[list[str]]:
        if len(sentences) > config.max_inputs:
            raise ServeError(422, f"{len(sentences)} inputs in one request, more than the limit of {config.max_inputs} "
                             "(--max-inputs); split the request", "validation", param=param, code="too_many_inputs")
        out = []
        for i, tokens in enumerate(sentences):
            if not tokens:
                raise ServeError(400, f"`{param}` item {i} has no tokens (empty or only spaces); every input needs at "
                                 "least one token", "empty", param=param)
            if len(tokens) > config.max_input_tokens:
                if not truncate:
                    raise ServeError(422, f"`{param}` item {i} has {len(tokens)} tokens, more than the limit of "
                                     f"{config.max_input_tokens} (--max-input-tokens); send truncate: true to cut it",
                                     "validation", param=param, code="too_many_tokens")
                tokens = tokens[: config.max_input_tokens]
            out.append(tokens)
        return out

    def tokenised(inputs: Any, truncate: bool, param: str) -> list[list[str]]:
        return checked([tokenizer(text) for text in texts_of(inputs, param)], truncate, param)

    def layer_index(layer: int, param: str = "layer") -> int:
        if not -num_layers <= layer < num_layers:
            raise ServeError(400, f"`{param}` {layer}: the model has {num_layers} layers (0..{num_layers - 1}, or "
                             f"-1 for the top)", "validation", param=param, code="invalid_layer")
        return layer % num_layers

    async def embedded(sentences: list[list[str]], variant: str | None = None) -> list[np.ndarray]:
        try:
            future = batcher.submit(sentences, variant)
        except QueueFull as full:
            raise ServeError(429, str(full), "overloaded", code="queue_full",
                             headers={"Retry-After": str(full.retry_after)}) from None
        except ShuttingDown as stopping:
            raise ServeError(503, str(stopping), "unhealthy", code="shutting_down") from None
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), config.request_timeout_s)
        except TimeoutError:
            future.cancel()  # leaves its batch if the worker has not taken it yet
            raise ServeError(504, f"the request was not answered within {config.request_timeout_s:g} s "
                             "(--request-timeout-s); retry later or send fewer texts", "timeout", code="timeout") from None
        except ServeError:
            raise
        except Exception as error:  # the model failed on this batch
            raise ServeError(500, f"the model failed: {type(error).__name__}: {error}", "backend") from None

    async def json_response(build) -> Response:
        """Turn arrays into JSON bytes off the event loop (large responses take milliseconds); non-ASCII
        escaped, so that any string a client sent (even a lone surrogate) can be echoed."""
        body = await anyio.to_thread.run_sync(lambda: json.dumps(build(), separators=(",", ":")).encode())
        return Response(body, media_type="application/json")

    def pooled(array: np.ndarray, layer: int, normalize: bool) -> np.ndarray:
        vector = array[layer].mean(axis=0)  # (dim,) float32: the mean over the text's tokens
        if normalize:
            norm = np.linalg.norm(vector)
            if norm > 0:
                vector = vector / norm
        return vector.astype(np.float32, copy=False)

    # ---- text-embeddings-inference routes -----------------------------------------------------------

    @app.post("/embed", response_model=list[list[float]], responses=_TEI_ERRORS, tags=["text-embeddings-inference"],
              summary="A pooled vector per input: the mean over tokens of one layer (default the top)")
    async def embed(body: EmbedRequest):
        layer = layer_index(body.layer)
        arrays = await embedded(tokenised(body.inputs, body.truncate, "inputs"))
        return await json_response(lambda: [pooled(a, layer, body.normalize).tolist() for a in arrays])

    @app.post("/embed_all", response_model=list[TokensAndEmbeddings] | list[list[list[float]]], responses=_TEI_ERRORS,
              tags=["text-embeddings-inference"], summary="Every token's vector of one layer, with the token texts")
    async def embed_all(body: EmbedAllRequest):
        layer = layer_index(body.layer)
        sentences = tokenised(body.inputs, body.truncate, "inputs")
        arrays = await embedded(sentences)
        if body.return_tokens:
            return await json_response(lambda: [{"tokens": s, "embeddings": a[layer].tolist()}
                                                for s, a in zip(sentences, arrays)])
        return await json_response(lambda: [a[layer].tolist() for a in arrays])

    @app.post("/tokenize", response_model=list[list[TokenInfo]], responses=_TEI_ERRORS,
              tags=["text-embeddings-inference"], summary="The tokens of each text, with character offsets")
    async def tokenize(body: TokenizeRequest):
        texts = texts_of(body.inputs, "inputs")
        return await json_response(lambda: [_spans(text, tokenizer(text)) for text in texts])

    @app.get("/health", tags=["service"], summary="200 while serving, 503 while shutting down")
    async def health():
        if batcher.closed or not batcher.alive:
            raise ServeError(503, "the server is shutting down" if batcher.closed else "the batching worker is not running",
                             "unhealthy")
        return {"status": "ok"}

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

    @app.post("/v1/embeddings", response_model=OpenAIEmbeddingResponse, responses=_OPENAI_ERRORS, tags=["openai"],
              summary="OpenAI-compatible embeddings: the unit-length mean of the top layer per input")
    async def openai_embeddings(body: OpenAIEmbeddingRequest):
        if body.dimensions is not None and body.dimensions != dim:
            raise ServeError(400, f"`dimensions` {body.dimensions}: this model gives vectors of {dim} and cannot shorten "
                             "them; leave it out", "validation", param="dimensions", code="invalid_dimensions")
        sentences = tokenised(body.input, False, "input")
        arrays = await embedded(sentences)
        as_base64 = body.encoding_format == "base64"

        def build():
            data = []
            for i, array in enumerate(arrays):
                vector = pooled(array, num_layers - 1, True)
                encoded = base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii") if as_base64 else vector.tolist()
                data.append({"object": "embedding", "index": i, "embedding": encoded})
            tokens = sum(len(s) for s in sentences)
            return {"object": "list", "data": data, "model": name, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

        return await json_response(build)

    # ---- elmokit's own ------------------------------------------------------------------------------

    @app.post("/v1/elmo", response_model=ElmoResponse, responses=_TEI_ERRORS, tags=["elmokit"],
              summary="Per-layer per-token vectors: all layers, a selection, or a scalar mix")
    async def elmo(body: ElmoRequest):
        if (body.inputs is None) == (body.tokens is None):
            raise ServeError(400, "give `inputs` (text the server tokenises) or `tokens` (tokenised sentences), one of them",
                             "validation", param="inputs")
        if body.mix is not None and body.layers is not None:
            raise ServeError(400, "give `layers` or `mix`, not both (a mix covers every layer)", "validation", param="mix")
        if body.tokens is not None:
            if not body.tokens:
                raise ServeError(400, "`tokens` is an empty list; send a list of tokenised sentences", "empty", param="tokens")
            sentences = checked([list(s) for s in body.tokens], body.truncate, "tokens")
        else:
            sentences = tokenised(body.inputs, body.truncate, "inputs")
        weights = None
        if body.mix is not None:
            if len(body.mix) != num_layers or not all(np.isfinite(body.mix)) or not np.isfinite(body.gamma):
                got = f"{len(body.mix)}" if len(body.mix) != num_layers else "a weight or gamma that is not finite"
                raise ServeError(400, f"`mix` needs {num_layers} finite weights (one per layer) and a finite gamma; got {got}",
                                 "validation", param="mix", code="invalid_mix")
            w = np.asarray(body.mix, dtype=np.float64)
            weights = np.exp(w - w.max())
            weights /= weights.sum()  # softmax, as ScalarMix
        layers = None if weights is not None else [layer_index(i, "layers") for i in (body.layers or range(num_layers))]
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
                    item["mixed"] = mixed.astype(np.float32).tolist()
                else:
                    item["layers"] = array[layers].tolist()
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
        if index is None:
            raise no_index()
        tokens = one_sentence(body.inputs, body.tokens)
        positions = [position_in(tokens, p, "positions") for p in (body.positions or range(len(tokens)))]
        layers = [layer_index(i, "layers") for i in (body.layers or range(num_layers))]
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
        sentences = []
        for param, value in (("a", body.a), ("b", body.b)):
            sentences += checked([list(value)], False, param) if isinstance(value, list) else tokenised(value, False, param)
        layers = [layer_index(i, "layers") for i in (body.layers or range(num_layers))]
        a, b = await embedded(sentences)  # (L, n1, D), (L, n2, D)
        return await json_response(lambda: {
            "model": name, "tokens_a": sentences[0], "tokens_b": sentences[1], "layers": layers,
            "cosine": [explorer.cosine_matrix(a[j], b[j]).tolist() for j in layers]})

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
    app.add_middleware(_Guard, config=config, metrics=metrics, known_paths=known)
    return app


def _spans(text: str, tokens: list[str]) -> list[dict]:
    """Each token with its character offsets, found left to right in ``text`` (the tokenizer's own output)."""
    out, position = [], 0
    for token in tokens:
        start = text.find(token, position)
        if start < 0:  # cannot happen for whitespace or regex tokens of the text itself
            start = position
        position = start + len(token)
        out.append({"text": token, "start": start, "stop": position, "special": False})
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


class _Guard:
    """ASGI middleware in front of every route: the API key, the body size limit, and the request
    metrics (by route template, so unknown paths share one label)."""

    def __init__(self, app, *, config: ServeConfig, metrics: ServerMetrics, known_paths: set[str]) -> None:
        self.app = app
        self.config = config
        self.metrics = metrics
        self.known = known_paths
        self.key = config.api_key.encode("utf-8") if config.api_key is not None else None

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
            error = self._check_key(scope)
            if error is None and scope["method"] in ("POST", "PUT", "PATCH"):
                scope = _as_json(scope)
                body, error, gone = await self._read_body(scope, receive)
                if gone:
                    status[0] = 499  # the client closed the connection before sending its body
                    return
                if error is None:
                    receive = _replay(body, receive)
            if error is not None:
                await error_response(path, error)(scope, receive, send_and_note)
            else:
                await self.app(scope, receive, send_and_note)
        finally:
            route = path if path in self.known else "other"
            self.metrics.observe_request(route, status[0], time.perf_counter() - started)

    def _check_key(self, scope) -> ServeError | None:
        if self.key is None or scope["path"] in OPEN_PATHS:
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
        too_large = ServeError(413, f"the request body is larger than the limit of {limit} bytes (--max-body-bytes); "
                               "send fewer or shorter texts per request", "payload_too_large", code="payload_too_large")
        for header, value in scope.get("headers", ()):
            if header == b"content-length":
                try:
                    if int(value) > limit:
                        return b"", too_large, False
                except ValueError:
                    return b"", ServeError(400, "the Content-Length header is not a number", "validation"), False
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b"", None, True
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return b"", too_large, False
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None, False


def _as_json(scope):
    """Every body this server reads is JSON: read it as JSON whatever Content-Type says (``curl -d``
    sends form encoding), instead of refusing it."""
    headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"content-type"]
    return {**scope, "headers": [*headers, (b"content-type", b"application/json")]}


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
