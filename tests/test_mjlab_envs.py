"""mjlab tasks (``env.env_type=mjlab``): config validation and the ``mjlab`` recipe (no mjlab needed), and, with the
``mjlab`` extra, the env's step semantics and the torch agent's CLI on Mjlab-Velocity-Flat-Unitree-G1 on the CPU
(MuJoCo Warp, ``device="cpu"``): a tiny run with evaluations and checkpoints, then a resume.

The tests that need mjlab are skipped when it is not installed; ``.ci/run-mjlab`` installs the extra and runs this
file. The first run on a machine compiles MuJoCo Warp's kernels (about a minute on the CPU, cached afterwards).
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from agent_common.config import ConfigError, build_config, load_config, parse_overrides
from agent_common.recipes import recipe_overrides
from simulators import SIMULATORS, device_env_types, mjlab, mjx

needs_mjlab = pytest.mark.skipif(
    importlib.util.find_spec("mjlab") is None,
    reason="the mjlab extra is not installed (pip install -c constraints/ci.txt -e \".[mjlab]\"; .ci/run-mjlab)",
)

TASK = "Mjlab-Velocity-Flat-Unitree-G1"
BASE = {"env.env_type": "mjlab", "env.env_name": TASK, "env.rescale_action": False, "num_train_envs": 4,
        "num_eval_envs": 2, "num_eval_episodes": 2, "num_env_steps": 48, "agent.buffer_min_length": 8,
        "agent.buffer_max_length": 64, "agent.sample_batch_size": 8}


@pytest.fixture
def extra(monkeypatch):
    monkeypatch.setattr(mjlab, "missing", lambda: [])


def test_task_list_and_vector_driver():
    assert SIMULATORS["mjlab"].TASKS == mjlab.TASKS
    assert "mjlab" in device_env_types()
    assert [t for t in mjlab.TASKS if t.startswith("Mjlab-Velocity-")] == [
        "Mjlab-Velocity-Flat-Unitree-G1", "Mjlab-Velocity-Rough-Unitree-G1", "Mjlab-Velocity-Flat-Unitree-Go1",
        "Mjlab-Velocity-Rough-Unitree-Go1"]


def test_recipe_is_upstreams_mjlab_recipe(extra):
    """scripts/run_mjlab.sh of upstream FlashSAC (n-step 3 included), but evaluation envs of its own."""
    cfg = build_config(parse_overrides(recipe_overrides("mjlab", "torch")), "torch")
    assert (cfg.env.env_type, cfg.env.env_name, cfg.env.rescale_action, cfg.env.device) == ("mjlab", TASK, False,
                                                                                             None)
    assert (cfg.num_train_envs, cfg.num_eval_envs, cfg.num_eval_episodes, cfg.num_env_steps) == (1024, 1024, 1024,
                                                                                                  50_000_896)
    assert (cfg.updates_per_interaction_step, cfg.agent.sample_batch_size, cfg.agent.buffer_max_length,
            cfg.agent.buffer_min_length, cfg.agent.buffer_device_type) == (2, 2048, 10_000_000, 100_000, "cuda")
    assert (cfg.gamma, cfg.n_step, cfg.agent.use_amp, cfg.agent.asymmetric_observation) == (0.99, 3, True, False)
    other = build_config(parse_overrides([*recipe_overrides("mjlab", "torch"),
                                          "env.env_name=Mjlab-Velocity-Rough-Unitree-Go1"]), "torch")
    assert other.env.env_name == "Mjlab-Velocity-Rough-Unitree-Go1"


def test_the_jax_agent_refuses_mjlab_in_one_line(extra):
    with pytest.raises(ConfigError, match=r"mjlab steps MuJoCo Warp from torch and is wired into the torch agent only "
                                          r"\(got the jax agent\); train it with python -m agent_torch.train"):
        build_config(BASE, "jax")


@pytest.mark.parametrize(("override", "message"), [
    ({"env.env_name": "Mjlab-Tracking-Flat-Unitree-G1"}, "invalid value 'Mjlab-Tracking-Flat-Unitree-G1' for "
                                                         "'env.env_name'. Allowed values: Mjlab-Velocity-Flat"),
    ({"env.rescale_action": True}, "set env.rescale_action=false"),
    ({"env.device": "gpu"}, "invalid value 'gpu' for 'env.device': must be null (the agent's device), cpu, cuda"),
    ({"record_video": True}, "'record_video'"),
])
def test_config_errors_name_the_key(override, message, extra):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        build_config({**BASE, **override}, "torch")


def test_env_device_belongs_to_mjlab():
    with pytest.raises(ConfigError, match="invalid value 'cpu' for 'env.device': is the mjlab simulator's device; "
                                          "leave it null with env.env_type=mujoco"):
        build_config({"env.device": "cpu"}, "torch")


def test_extra_pins_the_stack_and_its_ci_script_installs_it():
    """The mjlab extra's MuJoCo Warp matches the project's mujoco pin; .ci/run-mjlab installs the extra with CI's
    constraints (the CPU torch) and runs this file."""
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    repo = Path(__file__).resolve().parent.parent
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    pins = {r.name: str(r.specifier) for r in map(Requirement, project["dependencies"] +
                                                  project["optional-dependencies"]["mjlab"])}
    assert pins["mjlab"] == "==1.6.0" and pins["mujoco-warp"] == pins["mujoco"] == "==3.11.0"
    script = (repo / ".ci" / "run-mjlab").read_text()
    assert 'pip install -q -c constraints/ci.txt -e ".[dev,mjlab]"' in script
    assert script.index("pip install") < script.index("pytest -q tests/test_mjlab_envs.py")
    assert "mjlab" not in (repo / ".ci" / "run").read_text()  # not part of CI's 15 minutes


def test_missing_extra_is_one_line_with_the_install_line(monkeypatch):
    monkeypatch.setattr(mjlab, "missing", lambda: ["mjlab"])
    with pytest.raises(ConfigError) as err:
        load_config([f"{k}={v}" for k, v in BASE.items()], "torch")
    assert str(err.value) == ("invalid value 'mjlab' for 'env.env_type': mjlab's tasks need the mjlab extra (pip "
                              "install -c constraints/ci.txt -e \".[mjlab]\"); not installed: mjlab")


def test_the_torch_cli_sets_no_xla_flags_for_mjlab(monkeypatch, extra):
    """mjlab steps no JAX: the torch CLI leaves XLA_FLAGS alone (it sets them for MJX)."""
    import sys

    from agent_torch.train import configure_mjx_xla

    monkeypatch.setattr(mjx, "missing", lambda: [])
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    configure_mjx_xla(build_config(BASE, "torch"))
    assert "XLA_FLAGS" not in os.environ
    configure_mjx_xla(build_config({"env.env_type": "mjx", "env.env_name": "halfcheetah"}, "torch"))
    assert "--xla_gpu_enable_command_buffer" in os.environ["XLA_FLAGS"]


@needs_mjlab
def test_registered_in_the_installed_mjlab():
    import mjlab.tasks  # noqa: F401
    from mjlab.tasks.registry import list_tasks

    assert set(mjlab.TASKS) <= set(list_tasks())


@needs_mjlab
def test_step_returns_the_terminal_observation_and_resets():
    """3-step episodes of 2 envs: float32 (E, O) tensors of the critic group, truncation at the limit with the true
    terminal observation as ``final_obs`` and a fresh episode's as ``obs``; the state names its envs."""
    import torch

    from simulators.mjlab_env import MjlabVecEnv

    env = MjlabVecEnv(TASK, 2, 0, "cpu", torch.device("cpu"), max_episode_steps=3)
    try:
        assert (env.group, env.observation_size, env.action_size, env.max_episode_steps) == ("critic", 111, 29, 3)
        obs = env.observation()
        assert obs.shape == (2, 111) and obs.dtype == torch.float32
        action = torch.zeros(2, 29)
        for t in range(3):
            out = env.step(action)
            for value in (out.obs, out.final_obs):
                assert value.shape == (2, 111) and value.dtype == torch.float32 and torch.isfinite(value).all()
            for value in (out.reward, out.terminated, out.truncated):
                assert value.shape == (2,) and value.dtype == torch.float32
            ended = bool(out.truncated.all())
            assert ended is (t == 2) and not bool(out.terminated.any())  # standing still at zero action
            assert torch.equal(out.obs, out.final_obs) is not ended
        assert torch.equal(env.observation(), out.obs)
        state = env.state_dict()
        env.load_state_dict(state)  # starts new episodes
        with pytest.raises(ValueError, match="env state: expected"):
            env.load_state_dict({**state, "num_envs": 3})
    finally:
        env.close()


