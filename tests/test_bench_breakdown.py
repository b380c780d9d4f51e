"""`python -m bench breakdown --tiny`: both agents' training step part by part on the CPU, and the report."""

from __future__ import annotations

import json
import math

import pytest

from bench.__main__ import main
from bench.breakdown import PARTS


def test_tiny_run(tmp_path):
    out = tmp_path / "breakdown"
    assert main(["breakdown", "--tiny", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert list(res["agents"]) == ["torch", "jax"]
    for framework, agent in res["agents"].items():
        assert list(agent["ms"]) == list(PARTS), framework
        for part, blocks in agent["ms"].items():
            assert len(blocks) == 1 and all(math.isfinite(v) and v > 0 for v in blocks), (framework, part)
        assert agent["median_ms"]["training step"] > agent["median_ms"]["env step"]
    assert "agent.categorical_target_backend=torch" in res["config"]["overrides"]["torch"]
    assert "agent.categorical_target_backend=jax" in res["config"]["overrides"]["jax"]
    report = (out / "results.md").read_text()
    assert "| eval action: evaluation policy |" in report and "| torch ms | torch % of step |" in report


def test_bad_frameworks_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["breakdown", "--tiny", "--out", "unused", "--frameworks", "torch,tf"])
    assert exc.value.code == 2 and "--frameworks" in capsys.readouterr().err
