"""The DMC, MuJoCo Playground and MyoSuite recipes (``agent_common.recipes``) are valid configs with upstream's
values."""

from __future__ import annotations

import pytest

from agent_common.config import build_config, parse_overrides
from agent_common.recipes import recipe_overrides
from simulators import SIMULATORS, dmc, myosuite, playground


@pytest.fixture
def extras(monkeypatch):
    monkeypatch.setattr(dmc, "missing", lambda: [])
    monkeypatch.setattr(playground, "missing", lambda: [])
    monkeypatch.setattr(myosuite, "missing", lambda: [])


def _with_task(name: str, task: str, framework: str) -> list[str]:
    return [*recipe_overrides(name, framework), f"env.env_name={task}"]


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_dmc_recipe(framework, extras):
    cfg = build_config(parse_overrides(_with_task("dmc", "dog-run", framework)), framework)
    assert (cfg.env.env_type, cfg.env.env_name, cfg.num_train_envs, cfg.num_env_steps) == ("dmc", "dog-run", 1,
                                                                                           1_000_000)
    assert (cfg.agent.sample_batch_size, cfg.agent.buffer_min_length, cfg.gamma, cfg.n_step) == (512, 10_000, 0.99, 1)
    assert cfg.agent.use_amp is False and cfg.env.max_episode_steps is None  # null: DMC_EPISODE_STEPS


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_playground_recipe(framework, extras):
    cfg = build_config(parse_overrides(_with_task("playground", "CheetahRun", framework)), framework)
    assert (cfg.env.env_type, cfg.env.env_name, cfg.env.rescale_action) == ("mujoco_playground", "CheetahRun", False)
    assert (cfg.num_train_envs, cfg.agent.sample_batch_size, cfg.updates_per_interaction_step) == (1024, 2048, 2)
    assert (cfg.gamma, cfg.agent.buffer_device_type) == (0.97, "cuda")
    assert cfg.agent.use_amp is (framework == "torch")


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_myosuite_recipe(framework, extras):
    cfg = build_config(parse_overrides(_with_task("myosuite", "myo-pen-twirl-hard", framework)), framework)
    assert (cfg.env.env_type, cfg.env.env_name, cfg.env.rescale_action) == ("myosuite", "myo-pen-twirl-hard", True)
    assert (cfg.num_train_envs, cfg.num_eval_envs, cfg.num_eval_episodes, cfg.num_env_steps) == (1, 1, 50, 1_000_000)
    assert (cfg.agent.sample_batch_size, cfg.agent.buffer_min_length, cfg.agent.buffer_max_length) == (
        512, 10_000, 1_000_000)
    assert (cfg.gamma, cfg.n_step, cfg.updates_per_interaction_step, cfg.agent.buffer_device_type) == (
        0.95, 1, 1, "cpu")
    assert cfg.agent.use_amp is False and cfg.env.max_episode_steps is None  # null: the task's own limit


def test_default_tasks_are_valid(extras):
    for name, task in (("dmc", "humanoid-walk"), ("playground", "CheetahRun"), ("myosuite", "myo-reach")):
        cfg = build_config(parse_overrides(recipe_overrides(name, "jax")), "jax")
        assert cfg.env.env_name == task and task in SIMULATORS[cfg.env.env_type].TASKS
