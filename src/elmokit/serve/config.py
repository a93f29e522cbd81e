"""The server's settings: one frozen dataclass, every limit with its default and the flag that sets it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# Host names a browser on this machine uses for a local server (the DNS-rebinding guard lets them in).
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
# Bound to every interface: any IP-literal Host is allowed (rebinding needs a name), names still need the list.
WILDCARD_HOSTS = ("0.0.0.0", "::")


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """Limits and batching of ``elmokit serve`` (the flag for each is ``--`` + the name with dashes).

    Every request is checked against the request limits before any work is done (no tokenising
    beyond the body, no embedding, no answer built): a request over one gets 413/422 (400 on the
    OpenAI routes) naming the flag.

    Attributes:
        max_batch_tokens: a batch gathers requests while their tokens fit (one request always runs);
            a request with more tokens is split into pieces of this size.
        max_wait_ms: how long the oldest waiting request waits for others to share its batch (0: a batch takes
            what waits when the worker becomes free, as text-embeddings-inference does; requests that arrive
            while a batch runs share the next one).
        max_queue: pieces (of up to max_batch_tokens) that may wait for the worker; more get 429 with Retry-After.
        max_inputs: texts in one request (OpenAI's 2048).
        max_input_tokens: tokens in one text (more: 422, or cut to this with ``truncate``).
        max_request_tokens: tokens in one request, all its texts together.
        max_layers: entries of a request's ``layers`` list.
        max_positions: entries of a request's ``positions`` list (the explorer's neighbour search).
        max_response_bytes: the estimated size of the JSON answer (16 bytes per number).
        max_body_bytes: request body size (more: 413).
        read_timeout_s: a client must send a request's head, and then its body, within this (slow clients are cut).
        request_timeout_s: a request not answered by then gets 504 (and leaves its batch if not started).
        api_key: when set, every route but /health and the page's files needs ``Authorization: Bearer KEY`` (else 401).
        allowed_hosts: the names a request's Host header may carry (DNS-rebinding guard); "*" allows any.
        cors_origins: origins a browser page may call the API from (CORS); none by default.
        tokenizer: how raw text becomes tokens: "whitespace" (``str.split``, as ``elmokit embed`` reads
            lines), "regex" (``\\w+|[^\\w\\s]``), or a segmenter for unsegmented text ("jieba", "rjieba",
            "pkuseg", "chars"); any kind of ``elmokit.text.corpus.Tokenizer``.
        shutdown_timeout_s: on SIGTERM, how long accepted requests may take to finish; those still
            waiting then are answered 503.
    """

    max_batch_tokens: int = 4096
    max_wait_ms: float = 0.0
    max_queue: int = 256
    max_inputs: int = 2048
    max_input_tokens: int = 512
    max_request_tokens: int = 100_000
    max_layers: int = 32
    max_positions: int = 128
    max_response_bytes: int = 32_000_000
    max_body_bytes: int = 2_000_000
    read_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    api_key: str | None = None
    allowed_hosts: tuple[str, ...] = LOCAL_HOSTS
    cors_origins: tuple[str, ...] = ()
    tokenizer: str = "whitespace"
    shutdown_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "max_queue", "max_inputs", "max_input_tokens", "max_request_tokens",
                     "max_layers", "max_positions", "max_response_bytes", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServeConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0 or self.request_timeout_s <= 0 or self.shutdown_timeout_s < 0 or self.read_timeout_s <= 0:
            raise ValueError("ServeConfig: max_wait_ms >= 0, request_timeout_s > 0, read_timeout_s > 0 and "
                             "shutdown_timeout_s >= 0")
        if self.api_key is not None and not self.api_key:
            raise ValueError("ServeConfig.api_key: an empty key would let anyone in; leave it unset instead")
        object.__setattr__(self, "allowed_hosts", tuple(self.allowed_hosts))
        object.__setattr__(self, "cors_origins", tuple(self.cors_origins))

    def limits(self) -> dict:
        """The limits as /info reports them (never the key)."""
        out = asdict(self)
        out.pop("api_key")
        out["api_key_required"] = self.api_key is not None
        out["allowed_hosts"], out["cors_origins"] = list(self.allowed_hosts), list(self.cors_origins)
        return out
