"""Learning on MJX next to the CPU recipe: evaluation return against env steps and wall seconds, and the wall-clock
to fixed returns.

    python -m bench.mjx_learning --out DIR --mjx RUN_DIR [RUN_DIR ...] --cpu RUN_DIR [RUN_DIR ...] \\
        [--thresholds 3000 5000]

A run directory is what the agents' CLIs write: ``eval.csv`` (the returns) and ``tb/`` (TensorBoard events, which
carry wall times), and, for runs that ``bench.gpu_mjx`` started, ``<run dir>.launch.json`` beside it (the launch
time). Wall seconds count from the run's first TensorBoard event, the logger's start. Both training loops create
the logger after building the environments and the agent and before anything else: the first evaluation, the
first compilation of the update or training program, the warm-up. "From launch" adds the time before it (imports,
env and agent construction), where the launch was recorded. An evaluation's wall time is that of its TensorBoard
event, written when it ended, so it includes every evaluation up to it; ``perf/eval_seconds`` (MJX runs) says
how much that was.

Writes ``DIR/mjx_learning.md`` (per group of runs, the curve table: each run's return and wall seconds at every
evaluation; per threshold, each run's first evaluation at or above it, in env steps and seconds, with the groups'
medians and their ratio), ``DIR/mjx_learning.json`` and ``DIR/mjx_learning.png`` (return against wall seconds
and against env steps).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence

from bench.common import fmt, tensorboard_events
from bench.learning import eval_returns, read_run_config

__all__ = ["first_reaching", "load_run", "main", "markdown", "report"]

FRAMEWORK_OF_BACKEND = {"pallas": "JAX", "jax": "JAX", "triton": "torch", "torch": "torch"}


def load_run(run_dir: str) -> dict:
    """One run: its label, recipe (from ``config.yaml``), evaluations [(env step, return, seconds from the TensorBoard
    start or None where the event is missing)], the launch's lead over that start, and the evaluations' seconds."""
    cfg = read_run_config(run_dir)
    a = cfg["agent"]
    framework = FRAMEWORK_OF_BACKEND.get(a.get("categorical_target_backend"), "?")
    env_type = cfg["env"]["env_type"]
    envs = int(cfg["num_train_envs"])
    recipe = (f"{framework} agent, {'MJX' if env_type == 'mjx' else 'gymnasium'} {cfg['env']['env_name']}, {envs} env"
              f"{'s' if envs > 1 else ''}, batch {a['sample_batch_size']}, UTD {cfg['updates_per_interaction_step']:g}")
    start, series = tensorboard_events(os.path.join(run_dir, "tb"), ("avg_return", "perf/eval_seconds"))
    wall = {step: t - start for step, _v, t in series.get("avg_return", [])} if start is not None else {}
    evals = [(step, value, wall.get(step)) for step, value in sorted(eval_returns(run_dir).items())]
    launch_lead = None
    launch_path = os.path.normpath(run_dir) + ".launch.json"
    if os.path.isfile(launch_path) and start is not None:
        launch_lead = start - float(json.load(open(launch_path))["launch_unix"])
    eval_s = [v for _s, v, _t in series.get("perf/eval_seconds", [])]
    return {"dir": run_dir, "label": os.path.basename(os.path.normpath(run_dir)), "recipe": recipe,
            "framework": framework,
            "seed": int(cfg["seed"]), "evals": evals, "launch_lead_s": launch_lead,
            "eval_seconds": sum(eval_s) if eval_s else None, "evaluations": len(evals)}


def first_reaching(run: dict, threshold: float) -> dict | None:
    """The run's first evaluation with a return at or above ``threshold``: env step, return, seconds from the
    TensorBoard start and from the launch (None where unknown); None if none reaches it."""
    for step, value, secs in run["evals"]:
        if value >= threshold:
            lead = run["launch_lead_s"]
            return {"env_step": step, "return": value, "s": secs,
                    "s_from_launch": secs + lead if secs is not None and lead is not None else None}
    return None


def _median(values: Sequence[float | None]) -> float | None:
    have = [v for v in values if v is not None]
    return statistics.median(have) if have else None


def analyse(kinds: dict[str, list[str]], thresholds: Sequence[float]) -> dict:
    """The runs of each kind (e.g. "GPU recipe" -> run dirs) in groups of one agent each ("<kind>, <agent>"), and per
    threshold each run's ``first_reaching`` and each group's medians over the runs that reach it."""
    runs: dict[str, list[dict]] = {}
    for kind, dirs in kinds.items():
        for r in map(load_run, dirs):
            runs.setdefault(f"{kind}, {r['framework']}", []).append(r)
    reach = {}
    for t in thresholds:
        per = {name: [first_reaching(r, t) for r in rs] for name, rs in runs.items()}
        med = {name: {k: _median([x[k] if x else None for x in xs]) for k in ("env_step", "s", "s_from_launch")}
               for name, xs in per.items()}
        reach[str(t)] = {"runs": per, "median": med}
    return {"groups": runs, "thresholds": list(thresholds), "reach": reach}


def _curve_table(runs: list[dict]) -> list[str]:
    steps = sorted({s for r in runs for s, _v, _t in r["evals"]})
    lines = ["| env steps | " + " | ".join(f"{r['label']}: return @ s" for r in runs) + " | mean return |",
             "|---|" + "---|" * (len(runs) + 1)]
    for step in steps:
        cells, values = [], []
        for r in runs:
            hit = [(v, t) for s, v, t in r["evals"] if s == step]
            if hit:
                values.append(hit[0][0])
                cells.append(f"{hit[0][0]:,.0f} @ {fmt(hit[0][1], '.0f') or '?'}")
            else:
                cells.append("")
        lines.append(f"| {step:,} | " + " | ".join(cells) + f" | {statistics.mean(values):,.0f} |")
    return lines


def markdown(res: dict) -> str:
    lines = ["# Learning on MJX next to the CPU recipe", "",
             "Seconds: wall seconds from the run's first TensorBoard event (the logger's start, after env and agent "
             "construction, before the first evaluation and compilation); an evaluation counts when it ended. "
             "From launch: plus the process's start-up before it, where recorded.", ""]
    for name, runs in res["groups"].items():
        lines += [f"## {name}: {'; '.join(sorted({r['recipe'] for r in runs}))}", ""]
        for r in runs:
            extra = [f"{r['evaluations']} evaluations"]
            if r["eval_seconds"] is not None:
                extra.append(f"{r['eval_seconds']:.0f} s of them")
            if r["launch_lead_s"] is not None:
                extra.append(f"launch {r['launch_lead_s']:.0f} s before the logger's start")
            last = r["evals"][-1] if r["evals"] else None
            if last:
                extra.append(f"last: {last[1]:,.0f} at {last[0]:,} env steps, {fmt(last[2], '.0f') or '?'} s")
            lines.append(f"- `{r['dir']}` (seed {r['seed']}): " + ", ".join(extra))
        lines += ["", *_curve_table(runs), ""]
    names = list(res["groups"])
    for t in res["thresholds"]:
        reach = res["reach"][str(t)]
        lines += [f"## First evaluation at or above {t:,.0f}", "",
                  "| group | run | env steps | return | s | s from launch |", "|---|---|---|---|---|---|"]
        for name in names:
            for r, x in zip(res["groups"][name], reach["runs"][name], strict=True):
                if x is None:
                    best = max(r["evals"], key=lambda e: e[1]) if r["evals"] else None
                    note = f"not reached (best {best[1]:,.0f} at {best[0]:,})" if best else "no evaluations"
                    lines.append(f"| {name} | {r['label']} | {note} | | | |")
                else:
                    lines.append(f"| {name} | {r['label']} | {x['env_step']:,} | {x['return']:,.0f} | "
                                 f"{fmt(x['s'], '.0f')} | {fmt(x['s_from_launch'], '.0f')} |")
            m = reach["median"][name]
            n = sum(x is not None for x in reach["runs"][name])
            lines.append(f"| **{name}: median of {n} / {len(reach['runs'][name])}** | | "
                         f"{fmt(m['env_step'], ',.0f')} | | {fmt(m['s'], '.0f')} | {fmt(m['s_from_launch'], '.0f')} |")
        first = reach["median"][names[0]]["s"]
        ratios = [f"{name}: {reach['median'][name]['s'] / first:.2f}" for name in names[1:]
                  if first and reach["median"][name]["s"]]
        if ratios:
            lines += ["", f"Median seconds over {names[0]}'s: " + "; ".join(ratios)]
        lines.append("")
    return "\n".join(lines)


def plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_steps) = plt.subplots(1, 2, figsize=(12, 4.2))
    for color, (name, runs) in zip(("tab:blue", "tab:orange", "tab:green", "tab:red"), res["groups"].items(),
                                   strict=False):
        for i, r in enumerate(runs):
            label = name if i == 0 else None
            timed = [(t, v) for _s, v, t in r["evals"] if t is not None]
            by_time.plot([t for t, _ in timed], [v for _, v in timed], color=color, alpha=0.75, lw=1, marker=".",
                         label=label)
            stepped = [(s, v) for s, v, _t in r["evals"] if s > 0]  # a log axis: the step-0 evaluation is left out
            by_steps.plot([s for s, _ in stepped], [v for _, v in stepped], color=color, alpha=0.75, lw=1, marker=".",
                          label=label)
    for ax in (by_time, by_steps):
        for t in res["thresholds"]:
            ax.axhline(t, color="grey", lw=0.8, ls="--")
        ax.grid(alpha=0.3)
        ax.set_ylabel("evaluation return")
    by_time.set_xlabel("wall seconds from the logger's start")
    by_steps.set_xlabel("env steps (log)")
    by_steps.set_xscale("log")
    by_time.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(out: str, groups: dict[str, list[str]], thresholds: Sequence[float]) -> str:
    res = analyse(groups, thresholds)
    text = markdown(res)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "mjx_learning.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "mjx_learning.json"), "w") as f:
        json.dump(res, f, indent=1)
    plot(res, os.path.join(out, "mjx_learning.png"))
    return text


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.mjx_learning", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--mjx", nargs="+", required=True, help="the MJX runs' directories")
    ap.add_argument("--cpu", nargs="*", default=[], help="the CPU recipe's run directories")
    ap.add_argument("--thresholds", type=float, nargs="+", default=[3000.0, 5000.0])
    a = ap.parse_args(argv)
    groups = {"GPU recipe": a.mjx, **({"CPU recipe": a.cpu} if a.cpu else {})}
    for d in [*a.mjx, *a.cpu]:
        if not os.path.isfile(os.path.join(d, "eval.csv")):
            ap.error(f"{d}: no eval.csv (not a run directory)")
    print(report(a.out, groups, a.thresholds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
