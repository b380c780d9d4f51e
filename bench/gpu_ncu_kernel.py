"""Nsight Compute profile of the kernels alone, to find what holds them above the bytes floor at large B.

    ncu --profile-from-start off --set full --import-source no --export $OUT/ncu_kernel \\
        python3 -m bench.gpu_ncu_kernel --sizes 65536,1048576 [--backends triton,pallas]
    ncu --import $OUT/ncu_kernel.ncu-rep --page details > $OUT/ncu_kernel.txt
    ncu --import $OUT/ncu_kernel.ncu-rep --page raw --csv > $OUT/ncu_kernel.csv
    python3 -m bench.gpu_ncu_kernel --summary $OUT/ncu_kernel.csv

Each size's inputs (the ``random`` kind, N = 101, E = 2, fp32 log-probs) are built and the op is called a few times
(compile, warm-up) outside the profiled range; then one call per size and backend runs between ``cudaProfilerStart``
and ``cudaProfilerStop``, so the report holds exactly one kernel launch per size and backend, under the default launch
configuration (the RPP the launch rule picks for that B): the Triton kernel through ``torch_impl``, and with
``--backends triton,pallas`` the Pallas kernel through a jitted ``jax_impl`` call on the same inputs, so both kernels'
device time and instruction counts come from the same tool (the timing benches measure them by different methods).
``--summary`` prints, per profiled launch, the few metrics the kernel notes quote (duration, DRAM throughput,
achieved occupancy, registers, issue activity, warp instructions, the top warp stall reasons) from the CSV of
``ncu --import ... --page raw --csv``.
"""

from __future__ import annotations

import argparse
import re
import sys

# The raw-page metrics the summary quotes (the names of the ncu on the H200 machines, 2026-12).
SUMMARY_METRICS = {
    "gpu__time_duration.sum": "duration",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "DRAM % of peak",
    "dram__bytes_read.sum": "DRAM bytes read",
    "dram__bytes_write.sum": "DRAM bytes written",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy %",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical occupancy %",
    "launch__registers_per_thread": "registers/thread",
    "launch__grid_size": "grid",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM % of peak",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue active %",
    "smsp__inst_executed.sum": "warp instructions",
}
# Stall reasons, cycles per issued instruction; the name differs between ncu versions.
STALL = re.compile(r"smsp__average_warps?_(?:latency_)?issue_stalled_(\w+?)(?:_per_issue_active)?\.ratio$")


def profile(sizes: list[int], warmup: int, backends: tuple[str, ...] = ("triton",)) -> None:
    import torch

    from bench.common import repeated_inputs

    calls = []
    for B in sizes:
        host = repeated_inputs(B, "random")
        if "triton" in backends:
            from torch_impl import categorical_td_target

            x = {k: torch.from_numpy(v).cuda() for k, v in host.items()}
            calls.append(lambda x=x: categorical_td_target(**x, gamma=0.99, backend="triton", strict=True))
        if "pallas" in backends:
            import jax

            from jax_impl import categorical_td_target as jax_target

            xj = {k: jax.device_put(v) for k, v in host.items()}
            fn = jax.jit(lambda x: jax_target(**x, gamma=0.99, backend="pallas", strict=True))
            calls.append(lambda xj=xj, fn=fn: fn(xj).block_until_ready())
    for call in calls:
        for _ in range(warmup):
            call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def summary(path: str, stalls: int = 6) -> str:
    """One block per profiled launch: the SUMMARY_METRICS and the ``stalls`` largest stall reasons (cycles a warp
    waits per issued instruction, ncu's smsp__average_warp(s)_issue_stalled_* ratios)."""
    from bench.gpu_profile_update import read_ncu_csv

    rows, unit = read_ncu_csv(path)
    lines = []
    for rec in rows:
        lines.append(f"## {rec.get('Kernel Name', '?')} (ID {rec.get('ID', '?')})")
        for key, label in SUMMARY_METRICS.items():
            if key in rec:
                lines.append(f"- {label}: {rec[key]} {unit.get(key, '')}".rstrip())
        st = []
        for key, v in rec.items():
            m = STALL.match(key)
            if m and v.replace(",", "").replace(".", "", 1).isdigit():
                st.append((float(v.replace(",", "")), m.group(1)))
        for v, name in sorted(st, reverse=True)[:stalls]:
            lines.append(f"- stall {name}: {v:.2f} cycles per issued instruction")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="65536,1048576", help="comma-separated batch sizes, one profiled launch each")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--backends", default="triton", help="comma-separated: triton, pallas (both on the same inputs)")
    ap.add_argument("--summary", metavar="CSV", help="print the summary of ncu's raw CSV instead of profiling")
    a = ap.parse_args(argv)
    if a.summary:
        sys.stdout.write(summary(a.summary))
        return 0
    backends = tuple(a.backends.split(","))
    if set(backends) - {"triton", "pallas"}:  # "" too: an empty --backends splits to ("",)
        ap.error(f"--backends: expected a comma-separated subset of triton,pallas, got {a.backends!r}")
    profile([int(s) for s in a.sizes.split(",")], a.warmup, backends)
    return 0


if __name__ == "__main__":
    sys.exit(main())
