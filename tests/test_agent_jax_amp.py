"""JAX agent precision: the fp32 update against golden outputs of commit 2b3c4af, bf16 / fp16 mixed precision against
fp32 on the same fixed batches, the fp16 loss scale's skipped step and backoff inside one jitted update (no transfer
to or from the host), the loss scale in checkpoints, and the ``agent.use_amp`` / ``agent.amp_dtype`` keys."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_common.buffer import flat_batch
from agent_common.config import load_config
from agent_common.keys import ConfigError
from agent_jax.agent import make_agent
from agent_jax.amp import LossScale, resolve_amp_dtype
from agent_jax.update import actor_grads, critic_grads, update_networks_flat
from tests.data.make_jax_update_golden import (
    OVERRIDES,
    PATH,
    WRITTEN_AT,
    fixed_batches,
    flat_state,
    machine,
    run,
    spaces,
)

NETS = ("actor", "critic")
AMP = {"bf16": ["agent.use_amp=true", "agent.amp_dtype=bf16"], "fp16": ["agent.use_amp=true", "agent.amp_dtype=fp16"]}


@pytest.fixture(scope="module")
def golden() -> tuple[list[dict[str, np.ndarray]], str]:
    """The golden records (``run``'s layout) and the machine that wrote them."""
    data = np.load(PATH)
    assert str(data["written_at"]) == WRITTEN_AT
    records: list[dict[str, np.ndarray]] = [{}, {}]
    for key in data.files:
        step, _, name = key.partition("/")
        if step.isdigit():
            records[int(step)][name] = data[key]
    return records, str(data["machine"])


def _agent(overrides=()):
    return make_agent(load_config([*OVERRIDES, *overrides], "jax"), *spaces())


@pytest.mark.default_xla
def test_fp32_update_matches_golden_outputs_of_2b3c4af(golden):
    # Bitwise on the machine and jax version that wrote the file (XLA:CPU compiles for the host's CPU, so another
    # CPU model may vectorise reductions differently): there a few fp32 ulps are allowed. A changed operation (a
    # cast, a scaled loss, a skipped step, another key split) is far outside them.
    records, written_on = golden
    exact = written_on == machine()
    new = run()
    for step, (old, got) in enumerate(zip(records, new, strict=True)):
        assert set(old) == set(got), step
        for name, value in old.items():
            if exact:
                np.testing.assert_array_equal(got[name], value, err_msg=f"{step} {name}")
            else:
                np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=f"{step} {name}")


# bf16 keeps 8 significant bits (unit roundoff 2^-9 = 0.2%), fp16 11 (2^-12 = 0.024%), fp32 24. Losses are means over
# the batch of per-row results each a few roundings away from fp32: tolerances 10x the unit roundoff of several
# layers (bf16 2%, fp16 0.2%; measured at most 0.1% for both). Gradients pass batch-norm backwards, which subtract
# batch means and amplify the relative error of inner layers, so whole-network gradients are compared by the
# relative error of the flat vector and its cosine with fp32. Measured on this test's batch (relative error /
# cosine): bf16 actor 2.9% / 0.99959, critic 2.4% / 0.99971; fp16 actor 0.65% / 0.99998, critic 0.23% / 0.999997
# (smaller than the torch agent's, tests/test_agent_torch_amp.py: normalisation statistics run in fp32 here). The
# bounds are ~5x that; a wrong gradient (sign, missing unscale, another batch) has relative error >= 1 and a cosine
# near 0 or negative.
TOLERANCES = {
    "bf16": {"loss": 2e-2, "grad_rel": 0.15, "grad_cos": 0.99},
    "fp16": {"loss": 2e-3, "grad_rel": 0.03, "grad_cos": 0.9995},
}


@jax.jit
def _grads(state, batch, ctx):
    """The actor's and the critic's unscaled gradients (and found_inf) at ``state`` on ``batch``, as flat vectors."""
    actor_key, critic_key = jax.random.split(state.rng)
    a = actor_grads(state.actor, state.critic, state.temperature, batch, ctx, actor_key, state.loss_scale)
    c = critic_grads(state.actor, state.critic, state.temperature, batch, ctx, critic_key, state.loss_scale)
    flat = [jnp.concatenate([g.ravel() for g in jax.tree_util.tree_leaves(x[0])]) for x in (a, c)]
    return dict(zip(NETS, flat, strict=True)), (a[3], c[3])


