"""Dynamic batching: one worker thread gathers concurrent requests into one ``representation.embed`` call.

Each request is a list of tokenised sentences. ``Batcher.submit`` puts it in a bounded queue and
returns a ``concurrent.futures.Future`` of its arrays; the worker takes the oldest request, waits
up to ``max_wait_ms`` for more to arrive (or until ``max_batch_tokens`` are waiting), embeds the
requests it took in one call and hands each request its own arrays back.

A batch also holds at most ``max_batch_sentences`` sentences (the app passes the representation's
``batch_size``, the sentences of one biLM call; one request always fits): ``Embedder.embed`` cuts
a call into chunks of ``batch_size``, and 65 sentences would run as 64 and 1, the 1 at nearly the
cost of 16 (its matrix products are padded to 16 rows for batch invariance). Under load, batches of
whole chunks keep the server's cost per sentence the library's.

Why batching cannot change a client's numbers: ``Embedder`` starts every sentence from the same
state and never lets padding reach a real position, so a sentence's vectors are bit-identical in
any batch (tests/serve prove it under concurrency). A stateful representation would break that,
so ``Batcher`` refuses one.

Variants: ``variants`` maps a name to another representation of the same model (the same weights
started from another initial LSTM state, ``elmokit.warm_state``); a request names one with
``submit(..., variant=NAME)``. A batch only ever holds requests of one variant: the oldest
request's, the others keep their place in the queue.

Backpressure: at most ``max_queue`` requests wait; one more raises ``QueueFull`` (the server
answers 429 with ``Retry-After``), so the backlog is bounded. ``submit_many`` queues the pieces
of one large request together or not at all. ``close()`` refuses new requests (``ShuttingDown``,
503) and lets the worker finish every request already accepted.

Retry-After: the worker fits ``seconds = a + b * tokens`` to its recent batches (a: the fixed cost
of a batch, b: the cost of a token), and the queue's wait is its batches' fixed costs plus its
tokens' costs; at least 1 s, at most 60 (OpenAI's clients give up above 120 s).
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

logger = logging.getLogger(__name__)


class QueueFull(RuntimeError):
    """The bounded queue is full; ``retry_after`` is a whole number of seconds to wait."""

    def __init__(self, limit: int, retry_after: int) -> None:
        super().__init__(f"the request queue is full ({limit} requests waiting, --max-queue {limit}); "
                         f"retry after {retry_after} s")
        self.limit = limit
        self.retry_after = retry_after


class ShuttingDown(RuntimeError):
    """The server is stopping: accepted requests finish, new ones are refused."""


@dataclass
class _Job:
    sentences: list[list[str]]
    future: Future
    tokens: int
    variant: str | None = None
    queued_at: float = field(default_factory=time.monotonic)

    @property
    def size(self) -> int:
        return len(self.sentences)


# Called once per batch by the worker: (sentences, tokens, seconds in embed).
BatchHook = Callable[[int, int, float], None]

MAX_RETRY_AFTER_S = 60


class BatchCost:
    """A least-squares fit of ``seconds = a + b * tokens`` over the last ``window`` batches."""

    def __init__(self, window: int = 64) -> None:
        self.samples: collections.deque[tuple[float, float]] = collections.deque(maxlen=window)

    def observe(self, tokens: int, seconds: float) -> None:
        self.samples.append((float(tokens), float(seconds)))

    def fit(self) -> tuple[float, float]:
        """(a, b), both >= 0; (0, 0) before any batch."""
        if not self.samples:
            return 0.0, 0.0
        x = np.array([t for t, _ in self.samples])
        y = np.array([s for _, s in self.samples])
        if np.ptp(x) > 0:
            b = float(np.cov(x, y, bias=True)[0, 1] / np.var(x))
            b = max(b, 0.0)
            a = max(float(y.mean() - b * x.mean()), 0.0)
        else:  # one batch size seen: split its time by nothing better than the mean
            a, b = 0.0, float(y.sum() / max(x.sum(), 1.0))
        return a, b

    def seconds(self, tokens: int, batches: int) -> float:
        a, b = self.fit()
        return a * batches + b * tokens


class Batcher:
    """Gathers requests into batches for one representation, run by one worker thread.

    Args:
        representation: anything with ``embed(sentences) -> list[np.ndarray]`` (not stateful).
        max_batch_tokens: a batch takes requests while their tokens fit (it always takes one).
        max_batch_sentences: ... and while their sentences fit (None: no limit).
        max_wait_ms: how long the oldest request waits for company before its batch runs.
        max_queue: at most this many requests wait; one more raises ``QueueFull``.
        on_batch: called after each batch with (sentences, tokens, seconds).
        variants: other representations a request may name (``submit(..., variant=NAME)``).
    """

    def __init__(self, representation, *, max_batch_tokens: int = 4096, max_batch_sentences: int | None = None,
                 max_wait_ms: float = 5.0, max_queue: int = 256, on_batch: BatchHook | None = None,
                 variants: dict | None = None) -> None:
        self.variants = dict(variants or {})
        for rep in (representation, *self.variants.values()):
            if getattr(rep, "stateful", False):
                raise ValueError("a stateful representation cannot serve requests: its vectors would depend on the "
                                 "batch; load it without stateful=True")
        if max_batch_tokens < 1 or max_queue < 1 or max_wait_ms < 0 or (max_batch_sentences or 1) < 1:
            raise ValueError(f"need max_batch_tokens >= 1, max_batch_sentences >= 1, max_queue >= 1, max_wait_ms >= 0; "
                             f"got {max_batch_tokens}, {max_batch_sentences}, {max_queue}, {max_wait_ms}")
        self.representation = representation
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_sentences = max_batch_sentences
        self.max_wait_s = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.on_batch = on_batch
        self._queue: collections.deque[_Job] = collections.deque()
        self._queued_tokens = 0
        self._queued_sentences = 0
        self._cond = threading.Condition()
        self._closed = False
        self._busy = False
        self.accepted = 0  # requests accepted since the start
        self.cost = BatchCost()  # for Retry-After
        self._running_tokens = 0  # tokens of the batch inside embed
        self._thread = threading.Thread(target=self._run, name="elmokit-serve-batcher", daemon=True)
        self._started = False

    # ---- the client side (any thread)

    def start(self) -> Batcher:
        if not self._started:
            self._started = True
            self._thread.start()
        return self

    @property
    def depth(self) -> int:
        """Requests waiting (not yet taken by the worker)."""
        return len(self._queue)

    @property
    def busy(self) -> bool:
        """The worker is inside ``representation.embed``."""
        return self._busy

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def alive(self) -> bool:
        """The worker thread is running (False before ``start`` and after ``close``)."""
        return self._thread.is_alive()

    def submit(self, sentences: Sequence[Sequence[str]], variant: str | None = None) -> Future:
        """A Future of one float32 array (num_layers, n_tokens, dim) per sentence, from the
        representation named ``variant`` (None: the main one).

        Raises ``QueueFull`` when ``max_queue`` requests already wait, ``ShuttingDown`` after ``close``.
        Cancelling the Future before the worker takes it drops the request from its batch."""
        return self.submit_many([sentences], variant)[0]

    def submit_many(self, pieces: Sequence[Sequence[Sequence[str]]], variant: str | None = None) -> list[Future]:
        """``submit`` for each piece of one request, all queued at once or none (``QueueFull``)."""
        if variant is not None and variant not in self.variants:
            raise KeyError(f"no representation variant {variant!r} (have {sorted(self.variants)})")
        jobs = [_Job([list(s) for s in piece], Future(), sum(len(s) for s in piece), variant) for piece in pieces]
        with self._cond:
            if self._closed:
                raise ShuttingDown("the server is shutting down and accepts no new requests")
            if len(self._queue) + len(jobs) > self.max_queue:
                raise QueueFull(self.max_queue, self.retry_after())
            self._queue.extend(jobs)
            self._queued_tokens += sum(job.tokens for job in jobs)
            self._queued_sentences += sum(job.size for job in jobs)
            self.accepted += 1
            self._cond.notify_all()
        return [job.future for job in jobs]

    def close(self, timeout: float | None = None) -> bool:
        """Refuse new requests, finish the accepted ones, stop the worker. True when it stopped in time."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._started:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        for job in self._queue:  # never started: nothing will run them
            job.future.cancel()
        return True

    def retry_after(self) -> int:
        """Whole seconds until the queue has likely moved on: the batches it will take and its tokens
        at the measured costs (``BatchCost``), plus the batch running now; between 1 and 60."""
        tokens = self._queued_tokens + self._running_tokens
        batches = math.ceil(self._queued_tokens / self.max_batch_tokens)
        if self.max_batch_sentences is not None:
            batches = max(batches, math.ceil(self._queued_sentences / self.max_batch_sentences))
        batches += 1 if self._running_tokens else 0
        return int(min(MAX_RETRY_AFTER_S, max(1, math.ceil(self.cost.seconds(tokens, batches)))))

    # ---- the worker

    def _take_batch(self) -> list[_Job] | None:
        """The next batch (None when closed and drained): the oldest request, plus those that fit in
        ``max_batch_tokens`` (and ``max_batch_sentences``) and arrive within ``max_wait`` of the oldest one's arrival."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            deadline = self._queue[0].queued_at + self.max_wait_s
            sentence_room = self.max_batch_sentences or math.inf
            while not self._closed and self._queued_tokens < self.max_batch_tokens and self._queued_sentences < sentence_room:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            batch, tokens, sentences, passed = [], 0, 0, []
            variant = self._queue[0].variant
            while self._queue:
                job = self._queue[0]
                if job.variant != variant:  # another variant's request waits for a batch of its own
                    passed.append(self._queue.popleft())
                    continue
                if batch and (tokens + job.tokens > self.max_batch_tokens or sentences + job.size > sentence_room):
                    break
                self._queue.popleft()
                self._queued_tokens -= job.tokens
                self._queued_sentences -= job.size
                tokens += job.tokens
                sentences += job.size
                batch.append(job)
            self._queue.extendleft(reversed(passed))  # back in front, in their order
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            jobs = [job for job in batch if job.future.set_running_or_notify_cancel()]  # drop timed-out ones
            if not jobs:
                continue
            sentences = [s for job in jobs for s in job.sentences]
            tokens = sum(job.tokens for job in jobs)
            representation = self.representation if jobs[0].variant is None else self.variants[jobs[0].variant]
            started = time.perf_counter()
            self._busy = True
            self._running_tokens = tokens
            try:
                arrays = representation.embed(sentences)
            except BaseException as error:  # noqa: BLE001 - every waiting client must hear of it
                logger.exception("elmokit serve: embedding a batch of %d sentences failed", len(sentences))
                for job in jobs:
                    job.future.set_exception(error)
                continue
            finally:
                self._busy = False
                self._running_tokens = 0
            seconds = time.perf_counter() - started
            self.cost.observe(tokens, seconds)
            if self.on_batch is not None:  # before the answers: a client that has its answer sees the batch counted
                try:
                    self.on_batch(len(sentences), tokens, seconds)
                except Exception:  # metrics must never stop the worker
                    logger.exception("elmokit serve: the batch hook failed")
            start = 0
            for job in jobs:
                count = len(job.sentences)
                job.future.set_result([np.asarray(a) for a in arrays[start:start + count]])
                start += count
