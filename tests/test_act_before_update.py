"""``agent.act_before_update``: every policy action is computed with the parameters as they were before the preceding
step's update, in both agents and on both replay paths (host rows: ``act_async`` then ``update``; device rows:
``act_async`` then ``step``); a run with it resumes exactly, its config keeps it, and it is refused where it does not
apply. Tiny CPU runs (40 env steps, updates from step 15)."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch

from agent_common import host as host_module
from agent_common.config import ConfigError, load_config
from agent_common.driver import train
from agent_common.host import host_trainer
from agent_common.noise import ZetaNoise
from agent_common.runs import files as run_files
from agent_common.seeding import NOISE_STREAM

TINY = [
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
    "num_env_steps=40",
]

# (framework, replay path): the host rows go through act_async + update, the device rows through act_async + step
CASES = [("torch", "agent.buffer_device_type=cpu"), ("torch", "agent.buffer_device_type=cuda"),
         ("jax", "agent.buffer_device_type=cpu"), ("jax", "agent.buffer_device_type=auto")]


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _config(framework: str, *overrides: str):
    backend = "torch" if framework == "torch" else "jax"
    extra = ["agent.device_type=cpu"] if framework == "torch" else []
    return load_config([*TINY, f"agent.categorical_target_backend={backend}", *extra, *overrides], framework)


def _make_agent(framework: str):
    if framework == "torch":
        from agent_torch.agent import make_agent
    else:
        from agent_jax.agent import make_agent
    return make_agent


def _recorded_run(framework: str, path: str, tmp_path, monkeypatch, act_before_update: bool):
    """Trains a tiny run and returns (the actions the envs were stepped with, the reference actions): before each
    update call, the reference is ``agent.act`` on the next observation with the next noise of a copy of the loop's
    noise stream, i.e. the action computed with the parameters as they are before that update."""
    cfg = _config(framework, path, "num_eval_episodes=0", f"agent.act_before_update={str(act_before_update).lower()}",
                  f"save_path={tmp_path / 'run'}")
    executed: list[np.ndarray] = []
    references: list[np.ndarray] = []
    last = {}
    step_env = host_module.step_env

    def recording_step_env(envs, action):
        executed.append(np.array(action, copy=True))
        result = step_env(envs, action)
        last["observation"] = np.array(result.reset_observation, copy=True)
        return result

    monkeypatch.setattr(host_module, "step_env", recording_step_env)
    make_agent = _make_agent(framework)

    def factory(config, observation_space, action_space):
        agent = make_agent(config, observation_space, action_space)
        noise = ZetaNoise(int(config.num_train_envs), int(action_space.shape[0]), config.agent.actor_noise_zeta_mu,
                          config.agent.actor_noise_zeta_max, seed=[config.seed, NOISE_STREAM])
        update, step = agent.update, agent.step

        def reference() -> None:
            references.append(agent.act(last["observation"], noise.sample()))

        def update_recorded(batch):
            reference()
            return update(batch)

        def step_recorded(observation, noise_, num_updates, reward_scale):
            if num_updates:
                reference()
            return step(observation, noise_, num_updates, reward_scale)

        agent.update, agent.step = update_recorded, step_recorded
        return agent

    result = train(cfg, host_trainer(factory))
    assert result.status == "completed" and result.env_step == 40
    return executed, references


@pytest.mark.parametrize("framework,path", CASES)
def test_each_action_comes_from_the_policy_before_the_preceding_update(framework, path, tmp_path, monkeypatch):
    executed, references = _recorded_run(framework, path, tmp_path, monkeypatch, act_before_update=True)
    assert len(executed) == 40 and len(references) == 40 - 15 + 1  # one update per step from step 15 (1-based)
    policy_actions = executed[15:]  # steps 16..40: the action after each of the first 25 updates' steps
    assert len(policy_actions) == len(references) - 1  # the last step's pending action is never stepped
    for step, (action, reference) in enumerate(zip(policy_actions, references, strict=False), start=16):
        np.testing.assert_array_equal(action, reference, err_msg=f"env step {step}", strict=True)


def test_by_default_the_actions_come_from_the_updated_policy(tmp_path, monkeypatch):
    """The recording above tells the two orders apart: without the key, an action after an update that trained the
    actor (every ``actor_update_period`` = 2nd update, from the first) is not the one computed before that update;
    after a critic-only update it is the same."""
    executed, references = _recorded_run("torch", "agent.buffer_device_type=cpu", tmp_path, monkeypatch,
                                         act_before_update=False)
    differ = [not np.array_equal(a, r) for a, r in zip(executed[15:], references, strict=False)]
    assert len(differ) == 25 and all(differ[0::2]) and not any(differ[1::2])


@pytest.mark.parametrize("framework,path", [CASES[0], CASES[3]])
def test_a_resumed_run_continues_exactly_and_keeps_the_key(framework, path, tmp_path):
    """40 steps straight, and the same run resumed from its step-20 checkpoint (taken with an action pending), end
    with the same agent, loop state (the pending action is the checkpoint's ``next_action``) and replay rows."""
    from agent_common.runs.files import read_config_file
    from tests.agent_test_utils import assert_nested_equal

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    factory = _make_agent(framework)
    overrides = [path, "num_eval_episodes=1", "evaluation_per_interaction_step=20",
                 "save_checkpoint_per_interaction_step=20", "keep_checkpoints=4", "agent.act_before_update=true"]
    result = train(_config(framework, *overrides, f"save_path={straight}"), host_trainer(factory))
    assert result.status == "completed"
    assert read_config_file(str(straight / "config.yaml"))["agent.act_before_update"] is True
    step20 = straight / "checkpoints" / "step20"
    assert run_files.load_pickle(str(step20 / "loop_state.pkl"))["next_action"] is not None
    cfg = load_config([f"agent_load_path={step20}", f"save_path={resumed}"], framework)
    assert cfg.agent.act_before_update is True
    again = train(cfg, host_trainer(factory))
    assert again.env_step == 40 and again.evaluations == result.evaluations[-len(again.evaluations):]
    a, b = straight / "checkpoints" / "step40", resumed / "checkpoints" / "step40"
    if framework == "torch":
        load = functools.partial(torch.load, weights_only=False)
        names = ["actor.pt", "agent_state.pt", "critic.pt", "target_critic.pt", "temperature.pt"]
    else:
        load = run_files.load_pickle
        names = ["actor.pkl", "agent_state.pkl", "critic.pkl", "target_critic.pkl", "temperature.pkl"]
    for name in names:
        state_a, state_b = load(str(a / "agent" / name)), load(str(b / "agent" / name))
        if name.startswith("agent_state"):
            state_a.pop("cuda_rng_state", None), state_b.pop("cuda_rng_state", None)
        assert_nested_equal(state_a, state_b, name)
    loop_a = run_files.load_pickle(str(a / "loop_state.pkl"))
    loop_b = run_files.load_pickle(str(b / "loop_state.pkl"))
    for key in ("noise", "reward_normalizer", "observation", "num_updates", "meter", "next_action", "buffer"):
        assert_nested_equal(loop_a[key], loop_b[key], key)
    assert loop_a["next_action"] is not None
    assert_nested_equal(run_files.load_pickle(str(a / "replay_buffer.pkl")),
                        run_files.load_pickle(str(b / "replay_buffer.pkl")), "replay_buffer")


@pytest.mark.parametrize("overrides,fragment", [
    (["env.env_type=mjx", "env.env_name=halfcheetah", "num_train_envs=4"], "env.env_type=mjx"),
    (["num_devices=2"], "num_devices=2"),
])
def test_refused_where_it_does_not_apply(overrides, fragment, monkeypatch):
    from agent_common.validation import check_training_run
    from simulators import mjx

    monkeypatch.setattr(mjx, "missing", lambda: [])  # the check needs no MJX install
    cfg = load_config([*TINY, "agent.act_before_update=true", *overrides], "jax")
    with pytest.raises(ConfigError, match="agent.act_before_update") as info:
        check_training_run(cfg, "jax")
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_refused_with_several_replicas(tmp_path):
    from agent_common.replicas import Replicas

    cfg = _config("torch", "agent.act_before_update=true", f"save_path={tmp_path}")
    with pytest.raises(ConfigError, match="agent.act_before_update=true is not supported with 2 data-parallel"):
        host_module.HostStepper(cfg, _make_agent("torch"), Replicas(rank=0, world_size=2))
    assert not os.listdir(tmp_path)


def test_jax_background_compilation_serves_the_steps_without_an_action(caplog):
    """With the key, the JAX agent's fused steps run no action (it is ``act_async``'s own call), and
    ``precompile_step`` compiles those programs: the first due steps compile no ``env_step``."""
    import logging

    import jax

    from agent_jax.agent import FlashSACAgent
    from tests.agent_test_utils import ACT_SPACE, NUM_ENVS, OBS_SPACE, random_transition, replay_buffer

    cfg = load_config(["agent.actor_hidden_dim=16", "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1",
                       "agent.critic_num_blocks=1", "agent.sample_batch_size=16", "agent.buffer_min_length=8",
                       "agent.categorical_target_backend=jax", "agent.act_before_update=true"], framework="jax")
    agent = FlashSACAgent(cfg, OBS_SPACE, ACT_SPACE)
    buffer = replay_buffer(48, agent.replay_storage(48))
    thread = agent.precompile_step(NUM_ENVS)
    assert thread is not None and len(agent._precompiling) == 2
    thread.join()
    rng = np.random.default_rng(7)
    for step in range(6):
        t = random_transition(rng)
        buffer.add(*t)
        if step < 4:
            assert agent.step(t[5], None, 0, 1.0) is None  # warm-up
            continue
        caplog.clear()
        with jax.log_compiles(True), caplog.at_level(logging.DEBUG):
            assert agent.step(t[5], None, 1, 1.0) is None
        assert not [r for r in caplog.records if "env_step" in r.getMessage()]
    assert not agent._precompiling  # both programs were used
