"""Data-parallel training of the torch agent over ``torch.distributed`` (docs/flashsac.md, "Several GPUs").

``torchrun --nproc_per_node=N -m agent_torch.train --overrides ...`` starts N processes; each is one replica with its
own environments and replay buffer (``agent_common.replicas``). This module

- reads the launch from the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) and joins the
  process group (NCCL when the agent runs on CUDA, gloo on the CPU) with a timeout (``distributed_timeout_seconds``),
  so a replica whose peer died or hangs stops with an error instead of waiting forever;
- puts replica r on ``cuda:LOCAL_RANK``;
- broadcasts every network's parameters and buffers from replica 0 once, after construction;
- averages each trained network's gradients across replicas at every optimizer step: the gradients are copied into
  one flat buffer per network (allocated once), all-reduced (sum) in one collective, scaled by 1/N and copied
  back. The buffer, its views and the collective are all graph-safe, so the captured CUDA graph of the update step
  (``agent_torch.graphs``) holds the NCCL all-reduce too; the eager warm-up calls before the capture create the
  NCCL communicator.

BatchNorm statistics stay local to each replica (as upstream): a replica normalises with the statistics of its own
batch and its running statistics follow its own data; only parameters (hence the target critic's EMA) are kept
identical. A run on N replicas with batch B is therefore the run on one replica with batch N x B only up to those
BatchNorm statistics (and the reparametrisation noise, which each replica draws for its own rows; every replica
seeds torch with ``seed``, as upstream, so they draw the same stream).
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Iterable, Mapping

import torch
import torch.distributed as dist
from torch import nn

from agent_common.replicas import SINGLE, Replicas

__all__ = ["GradientAverager", "Launch", "broadcast_modules", "describe_replicas", "init_replicas", "launch_from_env",
           "local_device"]

_LAUNCH_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


class Launch:
    """Rank, world size and local rank of this process (torchrun's environment variables).

    Raises:
        ValueError: a variable that is not an integer, or values that do not fit together (the message names it).
    """

    def __init__(self, rank: int, world_size: int, local_rank: int) -> None:
        if world_size < 1:
            raise ValueError(f"WORLD_SIZE must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"RANK must be in [0, WORLD_SIZE={world_size}), got {rank}")
        if local_rank < 0:
            raise ValueError(f"LOCAL_RANK must be >= 0, got {local_rank}")
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank

    def __repr__(self) -> str:
        return f"Launch(rank={self.rank}, world_size={self.world_size}, local_rank={self.local_rank})"


def launch_from_env(environ: Mapping[str, str] | None = None) -> Launch | None:
    """The launch torchrun describes in ``environ`` (default ``os.environ``), or None for a plain single process
    (no ``WORLD_SIZE``, or ``WORLD_SIZE=1``).

    Raises:
        ValueError: ``WORLD_SIZE`` > 1 with ``RANK`` or ``LOCAL_RANK`` missing, or a value that is not an integer.
    """
    env = os.environ if environ is None else environ
    if env.get("WORLD_SIZE") in (None, "", "1"):
        return None
    values = {}
    for key in _LAUNCH_KEYS:
        raw = env.get(key)
        if raw is None and key == "LOCAL_RANK":
            raw = env.get("RANK")  # a single-node launcher that sets only RANK
        if raw is None:
            raise ValueError(f"WORLD_SIZE={env['WORLD_SIZE']} but {key} is not set: launch with torchrun "
                             "(it sets RANK, WORLD_SIZE and LOCAL_RANK)")
        try:
            values[key] = int(raw)
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {raw!r}") from None
    return Launch(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"])


def local_device(device: torch.device, launch: Launch | None = None) -> torch.device:
    """``device`` for this replica: ``cuda`` becomes ``cuda:LOCAL_RANK`` under a distributed launch."""
    launch = launch_from_env() if launch is None else launch
    if launch is None or device.type != "cuda":
        return device
    if launch.local_rank >= torch.cuda.device_count():
        raise RuntimeError(f"LOCAL_RANK={launch.local_rank} but only {torch.cuda.device_count()} CUDA device(s) are "
                           "visible: start at most that many processes per node (torchrun --nproc_per_node)")
    return torch.device("cuda", launch.local_rank)


def init_replicas(device_type: str, timeout_seconds: float, launch: Launch | None = None) -> Replicas:
    """Joins the process group of a torchrun launch and returns the loop's ``Replicas`` (``SINGLE`` without one).

    Args:
        device_type: ``agent.device_type`` (auto / cpu / cuda): NCCL when the agent will run on CUDA, else gloo.
        timeout_seconds: ``distributed_timeout_seconds``: a collective that waits longer (a dead or hung peer)
            raises instead of blocking forever.
        launch: the launch (default: from the environment).
    """
    launch = launch_from_env() if launch is None else launch
    if launch is None:
        return SINGLE
    use_cuda = device_type == "cuda" or (device_type == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(local_device(torch.device("cuda"), launch))
    if not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if use_cuda else "gloo",
            rank=launch.rank,
            world_size=launch.world_size,
            timeout=datetime.timedelta(seconds=float(timeout_seconds)),
        )
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")

    def barrier() -> None:
        if use_cuda:
            dist.barrier(device_ids=[device.index])
        else:
            dist.barrier()

    def max_on_all(value: int) -> int:
        t = torch.tensor([int(value)], dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    return Replicas(rank=launch.rank, world_size=launch.world_size, barrier=barrier, max_on_all=max_on_all)


def is_distributed() -> bool:
    """Whether a process group of more than one process is active."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def describe_replicas(device: torch.device) -> str:
    """The ``compute path`` suffix of a data-parallel run: the torchrun world size, the process group's backend and
    every replica's device (``host/device`` by rank; a collective, so every replica calls it once, at the same
    point)."""
    names: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(names, f"{socket.gethostname()}/{device}")
    return (f". Data parallel: torchrun world size {dist.get_world_size()} ({dist.get_backend()}), replicas on "
            + ", ".join(f"rank {rank} {name}" for rank, name in enumerate(names)))


@torch.no_grad()
def broadcast_modules(modules: Iterable[nn.Module], src: int = 0) -> None:
    """Copies every parameter and buffer of ``modules`` from replica ``src`` to all replicas (in place)."""
    if not is_distributed():
        return
    for module in modules:
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=src)


