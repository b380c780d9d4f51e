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
    extra = []
    if framework == "jax":
        extra = ["--packing", "all", "--jax-trace", str(tmp_path / "trace"), "--trace-steps", "30"]
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
        assert res["state_packing"] == "all" and parts["action_copy"] > 0
        trace = res["trace"]  # the first 30 counted steps, traced: the step's jitted call once per step
        assert trace["steps"] == 30
        (calls,) = [r["per_step"] for r in trace["host"] if r["name"] == "PjitFunction(env_step)"]
        assert calls >= 1
    else:
        assert parts["update"] > 0 and parts["step_agent"] == 0
    assert "| env |" in (out / "results.md").read_text()
    # the timers and settings are undone: later code in this process runs unwrapped
    assert loop.step_env is envs.step_env
    assert jax_agent.STATE_PACKING == "matrices"


def test_xla_command_buffer_log_counts_updates_and_executions(tmp_path):
    """bench.xla_command_buffers reads XLA's command_buffer_thunk lines (the wording of jaxlib's XLA)."""
    from bench import xla_command_buffers as xcb

    log = [
        "I1201 12:00:00.1 1 command_buffer_thunk.cc:190] Initialized command buffer on device #0 in 900 μs; "
        "num_commands=300",
        "I1201 12:00:00.2 1 command_buffer_thunk.cc:250] Update command buffer on device #0 by recoding command "
        "buffer cmd sequence after 1 executions since last update; num_commands=300; updated_allocs=2",
        "I1201 12:00:00.3 1 command_buffer_thunk.cc:270] Updated command buffer in 450 μs; num_commands=300",
        "I1201 12:00:00.4 1 command_buffer_thunk.cc:280] Execute command buffer on device #0; num_executions=1",
        "I1201 12:00:00.5 1 command_buffer_thunk.cc:371] [0] Execute command buffer; num_executions=2",  # 0.11.2
        "I1201 12:00:00.6 1 command_buffer_thunk.cc:336] [0] Create/Update command buffer by recoding command buffer "
        "cmd sequence after 2 executions since last update; num_commands=7; updated_allocs=1; is_first_record=false",
        "I1201 12:00:00.7 1 command_buffer_thunk.cc:270] Updated command buffer in 30 μs; num_commands=7",
        "I1201 12:00:00.8 1 command_buffer_thunk.cc:280] Execute command buffer on device #0; num_executions=1",
        "I1201 12:00:00.9 1 some_other.cc:1] unrelated",
    ]
    res = xcb.summarize(log)
    assert res["executions"] == 3 and res["updates"] == 2 and res["update_us_sum"] == 480.0
    assert res["executions_since_update"] == {"1": 2, "2": 1}
    assert res["per_num_commands"]["300"]["changed_allocations"] == {2: 1}
    assert res["per_num_commands"]["300"]["initializations"] == 1
    assert res["per_num_commands"]["7"]["update_us_median"] == 30.0
    path = tmp_path / "run.log"
    path.write_text("\n".join(log[-1:]), encoding="utf-8")
    assert xcb.main(["--log", str(path), "--out", str(tmp_path / "out")]) == 1  # nothing recognised: exit 1
