"""Training speed on MJX environments through the agents' CLIs: env steps/s and updates/s at several env counts.

    python -m bench mjx --out bench/results/mjx/torch --framework torch --envs 256 1024 4096     # GPU
    python -m bench mjx --out bench/results/mjx/jax --framework jax --envs 256 1024 4096         # GPU
    python -m bench mjx --out /tmp/mjx --tiny      # CPU: the torch agent, 4 envs, tiny networks, fast XLA compiles

For each env count E one process, ``python -m agent_<framework>.train --overrides ...``, on upstream's GPU recipe
(``agent_common.recipes.gpu_recipe(task, framework)``: batch 2048, 2 updates per interaction step, the replay rows on
the device, AMP for torch) with a short budget: ``--steps`` interaction steps of which the first ``--warmup-steps`` are
the random warm-up (``agent.buffer_min_length`` = E x warm-up steps, so the first batch of 2048 fits from E = 205
on with the default 10), logging every ``--log-every`` steps, no evaluation (``num_eval_envs`` = E: no second env
compilation), no replay rows in the checkpoint, the strict fused target (``--backend``, default triton / pallas).
``--overrides`` adds or replaces keys (e.g. ``agent.use_amp=false`` for the torch agent's CUDA-graph update).

Per run: the process wall time, the CLI's result line (whole loop: the first env-step and update compilations
included) and its time to the first update, and the steady state: the median over the TensorBoard logging windows
after the first one with updates (``bench.common.steady_rates``). ``DIR/results.json`` and ``DIR/results.md`` are
rewritten after every run, so a time-out keeps what ran. ``--budget-s`` bounds all runs together (a run that would
start with less than ``--min-run-s`` left is recorded as skipped); ``--cache-dir`` gives the runs a persistent JAX
compilation cache (the torch agent's env step is a JAX program too), so runs of a configuration compiled before
load their programs instead of compiling them.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from agent_jax.compilation_cache import jax_cache_env
from bench.common import (
    PAIRS,
    cli_run_rates,
    environment,
    fmt,
    merge_overrides,
    timed_run,
    tiny_defaults,
    train_command,
    write_results,
)

__all__ = ["main", "overrides"]

METRICS = ("steady_env_steps_per_second", "steady_updates_per_second", "env_steps_per_second", "updates_per_second",
           "time_to_first_update_s")
# --tiny: what a CPU runs in seconds (short episodes, tiny networks, a small batch)
TINY = ["env.max_episode_steps=20", "agent.sample_batch_size=8", "agent.buffer_max_length=1000",
        "agent.critic_hidden_dim=8", "agent.actor_hidden_dim=8", "agent.critic_num_blocks=1",
        "agent.actor_num_blocks=1", "agent.critic_num_bins=11", "agent.device_type=cpu",
        "updates_per_interaction_step=1"]


def overrides(framework: str, task: str, num_envs: int, steps: int, warmup_steps: int, log_every: int,
              extra: list[str]) -> list[str]:
    """The overrides of one run (seed, backend and run directory are added by ``train_command``)."""
    from agent_common.recipes import gpu_recipe

    ours = [f"num_train_envs={num_envs}", f"num_env_steps={num_envs * steps}",
            f"agent.buffer_min_length={num_envs * warmup_steps}", f"num_eval_envs={num_envs}", "num_eval_episodes=0",
            f"logging_per_interaction_step={log_every}", f"save_checkpoint_per_interaction_step={steps}",
            "save_buffer=false"]
    return merge_overrides(merge_overrides(gpu_recipe(task, framework), ours), extra)


def _report(out: str, res: dict) -> str:
    c = res["config"]
    lines = [f"# MJX training speed, {c['framework']} CLI ({res['env'].get('gpu') or 'CPU'}, "
             f"{res['env']['date_utc']})", "",
             f"`{res['env']['command']}`: {c['task']}, {c['steps']} interaction steps per run ({c['warmup_steps']} "
             f"of random warm-up), logging every {c['log_every']}, backend {c['backend']} (strict).", "",
             "Steady: median of the logging windows after the first one with updates. Whole loop: the CLI's result "
             "line (the first compilations included).", "",
             "| envs | rc | process s | steady env steps/s | steady updates/s | loop env steps/s | loop updates/s | "
             "time to first update s |", "|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        lines.append(f"| {r['num_envs']} | {r['returncode']} | {fmt(r['wall_s'], '.1f')} | "
                     + " | ".join(fmt(r.get(m), ".1f") for m in METRICS) + " |")
    if not res["env"].get("gpu"):
        lines += ["", "**No GPU: a CPU run tests the script; its numbers say nothing about the GPU.**"]
    return write_results(out, res, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench mjx", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--framework", choices=tuple(PAIRS), default="torch")
    ap.add_argument("--task", default="halfcheetah")
    ap.add_argument("--envs", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--steps", type=int, default=60, help="interaction steps per run")
    ap.add_argument("--warmup-steps", type=int, default=10, help="of which random warm-up")
    ap.add_argument("--log-every", type=int, default=5, help="logging_per_interaction_step (steady windows)")
    ap.add_argument("--backend", default=None, help="target backend (default: triton for torch, pallas for jax)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--timeout-s", type=float, default=150.0, help="per training process")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="all runs: each run's timeout is cut to what is left, and none starts with less than "
                         "--min-run-s left (it is recorded as skipped)")
    ap.add_argument("--min-run-s", type=float, default=30.0)
    ap.add_argument("--cache-dir", default=None,
                    help="persistent JAX compilation cache of the runs (agent_jax.compilation_cache.jax_cache_env), "
                         "e.g. one that a parallel warm-up filled")
    ap.add_argument("--tiny", action="store_true",
                    help="CPU: the torch agent, 4 envs, 12 steps, tiny networks, fast XLA compiles")
    a = tiny_defaults(ap, argv, framework="torch", envs=[4], steps=12, warmup_steps=4, log_every=4, backend="torch",
                      timeout_s=600.0)
    if a.tiny:
        a.overrides = TINY + a.overrides
    if min(a.envs) < 1 or a.warmup_steps < 1 or a.log_every < 1:
        ap.error(f"--envs, --warmup-steps and --log-every must be >= 1, got {a.envs}, {a.warmup_steps}, "
                 f"{a.log_every}")
    if a.steps < a.warmup_steps + 2 * a.log_every:
        ap.error(f"--steps ({a.steps}) must leave two logging windows after the warm-up "
                 f"(>= {a.warmup_steps + 2 * a.log_every})")
    backend = a.backend or PAIRS[a.framework][2]
    out = os.path.abspath(a.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    config = {"framework": a.framework, "task": a.task, "envs": a.envs, "steps": a.steps,
              "warmup_steps": a.warmup_steps, "log_every": a.log_every, "backend": backend, "seed": a.seed,
              "overrides": a.overrides, "cache_dir": a.cache_dir, "budget_s": a.budget_s}
    runs: list[dict] = []
    t0 = time.perf_counter()
    cache_env = jax_cache_env(os.path.abspath(a.cache_dir)) if a.cache_dir else {}
    if a.tiny:
        from simulators.mjx_env import FAST_COMPILE_ENV

        cache_env[FAST_COMPILE_ENV] = "1"  # XLA's backend optimisations off: compiles several times faster on a CPU
    for num_envs in a.envs:
        tag = f"{a.framework}-{num_envs}"
        run_dir = os.path.join(out, "runs", tag)
        extra = overrides(a.framework, a.task, num_envs, a.steps, a.warmup_steps, a.log_every, a.overrides)
        cmd = train_command(a.framework, backend, a.seed, num_envs * a.steps, run_dir, extra)
        left = math.inf if a.budget_s is None else a.budget_s - (time.perf_counter() - t0)
        if left < a.min_run_s:
            print(f"  {tag}: skipped ({left:.0f} s of the budget left)", flush=True)
            runs.append({"num_envs": num_envs, "returncode": "skipped", "wall_s": 0.0, "cmd": " ".join(cmd)})
            continue
        rec = timed_run(cmd, os.path.join(out, "logs", tag + ".log"), min(a.timeout_s, left), cache_env)
        rec.update(num_envs=num_envs, run_dir=run_dir)
        if rec["returncode"] == 0:
            rec.update(cli_run_rates(rec["log"], run_dir))
        print(f"  {tag}: rc={rec['returncode']} {rec['wall_s']:.1f} s steady env steps/s="
              f"{rec.get('steady_env_steps_per_second')} steady updates/s={rec.get('steady_updates_per_second')}",
              flush=True)
        runs.append(rec)
        _report(out, {"env": environment(), "config": config, "runs": runs, "complete": False,
                      "seconds": round(time.perf_counter() - t0, 1)})
    print(_report(out, {"env": environment(), "config": config, "runs": runs, "complete": True,
                        "seconds": round(time.perf_counter() - t0, 1)}))
    return 0 if all(r["returncode"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