@pytest.fixture(scope="module")
def fp32_grads() -> dict[str, np.ndarray]:
    agent = _agent()
    grads, found = _grads(agent.state, agent.to_batch(fixed_batches()[0]), agent.ctx)
    assert found == (None, None)
    return jax.device_get(grads)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_amp_against_fp32_on_fixed_batches(golden, fp32_grads, dtype):
    tol = TOLERANCES[dtype]
    records, _ = golden
    agent = _agent(AMP[dtype])
    assert (agent.state.loss_scale is not None) == (dtype == "fp16")
    # the parameters do not depend on the compute dtype
    initial = flat_state(agent.state)
    fresh = flat_state(_agent().state)
    assert all(np.array_equal(initial[k], fresh[k]) for k in fresh)
    grads, found = _grads(agent.state, agent.to_batch(fixed_batches()[0]), agent.ctx)
    for net in NETS:
        a, b = np.asarray(grads[net], np.float64), np.asarray(fp32_grads[net], np.float64)
        assert np.isfinite(a).all(), (dtype, net)  # fp16: unscaled, and the step was not skipped
        rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
        cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        assert rel <= tol["grad_rel"] and cos >= tol["grad_cos"], (dtype, net, rel, cos)
        assert rel > 0, (dtype, net)  # the compute dtype did change the arithmetic
    if dtype == "fp16":
        assert [bool(f) for f in found] == [False, False]
    # the first update (actor, temperature, critic; the golden's critic-only second update adds no other metric)
    agent.update(fixed_batches()[0])
    metrics = agent.flush_metrics()
    ref = {k.removeprefix("metric/"): float(v) for k, v in records[0].items() if k.startswith("metric/")}
    assert metrics.keys() == ref.keys()
    for name, value in ref.items():
        assert metrics[name] == pytest.approx(value, rel=tol["loss"], abs=1e-4), (dtype, name)
    if dtype == "fp16":  # two finite scaled steps: the actor's and the critic's
        assert (float(agent.state.loss_scale.scale), int(agent.state.loss_scale.growth_tracker)) == (2.0**16, 2)


