"""Robust learning aggregates (rliable, Agarwal et al., 2021): per agent and suite, the interquartile mean (IQM),
median and mean of normalised returns with 95 % stratified-bootstrap confidence intervals, and performance profiles as
PNG, beside the per-seed table; FlashSAC's published per-seed returns go through the same pipeline.

    python -m bench.rliable_report FOLDER [FOLDER ...] --out DIR [--step S] [--reps N]
    python -m bench.rliable_report --tiny --out DIR

FOLDERs are collected learning results (``python -m bench.learning collect``: ``<agent>/<task>/seed<s>/eval.csv``).
Each run's return at env step ``--step`` (default: the largest step every run reached) is normalised per task with
``bench/results/published/normalization.csv`` ((return - random) / (reference - random), constants and their source
in the file). rliable needs the same number of runs on every task of a group, so a group keeps, per task, as many
runs as its task with the fewest (the lowest seeds; the report lists what it leaves out). The published group is
FlashSAC's per-seed returns at the same step (``bench/results/published/flashsac_gym_mujoco_per_seed.csv`` and
``flashsac_suites_per_seed.csv``).
The median is rliable's: the median over tasks of each task's mean score. Writes ``rliable.json`` (raw),
``rliable.md`` (the table and the per-seed returns; the command also writes it as ``results.md``) and
``performance_profile_<suite>.png``. ``--tiny`` runs on the
committed results of ``bench/results/learning/h200-2026-12-02-lr1m`` with few bootstrap samples.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from collections.abc import Sequence

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUBLISHED_DIR = os.path.join(REPO, "bench", "results", "published")
NORMALIZATION = os.path.join(PUBLISHED_DIR, "normalization.csv")
PUBLISHED_PER_SEED = os.path.join(PUBLISHED_DIR, "flashsac_gym_mujoco_per_seed.csv")
PUBLISHED_SUITES = os.path.join(PUBLISHED_DIR, "flashsac_suites_per_seed.csv")
TINY_FOLDER = os.path.join(REPO, "bench", "results", "learning", "h200-2026-12-02-lr1m")
PUBLISHED_LABEL = "FlashSAC (published)"
METRICS = ("IQM", "median", "mean")

__all__ = ["aggregate", "load_normalization", "load_published", "load_runs", "main", "normalise", "write_report"]


def _rows(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def load_normalization(path: str = NORMALIZATION) -> dict[str, dict[str, float | str]]:
    """{task: {suite, random_return, reference_return, reference, source}} from the constants file."""
    out: dict[str, dict[str, float | str]] = {}
    for row in _rows(path):
        out[row["env_name"]] = {"suite": row["suite"], "random_return": float(row["random_return"]),
                                "reference_return": float(row["reference_return"]), "reference": row["reference"],
                                "source": row["source"]}
    return out


def normalise(returns: np.ndarray, task: str, constants: dict[str, dict[str, float | str]]) -> np.ndarray:
    """(return - random) / (reference - random) for ``task``.

    Raises:
        ValueError: no constants for ``task``.
    """
    if task not in constants:
        raise ValueError(f"no normalisation constants for {task!r} in {NORMALIZATION} (tasks there: "
                         f"{', '.join(constants)}); add its random and reference returns with their source")
    c = constants[task]
    return (np.asarray(returns, dtype=np.float64) - float(c["random_return"])) / (
        float(c["reference_return"]) - float(c["random_return"]))


def load_runs(folders: Sequence[str]) -> dict[str, dict[str, dict[int, dict[int, float]]]]:
    """{agent: {task: {seed: {env_step: avg_return}}}} of collected folders (a later folder's run replaces an earlier
    one of the same agent, task and seed)."""
    out: dict[str, dict[str, dict[int, dict[int, float]]]] = {}
    for folder in folders:
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{folder} is not a directory of collected runs (python -m bench.learning collect)")
        for agent in sorted(os.listdir(folder)):
            for task_dir in sorted(_subdirs(os.path.join(folder, agent))):
                for seed_dir in sorted(_subdirs(os.path.join(folder, agent, task_dir))):
                    path = os.path.join(folder, agent, task_dir, seed_dir, "eval.csv")
                    if not seed_dir.startswith("seed") or not os.path.exists(path):
                        continue
                    returns = {int(float(r["env_step"])): float(r["value"]) for r in _rows(path)
                               if r["metric"] == "avg_return"}
                    out.setdefault(agent, {}).setdefault(task_dir, {})[int(seed_dir[4:])] = returns
    return out


def _subdirs(path: str) -> list[str]:
    return [d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d))] if os.path.isdir(path) else []


def load_published(paths: Sequence[str] = (PUBLISHED_PER_SEED, PUBLISHED_SUITES)
                   ) -> dict[str, dict[int, dict[int, float]]]:
    """{task: {seed: {env_step: avg_return}}} of FlashSAC's published per-seed returns (gym-MuJoCo and the other
    suites' files)."""
    out: dict[str, dict[int, dict[int, float]]] = {}
    for path in paths:
        for row in _rows(path):
            out.setdefault(row["env_name"], {}).setdefault(int(row["seed"]), {})[int(row["env_step"])] = float(
                row["avg_return"])
    return out


