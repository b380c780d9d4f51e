"""Learning evidence: train seeds x tasks x agents, collect the eval curves, compare them with FlashSAC's published
returns.

    python -m bench learning run --root runs/learning --agents torch,jax --tasks HalfCheetah-v4 \\
        --seeds 0,1000,2000,3000,4000 --num-env-steps 100000 --gpus 0 --per-gpu 4 --budget-s 540
    python -m bench learning collect --root runs/learning --out bench/results/learning/<folder>
    python -m bench learning report bench/results/learning/<folder> [more folders]
    python -m bench learning --tiny --out /tmp/learning     # CPU: run, collect and report one tiny Hopper run

``run`` trains every (agent, task, seed) (or the ``--runs`` listed) through the agents' own CLIs with upstream's
CPU-sim recipe (``bench.common.UPSTREAM_RECIPE`` with each agent's default replay placement; evaluation every 20k
steps, for the curves, unless overridden), several runs per GPU at once. Every run's learning rate follows the
schedule of a ``--schedule-steps`` run (default 1M: the published runs' length), so a run to 100k is the first tenth
of a published run rather than a run whose schedule decays over its own 100k steps. Each run gets
``max_wall_seconds`` from the remaining budget, so it checkpoints (buffer included) and exits cleanly in time; the
next invocation resumes every unfinished run (``agent_load_path=<run dir>``) and starts the ones not begun. A run is
finished when its eval.csv holds an evaluation at ``num_env_steps``. Besides ``torch`` and ``jax`` the agents can be
``jax-torchinit`` and ``torch-jaxinit``: that agent started from the other one's initial state for the same seed
(``python -m agent_interop.train``), to tell a seed's initialisation outcome from a defect of one agent.

``collect`` copies each run's eval.csv and config.yaml with a run.json (agent, task, seed, source) into
``<out>/<agent>/<task>/seed<seed>/``; ``--from agent:run_dir`` imports single run directories trained elsewhere.

``report`` reads collected folders and writes ``results.md`` / ``results.json`` / ``learning_curves.png`` into the
first one (``python -m bench report`` puts its tables into README.md). Per agent, task and learning-rate
schedule (the decay steps in each run's config.yaml: runs on different schedules are never pooled; those not on the
published schedule are marked), at each step that has both a published figure and at least one run: the seeds'
returns, their mean and interquartile mean (IQM) with 95 % percentile-bootstrap intervals over seeds, and a test of
"same mean as published" (see ``same_as_published``). Across tasks, the mean and IQM of returns normalised by the
published mean at that step, with stratified bootstrap intervals (seeds resampled within each task), the aggregate
method of rliable.

Suites (``SUITES``): gym-MuJoCo (the tasks above, upstream's CPU-sim recipe), DeepMind Control, MyoSuite (each on
its ``agent_common.recipes`` recipe, 1 env) and MuJoCo Playground (its recipe, 1024 envs, 2 updates per step); a
task's suite follows from the simulators' task tables, so ``--tasks dog-walk,myo-reach`` needs nothing else. Each
suite keeps the published runs' learning-rate schedule (their length in env steps, over the recipe's envs and
updates per step) and an evaluation cadence near theirs; Playground's published evaluations fall at env steps a
1024-env run does not hit, so a run's evaluation counts for a published step within 2 % of it (exact elsewhere).

Published figures: ``bench/results/published/flashsac_gym_mujoco.csv`` (gym) and, summarised per step here,
``flashsac_suites_per_seed.csv`` (the other suites; each header comment names the source).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.common import (
    BOOTSTRAP_REPS,
    REPO,
    UPSTREAM_RECIPE,
    bootstrap_ci,
    environment,
    recipe_settings,
    write_results,
)

PUBLISHED = os.path.join(REPO, "bench", "results", "published", "flashsac_gym_mujoco.csv")
PUBLISHED_SUITES = os.path.join(REPO, "bench", "results", "published", "flashsac_suites_per_seed.csv")
TASKS = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4")
"""The gym-MuJoCo tasks (suite ``gym``)."""
INIT_SWAPPED = {"jax-torchinit": ("jax", "torch"), "torch-jaxinit": ("torch", "jax")}
"""Run label -> (agent, the agent whose initial state it starts from for the same seed): ``python -m
agent_interop.train --agent A --init-from B``, the check that tells an initialisation outcome from a defect when the
agents' returns differ."""
AGENTS = ("torch", "jax", *INIT_SWAPPED)
"""Run labels: each agent, and the INIT_SWAPPED ones."""
PUBLISHED_RUN_STEPS = 1_000_000  # the length of the published runs, whose learning-rate schedule the runs follow
# the expected range of n normal samples in standard deviations (d2 of quality control), n = 2..10
_D2 = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 9: 2.970, 10: 3.078}


