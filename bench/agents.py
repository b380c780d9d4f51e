"""Training speed of both agents through their CLIs: updates/s and env steps/s, alternating torch / JAX, in rounds.

    python -m bench agents --out bench/results/agents          # GPU: 3 rounds of 10k steps, strict fused kernels
    python -m bench agents --out /tmp/agents --tiny            # CPU: tiny networks, 60 steps, reference targets

Every run is a separate process, ``python -m agent_<framework>.train --overrides ...`` on upstream's recipe
(``bench.common.UPSTREAM_RECIPE``, HalfCheetah-v4, B = 512) with a shorter budget, one evaluation episode at the start
and the end, logging every ``--log-every`` steps and the strict kernel backends (``--torch-backend`` /
``--jax-backend``). The torch agent runs with ``bench.common.TORCH_RECIPE_EXTRA`` (no torch.compile, CUDA graphs);
the JAX agent with its default device replay (``agent.buffer_device_type=auto``: one jitted call per env step);
``--torch-overrides`` / ``--jax-overrides`` add or replace keys for one side (e.g. ``agent.buffer_device_type=cuda``
for torch's device buffer). ``--jax-xla-flags=FLAGS`` (with ``=``: FLAGS start with ``--``) adds a third side,
``jax-xla``: the JAX run with FLAGS appended to ``XLA_FLAGS`` (an XLA runtime setting against the default, in the
same rounds). Round r runs the sides in an order rotated by r (torch then JAX for even r, JAX then torch for odd r
with two sides), so drift does not favour one side; an untimed warm-up run per side first fills the Triton and JAX
compilation caches. It has the timed runs' length: the JAX programs hold the LR schedule's horizon (from
``num_env_steps``) as constants, so a shorter warm-up would compile other programs.

Per run it reports the CLI's own whole-loop numbers (``env_steps/s``, ``updates/s`` of the result line, warm-up and
start-up of the loop included) and the steady state: the median over the TensorBoard logging windows
(``perf/updates_per_second``, ``perf/env_steps_per_second``) that lie wholly after the first update. Per side:
median and min-max over the rounds, and the per-round JAX / torch ratio of the steady updates/s (with a third side
also jax-xla / torch and jax-xla / jax).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from agent_jax.compilation_cache import jax_cache_env
from bench.common import (
    TORCH_RECIPE_EXTRA,
    UPSTREAM_RECIPE,
    cli_run_rates,
    environment,
    fmt,
    merge_overrides,
    timed_run,
    tiny_defaults,
    train_command,
    write_results,
)

__all__ = ["FRAMEWORKS", "TINY", "main", "recipe", "summarize"]

FRAMEWORKS = ("torch", "jax")
# --tiny: tiny networks on the CPU.
TINY = ["agent.actor_hidden_dim=8", "agent.critic_hidden_dim=8", "agent.actor_num_blocks=1",
        "agent.critic_num_blocks=1", "agent.sample_batch_size=8", "env.max_episode_steps=30", "num_threads=1",
        "agent.buffer_max_length=1000", "agent.device_type=cpu"]


def recipe(framework: str, num_env_steps: int, buffer_min_length: int, log_every: int, tiny: bool,
           extra: list[str]) -> list[str]:
    """The overrides of one run (seed, backend, run directory are added by ``train_command``)."""
    base = list(UPSTREAM_RECIPE) + (list(TORCH_RECIPE_EXTRA) if framework == "torch" else [])
    ours = [f"agent.buffer_min_length={buffer_min_length}", "num_eval_episodes=1",
            f"evaluation_per_interaction_step={num_env_steps}", f"logging_per_interaction_step={log_every}",
            f"save_checkpoint_per_interaction_step={num_env_steps}", "save_buffer=false"]
    if framework == "jax":
        ours.append("agent.buffer_device_type=auto")
    base = merge_overrides(base, ours + (TINY if tiny else []))
    return merge_overrides(base, extra)


def summarize(values: list[float]) -> dict[str, float | int]:
    """Median, min, max and count (empty: count 0)."""
    if not values:
        return {"n": 0}
    a = np.asarray(values, dtype=np.float64)
    return {"n": int(a.size), "median": float(np.median(a)), "min": float(a.min()), "max": float(a.max())}


METRICS = ("updates_per_second", "env_steps_per_second", "steady_updates_per_second", "steady_env_steps_per_second")


def _report(out: str, res: dict) -> str:
    c = res["config"]
    lines = [f"# Training speed, torch vs JAX CLIs ({res['env'].get('gpu') or 'CPU'}, {res['env']['date_utc']})", "",
             f"`{res['env']['command']}`: num_env_steps={c['num_env_steps']}, buffer_min_length="
             f"{c['buffer_min_length']}, backends torch={c['torch_backend']} / jax={c['jax_backend']}, rounds "
             f"{c['rounds']}, seed {c['seed']}.", "",
             "Whole loop: the CLI's result line (warm-up steps and the first compilations included). Steady: median "
             "of the logging windows after the first update.", "",
             "| round | framework | rc | process s | loop updates/s | loop env steps/s | steady updates/s | "
             "steady env steps/s |", "|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        lines.append(f"| {r['round']} | {r['framework']} | {r['returncode']} | {fmt(r['wall_s'], '.1f')} | "
                     + " | ".join(fmt(r.get(m), ".1f") for m in METRICS) + " |")
    lines += ["", "| framework | metric | runs | median | min | max |", "|---|---|---|---|---|---|"]
    for fw, per_metric in res["summary"].items():
        for metric, s in per_metric.items():
            if s["n"]:
                lines.append(f"| {fw} | {metric} | {s['n']} | {s['median']:.1f} | {s['min']:.1f} | {s['max']:.1f} |")
    for key, name in (("jax_over_torch_steady_updates", "JAX / torch"),
                      ("jax_xla_over_torch_steady_updates", "jax-xla / torch"),
                      ("jax_xla_over_jax_steady_updates", "jax-xla / JAX")):
        ratio = res.get(key)
        if ratio and ratio["n"]:
            lines += ["", f"{name} steady updates/s per round: median {ratio['median']:.3f} (min "
                      f"{ratio['min']:.3f}, max {ratio['max']:.3f}, {ratio['n']} rounds)."]
    if c.get("jax_xla_flags"):
        lines += ["", f"jax-xla: XLA_FLAGS += `{c['jax_xla_flags']}`."]
    if not res["env"].get("gpu"):
        lines += ["", "**No GPU: a CPU run tests the script; its numbers say nothing about the GPU.**"]
    return write_results(out, res, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    """CLI; returns 0 if every timed run completed, 1 otherwise (the report is written either way)."""
    ap = argparse.ArgumentParser(prog="python -m bench agents", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-env-steps", type=int, default=10_000)
    ap.add_argument("--buffer-min-length", type=int, default=2_000)
    ap.add_argument("--log-every", type=int, default=500, help="logging_per_interaction_step (steady-state windows)")
    ap.add_argument("--torch-backend", default="triton")
    ap.add_argument("--jax-backend", default="pallas")
    ap.add_argument("--torch-overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--jax-overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--jax-xla-flags", default=None, metavar="FLAGS",
                    help="a third side, jax-xla: the JAX run with these XLA_FLAGS added (--jax-xla-flags=...)")
    ap.add_argument("--tiny", action="store_true",
                    help="CPU in seconds: tiny networks, 60 steps, one round, reference backends, no warm-up")
    ap.add_argument("--no-warm-up", dest="warm_up", action="store_false")
    ap.add_argument("--timeout-s", type=float, default=400.0, help="per training process")
    ap.add_argument("--budget-s", type=float, default=None, help="start no new run after this many seconds")
    a = tiny_defaults(ap, argv, rounds=1, num_env_steps=60, buffer_min_length=30, log_every=10,
                      torch_backend="torch", jax_backend="jax", warm_up=False)
    for name in ("rounds", "num_env_steps", "buffer_min_length", "log_every"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.buffer_min_length >= a.num_env_steps:
        ap.error(f"--buffer-min-length ({a.buffer_min_length}) must be < --num-env-steps ({a.num_env_steps})")
    out = os.path.abspath(a.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    backends = {"torch": a.torch_backend, "jax": a.jax_backend}
    extras = {"torch": a.torch_overrides, "jax": a.jax_overrides}
    cache_env = jax_cache_env(os.path.join(out, "jax_cache"))
    sides = list(FRAMEWORKS) + (["jax-xla"] if a.jax_xla_flags else [])
    side_env = {"torch": None, "jax": cache_env}
    if a.jax_xla_flags:
        side_env["jax-xla"] = dict(cache_env, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {a.jax_xla_flags}".strip())

    def run(side: str, tag: str, num_env_steps: int) -> dict:
        framework = side.split("-")[0]
        run_dir = os.path.join(out, "runs", tag)
        overrides = recipe(framework, num_env_steps, a.buffer_min_length, a.log_every, a.tiny, extras[framework])
        cmd = train_command(framework, backends[framework], a.seed, num_env_steps, run_dir, overrides)
        rec = timed_run(cmd, os.path.join(out, "logs", tag + ".log"), a.timeout_s, side_env[side])
        rec.update(framework=side, tag=tag, run_dir=run_dir)
        if rec["returncode"] == 0:
            rec.update(cli_run_rates(rec["log"], run_dir))
        print(f"  {tag}: rc={rec['returncode']} {rec['wall_s']:.1f} s "
              f"updates/s={rec.get('updates_per_second')} steady={rec.get('steady_updates_per_second')}", flush=True)
        return rec

    t0 = time.perf_counter()
    warm_ups = []
    if a.warm_up:  # untimed: fills the compilation caches, so the timed runs measure training
        for fw in sides:
            r = run(fw, f"warmup-{fw}", a.num_env_steps)  # the same programs as the timed runs
            warm_ups.append({k: r[k] for k in ("tag", "returncode", "wall_s")})
    runs: list[dict] = []
    config = {"rounds": a.rounds, "seed": a.seed, "num_env_steps": a.num_env_steps,
              "buffer_min_length": a.buffer_min_length, "log_every": a.log_every, "torch_backend": a.torch_backend,
              "jax_backend": a.jax_backend, "torch_overrides": a.torch_overrides, "jax_overrides": a.jax_overrides,
              "jax_xla_flags": a.jax_xla_flags, "sides": sides, "tiny": a.tiny, "warm_ups": warm_ups,
              "recipes": {fw: recipe(fw, a.num_env_steps, a.buffer_min_length, a.log_every, a.tiny, extras[fw])
                          for fw in FRAMEWORKS}}

    def report(final: bool) -> str:
        ok = [r for r in runs if r["returncode"] == 0]
        summary = {fw: {m: summarize([r[m] for r in ok if r["framework"] == fw and m in r]) for m in METRICS}
                   for fw in sides}
        ratios: dict[tuple[str, str], list[float]] = {("jax", "torch"): [], ("jax-xla", "torch"): [],
                                                      ("jax-xla", "jax"): []}
        for rnd in range(a.rounds):
            steady = {r["framework"]: r.get("steady_updates_per_second") for r in ok if r["round"] == rnd}
            for num, den in ratios:
                if steady.get(num) and steady.get(den):
                    ratios[num, den].append(steady[num] / steady[den])
        res = {"env": environment(), "config": config, "runs": runs, "summary": summary,
               "jax_over_torch_steady_updates": summarize(ratios["jax", "torch"]), "complete": final,
               "seconds": round(time.perf_counter() - t0, 1)}
        if a.jax_xla_flags:
            res["jax_xla_over_torch_steady_updates"] = summarize(ratios["jax-xla", "torch"])
            res["jax_xla_over_jax_steady_updates"] = summarize(ratios["jax-xla", "jax"])
        return _report(out, res)

    for rnd in range(a.rounds):
        for fw in sides[rnd % len(sides):] + sides[:rnd % len(sides)]:  # two sides: reversed in odd rounds
            if a.budget_s is not None and time.perf_counter() - t0 > a.budget_s:
                print(f"  budget of {a.budget_s:.0f} s exhausted: skipping {fw} round {rnd}", flush=True)
                continue
            rec = run(fw, f"{fw}-round{rnd}", a.num_env_steps)
            rec["round"] = rnd
            runs.append(rec)
            report(final=False)
    print(report(final=True))
    return 0 if runs and all(r["returncode"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
