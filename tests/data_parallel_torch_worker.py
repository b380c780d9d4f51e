"""Subprocess of tests/test_data_parallel.py: one replica of a 2-process group (torch.multiprocessing).

``python tests/data_parallel_torch_worker.py <port> <out.json> [cpu|cuda] [KEY=VALUE ...]`` spawns both replicas
(config overrides added to the agents', e.g. ``agent.compile_scope=update``); replica 0 writes one JSON object with
the measurements, and the test asserts on them. ``cpu`` (the test): gloo. ``cuda`` (two GPUs,
for the GPU session): NCCL, replica r on cuda:r, the update and acting captured in CUDA graphs, so the all-reduce
runs inside the captured update.
"""

from __future__ import annotations

import json
import os
import sys

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from agent_common.config import load_config
from agent_torch.agent import FlashSACAgent
from agent_torch.distributed import GradientAverager

OBS_DIM, ACT_DIM, BATCH, UPDATES, WORLD = 11, 3, 16, 4, 2
TINY = ["agent.actor_hidden_dim=16", "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1",
        "agent.critic_num_blocks=1", f"agent.sample_batch_size={BATCH}", "num_env_steps=1000",
        "agent.categorical_target_backend=auto", "num_threads=1"]
FP32_U = 2.0**-24  # unit roundoff of fp32


def _batch(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    return {
        "observation": rng.normal(size=(rows, OBS_DIM)).astype(np.float32),
        "action": rng.uniform(-1, 1, (rows, ACT_DIM)).astype(np.float32),
        "reward": rng.normal(scale=0.5, size=rows).astype(np.float32),
        "terminated": (rng.uniform(size=rows) < 0.1).astype(np.float32),
        "next_observation": rng.normal(size=(rows, OBS_DIM)).astype(np.float32),
    }


def _replicas_after_updates(rank: int, device: str, overrides: list[str]) -> dict[str, object]:
    """K agent updates on each replica's own batches: parameters equal bitwise, BN running stats not."""
    torch.manual_seed(1000 + rank)  # different init on each replica: only the broadcast makes them equal
    extra = ["agent.device_type=cpu", "deterministic=true"] if device == "cpu" else [
        "agent.device_type=cuda", "agent.use_compile=false", "agent.use_cuda_graph=true"]  # as a GPU run (TF32)
    cfg = load_config([*TINY, *extra, f"seed={rank}", *overrides], framework="torch")
    agent = FlashSACAgent(cfg, gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
                          gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32))
    initial = {k: v.detach().clone() for k, v in agent.critic.module.named_parameters()}
    rng = np.random.default_rng(100 + rank)  # each replica trains on its own data
    updates = UPDATES if device == "cpu" else 16  # CUDA graphs: 3 eager calls per variant, then capture and replay
    for _ in range(updates):
        agent.update(_batch(rng, BATCH))
    state = {}
    for name, net in (("actor", agent.actor), ("critic", agent.critic), ("target_critic", agent.target_critic),
                      ("temperature", agent.temperature)):
        for key, value in net.module.state_dict().items():
            state[f"{name}.{key}"] = value.detach().cpu().clone()
    gathered: list[dict[str, torch.Tensor]] = [{} for _ in range(WORLD)]
    dist.all_gather_object(gathered, state)
    moved = max(float((agent.critic.module.get_parameter(k).detach() - v).abs().max()) for k, v in initial.items())
    params = [k for k, _ in agent.critic.module.named_parameters()]
    param_keys = {f"{n}.{k}" for n, net in (("actor", agent.actor), ("critic", agent.critic),
                                             ("target_critic", agent.target_critic),
                                             ("temperature", agent.temperature))
                  for k, _ in net.module.named_parameters()}
    a, b = gathered
    return {
        "params_checked": len(param_keys),
        "params_unequal": sorted(k for k in param_keys if not torch.equal(a[k], b[k])),
        "buffers_unequal": sorted(k for k in set(a) - param_keys if "running" in k and not torch.equal(a[k], b[k])),
        "critic_moved": moved,
        "critic_params": len(params),
        "cuda_graphs": len(agent.graphs) if agent.graphs is not None else 0,
        "device": str(agent.device),
    }


def _doubled_batch(rank: int, device: str) -> dict[str, object]:
    """Averaged gradients of 2 replicas x B rows vs the gradient of one process on the 2B rows, with the bound."""
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False  # the bound is fp32's (the agent above may have turned TF32 on)
    torch.set_float32_matmul_precision("highest")
    dev = torch.device(device, rank) if device == "cuda" else torch.device("cpu")
    net = torch.nn.Sequential(torch.nn.Linear(OBS_DIM, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(dev)
    rng = np.random.default_rng(5)
    x = torch.as_tensor(rng.normal(size=(WORLD * BATCH, OBS_DIM)).astype(np.float32), device=dev)  # (2B, O)
    y = torch.as_tensor(rng.normal(size=(WORLD * BATCH, 1)).astype(np.float32), device=dev)  # (2B, 1)

    def grads(rows: slice, model: torch.nn.Module) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        ((model(x[rows]) - y[rows]) ** 2).mean().backward()
        return [p.grad.detach().clone() for p in model.parameters()]

    averager = GradientAverager(net.parameters())
    local = grads(slice(rank * BATCH, (rank + 1) * BATCH), net)
    averager()
    averaged = [p.grad.detach().clone() for p in net.parameters()]
    out: dict[str, object] = {}
    if rank == 0:
        joint = grads(slice(None), net)  # one process, the doubled batch
        net64 = torch.nn.Sequential(torch.nn.Linear(OBS_DIM, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        net64 = net64.to(dev).double()
        net64.load_state_dict(net.state_dict())
        abs_sum = [torch.zeros_like(p, dtype=torch.float64) for p in net64.parameters()]
        n = WORLD * BATCH
        for i in range(n):  # sum over rows of |per-row gradient term| / n, the summation's condition
            net64.zero_grad(set_to_none=True)
            ((net64(x[i:i + 1].double()) - y[i:i + 1].double()) ** 2).sum().backward()
            for s, p in zip(abs_sum, net64.parameters(), strict=True):
                s += p.grad.abs() / n
        # fp32 bound per entry: recursive summation of n terms (gamma_n), the per-term products of the hidden
        # width (32) and a few elementwise roundings, for each of the two results: 2 (n + 32 + 4) u sum|t_i| / n.
        factor = 2.0 * (n + 32 + 4) * FP32_U
        ratios = [float(((a - j).abs().double() / (factor * s + 1e-30)).max())
                  for a, j, s in zip(averaged, joint, abs_sum, strict=True)]
        local_gap = max(float(((l - j).abs().double() / (factor * s + 1e-30)).max())
                        for l, j, s in zip(local, joint, abs_sum, strict=True))
        out = {"max_ratio_to_bound": max(ratios), "local_gap_ratio": local_gap}
    return out


def _replica(rank: int, port: int, path: str, device: str, overrides: list[str]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank, world_size=WORLD)
    try:
        result = {"replicas": _replicas_after_updates(rank, device, overrides),
                  "doubled_batch": _doubled_batch(rank, device)}
        if rank == 0:
            with open(path, "w") as f:
                json.dump(result, f)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
    if device not in ("cpu", "cuda"):
        raise SystemExit(f"device must be cpu or cuda, got {device!r}")
    mp.spawn(_replica, args=(int(sys.argv[1]), sys.argv[2], device, sys.argv[4:]), nprocs=WORLD, join=True)
