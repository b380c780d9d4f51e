"""Learning-curve PNG from a run's eval CSV: ``python -m agent_common.plot <run_dir> [--reference CSV]``."""

from __future__ import annotations

import argparse
import csv
import os
from collections import defaultdict

__all__ = ["main", "plot_run"]


def _published(reference_csv: str, env_name: str) -> list[tuple[float, float, float, float]]:
    """(env_step, mean, min_seed, max_seed) of FlashSAC from ``flashsac_published_returns.csv``."""
    rows: list[tuple[float, float, float, float]] = []
    with open(reference_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row["env_name"] == env_name and row["algo"] == "FlashSAC":
                mean = float(row["mean_return"])
                lo = float(row["min_seed"]) if row.get("min_seed") else mean
                hi = float(row["max_seed"]) if row.get("max_seed") else mean
                rows.append((float(row["env_step"]), mean, lo, hi))
    return sorted(rows)


def plot_run(run_dir: str, out: str | None = None, reference_csv: str | None = None) -> str:
    """Draws avg_return vs env_step (one line per seed/env found in ``<run_dir>/eval.csv``).

    Args:
        run_dir: run directory holding ``eval.csv`` (or the CSV path itself).
        out: output PNG path (default ``<run_dir>/learning_curve.png``).
        reference_csv: optional ``flashsac_published_returns.csv`` to overlay the published FlashSAC curve.

    Returns:
        The PNG path.
    """
    csv_path = run_dir if run_dir.endswith(".csv") else os.path.join(run_dir, "eval.csv")
    base_dir = os.path.dirname(csv_path)
    out = out or os.path.join(base_dir, "learning_curve.png")
    curves: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            if row["metric"] == "avg_return":
                curves[(row["exp_name"], row["env_name"], row["seed"])].append(
                    (float(row["env_step"]), float(row["value"]))
                )
    if not curves:
        raise ValueError(f"no avg_return rows in {csv_path}")
    import matplotlib

    matplotlib.use("Agg")  # headless; chosen before pyplot is imported
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    env_names = set()
    for (exp, env, seed), points in sorted(curves.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{exp} {env} seed {seed}")
        env_names.add(env)
    if reference_csv is not None:
        for env in sorted(env_names):
            ref = _published(reference_csv, env)
            if ref:
                steps = [r[0] for r in ref]
                ax.plot(steps, [r[1] for r in ref], "k--", label=f"published FlashSAC {env} (mean)")
                ax.fill_between(steps, [r[2] for r in ref], [r[3] for r in ref], color="k", alpha=0.1)
    ax.set_xlabel("env step")
    ax.set_ylabel("average eval return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(prog="python -m agent_common.plot", description=__doc__)
    parser.add_argument("run_dir", help="run directory containing eval.csv (or the CSV path)")
    parser.add_argument("--out", default=None, help="output PNG (default <run_dir>/learning_curve.png)")
    parser.add_argument("--reference", default=None, help="flashsac_published_returns.csv to overlay")
    args = parser.parse_args(argv)
    print(plot_run(args.run_dir, args.out, args.reference))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
