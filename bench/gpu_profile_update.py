"""Per-kernel GPU time of the agents' update step under Nsight Compute (where the JAX update's time goes).

    ncu --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv --page raw \\
        --print-units base --log-file $OUT/ncu_jax.csv python3 -m bench.gpu_profile_update --framework jax
    python3 -m bench.gpu_profile_update --summarize $OUT/ncu_jax.csv --updates 2

The profiled process builds the recipe-sized agent (HalfCheetah shapes, B = 512, strict kernel backend: Pallas for
JAX, Triton for torch with CUDA graphs) on a synthetic batch, runs ``--warmup`` updates (compilation, autotuning,
graph capture), then ``--updates`` updates between ``cudaProfilerStart`` and ``cudaProfilerStop``, so ncu measures
those only (``--profile-from-start off``; with ``--graph-profiling node`` every kernel of a replayed CUDA graph or
XLA command buffer is measured on its own). Consecutive updates alternate between the variant with the actor and
temperature step and the one without (actor_update_period 2), so an even ``--updates`` covers both equally.

``--summarize`` reads ncu's CSV: kernels and summed kernel time per update, then the kernels that take the most
time. The summed kernel time is the GPU's busy time; the rest of a measured update time is gaps between kernels.
ncu serialises kernels, so only the per-kernel durations are meaningful, not the wall-clock under ncu.

The JAX process crashed under ncu on the H200 (bench/results/h200-2026-11-29-profile), so for JAX there is a second
way, without ncu: ``--jax-trace DIR`` records the profiled updates with ``jax.profiler.trace`` (CUPTI kernel events
at normal clocks, kernels not serialised), and ``--summarize-trace DIR`` gives the same table from its
``*.trace.json.gz``, plus the device span per update (first kernel start to last kernel end):

    python3 -m bench.gpu_profile_update --framework jax --jax-trace $OUT/jax_trace
    python3 -m bench.gpu_profile_update --summarize-trace $OUT/jax_trace --updates 2
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import io
import sys
from collections.abc import Callable, Iterator
from typing import Any

from bench.common import trace_events

TIME_METRIC = "gpu__time_duration.sum"


def _agent(framework: str, backend: str | None) -> tuple[Any, dict, Callable[[], None]]:
    """The recipe-sized agent (strict ``backend``, default: Pallas for JAX, the recipe's Triton for torch with CUDA
    graphs), a synthetic batch and a device sync."""
    if framework == "jax":
        import jax

        from bench.common import synthetic_jax_agent

        agent, batch = synthetic_jax_agent(512, backend or "pallas")
        return agent, batch, lambda: jax.block_until_ready(agent.state)
    import torch

    from bench.common import synthetic_torch_agents

    agents, batches = synthetic_torch_agents(backend=backend or "triton")
    return agents["graph"], batches[0], torch.cuda.synchronize


@contextlib.contextmanager
def _cuda_profiler() -> Iterator[None]:
    """cudaProfilerStart / Stop, for ncu's --profile-from-start off. Through torch's runtime, which uses the primary
    context, as XLA does, so the calls apply to both frameworks."""
    import torch

    torch.cuda.init()
    torch.cuda.cudart().cudaProfilerStart()
    try:
        yield
    finally:
        torch.cuda.cudart().cudaProfilerStop()


def _profiled_updates(framework: str, backend: str | None, warmup: int, updates: int,
                      trace_dir: str | None = None) -> None:
    """``updates`` updates after ``warmup`` ones, between cudaProfilerStart / Stop, or (``trace_dir``, JAX only)
    recorded by ``jax.profiler.trace``."""
    agent, batch, sync = _agent(framework, backend)
    for _ in range(warmup):
        agent.update(batch)
    sync()
    if trace_dir is not None:
        import jax

        recorder = jax.profiler.trace(trace_dir)
    else:
        recorder = _cuda_profiler()
    with recorder:
        for _ in range(updates):
            agent.update(batch)
        sync()
    print(f"profiled {updates} {framework} updates after {warmup} warm-up updates"
          + (f" into {trace_dir}" if trace_dir else ""), flush=True)


def _table(by_name: dict[str, list[float]], updates: int, top: int) -> list[str]:
    total = sum(sum(v) for v in by_name.values())
    lines = ["| kernel | calls per update | us per update | share |", "|---|---|---|---|"]
    for name, t in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]:
        lines.append(f"| `{name[:90]}` | {len(t) / updates:g} | {sum(t) / updates:.1f} | "
                     f"{100 * sum(t) / total:.1f} % |")
    return lines


def summarize_trace(path: str, updates: int, top: int = 20) -> str:
    """The ``summarize`` table from a ``jax.profiler.trace`` directory (or one ``*.trace.json.gz`` in it): kernel
    events are the complete ("X") events on the device processes' ``Stream`` threads (XLA's derived "XLA Ops" /
    "XLA Modules" lines repeat them, so they are left out), plus the device span per update."""
    events = trace_events(path)
    kernels = [e for e in events if e["process"].startswith("/device:") and e["thread"].startswith("Stream")]
    if not kernels:
        processes = sorted({e["process"] for e in events})
        raise ValueError(f"{path}: no kernel events on a device stream (processes {processes}; a CPU-only trace has "
                         "none)")
    by_name: dict[str, list[float]] = collections.defaultdict(list)
    for e in kernels:
        by_name[e["name"]].append(float(e["dur"]))  # us
    busy = sum(sum(v) for v in by_name.values())
    span = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
    return "\n".join([f"{kernels[0]['file']}: {len(kernels)} kernels over {updates} updates: "
                      f"{len(kernels) / updates:.0f} kernels, {busy / updates:.1f} us of kernel time and "
                      f"{span / updates:.1f} us of device span per update (busy {100 * busy / span:.0f} %)", ""]
                     + _table(by_name, updates, top))


def read_ncu_csv(path: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The kernel rows of ncu's raw CSV (``--page raw --csv``, with or without its ==PROF== log lines) and the units
    row (column -> unit)."""
    text = open(path).read()
    start = text.find('"ID"')  # ncu writes its own log lines before the CSV
    if start < 0:
        raise ValueError(f"{path}: no ncu CSV header (\"ID\",...) found; did ncu profile any kernel?")
    table = list(csv.DictReader(io.StringIO(text[start:])))
    rows = [r for r in table if r.get("ID", "").strip().isdigit()]
    if not rows:
        raise ValueError(f"{path}: the CSV has no kernel rows")
    units = next((r for r in table if not r.get("ID", "").strip()), {})
    return rows, units


