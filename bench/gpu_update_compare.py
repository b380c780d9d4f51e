"""Torch vs JAX agent update step in one process (the goal: the JAX agent at least as fast per update as torch).

    python -m bench.gpu_update_compare --out $OUT/compare

Both agents are recipe-sized (HalfCheetah shapes, B = 512, strict target backends): the torch agent with CUDA
graphs (``bench.common.synthetic_torch_agents``), the JAX agent as it trains
(``bench.common.synthetic_jax_agent``). Each block times ``iters`` consecutive ``agent.update`` calls
on the same 40 random batches, from the host batch to the metrics on the host, and ends with a device sync. Blocks
of every variant are interleaved, ``repeats`` times, so all variants see the same machine state; the summary gives
each variant's median and, per repeat, the JAX / torch ratio (below 1: JAX is faster).

The torch agent reads its metrics back at the end of every update; the JAX agent returns the previous update's
(``agent_jax.agent.FlashSACAgent``), so its host work overlaps the device's. Both are what training runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

from bench.common import block_seconds, interleaved_blocks


def _variants(torch_backends: list[str], jax_backends: list[str], batch_size: int
              ) -> tuple[dict[str, tuple[Any, Any, Callable[[object], None]]], list[dict], dict]:
    """name -> (agent, its context for that backend, sync) for every requested backend, the shared batches, and the
    setup facts."""
    import jax
    import torch

    from bench.common import environment, synthetic_jax_agent, synthetic_torch_agents

    torch_agents, batches = synthetic_torch_agents([f"agent.sample_batch_size={batch_size}"], torch_backends[0])
    torch_agent = torch_agents["graph"]
    jax_agent, _ = synthetic_jax_agent(batch_size, jax_backends[0])

    def torch_sync(_: object = None) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def jax_sync(_: object = None) -> None:
        jax.block_until_ready(jax_agent.state)
        jax_agent.flush_metrics()

    variants = {f"torch/{b}": (torch_agent, dataclasses.replace(torch_agent.ctx, backend=b, strict=True), torch_sync)
                for b in torch_backends}
    variants |= {f"jax/{b}": (jax_agent, jax_agent.ctx.replace(backend=b), jax_sync) for b in jax_backends}
    facts = {"batch_size": batch_size, "torch_device": str(torch_agent.device),
             "torch_cuda_graph": torch_agent.cuda_graph_reason, "jax_device": str(jax_agent.device),
             "env": environment()}
    return variants, batches, facts


def compare(torch_backends: list[str], jax_backends: list[str], batch_size: int = 512, repeats: int = 7,
            iters: int = 40) -> dict:
    """Median ms per update of every variant over interleaved blocks, and the JAX / torch ratio per repeat.

    The ratio pairs the first backend of each framework (by default the kernels: triton and pallas).
    """
    variants, batches, facts = _variants(torch_backends, jax_backends, batch_size)

    def block(name: str) -> Callable[[int], float]:
        agent, ctx, sync = variants[name]

        def run(n: int) -> float:
            agent.ctx = ctx
            return 1e3 * block_seconds(lambda i: agent.update(batches[i % len(batches)]), n, sync)
        return run

    # the warm-up: compilation, graph capture, both update variants
    raw = interleaved_blocks({name: block(name) for name in variants}, repeats, iters,
                             warmup_iters=max(4, min(20, iters)))
    first_torch, first_jax = f"torch/{torch_backends[0]}", f"jax/{jax_backends[0]}"
    ratios = [j / t for j, t in zip(raw[first_jax], raw[first_torch], strict=True)]
    return {
        "update_ms": {name: statistics.median(v) for name, v in raw.items()},
        "ratio": {"pair": f"{first_jax} / {first_torch}", "median": statistics.median(ratios), "per_repeat": ratios},
        "raw_ms": raw,
        "repeats": repeats,
        "iters": iters,
        **facts,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_update_compare", description=__doc__.split("\n")[0])
    ap.add_argument("--torch-backends", default="triton,torch", help="comma-separated, strict (first: the ratio)")
    ap.add_argument("--jax-backends", default="pallas,jax", help="comma-separated, strict (first: the ratio)")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--out", default=None, help="directory for compare.json")
    a = ap.parse_args(argv)
    result = compare(a.torch_backends.split(","), a.jax_backends.split(","), a.batch_size, a.repeats, a.iters)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "compare.json"), "w") as f:
            json.dump(result, f, indent=2)
    ms = result["update_ms"]
    print("update step (median ms, interleaved blocks): "
          + "; ".join(f"{name} {v:.3f}" for name, v in ms.items())
          + f"; {result['ratio']['pair']} = {result['ratio']['median']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
