"""DeepMind Control suite tasks (``env.env_type=dmc``) through shimmy: the task list, the env as upstream builds it
(float32 flattened observations, 1000-step episodes, exact snapshots), config validation, and a tiny training run
of each agent with its checkpoint resumed exactly. Needs the dmc extra (skipped without it)."""

from __future__ import annotations

import pytest

pytest.importorskip("dm_control")
pytest.importorskip("shimmy")

import numpy as np  # noqa: E402

from agent_common.config import ConfigError, load_config  # noqa: E402
from agent_common.driver import train  # noqa: E402
from agent_common.envs import get_env_states, make_vec_env, set_env_states, step_env  # noqa: E402
from agent_common.host import host_trainer  # noqa: E402
from simulators import SIMULATORS, dmc  # noqa: E402
from tests.agent_test_utils import assert_nested_equal  # noqa: E402

TASK = "cartpole-swingup"  # obs 5, act 1: the cheapest to simulate


def test_task_list_is_the_installed_suite():
    from dm_control import suite

    assert sorted(dmc.TASKS) == sorted(f"{d}-{t}" for d, t in suite.ALL_TASKS)
    assert SIMULATORS["dmc"].TASKS == dmc.TASKS


def test_env_is_float32_flat_and_ends_after_1000_steps():
    envs = make_vec_env("cheetah-run", 1, seed=0, env_type="dmc")
    try:
        obs, _ = envs.reset(seed=0)
        assert obs.dtype == np.float32 and obs.shape == (1, 17)
        assert envs.single_observation_space.dtype == np.float32
        assert envs.single_action_space.shape == (6,)
        assert float(envs.single_action_space.low.min()) == -1.0 and float(envs.single_action_space.high.max()) == 1.0
        ends = []
        for t in range(1, 1001):
            result = step_env(envs, np.zeros((1, 6), np.float32))
            assert result.next_observation.dtype == np.float32
            if result.truncated[0] or result.terminated[0]:
                ends.append((t, result.truncated[0], result.terminated[0]))
        assert ends == [(1000, 1.0, 0.0)]  # truncated (bootstraps), never terminated
    finally:
        envs.close()


def test_max_episode_steps_overrides_the_episode_length():
    envs = make_vec_env(TASK, 1, seed=0, max_episode_steps=7, env_type="dmc")
    try:
        envs.reset(seed=0)
        truncated = [step_env(envs, np.zeros((1, 1), np.float32)).truncated[0] for _ in range(7)]
        assert truncated == [0.0] * 6 + [1.0]
    finally:
        envs.close()


def test_snapshot_restores_the_trajectory_exactly():
    envs = make_vec_env(TASK, 1, seed=3, max_episode_steps=20, env_type="dmc")
    try:
        envs.reset(seed=3)
        rng = np.random.default_rng(0)
        for _ in range(15):  # mid-episode, close to the limit so the restored counters matter
            step_env(envs, rng.uniform(-1, 1, (1, 1)).astype(np.float32))
        states = get_env_states(envs)
        actions = rng.uniform(-1, 1, (12, 1, 1)).astype(np.float32)
        first = [step_env(envs, a) for a in actions]
        set_env_states(envs, states)
        again = [step_env(envs, a) for a in actions]
        for x, y in zip(first, again, strict=True):
            np.testing.assert_array_equal(x.next_observation, y.next_observation)
            np.testing.assert_array_equal(x.reward, y.reward)
            np.testing.assert_array_equal(x.truncated, y.truncated)
        assert any(x.truncated[0] for x in first)  # the episode ended and was reset inside the window
    finally:
        envs.close()


def test_different_seeds_start_differently():
    a = make_vec_env(TASK, 1, seed=0, env_type="dmc")
    b = make_vec_env(TASK, 1, seed=1, env_type="dmc")
    try:
        assert not np.array_equal(a.reset(seed=0)[0], b.reset(seed=1)[0])
    finally:
        a.close(), b.close()


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("env.env_name=HalfCheetah-v4", "Allowed values: acrobot-swingup"),
        ("env.env_name=cheetah_run", "(env.env_type dmc)"),
    ],
)
def test_config_rejects_names_of_other_suites(override, fragment):
    with pytest.raises(ConfigError, match="env.env_name") as info:
        load_config(["env.env_type=dmc", override], "torch")
    assert fragment in str(info.value)


def test_config_without_the_extra_names_it(monkeypatch):
    monkeypatch.setattr(dmc, "missing", lambda: ["shimmy"])
    with pytest.raises(ConfigError, match=r"dmc extra \(pip install -e \"\.\[dmc\]\"\); not installed: shimmy"):
        load_config(["env.env_type=dmc", f"env.env_name={TASK}"], "jax")


TINY = [
    "env.env_type=dmc",
    f"env.env_name={TASK}",
    "num_threads=1",
    "progress_bar=false",
    "agent.actor_hidden_dim=8",
    "agent.critic_hidden_dim=16",
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=8",
    "agent.buffer_min_length=15",
    "agent.buffer_max_length=64",
    "env.max_episode_steps=20",
    "num_eval_episodes=1",
    "num_env_steps=60",
    "evaluation_per_interaction_step=30",
    "save_checkpoint_per_interaction_step=30",
    "keep_checkpoints=2",
]


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_tiny_run_resumes_exactly(tmp_path, framework):
    """60 env steps with updates from step 15, evaluated every 30 steps; the run resumed from its step-30 checkpoint
    ends with the same evaluations and the same replay rows (the DMC env state travels in the checkpoint)."""
    from agent_common.runs import files as run_files

    if framework == "torch":
        from agent_torch.agent import make_agent

        overrides = [*TINY, "agent.categorical_target_backend=torch"]
    else:
        from agent_jax.agent import make_agent  # type: ignore[assignment]

        overrides = [*TINY, "agent.categorical_target_backend=jax"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    result = train(load_config([*overrides, f"save_path={straight}"], framework), host_trainer(make_agent))
    assert result.status == "completed" and result.env_step == 60
    returns = [m["avg_return"] for _, m in result.evaluations]
    assert len(returns) == 3 and all(np.isfinite(returns))
    cfg = load_config([f"agent_load_path={straight / 'checkpoints' / 'step30'}", f"save_path={resumed}"], framework)
    assert cfg.env.env_type == "dmc" and cfg.env.env_name == TASK
    again = train(cfg, host_trainer(make_agent))
    assert again.env_step == 60 and again.evaluations == result.evaluations[-len(again.evaluations):]
    a, b = straight / "checkpoints" / "step60", resumed / "checkpoints" / "step60"
    loop_a = run_files.load_pickle(str(a / "loop_state.pkl"))
    loop_b = run_files.load_pickle(str(b / "loop_state.pkl"))
    for key in ("observation", "train_envs", "eval_envs"):
        assert_nested_equal(loop_a[key], loop_b[key], key)
