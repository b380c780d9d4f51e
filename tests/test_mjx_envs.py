"""simulators.mjx_env: batched MJX environments (shapes, seeding, auto-reset with the true final observation,
truncation vs termination, agreement with plain MuJoCo, zero-copy torch views).

MJX compiles take tens of seconds on a CPU, so each task is compiled once per module: halfcheetah's ``reset`` and
``step`` (3 envs, episode limit 4) and one jitted hopper rollout (reset + ``lax.scan`` of steps), all with XLA's
backend optimisations off (``FAST_COMPILE_ENV``: the programs compile several times faster, compute the same
operations). Skipped only when
the ``mjx`` extra is not installed (``pip install -e ".[mjx]"``; CI installs it).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("brax", reason="the mjx extra is not installed (pip install -e \".[mjx]\")")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402

from simulators.mjx_env import FAST_COMPILE_ENV, MjxStep, compiler_options, key_from_seed, make_mjx_env  # noqa: E402

CHEETAH_ENVS, CHEETAH_LIMIT = 3, 4
HOPPER_ENVS, HOPPER_STEPS = 2, 60


@pytest.fixture(scope="module", autouse=True)
def _fast_compile():
    """XLA's backend optimisations off for this module's programs (read when an env or program is built)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FAST_COMPILE_ENV, "1")
        yield


@pytest.fixture(scope="module")
def cheetah():
    env = make_mjx_env("halfcheetah", CHEETAH_ENVS, max_episode_steps=CHEETAH_LIMIT)
    return env, env.jit_reset, env.jit_step


@pytest.fixture(scope="module")
def hopper_rollout():
    """A hopper driven by full positive torque on every joint (it falls within a few dozen steps), no time limit in
    reach: reset and ``HOPPER_STEPS`` steps in one jitted ``lax.scan``."""
    env = make_mjx_env("hopper", HOPPER_ENVS, max_episode_steps=1000)
    action = jnp.ones((HOPPER_ENVS, env.action_size), jnp.float32)

    def rollout(key):
        def body(state, _):
            out = env.step(state, action)
            return out.state, (out.obs, out.final_obs, out.terminated, out.truncated, out.state.steps)

        return jax.lax.scan(body, env.reset(key), None, length=HOPPER_STEPS)[1]

    return env, [np.asarray(x) for x in jax.jit(rollout, compiler_options=compiler_options())(key_from_seed(0))]


def random_actions(env, seed: int, steps: int) -> list[jax.Array]:
    keys = jax.random.split(jax.random.PRNGKey(seed), steps)
    return [jax.random.uniform(k, (env.num_envs, env.action_size), minval=-1.0, maxval=1.0) for k in keys]


def test_shapes_and_dtypes(cheetah):
    env, reset, step = cheetah
    assert (env.observation_size, env.action_size) == (17, 6)  # HalfCheetah-v4's
    np.testing.assert_array_equal(env.action_low, -np.ones(6, np.float32))
    np.testing.assert_array_equal(env.action_high, np.ones(6, np.float32))
    state = reset(key_from_seed(0))
    assert env.observation(state).shape == (CHEETAH_ENVS, 17)
    out = step(state, jnp.zeros((CHEETAH_ENVS, 6)))
    assert isinstance(out, MjxStep)
    for name in ("obs", "final_obs"):
        assert getattr(out, name).shape == (CHEETAH_ENVS, 17) and getattr(out, name).dtype == jnp.float32
    for name in ("reward", "terminated", "truncated"):
        assert getattr(out, name).shape == (CHEETAH_ENVS,) and getattr(out, name).dtype == jnp.float32
    assert out.state.steps.dtype == jnp.int32
    np.testing.assert_array_equal(out.state.steps, np.ones(CHEETAH_ENVS))
    assert np.isfinite(np.asarray(out.obs)).all() and np.isfinite(np.asarray(out.reward)).all()


def test_state_type_is_stable_for_scan(cheetah):
    """``step`` returns a state of exactly ``reset``'s type (weak types included): a ``lax.scan`` carry needs it."""
    env = cheetah[0]
    first = jax.eval_shape(env.reset, key_from_seed(0))
    after = jax.eval_shape(env.step, first, jnp.zeros((CHEETAH_ENVS, 6))).state
    assert jax.tree_util.tree_structure(first) == jax.tree_util.tree_structure(after)
    for a, b in zip(jax.tree_util.tree_leaves(first), jax.tree_util.tree_leaves(after), strict=True):
        assert (a.shape, a.dtype, a.weak_type) == (b.shape, b.dtype, b.weak_type)


