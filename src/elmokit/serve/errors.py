"""Errors as JSON in the style of the server users already run.

- text-embeddings-inference routes (``/embed``, ``/embed_all``, ``/tokenize``, and elmokit's own
  ``/v1/elmo`` and the rest): ``{"error": "...", "error_type": "..."}``.
- the OpenAI-compatible ``/v1/embeddings``, ``/embeddings``, ``/v1/models``:
  ``{"error": {"message", "type", "param", "code"}}``, with OpenAI's statuses: a limit (422 on the
  TEI routes) is a 400 there, as OpenAI answers a context-length error (its clients raise ``BadRequestError``).

Statuses: 400 empty or malformed input or a bad Host header, 401 missing or wrong API key, 404/405
no such route, 408 a client too slow to send its body, 413 body too large, 415 a body that is not
JSON, 422 a limit (too many inputs or tokens; the message names the flag), 429 the queue is full
(with ``Retry-After``), 500 the model failed, 503 shutting down, 504 timed out.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse

OPENAI_PATHS = ("/v1/embeddings", "/embeddings", "/v1/models", "/models")

# status -> the OpenAI error "type" clients switch on.
_OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
                 405: "invalid_request_error", 408: "invalid_request_error", 413: "invalid_request_error",
                 415: "invalid_request_error", 422: "invalid_request_error",
                 429: "rate_limit_error", 500: "server_error", 503: "server_error", 504: "server_error"}


class ServeError(Exception):
    """An HTTP error with its status, a message that names the thing and the fix, a short type,
    an OpenAI ``code`` and ``param`` (the request field at fault), and extra headers."""

    def __init__(self, status: int, message: str, error_type: str, *, code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.code = code or error_type
        self.param = param
        self.headers = headers or {}


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII characters escaped: a lone surrogate sent by a client (valid JSON) can be
    echoed back without failing to encode as UTF-8."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")


def is_openai(path: str) -> bool:
    return path.rstrip("/") in OPENAI_PATHS or path.startswith("/v1/models/")


def error_response(path: str, error: ServeError) -> JSONResponse:
    """The JSON response for ``error`` in the style of the route at ``path``."""
    status = error.status
    if is_openai(path):
        status = 400 if status == 422 else status
        body = {"error": {"message": error.message, "type": _OPENAI_TYPES.get(status, "invalid_request_error"),
                          "param": error.param, "code": error.code}}
    else:
        body = {"error": error.message, "error_type": error.error_type}
    return AsciiJSONResponse(body, status_code=status, headers=error.headers)
