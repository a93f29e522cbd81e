"""Helpers for the server tests: a tiny random ELMo model folder, a real uvicorn server on a free
127.0.0.1 port in a thread, and a representation whose batches can be held at a gate."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
from testkit import random_tf_weights, tiny_options, write_original_files

from elmokit.serve.app import create_app
from elmokit.serve.config import ServeConfig
from elmokit.serve.server import bind, uvicorn_server

WORDS = ["the", "bank", "river", "loan", "a", "play", "Chico", "Ruiz", "made", "spectacular", "on", "'s", ".", ",",
         "grounder", "über", "naïve", "x", "IBM", "2018"]


def tiny_model_dir(folder: Path) -> Path:
    """A folder with options.json + weights.hdf5 of a random tiny biLM (3 layers of 10)."""
    options = tiny_options()
    write_original_files(folder, options, random_tf_weights(options, seed=5))
    return folder


def random_texts(n: int, seed: int, *, max_len: int = 9) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, max_len + 1)))) for _ in range(n)]


class Gated:
    """Delegates to ``representation`` but holds every ``embed`` call until ``release`` is set;
    ``entered`` is set when the worker is inside. Records each call's number of sentences."""

    def __init__(self, representation) -> None:
        self.inner = representation
        self.name, self.num_layers, self.dim = representation.name, representation.num_layers, representation.dim
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[int] = []

    def embed(self, sentences):
        self.entered.set()
        assert self.release.wait(20), "the test never released the gate"
        self.calls.append(len(sentences))
        return self.inner.embed(sentences)


class Recording:
    """Delegates to ``representation`` and records the sentences of each batch."""

    def __init__(self, representation) -> None:
        self.inner = representation
        self.name, self.num_layers, self.dim = representation.name, representation.num_layers, representation.dim
        self.batches: list[int] = []

    def embed(self, sentences):
        self.batches.append(len(sentences))
        return self.inner.embed(sentences)