# ---------------------------------------------------------------------------------------------------------- suites


@dataclass(frozen=True)
class Suite:
    recipe: str | None  # agent_common.recipes name; None: gym's UPSTREAM_RECIPE path
    run_steps: int  # env steps of the published runs: the learning-rate schedule the runs follow
    eval_every: int  # evaluation_per_interaction_step
    step_tolerance: float = 0.0  # a run's evaluation counts for a published step within this fraction of it


SUITES: dict[str, Suite] = {
    "gym": Suite(None, PUBLISHED_RUN_STEPS, 20_000),
    "dmc": Suite("dmc", PUBLISHED_RUN_STEPS, 20_000),
    "myosuite": Suite("myosuite", PUBLISHED_RUN_STEPS, 20_000),
    # upstream evaluates every 4,880 interaction steps of 1024 envs (4,997,120 env steps), from 5,496,832 on
    "playground": Suite("playground", 50_000_896, 4_880, 0.02),
}


def suite_of(task: str) -> str:
    """The suite whose simulator runs ``task``; ValueError naming the task and the suites' task tables otherwise."""
    if task in TASKS:
        return "gym"
    import simulators.dmc
    import simulators.myosuite
    import simulators.playground

    for name, tasks in (("dmc", simulators.dmc.TASKS), ("myosuite", simulators.myosuite.TASKS),
                        ("playground", simulators.playground.TASKS)):
        if task in tasks:
            return name
    raise ValueError(f"task: expected a gym-MuJoCo task {TASKS} or one of simulators.dmc, simulators.myosuite or "
                     f"simulators.playground's TASKS, got {task!r}")


def recipe_shape(suite: str) -> tuple[int, int]:
    """(train envs, updates per interaction step) of ``suite``'s recipe."""
    recipe = SUITES[suite].recipe
    if recipe is None:
        return 1, 1
    keys = recipe_settings(recipe)
    return int(keys.get("num_train_envs", "1")), int(keys.get("updates_per_interaction_step", "1"))


