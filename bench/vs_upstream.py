"""Side by side with upstream FlashSAC's own trainer: one short recipe through upstream's train.py and both agents.

The same recipe runs through upstream's ``train.py`` and through both of this project's agents, one run after the
other on one GPU.

    git clone https://github.com/leeyngdo/FlashSAC ~/FlashSAC
    python -m bench vs-upstream --upstream ~/FlashSAC --out bench/results/vs-upstream --upstream-dtype-fix
    python -m bench vs-upstream --upstream ~/FlashSAC --out /tmp/vs --tiny     # CPU: tiny networks, 60 steps

``--upstream`` is a checkout of upstream FlashSAC that the user cloned (github.com/leeyngdo/FlashSAC); nothing of
it is copied here. Rows: ``upstream:<mode>`` runs upstream's ``train.py`` with ``agent.use_compile=false`` (mode
``eager``), upstream's own default (``auto``: max-autotune on torch >= 2.9) or ``agent.compile_mode=<mode>``;
``torch`` / ``jax`` run ``python -m agent_<framework>.train`` with the project's defaults (``torch:<mode>`` sets
``agent.compile_mode``). Every row gets the same recipe: upstream's CPU-sim gym-MuJoCo settings
(``bench.common.UPSTREAM_RECIPE``) with ``--num-env-steps``, ``--buffer-min-length`` random-action steps,
``--num-eval-episodes`` episodes evaluated at the start and at the end only, no video, no intermediate checkpoint.
Each row is a fresh process with a wall-clock limit (``--time-limit``; its process group is ended at the limit and the
row reports what it reached).

What each row reports, from the process's own output:
    time to first update  wall seconds from the launch of the process to the end of its first update (the imports,
                          the initial evaluation as far as the first update waits for it, the random-action steps
                          and the first update's compilation count).
                          This project's agents print it (``time_to_first_update=``). Upstream prints a tqdm bar of
                          interaction steps: the launcher timestamps each bar refresh as it arrives, and the first
                          refresh past step ``buffer_min_length + 1`` follows the first update (its resolution is the
                          bar's refresh interval, 0.5 s).
    steady updates/s      updates per wall second over the second half of the time after the first update
                          (``agent_common.logger.UpdateTimeline``, the definition both agents print); for upstream the
                          same computation over the bar's (time, step) samples, one update per step in this recipe.
    wall s                launch to exit.
    final eval return     the last ``avg_return``: this project's summary line; upstream's TensorBoard events
                          (``runs/`` under the row's directory, which is the process's working directory).

The race (issue: wall clock to a return): ``--recipe playground --env CheetahRun --eval-every N`` gives every row
MuJoCo Playground's GPU-simulator recipe (``agent_common.recipes``'s ``playground`` for this project's agents; the
same values in upstream's Hydra keys, its scripts/run_mujoco_playground.sh, with ``agent.asymmetric_observation=false``
as CheetahRun has no privileged state) and an evaluation every N interaction steps; ``--time-limit`` is the common
wall-clock budget from launch (this project's rows get ``max_wall_seconds`` ``RACE_MARGIN_S`` below it, so they stop
cleanly and write their last evaluation; upstream's process group is ended at the limit, after its TensorBoard writer
flushed each evaluation). Every row then carries its return curve against seconds since its launch (the evaluation
events' wall times in its TensorBoard folder) and ``race.png`` plots them; the headline (``race``): the return the
slower row reaches by the end of its budget (the lowest of the rows' best returns) and the seconds each row took to
reach it.

``--upstream-dtype-fix`` runs upstream through ``bench/upstream_launch.py``, which wraps one upstream function at
import time (float64 rewards reach its float32 ``scatter_add_`` on torch 2.11 / gymnasium 1.x / numpy 2 and upstream
crashes at its first update); the table and the JSON say so. Writes ``results.json`` and ``results.md`` under
``--out`` after every row, and each row's log under ``--out/logs``.
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from bench.agents import TINY
from bench.common import (
    REPO,
    UPSTREAM_RECIPE,
    environment,
    merge_overrides,
    recipe_settings,
    tensorboard_scalars,
    tiny_defaults,
    upstream_commit,
    write_results,
)

__all__ = ["BAR", "SUMMARY", "Row", "cell", "parse_rows", "race", "return_curve", "row_label", "row_status", "run_row",
           "table", "tqdm_timing"]

UPSTREAM_MODES = ("eager", "auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
TORCH_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "off")
BAR = re.compile(r"(\d+)/(\d+) \[")  # a tqdm refresh: "  52%|#####2    | 5200/10000 [00:17<00:15, 300.12it/s]"
# agent_common.driver's line at the first update, and its closing summary line
FIRST = re.compile(r"first update at env step \d+: ([0-9.]+) s after launch .*?the update call took ([0-9.]+) s")
RECIPES = ("gym", "playground")
RACE_MARGIN_S = 20.0  # this project's rows stop (max_wall_seconds) this long before the common limit
BUFFER_MIN_LENGTH = {"gym": 5000, "playground": 100_000}  # --buffer-min-length's default per recipe
SUMMARY = re.compile(r"^\[(\w+)\] env_step=(\d+) wall=([0-9.]+)s .*?last_eval_return=(\S+) "
                     r"time_to_first_update=(\S+)s steady_updates/s=(\S+)", re.M)


class Row:
    """One line of the table: ``upstream:<mode>``, ``torch[:<mode>]`` or ``jax``."""

    def __init__(self, spec: str) -> None:
        kind, _, mode = spec.partition(":")
        if kind == "upstream":
            if mode not in UPSTREAM_MODES:
                raise ValueError(f"--rows: {spec!r}: expected upstream:<mode> with mode in {UPSTREAM_MODES}")
        elif kind == "torch":
            if mode and mode not in TORCH_MODES:
                raise ValueError(f"--rows: {spec!r}: expected torch or torch:<mode> with mode in {TORCH_MODES}")
        elif kind == "jax":
            if mode:
                raise ValueError(f"--rows: {spec!r}: the JAX agent has no compile mode (expected jax)")
        else:
            raise ValueError(f"--rows: {spec!r}: expected upstream:<mode>, torch, torch:<mode> or jax")
        self.spec, self.kind, self.mode = spec, kind, mode

    @property
    def label(self) -> str:
        if self.kind == "upstream":
            what = {"eager": "agent.use_compile=false", "auto": "its default compile_mode=auto"}.get(
                self.mode, f"agent.compile_mode={self.mode}")
            return f"upstream train.py, {what}"
        if self.kind == "torch":
            return "this project, torch agent, " + (f"agent.compile_mode={self.mode}" if self.mode else "defaults")
        return "this project, JAX agent, defaults"


def parse_rows(text: str) -> list[Row]:
    """``--rows``: a comma-separated list of row specs (see ``Row``); at least one, no repeats."""
    specs = [s.strip() for s in text.split(",") if s.strip()]
    if not specs:
        raise ValueError("--rows: expected at least one row, got none")
    if len(set(specs)) != len(specs):
        raise ValueError(f"--rows: a row is listed twice in {specs}")
    return [Row(s) for s in specs]


# ------------------------------------------------------------------------------------------------------- recipe


def _recipe_value(key: str) -> str:
    return next(o.split("=", 1)[1] for o in UPSTREAM_RECIPE if o.split("=", 1)[0] == key)


def _interaction_steps(a: argparse.Namespace) -> int:
    """The run length in interaction steps (env steps over the recipe's train envs)."""
    envs = int(recipe_settings("playground")["num_train_envs"]) if a.recipe == "playground" else 1
    return max(1, a.num_env_steps // envs)


def project_overrides(a: argparse.Namespace, row: Row, run_dir: str) -> list[str]:
    """The recipe for ``python -m agent_<framework>.train``: upstream's recipe (``--recipe``), the run length,
    evaluation at the start and the end (and every ``--eval-every`` interaction steps), one checkpoint at the end
    without the replay buffer, no progress bar; in a race (``--eval-every``) a clean stop before the limit."""
    n = _interaction_steps(a)
    if a.recipe == "playground":
        replaced = {"env.env_name", "agent.buffer_min_length", "num_env_steps", "num_eval_episodes", "num_eval_envs"}
        out = [f"{k}={v}" for k, v in recipe_settings("playground", row.kind).items() if k not in replaced]
        out.append(f"num_eval_envs={a.num_eval_episodes}")  # one episode per evaluation env, as upstream's 50 / 50
    else:
        out = [o for o in UPSTREAM_RECIPE if not o.startswith(("env.env_name=", "agent.buffer_min_length="))]
    out += [f"env.env_name={a.env}", f"seed={a.seed}", f"num_env_steps={a.num_env_steps}",
            f"agent.buffer_min_length={a.buffer_min_length}", f"num_eval_episodes={a.num_eval_episodes}",
            f"evaluation_per_interaction_step={a.eval_every or n}",
            f"save_checkpoint_per_interaction_step={n}", "save_buffer=false", "progress_bar=false",
            f"save_path={run_dir}"]
    if a.eval_every:
        out.append(f"max_wall_seconds={max(1, int(a.time_limit - RACE_MARGIN_S))}")
    if a.device == "cpu":
        out.append("agent.device_type=cpu")
    if row.mode:
        out.append(f"agent.compile_mode={row.mode}")
    return merge_overrides(out, list(a.overrides))


def upstream_overrides(a: argparse.Namespace, row: Row) -> list[str]:
    """The same recipe in upstream's Hydra keys (its scripts/run_mujoco.sh or run_mujoco_playground.sh settings,
    shortened): no video, evaluation before and after training (and every ``--eval-every`` interaction steps), the
    compile mode of the row."""
    evaluation = a.eval_every or "null"
    if a.recipe == "playground":  # the values of this project's playground recipe (the torch agent's: AMP on)
        r = recipe_settings("playground")
        out = [f"seed={a.seed}", "env=mujoco_playground", f"env.env_name={a.env}",
               f"num_env_steps={a.num_env_steps}", f"num_train_envs={r['num_train_envs']}",
               f"num_eval_envs={a.num_eval_episodes}", "num_record_envs=1",
               f"num_eval_episodes={a.num_eval_episodes}", "num_record_episodes=0", "agent=flashSAC",
               f"agent.buffer_max_length={r['agent.buffer_max_length']}",
               f"agent.buffer_min_length={a.buffer_min_length}",
               f"agent.buffer_device_type={r['agent.buffer_device_type']}",
               f"agent.sample_batch_size={r['agent.sample_batch_size']}", f"agent.use_amp={r['agent.use_amp']}",
               f"updates_per_interaction_step={r['updates_per_interaction_step']}",
               "agent.asymmetric_observation=false", f"gamma={r['gamma']}", f"n_step={r['n_step']}"]
    else:
        out = [f"seed={a.seed}", "env=mujoco", f"env.env_name={a.env}", f"num_env_steps={a.num_env_steps}",
               "num_train_envs=1", "num_eval_envs=1", "num_record_envs=1", f"num_eval_episodes={a.num_eval_episodes}",
               "num_record_episodes=0", "agent=flashSAC",
               f"agent.buffer_max_length={_recipe_value('agent.buffer_max_length')}",
               f"agent.buffer_min_length={a.buffer_min_length}", "agent.buffer_device_type=cpu",
               f"agent.sample_batch_size={_recipe_value('agent.sample_batch_size')}", "agent.use_amp=false",
               "updates_per_interaction_step=1", "agent.asymmetric_observation=false", "gamma=0.99", "n_step=1"]
    out += ["logger_type=tensorboard", f"evaluation_per_interaction_step={evaluation}",
            "metrics_per_interaction_step=null", "recording_per_interaction_step=null"]
    if a.device == "cpu":
        out.append("agent.device_type=cpu")
    if row.mode == "eager":
        out.append("agent.use_compile=false")
    elif row.mode != "auto":
        out.append(f"agent.compile_mode={row.mode}")
    return merge_overrides(out, list(a.upstream_overrides))


def row_command(a: argparse.Namespace, row: Row, run_dir: str) -> list[str]:
    """The row's command line (run from the row's directory)."""
    if row.kind == "upstream":
        train_py = os.path.join(os.path.abspath(a.upstream_dir), "train.py")
        head = ([a.python, "-m", "bench.upstream_launch", "--dtype-fix", train_py] if a.upstream_dtype_fix
                else [a.python, train_py])
        overrides = upstream_overrides(a, row)
    else:
        head = [a.python, "-m", f"agent_{row.kind}.train"]
        overrides = project_overrides(a, row, run_dir)
    return head + [arg for o in overrides for arg in ("--overrides", o)]


# ------------------------------------------------------------------------------------------------------ parsing


def tqdm_timing(samples: Sequence[tuple[float, int]], first_update_step: int,
                fraction: float = 0.5) -> dict[str, float]:
    """Time to first update and steady updates/s from a tqdm bar's (seconds since launch, step) samples, one update
    per step from ``first_update_step`` on. The first sample at or past ``first_update_step + 1`` marks the first
    update's end (whichever of those two steps held it); the time since the last sample before ``first_update_step``
    bounds the first update's duration from above (its compilation; one bar interval and a step more at most). The
    bar's last refresh comes as its loop ends, before the final evaluation, so the rate's window ends with the last
    update."""
    from agent_common.logger import UpdateTimeline

    timeline = UpdateTimeline(launch=0.0)
    before = [t for t, n in samples if n < first_update_step]
    for t, n in sorted(samples):
        if n >= first_update_step + 1:
            timeline.record(t, n - first_update_step)
    ttfu = timeline.time_to_first_update
    return {"time_to_first_update_s": ttfu, "steady_updates_per_second": timeline.steady_rate(fraction),
            "first_update_s": ttfu - max(before) if before and not math.isnan(ttfu) else float("nan")}


def final_tensorboard_return(root: str, final_step: int, tag: str = "avg_return") -> float:
    """The value of ``tag`` at the largest step in the newest TensorBoard event file under ``root``, if that step is
    ``final_step`` or later (the evaluation after training); nan otherwise (a run stopped early has only earlier
    evaluations)."""
    files = sorted(glob.glob(os.path.join(root, "**", "events.out.tfevents.*"), recursive=True), key=os.path.getmtime)
    if not files:
        return float("nan")
    events = tensorboard_scalars(os.path.dirname(files[-1]), (tag,)).get(tag)
    if not events:
        return float("nan")
    step, value = max(events)
    return value if step >= final_step else float("nan")


def return_curve(root: str, launch_unix: float, tag: str = "avg_return") -> list[list[float]]:
    """[seconds since launch, env step, return] of every ``tag`` event in the TensorBoard folders under ``root``
    (the row's own: upstream's ``runs/``, this project's ``run/tb``), by time."""
    from bench.common import tensorboard_events

    folders = {os.path.dirname(f) for f in glob.glob(os.path.join(root, "**", "events.out.tfevents.*"),
                                                      recursive=True)}
    out = [[wall - launch_unix, float(step), value] for folder in sorted(folders)
           for step, value, wall in tensorboard_events(folder, (tag,))[1].get(tag, [])]
    return sorted(out)


def race(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The headline of rows with return curves: the target (the lowest of the rows' best returns, i.e. the return the
    slower row reaches by the end of its budget) and, per row, the seconds since launch at which its curve first
    reached it; None without two rows that evaluated."""
    curves = {r["row"]: r["return_curve"] for r in rows if r.get("return_curve")}
    if len(curves) < 2:
        return None
    best = {name: max(v for _t, _s, v in c) for name, c in curves.items()}
    target = min(best.values())
    reach = {name: next(t for t, _s, v in c if v >= target) for name, c in curves.items()}
    return {"target_return": target, "slower": min(best, key=lambda k: (best[k], k)), "best_return": best,
            "seconds_to_target": reach}


def race_plot(res: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    for r in res["rows"]:
        if r.get("return_curve"):
            ax.plot([t for t, _s, _v in r["return_curve"]], [v for _t, _s, v in r["return_curve"]], "o-", ms=3,
                    label=row_label(r))
    ax.set_xlabel("seconds since launch")
    ax.set_ylabel("evaluation return")
    ax.set_title(f"{res['config']['env']}: return against wall clock")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _pump(stream: Any, log: Any, t0: float, samples: list[tuple[float, int]], lock: threading.Lock) -> None:
    """Copies a child's output to ``log`` as it arrives and timestamps every tqdm refresh in it (``\\r``-separated)."""
    pending = ""
    while True:
        chunk = os.read(stream.fileno(), 65536)
        if not chunk:
            break
        now = time.monotonic() - t0
        text = chunk.decode("utf-8", "replace")
        with lock:
            log.write(text)
            log.flush()
        parts = re.split(r"[\r\n]", pending + text)
        pending = parts.pop()
        for part in parts + [pending]:  # a refresh ends without a delimiter: the unfinished tail is read too
            m = BAR.search(part)
            if m and (not samples or int(m.group(1)) != samples[-1][1]):
                samples.append((now, int(m.group(1))))


def run_row(a: argparse.Namespace, row: Row, out_dir: str, limit: float) -> dict[str, Any]:
    """Runs one row in a fresh process (its own process group, ended after ``limit`` seconds) and parses its
    output; the row's working directory is ``--runs-dir/<row>`` (default ``--out/runs``)."""
    name = row.spec.replace(":", "-")
    row_dir = os.path.join(os.path.abspath(a.runs_dir) if a.runs_dir else os.path.join(out_dir, "runs"), name)
    os.makedirs(row_dir, exist_ok=True)
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    cmd = row_command(a, row, os.path.join(row_dir, "run"))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if row.kind == "upstream" and a.upstream_site:  # upstream's own pins (e.g. playground 0.0.5) first
        env["PYTHONPATH"] = os.path.abspath(a.upstream_site) + os.pathsep + env["PYTHONPATH"]
    log_path = os.path.join(out_dir, "logs", name + ".log")
    samples: list[tuple[float, int]] = []
    lock = threading.Lock()
    print(f"[{row.spec}] {' '.join(cmd)}", flush=True)
    t0, launch_unix = time.monotonic(), time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=row_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        pumps = [threading.Thread(target=_pump, args=(s, log, t0, samples, lock), daemon=True)
                 for s in (proc.stdout, proc.stderr)]
        for p in pumps:
            p.start()
        try:
            rc: int | str = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the row's own process group (compile workers included)
            proc.wait()
            rc = "timeout"
        for p in pumps:
            p.join(timeout=10)
    wall = time.monotonic() - t0
    text = open(log_path, errors="replace").read()
    rec: dict[str, Any] = {"row": row.spec, "label": row.label, "command": " ".join(cmd), "returncode": rc,
                           "wall_s": wall, "limit_s": limit, "log": os.path.relpath(log_path, out_dir)}
    if row.kind == "upstream":
        rec.update(tqdm_timing(samples, a.buffer_min_length))
        rec["final_eval_return"] = final_tensorboard_return(os.path.join(row_dir, "runs"), a.num_env_steps)
        rec["dtype_fix"] = bool(a.upstream_dtype_fix)
        rec["bar_samples"] = len(samples)
    else:
        found = SUMMARY.findall(text)
        if found:
            status, _, _, ret, ttfu, steady = found[-1]
            rec.update(status=status, final_eval_return=float(ret), time_to_first_update_s=float(ttfu),
                       steady_updates_per_second=float(steady))
        else:
            rec.update(final_eval_return=float("nan"), time_to_first_update_s=float("nan"),
                       steady_updates_per_second=float("nan"))
        first = FIRST.search(text)  # printed when it happens, so a row stopped at its limit still has it
        if first and math.isnan(rec["time_to_first_update_s"]):
            rec["time_to_first_update_s"] = float(first.group(1))
        rec["first_update_s"] = float(first.group(2)) if first else float("nan")
    rec["return_curve"] = return_curve(row_dir, launch_unix)
    if rc != 0:
        errors = [ln for ln in text.splitlines() if re.search(r"Error|error:", ln)]
        line = errors[-1] if errors else text.strip().splitlines()[-1] if text.strip() else ""
        rec["error"] = line if len(line) <= 400 else line[:397] + "..."  # the start names what is wrong
    rec["ok"] = rc == 0 or (bool(a.eval_every) and rc == "timeout" and bool(rec["return_curve"]))
    print(f"  rc={rc} wall={wall:.1f}s first_update={cell(rec.get('time_to_first_update_s'))}s "
          f"steady={cell(rec.get('steady_updates_per_second'))}/s return={cell(rec.get('final_eval_return'))}",
          flush=True)
    return rec


# ------------------------------------------------------------------------------------------------------ reports


def cell(v: Any, spec: str = ".1f") -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def row_label(r: dict[str, Any]) -> str:
    """A result row's name in the tables."""
    return r["label"] + (" (with the dtype fix)" if r.get("dtype_fix") else "")


def row_status(r: dict[str, Any], res: dict[str, Any]) -> str:
    """How a result row's run ended, in words."""
    if r["ok"]:
        return "completed"
    if r["returncode"] == "timeout":
        status = f"stopped at the {r.get('limit_s', res['config']['time_limit_s']):.0f} s limit"
        if math.isnan(r.get("time_to_first_update_s", float("nan"))):
            status += ", before its first update"
        return status
    if r["returncode"] == "not run":
        return r["error"]
    return f"failed (exit {r['returncode']}): {r.get('error', '')}"


def table(res: dict[str, Any]) -> list[str]:
    """The markdown table of a results dict."""
    lines = ["| run | time to first update (s) | first update (s) | steady updates/s | wall (s) | final eval return "
             "| status |", "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {row_label(r)} | {cell(r.get('time_to_first_update_s'))} | {cell(r.get('first_update_s'))} "
                     f"| {cell(r.get('steady_updates_per_second'))} | {r['wall_s']:.1f} | "
                     f"{cell(r.get('final_eval_return'))} | {row_status(r, res)} |")
    return lines


def report(out_dir: str, res: dict[str, Any]) -> str:
    cfg, env = res["config"], res["env"]
    settings = ("upstream's MuJoCo Playground settings otherwise (1024 envs, batch 2048, UTD 2, gamma 0.97, AMP for "
                "the torch agent and upstream)" if cfg.get("recipe") == "playground" else
                "upstream's CPU-sim settings otherwise (batch 512, UTD 1, one environment, AMP off)")
    evaluations = (f"every {cfg['eval_every']} interaction steps and " if cfg.get("eval_every") else "")
    lines = [f"# Versus upstream FlashSAC ({env.get('gpu') or 'CPU'}, {env['date_utc']})", "",
             f"`{cfg['command']}`", "",
             f"Recipe: {cfg['env']}, {cfg['num_env_steps']} env steps, the first {cfg['buffer_min_length']} with "
             f"random actions, {settings}, "
             f"{cfg['num_eval_episodes']} evaluation episode(s) {evaluations}before and after training, seed "
             f"{cfg['seed']}, device "
             f"{cfg['device']}; extra overrides: this project {cfg['overrides'] or 'none'}, upstream "
             f"{cfg['upstream_overrides'] or 'none'}. One run after the other, each limited to "
             f"{cfg['time_limit_s']:.0f} s. Versions: torch {env.get('torch')}, jax {env.get('jax')}, Python "
             f"{env['python']}; upstream checkout {cfg['upstream_dir']} ({cfg['upstream_commit']}).", ""]
    lines += table(res)
    lines += ["", "Time to first update: launch to the end of the first update (imports, the initial evaluation as "
              "far as the first update waits for it, the random-action steps and any compilation included); "
              "upstream's is read off its progress bar (0.5 s resolution). First update: that update's own duration, "
              "compilation or graph capture included (upstream: from its bar's last refresh before it, an upper "
              "bound). Steady updates/s: the second half of the time after the first update."]
    if cfg["upstream_dtype_fix"]:
        lines += ["", "**Upstream ran with `--upstream-dtype-fix`**: `bench/upstream_launch.py` wrapped upstream's "
                  "`_compute_categorical_td_target` at import time to cast reward, done and entropy to the log-probs' "
                  "dtype; without it upstream stops at its first update on this stack (float64 rewards into a "
                  "float32 `scatter_add_`)."]
    headline = race(res["rows"])
    if headline is not None:
        res["race"] = headline
        names = {r["row"]: row_label(r) for r in res["rows"]}
        lines += ["", f"Race: every row had the same {cfg['time_limit_s']:.0f} s from launch. The slower row "
                  f"({names[headline['slower']]}) reached a best return of {headline['target_return']:.1f}; the "
                  "seconds since launch each row took to reach it:", "",
                  "| run | best return | seconds to the slower row's best |", "|---|---|---|"]
        lines += [f"| {names[k]} | {headline['best_return'][k]:.1f} | {headline['seconds_to_target'][k]:.1f} |"
                  for k in headline["best_return"]]
        race_plot(res, os.path.join(out_dir, "race.png"))
        lines += ["", "![return against wall clock](race.png)"]
    if not res.get("complete", True):
        lines += ["", "**Partial**: written after the last finished row; more rows were to run."]
    return write_results(out_dir, res, "\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """CLI; returns 0 when every row completed, 1 otherwise (the report is written either way), 2 for bad arguments."""
    ap = argparse.ArgumentParser(prog="python -m bench vs-upstream", description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", dest="upstream_dir",
                    help="a checkout of upstream FlashSAC (github.com/leeyngdo/FlashSAC: holds train.py and configs/)")
    ap.add_argument("--out", default=os.path.join("bench", "results", "vs_upstream"))
    ap.add_argument("--rows", default="torch,jax,upstream:eager,upstream:default",
                    help="comma-separated: upstream:<mode> (eager, auto, default, reduce-overhead, max-autotune), "
                    "torch, torch:<compile_mode>, jax")
    ap.add_argument("--env", default="HalfCheetah-v4")
    ap.add_argument("--num-env-steps", type=int, default=7000)
    ap.add_argument("--recipe", choices=RECIPES, default="gym",
                    help="gym: upstream's CPU-sim gym-MuJoCo settings; playground: its MuJoCo Playground settings")
    ap.add_argument("--buffer-min-length", type=int, default=None,
                    help="random-action rows before the first update (default: 5000, playground 100,000)")
    ap.add_argument("--eval-every", type=int, default=None,
                    help="a race: evaluate every this many interaction steps, return curves against wall clock")
    ap.add_argument("--num-eval-episodes", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--time-limit", type=float, default=150.0, help="wall seconds per row")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall seconds for all rows: a row's limit is also cut to what is left, and a row with less "
                    "than 10 s left is not started (reported as not run)")
    ap.add_argument("--runs-dir", default=None, help="where the rows' run directories go (default: --out/runs)")
    ap.add_argument("--upstream-dtype-fix", action="store_true",
                    help="run upstream through bench/upstream_launch.py with its one-function dtype fix")
    ap.add_argument("--overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="extra override for this project's agents, repeatable (replaces the recipe's value)")
    ap.add_argument("--upstream-overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Hydra override for upstream's train.py, repeatable (replaces the recipe's value)")
    ap.add_argument("--upstream-site", default=None, metavar="DIR",
                    help="a folder of packages at upstream's own pins, first on the upstream rows' PYTHONPATH only "
                    "(e.g. pip install --target DIR playground==0.0.5: playground 0.2.0 defaults to its warp engine)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter every row runs with")
    ap.add_argument("--tiny", action="store_true",
                    help="CPU in seconds: the torch agent with tiny networks and upstream eager, 60 steps")
    a = tiny_defaults(ap, argv, rows="torch,upstream:eager", num_env_steps=60, buffer_min_length=30,
                      device="cpu", time_limit=300.0)
    if a.buffer_min_length is None:
        a.buffer_min_length = BUFFER_MIN_LENGTH[a.recipe]
    if a.eval_every is not None and a.eval_every < 1:
        ap.error(f"--eval-every: expected an integer >= 1, got {a.eval_every}")
    if a.tiny:
        a.overrides = [o for o in TINY if not o.startswith("agent.device_type=")] + a.overrides
    try:
        rows = parse_rows(a.rows)
    except ValueError as exc:
        ap.error(str(exc))
    for name in ("num_env_steps", "buffer_min_length", "num_eval_episodes"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: expected an integer >= 1, got {getattr(a, name)}")
    if a.buffer_min_length >= a.num_env_steps:
        ap.error(f"--buffer-min-length: expected fewer than --num-env-steps ({a.num_env_steps}) so that updates run, "
                 f"got {a.buffer_min_length}")
    if not a.time_limit > 0:
        ap.error(f"--time-limit: expected seconds > 0, got {a.time_limit}")
    if a.upstream_site and not os.path.isdir(a.upstream_site):
        ap.error(f"--upstream-site: expected a folder of packages (pip install --target DIR ...), got "
                 f"{a.upstream_site!r}")
    if any(r.kind == "upstream" for r in rows):
        if not a.upstream_dir or not os.path.isfile(os.path.join(a.upstream_dir, "train.py")):
            ap.error("--upstream: expected a checkout of upstream FlashSAC holding train.py, got "
                     f"{a.upstream_dir!r}")
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    config = {"command": "python -m bench vs-upstream " + shlex.join(sys.argv[1:] if argv is None else argv),
              "rows": [r.spec for r in rows], "env": a.env, "num_env_steps": a.num_env_steps,
              "buffer_min_length": a.buffer_min_length, "num_eval_episodes": a.num_eval_episodes, "seed": a.seed,
              "recipe": a.recipe, "eval_every": a.eval_every,
              "device": a.device, "time_limit_s": a.time_limit, "upstream_dir": a.upstream_dir,
              "upstream_commit": upstream_commit(a.upstream_dir) if a.upstream_dir else None,
              "upstream_dtype_fix": a.upstream_dtype_fix, "upstream_site": a.upstream_site, "overrides": a.overrides,
              "upstream_overrides": a.upstream_overrides}
    if a.upstream_dtype_fix:
        print("upstream runs with --upstream-dtype-fix: bench/upstream_launch.py wraps upstream's "
              "_compute_categorical_td_target at import time (reward, done, entropy cast to the log-probs' dtype)",
              flush=True)
    done: list[dict[str, Any]] = []
    env = environment()
    t0 = time.monotonic()
    for i, row in enumerate(rows):
        left = float("inf") if a.budget_s is None else a.budget_s - (time.monotonic() - t0)
        if left < 10:
            print(f"[{row.spec}] not run: {left:.0f} s of --budget-s left", flush=True)
            done.append({"row": row.spec, "label": row.label, "command": "", "returncode": "not run", "wall_s": 0.0,
                         "ok": False, "error": f"not run: the --budget-s of {a.budget_s:.0f} s was spent"})
        else:
            done.append(run_row(a, row, out, min(a.time_limit, left)))
        res = {"env": env, "config": config, "rows": done, "complete": i == len(rows) - 1}
        text = report(out, res)
    print(text)
    return 0 if all(r["ok"] for r in done) else 1


if __name__ == "__main__":
    sys.exit(main())
