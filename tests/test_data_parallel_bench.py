"""bench/data_parallel.py: the commands it runs and the scaling table it writes (no training here)."""

from __future__ import annotations

import pytest

from bench.data_parallel import run_command, scaling_table


def test_commands_launch_torchrun_or_num_devices():
    torch2 = run_command("torch", 2, "/tmp/r", 60, 1000, 500)
    assert torch2[1:4] == ["-m", "torch.distributed.run", "--nproc_per_node=2"]
    assert "agent_torch.train" in torch2 and "max_wall_seconds=60" in torch2 and "num_devices=1" not in torch2
    assert run_command("torch", 1, "/tmp/r", 60, 1000, 500)[1:3] == ["-m", "agent_torch.train"]
    jax2 = run_command("jax", 2, "/tmp/r", 60, 1000, 500)
    assert jax2[1:3] == ["-m", "agent_jax.train"] and "num_devices=2" in jax2 and "save_path=/tmp/r" in jax2
    assert run_command("jax", 1, "/tmp/r", 60, 1000, 500, ["agent.sample_batch_size=32"])[-1] == (
        "agent.sample_batch_size=32")  # extra overrides come last, so they win


def test_scaling_table_per_gpu_rates_and_efficiency():
    results = {
        "torch": {1: {"updates_per_s": 400.0, "env_steps_per_s": 400.0},
                  2: {"updates_per_s": 300.0, "env_steps_per_s": 600.0}},
        "jax": {1: {"updates_per_s": 500.0, "env_steps_per_s": 500.0},
                2: {"returncode": 1}},
    }
    rows = {(r["framework"], r["gpus"]): r for r in scaling_table(results, batch=512)}
    t2 = rows[("torch", 2)]
    assert t2["updates_per_s_per_gpu"] == 300.0 and t2["env_steps_per_s_per_gpu"] == 300.0
    assert t2["batch_rows_per_s_per_gpu"] == 300.0 * 512
    assert t2["scaling_efficiency"] == pytest.approx(0.75) and t2["env_scaling_efficiency"] == pytest.approx(0.75)
    assert rows[("torch", 1)]["scaling_efficiency"] == 1.0
    assert rows[("jax", 2)]["status"] == "rc=1" and "scaling_efficiency" not in rows[("jax", 2)]
