"""Where the JAX agent's update time goes: the jitted update alone vs the host work around it (issue 6).

    python -m bench.gpu_update_diag --out $OUT/diag --label nopre

Times, on the recipe-sized JAX agent (HalfCheetah shapes, B = 512, strict Pallas target), loops of update calls
that differ in one piece of host work at a time (``KINDS``), in interleaved blocks:

* ``agent``: ``FlashSACAgent.update`` as training calls it.
* ``pure``: ``agent_jax.update.update_networks_flat`` on one device batch reused every call, metrics never read:
  the device-bound floor.
* ``*_newbatch``: a new ``jax.device_put`` of the numpy batch every call; ``*_npbatch``: the numpy batch passed
  to jit as it is (what the agent does).
* ``*_readback``: the previous call's metrics read back after each call; ``*_async_readback``: the same after
  ``copy_to_host_async`` (what the agent does).
* ``stateonly*``: a jit that returns only the state (every output aliases a donated input), so no output buffer
  is new; ``*_staged``: the batch first copied into one donated device buffer, so its address never changes.
  Both test whether XLA's command-buffer updates on changed buffer addresses cost host time.

Each kind gives ``ms`` (wall time per call over a block of ``--iters`` calls, ending with a device sync) and
``latency_ms`` (host time of one call with the device idle, median). ``--trace`` also records 6 agent updates
with ``jax.profiler.trace`` into ``<out>/trace``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

KINDS = ("agent", "pure", "pure_readback", "pure_newbatch", "pure_newbatch_readback", "pure_newbatch_async_readback",
         "pure_npbatch", "pure_npbatch_async_readback", "stateonly", "stateonly_newbatch", "stateonly_staged",
         "pure_staged", "pure_staged_readback")


def diagnose(backend: str = "pallas", repeats: int = 5, iters: int = 40, batch_size: int = 512,
             trace_dir: str | None = None) -> dict:
    """``{kind: {"ms": ..., "latency_ms": ...}}`` for every kind in ``KINDS``, plus the raw block times."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from agent_common.buffer import flat_batch
    from agent_jax.update import update_networks_flat
    from bench.gpu_agent_jax import synthetic_agent_and_batch

    agent, batch = synthetic_agent_and_batch(batch_size, backend)
    o = agent.observation_dim
    host_flat = flat_batch(batch)
    flat = jax.device_put(host_flat, agent.device)

    @functools.partial(jax.jit, static_argnames=("do_actor_update",), donate_argnums=(0,))
    def state_only(state, flat, ctx, *, do_actor_update):
        return update_networks_flat(state, flat, ctx, observation_dim=o, do_actor_update=do_actor_update)[0]

    @functools.partial(jax.jit, donate_argnums=(0,))
    def stage(persistent, new):
        return persistent * 0.0 + new  # written into the donated buffer: a stable address for the update

    persistent = [jnp.zeros_like(flat)]
    metrics: list = []

    def one(kind: str, i: int) -> None:
        if kind == "agent":
            agent.update(batch)
            return
        f = flat
        if "npbatch" in kind:
            f = host_flat.copy()
        if "newbatch" in kind:
            f = jax.device_put(host_flat, agent.device)
        if "staged" in kind:
            persistent[0] = stage(persistent[0], host_flat)
            f = persistent[0]
        if "stateonly" in kind:
            agent.state = state_only(agent.state, f, agent.ctx, do_actor_update=(i % 2 == 0))
            return
        agent.state, m = update_networks_flat(agent.state, f, agent.ctx, observation_dim=o,
                                              do_actor_update=(i % 2 == 0))
        if "async" in kind:
            m.copy_to_host_async()
        if "readback" in kind:
            metrics.append(m)
            if len(metrics) > 1:
                np.asarray(metrics.pop(0))

    def loop(kind: str, n: int) -> float:
        jax.block_until_ready(agent.state)
        t0 = time.perf_counter()
        for i in range(n):
            one(kind, i)
        jax.block_until_ready(agent.state)
        metrics.clear()
        return 1e3 * (time.perf_counter() - t0) / n

    def latency(kind: str, n: int) -> float:
        times = []
        for i in range(n):
            jax.block_until_ready((agent.state, persistent[0]))
            t0 = time.perf_counter()
            one(kind, i)
            times.append(time.perf_counter() - t0)
        metrics.clear()
        return 1e3 * statistics.median(times)

    for kind in KINDS:  # warm-up: compilation of every jit and both update variants
        loop(kind, max(4, min(10, iters)))
    agent.flush_metrics()
    raw: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(repeats):
        for kind in KINDS:
            raw[kind].append(loop(kind, iters))
    agent.flush_metrics()
    out: dict = {kind: {"ms": round(statistics.median(raw[kind]), 3), "latency_ms": round(latency(kind, 20), 3)}
                 for kind in KINDS}
    agent.flush_metrics()
    if trace_dir:
        with jax.profiler.trace(trace_dir):
            for _ in range(6):
                agent.update(batch)
            agent.flush_metrics()
    return out | {"raw": raw, "backend": backend, "batch_size": batch_size, "device": str(agent.device),
                  "xla_flags": os.environ.get("XLA_FLAGS", "")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_update_diag", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for diag_<label>.json")
    ap.add_argument("--label", default="default", help="names the result file (e.g. the XLA flags in effect)")
    ap.add_argument("--backend", default="pallas", help="TD-target backend, strict")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--trace", action="store_true", help="also record 6 agent updates into <out>/trace")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    result = diagnose(a.backend, a.repeats, a.iters, a.batch_size,
                      os.path.join(a.out, "trace") if a.trace else None)
    with open(os.path.join(a.out, f"diag_{a.label}.json"), "w") as f:
        json.dump({"label": a.label} | result, f, indent=2)
    print(json.dumps({"label": a.label} | {k: result[k] for k in KINDS}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
