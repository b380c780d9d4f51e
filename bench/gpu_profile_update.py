"""Per-kernel GPU time of the agents' update step under Nsight Compute (issue 6: where the JAX update's time goes).

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
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import sys

TIME_METRIC = "gpu__time_duration.sum"


def _profiled_updates(framework: str, warmup: int, updates: int) -> None:
    import torch

    if framework == "jax":
        import jax

        from bench.gpu_agent_jax import synthetic_agent_and_batch

        agent, batch = synthetic_agent_and_batch(512)

        def sync() -> None:
            jax.block_until_ready(agent.state)
    else:
        from bench.gpu_agent_torch import synthetic_agents

        agents, batches = synthetic_agents([])
        agent, batch = agents["graph"], batches[0]

        def sync() -> None:
            torch.cuda.synchronize()

    torch.cuda.init()  # the runtime's primary context, which XLA uses too: the profiler calls below apply to both
    for _ in range(warmup):
        agent.update(batch)
    sync()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(updates):
        agent.update(batch)
    sync()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"profiled {updates} {framework} updates after {warmup} warm-up updates", flush=True)


def summarize(path: str, updates: int, top: int = 20) -> str:
    """Kernel count and summed GPU time per update, and the ``top`` kernels by total time, from ncu's raw CSV."""
    text = open(path).read()
    start = text.find('"ID"')  # ncu writes its own log lines before the CSV
    if start < 0:
        raise ValueError(f"{path}: no ncu CSV header (\"ID\",...) found; did ncu profile any kernel?")
    rows = [r for r in csv.DictReader(io.StringIO(text[start:])) if r.get("ID", "").strip().isdigit()]
    if not rows:
        raise ValueError(f"{path}: the CSV has no kernel rows")
    if TIME_METRIC not in rows[0]:
        raise ValueError(f"{path}: no {TIME_METRIC} column; columns: {sorted(rows[0])}")
    by_name: dict[str, list[float]] = collections.defaultdict(list)
    for r in rows:
        by_name[r["Kernel Name"]].append(float(r[TIME_METRIC].replace(",", "")) / 1e3)  # ns -> us
    total = sum(sum(v) for v in by_name.values())
    lines = [f"{path}: {len(rows)} kernels over {updates} updates: {len(rows) / updates:.0f} kernels and "
             f"{total / updates:.1f} us of kernel time per update", "",
             "| kernel | calls per update | us per update | share |", "|---|---|---|---|"]
    for name, t in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]:
        lines.append(f"| `{name[:90]}` | {len(t) / updates:g} | {sum(t) / updates:.1f} | "
                     f"{100 * sum(t) / total:.1f} % |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_profile_update", description=__doc__.split("\n")[0])
    ap.add_argument("--framework", choices=("jax", "torch"), default="jax")
    ap.add_argument("--warmup", type=int, default=10, help="updates before profiling (compile, capture)")
    ap.add_argument("--updates", type=int, default=2, help="profiled updates (even: both update variants)")
    ap.add_argument("--summarize", metavar="CSV", help="summarise an ncu CSV instead of running updates")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args(argv)
    if a.summarize:
        print(summarize(a.summarize, a.updates, a.top))
        return 0
    _profiled_updates(a.framework, a.warmup, a.updates)
    return 0


if __name__ == "__main__":
    sys.exit(main())
