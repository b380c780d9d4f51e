"""Named recipes (``agent_common.recipes``): each is a valid config for both agents, ``--overrides`` win over it, the
config records it, an unknown name exits 2 naming the known ones, ``--help`` lists them, and the MJX module's
recipe is the ``mjx`` recipe. Nothing here trains or imports a framework."""

from __future__ import annotations

import pytest

from agent_common.config import ConfigError, build_config, config_to_yaml, load_config, parse_args
from agent_common.keys import config_to_dict
from agent_common.recipes import GPU_RECIPE, RECIPES, TORCH_AMP, gpu_recipe, recipe_overrides
from simulators import mjlab, mjx, myosuite


@pytest.fixture
def extra_installed(monkeypatch):
    monkeypatch.setattr(mjx, "missing", lambda: [])
    monkeypatch.setattr(mjlab, "missing", lambda: [])
    monkeypatch.setattr(myosuite, "missing", lambda: [])  # the myosuite recipe validates without the extra


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_is_a_valid_config_and_recorded(name, framework, extra_installed):
    if name == "mjlab" and framework == "jax":  # mjlab is torch-native: the JAX agent refuses it before any work
        with pytest.raises(ConfigError, match="wired into the torch agent only"):
            load_config([f"recipe={name}", "save_path=run"], framework)
        return
    cfg = load_config([f"recipe={name}", "save_path=run"], framework)  # a fixed path: the default has the time
    assert cfg.recipe == name
    assert f"recipe: {name}\n" in config_to_yaml(cfg)  # the run's config.yaml
    spelled_out = load_config([*recipe_overrides(name, framework), "save_path=run"], framework)  # the same, unnamed
    assert spelled_out.recipe is None
    assert {**config_to_dict(cfg), "recipe": None} == config_to_dict(spelled_out)
    defaults = config_to_dict(build_config({"save_path": "run"}, framework))
    assert (config_to_dict(spelled_out) == defaults) is (name == "gym")  # gym is the defaults


def test_smoke_is_the_short_cpu_run():
    cfg = parse_args(["--recipe", "smoke"], "torch")
    assert (cfg.env.env_name, cfg.num_env_steps, cfg.agent.buffer_min_length, cfg.agent.sample_batch_size) == (
        "Hopper-v4", 10_000, 2_000, 128)
    assert (cfg.agent.critic_hidden_dim, cfg.agent.actor_hidden_dim, cfg.num_eval_episodes, cfg.num_threads) == (
        128, 64, 5, 1)


def test_gym_is_upstreams_gymnasium_recipe_and_the_defaults():
    cfg = parse_args(["--recipe", "gym", "--overrides", "save_path=run"], "jax")
    assert (cfg.env.env_type, cfg.env.env_name, cfg.num_env_steps, cfg.agent.sample_batch_size) == (
        "mujoco", "HalfCheetah-v4", 1_000_000, 512)
    defaults = build_config({"save_path": "run"}, "jax")
    assert {**config_to_dict(cfg), "recipe": None} == {**config_to_dict(defaults)}


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_mjx_recipe_is_the_gpu_recipe(framework, extra_installed):
    amp = [TORCH_AMP] if framework == "torch" else []
    assert recipe_overrides("mjx", framework) == [GPU_RECIPE[0], "env.env_name=halfcheetah", *GPU_RECIPE[1:], *amp]
    assert gpu_recipe("ant", framework) == [GPU_RECIPE[0], "env.env_name=ant", *GPU_RECIPE[1:], *amp]
    # one definition: the simulator module declares no recipe of its own (agent_common.recipes holds them all)
    assert not hasattr(mjx, "gpu_recipe") and not hasattr(mjx, "GPU_RECIPE")
    cfg = parse_args(["--recipe", "mjx"], framework)
    assert (cfg.env.env_type, cfg.num_train_envs, cfg.agent.sample_batch_size, cfg.agent.buffer_device_type) == (
        "mjx", 1024, 2048, "cuda")
    assert cfg.agent.use_amp is (framework == "torch")


def test_overrides_apply_on_top_of_the_recipe():
    cfg = parse_args(["--overrides", "seed=3", "--recipe", "smoke", "--overrides", "num_env_steps=4000",
                      "--overrides", "env.env_name=Walker2d-v4"], "torch")
    assert (cfg.recipe, cfg.seed, cfg.num_env_steps, cfg.env.env_name) == ("smoke", 3, 4000, "Walker2d-v4")
    assert cfg.agent.sample_batch_size == 128  # the rest of the recipe stays
    assert load_config(["recipe=smoke", "agent.sample_batch_size=64"]).agent.sample_batch_size == 64


@pytest.mark.parametrize("module", ["agent_torch.train", "agent_jax.train"])
def test_unknown_recipe_exits_2_naming_it_and_the_known_ones(module, capsys, tmp_path):
    import importlib

    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as exc:
        main(["--recipe", "smok", "--overrides", f"save_path={tmp_path / 'run'}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown recipe 'smok'; known recipes: smoke, gym, mjx" in err
    assert not (tmp_path / "run").exists()  # before any work
    with pytest.raises(ConfigError, match="unknown recipe 'bogus'; known recipes: smoke, gym, mjx"):
        build_config({"recipe": "bogus"})
    with pytest.raises(ValueError, match="framework: expected 'torch' or 'jax'"):
        recipe_overrides("smoke", "tf")


def test_the_mjx_cli_path_takes_the_recipe(monkeypatch, capsys, tmp_path):
    """``--recipe mjx`` selects the MJX environments in the CLI (here: their missing extra exits 2 before any work)."""
    from agent_torch.train import main

    monkeypatch.setattr(mjx, "missing", lambda: ["brax", "mujoco-mjx"])
    with pytest.raises(SystemExit) as exc:
        main(["--recipe", "mjx", "--overrides", f"save_path={tmp_path / 'run'}"])
    assert exc.value.code == 2
    assert "'env.env_type': the MJX environments need the mjx extra" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["agent_torch.train", "agent_jax.train"])
def test_help_lists_the_recipes(module, capsys):
    import importlib

    with pytest.raises(SystemExit) as exc:
        importlib.import_module(module).main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--recipe NAME" in out
    for name, recipe in RECIPES.items():
        assert f"  {name}  " in out and recipe.description in out
