"""MuJoCo Playground tasks (``env.env_type=mujoco_playground``): config validation (the task list, the Menagerie
checkout of the locomotion tasks, actions left to the task), the one-line error before Playground is imported, the
vectorised env (the step compiles once: the reset state has the step's structure), and a tiny training run of each
agent through the CLI (with an evaluation video at the start and the end where libOSMesa renders).

The config tests run everywhere. The env and training tests need the ``playground`` extra and compile MJX programs
on the CPU: about 2-4 minutes for the file on a 2-core machine (marked ``slow``).
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from agent_common.config import ConfigError, load_config
from agent_common.keys import config_to_dict
from simulators import playground
from tests.agent_test_utils import REPO

HAS_PLAYGROUND = importlib.util.find_spec("mujoco_playground") is not None
needs_playground = pytest.mark.skipif(not HAS_PLAYGROUND, reason="the playground extra is not installed "
                                      "(pip install -e \".[mjx,playground]\")")
TASK = "CartpoleBalance"  # obs 5, act 1


@pytest.fixture
def extra(monkeypatch):
    monkeypatch.setattr(playground, "missing", lambda: [])
    monkeypatch.delenv(playground.MENAGERIE_ENV, raising=False)


def _load(*overrides: str):
    return load_config(["env.env_type=mujoco_playground", "env.rescale_action=false", *overrides], "jax")


def test_dm_control_task_validates(extra):
    cfg = _load(f"env.env_name={TASK}")
    assert cfg.env.env_type == "mujoco_playground" and cfg.env.menagerie_path is None


def test_actions_follow_the_simulator_without_rescale_action(extra):
    """Without the recipe and without ``env.rescale_action``, a Playground run takes the simulator's convention
    (actions in [-1, 1] go to the task unchanged), as the recipe spells it out; the config records the value."""
    cfg = load_config(["env.env_type=mujoco_playground", f"env.env_name={TASK}", "save_path=run"], "jax")
    assert cfg.env.rescale_action is False
    assert config_to_dict(cfg) == config_to_dict(_load(f"env.env_name={TASK}", "save_path=run"))
    assert load_config([], "jax").env.rescale_action is True  # gymnasium's tasks are rescaled


@pytest.mark.parametrize(("overrides", "fragment"), [
    (["env.env_name=cheetah-run"], "Allowed values: AcrobotSwingup"),
    (["env.env_name=CheetahRun", "env.rescale_action=true"], "take actions in [-1, 1] themselves"),
    (["env.env_name=G1JoystickFlatTerrain"], "G1JoystickFlatTerrain loads its robot from a MuJoCo Menagerie "
                                              "checkout and none is set: git clone"),
])
def test_bad_values_are_config_errors(extra, overrides, fragment):
    with pytest.raises(ConfigError) as info:
        _load(*overrides)
    assert fragment in str(info.value)


def test_menagerie_path_must_hold_the_robot(extra, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="booster_t1"):
        _load("env.env_name=T1JoystickRoughTerrain", f"env.menagerie_path={tmp_path}")
    (tmp_path / "booster_t1").mkdir()
    assert _load("env.env_name=T1JoystickRoughTerrain", f"env.menagerie_path={tmp_path}").env.menagerie_path
    monkeypatch.setenv(playground.MENAGERIE_ENV, str(tmp_path))  # the environment variable when the key is null
    _load("env.env_name=T1JoystickFlatTerrain")


def test_missing_extra_is_named(monkeypatch):
    monkeypatch.setattr(playground, "missing", lambda: ["playground"])
    with pytest.raises(ConfigError, match=r"playground extra .*not installed: playground"):
        _load(f"env.env_name={TASK}")


def test_locomotion_without_menagerie_fails_before_importing_playground():
    code = ("import os, sys\n"
            "os.environ.pop('MUJOCO_MENAGERIE_PATH', None)\n"
            "from simulators.playground_env import load_playground_task\n"
            "try:\n    load_playground_task('G1JoystickRoughTerrain')\n"
            "except ValueError as exc:\n    print('ERR', exc)\n"
            "print('imported' if 'mujoco_playground' in sys.modules else 'not imported')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                         env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "not imported"
    assert lines[0].startswith("ERR G1JoystickRoughTerrain loads its robot from a MuJoCo Menagerie checkout")


@needs_playground
@pytest.mark.slow
def test_vector_env_steps_resets_and_compiles_once():
    import jax

    from simulators.playground_env import PlaygroundVecEnv

    env = PlaygroundVecEnv(TASK, 2, max_episode_steps=3)
    assert (env.observation_size, env.action_size) == (5, 1)
    state = env.init(0)
    truncated = []
    for _ in range(4):
        out = env.jit_step(state, jax.numpy.full((2, 1), 0.5))
        state = out.state
        assert out.obs.dtype == np.float32 and out.obs.shape == (2, 5)
        truncated.append(np.asarray(out.truncated).tolist())
    assert truncated == [[0, 0], [0, 0], [1, 1], [0, 0]]
    assert env.jit_step._cache_size() == 1  # the reset state and the stepped one have one structure
    with pytest.raises(ValueError, match="rescale_action"):
        PlaygroundVecEnv(TASK, 2, rescale_action=True)


CLI = ["env.env_type=mujoco_playground", f"env.env_name={TASK}", "env.rescale_action=false",
       "env.max_episode_steps=20", "num_train_envs=2", "num_eval_envs=2", "num_eval_episodes=2", "num_env_steps=40",
       "agent.buffer_min_length=16", "agent.sample_batch_size=8", "agent.buffer_max_length=64",
       "agent.critic_hidden_dim=8", "agent.actor_hidden_dim=8", "agent.critic_num_blocks=1",
       "agent.actor_num_blocks=1", "agent.critic_num_bins=11", "evaluation_per_interaction_step=10",
       "save_checkpoint_per_interaction_step=20", "progress_bar=false", "agent.device_type=cpu", "num_threads=1"]


@needs_playground
@pytest.mark.slow
@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_tiny_cli_run(framework, tmp_path, monkeypatch):
    from agent_common.logger import read_eval_csv

    if framework == "jax":
        from agent_jax.train import main

        backend = "jax"
    else:
        from agent_torch.train import main

        backend = "torch"
    run = tmp_path / "run"
    record = [] if ctypes.util.find_library("OSMesa") is None else ["record_video=true", "record_size=32"]
    if record:
        monkeypatch.setenv("MUJOCO_GL", "osmesa")
    argv = [a for o in [*CLI, *record, f"agent.categorical_target_backend={backend}", f"save_path={run}"]
            for a in ("--overrides", o)]
    assert main(argv) == 0
    returns = [v for _, v in read_eval_csv(str(run / "eval.csv"))]
    assert len(returns) >= 2 and all(np.isfinite(returns))
    assert (run / "checkpoints" / "step40").is_dir()
    if record:  # a video at the start and at the end: one 20-step evaluation episode each, 20 frames
        from agent_common.video import read_video_frames

        assert sorted(os.listdir(run / "videos")) == ["eval_step000000000.mp4", "eval_step000000040.mp4"]
        for name in os.listdir(run / "videos"):
            frames = read_video_frames(str(run / "videos" / name))
            assert frames.shape == (20, 32, 32, 3) and frames.std() > 0, name
