"""bench/loop_breakdown.py on the CPU: a short tiny-network CLI run per framework, every part timed and reported."""

from __future__ import annotations

import json

import pytest

from agent_common import envs, loop
from agent_jax import agent as jax_agent
from bench.loop_breakdown import main

CLI = ["--", "--overrides", "env.env_name=HalfCheetah-v4", "--overrides", "num_env_steps=260", "--overrides",
       "agent.buffer_min_length=120", "--overrides", "agent.sample_batch_size=8", "--overrides",
       "num_eval_episodes=0", "--overrides", "progress_bar=false", "--overrides", "agent.device_type=cpu"]


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_a_short_run_reports_each_part_per_env_step(tmp_path, framework):
    extra = ["--packing", "all", "--host-transfers", "pinned"] if framework == "jax" else []
    out = tmp_path / "out"
    rc = main(["--framework", framework, "--out", str(out), "--tiny", "--skip", "20", *extra, *CLI,
               "--overrides", f"save_path={tmp_path / 'run'}"])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert res["rc"] == 0 and res["counted_steps"] == 260 - 120 - 20 - 1
    parts = res["us_per_step"]
    assert parts["env"] > 0 and parts["buffer_add"] > 0 and parts["total"] > 0
    top = ("env", "act", "buffer_add", "normalizer", "sample", "update", "step_agent", "other")
    assert sum(parts[name] for name in top) == pytest.approx(parts["total"])
    if framework == "jax":
        assert parts["step_agent"] > parts["dispatch"] > 0 and parts["update"] == 0
        assert res["state_packing"] == "all" and res["host_transfers"] == "pinned"
    else:
        assert parts["update"] > 0 and parts["step_agent"] == 0
    assert "| env |" in (out / "results.md").read_text()
    # the timers and settings are undone: later code in this process runs unwrapped
    assert loop.step_env is envs.step_env
    assert (jax_agent.STATE_PACKING, jax_agent.HOST_TRANSFERS) == ("matrices", "auto")