@needs_mjlab
def test_torch_cli_trains_evaluates_and_resumes(tmp_path, capsys):
    """``python -m agent_torch.train`` on Mjlab-Velocity-Flat-Unitree-G1 on the CPU: 4 envs, 12 interaction steps with
    updates from the third, evaluations and checkpoints every 6; then a resume to 18 steps (new episodes, said once)."""
    import torch

    from agent_common.logger import read_eval_csv
    from agent_torch.train import main

    threads = torch.get_num_threads()
    run = tmp_path / "run"
    values = {**BASE, "env.max_episode_steps": 5, "agent.actor_hidden_dim": 8, "agent.critic_hidden_dim": 8,
              "agent.actor_num_blocks": 1, "agent.critic_num_blocks": 1, "agent.categorical_target_backend": "torch",
              "agent.device_type": "cpu", "num_threads": 1, "seed": 3, "agent.learning_rate_decay_step": 100,
              "evaluation_per_interaction_step": 6, "logging_per_interaction_step": 3,
              "save_checkpoint_per_interaction_step": 6, "progress_bar": False, "save_path": run}
    argv = [arg for key, value in values.items() for arg in ("--overrides", f"{key}={value}")]
    try:
        assert main(argv) == 0
        out = capsys.readouterr()
        assert "[completed] env_step=48" in out.out
        assert "envs: mjlab (cpu), its torch tensors read in place" in out.err
        assert [step for step, _ in read_eval_csv(str(run / "eval.csv"))] == [0, 24, 48]
        assert (run / "checkpoints" / "step48" / "replay_buffer.pkl").is_file()
        assert main([*argv, "--overrides", "num_env_steps=72", "--overrides", f"agent_load_path={run}"]) == 0
        out = capsys.readouterr()
        assert "resumed from" in out.err and "[completed] env_step=72" in out.out
        assert out.err.count("the simulator state is not saved in checkpoints") == 1
        assert [step for step, _ in read_eval_csv(str(run / "eval.csv"))] == [0, 24, 48, 72]
    finally:
        torch.set_num_threads(threads)