class Running:
    """A real uvicorn server in a thread: ``url``, ``client`` (httpx), ``app``, ``stop()``."""

    def __init__(self, app, config: ServeConfig, http: str = "auto") -> None:
        self.app = app
        sock = bind("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn_server(app, config=config, log_level="warning", http=http)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.005)
        self.client = httpx.Client(base_url=self.url, timeout=20)

    def stop(self, wait: bool = True) -> None:
        """Ask the server to stop (what SIGTERM does); ``wait``: until it has (about 0.2 s: uvicorn
        looks every 0.1 s). Not waiting leaves it to ``join_stopping`` at the session's end."""
        self.client.close()
        self.server.should_exit = True
        if wait:
            self.thread.join(20)
        else:
            STOPPING.append(self.thread)


STOPPING: list[threading.Thread] = []


def join_stopping() -> None:
    while STOPPING:
        thread = STOPPING.pop()
        thread.join(20)
        assert not thread.is_alive(), "a test server did not stop"


@contextlib.contextmanager
def running(representation, config: ServeConfig | None = None, http: str = "auto", **create_options):
    """A ``Running`` server over ``representation``; ``http``: uvicorn's protocol ("auto", "h11", "httptools")."""
    server = Running(create_app(representation, config or ServeConfig(), **create_options), config or ServeConfig(), http)
    try:
        yield server
    finally:
        server.stop(wait=False)  # its port is its own: the next test need not wait for it


class ServeProcess:
    """A real `elmokit serve` process on a free 127.0.0.1 port: ``url``, ``lines`` (its stderr), ``process``."""

    def __init__(self, *args: str, env: dict | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "elmokit.cli.main", "serve", "--port", "0", *args],
                                        stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self.port: int | None = None
        found = threading.Event()

        def read():
            for line in self.process.stderr:
                self.lines.append(line)
                match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if match:
                    self.port = int(match.group(1))
                    found.set()
            found.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not found.wait(60) or self.port is None:
            self.process.kill()
            raise AssertionError("elmokit serve did not start:\n" + "".join(self.lines))
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:  # bound before the model's app starts listening: wait for /health
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError("elmokit serve did not answer /health:\n" + "".join(self.lines))
            time.sleep(0.05)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.kill()
        return self.process.wait(30)

    def rss_bytes(self) -> int:
        """The process's resident memory now (Linux /proc)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")


def floats(data) -> np.ndarray:
    """JSON numbers back to float32 (exact: the server writes float32 values as shortest round-trip doubles)."""
    return np.asarray(data, dtype=np.float32)


def metric(text: str, name: str) -> float:
    """The value of one sample line ``name value`` in Prometheus text (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# ---- the explorer page: a tiny neighbour index and tiny saved task models --------------------------------

# Sentences where "play" and "bank" occur in different company (the senses the projection view separates).
EXPLORER_SENTENCES = [
    "Chico Ruiz made a spectacular play on Alusik 's grounder",
    "the play by Hamlet opened on the river bank",
    "a play on words",
    "they play the bank loan game",
    "the bank made a loan on the river",
    "IBM made a play for the bank",
    "a naïve play",
    "über play 2018",
    "x",
]


def explorer_sentences(extra: int = 40, seed: int = 11) -> list[list[str]]:
    """The sentences above plus ``extra`` random ones over WORDS (whitespace tokens)."""
    return [s.split() for s in EXPLORER_SENTENCES + random_texts(extra, seed)]


def tiny_index(representation, folder: Path, *, extra: int = 40):
    """A float32 ``NeighborIndex`` of ``explorer_sentences`` built with ``representation``."""
    from elmokit.evaluation.neighbors import NeighborIndex

    return NeighborIndex.build(representation, explorer_sentences(extra), folder, dtype="float32", batch_sentences=7)


# the pre-softmax mix weights and gammas the task models below are saved with (the tests' oracle reads these)
TAGGER_MIXES = {"input_mix": ([0.3, -1.2, 0.8], 0.7), "output_mix": ([-0.5, 0.25, 1.5], 1.3)}
CLASSIFIER_MIX = ([1.1, 0.0, -0.4], 0.45)


def tiny_tagger(folder: Path, *, elmo_layers: int = 3, elmo_dim: int = 10) -> Path:
    """An untrained POS tagger with an input and an output mix of known weights, saved as users keep it."""
    import torch

    from elmokit.tasks.tagger import SequenceTagger, TaggerConfig
    from elmokit.tasks.tagger.model import PAD, UNK

    config = TaggerConfig(task="pos", output="softmax", scheme=None, elmo="mix", elmo_at_output=True,
                          elmo_layers=elmo_layers, elmo_dim=elmo_dim, word_dim=4, hidden_dim=6, min_word_count=1,
                          representation_name="elmo:tiny")
    tagger = SequenceTagger(config, [PAD, UNK, "play"], ["NOUN", "VERB"])
    with torch.no_grad():
        for name, (w, gamma) in TAGGER_MIXES.items():
            mix = getattr(tagger.model, name)
            mix.scalar_parameters.copy_(torch.tensor(w))
            mix.gamma.fill_(gamma)
    tagger.save(folder)
    return folder


def tiny_classifier(folder: Path) -> Path:
    """An untrained sentence classifier with a mix of known weights."""
    import torch

    from elmokit.tasks.classifier import Classifier, ClassifierConfig, SentenceClassifier, WordVocabulary
    from elmokit.tasks.tagger.model import PAD, UNK

    model = SentenceClassifier(ClassifierConfig(num_labels=2, vocab_size=3, elmo_layers=3, elmo_dim=10, word_dim=4,
                                                hidden_dim=5))
    with torch.no_grad():
        model.scalar_mix.scalar_parameters.copy_(torch.tensor(CLASSIFIER_MIX[0]))
        model.scalar_mix.gamma.fill_(CLASSIFIER_MIX[1])
    Classifier(model, WordVocabulary([PAD, UNK, "play"]), ["neg", "pos"]).save(folder)
    return folder
