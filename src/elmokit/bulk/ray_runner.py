"""Running the shards on a Ray cluster: ``ray.data`` ``map_batches`` over a pool of actors.

Each actor loads the model once (from the same spec the command-line flags give) and writes
whole shards: a dataset row is a shard (its line range and byte range), the actor reads those
bytes from the input, embeds them and writes the shard file atomically, and returns the shard's
index record. The driver rewrites the index as records stream back. Input and OUTDIR must
therefore be paths every node can read and write (one machine, or a shared filesystem).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from elmokit.bulk.shards import JobSettings, Shard, write_shard

logger = logging.getLogger(__name__)

# What a record holds that pyarrow must carry through Ray Data unchanged (ints and strings).
_RECORD_FIELDS = ("number", "first_line", "stop_line", "offset", "size", "input_sha256", "file", "file_sha256",
                  "sentences", "tokens", "seconds")


class ShardWriter:
    """The actor: one ``Embedder`` (loaded once) writing the shards it is given."""

    def __init__(self, spec: dict, load_options: dict, input_file: str, outdir: str, settings: dict,
                 threads: int, tokenizer: str | None = None) -> None:
        import torch

        from elmokit.representation import load_representation

        torch.set_num_threads(threads)
        self.embedder = load_representation(spec, **load_options)
        if tokenizer is not None:  # --tokenizer given to the command: it overrides the model's own
            from elmokit.text.corpus import Tokenizer

            self.embedder.tokenizer = Tokenizer(kind=tokenizer)
        self.input_file, self.outdir = input_file, outdir
        self.settings = JobSettings(**settings)
        if self.embedder.fingerprint != self.settings.fingerprint:  # another model behind the same path on this node
            raise RuntimeError(f"the model loaded on this worker ({self.embedder.fingerprint}) is not the driver's "
                               f"({self.settings.fingerprint}); every node must see the same model files")

    def __call__(self, batch: dict[str, Any]) -> dict[str, list]:
        records = []
        for i in range(len(batch["number"])):
            shard = Shard(**{name: _plain(batch[name][i]) for name in ("number", "first_line", "stop_line", "offset",
                                                                       "size", "input_sha256")})
            records.append(write_shard(self.embedder, self.input_file, shard, self.outdir, self.settings))
        return {name: [r[name] for r in records] for name in _RECORD_FIELDS}


def _plain(value):
    """numpy scalars from a batch -> Python ints and strings."""
    return value.item() if hasattr(value, "item") else value


def ray_runner(*, spec: dict, load_options: dict, input_file: str | os.PathLike, outdir: str | os.PathLike,
               settings: JobSettings, actors: int = 2, threads: int = 1, address: str | None = None,
               tokenizer: str | None = None, init_options: dict | None = None):
    """A ``ShardRunner`` for ``run_job`` that embeds the shards on a Ray cluster.

    ``address``: ``"auto"`` (the cluster ``ray start --head`` started on this machine), ``ray://...``
    or ``host:port``; None starts a local cluster for the job (``init_options`` go to ``ray.init``).
    ``actors`` actors each take ``threads`` CPUs and run torch with that many threads.
    ``tokenizer``: a ``Tokenizer`` kind that replaces the model's own segmenter (None: the model's).
    """

    def run(pending: list[Shard]) -> Iterator[dict[str, Any]]:
        nonlocal actors
        if not pending:
            return
        import ray
        import ray.data

        started_here = not ray.is_initialized()
        if started_here:
            ray.init(address=address, **({"include_dashboard": False, "log_to_driver": False} | (init_options or {})))
        try:
            rows = [asdict(shard) for shard in pending]
            # a pool larger than the cluster's CPUs would wait for them forever: fit it, and say so
            fitting = max(1, int(ray.cluster_resources().get("CPU", 1) // threads))
            if actors > fitting:
                logger.warning("bulk embed: %d actors of %d CPUs do not fit the cluster's %g CPUs; using %d",
                               actors, threads, ray.cluster_resources().get("CPU", 1), fitting)
                actors = fitting
            dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
                ShardWriter,
                batch_size=1,
                batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(size=max(1, min(actors, len(rows)))),
                num_cpus=threads,
                fn_constructor_kwargs={"spec": spec, "load_options": load_options, "input_file": os.path.abspath(input_file),
                                       "outdir": os.path.abspath(outdir), "settings": asdict(settings),
                                       "threads": threads, "tokenizer": tokenizer},
            )
            for row in dataset.iter_rows():
                yield {name: _plain(row[name]) for name in _RECORD_FIELDS}
        finally:
            if started_here:
                ray.shutdown()

    return run
