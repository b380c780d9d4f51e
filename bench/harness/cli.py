"""``python -m bench harness``: the command line."""

from __future__ import annotations

import argparse
import os

from bench.harness.cases import case_matrix
from bench.harness.implementations import IMPLEMENTATIONS
from bench.harness.report import fast_p_table
from bench.harness.runner import RunConfig, run_harness

__all__ = ["main"]

DESCRIPTION = ("Cascaded kernel evaluation harness: compile -> correctness -> determinism -> integration -> "
               "performance -> flags -> report")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns 0 when every evaluated kernel passed stages 1-4 on every case it ran, else 1."""
    ap = argparse.ArgumentParser(prog="python -m bench harness", description=DESCRIPTION)
    ap.add_argument("--tiny", "--smoke", dest="smoke", action="store_true",
                    help="tiny CPU matrix, interpreters (< 60 s on 2 cores)")
    ap.add_argument("--out", default=None, help="output directory (default bench/results/harness[_smoke])")
    ap.add_argument("--impls", default=",".join(IMPLEMENTATIONS), help="comma-separated subset of implementations")
    ap.add_argument("--sizes", default=None, help="comma-separated B values for the full matrix")
    ap.add_argument("--seed", type=int, default=0, help="base seed; every trial derives its own")
    ap.add_argument("--trials", type=int, default=None, help="correctness trials per case (fresh inputs each)")
    ap.add_argument("--budget-s", type=float, default=None, help="stop starting new pairs after this many seconds")
    a = ap.parse_args(argv)
    if a.smoke and os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("--tiny needs TRITON_INTERPRET=1 before triton is imported: run `python -m bench harness "
                         "--tiny` (it sets it) or export it")
    out = a.out or os.path.join("bench", "results", "harness_smoke" if a.smoke else "harness")
    cfg = (RunConfig(seed=a.seed, trials=a.trials or 2, repeats=2, perf_reps=2, budget_s=a.budget_s, smoke=True)
           if a.smoke else RunConfig(seed=a.seed, trials=a.trials or 3, budget_s=a.budget_s))
    sizes = tuple(int(s) for s in a.sizes.split(",")) if a.sizes else None
    res = run_harness(case_matrix(a.smoke, sizes), [n for n in a.impls.split(",") if n], out, cfg)
    print("\n".join(fast_p_table(res["fast_p"], "fast_p vs the compiled upstream reference")))
    print(f"{res['seconds']} s; report: {os.path.join(out, 'results.md')}")
    bad = [r for r in res["records"] if r["role"] == "kernel" and r["status"] == "failed"]
    return 1 if bad else 0