def test_same_seed_same_trajectory(cheetah):
    env, reset, step = cheetah

    def run(seed):
        state, rows = reset(key_from_seed(seed)), []
        for action in random_actions(env, seed, CHEETAH_LIMIT + 1):  # through one auto-reset
            out = step(state, action)
            state = out.state
            rows.append(np.concatenate([np.asarray(out.obs), np.asarray(out.final_obs)], axis=1))
        return np.asarray(env.observation(reset(key_from_seed(seed)))), np.stack(rows)

    first, again, other = run(7), run(7), run(8)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], other[0])
    initial = first[0]  # every env starts in its own random state
    assert all(not np.array_equal(initial[i], initial[j]) for i in range(CHEETAH_ENVS) for j in range(i))


def test_truncation_at_the_limit_resets_and_keeps_the_final_obs(cheetah):
    env, reset, step = cheetah
    state = reset(key_from_seed(1))
    actions = random_actions(env, 1, CHEETAH_LIMIT)
    for action in actions[:-1]:
        out = step(state, action)
        assert not np.asarray(out.truncated).any() and not np.asarray(out.terminated).any()
        np.testing.assert_array_equal(out.obs, out.final_obs)
        state = out.state
    last = step(state, actions[-1])
    np.testing.assert_array_equal(last.truncated, np.ones(CHEETAH_ENVS))
    np.testing.assert_array_equal(last.terminated, np.zeros(CHEETAH_ENVS))  # halfcheetah never terminates
    np.testing.assert_array_equal(last.state.steps, np.zeros(CHEETAH_ENVS))
    # the true successor: the same step taken from the same state with the step counter cleared (so no reset)
    unreset = step(state._replace(steps=jnp.zeros_like(state.steps)), actions[-1])
    assert not np.asarray(unreset.truncated).any()
    np.testing.assert_array_equal(last.final_obs, unreset.obs)
    np.testing.assert_array_equal(last.reward, unreset.reward)
    # what the policy sees next is a fresh initial state: qpos within the reset noise (0.1) of the initial pose
    assert not np.allclose(last.obs, last.final_obs)
    qpos = np.asarray(last.state.env_state.pipeline_state.qpos)  # (E, nq)
    assert np.abs(qpos - np.asarray(env.mj_model.qpos0)).max() <= 0.1 + 1e-6
    # and the next step counts from 1 again
    np.testing.assert_array_equal(step(last.state, actions[0]).state.steps, np.ones(CHEETAH_ENVS))
    # every state so far, from a jitted reset or a step, had one type: step compiled once
    assert step._cache_size() == 1