class GradientAverager:
    """Averages the gradients of a fixed list of parameters across replicas with one all-reduce.

    The flat buffer is allocated once (graph-safe: a captured graph keeps reading and writing the same memory).
    Gradients that are None on this step (a parameter the loss did not reach) are left None on every replica
    alike (the same code runs everywhere), and take no part in the collective.

    Args:
        parameters: the network's parameters (the optimizer's).
        world_size: replicas to average over (default: the process group's size).
    """

    def __init__(self, parameters: Iterable[torch.Tensor], world_size: int | None = None) -> None:
        self.params = [p for p in parameters if p.requires_grad]
        if not self.params:
            raise ValueError("GradientAverager: no trainable parameters")
        self.world_size = dist.get_world_size() if world_size is None else int(world_size)
        total = sum(p.numel() for p in self.params)
        self.flat = torch.zeros(total, dtype=self.params[0].dtype, device=self.params[0].device)  # (P,)
        self.views = []
        offset = 0
        for p in self.params:
            self.views.append(self.flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    @torch.no_grad()
    def __call__(self) -> None:
        """All-reduce the current ``.grad`` of the parameters to their mean over the replicas (in place)."""
        pairs = [(v, p.grad) for v, p in zip(self.views, self.params, strict=True) if p.grad is not None]
        if not pairs:
            return
        views = [v for v, _ in pairs]
        grads = [g for _, g in pairs]
        if len(pairs) < len(self.params):
            self.flat.zero_()
        torch._foreach_copy_(views, grads)
        dist.all_reduce(self.flat, op=dist.ReduceOp.SUM)  # gloo has no AVG: sum, then scale
        self.flat.mul_(1.0 / self.world_size)
        torch._foreach_copy_(grads, views)