def summarize(path: str, updates: int, top: int = 20) -> str:
    """Kernel count and summed GPU time per update, and the ``top`` kernels by total time, from ncu's raw CSV."""
    rows, _ = read_ncu_csv(path)
    if TIME_METRIC not in rows[0]:
        raise ValueError(f"{path}: no {TIME_METRIC} column; columns: {sorted(rows[0])}")
    by_name: dict[str, list[float]] = collections.defaultdict(list)
    for r in rows:
        by_name[r["Kernel Name"]].append(float(r[TIME_METRIC].replace(",", "")) / 1e3)  # ns -> us
    total = sum(sum(v) for v in by_name.values())
    return "\n".join([f"{path}: {len(rows)} kernels over {updates} updates: {len(rows) / updates:.0f} kernels and "
                      f"{total / updates:.1f} us of kernel time per update", ""] + _table(by_name, updates, top))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_profile_update", description=__doc__.split("\n")[0])
    ap.add_argument("--framework", choices=("jax", "torch"), default="jax")
    ap.add_argument("--warmup", type=int, default=10, help="updates before profiling (compile, capture)")
    ap.add_argument("--updates", type=int, default=2, help="profiled updates (even: both update variants)")
    ap.add_argument("--summarize", metavar="CSV", help="summarise an ncu CSV instead of running updates")
    ap.add_argument("--jax-trace", metavar="DIR", help="JAX only: record the updates with jax.profiler.trace, no ncu")
    ap.add_argument("--summarize-trace", metavar="DIR", help="summarise a jax.profiler.trace directory")
    ap.add_argument("--backend", default=None,
                    help="target backend, strict (default: pallas for jax, the recipe's triton for torch)")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args(argv)
    if a.summarize:
        print(summarize(a.summarize, a.updates, a.top))
        return 0
    if a.summarize_trace:
        print(summarize_trace(a.summarize_trace, a.updates, a.top))
        return 0
    if a.jax_trace and a.framework != "jax":
        ap.error("--jax-trace records JAX updates: use it with --framework jax")
    _profiled_updates(a.framework, a.backend, a.warmup, a.updates, a.jax_trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