def _matrix(runs: dict[str, dict[int, dict[int, float]]], step: int, constants: dict) -> tuple[
        np.ndarray, list[str], dict[str, list[int]], list[str]]:
    """(normalised (runs, tasks) matrix, tasks, seeds kept per task, what was left out) at ``step``."""
    per_task = {task: sorted(s for s, curve in seeds.items() if step in curve) for task, seeds in runs.items()}
    per_task = {task: seeds for task, seeds in per_task.items() if seeds and task in constants}
    left_out = [f"{task}: no normalisation constants" for task in runs if task not in constants]
    if not per_task:
        return np.zeros((0, 0)), [], {}, left_out
    n = min(len(s) for s in per_task.values())
    tasks = sorted(per_task)
    kept = {task: per_task[task][:n] for task in tasks}
    left_out += [f"{task} seed {s}" for task in tasks for s in per_task[task][n:]]
    columns = [normalise(np.array([runs[task][s][step] for s in kept[task]]), task, constants) for task in tasks]
    return np.stack(columns, axis=1), tasks, kept, left_out  # (n, T)


def aggregate(matrices: dict[str, np.ndarray], reps: int, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """{group: {metric: [point, low, high]}} of IQM / median / mean with rliable's 95 % stratified-bootstrap
    percentile intervals (runs resampled within each task)."""
    from rliable import library as rly
    from rliable import metrics

    def scores(x: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(x), metrics.aggregate_median(x), metrics.aggregate_mean(x)])

    np.random.seed(seed)  # rliable draws its bootstrap samples from numpy's global generator
    points, intervals = rly.get_interval_estimates(matrices, scores, reps=reps)
    return {group: {m: [float(points[group][i]), float(intervals[group][0, i]), float(intervals[group][1, i])]
                    for i, m in enumerate(METRICS)} for group in matrices}


def _profile_png(matrices: dict[str, np.ndarray], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import library as rly
    from rliable import plot_utils

    top = max(1.0, max(float(m.max()) for m in matrices.values()) * 1.05)
    taus = np.linspace(0.0, top, 81)
    profiles, cis = rly.create_performance_profile(matrices, taus)
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=cis, xlabel=r"normalised score $\tau$",
                                         ax=ax, legend=True)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(folders: Sequence[str], out: str, step: int | None = None, reps: int = 50_000) -> dict:
    """Reads ``folders``, writes ``rliable.json``, ``rliable.md`` and one ``performance_profile_<suite>.png`` per
    suite into ``out``; returns the JSON record."""
    constants = load_normalization()
    runs = load_runs(folders)
    if not runs:
        raise ValueError(f"no collected runs (<agent>/<task>/seed<s>/eval.csv) in {', '.join(folders)}")
    if step is None:
        step = min(max(curve) for agent in runs.values() for seeds in agent.values() for curve in seeds.values())
    published = load_published()
    suites = sorted({str(constants[t]["suite"]) for agent in runs.values() for t in agent if t in constants})
    record: dict = {"step": step, "reps": reps, "folders": list(folders), "normalization": NORMALIZATION,
                    "published": [PUBLISHED_PER_SEED, PUBLISHED_SUITES], "suites": {},
                    "no_constants": sorted({t for agent in runs.values() for t in agent if t not in constants})}
    os.makedirs(out, exist_ok=True)
    for suite in suites:
        groups = {agent: {t: s for t, s in tasks.items() if constants.get(t, {}).get("suite") == suite}
                  for agent, tasks in runs.items()}
        tasks_seen = sorted({t for g in groups.values() for t in g})
        groups[PUBLISHED_LABEL] = {t: published[t] for t in tasks_seen if t in published}
        matrices, detail = {}, {}
        for label, group_runs in groups.items():
            matrix, tasks, kept, left_out = _matrix(group_runs, step, constants)
            if matrix.size == 0:
                continue
            matrices[label] = matrix
            detail[label] = {"tasks": tasks, "seeds": kept, "left_out": left_out,
                             "returns": {t: [group_runs[t][s][step] for s in kept[t]] for t in tasks},
                             "normalised": matrix.T.tolist()}
        aggregates = aggregate(matrices, reps) if matrices else {}
        png = os.path.join(out, f"performance_profile_{suite}.png")
        if matrices:
            _profile_png(matrices, png, f"{suite} at env step {step:,}")
        record["suites"][suite] = {"groups": detail, "aggregates": aggregates,
                                   "profile": os.path.basename(png) if matrices else None}
    with open(os.path.join(out, "rliable.json"), "w") as f:
        json.dump(record, f, indent=1)
    with open(os.path.join(out, "rliable.md"), "w") as f:
        f.write(markdown(record))
    return record


