"""`elmokit serve`: an HTTP embedding service over one model (FastAPI + uvicorn).

    elmokit serve --model default --port 8080
    elmokit serve --model runs/lm --max-batch-tokens 8192 --api-key "$KEY"
    elmokit serve --vectors glove.6B.100d.txt
    elmokit serve --model default --index runs/nbr --task-model runs/ner   # the explorer page at /

Routes, limits and errors: docs/serve.md (and /docs, /openapi.json on the running server).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys

from elmokit.cli.common import (
    add_model_arguments,
    add_speed_arguments,
    add_threads_argument,
    add_tokenizer_argument,
    apply_threads,
    load_representation,
    non_negative_float,
    positive_float,
    positive_int,
)
from elmokit.errors import InputNotFound, UserError
from elmokit.serve.config import LOCAL_HOSTS, ServeConfig


class ServeFlagError(UserError):
    """A flag or environment variable of `elmokit serve` that cannot be honoured."""


# The one table of limits: ServeConfig field -> (type, metavar, help); the defaults are ServeConfig's, so
# the two never drift. A request over a limit is refused before any work (422; 400 on the OpenAI routes).
LIMIT_FLAGS = {
    "max_batch_tokens": (positive_int, "N", "tokens per batch the worker gathers from concurrent requests; a larger "
                         "request is split into pieces of this size"),
    "max_wait_ms": (non_negative_float, "MS", "how long a request waits for others to share its batch"),
    "max_queue": (positive_int, "N", "request pieces that may wait; beyond, 429 with Retry-After"),
    "max_inputs": (positive_int, "N", "texts per request (OpenAI's 2048); beyond, 422"),
    "max_input_tokens": (positive_int, "N", "tokens per text; beyond, 422 unless the request asks to truncate"),
    "max_request_tokens": (positive_int, "N", "tokens per request, all texts together; beyond, 422"),
    "max_layers": (positive_int, "N", "entries of a request's `layers` list; beyond, 422"),
    "max_positions": (positive_int, "N", "words the explorer's neighbour search looks up per request; beyond, 422"),
    "max_response_bytes": (positive_int, "N", "estimated size of an answer (16 bytes a number); beyond, 422"),
    "max_body_bytes": (positive_int, "N", "request body size; beyond, 413"),
    "read_timeout_s": (positive_float, "S", "a client must send a request's head, then its body, within this; "
                       "else the connection is closed (head) or answered 408 (body)"),
    "request_timeout_s": (positive_float, "S", "a request not answered by then gets 504"),
    "shutdown_timeout_s": (non_negative_float, "S", "on SIGTERM, how long accepted requests may take to finish; "
                           "those still waiting are answered 503 and the exit status is 1"),
}
SERVE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ServeConfig)}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a model over HTTP (text-embeddings-inference and OpenAI-compatible routes)",
        description="Serve one model over HTTP: TEI's /embed, /embed_all, /tokenize, /health, /info, /metrics, the "
        "OpenAI-compatible /v1/embeddings and elmokit's per-layer /v1/elmo; the schema at /openapi.json. Concurrent "
        "requests are batched (each client's vectors are exactly those of its input alone). Binds to 127.0.0.1 unless "
        "--host says otherwise. SIGTERM or Ctrl-C finishes the accepted requests, then stops. See docs/serve.md.",
    )
    add_model_arguments(parser)
    parser.add_argument("--vectors", default=None, metavar="FILE",
                        help="serve a static table instead (run folder of `elmokit static train`, or a word2vec/GloVe file)")
    net = parser.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1",
                     help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    net.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    net.add_argument("--api-key", default=None, metavar="KEY",
                     help="require `Authorization: Bearer KEY` on every route but /health and the page's files "
                     "(default: $ELMOKIT_API_KEY if set, else no key; an empty key from either is refused)")
    net.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                     help="also answer requests whose Host header is NAME (repeatable; '*' for any). By default only "
                     f"{', '.join(LOCAL_HOSTS)} and the --host address (any IP address when bound to 0.0.0.0 or ::): "
                     "a web page that rebinds its own name to this machine is refused")
    net.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                     help="let web pages of ORIGIN (e.g. https://app.example) call the API from a browser (repeatable; "
                     "default: none, no CORS headers are sent)")
    net.add_argument("--log-level", choices=("critical", "error", "warning", "info", "debug"), default="info",
                     help="uvicorn's log level (default info)")
    net.add_argument("--access-log", action="store_true", help="log every request")
    limits = parser.add_argument_group("batching and limits", "a request over a limit is refused before any work: "
                                       "422 naming the flag (400 on the OpenAI routes)")
    for name, (kind, metavar, text) in LIMIT_FLAGS.items():
        default = SERVE_DEFAULTS[name]
        limits.add_argument("--" + name.replace("_", "-"), type=kind, default=default, metavar=metavar,
                            help=f"{text} (default {default})")
    add_tokenizer_argument(limits, default=None, help_prefix="how raw text is cut into tokens: ",
                           default_help="the segmenter the model was trained with (jieba, chars, ...), recorded in "
                           "its lm.json; else whitespace, as `elmokit embed` reads lines")
    page = parser.add_argument_group("the explorer page (at /)")
    page.add_argument("--index", default=None, metavar="DIR",
                      help="a neighbour index built with the same model (`elmokit neighbors index`): the page's "
                      "nearest-occurrence and projection views (default: none; those views say so)")
    page.add_argument("--task-model", action="append", default=[], metavar="DIR",
                      help="a saved tagger or classifier folder whose learned layer weights the page shows "
                      "(repeatable; default: none)")
    parser.add_argument("--per-request-state", action="store_true",
                        help="also load the model from the other initial LSTM state (zero or warm; twice the "
                        "memory) so that /v1/elmo requests may choose `initial_state` (default: off)")
    parser.add_argument("--batch-size", type=positive_int, default=64,
                        help="sentences per biLM call inside a batch (default 64)")
    add_speed_arguments(parser)
    add_threads_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        from elmokit.serve.app import create_app
        from elmokit.serve.server import bind, serve
    except ModuleNotFoundError as error:
        raise ServeFlagError(f"{error.name} is not installed; pip install 'elmokit[serve]'") from None
    if not 0 <= args.port <= 65535:
        raise ServeFlagError(f"--port {args.port} is not a port (0..65535)")
    try:
        api_key = args.api_key if args.api_key is not None else os.environ.get("ELMOKIT_API_KEY")
        if api_key is not None and not api_key.strip():
            where = "--api-key" if args.api_key is not None else "ELMOKIT_API_KEY"
            raise ServeFlagError(f"{where} is empty: an empty key would let anyone in; set a key, or unset "
                                 f"{where} to serve without one")
        allowed = tuple(dict.fromkeys([*LOCAL_HOSTS, args.host, *args.allowed_host]))
        config = ServeConfig(**{name: getattr(args, name) for name in LIMIT_FLAGS}, api_key=api_key,
                             tokenizer=args.tokenizer or "whitespace", allowed_hosts=allowed,
                             cors_origins=tuple(args.cors_origin))
        apply_threads(args)
        representation, spec = load_representation(args, batch_size=args.batch_size)
        _check_finite_table(representation, args)
        recorded = getattr(representation, "tokenizer", None)  # Embedder: the model's segmenter, if any
        if args.tokenizer is None and recorded is not None:
            config = dataclasses.replace(config, tokenizer=recorded.kind)
        index, task_models, initial_states = _explorer_resources(args, representation, spec)
    except ValueError as error:  # ServeConfig's limits (a user error passes through unchanged)
        if isinstance(error, UserError):
            raise
        raise ServeFlagError(str(error)) from None
    try:
        sock = bind(args.host, args.port)
    except OSError as error:  # the port is taken, the address is not this machine's
        raise ServeFlagError(f"cannot listen on {args.host}:{args.port}: {error}") from None
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    app = create_app(representation, config, spec=spec, index=index, task_models=task_models,
                     initial_states=initial_states)
    print(f"elmokit serve: model={representation.name} layers={representation.num_layers} dim={representation.dim} "
          f"precision={args.precision} tokenizer={config.tokenizer} api_key={'required' if api_key else 'none'} "
          f"index={args.index or 'none'} task_models={len(task_models)} "
          f"initial_states={','.join([str(representation_state(representation)), *initial_states])}; "
          f"listening on {url} (docs at {url}/docs)", file=sys.stderr, flush=True)
    stopped_by = serve(app, host=args.host, port=port, config=config, log_level=args.log_level,
                       access_log=args.access_log, sock=sock)
    cut = app.state.stopping.cut
    if cut:
        print(f"elmokit serve: stopped by {stopped_by or 'shutdown'}; {cut} accepted request(s) were not finished "
              f"within --shutdown-timeout-s {config.shutdown_timeout_s:g} and were answered 503", file=sys.stderr)
        return 1
    if stopped_by:
        print(f"elmokit serve: stopped by {stopped_by} after finishing the accepted requests", file=sys.stderr)
    return 0


def _check_finite_table(representation, args) -> None:
    """A static table with a NaN or infinite row would answer numbers JSON cannot carry: refuse it at start."""
    vectors = getattr(representation, "vectors", None)
    if args.vectors is None or vectors is None:
        return
    import numpy as np

    bad = np.flatnonzero(~np.isfinite(np.asarray(vectors)).all(axis=1))
    if len(bad):
        words = getattr(representation, "words", None)
        first = f"{words[bad[0]]!r} (row {bad[0] + 1})" if words is not None else f"row {bad[0] + 1}"
        raise ServeFlagError(f"--vectors {args.vectors}: {len(bad)} row(s) hold NaN or infinite values, the first "
                             f"{first}; fix: drop or repair those rows")


def representation_state(representation) -> str | None:
    return getattr(representation, "initial_state", None)


def _explorer_resources(args, representation, spec):
    """(index, task models, other initial states) for the explorer page and /v1/elmo, from the flags."""
    from pathlib import Path

    from elmokit.evaluation.neighbors import NeighborIndex
    from elmokit.serve.explorer import read_task_layer_weights

    index = None
    if args.index is not None:
        if not Path(args.index).is_dir():
            raise InputNotFound(f"--index {args.index}: no such folder (build one with `elmokit neighbors index`)")
        index = NeighborIndex(args.index)
        index.check_representation(representation)
    task_models = [read_task_layer_weights(folder) for folder in args.task_model]
    initial_states = {}
    own = representation_state(representation)
    if args.per_request_state:
        if own is None or spec.get("kind") not in ("elmo", "elmo-original"):
            raise ValueError(f"--per-request-state: {representation.name} has no LSTM state to choose")
        from elmokit.representation import load_representation as load

        other = "warm" if own == "zero" else "zero"
        initial_states[other] = load({**spec, "initial_state": other}, batch_size=args.batch_size,
                                     precision=args.precision, token_cache_size=args.token_cache)
    return index, task_models, initial_states
