"""Unit tests of the JAX FlashSAC networks, state and jitted update step (CPU, tiny sizes)."""

from __future__ import annotations

import logging
import math

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_common.config import load_config
from agent_common.schedule import warmup_cosine_decay
from agent_jax.networks import FlashSACActor, UnitBatchNorm, safe_tanh_log_det_jacobian
from agent_jax.state import build_networks, create_agent_state, learning_rate_schedule
from agent_jax.update import (
    Batch,
    UpdateContext,
    critic_target,
    metric_names,
    update_networks,
    update_networks_flat,
    update_target,
    update_temperature,
)
from shared_spec import CategoricalSupport
from shared_spec.reference import categorical_td_target as reference_td_target

OBS_DIM, ACT_DIM, BATCH = 17, 6, 16
OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
ACT_SPACE = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
TINY = ["agent.actor_hidden_dim=16", "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1",
        "agent.critic_num_blocks=1", f"agent.sample_batch_size={BATCH}", "num_env_steps=1000"]
EXPECTED_INFO_ACTOR = {"actor/loss", "actor/entropy", "actor/mean_action", "temperature/value", "temperature/loss"}
EXPECTED_INFO_CRITIC = {"critic/loss", "critic/max_entropy_bonus"}


def _cfg(*extra: str):
    return load_config([*TINY, *extra], framework="jax")


@pytest.fixture(scope="module")
def real_batch() -> dict[str, np.ndarray]:
    """A batch of real HalfCheetah-v4 transitions (random actions), reward scaled into the support."""
    from agent_common.envs import make_vec_env, step_env

    envs = make_vec_env("HalfCheetah-v4", 1, seed=0)
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ("observation", "action", "reward", "terminated",
                                                         "next_observation")}
    for _ in range(BATCH):
        action = rng.uniform(-1, 1, (1, ACT_DIM)).astype(np.float32)  # (1, A)
        res = step_env(envs, action)
        rows["observation"].append(np.asarray(obs, np.float32)[0])
        rows["action"].append(action[0])
        rows["reward"].append(res.reward[0] / 2.0)
        rows["terminated"].append(res.terminated[0])
        rows["next_observation"].append(res.next_observation[0])
        obs = res.reset_observation
    envs.close()
    batch = {k: np.stack(v).astype(np.float32) for k, v in rows.items()}
    batch["terminated"][::5] = 1.0  # a few terminal rows, so the done branch of the target is exercised
    return batch


def _leaves_with_path(tree):
    return [("/".join(str(getattr(k, "key", k)) for k in path), leaf)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)]


def _assert_projected(params) -> None:
    """Every unit linear row has norm 1, every BN (weight, bias) pair and RMSNorm weight has norm sqrt(d)."""
    def walk(tree, name=""):
        if not isinstance(tree, dict):
            return
        keys = set(tree)
        if keys == {"weight"} and tree["weight"].ndim >= 2 and not name.endswith("final_norm"):  # unit linear
            np.testing.assert_allclose(np.linalg.norm(tree["weight"], axis=-1), 1.0, atol=1e-5, err_msg=name)
        elif keys == {"weight", "bias"}:  # batch norm
            sq = np.sum(np.square(tree["weight"]) + np.square(tree["bias"]), axis=-1)
            np.testing.assert_allclose(sq, tree["weight"].shape[-1], rtol=1e-5, err_msg=name)
        elif keys == {"weight"}:  # rms norm
            sq = np.sum(np.square(tree["weight"]), axis=-1)
            np.testing.assert_allclose(sq, tree["weight"].shape[-1], rtol=1e-5, err_msg=name)
        for key, sub in tree.items():
            walk(sub, f"{name}/{key}")

    walk(jax.device_get(params))


