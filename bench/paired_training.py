"""Paired end-to-end training benchmark: the same short training run with the reference target
backend and with the fused kernel, same seeds, and the wall-clock saving of each pair.

    python -m bench.paired_training --out bench/results/paired --seeds 0,1,2 --repeats 2 --num-env-steps 5000
    python -m bench.paired_training --out /tmp/paired --frameworks torch --dry-run     # print the commands only

Pairs: the PyTorch agent with agent.categorical_target_backend=torch vs =triton, and the JAX agent with jax vs
pallas (strict mode on, so a kernel run can never silently become a reference run). Each run is a separate
subprocess, `python -m agent_<framework>.train --overrides key=value ...` (upstream FlashSAC's CLI convention);
its wall-clock is measured around the process (start to exit), so nothing depends on the agents' internals; the
training loop's own wall time, printed by the CLI (``[completed] ... wall=...s``), is reported beside it (the process
time adds imports, environment creation and, for JAX, loading executables from the compilation cache). Within a
pair the two runs use the same seed and overrides; the order alternates between repeats (reference first, then
kernel first) so a warm-cache or thermal drift does not favour one side. Before the pairs, one untimed run per
backend (``--no-warm-up`` skips it) fills Triton's on-disk kernel cache and a persistent JAX compilation cache under
``--out`` that every JAX run uses, so the pairs time training rather than first-time compilation. The warm-up has
the pairs' ``--num-env-steps``: the JAX programs hold the LR schedule's horizon (from ``num_env_steps``) as
constants, so a shorter run compiles other programs (an H200 run with a 1,050-step warm-up recompiled for 6.7-6.9 s
in its first pair). The saving of a
pair is 100 * (t_reference - t_kernel) / t_reference percent; per framework the report gives every pair, the mean,
median, range and percentile-bootstrap 95% intervals of the mean and of the median (`summarize_savings`).
The seed project reported 6 paired torch/Triton runs over 3 seeds: mean 3.23%, median 2.39%, range -2.26%..+9.87%.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

import numpy as np

from agent_jax.compilation_cache import jax_cache_env
from bench.common import REPO, bootstrap_ci, environment, write_results

__all__ = ["DEFAULT_OVERRIDES", "PAIRS", "child_env", "main", "merge_overrides", "pair_saving_percent", "run_pair",
           "timed_run", "summarize_savings"]

# framework -> (training module, reference backend, kernel backend)
PAIRS = {"torch": ("agent_torch.train", "torch", "triton"), "jax": ("agent_jax.train", "jax", "pallas")}
# Short-run defaults (a --overrides with the same key replaces them): updates start after 1000 transitions (upstream's
# 10000 would leave a short run with no updates at all), and one evaluation episode.
DEFAULT_OVERRIDES = ("agent.buffer_min_length=1000", "num_eval_episodes=1")
LOOP_WALL = re.compile(r"^\[completed\] .*?\bwall=([0-9.]+)s", re.M)  # agent_common.loop.run_cli's result line


def merge_overrides(defaults: tuple[str, ...] | list[str], extra: list[str]) -> list[str]:
    """`defaults` then `extra`, where an `extra` key replaces the default with the same key."""
    keys = {o.split("=", 1)[0].strip() for o in extra}
    return [o for o in defaults if o.split("=", 1)[0].strip() not in keys] + list(extra)


def pair_saving_percent(t_reference: float, t_kernel: float) -> float:
    """Wall-clock saving of the kernel run relative to the reference run, in percent (positive: kernel faster)."""
    if not (t_reference > 0 and t_kernel > 0):
        raise ValueError(f"wall-clock times must be positive, got reference {t_reference}, kernel {t_kernel}")
    return 100.0 * (t_reference - t_kernel) / t_reference


def summarize_savings(savings: list[float] | np.ndarray, n_boot: int = 10_000, confidence: float = 0.95,
                      seed: int = 0) -> dict:
    """Mean, median, range, sample std and percentile-bootstrap intervals of the mean and the median.

    Args:
        savings: per-pair savings (percent).
        n_boot: bootstrap resamples (pairs resampled with replacement).
        confidence: interval coverage, e.g. 0.95.
        seed: RNG seed of the resampling (the summary is deterministic).

    Returns:
        {"n", "mean", "median", "min", "max", "std", "mean_ci", "median_ci", "confidence", "n_boot"}; with one pair
        the intervals collapse to that value.
    """
    a = np.asarray(savings, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ValueError("no savings to summarize (every pair failed?)")
    if not np.isfinite(a).all():
        raise ValueError(f"savings must be finite, got {a.tolist()}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = bootstrap_ci([a], np.mean, int(n_boot), seed, confidence)  # the same resamples for both statistics
    median = bootstrap_ci([a], np.median, int(n_boot), seed, confidence)
    return {"n": int(a.size), "mean": mean[0], "median": median[0], "min": float(a.min()),
            "max": float(a.max()), "std": float(a.std(ddof=1)) if a.size > 1 else 0.0,
            "mean_ci": list(mean[1:]), "median_ci": list(median[1:]), "confidence": confidence, "n_boot": int(n_boot)}


def train_command(framework: str, backend: str, seed: int, num_env_steps: int, run_dir: str,
             extra: list[str]) -> list[str]:
    module = PAIRS[framework][0]
    overrides = [f"num_env_steps={num_env_steps}", f"seed={seed}", f"agent.categorical_target_backend={backend}",
                 "agent.categorical_target_strict=true", f"save_path={run_dir}", "progress_bar=false", *extra]
    return [sys.executable, "-m", module] + [arg for o in overrides for arg in ("--overrides", o)]


def child_env(extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a benchmark's child process: this one's, unbuffered, ``extra_env`` added, and the repository
    first on ``PYTHONPATH``."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def timed_run(cmd: list[str], log_path: str, timeout_s: float, extra_env: dict[str, str] | None = None) -> dict:
    """Run one training process; wall-clock from start to exit (the whole end-to-end run, imports and compiles
    included, identical for both sides of a pair)."""
    env = child_env(extra_env)
    t0 = time.perf_counter()
    try:
        with open(log_path, "w") as log:
            proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    wall = time.perf_counter() - t0
    with open(log_path) as f:
        text = f.read()
    loop = LOOP_WALL.findall(text)
    return {"cmd": " ".join(cmd), "returncode": rc, "wall_s": wall, "loop_s": float(loop[-1]) if loop else None,
            "log": log_path, "log_tail": text[-1500:]}


def run_pair(framework: str, seed: int, repeat: int, num_env_steps: int, out_dir: str, extra: list[str],
             timeout_s: float) -> dict:
    """One pair: the reference and the kernel run with the same seed; the order alternates with `repeat`."""
    _, ref, kern = PAIRS[framework]
    order = (ref, kern) if repeat % 2 == 0 else (kern, ref)
    runs = {}
    for backend in order:
        tag = f"{framework}-{backend}-seed{seed}-rep{repeat}"
        run_dir = os.path.join(out_dir, "runs", tag)
        os.makedirs(run_dir, exist_ok=True)
        cmd = train_command(framework, backend, seed, num_env_steps, run_dir, extra)
        env = jax_cache_env(os.path.join(out_dir, "jax_cache")) if framework == "jax" else None
        runs[backend] = timed_run(cmd, os.path.join(out_dir, "logs", tag + ".log"), timeout_s, env)
        print(f"  {tag}: rc={runs[backend]['returncode']} {runs[backend]['wall_s']:.1f} s", flush=True)
    rec = {"framework": framework, "seed": seed, "repeat": repeat, "order": list(order), "reference": ref,
           "kernel": kern, "runs": runs}
    ok = all(r["returncode"] == 0 for r in runs.values())
    rec["ok"] = ok
    if ok:
        rec["t_reference_s"], rec["t_kernel_s"] = runs[ref]["wall_s"], runs[kern]["wall_s"]
        rec["saving_percent"] = pair_saving_percent(rec["t_reference_s"], rec["t_kernel_s"])
        loops = runs[ref].get("loop_s"), runs[kern].get("loop_s")
        if all(loops):
            rec["t_reference_loop_s"], rec["t_kernel_loop_s"] = loops
            rec["loop_saving_percent"] = pair_saving_percent(*loops)
    return rec


def _report(out_dir: str, res: dict) -> str:
    lines = [f"# Paired end-to-end training benchmark ({res['env'].get('gpu') or 'CPU'}, {res['env']['date_utc']})",
             "", f"`{res['env']['command']}`; num_env_steps={res['config']['num_env_steps']}, seeds "
             f"{res['config']['seeds']}, repeats {res['config']['repeats']}, extra overrides "
             f"{res['config']['extra_overrides']}. "
             "Wall-clock of each training process, start to exit, and of its training loop (the CLI's `wall=`).", "",
             *([] if res.get("complete", True) else ["**Partial**: written after the last finished pair; the run had "
                                                      "more pairs to go.", ""]),
             "| framework | seed | repeat | order | reference s | kernel s | saving % | reference loop s | "
             "kernel loop s | loop saving % |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in res["pairs"]:
        if p["ok"]:
            loop = (f"{p['t_reference_loop_s']:.1f} | {p['t_kernel_loop_s']:.1f} | {p['loop_saving_percent']:+.2f}"
                    if "loop_saving_percent" in p else " | | ")
            lines.append(f"| {p['framework']} | {p['seed']} | {p['repeat']} | {' then '.join(p['order'])} | "
                         f"{p['t_reference_s']:.1f} | {p['t_kernel_s']:.1f} | {p['saving_percent']:+.2f} | {loop} |")
        else:
            rcs = {b: r["returncode"] for b, r in p["runs"].items()}
            lines.append(f"| {p['framework']} | {p['seed']} | {p['repeat']} | {' then '.join(p['order'])} | "
                         f"failed {rcs} | | | | | |")
    lines += ["", "| framework | time | pairs | mean % | median % | range % | mean 95% CI | median 95% CI |",
              "|---|---|---|---|---|---|---|---|"]
    for key, what in (("summary", "process"), ("summary_loop", "training loop")):
        for fw, s in res.get(key, {}).items():
            if isinstance(s, dict):
                lines.append(f"| {fw} ({PAIRS[fw][1]} vs {PAIRS[fw][2]}) | {what} | {s['n']} | {s['mean']:+.2f} | "
                             f"{s['median']:+.2f} | {s['min']:+.2f} .. {s['max']:+.2f} | "
                             f"[{s['mean_ci'][0]:+.2f}, {s['mean_ci'][1]:+.2f}] | "
                             f"[{s['median_ci'][0]:+.2f}, {s['median_ci'][1]:+.2f}] |")
            else:
                lines.append(f"| {fw} | {what} | 0 | {s} | | | | |")
    if not res["env"].get("gpu"):
        lines += ["", "**No GPU: the kernels ran in their CPU interpreters; these savings test the script, they say "
                  "nothing about the kernels.**"]
    return write_results(out_dir, res, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    """CLI; returns 0 if every pair completed, 1 otherwise (the report is written either way)."""
    ap = argparse.ArgumentParser(prog="python -m bench.paired_training", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join("bench", "results", "paired"))
    ap.add_argument("--frameworks", default="torch,jax", help="comma-separated subset of torch,jax")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--repeats", type=int, default=2, help="pairs per seed (the order alternates)")
    ap.add_argument("--num-env-steps", type=int, default=5000)
    ap.add_argument("--overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="extra override for every run, repeatable (e.g. agent.buffer_min_length=1000)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per training process")
    ap.add_argument("--budget-s", type=float, default=None, help="start no new pair after this many seconds")
    ap.add_argument("--n-boot", type=int, default=10_000)
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                    help="skip the untimed run per backend that fills the JAX compilation and Triton caches first")
    a = ap.parse_args(argv)
    frameworks = [f for f in a.frameworks.split(",") if f]
    bad = [f for f in frameworks if f not in PAIRS]
    if bad:
        ap.error(f"unknown frameworks {bad}; choose from {tuple(PAIRS)}")
    seeds = [int(s) for s in a.seeds.split(",") if s]
    out = os.path.abspath(a.out)
    a.overrides = merge_overrides(DEFAULT_OVERRIDES, a.overrides)
    if a.dry_run:
        for fw in frameworks:
            for backend in PAIRS[fw][1:]:
                print(" ".join(train_command(fw, backend, seeds[0], a.num_env_steps, os.path.join(out, "runs", "X"),
                                        a.overrides)))
        return 0
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    t0 = time.perf_counter()
    warm_ups = []
    if a.warm_up:  # untimed: compile every executable / kernel once, so the pairs time training, not compilers
        for fw in frameworks:
            for backend in PAIRS[fw][1:]:
                tag = f"warmup-{fw}-{backend}"
                cmd = train_command(fw, backend, seeds[0], a.num_env_steps, os.path.join(out, "runs", tag),
                               a.overrides)
                env = jax_cache_env(os.path.join(out, "jax_cache")) if fw == "jax" else None
                run = timed_run(cmd, os.path.join(out, "logs", tag + ".log"), a.timeout_s, env)
                print(f"  {tag}: rc={run['returncode']} {run['wall_s']:.1f} s (untimed)", flush=True)
                warm_ups.append({"tag": tag, "returncode": run["returncode"], "wall_s": run["wall_s"]})
    pairs: list[dict] = []
    config = {"frameworks": frameworks, "seeds": seeds, "repeats": a.repeats, "num_env_steps": a.num_env_steps,
              "extra_overrides": a.overrides, "warm_ups": warm_ups}

    def summary(key: str) -> dict:
        out = {}
        for fw in frameworks:
            s = [p[key] for p in pairs if p["framework"] == fw and p["ok"] and key in p]
            out[fw] = summarize_savings(s, n_boot=a.n_boot) if s else "no completed pair"
        return out

    def report(final: bool) -> str:
        res = {"env": environment(), "config": config, "pairs": pairs, "summary": summary("saving_percent"),
               "summary_loop": summary("loop_saving_percent"), "complete": final,
               "seconds": round(time.perf_counter() - t0, 1)}
        return _report(out, res)

    for repeat in range(a.repeats):
        for seed in seeds:
            for fw in frameworks:
                if a.budget_s is not None and time.perf_counter() - t0 > a.budget_s:
                    print(f"  budget of {a.budget_s:.0f} s exhausted: skipping {fw} seed {seed} repeat {repeat}")
                    continue
                pairs.append(run_pair(fw, seed, repeat, a.num_env_steps, out, a.overrides, a.timeout_s))
                report(final=False)  # the report after every pair: a run cut short keeps its finished pairs
    print(report(final=True))
    return 0 if pairs and all(p["ok"] for p in pairs) else 1


if __name__ == "__main__":
    sys.exit(main())
