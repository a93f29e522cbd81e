"""Embedding beyond one machine: sharded outputs, an index, resume by shard, and a Ray Data runner.

``elmokit.bulk.shards`` holds the plan, the shard writer and the index (no Ray needed);
``elmokit.bulk.ray_runner`` runs the shards on a Ray cluster (``pip install 'elmokit[bulk]'``).
"""

from elmokit.bulk.shards import (
    BulkIndexError,
    JobSettings,
    Shard,
    local_runner,
    plan_shards,
    read_index,
    read_job,
    read_shard,
    run_job,
    write_shard,
)

__all__ = ["BulkIndexError", "JobSettings", "Shard", "local_runner", "plan_shards", "read_index", "read_job",
           "read_shard", "run_job", "write_shard"]