def test_init_is_the_jitted_reset_of_the_seed(cheetah):
    env, reset, _ = cheetah
    for a, b in zip(jax.tree_util.tree_leaves(env.init(5)), jax.tree_util.tree_leaves(reset(key_from_seed(5))),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_hopper_falls_terminated_not_truncated(hopper_rollout):
    env, (obs, final_obs, terminated, truncated, steps) = hopper_rollout
    assert terminated.shape == (HOPPER_STEPS, HOPPER_ENVS)
    assert not truncated.any()  # the 1000-step limit is far away
    assert terminated.any(axis=0).all(), "every hopper should fall under full torque within the rollout"
    for t, i in zip(*np.nonzero(terminated), strict=True):
        assert steps[t, i] == 0  # reset at the step it fell
        z, angle = final_obs[t, i, 0], final_obs[t, i, 1]  # Brax/gymnasium hopper: torso height and angle first
        velocity = final_obs[t, i, 5:]  # clipped to [-10, 10] in the observation
        assert z <= 0.7 or abs(angle) >= 0.2 or np.abs(velocity).max() >= 10, "the final obs should be unhealthy"
        assert not np.allclose(obs[t, i], final_obs[t, i])
        assert 0.7 < obs[t, i, 0] and abs(obs[t, i, 1]) < 0.2  # the reset observation is healthy again
    alive = terminated == 0
    np.testing.assert_array_equal(obs[alive], final_obs[alive])
    first = np.argmax(terminated, axis=0)  # (E,) first fall of each env
    for i in range(HOPPER_ENVS):
        np.testing.assert_array_equal(steps[: first[i], i], np.arange(1, first[i] + 1))


def test_halfcheetah_dynamics_agree_with_mujoco(cheetah):
    """MJX's step (float32) against ``mujoco.mj_step`` (float64) on the same model, qpos, qvel and ctrl."""
    env, reset, step = cheetah
    state = reset(key_from_seed(3))
    action = random_actions(env, 3, 1)[0]
    out = step(state, action)
    model = env.mj_model
    n_frames = round(env.dt / model.opt.timestep)
    assert n_frames == 5  # HalfCheetah-v4's frame skip
    ps0, ps1 = state.env_state.pipeline_state, out.state.env_state.pipeline_state
    ctrl = np.asarray(env.to_ctrl(action), dtype=np.float64)
    for i in range(CHEETAH_ENVS):
        data = mujoco.MjData(model)
        data.qpos[:] = np.asarray(ps0.qpos[i], dtype=np.float64)
        data.qvel[:] = np.asarray(ps0.qvel[i], dtype=np.float64)
        data.ctrl[:] = ctrl[i]
        for _ in range(n_frames):
            mujoco.mj_step(model, data)
        # measured on the CPU: qpos within 1e-7, qvel (up to ~11) within 1.1e-6; the bars leave 100x for float32
        np.testing.assert_allclose(np.asarray(ps1.qpos[i]), data.qpos, atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.asarray(ps1.qvel[i]), data.qvel, atol=1e-4, rtol=0)
        np.testing.assert_allclose(np.asarray(out.obs[i]), np.concatenate([data.qpos[1:], data.qvel]),
                                   atol=1e-4, rtol=0)


def test_positions_are_the_physics_qpos(cheetah):
    """What a video renders: every env's joint positions, (E, nq), the pipeline state's ``qpos``."""
    env, reset, _ = cheetah
    state = reset(key_from_seed(5))
    positions = np.asarray(env.positions(state))
    assert positions.shape == (CHEETAH_ENVS, env.mj_model.nq)
    np.testing.assert_array_equal(positions, np.asarray(state.env_state.pipeline_state.qpos))
    assert not np.array_equal(positions[0], positions[1])  # each env's own random initial pose


def test_dlpack_views_share_memory(cheetah):
    torch = pytest.importorskip("torch")
    from simulators.torch_view import step_to_torch, to_torch

    env, reset, step = cheetah
    out = step(reset(key_from_seed(4)), jnp.zeros((CHEETAH_ENVS, 6)))
    views = step_to_torch(out)
    for name, tensor in views._asdict().items():
        array = getattr(out, name)
        assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32
        assert tuple(tensor.shape) == array.shape
        assert tensor.data_ptr() == array.unsafe_buffer_pointer(), f"{name} was copied"
        np.testing.assert_array_equal(tensor.numpy(), np.asarray(array))
    with pytest.raises(TypeError, match="array: expected a JAX array"):
        to_torch([1.0, 2.0])


def test_bad_arguments_name_the_argument(cheetah):
    env, reset, step = cheetah
    with pytest.raises(ValueError, match="task: expected one of halfcheetah, hopper"):
        make_mjx_env("HalfCheetah-v4", 2)
    with pytest.raises(ValueError, match="num_envs: expected an integer >= 1, got 0"):
        make_mjx_env("hopper", 0)
    with pytest.raises(ValueError, match="max_episode_steps: expected an integer or None"):
        make_mjx_env("hopper", 2, max_episode_steps=1.5)
    with pytest.raises(ValueError, match=r"action: expected shape \(3, 6\), got \(3, 5\)"):
        env.step(reset(key_from_seed(0)), jnp.zeros((CHEETAH_ENVS, 5)))
    with pytest.raises(ValueError, match=r"action: expected shape \(3, 6\), got \(6,\)"):
        env.step(reset(key_from_seed(0)), [0.0] * 6)


def test_4096_envs_trace():
    """The recipe's scale goes through tracing (shapes only; the H200 run measures it: bench.mjx_env_speed)."""
    env = make_mjx_env("humanoid", 4096)
    state = jax.eval_shape(env.reset, key_from_seed(0))
    out = jax.eval_shape(env.step, state, jax.ShapeDtypeStruct((4096, env.action_size), jnp.float32))
    assert out.obs.shape == out.final_obs.shape == (4096, env.observation_size)
    assert out.terminated.shape == out.truncated.shape == (4096,)
    assert env.action_size == 17 and np.allclose(env.ctrl_high, 0.4)  # Humanoid-v4's actuators, rescaled from [-1, 1]
