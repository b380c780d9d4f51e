"""Soak check of the JAX agent's data-parallel run on 2 host devices (not part of CI: about 3-5 min a run on a
2-core CPU machine).

Runs the command below ``--runs`` times in a row, each in a fresh process and run directory under ``--out``:

    XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu python -m agent_jax.train \\
      --overrides num_devices=2 --overrides num_env_steps=2000 --overrides agent.buffer_min_length=500 \\
      --overrides agent.sample_batch_size=32 --overrides num_eval_episodes=1 --overrides save_path=<out>/run<i>

Its step-0 evaluation runs on a background thread with a policy snapshot while the first updates donate the
training state's buffers, which is where a snapshot sharing memory with the state fails ("Buffer has been deleted
or donated"). Every run must exit 0. The runs share one JAX compilation cache under ``--out`` (the first run
compiles, the later ones load), never the user's.

Writes ``<out>/soak.json`` (each run's exit status, seconds and last stderr line) and ``<out>/run<i>.log``; exits 1
if any run failed.

    python .ci/soak_jax_data_parallel.py --out /tmp/soak [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OVERRIDES = ["num_devices=2", "num_env_steps=2000", "agent.buffer_min_length=500", "agent.sample_batch_size=32",
             "num_eval_episodes=1"]


def command(run_dir: str) -> list[str]:
    """The soaked command for one run directory."""
    cmd = [sys.executable, "-m", "agent_jax.train"]
    for item in [*OVERRIDES, f"save_path={run_dir}"]:
        cmd += ["--overrides", item]
    return cmd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="a new or empty directory for the runs, logs and soak.json")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a run may take before it counts failed")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    out = os.path.abspath(args.out)
    if os.path.isdir(out) and os.listdir(out):
        parser.error(f"--out {out} is not empty: give a new directory (nothing there is deleted)")
    os.makedirs(out, exist_ok=True)
    flags = " ".join(f for f in (os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=2") if f)
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=os.path.join(out, "jax"),
               PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    runs = []
    for i in range(1, args.runs + 1):
        run_dir, log = os.path.join(out, f"run{i}"), os.path.join(out, f"run{i}.log")
        t0 = time.monotonic()
        with open(log, "w") as f:
            try:
                rc = subprocess.run(command(run_dir), cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT,
                                    timeout=args.timeout).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        seconds = time.monotonic() - t0
        with open(log, errors="replace") as f:
            text = f.read()
        last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
        runs.append({"run": i, "returncode": rc, "seconds": round(seconds, 1), "last_line": last[-300:],
                     "deleted_or_donated": "deleted or donated" in text})
        print(f"run {i}/{args.runs}: exit {rc} in {seconds:.0f} s" + ("" if rc == 0 else f": {last[-300:]} ({log})"),
              flush=True)
    failed = [r["run"] for r in runs if r["returncode"] != 0]
    summary = {"command": " ".join(command("<out>/run<i>")), "xla_flags": flags, "runs": runs,
               "passed": len(runs) - len(failed), "failed_runs": failed,
               "total_seconds": round(sum(r["seconds"] for r in runs), 1)}
    with open(os.path.join(out, "soak.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{summary['passed']} of {len(runs)} runs passed in {summary['total_seconds']:.0f} s "
          f"({os.path.join(out, 'soak.json')})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