def _primitives(jaxpr) -> set[str]:
    """The primitive names of a jaxpr and of every jaxpr nested in it."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple | list) else (value,):
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    names |= _primitives(sub.jaxpr)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    names |= _primitives(sub)
    return names


def _net_state(state, net: str) -> dict[str, np.ndarray]:
    return {k: v for k, v in flat_state(state).items() if k.startswith(f"{net}/") and "target" not in k}


def test_fp16_overflow_skips_the_step_and_lowers_the_scale_on_the_device():
    agent = _agent(AMP["fp16"])
    batches = fixed_batches()
    agent.update(batches[0])  # a normal first step (actor and critic)
    agent.flush_metrics()
    flats = [jax.device_put(flat_batch(b), agent.device) for b in batches]
    before = {net: _net_state(agent.state, net) for net in ("actor", "critic", "temperature")}
    # loss * scale overflows fp32 (any loss above 2): every scaled gradient becomes inf or NaN
    state = agent.state.replace(loss_scale=agent.state.loss_scale.replace(
        scale=jax.device_put(jnp.float32(2.0**127), agent.device)))
    state = jax.block_until_ready(state)
    step = functools.partial(update_networks_flat, observation_dim=agent.observation_dim, do_actor_update=True)
    # One program decides: no conditional (XLA:GPU reads a conditional's predicate back to the host), no loop, no
    # host callback anywhere in the update; the skip is a select on the device.
    primitives = _primitives(jax.make_jaxpr(step)(state, flats[1], agent.ctx).jaxpr)
    assert not primitives & {"cond", "while", "pure_callback", "io_callback", "debug_callback", "callback"}
    assert "select_n" in primitives and "is_finite" in primitives
    with jax.transfer_guard("disallow"):  # and no transfer between host and device while it runs
        state, metrics = step(state, flats[1], agent.ctx)
        jax.block_until_ready(state)
        with pytest.raises(Exception, match="Disallowed host-to-device"):  # the guard does catch a transfer
            jnp.asarray(np.ones(2, np.float32))
    ls = state.loss_scale
    assert float(ls.found_inf) == 1.0
    assert float(ls.scale) == 2.0**125  # backed off twice (x0.5 after the actor's step, x0.5 after the critic's)
    assert int(ls.growth_tracker) == 0
    assert np.isfinite(np.asarray(metrics)).all()  # the losses themselves are finite
    # skipped: parameters, BN statistics, Adam moments and step counts of actor and critic bitwise unchanged; the
    # unscaled temperature stepped
    for net in ("actor", "critic"):
        after = _net_state(state, net)
        for key, value in before[net].items():
            np.testing.assert_array_equal(after[key], value, err_msg=key)
    assert not np.array_equal(_net_state(state, "temperature")["temperature/params/log_temp"],
                              before["temperature"]["temperature/params/log_temp"])
    # the next step with a sane scale updates again and the finite counter grows
    state = state.replace(loss_scale=ls.replace(scale=jax.device_put(jnp.float32(2.0**10), agent.device)))
    state, _ = update_networks_flat(state, flats[0], agent.ctx, observation_dim=agent.observation_dim,
                                    do_actor_update=False)
    assert float(state.loss_scale.found_inf) == 0.0 and int(state.loss_scale.growth_tracker) == 1
    moved = _net_state(state, "critic")
    assert np.abs(moved["critic/params/embed/weight"] - before["critic"]["critic/params/embed/weight"]).max() > 1e-5
    assert int(moved["critic/step"]) == int(before["critic"]["critic/step"]) + 1


def test_loss_scale_grows_after_its_interval_and_state_dict_round_trips():
    ls = LossScale.create(init_scale=8.0, growth_interval=2)
    update = jax.jit(lambda s, f: s.update(f))
    ls = update(ls, jnp.bool_(False))
    assert (float(ls.scale), int(ls.growth_tracker)) == (8.0, 1)
    ls = update(ls, jnp.bool_(False))
    assert (float(ls.scale), int(ls.growth_tracker)) == (16.0, 0)
    ls = update(ls, jnp.bool_(True))
    assert (float(ls.scale), int(ls.growth_tracker), float(ls.found_inf)) == (8.0, 0, 1.0)
    grads, found = ls.unscale({"a": jnp.full(3, 8.0), "b": jnp.ones((2, 2))})
    assert not bool(found) and np.array_equal(grads["a"], np.ones(3)) and float(grads["b"][0, 0]) == 0.125
    assert bool(ls.unscale({"a": jnp.array([1.0, jnp.inf])})[1])
    assert bool(ls.unscale({"a": jnp.array([jnp.nan])})[1])
    state = ls.state_dict()
    # torch.amp.GradScaler's checkpoint layout (the torch agent writes the same keys)
    assert set(state) == {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
    other = LossScale.create().load_state_dict(state)
    assert other.state_dict() == state
    with pytest.raises(ValueError, match="lacks"):
        other.load_state_dict({"growth_factor": 2.0})


def test_amp_dtype_resolution_and_config():
    assert resolve_amp_dtype(False, "fp16", "gpu")[0] is None
    assert resolve_amp_dtype(True, "auto", "gpu")[0] == jnp.float16  # the torch agent's auto on CUDA
    assert resolve_amp_dtype(True, "auto", "cuda")[0] == jnp.float16
    assert resolve_amp_dtype(True, "auto", "cpu")[0] == jnp.bfloat16
    assert resolve_amp_dtype(True, "bf16", "gpu")[0] == jnp.bfloat16
    assert resolve_amp_dtype(True, "fp16", "cpu")[0] == jnp.float16
    with pytest.raises(ValueError, match="auto, bf16 or fp16"):
        resolve_amp_dtype(True, "fp8", "cpu")
    with pytest.raises(ConfigError, match="agent.amp_dtype"):
        load_config(["agent.amp_dtype=fp8"], "jax")
    agent = _agent(["agent.use_amp=true"])  # auto on the CPU: bf16, no loss scale
    assert agent.amp_dtype == jnp.bfloat16 and agent.state.loss_scale is None
    assert "agent.amp_dtype=auto on cpu: bf16" in agent.info()["compile/path"]
    assert agent._actor_def.dtype is None  # acting stays fp32
    assert agent.state.critic.apply_fn.__self__.dtype == jnp.bfloat16
    assert "agent.use_amp" not in _agent().info()["compile/path"]


def test_fp16_agent_checkpoint_keeps_the_loss_scale(tmp_path):
    agent = _agent(AMP["fp16"])
    ls = agent.state.loss_scale
    agent.state = agent.state.replace(loss_scale=ls.replace(scale=jnp.float32(1024.0),
                                                            growth_tracker=jnp.int32(7)))
    agent.save(str(tmp_path))
    other = _agent(AMP["fp16"])
    other.load(str(tmp_path))
    assert (float(other.state.loss_scale.scale), int(other.state.loss_scale.growth_tracker)) == (1024.0, 7)
    fresh = _agent(AMP["fp16"])
    fresh.load(str(tmp_path), load_optimizer=False)  # optimiser state not loaded: the scale neither
    assert float(fresh.state.loss_scale.scale) == 2.0**16
    fp32 = _agent()
    fp32.load(str(tmp_path))  # the weights are fp32 either way: an fp32 agent loads an fp16 checkpoint
    assert fp32.state.loss_scale is None


def test_fp16_in_the_fused_env_step_with_the_packed_state():
    """The device-replay path (``agent.step``: store, sampled updates and the action in one jitted program on the
    packed state) carries the loss scale: it counts the finite steps and comes back with the state."""
    from tests.agent_test_utils import ACT_DIM, ACT_SPACE, NUM_ENVS, OBS_SPACE, random_transition, replay_buffer

    agent = make_agent(load_config([*OVERRIDES, "agent.sample_batch_size=8", *AMP["fp16"]], "jax"), OBS_SPACE,
                       ACT_SPACE)
    buffer = replay_buffer(64, agent.replay_storage(64))
    rng = np.random.default_rng(3)
    for _ in range(4):  # warm-up rows
        t = random_transition(rng)
        buffer.add(*t)
        agent.step(t[5], None, 0, 1.0)
    t = random_transition(rng)
    buffer.add(*t)
    action = agent.step(t[5], rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32), 1, 1.0)  # actor + critic
    assert action.shape == (NUM_ENVS, ACT_DIM) and np.isfinite(action).all()
    ls = agent.state.loss_scale  # unpacked from the step's packed state
    assert (float(ls.scale), int(ls.growth_tracker), float(ls.found_inf)) == (2.0**16, 2, 0.0)
    assert all(np.isfinite(total) for total, _ in agent.take_metrics().values())
