"""MyoSuite tasks (``env.env_type=myosuite``): upstream's task names, the env as upstream builds it (float32
observations, the task's own episode limit, ``success`` from MyoSuite's ``solved``), exact snapshots of the tasks
that rewrite their model at every reset, config validation, a tiny training run of each agent with its
checkpoint resumed exactly, and evaluation videos. The env and training tests need the myosuite extra (skipped
without it)."""

from __future__ import annotations

import ctypes.util
import importlib.util
import os

import numpy as np
import pytest

from agent_common.config import ConfigError, load_config
from simulators import SIMULATORS
from simulators import myosuite as myosuite_sim

needs_myosuite = pytest.mark.skipif(importlib.util.find_spec("myosuite") is None,
                                    reason="the myosuite extra is not installed (pip install -e \".[myosuite]\")")
TASK = "myo-pen-twirl-hard"  # obs 83, act 39, 50-step episodes; its reset turns the target pen (MjModel.body_quat)


@needs_myosuite
def test_task_list_is_upstreams_and_registered():
    import gymnasium as gym
    import myosuite  # noqa: F401

    assert SIMULATORS["myosuite"].TASKS == tuple(myosuite_sim.TASK_IDS)
    assert len(myosuite_sim.TASK_IDS) == 10 and all(name.startswith("myo-") for name in myosuite_sim.TASK_IDS)
    assert all(env_id in gym.registry for env_id in myosuite_sim.TASK_IDS.values())


@needs_myosuite
def test_env_is_float32_reports_success_and_keeps_the_task_limit():
    from agent_common.envs import make_vec_env, step_env

    envs = make_vec_env(TASK, 1, seed=0, env_type="myosuite")
    try:
        obs, _ = envs.reset(seed=0)
        assert obs.dtype == np.float32 and obs.shape == (1, 83)
        assert envs.single_observation_space.dtype == np.float32 and envs.single_action_space.shape == (39,)
        assert float(envs.single_action_space.low.min()) == -1.0 and float(envs.single_action_space.high.max()) == 1.0
        ends = []
        for t in range(1, 51):
            result = step_env(envs, np.zeros((1, 39), np.float32))
            assert result.next_observation.dtype == np.float32
            if result.truncated[0] or result.terminated[0]:  # the info is the reset's, with the step's as final_info
                assert result.info["final_info"]["success"].dtype == bool
                ends.append((t, result.truncated[0]))
                break
            assert result.info["success"].dtype == bool and "obs_dict" not in result.info
        assert ends and ends[0][0] <= 50 and bool(ends[0][1]) == (ends[0][0] == 50)  # the 50-step limit truncates
    finally:
        envs.close()


@needs_myosuite
@pytest.mark.parametrize("task", [name for name in myosuite_sim.TASK_IDS if name.endswith("-hard")])
def test_snapshot_restores_the_trajectory_exactly(task):
    """Snapshot mid-episode, play on across the next reset (a new random target / object), restore, replay."""
    from agent_common.envs import get_env_states, make_vec_env, set_env_states, step_env

    envs = make_vec_env(task, 1, seed=3, max_episode_steps=12, env_type="myosuite")
    try:
        envs.reset(seed=3)
        rng = np.random.default_rng(0)
        act = envs.single_action_space.shape[0]
        for _ in range(8):
            step_env(envs, rng.uniform(-1, 1, (1, act)).astype(np.float32))
        states = get_env_states(envs)
        actions = rng.uniform(-1, 1, (16, 1, act)).astype(np.float32)
        first = [step_env(envs, a) for a in actions]
        set_env_states(envs, states)
        again = [step_env(envs, a) for a in actions]
        for x, y in zip(first, again, strict=True):
            np.testing.assert_array_equal(x.next_observation, y.next_observation)
            np.testing.assert_array_equal(x.reset_observation, y.reset_observation)
            np.testing.assert_array_equal(x.reward, y.reward)
            np.testing.assert_array_equal(x.info.get("success", []), y.info.get("success", []))
        assert any(x.truncated[0] or x.terminated[0] for x in first)  # a reset happened inside the window
    finally:
        envs.close()


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("env.env_name=HalfCheetah-v4", "Allowed values: myo-reach, myo-reach-hard"),
        ("env.env_name=myoHandReachFixed-v0", "(env.env_type myosuite)"),
    ],
)
def test_config_rejects_names_of_other_suites(override, fragment, monkeypatch):
    monkeypatch.setattr(myosuite_sim, "missing", lambda: [])
    with pytest.raises(ConfigError, match="env.env_name") as info:
        load_config(["env.env_type=myosuite", override], "torch")
    assert fragment in str(info.value)