def markdown(record: dict) -> str:
    """The report: per suite, the aggregates table, the per-seed returns and the profile plot."""
    lines = [f"# Robust aggregates (rliable) at env step {record['step']:,}", "",
             f"Normalised score = (return - random) / (reference - random), constants: "
             f"`{os.path.relpath(record['normalization'], REPO)}`. 95 % stratified-bootstrap intervals "
             f"({record['reps']:,} samples). Published per-seed returns: "
             + ", ".join(f"`{os.path.relpath(p, REPO)}`" for p in record["published"]) + ".", ""]
    if record.get("no_constants"):
        lines += [f"Left out, no normalisation constants: {', '.join(record['no_constants'])}.", ""]
    for suite, body in record["suites"].items():
        lines += [f"## {suite}", "", "| group | tasks x runs | " + " | ".join(METRICS) + " |",
                  "|---|---|" + "---|" * len(METRICS)]
        for label, agg in body["aggregates"].items():
            d = body["groups"][label]
            shape = f"{len(d['tasks'])} x {len(next(iter(d['seeds'].values())))}"
            cells = [f"{p:.3f} [{lo:.3f}, {hi:.3f}]" for p, lo, hi in (agg[m] for m in METRICS)]
            lines.append(f"| {label} | {shape} | " + " | ".join(cells) + " |")
        lines += ["", "| group | task | seed | return | normalised |", "|---|---|---|---|---|"]
        for label, d in body["groups"].items():
            for i, task in enumerate(d["tasks"]):
                for seed, ret, norm in zip(d["seeds"][task], d["returns"][task], d["normalised"][i], strict=True):
                    lines.append(f"| {label} | {task} | {seed} | {ret:.1f} | {norm:.3f} |")
        left = [f"{label}: {x}" for label, d in body["groups"].items() for x in d["left_out"]]
        if left:
            lines += ["", "Left out (rliable needs as many runs on every task of a group): " + "; ".join(left)]
        if body["profile"]:
            lines += ["", f"![performance profile]({body['profile']})"]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.rliable_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", help="collected learning folders")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--step", type=int, default=None, help="env step compared (default: the last all runs reached)")
    ap.add_argument("--reps", type=int, default=50_000, help="bootstrap samples")
    ap.add_argument("--tiny", action="store_true", help="the committed HalfCheetah results, 2,000 bootstrap samples")
    args = ap.parse_args(argv)
    folders = [TINY_FOLDER] if args.tiny else args.folders
    if not folders:
        ap.error("give collected folders, or --tiny")
    record = write_report(folders, args.out, args.step, 2_000 if args.tiny else args.reps)
    for suite, body in record["suites"].items():
        for label, agg in body["aggregates"].items():
            p, lo, hi = agg["IQM"]
            print(f"{suite} {label}: IQM {p:.3f} [{lo:.3f}, {hi:.3f}]")
    with open(os.path.join(args.out, "results.md"), "w") as f:  # the bench jobs' summary name
        f.write(markdown(record))
    print(f"wrote {os.path.join(args.out, 'rliable.md')} (and results.md), rliable.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
