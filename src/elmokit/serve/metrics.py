"""Prometheus metrics of one server, in a registry of its own (two apps in one process never mix).

    elmokit_requests_total{route,status}            requests answered, by route template and status
    elmokit_request_duration_seconds{route}         latency histogram, by route
    elmokit_batch_sentences / elmokit_batch_tokens  histograms of the batches the worker ran
    elmokit_batch_duration_seconds                  time inside representation.embed per batch
    elmokit_queue_depth                             requests waiting for the worker, now
    elmokit_tokens_embedded_total                   tokens embedded since start
    elmokit_inputs_embedded_total                   texts (sentences) embedded since start
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


class ServerMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, queue_depth: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("elmokit_requests", "Requests answered, by route and status", ["route", "status"], registry=r)
        self.latency = Histogram("elmokit_request_duration_seconds", "Request latency, by route", ["route"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.batch_sentences = Histogram("elmokit_batch_sentences", "Sentences per batch run by the worker",
                                         buckets=_SIZE_BUCKETS, registry=r)
        self.batch_tokens = Histogram("elmokit_batch_tokens", "Tokens per batch run by the worker",
                                      buckets=_SIZE_BUCKETS, registry=r)
        self.batch_seconds = Histogram("elmokit_batch_duration_seconds", "Time in representation.embed per batch",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.queue_depth = Gauge("elmokit_queue_depth", "Requests waiting for the worker", registry=r)
        self.queue_depth.set_function(queue_depth)
        self.tokens = Counter("elmokit_tokens_embedded", "Tokens embedded", registry=r)
        self.inputs = Counter("elmokit_inputs_embedded", "Texts (sentences) embedded", registry=r)

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route=route, status=str(status)).inc()
        self.latency.labels(route=route).observe(seconds)

    def observe_batch(self, sentences: int, tokens: int, seconds: float) -> None:
        self.batch_sentences.observe(sentences)
        self.batch_tokens.observe(tokens)
        self.batch_seconds.observe(seconds)
        self.tokens.inc(tokens)
        self.inputs.inc(sentences)

    def render(self) -> bytes:
        return generate_latest(self.registry)