def test_config_without_the_extra_names_it(monkeypatch):
    monkeypatch.setattr(myosuite_sim, "missing", lambda: ["myosuite"])
    with pytest.raises(ConfigError, match=r"myosuite extra \(pip install -e \"\.\[myosuite\]\"\); not installed: "
                                          r"myosuite"):
        load_config(["env.env_type=myosuite", f"env.env_name={TASK}"], "jax")




TINY = [
    "env.env_type=myosuite",
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


def _tiny_run(framework: str, save_path):
    from agent_common.driver import train
    from agent_common.host import host_trainer

    if framework == "torch":
        from agent_torch.agent import make_agent
    else:
        from agent_jax.agent import make_agent  # type: ignore[assignment]
    overrides = [*TINY, f"agent.categorical_target_backend={framework}"]
    result = train(load_config([*overrides, f"save_path={save_path}"], framework), host_trainer(make_agent))
    assert result.status == "completed" and result.env_step == 60
    evaluations = [m for _, m in result.evaluations]
    assert len(evaluations) == 3 and all(np.isfinite(m["avg_return"]) for m in evaluations)
    assert all(m["avg_success_once"] in (0.0, 1.0) for m in evaluations)
    return result, make_agent


@needs_myosuite
def test_tiny_jax_run(tmp_path):
    """The JAX agent: 60 env steps with updates from step 15, evaluated every 30 steps (its resume is the torch
    agent's gymnasium loop and env snapshots, tested below; a second JAX run would only compile again)."""
    _tiny_run("jax", tmp_path / "run")
    assert (tmp_path / "run" / "checkpoints" / "step60").is_dir()


@needs_myosuite
def test_tiny_torch_run_resumes_exactly(tmp_path):
    """The torch agent, as the JAX one; the run resumed from its step-30 checkpoint ends with the same evaluations
    and the same replay rows (the MyoSuite env state travels in the checkpoint)."""
    from agent_common.driver import train
    from agent_common.host import host_trainer
    from agent_common.runs import files as run_files
    from tests.agent_test_utils import assert_nested_equal

    framework = "torch"
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    result, make_agent = _tiny_run(framework, straight)
    cfg = load_config([f"agent_load_path={straight / 'checkpoints' / 'step30'}", f"save_path={resumed}"], framework)
    assert cfg.env.env_type == "myosuite" and cfg.env.env_name == TASK
    again = train(cfg, host_trainer(make_agent))
    assert again.env_step == 60 and again.evaluations == result.evaluations[-len(again.evaluations):]
    a, b = straight / "checkpoints" / "step60", resumed / "checkpoints" / "step60"
    loop_a = run_files.load_pickle(str(a / "loop_state.pkl"))
    loop_b = run_files.load_pickle(str(b / "loop_state.pkl"))
    for key in ("observation", "train_envs", "eval_envs"):
        assert_nested_equal(loop_a[key], loop_b[key], key)


@needs_myosuite
@pytest.mark.skipif(ctypes.util.find_library("OSMesa") is None,
                    reason="needs libOSMesa (apt-get install libosmesa6) for MUJOCO_GL=osmesa")
def test_tiny_run_records_evaluation_videos(tmp_path, monkeypatch):
    """record_video=true films MyoSuite's evaluation episodes from the model's first camera: videos at steps 0 and
    30 of a 30-step torch run, each one 20-step episode (20 frames, not blank)."""
    from agent_common.driver import train
    from agent_common.host import host_trainer
    from agent_common.video import read_video_frames
    from agent_torch.agent import make_agent

    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    record = ["record_video=true", "record_size=32", "recording_per_interaction_step=30", "num_env_steps=30",
              "agent.categorical_target_backend=torch", f"save_path={tmp_path}"]
    assert train(load_config([*TINY, *record], "torch"), host_trainer(make_agent)).status == "completed"
    names = sorted(os.listdir(tmp_path / "videos"))
    assert names == ["eval_step000000000.mp4", "eval_step000000030.mp4"]
    for name in names:
        frames = read_video_frames(str(tmp_path / "videos" / name))
        assert frames.shape == (20, 32, 32, 3) and frames.std() > 0, name
