"""Data-parallel training on CPU cores: several processes, each with its share of every batch.

On a two-core CPU two one-thread training processes make more pages per second together than one
process with two threads (4.1 against 3.45 pages/s, measured on jina-ocr-tiny): a single process leaves
a core idle in the parts of a step that do not split across threads. Each process here draws every
``size``-th training page, computes the gradient of its share, and the processes average their
gradients (a gloo all-reduce) before the same optimizer step, so their weights stay identical. Process
0 alone evaluates, logs and writes the run's files; the others follow its decisions.

:data:`SOLO` is the one-process group: every collective is the identity, so the training loop has one
code path whatever the number of processes.
"""

from __future__ import annotations

import datetime
import multiprocessing.connection
import signal
import socket
import sys
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from jina_ocr.errors import UserError

# A follower waits in a collective while process 0 evaluates or writes a checkpoint.
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=1)


class Group:
    """Process ``rank`` of ``size`` training processes, and the collectives the training loop needs."""

    def __init__(self, rank: int, size: int):
        self.rank = rank
        self.size = size

    @property
    def lead(self) -> bool:
        """Whether this is process 0, the one that evaluates, logs and writes files."""
        return self.rank == 0

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    def average_gradients(self, parameters: Sequence[torch.nn.Parameter]) -> None:
        """Replace each gradient by its mean over the processes, in one all-reduce.

        A parameter that got a gradient in some process but not in another (an expert no token of that
        share reached) counts as zero there, so every process ends with the same set of gradients.
        """
        if self.size == 1:
            return
        present = torch.tensor([p.grad is not None for p in parameters], dtype=torch.uint8)
        dist.all_reduce(present, op=dist.ReduceOp.MAX)
        used = [p for p, flag in zip(parameters, present.tolist(), strict=True) if flag]
        for parameter in used:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
        flat = torch.cat([p.grad.reshape(-1) for p in used])
        dist.all_reduce(flat)
        flat /= self.size
        offset = 0
        for parameter in used:
            count = parameter.grad.numel()
            parameter.grad.copy_(flat[offset : offset + count].view_as(parameter.grad))
            offset += count

    def gather(self, values: Sequence[float]) -> list[list[float]]:
        """Every process's ``values`` (the same length everywhere), in rank order."""
        if self.size == 1:
            return [list(values)]
        mine = torch.tensor(values, dtype=torch.float64)
        everyone = [torch.empty_like(mine) for _ in range(self.size)]
        dist.all_gather(everyone, mine)
        return [row.tolist() for row in everyone]

    def broadcast(self, values: Sequence[int]) -> list[int]:
        """Process 0's ``values``, in every process."""
        if self.size == 1:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.int64)
        dist.broadcast(tensor, src=0)
        return tensor.tolist()


SOLO = Group(0, 1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _process(rank: int, size: int, port: int, target: Callable, args: tuple) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size, timeout=COLLECTIVE_TIMEOUT
    )
    try:
        target(Group(rank, size), *args)
    except UserError as error:
        print(f"jina-ocr: training process {rank}: error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
    finally:
        dist.destroy_process_group()


def run_processes(size: int, target: Callable, *args) -> None:
    """Run ``target(group, *args)`` in ``size`` processes joined by a gloo group on the loopback.

    A SIGTERM or SIGINT sent to this process alone goes on to the training processes, which finish
    their step and stop together. If one of them fails the others are ended (they would wait for it in
    their next collective) and the failure is raised as a :class:`UserError`.
    """
    context = mp.get_context("spawn")
    port = _free_port()
    processes = [
        context.Process(target=_process, args=(rank, size, port, target, args), name=f"jina-ocr-train-{rank}")
        for rank in range(size)
    ]
    for process in processes:
        process.start()

    def forward(signum, frame) -> None:
        for process in processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: each one stops after its step, with the others

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        running = list(processes)
        while running:
            multiprocessing.connection.wait([p.sentinel for p in running])
            for process in [p for p in running if not p.is_alive()]:
                running.remove(process)
                if process.exitcode != 0:
                    for other in running:
                        other.kill()
                        other.join()
                    rank = processes.index(process)
                    raise UserError(
                        f"training process {rank} of {size} failed (exit code {process.exitcode})"
                    )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
