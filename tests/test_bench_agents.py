"""`python -m bench agents --tiny`: both CLIs on a tiny recipe, one round, and the report."""

from __future__ import annotations

import json

from bench.__main__ import main


def test_tiny_run(tmp_path):
    out = tmp_path / "agents"
    assert main(["agents", "--tiny", "--out", str(out)]) == 0, (out / "results.md").read_text()
    res = json.loads((out / "results.json").read_text())
    assert [r["framework"] for r in res["runs"]] == ["torch", "jax"]
    for r in res["runs"]:
        assert r["returncode"] == 0 and r["updates_per_second"] > 0 and r["env_steps_per_second"] > 0
        assert r["steady_updates_per_second"] > 0 and r["steady_windows"] == 3  # windows ending at 40, 50, 60
        assert "agent.categorical_target_backend=" + {"torch": "torch", "jax": "jax"}[r["framework"]] in r["cmd"]
    assert res["jax_over_torch_steady_updates"]["n"] == 1
    assert "JAX / torch steady updates/s" in (out / "results.md").read_text()


def test_result_line_parsing():
    from bench.common import parse_result_line

    line = ("[completed] env_step=60 wall=3.0s env_steps/s=20.5 updates/s=10.0 update_ms=1.00 last_eval_return=1.0 "
            "time_to_first_update={}s steady_updates/s=12.5")
    text = "\n".join(["[completed] env_step=30 env_steps/s=1.0 updates/s=1.0", line.format("2.5"), "  run dir: x"])
    assert parse_result_line(text) == {"env_steps_per_second": 20.5, "updates_per_second": 10.0,
                                       "time_to_first_update_s": 2.5}
    assert parse_result_line(line.format("nan")) == {"env_steps_per_second": 20.5, "updates_per_second": 10.0}
    assert parse_result_line("[interrupted] env_step=30 env_steps/s=1.0 updates/s=1.0") == {}