def published_decay(task: str) -> int:
    """The learning-rate decay steps (updates) of the published runs of ``task``: the schema's derivation for a run
    of its suite's ``run_steps`` on the recipe's envs and updates per step."""
    suite = suite_of(task)
    envs, utd = recipe_shape(suite)
    return max(1, SUITES[suite].run_steps // envs * utd)


# ------------------------------------------------------------------------------------------------------------ run


@dataclass(frozen=True)
class RunSpec:
    agent: str
    task: str
    seed: int

    def run_dir(self, root: str) -> str:
        return os.path.join(root, self.agent, self.task, f"seed{self.seed}")


def eval_returns(run_dir: str) -> dict[int, float]:
    """env step -> mean evaluation return, from a run's eval.csv (empty when there is none yet)."""
    path = os.path.join(run_dir, "eval.csv")
    if not os.path.isfile(path):
        return {}
    with open(path, newline="") as f:
        return {int(float(r["env_step"])): float(r["value"]) for r in csv.DictReader(f) if r["metric"] == "avg_return"}


def run_finished(run_dir: str, num_env_steps: int) -> bool:
    return any(step >= num_env_steps for step in eval_returns(run_dir))


def schedule_overrides(schedule_steps: int, envs: int = 1, utd: int = 1) -> list[str]:
    """The learning-rate schedule of a run of ``schedule_steps`` env steps on ``envs`` train envs with ``utd``
    updates per interaction step, as the schema derives it (N_int = N // envs interaction steps: warm-up
    int(1e-6 * N_int * utd), cosine decay over N_int * utd updates), for a run that stops earlier."""
    updates = schedule_steps // envs * utd
    return [f"agent.learning_rate_warmup_step={int(1e-6 * updates)}",
            f"agent.learning_rate_decay_step={max(1, updates)}"]


def train_command(spec: RunSpec, root: str, num_env_steps: int, wall_seconds: float,
                  overrides: Sequence[str] = (), schedule_steps: int | None = None) -> list[str]:
    """The agent CLI command that starts ``spec``'s run, or resumes it when its directory already holds one.

    The learning rate follows the schedule of a ``schedule_steps`` run (by default the published runs' length in
    the task's suite: 1M env steps, Playground's 50M), whatever ``num_env_steps`` is: a run to 100k is then the first
    tenth of a published run, which is what the published 100k figures are (a schedule derived from a 100k budget
    would have decayed the learning rate from 3e-4 to 1.5e-4 by the end)."""
    run_dir = spec.run_dir(root)
    suite_name = suite_of(spec.task)
    suite = SUITES[suite_name]
    envs, utd = recipe_shape(suite_name)
    agent = INIT_SWAPPED[spec.agent][0] if spec.agent in INIT_SWAPPED else spec.agent
    if suite.recipe is None:
        # Each agent keeps its default replay placement (auto: the JAX agent's device replay and one jitted call per
        # env step, the torch agent's host buffer), so the runs measure the loops users run.
        recipe = [o for o in UPSTREAM_RECIPE if not o.startswith(("env.env_name=", "agent.buffer_device_type="))]
    else:
        from agent_common.recipes import recipe_overrides

        recipe = [o for o in recipe_overrides(suite.recipe, agent)
                  if not o.startswith(("env.env_name=", "num_env_steps="))]
    settings = [*recipe, f"env.env_name={spec.task}", f"seed={spec.seed}", f"num_env_steps={num_env_steps}",
                f"evaluation_per_interaction_step={suite.eval_every:_}", "progress_bar=false",
                *schedule_overrides(schedule_steps or suite.run_steps, envs, utd),
                *overrides, f"max_wall_seconds={max(int(wall_seconds), 1)}"]
    if os.path.isfile(os.path.join(run_dir, "config.yaml")):
        settings = [f"agent_load_path={run_dir}", f"max_wall_seconds={max(int(wall_seconds), 1)}"]
    else:
        settings.append(f"save_path={run_dir}")
    if spec.agent in INIT_SWAPPED:
        init = INIT_SWAPPED[spec.agent][1]
        cmd = [sys.executable, "-m", "agent_interop.train", "--agent", agent, "--init-from", init]
    else:
        cmd = [sys.executable, "-m", f"agent_{spec.agent}.train"]
    for s in settings:
        cmd += ["--overrides", s]
    return cmd


def run_all(specs: Sequence[RunSpec], root: str, num_env_steps: int, budget_s: float, gpus: Sequence[str],
            per_gpu: int, overrides: Sequence[str] = (), min_run_s: float = 60.0, margin_s: float = 30.0,
            schedule_steps: int | None = None) -> dict:
    """Runs the unfinished ``specs``, ``per_gpu`` at a time on each of ``gpus`` ("" = no GPU), within ``budget_s``.

    A run starts only while at least ``min_run_s`` of the budget is left, and gets the rest of the budget less
    ``margin_s`` (its checkpoint time) as ``max_wall_seconds``. Returns what each run did (exit status, seconds).
    """
    t0 = time.monotonic()
    todo = [s for s in specs if not run_finished(s.run_dir(root), num_env_steps)]
    running: dict[str, tuple[RunSpec, subprocess.Popen, float, object]] = {}
    done: dict[str, dict] = {}
    while todo or running:
        left = budget_s - (time.monotonic() - t0)
        busy = [v[3] for v in running.values()]
        free = [g for g in gpus for _ in range(per_gpu - busy.count(g))]
        while todo and free and left - margin_s >= min_run_s:
            spec, gpu = todo.pop(0), free.pop(0)
            run_dir = spec.run_dir(root)
            os.makedirs(os.path.dirname(run_dir), exist_ok=True)
            cmd = train_command(spec, root, num_env_steps, left - margin_s, overrides, schedule_steps)
            env = dict(os.environ)
            if gpu:
                env["CUDA_VISIBLE_DEVICES"] = gpu
            log = open(run_dir + ".log", "a")
            log.write(f"\n$ {' '.join(cmd)}\n")
            log.flush()
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
            running[run_dir] = (spec, proc, time.monotonic(), gpu)
            print(f"started {spec} on gpu {gpu or '-'}", flush=True)
        if not running:
            break  # budget too short to start what is left
        time.sleep(1.0)
        for run_dir, (spec, proc, started, _gpu) in list(running.items()):
            if proc.poll() is not None:
                del running[run_dir]
                done[run_dir] = {"agent": spec.agent, "task": spec.task, "seed": spec.seed,
                                 "returncode": proc.returncode, "seconds": round(time.monotonic() - started, 1),
                                 "finished": run_finished(run_dir, num_env_steps)}
                print(f"{spec}: exit {proc.returncode}, finished={done[run_dir]['finished']}", flush=True)
    return {"runs": done, "not_started": [vars(s) for s in todo], "seconds": round(time.monotonic() - t0, 1)}


# -------------------------------------------------------------------------------------------------------- collect


def collect_run(agent: str, run_dir: str, out: str) -> str:
    """Copies ``run_dir``'s eval.csv and config.yaml (and learning_curve.png) to ``out/<agent>/<task>/seed<s>/``."""
    if agent not in AGENTS:
        raise ValueError(f"agent: expected one of {AGENTS}, got {agent!r}")
    config = read_run_config(run_dir)
    task, seed = config["env"]["env_name"], int(config["seed"])
    dest = os.path.join(out, agent, task, f"seed{seed}")
    os.makedirs(dest, exist_ok=True)
    for name in ("eval.csv", "config.yaml", "learning_curve.png"):
        if os.path.isfile(os.path.join(run_dir, name)):
            shutil.copyfile(os.path.join(run_dir, name), os.path.join(dest, name))
    with open(os.path.join(dest, "run.json"), "w") as f:
        json.dump({"agent": agent, "task": task, "seed": seed, "source": os.path.abspath(run_dir),
                   "num_eval_episodes": config.get("num_eval_episodes")}, f, indent=1)
    return dest


def read_run_config(run_dir: str) -> dict:
    """A run directory's ``config.yaml`` (the resolved config the CLI wrote) as nested dicts."""
    import yaml  # a dependency of omegaconf

    path = os.path.join(run_dir, "config.yaml")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"run_dir: {run_dir} holds no config.yaml (not a run directory)")
    with open(path) as f:
        return yaml.safe_load(f)


