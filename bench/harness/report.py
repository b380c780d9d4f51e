"""Stage 7, the report: results.json, results.csv (one row per implementation x case), results.md (fast_p tables,
flags, every pair) and speedup.png."""

from __future__ import annotations

import csv
import math
import os

import numpy as np

from bench.common import fmt, speedup_plot, write_results
from bench.harness.scoring import BASELINE, FAST_P, SPEEDUP_FLAG

__all__ = ["CSV_FIELDS", "csv_row", "fast_p_table", "plot_speedup", "write_report"]

CSV_FIELDS = ("impl", "framework", "role", "case", "B", "N", "E", "dtype", "layout", "reward_shape", "kind", "gamma",
              "status", "failed_stage", "reason", "first_call_s", "max_abs_error", "max_mass_error",
              "critic_mismatch_fraction", "timer", "median_us", "q20_us", "q80_us", "cudagraph_median_us",
              "speedup_vs_upstream_compiled", "speedup_vs_upstream_compiled_cudagraph", "speedup_vs_upstream_eager",
              "speedup_vs_framework_reference", "flags")


def csv_row(r: dict) -> dict:
    """One CSV row per implementation x case."""
    st = r["stages"]
    c2, c5, c6 = st.get("2_correctness", {}), st.get("5_performance", {}), st.get("6_flags", {})
    return {"impl": r["impl"], "framework": r["framework"], "role": r["role"], "case": r["case"], **r["params"],
            "status": r["status"], "failed_stage": r["failed_stage"], "reason": r["reason"],
            "first_call_s": st.get("1_compile", {}).get("first_call_s"),
            "max_abs_error": c2.get("max_abs_error_finite_rows"), "max_mass_error": c2.get("max_mass_error"),
            "critic_mismatch_fraction": c2.get("critic_mismatch_fraction"), "timer": c5.get("timer"),
            "median_us": c5.get("median_us"), "q20_us": c5.get("q20_us"), "q80_us": c5.get("q80_us"),
            "cudagraph_median_us": c5.get("cudagraph_median_us"),
            "speedup_vs_upstream_compiled": c6.get("speedup_vs_upstream_compiled"),
            "speedup_vs_upstream_compiled_cudagraph": c6.get("speedup_vs_upstream_compiled_cudagraph"),
            "speedup_vs_upstream_eager": c6.get("speedup_vs_upstream_eager"),
            "speedup_vs_framework_reference": c6.get("speedup_vs_framework_reference"),
            "flags": " | ".join(c6.get("reasons", [])) if c6.get("status") == "flagged" else ""}


def fast_p_table(summary: dict, title: str) -> list[str]:
    """Markdown lines: ``title``, then one row per implementation of a ``fast_p_summary``."""
    cols = [f"fast_{p:g}" for p in FAST_P]
    lines = [title, "", "| implementation | cases | correct | " + " | ".join(cols)
             + " | geomean speedup | correct cases without baseline time |",
             "|---|---|---|" + "---|" * len(cols) + "---|---|"]
    for name, s in summary.items():
        lines.append(f"| {name} | {s['cases_evaluated']} | {s['correct']} | "
                     + " | ".join(fmt(s[c], ".2f") for c in cols)
                     + f" | {fmt(s['geomean_speedup'], '.2f')} | {s['cases_without_baseline_time']} |")
    return lines + [""]


def write_report(out_dir: str, res: dict) -> None:
    """results.json, results.csv, results.md and speedup.png under `out_dir`."""
    rows = [csv_row(r) for r in res["records"]]
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        w.writerows(rows)
    env = res["env"]
    cpu_timing = any(r.get("timer") == "cpu_wallclock" for r in rows)
    lines = [f"# Kernel evaluation harness ({env.get('gpu') or 'CPU'}, {env.get('date_utc')})", "",
             f"torch {env.get('torch')}, triton {env.get('triton')}, jax {env.get('jax')}, python {env.get('python')}, "
             f"git {str(env.get('git_sha'))[:12]}{' (dirty)' if env.get('git_dirty') else ''}; "
             f"TRITON_INTERPRET={env.get('TRITON_INTERPRET')}, "
             f"FLASHSAC_PALLAS_INTERPRET={env.get('FLASHSAC_PALLAS_INTERPRET')}; "
             f"{len(res['cases'])} cases, {res['seconds']} s; command `{env.get('command')}`", ""]
    if cpu_timing:
        lines += ["**Timings below are CPU wall-clock of the Triton interpreter / Pallas interpret mode / CPU "
                  "references: they test the harness, they are NOT kernel performance.**", ""]
    lines += fast_p_table(res["fast_p"], "## fast_p vs the compiled upstream reference (headline)")
    lines += fast_p_table(res["fast_p_device"], "## fast_p vs the compiled upstream reference on device time "
                          "(torch: CUDA-graph replay on both sides; JAX: jitted loop vs the graph)")
    lines += fast_p_table(res["fast_p_eager_baseline"], "## fast_p vs the eager upstream path (for reference only)")
    if res["flags"]:
        lines += ["## Flags (manual review)", ""] + [f"- {f['impl']} {f['case']}: {'; '.join(f['flags'])}"
                                                     for f in res["flags"]] + [""]
    lines += ["## Implementation x case", "",
              "| impl | case | status | failed stage | max abs err | mass err | median us (q20-q80) | CUDA graph us | "
              "speedup vs compiled | reason |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        timing = (f"{fmt(r['median_us'], '.1f')} ({fmt(r['q20_us'], '.1f')}-{fmt(r['q80_us'], '.1f')})"
                  if r["median_us"] is not None else "")
        lines.append(f"| {r['impl']} | {r['case']} | {r['status']} | {r['failed_stage'] or ''} | "
                     f"{fmt(r['max_abs_error'], '.2e')} | {fmt(r['max_mass_error'], '.2e')} | {timing} | "
                     f"{fmt(r['cudagraph_median_us'], '.1f')} | {fmt(r['speedup_vs_upstream_compiled'], '.2f')} | "
                     f"{str(r['reason'] or '')[:160].replace('|', '/')} |")
    write_results(out_dir, res, "\n".join(lines) + "\n")
    plot_speedup(rows, os.path.join(out_dir, "speedup.png"), env, cpu_timing)


def plot_speedup(rows: list[dict], path: str, env: dict, cpu_timing: bool) -> None:
    """Speedup over the compiled upstream reference vs B, per implementation (geometric mean over a B's cases)."""
    series = {}
    for name in dict.fromkeys(r["impl"] for r in rows):
        if name == BASELINE:
            continue
        pts: dict[int, list[float]] = {}
        for r in rows:
            if r["impl"] == name and r["speedup_vs_upstream_compiled"]:
                pts.setdefault(r["B"], []).append(r["speedup_vs_upstream_compiled"])
        if pts:
            Bs = sorted(pts)
            series[name] = (Bs, [math.exp(np.mean(np.log(pts[b]))) for b in Bs])
    title = f"{env.get('gpu') or 'CPU'}" + (" - CPU interpreter timings, not kernel performance" if cpu_timing else "")
    speedup_plot(path, series, title, log_y=True, flag=SPEEDUP_FLAG, title_size=9)
