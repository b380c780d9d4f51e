"""Data-parallel scaling of both agents on the CPU-sim recipe: 1 vs N GPUs, updates/s and env steps/s per GPU.

    python -m bench.data_parallel --out DIR [--gpus 1 2] [--frameworks torch jax] [--budget 60]

Each (framework, GPUs) pair is one short training run of upstream's CPU-sim HalfCheetah recipe
(``bench.common.UPSTREAM_RECIPE``; evaluation off, updates after ``--warmup`` random steps), stopped by
``max_wall_seconds=--budget``:

- torch, N GPUs: ``torchrun --nproc_per_node=N -m agent_torch.train``: N replicas, each with its own environment
  and a batch of ``agent.sample_batch_size`` rows (docs/flashsac.md, "Several GPUs");
- JAX, N GPUs: ``python -m agent_jax.train --overrides num_devices=N``: one process, one environment, a batch of
  N x ``agent.sample_batch_size`` rows split over the N devices.

The rates are the steady ones: the medians of the logging windows' ``perf/updates_per_second`` and
``perf/env_steps_per_second`` (TensorBoard scalars of replica 0; windows before the first update left out). Per GPU:
env steps/s divided by N; torch's updates/s are already per replica, JAX's are updates of the N-device batch.
Scaling efficiency: batch rows trained per second per GPU on N GPUs over the same on 1 GPU.
Writes DIR/results.json, DIR/results.md and DIR/<framework>_<N>gpu.log; the runs themselves go to --runs-dir.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.common import REPO, UPSTREAM_RECIPE, environment, fmt, steady_rates, write_results

__all__ = ["main", "run_command", "scaling_table"]


def run_command(framework: str, gpus: int, run_dir: str, budget: float, env_steps: int, warmup: int,
                extra: Sequence[str] = (), port: int = 29533) -> list[str]:
    """The command of one scaling run (torchrun for torch on several GPUs); ``extra`` overrides come last."""
    overrides = [
        *UPSTREAM_RECIPE,
        f"num_env_steps={env_steps}",
        f"agent.buffer_min_length={warmup}",
        "num_eval_episodes=0",
        "logging_per_interaction_step=500",
        f"save_checkpoint_per_interaction_step={env_steps}",
        "save_buffer=false",
        "progress_bar=false",
        f"max_wall_seconds={budget}",
        f"save_path={run_dir}",
    ]
    if framework == "torch":
        overrides += ["agent.use_compile=false", "agent.use_cuda_graph=true"]
        head = [sys.executable, "-m", "agent_torch.train"]
        if gpus > 1:
            head = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={gpus}",
                    "--master_addr=127.0.0.1", f"--master_port={port}", "-m", "agent_torch.train"]
    else:
        overrides.append(f"num_devices={gpus}")
        head = [sys.executable, "-m", "agent_jax.train"]
    overrides += list(extra)
    cmd = list(head)
    for item in overrides:
        cmd += ["--overrides", item]
    return cmd


def _one(framework: str, gpus: int, args: argparse.Namespace) -> dict[str, Any]:
    run_dir = os.path.join(args.runs_dir, f"{framework}_{gpus}gpu")
    cmd = run_command(framework, gpus, run_dir, args.budget, args.env_steps, args.warmup, args.overrides)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p),
               XLA_PYTHON_CLIENT_PREALLOCATE="false", CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(gpus)))
    t = time.time()
    with open(os.path.join(args.out, f"{framework}_{gpus}gpu.log"), "w") as log:
        proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=args.budget + 240)
    result: dict[str, Any] = {"command": " ".join(cmd), "returncode": proc.returncode,
                              "wall_s": round(time.time() - t, 1)}
    if proc.returncode == 0:
        rates = steady_rates(run_dir)
        result.update(windows=rates["steady_windows"], updates_per_s=rates.get("steady_updates_per_second"),
                      env_steps_per_s=rates.get("steady_env_steps_per_second"))
    return result


def scaling_table(results: dict[str, dict[int, dict[str, Any]]], batch: int) -> list[dict[str, Any]]:
    """Per (framework, GPUs): updates/s and env steps/s per GPU, batch rows per second per GPU, and the scaling
    efficiency against the same framework on 1 GPU."""
    rows = []
    for framework, by_gpus in results.items():
        base = None
        for gpus in sorted(by_gpus):
            r = by_gpus[gpus]
            ups, sps = r.get("updates_per_s"), r.get("env_steps_per_s")
            if ups is None or sps is None:
                rows.append({"framework": framework, "gpus": gpus, "status": f"rc={r.get('returncode')}"})
                continue
            # torch: updates/s of one replica, B rows on its GPU; JAX: updates/s of the N x B batch, B rows per
            # GPU. Either way every GPU takes part in every update and trains B rows per update.
            rows_per_gpu = ups * batch
            row = {"framework": framework, "gpus": gpus, "updates_per_s_per_gpu": ups,
                   "env_steps_per_s_per_gpu": sps / gpus, "batch_rows_per_s_per_gpu": rows_per_gpu,
                   "status": "ok"}
            if gpus == 1:
                base = row
            if base is not None:
                row["scaling_efficiency"] = rows_per_gpu / base["batch_rows_per_s_per_gpu"]
                row["env_scaling_efficiency"] = row["env_steps_per_s_per_gpu"] / base["env_steps_per_s_per_gpu"]
            rows.append(row)
    return rows


def _markdown(res: dict[str, Any]) -> str:
    lines = ["# Data-parallel scaling (CPU-sim recipe)", "", f"{res['environment'].get('gpu')}, "
             f"{res['environment'].get('date_utc')}, budget {res['budget_s']} s per run, batch "
             f"{res['batch']} rows per GPU", "",
             "| framework | GPUs | updates/s per GPU | env steps/s per GPU | batch rows/s per GPU | scaling eff. | "
             "env-step scaling eff. | status |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in res["table"]:
        lines.append(f"| {r['framework']} | {r['gpus']} | {fmt(r.get('updates_per_s_per_gpu'))} | "
                     f"{fmt(r.get('env_steps_per_s_per_gpu'))} | {fmt(r.get('batch_rows_per_s_per_gpu'))} | "
                     f"{fmt(r.get('scaling_efficiency'))} | {fmt(r.get('env_scaling_efficiency'))} | {r['status']} |")
    lines += ["", "torch: one replica per GPU (torchrun), its own environment and batch; JAX: one process and "
              "environment, the batch split over the GPUs (num_devices). Scaling efficiency = batch rows trained "
              "per second per GPU on N GPUs / on 1 GPU.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.data_parallel", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--frameworks", nargs="+", default=["torch", "jax"], choices=["torch", "jax"])
    parser.add_argument("--budget", type=float, default=60.0, help="max_wall_seconds of each run")
    parser.add_argument("--env-steps", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=2000, help="agent.buffer_min_length (random steps)")
    parser.add_argument("--overrides", action="append", default=[], help="extra key=value for every run")
    parser.add_argument("--runs-dir", default="/tmp/data_parallel_runs",
                        help="where the run directories go (emptied first; kept out of --out)")
    args = parser.parse_args(argv)
    if any(g < 1 for g in args.gpus) or 1 not in args.gpus:
        parser.error(f"--gpus must be integers >= 1 and include 1 (the baseline), got {args.gpus}")
    if args.budget <= 0:
        parser.error(f"--budget must be > 0, got {args.budget}")
    os.makedirs(args.out, exist_ok=True)
    shutil.rmtree(args.runs_dir, ignore_errors=True)
    key = "agent.sample_batch_size="
    batch = int([o for o in [*UPSTREAM_RECIPE, *args.overrides] if o.startswith(key)][-1][len(key):])
    res: dict[str, Any] = {"environment": environment(), "budget_s": args.budget, "batch": batch, "runs": {}}
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for framework in args.frameworks:
        for gpus in sorted(args.gpus):
            print(f"[{framework} {gpus} GPU(s)]", flush=True)
            r = _one(framework, gpus, args)
            print(r, flush=True)
            results.setdefault(framework, {})[gpus] = r
            res["runs"][f"{framework}_{gpus}gpu"] = r
            res["table"] = scaling_table(results, batch)
            write_results(args.out, res, _markdown(res))
    print(_markdown(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
