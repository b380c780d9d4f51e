"""``env.env_type=mjx`` in the config schema and the agents' CLIs: task names, the env count against the buffer and
the batch, the missing extra, the training program's limits, the refusal of the gymnasium loop, and the documented GPU
recipe. Nothing here imports JAX or Brax: the extra's presence is faked where a check needs it either way."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from agent_common.config import ConfigError, build_config, parse_overrides
from agent_common.recipes import GPU_RECIPE, TORCH_AMP, gpu_recipe
from agent_common.validation import check_training_run
from simulators import mjx
from simulators.mjx import DETERMINISTIC_FLAG, DEVICE_LOOPS_FLAG
from simulators.mjx import TASKS as MJX_TASKS
from simulators.mjx import xla_flags as mjx_xla_flags

REPO = Path(__file__).resolve().parent.parent
MJX = {"env.env_type": "mjx", "env.env_name": "halfcheetah"}


@pytest.fixture
def extra_installed(monkeypatch):
    monkeypatch.setattr(mjx, "missing", lambda: [])


def test_mjx_tasks_and_names(extra_installed):
    for task in MJX_TASKS:
        cfg = build_config({**MJX, "env.env_name": task, "num_train_envs": 16})
        assert (cfg.env.env_type, cfg.env.env_name, cfg.env.num_train_envs) == ("mjx", task, 16)
    with pytest.raises(ConfigError, match=r"'env.env_name'. Allowed values: halfcheetah, hopper, walker2d, ant, "
                                          r"humanoid \(env.env_type mjx\)"):
        build_config({**MJX, "env.env_name": "HalfCheetah-v4"})
    with pytest.raises(ConfigError, match=r"'env.env_name'. Allowed values: HalfCheetah-v4.*\(env.env_type mujoco\)"):
        build_config({"env.env_name": "hopper"})
    with pytest.raises(ConfigError, match=r"invalid value 'isaac' for 'env.env_type'. Allowed values: mujoco, mjx"):
        build_config({"env.env_type": "isaac"})


def test_env_count_checks(extra_installed):
    with pytest.raises(ConfigError, match=r"invalid value 0 for 'num_train_envs': must be an integer >= 1"):
        build_config({**MJX, "num_train_envs": 0})
    with pytest.raises(ConfigError, match=r"invalid value 4096 for 'num_train_envs': must be <= "
                                          r"agent.buffer_max_length=2048"):
        build_config({**MJX, "num_train_envs": 4096, "agent.buffer_max_length": 2048,
                      "agent.buffer_min_length": 1024, "agent.sample_batch_size": 512})
    with pytest.raises(ConfigError, match=r"invalid value 1000 for 'num_env_steps': must be >= num_train_envs=1024"):
        build_config({**MJX, "num_train_envs": 1024, "num_env_steps": 1000, "agent.buffer_min_length": 1000})
    # updates start at 4 * 1000 = 4000 rows (buffer_min_length 3500 in whole steps of 1000 envs): 4000 fit, 4001 not
    ok = {**MJX, "num_train_envs": 1000, "agent.buffer_min_length": 3500}
    assert build_config({**ok, "agent.sample_batch_size": 4000}).agent.sample_batch_size == 4000
    with pytest.raises(ConfigError, match=r"invalid value 4001 for 'agent.sample_batch_size': the env count cannot "
                                          r"fill the first batch: updates start when the buffer holds 4000 rows"):
        build_config({**ok, "agent.sample_batch_size": 4001})
    # the gymnasium path keeps its rules (a batch above buffer_min_length is allowed there)
    assert build_config({"agent.buffer_min_length": 100, "agent.sample_batch_size": 512}).env.env_type == "mujoco"


def test_missing_extra_names_the_key(monkeypatch):
    import importlib.metadata
    import importlib.util

    def no_mjx(name):
        if name == "mujoco-mjx":
            raise importlib.metadata.PackageNotFoundError(name)
        return "1.0"

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "brax" else object())
    monkeypatch.setattr(importlib.metadata, "version", no_mjx)
    assert mjx.missing() == ["brax", "mujoco-mjx"]
    with pytest.raises(ConfigError, match=r"invalid value 'mjx' for 'env.env_type': the MJX environments need the "
                                          r"mjx extra \(pip install -e \"\.\[mjx\]\"\); not installed: brax, "
                                          r"mujoco-mjx"):
        build_config(MJX)
    build_config({})  # the gymnasium path never probes


def test_training_run_refuses_mjx_until_wired(extra_installed):
    cfg = build_config(MJX)
    for framework in (None, *sorted({"torch", "jax"} - set(mjx.FRAMEWORKS))):
        with pytest.raises(ConfigError, match="env.env_type='mjx' is not wired into this agent yet"):
            check_training_run(cfg, framework)
    for framework in mjx.FRAMEWORKS:
        check_training_run(cfg, framework)


def test_training_program_checks(extra_installed):
    """The MJX training program runs the same updates every step, on one device; n-step rows are allowed."""
    with pytest.raises(ConfigError, match=r"invalid value 1.5 for 'updates_per_interaction_step': must be a whole "
                                          r"number with env.env_type=mjx"):
        build_config({**MJX, "updates_per_interaction_step": 1.5})
    assert build_config({**MJX, "n_step": 3}).n_step == 3  # n-step rows from the device window
    with pytest.raises(ConfigError, match=r"invalid value 2 for 'num_devices': must be 1 with env.env_type=mjx"):
        build_config({**MJX, "num_devices": 2}, "jax")
    with pytest.raises(ConfigError, match=r"invalid value 0 for 'interaction_steps_per_call': must be null or an "
                                          r"integer >= 1"):
        build_config({**MJX, "interaction_steps_per_call": 0})
    assert build_config({**MJX, "updates_per_interaction_step": 2}).updates_per_interaction_step == 2.0
    assert build_config({"updates_per_interaction_step": 1.5, "n_step": 3}).n_step == 3  # gymnasium: unchanged


def test_cli_without_the_extra_exits_2(monkeypatch, tmp_path, capsys):
    from agent_torch.train import main

    monkeypatch.setattr(mjx, "missing", lambda: ["brax", "mujoco-mjx"])
    with pytest.raises(SystemExit) as exc:
        main(["--overrides", "env.env_type=mjx", "--overrides", "env.env_name=ant", "--overrides",
              f"save_path={tmp_path / 'run'}"])
    assert exc.value.code == 2
    assert "'env.env_type': the MJX environments need the mjx extra" in capsys.readouterr().err


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_gpu_recipe_is_a_valid_config(framework, extra_installed):
    cfg = build_config(parse_overrides(gpu_recipe("humanoid", framework)), framework)
    assert (cfg.env.env_type, cfg.env.env_name, cfg.num_train_envs) == ("mjx", "humanoid", 1024)
    assert (cfg.agent.sample_batch_size, cfg.agent.buffer_device_type) == (2048, "cuda")
    assert cfg.agent.use_amp is (framework == "torch")
    with pytest.raises(ValueError, match="framework: expected 'torch' or 'jax'"):
        gpu_recipe("ant", "tf")


def test_docs_show_the_gpu_recipe():
    """docs/flashsac.md's MJX section lists exactly ``GPU_RECIPE`` (and the torch agent's AMP line)."""
    text = (REPO / "docs" / "flashsac.md").read_text()
    block = text.split("<!-- mjx-recipe:begin -->", 1)[1].split("<!-- mjx-recipe:end -->", 1)[0]
    shown = re.findall(r"--overrides (\S+)", block)
    assert shown == [GPU_RECIPE[0], "env.env_name=halfcheetah", *GPU_RECIPE[1:], TORCH_AMP]


def test_mjx_xla_flags():
    """MJX processes get the device-loop flag (and deterministic ops on request), once, unless the user's XLA_FLAGS
    already choose the command-buffer types."""
    assert mjx_xla_flags("") == DEVICE_LOOPS_FLAG
    assert mjx_xla_flags("--a=1", deterministic=True) == f"--a=1 {DEVICE_LOOPS_FLAG} {DETERMINISTIC_FLAG}"
    assert mjx_xla_flags("--xla_gpu_enable_command_buffer=") == "--xla_gpu_enable_command_buffer="
    assert mjx_xla_flags(mjx_xla_flags("", True), True) == f"{DEVICE_LOOPS_FLAG} {DETERMINISTIC_FLAG}"


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("env", [MJX, {}])
def test_cli_xla_flags(framework, env, monkeypatch, extra_installed):
    """Both CLIs set the MJX flags before JAX starts, and only for MJX runs."""
    import agent_jax.train
    import agent_torch.train

    monkeypatch.setenv("XLA_FLAGS", "--a=1")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    cfg = build_config({**env, "deterministic": True}, framework)
    if framework == "jax":
        agent_jax.train.configure_xla(cfg)
    else:
        monkeypatch.delitem(sys.modules, "jax", raising=False)  # as in a fresh CLI process (restored after)
        agent_torch.train.configure_mjx_xla(cfg)
    flags = os.environ["XLA_FLAGS"].split()
    assert flags[0] == "--a=1" and (DEVICE_LOOPS_FLAG in flags) == bool(env)
    assert (DETERMINISTIC_FLAG in flags) == (bool(env) or framework == "jax")
