"""bench/mjx_training_speed.py: the runs' overrides are valid MJX configs of the GPU recipe for both agents, the
arguments are checked, and the report holds every run. (The runs themselves need a GPU; the CLI they call is tested
in tests/test_agent_torch_mjx.py.)"""

from __future__ import annotations

import pytest

from agent_common import schema
from agent_common.config import parse_overrides
from agent_common.schema import build_config
from bench import mjx_training_speed
from bench.paired_training import train_command


@pytest.fixture
def extra_installed(monkeypatch):
    monkeypatch.setattr(schema, "mjx_missing", lambda: [])


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("num_envs", [256, 1024, 4096])
def test_overrides_are_the_gpu_recipe_with_a_short_budget(framework, num_envs, extra_installed, tmp_path):
    extra = mjx_training_speed.overrides(framework, "halfcheetah", num_envs, 60, 10, 5, ["agent.use_amp=false"]
                                         if framework == "torch" else [])
    cmd = train_command(framework, "triton" if framework == "torch" else "pallas", 0, num_envs * 60,
                        str(tmp_path / "run"), extra)
    values = parse_overrides([arg for arg in cmd if "=" in arg])
    cfg = build_config(values, framework)
    assert (cfg.env.env_type, cfg.env.env_name, cfg.num_train_envs, cfg.num_env_steps) == (
        "mjx", "halfcheetah", num_envs, num_envs * 60)
    assert (cfg.agent.sample_batch_size, cfg.updates_per_interaction_step, cfg.agent.buffer_min_length) == (
        2048, 2, num_envs * 10)
    assert cfg.agent.categorical_target_strict and cfg.num_eval_episodes == 0 and cfg.num_eval_envs == num_envs
    assert cfg.agent.use_amp is False  # --overrides win over the recipe (torch); the JAX recipe has no AMP


def test_arguments_are_checked(tmp_path, capsys):
    with pytest.raises(SystemExit):
        mjx_training_speed.main(["--out", str(tmp_path), "--framework", "torch", "--steps", "12"])
    assert "--steps (12) must leave two logging windows after the warm-up (>= 20)" in capsys.readouterr().err


def test_report_lists_every_run(tmp_path):
    res = {"env": {"gpu": None, "date_utc": "today", "command": "python -m bench.mjx_training_speed"},
           "config": {"framework": "torch", "task": "halfcheetah", "steps": 60, "warmup_steps": 10, "log_every": 5,
                      "backend": "triton"},
           "runs": [{"num_envs": 256, "returncode": 0, "wall_s": 40.0, "steady_env_steps_per_second": 9000.0,
                     "steady_updates_per_second": 70.0},
                    {"num_envs": 1024, "returncode": "timeout", "wall_s": 150.0}]}
    text = mjx_training_speed._report(str(tmp_path), res)
    assert "| 256 | 0 | 40.0 | 9000.0 | 70.0 |" in text and "| 1024 | timeout | 150.0 |" in text
    assert (tmp_path / "results.json").is_file() and (tmp_path / "results.md").read_text() == text