# --------------------------------------------------------------------------------------------------------- report


def load_published(path: str = PUBLISHED) -> dict[str, dict[int, dict]]:
    """task -> env step -> {"mean", "min", "max", "std", "n"} (min, max, std None where the source gives none; std is
    the population standard deviation over the seeds)."""
    out: dict[str, dict[int, dict]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            lo, hi, sd = (float(r[k]) if r.get(k) else None for k in ("min_seed", "max_seed", "std_seed"))
            out.setdefault(r["env_name"], {})[int(r["env_step"])] = {
                "mean": float(r["mean_return"]), "min": lo, "max": hi, "std": sd, "n": int(r["num_seeds"])}
    return out


def load_published_suites(path: str = PUBLISHED_SUITES) -> dict[str, dict[int, dict]]:
    """``load_published``'s form for the per-seed file of the other suites, summarised per task and step: the mean,
    lowest and highest seed and population standard deviation over the seeds published there."""
    per: dict[str, dict[int, list[float]]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            per.setdefault(r["env_name"], {}).setdefault(int(r["env_step"]), []).append(float(r["avg_return"]))
    return {task: {step: {"mean": float(np.mean(v)), "min": min(v), "max": max(v), "std": float(np.std(v)),
                          "n": len(v)} for step, v in steps.items()} for task, steps in per.items()}


def match_step(steps: Sequence[int], published_step: int, tolerance: float) -> int | None:
    """The evaluation step of ``steps`` that stands for ``published_step``: equal to it, or the nearest within
    ``tolerance`` x ``published_step``; None if there is none."""
    near = [s for s in steps if abs(s - published_step) <= tolerance * published_step]
    return min(near, key=lambda s: (abs(s - published_step), s)) if near else None


def _group_order(item: tuple) -> tuple:
    """Sort key of a ((agent, task or step, LR decay steps), value) item: the longest schedule first."""
    (agent, second, decay), _value = item
    return agent, second, -(decay or 0)


def run_schedule(run_dir: str) -> int | None:
    """The env steps over which a collected run's learning rate decays (its config's
    ``agent.learning_rate_decay_step``); None without a config.yaml."""
    try:
        return int(read_run_config(run_dir)["agent"]["learning_rate_decay_step"])
    except FileNotFoundError:
        return None


def load_runs(folders: Sequence[str]) -> dict[tuple[str, str, int | None], dict[int, dict[int, float]]]:
    """(agent, task, LR decay steps) -> seed -> env step -> return, from every run.json under ``folders``.

    Runs are grouped by their learning-rate schedule as well: only those that decay over the published runs' length
    (``PUBLISHED_RUN_STEPS``) follow the published protocol at every step."""
    runs: dict[tuple[str, str, int | None], dict[int, dict[int, float]]] = {}
    for folder in folders:
        for dirpath, _dirs, files in sorted(os.walk(folder)):
            if "run.json" in files:
                meta = json.load(open(os.path.join(dirpath, "run.json")))
                key = (meta["agent"], meta["task"], run_schedule(dirpath))
                if meta["seed"] in runs.get(key, {}):
                    raise ValueError(f"folders: {key} seed {meta['seed']} appears twice (second in {dirpath})")
                runs.setdefault(key, {})[meta["seed"]] = eval_returns(dirpath)
    return runs


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean: the mean of the middle 50 % (rliable's definition, scipy's trim_mean at 0.25)."""
    from scipy import stats

    return stats.trim_mean(x, 0.25, axis=axis)


def same_as_published(returns: np.ndarray, published: dict) -> dict:
    """Two-sided test of "our mean equals the published mean" at one step.

    Welch's t-test against the published seeds' sample standard deviation: from their population standard deviation
    where the source gives it (x sqrt(n / (n - 1))), else estimated from their min and max (range / d2(n), the
    expected range of n normal samples). Where it gives only the mean, a one-sample t-test against it (which treats
    the published mean as exact, so it rejects more easily). With fewer than two of our seeds there is no test.
    """
    from scipy import stats

    n = len(returns)
    if n < 2 or np.std(returns) == 0:
        return {"test": "none (fewer than 2 seeds)" if n < 2 else "none (zero spread)", "p": None}
    m = published["n"]
    if published.get("std") is not None and m > 1:
        sd, how = published["std"] * math.sqrt(m / (m - 1)), "published sd"
    elif published["min"] is not None and published["max"] is not None and m in _D2:
        sd, how = (published["max"] - published["min"]) / _D2[m], "published sd from range"
    else:
        res = stats.ttest_1samp(returns, published["mean"])
        return {"test": "one-sample t vs published mean", "p": float(res.pvalue)}
    res = stats.ttest_ind_from_stats(float(np.mean(returns)), float(np.std(returns, ddof=1)), n,
                                     published["mean"], sd, m, equal_var=False)
    return {"test": f"Welch t ({how})", "p": float(res.pvalue)}


def _published(published_path: str) -> dict[str, dict[int, dict]]:
    return {**load_published_suites(), **load_published(published_path)}


def _on_protocol(task: str, schedule: int | None) -> bool:
    try:
        return schedule == published_decay(task)
    except ValueError:  # a task no simulator here runs: only gym's schedule is known
        return schedule == PUBLISHED_RUN_STEPS


def analyse(folders: Sequence[str], published_path: str = PUBLISHED) -> dict:
    published = _published(published_path)
    runs = load_runs(folders)
    rows, aggregate = [], {}
    for (agent, task, schedule), seeds in sorted(runs.items(), key=_group_order):
        try:
            tolerance = SUITES[suite_of(task)].step_tolerance
        except ValueError:
            tolerance = 0.0
        for step in sorted(published.get(task, {})):
            have = {}
            for seed, curve in sorted(seeds.items()):
                own = match_step(list(curve), step, tolerance)
                if own is not None:
                    have[seed] = curve[own]
            if not have:
                continue
            x = np.array(list(have.values()), dtype=np.float64)
            pub = published[task][step]
            mean = bootstrap_ci([x], np.mean)
            iq = bootstrap_ci([x], iqm)
            rows.append({"agent": agent, "task": task, "lr_decay_steps": schedule,
                         "published_protocol": _on_protocol(task, schedule),
                         "env_step": step, "seeds": list(have), "returns": x.tolist(),
                         "mean": mean, "iqm": iq, "published": pub, **same_as_published(x, pub),
                         "interval_excludes_published": not (mean[1] <= pub["mean"] <= mean[2]) if len(x) > 1
                         else None})
            if step > 0:
                aggregate.setdefault((agent, step, schedule), []).append(x / pub["mean"])
    agg = [{"agent": agent, "env_step": step, "lr_decay_steps": schedule, "tasks": len(strata),
            "normalised_mean": bootstrap_ci(strata, np.mean), "normalised_iqm": bootstrap_ci(strata, iqm)}
           for (agent, step, schedule), strata in sorted(aggregate.items(), key=_group_order)]
    return {"rows": rows, "aggregate": agg, "published_source": published_path, "folders": list(folders),
            "bootstrap_reps": BOOTSTRAP_REPS}


def _ci(v: Sequence[float]) -> str:
    return f"{v[0]:,.0f} [{v[1]:,.0f}, {v[2]:,.0f}]"


def _schedule(steps: int | None, task: str | None = None) -> str:
    on = _on_protocol(task, steps) if task is not None else steps == PUBLISHED_RUN_STEPS
    return "?" if steps is None else f"{steps:,}" + ("" if on else " *")


def markdown(res: dict) -> str:
    lines = ["| agent | task | LR decay steps | env step | seeds | returns | mean [95 % CI] | IQM [95 % CI] | "
             "published mean ± sd [min, max] | test | p |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if r["env_step"] == 0:
            continue
        pub = r["published"]
        span = (f" ± {pub['std']:,.0f}" if pub.get("std") is not None else "") + (
            f" [{pub['min']:,.0f}, {pub['max']:,.0f}]" if pub["min"] is not None else "")
        p = "" if r["p"] is None else f"{r['p']:.2g}"
        schedule = _schedule(r["lr_decay_steps"], r["task"])
        lines.append(f"| {r['agent']} | {r['task']} | {schedule} | {r['env_step']:,} | "
                     f"{len(r['seeds'])} | "
                     f"{', '.join(f'{v:,.0f}' for v in r['returns'])} | {_ci(r['mean'])} | {_ci(r['iqm'])} | "
                     f"{pub['mean']:,.0f}{span} | {r['test']} | {p} |")
    if res["aggregate"]:
        lines += ["", "Across tasks (returns divided by the published mean at that step; stratified bootstrap):", "",
                  "| agent | LR decay steps | env step | tasks | normalised mean [95 % CI] | "
                  "normalised IQM [95 % CI] |",
                  "|---|---|---|---|---|---|"]
        for a in res["aggregate"]:
            m, q = a["normalised_mean"], a["normalised_iqm"]
            lines.append(f"| {a['agent']} | {_schedule(a['lr_decay_steps'])} | {a['env_step']:,} | {a['tasks']} | "
                         f"{m[0]:.3f} [{m[1]:.3f}, {m[2]:.3f}] | {q[0]:.3f} [{q[1]:.3f}, {q[2]:.3f}] |")
    if any(not r["published_protocol"] for r in res["rows"]):
        lines += ["", f"\\* Not the published protocol: the learning rate of these runs decayed (cosine, 3e-4 to "
                  f"1.5e-4) over the runs' own length, where the published runs' decays over "
                  f"{PUBLISHED_RUN_STEPS:,} steps (at 100k it is still 2.96e-4)."]
    return "\n".join(lines) + "\n"


def curves_plot(folders: Sequence[str], path: str, published_path: str = PUBLISHED) -> None:
    """One panel per task: every seed's curve per agent, the published mean and its min-max range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    published, runs = _published(published_path), load_runs(folders)
    tasks = sorted({task for _agent, task, _decay in runs})
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        pub = published.get(task, {})
        last = max((s for (_a, t, _d), seeds in runs.items() if t == task for c in seeds.values() for s in c),
                   default=0)
        steps = [s for s in sorted(pub) if s <= max(last, 100_000)]
        ax.plot(steps, [pub[s]["mean"] for s in steps], "k--", label="published mean")
        band = [s for s in steps if pub[s]["min"] is not None]
        if band:  # the source gives min and max at a few steps only: bars, not a band
            mid = [pub[s]["mean"] for s in band]
            ax.errorbar(band, mid, yerr=[[m - pub[s]["min"] for s, m in zip(band, mid, strict=True)],
                                         [pub[s]["max"] - m for s, m in zip(band, mid, strict=True)]],
                        fmt="none", ecolor="k", capsize=4, label="published min-max")
        for (agent, t, decay), seeds in sorted(runs.items(), key=_group_order):
            if t != task:
                continue
            color = {"torch": "tab:blue", "jax": "tab:orange", "jax-torchinit": "tab:green",
                     "torch-jaxinit": "tab:purple"}[agent]
            protocol = _on_protocol(task, decay)
            for i, (_seed, curve) in enumerate(sorted(seeds.items())):
                xs = sorted(curve)
                ax.plot(xs, [curve[s] for s in xs], color=color, alpha=0.7, lw=1, ls="-" if protocol else ":",
                        label=(f"{agent} agent" + ("" if protocol else f", LR decay over {decay:,}"
                                                   if decay else ", LR decay ?")) if i == 0 else None)
        ax.set_title(task)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)  # every panel its own: the tasks do not all have the same agents and schedules
    axes[0][0].set_ylabel("evaluation return")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(folders: Sequence[str], out: str | None = None, reps: int = 50_000) -> str:
    """Writes ``results.json``, ``results.md`` (the tables), ``learning_curves.png`` and, with the ``rliable`` extra,
    ``bench.rliable_report``'s aggregates (``reps`` bootstrap samples) into ``out`` (default: the first folder)."""
    out = out or folders[0]
    res = analyse(folders)
    text = markdown(res)
    res["environment"] = environment()
    rel = [os.path.relpath(os.path.abspath(f), REPO) for f in folders]
    cmd = f"python -m bench learning report {' '.join(rel)} --out {os.path.relpath(os.path.abspath(out), REPO)}"
    head = (f"# Learning against FlashSAC's published returns\n\n`{cmd}` "
            f"(reported {res['environment']['date_utc'][:10]}); the runs' machines, versions and commands are in "
            "each folder's README.md.\n\n")
    tail = "\n![learning curves](learning_curves.png)\n"
    if importlib.util.find_spec("rliable") is None:
        tail += "\nrliable aggregates: not written (the `rliable` extra is not installed).\n"
    else:  # IQM / median / mean with stratified-bootstrap intervals and performance profiles (bench.rliable_report)
        from bench.rliable_report import write_report

        write_report(folders, out, reps=reps)
        tail += ("\nRobust aggregates (IQM, median, mean, 95 % stratified-bootstrap intervals): "
                 "[rliable.md](rliable.md).\n")
    write_results(out, res, head + text + tail)
    curves_plot(folders, os.path.join(out, "learning_curves.png"))
    return text


# --tiny: one Hopper run of the torch agent on the CPU, tiny networks, evaluated at steps 0, 30 and 60
TINY_OVERRIDES = ["agent.actor_hidden_dim=8", "agent.critic_hidden_dim=8", "agent.actor_num_blocks=1",
                  "agent.critic_num_blocks=1", "agent.sample_batch_size=8", "agent.buffer_min_length=30",
                  "agent.buffer_max_length=1000", "agent.device_type=cpu", "agent.categorical_target_backend=torch",
                  "env.max_episode_steps=30", "num_eval_episodes=1", "evaluation_per_interaction_step=30",
                  "num_threads=1"]


def tiny(out: str) -> int:
    """Run, collect and report one tiny run under ``out`` (``out/runs``, the collected ``out/collected``, the report
in ``out``)."""
    spec = RunSpec("torch", "Hopper-v4", 0)
    res = run_all([spec], os.path.join(out, "runs"), 60, budget_s=300.0, gpus=[""], per_gpu=1,
                  overrides=TINY_OVERRIDES, min_run_s=1.0, margin_s=0.0, schedule_steps=60)
    if not run_finished(spec.run_dir(os.path.join(out, "runs")), 60):
        print(json.dumps(res, indent=1))
        return 1
    collected = os.path.join(out, "collected")
    collect_run(spec.agent, spec.run_dir(os.path.join(out, "runs")), collected)
    print(report([collected], out, reps=200))
    return 0


# ------------------------------------------------------------------------------------------------------------ CLI


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_runs(text: str) -> list[RunSpec]:
    """``"torch:Hopper-v4:0,jax:HalfCheetah-v4:4000"`` as RunSpecs; ValueError naming the item that is not one."""
    specs = []
    for item in _csv(text):
        parts = item.split(":")
        if len(parts) != 3 or parts[0] not in AGENTS or not parts[2].lstrip("-").isdigit():
            raise ValueError(f"expected AGENT:TASK:SEED with AGENT in {AGENTS} and an integer SEED, got {item!r}")
        suite_of(parts[1])  # ValueError naming the task
        specs.append(RunSpec(parts[0], parts[1], int(parts[2])))
    if not specs:
        raise ValueError(f"expected at least one AGENT:TASK:SEED, got {text!r}")
    return specs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench learning", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="train (or continue) seeds x tasks x agents")
    run.add_argument("--root", required=True)
    run.add_argument("--agents", default="torch,jax")
    run.add_argument("--tasks", default="HalfCheetah-v4")
    run.add_argument("--seeds", default="0,1000,2000,3000,4000")
    run.add_argument("--runs", default="", metavar="AGENT:TASK:SEED,...",
                     help="these runs instead of agents x tasks x seeds")
    run.add_argument("--num-env-steps", type=int, default=100_000)
    run.add_argument("--schedule-steps", type=int, default=None,
                     help="the learning-rate schedule of a run this long (default: the published runs' length in "
                          "the task's suite)")
    run.add_argument("--gpus", default="0", help="comma-separated CUDA device ids; '' for none")
    run.add_argument("--per-gpu", type=int, default=4)
    run.add_argument("--budget-s", type=float, required=True)
    run.add_argument("--min-run-s", type=float, default=60.0)
    run.add_argument("--overrides", action="append", default=[])
    col = sub.add_parser("collect", help="copy the runs' eval curves into a results folder")
    col.add_argument("--root", help="a run root written by `run`")
    col.add_argument("--from", dest="sources", action="append", default=[], metavar="AGENT:RUN_DIR")
    col.add_argument("--out", required=True)
    rep = sub.add_parser("report", help="tables, tests and curves from collected folders")
    rep.add_argument("folders", nargs="+")
    rep.add_argument("--out", default=None, help="where the report goes (default: the first folder)")
    if argv is None:
        argv = sys.argv[1:]
    if "--tiny" in argv:
        tp = argparse.ArgumentParser(prog="python -m bench learning --tiny")
        tp.add_argument("--tiny", action="store_true")
        tp.add_argument("--out", required=True)
        return tiny(os.path.abspath(tp.parse_args(argv).out))
    args = ap.parse_args(argv)

    if args.cmd == "run":
        agents, tasks = _csv(args.agents), _csv(args.tasks)
        for a in agents:
            if a not in AGENTS:
                ap.error(f"--agents: expected a subset of {AGENTS}, got {a!r}")
        try:
            seeds = [int(s) for s in _csv(args.seeds)]
        except ValueError:
            ap.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
        if args.per_gpu < 1 or args.budget_s <= 0 or args.num_env_steps <= 0 or (args.schedule_steps or 1) <= 0:
            ap.error("--per-gpu, --budget-s, --num-env-steps and --schedule-steps must be positive")
        for t in tasks:
            try:
                suite_of(t)
            except ValueError as e:
                ap.error(f"--tasks: {e}")
        specs = [RunSpec(a, t, s) for t in tasks for s in seeds for a in agents]
        if args.runs:
            try:
                specs = parse_runs(args.runs)
            except ValueError as e:
                ap.error(f"--runs: {e}")
        gpus = _csv(args.gpus) or [""]
        res = run_all(specs, args.root, args.num_env_steps, args.budget_s, gpus, args.per_gpu, args.overrides,
                      min_run_s=args.min_run_s, schedule_steps=args.schedule_steps)
        res["environment"] = environment()
        os.makedirs(args.root, exist_ok=True)
        with open(os.path.join(args.root, f"invocation-{time.strftime('%Y%m%d-%H%M%S')}.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)
        print(json.dumps({k: v for k, v in res.items() if k != "environment"}, indent=1))
        return 0
    if args.cmd == "collect":
        if not args.root and not args.sources:
            ap.error("collect: give --root and/or --from AGENT:RUN_DIR")
        pairs = [tuple(s.split(":", 1)) for s in args.sources]
        if args.root:
            for agent in AGENTS:
                base = os.path.join(args.root, agent)
                for dirpath, _dirs, files in sorted(os.walk(base)):
                    if "config.yaml" in files:
                        pairs.append((agent, dirpath))
        for agent, run_dir in pairs:
            print(collect_run(agent, run_dir, args.out))
        return 0
    print(report(args.folders, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