def test_parameter_counts_match_upstream():
    """Default widths on HalfCheetah: 268,590 actor and 2,171,686 critic parameters (docs/flashsac.md)."""
    cfg = load_config(framework="jax")
    state = create_agent_state(cfg.agent, OBS_DIM, ACT_DIM, seed=0)
    count = lambda tree: sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(tree))
    assert count(state.actor.params) == 268_590
    assert count(state.critic.params) == 2_171_686
    assert count(state.temperature.params) == 1
    shapes = {name: tuple(x.shape) for name, x in _leaves_with_path(state.critic.params)}
    assert shapes["embed/weight"] == (2, 256, 23)  # (N, out, in): PyTorch layout and agent_torch's names
    assert shapes["blocks_1/fc1/weight"] == (2, 1024, 256)
    assert shapes["blocks_1/bn1/weight"] == (2, 1024)
    assert shapes["head/weight"] == (2, 101, 256)
    assert shapes["head_bias"] == (2, 101)
    assert shapes["final_norm/weight"] == (2, 256)
    actor_shapes = {name: tuple(x.shape) for name, x in _leaves_with_path(state.actor.params)}
    assert actor_shapes["input_bn/weight"] == (17,)
    assert actor_shapes["mean_head/weight"] == (6, 128)
    assert actor_shapes["log_std_bias"] == (6,)
    stats = {name for name, _ in _leaves_with_path(state.critic.batch_stats)}
    assert "blocks_0/bn2/running_var" in stats and "input_bn/running_mean" in stats
    np.testing.assert_allclose(np.exp(state.temperature.params["log_temp"]), [0.01], rtol=1e-6)
    _assert_projected(state.actor.params)
    _assert_projected(state.critic.params)
    for a, b in zip(jax.tree_util.tree_leaves(state.critic.params), jax.tree_util.tree_leaves(
            state.critic.target_params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_batchnorm_matches_torch_semantics():
    """Training mode: biased-variance normalisation, unbiased running var, momentum 0.01; eval uses running stats."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, 5)).astype(np.float32) * 3 + 1  # (B, d)
    bn = UnitBatchNorm(5)
    variables = bn.init(jax.random.PRNGKey(0), jnp.asarray(x), False)
    params = {"weight": jnp.linspace(0.5, 1.5, 5), "bias": jnp.linspace(-1, 1, 5)}
    y, upd = bn.apply({"params": params, "batch_stats": variables["batch_stats"]}, jnp.asarray(x), True,
                      mutable=["batch_stats"])
    rm, rv = torch.zeros(5), torch.ones(5)
    y_t = torch.nn.functional.batch_norm(torch.tensor(x), rm, rv, torch.tensor(np.asarray(params["weight"])),
                                         torch.tensor(np.asarray(params["bias"])), training=True, momentum=0.01,
                                         eps=1e-5)
    np.testing.assert_allclose(np.asarray(y), y_t.numpy(), atol=1e-5)
    np.testing.assert_allclose(np.asarray(upd["batch_stats"]["running_mean"]), rm.numpy(), atol=1e-6)
    np.testing.assert_allclose(np.asarray(upd["batch_stats"]["running_var"]), rv.numpy(), atol=1e-6)
    y_eval = bn.apply({"params": params, "batch_stats": upd["batch_stats"]}, jnp.asarray(x), False)
    y_eval_t = torch.nn.functional.batch_norm(torch.tensor(x), rm, rv, torch.tensor(np.asarray(params["weight"])),
                                              torch.tensor(np.asarray(params["bias"])), training=False, eps=1e-5)
    np.testing.assert_allclose(np.asarray(y_eval), y_eval_t.numpy(), atol=1e-5)


def test_actor_log_prob_is_tanh_gaussian_density():
    """log pi = sum_i [log N(u_i; mu_i, sigma_i) - log(1 - tanh(u_i)^2)], log sigma in [-10, 2] (paper-era head)."""
    actor = FlashSACActor(observation_dim=OBS_DIM, action_dim=ACT_DIM, num_blocks=1, hidden_dim=16)
    key = jax.random.PRNGKey(3)
    obs = jax.random.normal(key, (32, OBS_DIM))  # (B, O)
    variables = actor.init(key, obs, False, key)
    action, log_prob = actor.apply(variables, obs, False, key)
    mean, std = actor.apply(variables, obs, False, method="get_mean_and_std")
    mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    eps = np.asarray(jax.random.normal(key, mean.shape), np.float64)  # (B, A) the head's reparametrisation noise
    u = mean + std * eps  # (B, A)
    np.testing.assert_allclose(np.asarray(action), np.tanh(u), atol=1e-6)
    assert np.all(np.log(std) >= -10 - 1e-4) and np.all(np.log(std) <= 2 + 1e-4)
    normal = -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    expected = np.sum(normal - np.log(1 - np.tanh(u) ** 2), axis=-1)  # (B,)
    np.testing.assert_allclose(np.asarray(log_prob), expected, rtol=2e-3, atol=2e-3)
    big = jnp.array([-40.0, -3.0, 0.0, 3.0, 40.0])
    np.testing.assert_allclose(np.asarray(safe_tanh_log_det_jacobian(big))[1:4],
                               np.log(1 - np.tanh(np.asarray(big[1:4], np.float64)) ** 2), rtol=1e-5)
    assert np.all(np.isfinite(np.asarray(safe_tanh_log_det_jacobian(big))))


def test_learning_rate_schedule_matches_agent_common():
    """The optax schedule equals agent_common's framework-free schedule (also with a non-zero warm-up)."""
    for warmup, decay in ((0, 100), (10, 100), (1, 990_000), (0, 0), (5, 3)):
        schedule = learning_rate_schedule(3e-4 if warmup == 0 else 1e-4, 3e-4, 1.5e-4, warmup, decay)
        for t in sorted({0, 1, 5, warmup, warmup + 1, decay // 2, max(decay - 1, 0), decay, decay + 10}):
            want = warmup_cosine_decay(t, 3e-4 if warmup == 0 else 1e-4, 3e-4, 1.5e-4, warmup, decay)
            assert math.isclose(float(schedule(t)), want, rel_tol=1e-5), (warmup, decay, t)


def _ctx(discount=0.99, target_entropy=-2.87, bc_alpha=0.0, tau=0.01) -> UpdateContext:
    return UpdateContext.create(discount, target_entropy, bc_alpha, tau, -5.0, 5.0, "jax")


def test_critic_target_equals_spec_reference(real_batch):
    """critic_target on a real batch == shared_spec's float64 reference on the same critic outputs (atol 2e-5)."""
    cfg = _cfg()
    state = create_agent_state(cfg.agent, OBS_DIM, ACT_DIM, seed=1)
    actor_def, critic_def, _ = build_networks(cfg.agent, OBS_DIM, ACT_DIM)
    batch = Batch(**{k: jnp.asarray(v) for k, v in real_batch.items()})
    key = jax.random.PRNGKey(7)
    # Each side traced into its own jitted program (op by op, the network applies cost seconds of dispatch here).
    target, next_alpha_log_pi, next_actions, _ = jax.jit(critic_target)(state.actor, state.critic,
                                                                        state.temperature, batch, _ctx(), key)

    # Recompute the op's inputs independently, from the module definitions.
    actor_vars = {"params": state.actor.params, "batch_stats": state.actor.batch_stats}
    a_next, log_pi = jax.jit(actor_def.apply, static_argnums=2)(actor_vars, batch.next_observation, False, key)
    alpha = np.exp(np.asarray(state.temperature.params["log_temp"]))[0]
    np.testing.assert_array_equal(np.asarray(next_actions), np.asarray(a_next))
    target_vars = {"params": state.critic.target_params, "batch_stats": state.critic.target_batch_stats}
    obs_all = jnp.concatenate([batch.observation, batch.next_observation])
    act_all = jnp.concatenate([batch.action, a_next])
    (qs, log_probs), _ = jax.jit(critic_def.apply, static_argnums=3, static_argnames="mutable")(
        target_vars, obs_all, act_all, True, mutable=("batch_stats",))
    want = reference_td_target(np.asarray(qs)[:, BATCH:], np.asarray(log_probs)[:, BATCH:], real_batch["reward"],
                               real_batch["terminated"], alpha * np.asarray(log_pi), gamma=0.99, min_v=-5.0,
                               max_v=5.0)
    got = np.asarray(target)
    assert got.shape == (BATCH, cfg.agent.critic_num_bins)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(next_alpha_log_pi), alpha * np.asarray(log_pi), rtol=1e-6)
    # Q is the expectation over the atoms built by shared_spec.CategoricalSupport.
    atoms = CategoricalSupport(cfg.agent.critic_num_bins, -5.0, 5.0).atoms()
    online_vars = {"params": state.critic.params, "batch_stats": state.critic.batch_stats}
    q, lp = jax.jit(critic_def.apply, static_argnums=3)(online_vars, batch.observation, batch.action, False)
    np.testing.assert_allclose(np.asarray(q), np.exp(np.asarray(lp)) @ atoms, rtol=1e-5, atol=1e-6)


def test_update_step_keys_projection_and_no_recompile(real_batch):
    """Info keys match the torch agent; weights stay projected; new gamma / tau / alpha values do not recompile."""
    cfg = _cfg()
    state = create_agent_state(cfg.agent, OBS_DIM, ACT_DIM, seed=0)
    batch = Batch(**{k: jnp.asarray(v) for k, v in real_batch.items()})
    state, info = update_networks(state, batch, _ctx(), do_actor_update=True)
    assert set(info) == EXPECTED_INFO_ACTOR | EXPECTED_INFO_CRITIC
    assert all(np.isfinite(float(v)) for v in info.values())
    state, info = update_networks(state, batch, _ctx(), do_actor_update=False)
    assert set(info) == EXPECTED_INFO_CRITIC
    _assert_projected(state.actor.params)
    _assert_projected(state.critic.params)
    assert int(state.actor.step) == 1 and int(state.critic.step) == 2 and int(state.temperature.step) == 1
    # New gamma, tau, bc_alpha, target entropy and a new alpha (temperature parameter value): same executables.
    new_log_temp = {"log_temp": jnp.asarray([math.log(0.2)], jnp.float32)}
    state = state.replace(temperature=state.temperature.replace(params=new_log_temp))
    compiles: list[str] = []
    listener = lambda event, duration, **kw: compiles.append(event) if event.endswith("backend_compile_duration") \
        else None
    jax.monitoring.register_event_duration_secs_listener(listener)

    for gamma in (0.9, 0.5):
        ctx = _ctx(discount=gamma, target_entropy=-1.0, bc_alpha=0.1, tau=0.05)
        state, info = update_networks(state, batch, ctx, do_actor_update=True)
        state, info = update_networks(state, batch, ctx, do_actor_update=False)
    jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == [], "changing run-time scalars recompiled the update step"
    assert np.isfinite(float(info["critic/loss"]))


def test_flat_update_equals_update_networks(real_batch):
    """The agent's step (one flat batch in, stacked metrics out) is update_networks, bit for bit, metrics in
    metric_names order; the flat batch splits back into the batch entries exactly."""
    from agent_common.buffer import UPDATE_KEYS, flat_batch

    flat = flat_batch(real_batch)
    assert flat.shape == (BATCH, 2 * OBS_DIM + ACT_DIM + 2) and flat.dtype == np.float32
    split = Batch.from_flat(jnp.asarray(flat), OBS_DIM)
    for key in UPDATE_KEYS:
        np.testing.assert_array_equal(np.asarray(getattr(split, key)), real_batch[key], err_msg=key)
    cfg = _cfg()
    batch = Batch(**{k: jnp.asarray(v) for k, v in real_batch.items()})
    for do_actor_update in (True, False):
        a = create_agent_state(cfg.agent, OBS_DIM, ACT_DIM, seed=0)
        b = create_agent_state(cfg.agent, OBS_DIM, ACT_DIM, seed=0)
        a, info = update_networks(a, batch, _ctx(), do_actor_update=do_actor_update)
        b, values = update_networks_flat(b, flat, _ctx(), observation_dim=OBS_DIM, do_actor_update=do_actor_update)
        names = metric_names(do_actor_update)
        assert set(names) == set(info) and values.shape == (len(names),)
        np.testing.assert_array_equal(np.asarray(values), [float(info[k]) for k in names])
        for (path, x), (_, y) in zip(_leaves_with_path(a), _leaves_with_path(b), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=path)


def test_temperature_and_target_ema():
    """dL/dlog(alpha) = alpha (H - H-bar): alpha falls when H > H-bar; EMA is target + tau (online - target)."""
    cfg = _cfg()
    state = create_agent_state(cfg.agent, OBS_DIM, ACT_DIM, seed=0)
    temp, info = update_temperature(state.temperature, jnp.float32(1.0), _ctx(target_entropy=-2.0))
    assert float(temp.params["log_temp"][0]) < float(state.temperature.params["log_temp"][0])
    np.testing.assert_allclose(float(info["temperature/value"]), 0.01, rtol=1e-6)
    np.testing.assert_allclose(float(info["temperature/loss"]), 0.01 * 3.0, rtol=1e-5)
    # Adam's first step moves log alpha by the learning rate (3e-4) in the direction of -sign(grad).
    np.testing.assert_allclose(float(temp.params["log_temp"][0]), math.log(0.01) - 3e-4, rtol=1e-6)
    temp, _ = update_temperature(state.temperature, jnp.float32(-5.0), _ctx(target_entropy=-2.0))
    assert float(temp.params["log_temp"][0]) > float(state.temperature.params["log_temp"][0])

    critic = state.critic.replace(params=jax.tree_util.tree_map(lambda p: p + 1.0, state.critic.params))
    new = update_target(critic, jnp.float32(0.01))
    for t_new, t_old, p in zip(jax.tree_util.tree_leaves(new.target_params),
                               jax.tree_util.tree_leaves(state.critic.target_params),
                               jax.tree_util.tree_leaves(critic.params), strict=True):
        np.testing.assert_allclose(np.asarray(t_new), np.asarray(t_old) + 0.01 * (np.asarray(p) - np.asarray(t_old)),
                                   rtol=1e-6, atol=1e-7)


def test_backend_selection_and_fallback(caplog, monkeypatch):
    """pallas on CPU without interpret falls back to jax with a logged reason and a counted fallback; strict raises."""
    import jax_impl
    from agent_jax.agent import FlashSACAgent
    from jax_impl.ops import INTERPRET_ENV

    monkeypatch.delenv(INTERPRET_ENV, raising=False)  # compiled Pallas only: not available on CPU
    jax_impl.reset_dispatch()
    spaces = (OBS_SPACE, ACT_SPACE)
    with caplog.at_level(logging.INFO):
        agent = FlashSACAgent(_cfg("agent.categorical_target_backend=pallas"), *spaces)
    assert agent.ctx.backend == "jax"
    info = agent.info()
    assert info["backend/fallback_count"] == 1.0
    assert str(info["backend/selected"]).startswith("jax (requested pallas: fallback")
    assert any("fallback" in r.getMessage() and "pallas" in r.getMessage() for r in caplog.records)
    with pytest.raises(jax_impl.BackendUnavailable):
        FlashSACAgent(_cfg("agent.categorical_target_backend=pallas", "agent.categorical_target_strict=true"),
                      *spaces)
    jax_impl.reset_dispatch()
    agent = FlashSACAgent(_cfg("agent.categorical_target_backend=jax", "agent.categorical_target_strict=true"),
                          *spaces)
    assert agent.ctx.backend == "jax"
    assert agent.info()["backend/fallback_count"] == 0.0
    jax_impl.reset_dispatch()


def test_pallas_backend_matches_jax_backend_in_the_update(real_batch, monkeypatch):
    """With Pallas interpret mode (CPU), strict pallas is selected and gives the jax backend's critic target."""
    import jax_impl
    from jax_impl.ops import INTERPRET_ENV

    monkeypatch.setenv(INTERPRET_ENV, "1")
    jax_impl.reset_dispatch()
    assert jax_impl.resolve_backend("pallas", strict=True, num_bins=101).backend == "pallas"
    cfg = _cfg()
    state = create_agent_state(cfg.agent, OBS_DIM, ACT_DIM, seed=2)
    batch = Batch(**{k: jnp.asarray(v) for k, v in real_batch.items()})
    key = jax.random.PRNGKey(11)
    pallas_ctx = UpdateContext.create(0.99, -2.87, 0.0, 0.01, -5.0, 5.0, "pallas")
    target = jax.jit(critic_target)  # traced, as the update runs it
    got = target(state.actor, state.critic, state.temperature, batch, pallas_ctx, key)[0]
    want = target(state.actor, state.critic, state.temperature, batch, _ctx(), key)[0]
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=3e-5, rtol=0)
    assert jax_impl.dispatch_stats()["fallback_count"] == 0
    jax_impl.reset_dispatch()


def test_names_and_shapes_match_the_torch_agent():
    """Every parameter / BN statistic of agent_torch's networks exists here under the same name and shape."""
    torch = pytest.importorskip("torch")
    from agent_jax.networks import torch_state_dict
    from agent_torch.networks import FlashSACActor as TorchActor
    from agent_torch.networks import FlashSACDoubleCritic as TorchCritic
    from agent_torch.networks import FlashSACTemperature as TorchTemperature

    cfg = _cfg("agent.actor_num_blocks=2", "agent.critic_num_blocks=2")
    state = create_agent_state(cfg.agent, OBS_DIM, ACT_DIM, seed=0)
    atoms = CategoricalSupport(cfg.agent.critic_num_bins, -5.0, 5.0).atoms()
    with torch.no_grad():
        torch_nets = {
            "actor": TorchActor(OBS_DIM, ACT_DIM, 2, 16).state_dict(),
            "critic": TorchCritic(OBS_DIM + ACT_DIM, 2, 16, atoms).state_dict(),
            "temperature": TorchTemperature(0.01).state_dict(),
        }
    ours = {
        "actor": torch_state_dict({"params": state.actor.params, "batch_stats": state.actor.batch_stats}),
        "critic": torch_state_dict({"params": state.critic.params, "batch_stats": state.critic.batch_stats}),
        "temperature": torch_state_dict({"params": state.temperature.params}),
    }
    for name, theirs in torch_nets.items():
        theirs = {k: tuple(v.shape) for k, v in theirs.items() if k != "atoms"}
        mine = {k: tuple(v.shape) for k, v in ours[name].items()}
        assert mine == theirs, f"{name}: only here {sorted(set(mine) - set(theirs))}, only in torch " \
                               f"{sorted(set(theirs) - set(mine))}"
    np.testing.assert_array_equal(torch_nets["critic"]["atoms"].numpy(), atoms)


def test_forward_passes_match_the_torch_agent_with_shared_weights():
    """Weights copied by name into agent_torch's modules give the same actor / critic outputs and BN updates."""
    torch = pytest.importorskip("torch")
    from agent_jax.networks import torch_state_dict
    from agent_torch.networks import FlashSACActor as TorchActor
    from agent_torch.networks import FlashSACDoubleCritic as TorchCritic

    cfg = _cfg()
    state = create_agent_state(cfg.agent, OBS_DIM, ACT_DIM, seed=4)
    actor_def, critic_def, _ = build_networks(cfg.agent, OBS_DIM, ACT_DIM)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((BATCH, OBS_DIM)).astype(np.float32) * 2 + 0.5  # (B, O)
    act = rng.uniform(-1, 1, (BATCH, ACT_DIM)).astype(np.float32)  # (B, A)
    # Non-trivial BN running stats and affine parameters, so every term of the forward matters.
    def bump(tree, scale):
        return jax.tree_util.tree_map(
            lambda x: x + scale * jnp.abs(jnp.sin(jnp.arange(x.size, dtype=x.dtype).reshape(x.shape))), tree)

    bump = jax.jit(bump, static_argnums=1)  # each tree in one program (op by op: seconds of dispatch here)
    actor_vars = {"params": bump(state.actor.params, 0.05), "batch_stats": bump(state.actor.batch_stats, 0.3)}
    critic_vars = {"params": bump(state.critic.params, 0.05), "batch_stats": bump(state.critic.batch_stats, 0.3)}
    atoms = CategoricalSupport(cfg.agent.critic_num_bins, -5.0, 5.0).atoms()
    t_actor = TorchActor(OBS_DIM, ACT_DIM, 1, 16)
    t_critic = TorchCritic(OBS_DIM + ACT_DIM, 1, 16, atoms)
    for module, variables in ((t_actor, actor_vars), (t_critic, critic_vars)):
        sd = {k: torch.from_numpy(v.copy()) for k, v in torch_state_dict(variables).items()}
        sd.update({k: v for k, v in module.state_dict().items() if k == "atoms"})
        module.load_state_dict(sd, strict=True)
    actor_apply = jax.jit(actor_def.apply, static_argnums=2, static_argnames=("method", "mutable"))
    critic_apply = jax.jit(critic_def.apply, static_argnums=3, static_argnames="mutable")
    with torch.no_grad():
        for training in (False, True):
            mean_t, std_t = t_actor.get_mean_and_std(torch.from_numpy(obs), training)
            (mean, std), _ = actor_apply(actor_vars, jnp.asarray(obs), training, method="get_mean_and_std",
                                         mutable=("batch_stats",))
            np.testing.assert_allclose(np.asarray(mean), mean_t.numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(np.asarray(std), std_t.numpy(), rtol=1e-4, atol=1e-7)
            q_t, lp_t = t_critic(torch.from_numpy(obs), torch.from_numpy(act), training)
            (q, lp), upd = critic_apply(critic_vars, jnp.asarray(obs), jnp.asarray(act), training,
                                        mutable=("batch_stats",))
            np.testing.assert_allclose(np.asarray(q), q_t.numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(np.asarray(lp), lp_t.numpy(), rtol=1e-4, atol=1e-5)
    # Training-mode forwards updated the torch buffers in place; ours came back in `upd`.
    theirs = t_critic.state_dict()
    for name, value in torch_state_dict({"batch_stats": upd["batch_stats"]}).items():
        np.testing.assert_allclose(value, theirs[name].numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_host_prng_keys_are_jax_keys_bitwise():
    """``host_prng_key`` / ``host_fold_in`` (numpy: no device program before a run's first update) give JAX's
    ``PRNGKey`` and ``fold_in`` bit for bit, over the seed range and stream ids the agents use."""
    from agent_jax.state import host_fold_in, host_prng_key

    for seed in (0, 1, 4, 12345, 2**31 - 1):
        key = host_prng_key(seed)
        assert key.dtype == np.uint32 and np.array_equal(key, np.asarray(jax.random.PRNGKey(seed)))
        for data in (0, 1, 2, 3, 7, 1000, 2**32 - 1):
            np.testing.assert_array_equal(host_fold_in(key, data), np.asarray(jax.random.fold_in(key, data)))
    with pytest.raises(ValueError, match="int32"):
        host_prng_key(2**31)
