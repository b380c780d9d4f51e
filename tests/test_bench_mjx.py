"""`python -m bench mjx --tiny`: the torch agent's CLI on 4 MJX halfcheetah envs, tiny networks, and the report.
Skipped only when the mjx extra is not installed."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("brax", reason="the mjx extra is not installed (pip install -e \".[mjx]\")")

from bench.__main__ import main  # noqa: E402


def test_tiny_run(tmp_path):
    out = tmp_path / "mjx"
    assert main(["mjx", "--tiny", "--out", str(out)]) == 0, (out / "results.md").read_text()
    res = json.loads((out / "results.json").read_text())
    (run,) = res["runs"]
    assert run["num_envs"] == 4 and run["returncode"] == 0 and "env.env_type=mjx" in run["cmd"]
    assert run["steady_env_steps_per_second"] > 0 and run["steady_updates_per_second"] > 0
    assert run["time_to_first_update_s"] > 0
    assert "| 4 | 0 |" in (out / "results.md").read_text()
