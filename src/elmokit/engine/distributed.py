"""Data parallelism: which rank this process is, and the process group.

The same ``elmokit train`` command runs under ``torchrun --nproc_per_node N``; torchrun sets
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``, and we join the
group with gloo on a CPU or nccl on GPUs. Without those variables it is a single process.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistributedContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_environment(cls) -> DistributedContext:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size <= 1:
            return cls()
        return cls(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))

    def device(self, requested: str | None) -> torch.device:
        if requested:
            device = torch.device(requested)
        else:
            device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", self.local_rank)
        return device

    def init_process_group(self, device: torch.device, *, init_method: str | None = None, timeout_s: float = 300.0) -> None:
        """Join the group (no-op for one process). ``init_method`` defaults to torchrun's env://."""
        if not self.enabled or dist.is_initialized():
            return
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend,
            init_method=init_method or "env://",
            rank=self.rank,
            world_size=self.world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def all_sum(self, values: list[float], device: torch.device) -> list[float]:
        """Sum a few numbers over the ranks (float64)."""
        if not self.enabled:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def all_gather_bytes(self, data: torch.Tensor, device: torch.device) -> list[torch.Tensor]:
        """Gather one uint8 tensor of the same length from every rank (e.g. RNG states)."""
        if not self.enabled:
            return [data]
        local = data.to(device)
        out = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(out, local)
        return [t.cpu() for t in out]

    def destroy(self) -> None:
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()
