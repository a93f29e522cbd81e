"""The server's settings: one frozen dataclass, every limit with its default and the flag that sets it."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """Limits and batching of ``elmokit serve`` (the flag for each is ``--`` + the name with dashes).

    Attributes:
        max_batch_tokens: a batch gathers requests while their tokens fit (one request always runs).
        max_wait_ms: how long the oldest waiting request waits for others to share its batch.
        max_queue: requests that may wait for the worker; one more gets 429 with Retry-After.
        max_inputs: texts in one request (more: 422).
        max_input_tokens: tokens in one text (more: 422, or cut to this with ``truncate``).
        max_body_bytes: request body size (more: 413).
        request_timeout_s: a request not answered by then gets 504 (and leaves its batch if not started).
        api_key: when set, every route but /health needs ``Authorization: Bearer KEY`` (else 401).
        tokenizer: how raw text becomes tokens: "whitespace" (``str.split``, as ``elmokit embed`` reads
            lines), "regex" (``\\w+|[^\\w\\s]``), or a segmenter for unsegmented text ("jieba", "rjieba",
            "pkuseg", "chars"); any kind of ``elmokit.text.corpus.Tokenizer``.
        shutdown_timeout_s: on SIGTERM, how long accepted requests may take to finish.
    """

    max_batch_tokens: int = 4096
    max_wait_ms: float = 5.0
    max_queue: int = 256
    max_inputs: int = 64
    max_input_tokens: int = 512
    max_body_bytes: int = 2_000_000
    request_timeout_s: float = 30.0
    api_key: str | None = None
    tokenizer: str = "whitespace"
    shutdown_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "max_queue", "max_inputs", "max_input_tokens", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServeConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0 or self.request_timeout_s <= 0 or self.shutdown_timeout_s < 0:
            raise ValueError("ServeConfig: max_wait_ms >= 0, request_timeout_s > 0 and shutdown_timeout_s >= 0")
        if self.api_key is not None and not self.api_key:
            raise ValueError("ServeConfig.api_key: an empty key would let anyone in; leave it unset instead")

    def limits(self) -> dict:
        """The limits as /info reports them (never the key)."""
        out = asdict(self)
        out.pop("api_key")
        out["api_key_required"] = self.api_key is not None
        return out
