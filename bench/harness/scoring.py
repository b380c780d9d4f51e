"""Stage 6 (speedups against upstream's compiled and eager paths, the > 10x review flag) and the fast_p summary."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bench.harness.stages import stage_record

__all__ = ["BASELINE", "EAGER_BASELINE", "FAST_P", "SPEEDUP_FLAG", "apply_flags", "fast_p_summary", "is_correct"]

FAST_P = (0.0, 1.0, 1.2, 2.0)
SPEEDUP_FLAG = 10.0  # KernelBench's default "be paranoid" threshold
BASELINE = "upstream_compiled"
EAGER_BASELINE = "upstream_eager"


def _median(rec: dict, key: str = "median_us") -> float | None:
    """A record's stage-5 time (``key``), None unless stage 5 passed."""
    perf = rec["stages"].get("5_performance", {})
    return perf.get(key) if perf.get("status") == "passed" else None


def apply_flags(records: list[dict], emit: Callable[[dict], None]) -> None:
    """Stage 6: speedups vs the compiled and eager upstream paths on the same case; > 10x over the compiled
    reference is flagged for manual review (CPU-interpreter timings are flagged too, but mean nothing)."""
    by_case = {(r["impl"], r["case"]): r for r in records}
    for r in records:
        perf = r["stages"].get("5_performance", {})
        if perf.get("status") != "passed":
            r["stages"]["6_flags"] = stage_record("blocked", ["5_performance did not pass"])
        else:
            data: dict = {"flags": []}
            # JAX timings are device time (a jitted loop of calls), so the torch baselines they are compared with
            # must be device time too: their CUDA-graph replay time, not their host-bound direct-call time.
            base_kind = "cudagraph_median_us" if r["framework"] == "jax" else "median_us"
            for base, key, kind in ((BASELINE, "speedup_vs_upstream_compiled", base_kind),
                                    (EAGER_BASELINE, "speedup_vs_upstream_eager", base_kind),
                                    ("torch" if r["framework"] == "torch" else "jax", "speedup_vs_framework_reference",
                                     "median_us")):
                b = by_case.get((base, r["case"]))
                t_b, t_i = (_median(b, kind) if b else None), _median(r)
                data[key] = t_b / t_i if t_b and t_i else None
            for kind in ("cudagraph_median_us",):
                b = by_case.get((BASELINE, r["case"]))
                t_b, t_i = (_median(b, kind) if b else None), _median(r, kind)
                data["speedup_vs_upstream_compiled_cudagraph"] = t_b / t_i if t_b and t_i else None
            s = data["speedup_vs_upstream_compiled"]
            if s is not None and s > SPEEDUP_FLAG and r["impl"] != BASELINE:
                data["flags"].append(f"speedup {s:.1f}x > {SPEEDUP_FLAG:.0f}x over the compiled upstream reference: "
                                     "review manually (KernelBench: be paranoid about suspiciously good results)")
            r["stages"]["6_flags"] = stage_record("flagged" if data["flags"] else "passed", data["flags"], **data)
        r["speedup_vs_upstream_compiled"] = r["stages"]["6_flags"].get("speedup_vs_upstream_compiled")
        emit({"impl": r["impl"], "case": r["case"], "stage": "6_flags", **r["stages"]["6_flags"]})


def is_correct(r: dict) -> bool:
    """Stages 1-4 all passed."""
    return all(r["stages"].get(s, {}).get("status") == "passed"
               for s in ("1_compile", "2_correctness", "3_determinism", "4_integration"))


def fast_p_summary(records: list[dict], baseline: str = BASELINE, device_time: bool = False) -> dict:
    """fast_p per implementation (KernelBench): share of its cases that are correct (stages 1-4 passed) AND faster
    than `baseline` on the same case by a factor > p; fast_0 is the correctness rate. The denominator is every case
    the implementation was evaluated on (expected skips and budget skips excluded, and counted). A correct case
    without a baseline time (the baseline was skipped or failed there) counts as not faster for p > 0.
    Also: the geometric-mean speedup over correct cases that have a baseline time.
    ``device_time`` (compiled baseline only): torch implementations are compared by CUDA-graph replay time on both
    sides, so host launch overhead drops out; JAX ones already are (their jitted-loop time vs the graph time)."""
    key = "speedup_vs_upstream_compiled" if baseline == BASELINE else "speedup_vs_upstream_eager"
    if device_time and baseline != BASELINE:
        raise ValueError(f"device_time compares with {BASELINE} only, got baseline {baseline!r}")
    out = {}
    for name in dict.fromkeys(r["impl"] for r in records):
        rs = [r for r in records if r["impl"] == name]
        evaluated = [r for r in rs if not r["stages"]["1_compile"].get("expected_skip")
                     and r["stages"]["1_compile"]["status"] != "not_run"]
        n = len(evaluated)
        correct = [r for r in evaluated if is_correct(r)]
        speed = [r["stages"].get("6_flags", {}).get(
            "speedup_vs_upstream_compiled_cudagraph" if device_time and r.get("framework") == "torch" else key)
            for r in correct]
        with_base = [s for s in speed if s]
        row = {"cases_evaluated": n, "cases_skipped": len(rs) - n, "correct": len(correct),
               "cases_without_baseline_time": len(correct) - len(with_base),
               "geomean_speedup": float(np.exp(np.mean(np.log(with_base)))) if with_base else None}
        for p in FAST_P:
            hits = len(correct) if p == 0 else sum(1 for s in with_base if s > p)
            row[f"fast_{p:g}"] = hits / n if n else None
        out[name] = row
    return out

