"""`python -m bench learning --tiny`: one tiny Hopper run trained through the runner, collected and reported against
the published figures (at step 0, the only published step a tiny run reaches)."""

from __future__ import annotations

import csv
import json
import os

from bench.__main__ import main


def test_tiny_run(tmp_path):
    out = tmp_path / "learning"
    assert main(["learning", "--tiny", "--out", str(out)]) == 0
    run = out / "collected" / "torch" / "Hopper-v4" / "seed0"
    assert {"eval.csv", "config.yaml", "run.json"} <= set(os.listdir(run))
    with open(run / "eval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["env_step"]) for r in rows if r["metric"] == "avg_return"] == [0, 30, 60]
    res = json.loads((out / "results.json").read_text())
    (row,) = res["rows"]
    assert (row["agent"], row["task"], row["env_step"], row["seeds"]) == ("torch", "Hopper-v4", 0, [0])
    assert row["published"]["mean"] != 0 and not row["published_protocol"]
    assert (out / "learning_curves.png").stat().st_size > 1000
    assert "python -m bench learning report" in (out / "results.md").read_text()
    rliable = json.loads((out / "rliable.json").read_text())  # the robust aggregates beside the per-seed table
    suite = rliable["suites"]["gym-mujoco"]
    assert set(suite["aggregates"]["torch"]) == {"IQM", "median", "mean"}  # each a (point, low, high) triple
    assert all(len(v) == 3 for v in suite["aggregates"]["torch"].values())
    assert (out / suite["profile"]).stat().st_size > 1000
    assert "rliable.md" in (out / "results.md").read_text() and (out / "rliable.md").is_file()
