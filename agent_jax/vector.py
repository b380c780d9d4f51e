"""The JAX agent on MJX environments: whole chunks of interaction steps in one jitted ``lax.scan``.

``make_vector_trainer(cfg)`` is the JAX ``agent_common.device.DeviceTrainer``. Everything a training step
touches lives on the device in one pytree (``VectorState``: the agent state, the device replay, the MJX env state,
the exploration key and noise, the reward normaliser), and ``train_steps`` advances it by up to K interaction steps
in one dispatch, donating it. One step of the scan, in the order of the host stepper (``agent_common.host``):

1. the action: uniform random in the action bounds while the replay holds fewer than ``agent.buffer_min_length``
   rows, else ``tanh(mean + std * noise)`` with the truncated-zeta repeated noise of ``agent_common.noise``
   (advanced only on policy steps, as ``ZetaNoise.sample`` is called only then);
2. the MJX step of every env (finished envs reset inside it; the true final observation is the successor);
3. the E rows of the step (``agent_common.buffer.ROW_KEYS`` columns) stored at the ring index; with ``n_step``
   n > 1 they go into a device window of the last n − 1 steps first, and once the window is full each step stores
   the n-step rows of the oldest step (``n_step_window``: ``agent_common.buffer.ReplayBuffer``'s rule);
4. the reward normaliser updated with the step's rewards and ends (``agent_common.normalizer``'s rule: per-env
   running discounted return G, its largest |G|, upstream's running moments; here in float32 on the device, the
   host normaliser keeps float64);
5. once the replay holds ``buffer_min_length`` rows, ``updates_per_interaction_step`` updates, each on a batch
   sampled on the device (``agent_jax.step.sample_batch``, rewards divided by the normaliser's scale) through
   ``agent_jax.update.update_networks``, whose categorical target runs the backend the agent resolved (the Pallas
   kernel with ``agent.categorical_target_backend=pallas``) at the run's batch size.

The scan has a static length K (``agent_common.device.interaction_steps_per_call``) and a traced step count
``num_steps <= K``: the steps past it change nothing (their rows are dropped, everything else is selected back), so
one executable serves every chunk length. The warm-up and the first updates are the same program (the random
actions and the updates are selected per step on the replay's fill), so a run compiles one training program and
one evaluation program. When the updates per step are a multiple of ``agent.actor_update_period`` the actor /
critic-only pattern is static, as in ``update_networks``; otherwise a ``lax.cond`` picks it per update.

Evaluation (``evaluate_round``) runs the deterministic policy on the MJX evaluation envs in one jitted
``lax.while_loop`` until every env has finished once. With ``record_video``, ``record_round`` plays the same policy
on copies of the evaluation envs in one jitted ``lax.scan`` (compiled on the first video) and hands the host the
joint positions of the filmed envs only. A run is resumable bitwise: every key, the env state, the
noise, the normaliser, the replay rows and the agent state are in the checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import threading
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from agent_common.device import interaction_steps_per_call
from agent_common.keys import Config, ConfigError
from agent_common.noise import truncated_zeta_cdf
from agent_common.protocol import strict_backend_as_config_error
from agent_common.seeding import BUFFER_STREAM
from agent_jax.agent import FlashSACAgent, make_agent
from agent_jax.state import AgentState
from agent_jax.step import (
    METRIC_NAMES,
    DeviceReplay,
    create_device_replay,
    insert_first,
    metric_sums,
    policy_actions,
    row_width,
    sample_batch,
)
from agent_jax.update import UpdateContext, update_networks
from simulators import make_device_env
from simulators.mjx_env import MjxEnvState, MjxVecEnv, compiler_options

__all__ = ["JaxVectorTrainer", "ScanSpec", "VectorState", "evaluate_round", "make_vector_trainer", "n_step_rows",
           "n_step_window", "normalizer_update", "programs", "record_program", "train_steps"]

Array = jax.Array

log = logging.getLogger("flashsac.agent_jax")

# Streams of the run seed's key (jax.random.fold_in(PRNGKey(seed), stream)); the replay sampler's is the agent's
# (agent_common.seeding.BUFFER_STREAM).
_ENV_STREAM, _EVAL_STREAM, _EXPLORE_STREAM, _RECORD_STREAM = 10, 11, 12, 13


@flax.struct.dataclass
class VectorState:
    """Everything a training step reads and writes, on the device (the carry of ``train_steps``).

    Attributes:
        agent: the networks, optimisers and update key.
        replay: the device replay (rows, ring index, size, sampler key, summed update metrics).
        env: the MJX env state (its own reset key inside).
        key: (2,) uint32 exploration key (warm-up actions, noise), split once per step.
        noise_eps: (E, A) float32 held exploration noise.
        noise_count: () int32 steps the held noise has been used.
        noise_repeat: () int32 how many steps it is held.
        ret: (E,) float32 running discounted return G of each env (the reward normaliser).
        ret_max: () float32 largest |G| so far.
        ret_mean: () float32 running mean of G.
        ret_var: () float32 running variance of G.
        ret_count: () float32 returns seen.
        update_step: () int32 updates done.
        window: (n − 1, E, W) float32 the last n − 1 steps' rows, oldest first (the n-step window; (0, E, W) with
            n = 1).
        window_fill: () int32 how many of the window's newest slots hold steps (<= n − 1).
    """

    agent: AgentState
    replay: DeviceReplay
    env: MjxEnvState
    key: Array
    noise_eps: Array
    noise_count: Array
    noise_repeat: Array
    ret: Array
    ret_max: Array
    ret_mean: Array
    ret_var: Array
    ret_count: Array
    update_step: Array
    window: Array
    window_fill: Array


_NORMALIZER_FIELDS = ("ret", "ret_max", "ret_mean", "ret_var", "ret_count")


@dataclasses.dataclass(frozen=True)
class ScanSpec:
    """The static part of ``train_steps`` (one executable per spec; ``env`` and ``actor_def`` by identity).

    Attributes:
        env: the training envs.
        actor_def: the actor module.
        length: K, the scan length.
        updates_per_step: U.
        actor_update_period: P.
        batch_size: B.
        min_rows: ``agent.buffer_min_length``.
        gamma: the config γ (the normaliser's discount).
        normalized_G_max: the normaliser's bound.
        normalize_reward: divide sampled rewards by the scale.
        zeta_cdf: the noise repetition length's CDF (``agent_common.noise.truncated_zeta_cdf``).
        n_step: n of the n-step rows.
    """

    env: MjxVecEnv
    actor_def: Any
    length: int
    updates_per_step: int
    actor_update_period: int
    batch_size: int
    min_rows: int
    gamma: float
    normalized_G_max: float
    normalize_reward: bool
    zeta_cdf: tuple[float, ...]
    n_step: int = 1


def _select(pred: Array, yes: Any, no: Any) -> Any:
    """Leaf by leaf ``yes`` where the scalar ``pred`` holds, else ``no``."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), yes, no)


def _insert_if(replay: DeviceReplay, rows: Array, active: Array) -> DeviceReplay:
    """``agent_jax.step.insert_rows`` when ``active``; otherwise the rows are dropped and nothing changes."""
    return insert_first(replay, rows, jnp.where(active, rows.shape[0], 0).astype(jnp.int32))


def n_step_rows(window: Array, gamma: float, observation_dim: int, action_dim: int) -> Array:
    """The n-step rows of the oldest step of a full window, as ``agent_common.buffer.ReplayBuffer`` stores them.

    Args:
        window: (n, E, W) float32 rows (``ROW_KEYS`` columns), oldest first.
        gamma: γ.
        observation_dim: O.
        action_dim: A.

    Returns:
        (E, W): the oldest step's observation and action, reward Σ_{k<n} γᵏ r_{t+k} cut at the first done
        (terminated or truncated) of the window, and that step's terminated, next observation and truncated flags
        (the last step's when no step is done).
    """
    reward_col = observation_dim + action_dim
    terminated_col, truncated_col = reward_col + 1, window.shape[2] - 1
    out = window[0]  # (E, W)
    alive = jnp.ones(window.shape[1], bool)  # (E,)
    for k in range(1, window.shape[0]):
        step = window[k]  # (E, W)
        alive = alive & ~((out[:, terminated_col] > 0) | (out[:, truncated_col] > 0))  # the previous step ended
        reward = out[:, reward_col] + jnp.float32(gamma**k) * step[:, reward_col]  # (E,)
        tail = jnp.where(alive[:, None], step[:, reward_col:], out[:, reward_col:])  # (E, W - O - A)
        tail = tail.at[:, 0].set(jnp.where(alive, reward, out[:, reward_col]))
        out = jnp.concatenate([out[:, :reward_col], tail], axis=1)
    return out


def n_step_window(window: Array, fill: Array, rows: Array, gamma: float, observation_dim: int,
                  action_dim: int) -> tuple[Array, Array, Array, Array]:
    """Pushes one step's rows into the n-step window (traceable; n − 1 = ``window.shape[0]``).

    Args:
        window: (n − 1, E, W) the last n − 1 steps' rows, oldest first; its ``fill`` newest slots hold steps.
        fill: () int32.
        rows: (E, W) the new step's rows.
        gamma: γ.
        observation_dim: O.
        action_dim: A.

    Returns:
        (the new window, the new fill, (E, W) n-step rows of the oldest step, () bool: the window was full so
        those rows are to be stored). With n = 1: (window, fill, rows, True).
    """
    if window.shape[0] == 0:
        return window, fill, rows, jnp.ones((), bool)
    full = jnp.concatenate([window, rows[None]], axis=0)  # (n, E, W)
    ready = fill >= window.shape[0]
    out = n_step_rows(full, gamma, observation_dim, action_dim)
    return full[1:], jnp.minimum(fill + 1, window.shape[0]).astype(jnp.int32), out, ready


def _metric_vector(info: dict[str, Array]) -> tuple[Array, Array]:
    """An update's metrics as (values, present) vectors in ``METRIC_NAMES`` order."""
    values = jnp.stack([info.get(name, jnp.zeros((), jnp.float32)).astype(jnp.float32) for name in METRIC_NAMES])
    present = jnp.asarray([name in info for name in METRIC_NAMES], jnp.float32)
    return values * present, present


def normalizer_update(c: VectorState, reward: Array, done: Array, spec: ScanSpec) -> dict[str, Array]:
    """``RewardNormalizer.update`` in float32 (G, |G| max, upstream's running moments with its count quirk)."""
    ret = spec.gamma * (1.0 - done) * c.ret + reward  # (E,)
    ret_max = jnp.maximum(c.ret_max, jnp.max(jnp.abs(ret)))
    batch_mean, batch_var = jnp.mean(ret), jnp.var(ret)
    batch_count = jnp.float32(ret.shape[0])
    delta = batch_mean - c.ret_mean
    total = c.ret_count + batch_count
    mean = c.ret_mean + delta * batch_count / total
    m2 = c.ret_var * (c.ret_count + 1e-4) + batch_var * batch_count + delta**2 * c.ret_count * batch_count / total
    return {"ret": ret, "ret_max": ret_max, "ret_mean": mean, "ret_var": m2 / total, "ret_count": total}


def _reward_scale(c: VectorState, spec: ScanSpec) -> Array:
    """``RewardNormalizer.scale``: max(sqrt(var + 1e-8), G_max / normalized_G_max); 1 when normalisation is off."""
    if not spec.normalize_reward:
        return jnp.ones((), jnp.float32)
    return jnp.maximum(jnp.sqrt(c.ret_var + 1e-8), c.ret_max / spec.normalized_G_max)


def _updates(c: VectorState, replay: DeviceReplay, scale: Array, ctx: UpdateContext,
             spec: ScanSpec) -> tuple[AgentState, DeviceReplay]:
    """U updates on batches sampled from ``replay`` (its key advances; the metric sums grow)."""
    agent = c.agent
    sums, counts = replay.metric_sum, replay.metric_count
    static = spec.updates_per_step % spec.actor_update_period == 0  # update_step is then always a multiple of P
    for j in range(spec.updates_per_step):
        replay, batch, _ = sample_batch(replay, spec.batch_size, spec.env.observation_size, scale)
        if static:
            agent, info = update_networks(agent, batch, ctx, do_actor_update=j % spec.actor_update_period == 0)
            values, present = _metric_vector(info)
        else:
            def run(actor: bool, agent: AgentState = agent, batch: Any = batch) -> tuple[AgentState, Array, Array]:
                new, info = update_networks(agent, batch, ctx, do_actor_update=actor)
                return (new, *_metric_vector(info))

            due = (c.update_step + j) % spec.actor_update_period == 0
            agent, values, present = jax.lax.cond(due, lambda: run(True), lambda: run(False))
        sums, counts = sums + values, counts + present
    return agent, replay.replace(metric_sum=sums, metric_count=counts)


def _interaction_step(c: VectorState, ctx: UpdateContext, active: Array, spec: ScanSpec) -> VectorState:
    """One interaction step (module doc); when ``active`` is false the result equals ``c``."""
    env = spec.env
    num_envs, action_dim = env.num_envs, env.action_size
    key, uniform_key, eps_key, length_key = jax.random.split(c.key, 4)
    observation = env.observation(c.env)  # (E, O)
    warmup = c.replay.size < spec.min_rows
    # ZetaNoise.sample: a fresh ε and length every call; the held ones are replaced when used up
    fresh_eps = jax.random.normal(eps_key, (num_envs, action_dim), jnp.float32)  # (E, A)
    fresh_repeat = 1 + jnp.sum(jnp.asarray(spec.zeta_cdf, jnp.float32) <= jax.random.uniform(length_key, ()))
    renew = (c.noise_count == 0) | (c.noise_count >= c.noise_repeat)
    eps = jnp.where(renew, fresh_eps, c.noise_eps)  # (E, A)
    repeat = jnp.where(renew, fresh_repeat, c.noise_repeat).astype(jnp.int32)
    count = (jnp.where(renew, 0, c.noise_count) + 1).astype(jnp.int32)
    policy = policy_actions(spec.actor_def, c.agent.actor.params, c.agent.actor.batch_stats, observation, eps,
                            deterministic=False)  # (E, A)
    low, high = jnp.asarray(env.action_low), jnp.asarray(env.action_high)
    uniform = jax.random.uniform(uniform_key, (num_envs, action_dim), jnp.float32, low, high)  # (E, A)
    action = jnp.where(warmup, uniform, policy)  # (E, A)
    noise = _select(warmup, (c.noise_eps, c.noise_repeat, c.noise_count), (eps, repeat, count))
    out = env.step(c.env, action)
    rows = jnp.concatenate([observation, action, out.reward[:, None], out.terminated[:, None], out.final_obs,
                            out.truncated[:, None]], axis=1)  # (E, W), ROW_KEYS columns
    window, fill, rows, ready = n_step_window(c.window, c.window_fill, rows, spec.gamma, env.observation_size,
                                              action_dim)
    replay = _insert_if(c.replay, rows, active & ready)
    done = jnp.maximum(out.terminated, out.truncated)  # (E,) in {0, 1}
    stepped = c.replace(env=out.state, key=key, noise_eps=noise[0], noise_repeat=noise[1], noise_count=noise[2],
                        window=window, window_fill=fill, **normalizer_update(c, out.reward, done, spec))
    agent, updated = _updates(stepped, replay, _reward_scale(stepped, spec), ctx, spec)
    learn = replay.size >= spec.min_rows
    agent = _select(learn, agent, c.agent)
    replay = replay.replace(key=jnp.where(learn, updated.key, replay.key),
                            metric_sum=jnp.where(learn, updated.metric_sum, replay.metric_sum),
                            metric_count=jnp.where(learn, updated.metric_count, replay.metric_count))
    update_step = (c.update_step + jnp.where(learn, spec.updates_per_step, 0)).astype(jnp.int32)
    new = stepped.replace(agent=agent, replay=replay, update_step=update_step)
    # an inactive step keeps everything; its rows were already dropped (no select over the whole ring)
    rows_after = new.replay.rows
    kept = _select(active, new.replace(replay=new.replay.replace(rows=None)),
                   c.replace(replay=c.replay.replace(rows=None)))
    return kept.replace(replay=kept.replay.replace(rows=rows_after))


def _train_steps(carry: VectorState, ctx: UpdateContext, num_steps: Array, *, spec: ScanSpec) -> VectorState:
    """``num_steps`` (<= ``spec.length``) interaction steps in one ``lax.scan`` of ``spec.length`` (module doc).

    Args:
        carry: the state (donated).
        ctx: update constants.
        num_steps: () int32, the steps to run; the scan's later steps change nothing.
        spec: the static configuration.

    Returns:
        The state after ``num_steps`` steps.
    """

    def body(c: VectorState, i: Array) -> tuple[VectorState, None]:
        return _interaction_step(c, ctx, i < num_steps, spec), None

    carry, _ = jax.lax.scan(body, carry, jnp.arange(spec.length, dtype=jnp.int32))
    return carry


def _evaluate_round(params: Any, batch_stats: Any, key: Array, *, env: MjxVecEnv,
                    actor_def: Any) -> tuple[Array, Array]:
    """One evaluation round: every env from a fresh reset (``key``), the deterministic policy tanh(mean), until
    each env has finished once; returns and lengths count up to each env's first end.

    Returns:
        ((E,) float32 returns, (E,) int32 lengths).
    """
    num_envs = env.num_envs

    def running(c: tuple[Any, ...]) -> Array:
        return ~jnp.all(c[3])

    def body(c: tuple[Any, ...]) -> tuple[Any, ...]:
        state, ret, length, finished = c
        action = policy_actions(actor_def, params, batch_stats, env.observation(state), None, deterministic=True)
        out = env.step(state, action)
        alive = ~finished  # (E,)
        ret = ret + jnp.where(alive, out.reward, 0.0)
        length = length + alive.astype(jnp.int32)
        return out.state, ret, length, finished | (out.terminated > 0) | (out.truncated > 0)

    start = (env.reset(key), jnp.zeros(num_envs, jnp.float32), jnp.zeros(num_envs, jnp.int32),
             jnp.zeros(num_envs, bool))
    _, ret, length, _ = jax.lax.while_loop(running, body, start)
    return ret, length


def _record_round(params: Any, batch_stats: Any, key: Array, *, env: MjxVecEnv, actor_def: Any, num_filmed: int,
                  length: int) -> tuple[Array, Array, Array, Array]:
    """One recording round: every env from a fresh reset (``key``), the deterministic policy, ``length`` steps;
    the positions of the first ``num_filmed`` envs before each action.

    Returns:
        ((T, n, nq) qpos, (T, n) bool alive, (n,) float32 returns up to each env's first end, (n,) bool finished).
    """
    num_envs = env.num_envs

    def body(c: tuple[Any, ...], _: None) -> tuple[tuple[Any, ...], tuple[Array, Array]]:
        state, ret, finished = c
        filmed = (env.positions(state)[:num_filmed], ~finished[:num_filmed])
        action = policy_actions(actor_def, params, batch_stats, env.observation(state), None, deterministic=True)
        out = env.step(state, action)
        ret = ret + jnp.where(finished, 0.0, out.reward)
        return (out.state, ret, finished | (out.terminated > 0) | (out.truncated > 0)), filmed

    start = (env.reset(key), jnp.zeros(num_envs, jnp.float32), jnp.zeros(num_envs, bool))
    (_, ret, finished), (qpos, alive) = jax.lax.scan(body, start, None, length=length)
    return qpos, alive, ret[:num_filmed], finished[:num_filmed]


def _reset(key: Array, *, env: MjxVecEnv) -> MjxEnvState:
    return env.reset(key)


@functools.lru_cache(maxsize=2)
def programs(fast_compile: bool = False) -> tuple[Any, Any, Any]:
    """The jitted (``train_steps``, ``evaluate_round``, reset) programs; with ``fast_compile``, compiled with
    ``simulators.mjx_env.compiler_options()``'s XLA options (``FLASHSAC_MJX_FAST_COMPILE=1``: backend optimisations
    off)."""
    options = compiler_options() if fast_compile else None
    return (jax.jit(_train_steps, static_argnames=("spec",), donate_argnums=(0,), compiler_options=options),
            jax.jit(_evaluate_round, static_argnames=("env", "actor_def"), compiler_options=options),
            jax.jit(_reset, static_argnames=("env",), compiler_options=options))


@functools.lru_cache(maxsize=2)
def record_program(fast_compile: bool = False) -> Any:
    """The jitted ``_record_round`` (compiled on the first recording only: a run without videos never builds it)."""
    options = compiler_options() if fast_compile else None
    return jax.jit(_record_round, static_argnames=("env", "actor_def", "num_filmed", "length"),
                   compiler_options=options)


train_steps, evaluate_round, _ = programs()


def _host(tree: Any) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.device_get(jax.tree_util.tree_leaves(tree))]


def _restore_leaves(template: Any, leaves: list[Any], name: str) -> Any:
    """``template``'s structure with ``leaves`` (host arrays), checked leaf by leaf (ValueError naming ``name``)."""
    live, treedef = jax.tree_util.tree_flatten(template)
    if len(leaves) != len(live):
        raise ValueError(f"'{name}' has {len(leaves)} arrays, this run has {len(live)}")
    for i, (saved, now) in enumerate(zip(leaves, live, strict=True)):
        if np.shape(saved) != now.shape or np.asarray(saved).dtype != now.dtype:
            raise ValueError(f"'{name}' array {i} is {np.asarray(saved).dtype}{list(np.shape(saved))}, this run "
                             f"expects {now.dtype}{list(now.shape)}")
    return jax.tree_util.tree_unflatten(treedef, [jnp.asarray(x) for x in leaves])


class JaxVectorTrainer:
    """The JAX agent's ``DeviceTrainer`` (``agent_common.device``): ``train_steps`` per ``advance``,
    ``evaluate_round`` per evaluation round, and the checkpoint pieces.

    Args:
        cfg: the resolved config (``env.env_type=mjx``).

    Raises:
        ConfigError: ``agent.buffer_device_type=cpu`` (the replay lives with the envs on the device), or a strict
            categorical-target backend that cannot run here.
    """

    def __init__(self, cfg: Config) -> None:
        a = cfg.agent
        if a.buffer_device_type == "cpu":
            raise ConfigError("invalid value 'cpu' for 'agent.buffer_device_type': with env.env_type=mjx the JAX agent "
                              "keeps the replay on the envs' device; use auto or cuda")
        import gymnasium as gym

        self.cfg = cfg
        # one env object per configuration in a process (the programs are cached by its identity, so a resume in
        # the same process, or a second run, reuses them)
        self.env = make_device_env(cfg, int(cfg.num_train_envs), int(cfg.seed))
        self.eval_env = make_device_env(cfg, int(cfg.num_eval_envs), int(cfg.seed))
        self.num_envs = self.env.num_envs
        obs_dim, act_dim = self.env.observation_size, self.env.action_size
        observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        action_space = gym.spaces.Box(self.env.action_low, self.env.action_high, (act_dim,), np.float32)
        from jax_impl import BackendUnavailable

        self.agent: FlashSACAgent = strict_backend_as_config_error(make_agent, BackendUnavailable)(
            cfg, observation_space, action_space)  # type: ignore[assignment]
        self.device = self.agent.device
        self.spec = ScanSpec(
            env=self.env, actor_def=self.agent._actor_def, length=interaction_steps_per_call(cfg),
            updates_per_step=int(cfg.updates_per_interaction_step), actor_update_period=int(a.actor_update_period),
            batch_size=int(a.sample_batch_size), min_rows=int(a.buffer_min_length), gamma=float(cfg.gamma),
            normalized_G_max=float(a.normalized_G_max), normalize_reward=bool(a.normalize_reward),
            zeta_cdf=tuple(float(v) for v in truncated_zeta_cdf(a.actor_noise_zeta_mu, a.actor_noise_zeta_max)),
            n_step=int(cfg.n_step))
        self._train_steps, self._evaluate_round, reset = programs(compiler_options() is not None)
        root = jax.random.PRNGKey(int(cfg.seed))
        replay = create_device_replay(int(a.buffer_max_length), row_width(obs_dim, act_dim),
                                      np.asarray(jax.random.fold_in(root, BUFFER_STREAM)), self.device)
        f32, i32 = jnp.float32, jnp.int32
        carry = VectorState(
            agent=self.agent.state, replay=replay, env=reset(jax.random.fold_in(root, _ENV_STREAM), env=self.env),
            key=jax.random.fold_in(root, _EXPLORE_STREAM), noise_eps=jnp.zeros((self.num_envs, act_dim), f32),
            noise_count=jnp.zeros((), i32), noise_repeat=jnp.ones((), i32), ret=jnp.zeros(self.num_envs, f32),
            ret_max=jnp.zeros((), f32), ret_mean=jnp.zeros((), f32), ret_var=jnp.ones((), f32),
            ret_count=jnp.zeros((), f32), update_step=jnp.zeros((), i32),
            window=jnp.zeros((int(cfg.n_step) - 1, self.num_envs, row_width(obs_dim, act_dim)), f32),
            window_fill=jnp.zeros((), i32))
        self.carry: VectorState = jax.device_put(carry, self.device)
        self.eval_key = np.asarray(jax.random.fold_in(root, _EVAL_STREAM))
        self._compiling: threading.Thread | None = None

    def precompile(self) -> None:
        """Starts compiling the training program on a background thread, so that its compilation overlaps the
        initial evaluation (whose program compiles meanwhile); the first ``advance`` waits for it rather than
        compiling it again."""

        def spec(tree: Any) -> Any:  # shapes, dtypes and placements only
            return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), tree)

        carry, ctx, num_steps = spec(self.carry), self.agent.ctx, jax.ShapeDtypeStruct((), jnp.int32)

        def compile_program() -> None:
            try:
                self._train_steps.lower(carry, ctx, num_steps, spec=self.spec).compile()
            except Exception as exc:  # noqa: BLE001  the first call compiles it then; say why it did not work here
                log.warning("background compilation of the MJX training program failed: %s", exc)

        self._compiling = threading.Thread(target=compile_program, name="flashsac-mjx-precompile")
        self._compiling.start()

    # ------------------------------------------------------------------------------------------------ training
    def advance(self, num_steps: int) -> None:
        """``train_steps`` over ``num_steps`` interaction steps; returns when the device has finished them."""
        if not 1 <= num_steps <= self.spec.length:
            raise ValueError(f"num_steps: expected 1 <= num_steps <= {self.spec.length}, got {num_steps}")
        if self._compiling is not None:  # compiled in the background (``precompile``)
            self._compiling.join()
            self._compiling = None
        self.carry = self._train_steps(self.carry, self.agent.ctx, np.int32(num_steps), spec=self.spec)
        self.carry.update_step.block_until_ready()

    def evaluate(self, num_episodes: int) -> dict[str, float]:
        """``num_episodes // num_eval_envs`` rounds of ``evaluate_round`` (see ``DeviceTrainer.evaluate``)."""
        actor = self.carry.agent.actor
        returns, lengths = [], []
        for _ in range(num_episodes // self.eval_env.num_envs if num_episodes > 0 else 0):
            keys = jax.random.split(jnp.asarray(self.eval_key))
            self.eval_key = np.asarray(keys[0])
            ret, length = self._evaluate_round(actor.params, actor.batch_stats, keys[1], env=self.eval_env,
                                         actor_def=self.spec.actor_def)
            returns.append(np.asarray(ret, np.float64))
            lengths.append(np.asarray(length, np.float64))
        if not returns:
            return {"avg_return": math.nan, "avg_length": math.nan, "avg_success_once": math.nan,
                    "avg_success_end": math.nan}
        # MJX tasks report no success signal: 0, as the gymnasium evaluation reports for the MuJoCo tasks
        return {"avg_return": float(np.mean(np.concatenate(returns))),
                "avg_length": float(np.mean(np.concatenate(lengths))), "avg_success_once": 0.0,
                "avg_success_end": 0.0}

    def recording_model(self) -> tuple[Any, float]:
        """(the task's ``MjModel``, seconds per env step): what ``agent_common.video.VectorRecorder`` renders."""
        return self.eval_env.mj_model, float(self.eval_env.dt)

    def record_round(self, num_envs: int, num_steps: int, index: int) -> dict[str, np.ndarray]:
        """One recording round of the deterministic policy on copies of the eval envs (``_record_round``; reset
        from the recording key folded with ``index``, so the evaluation's key does not move), ``num_steps`` steps
        or the episode limit, whichever is less. Only the first ``num_envs`` envs' positions reach the host.

        Returns:
            ``qpos`` (T, n, nq) float64, ``alive`` (T, n) bool, ``returns`` (n,) float64, ``finished`` (n,) bool.
        """
        actor = self.carry.agent.actor
        key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(int(self.cfg.seed)), _RECORD_STREAM), index)
        program = record_program(compiler_options() is not None)
        qpos, alive, ret, finished = jax.device_get(program(
            actor.params, actor.batch_stats, key, env=self.eval_env, actor_def=self.spec.actor_def,
            num_filmed=int(num_envs), length=min(int(num_steps), self.eval_env.max_episode_steps)))
        return {"qpos": np.asarray(qpos, np.float64), "alive": np.asarray(alive, bool),
                "returns": np.asarray(ret, np.float64), "finished": np.asarray(finished, bool)}

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        """The summed update metrics since the last call (one read-back); resets the sums.

        Raises:
            FloatingPointError: a non-finite sum.
        """
        replay = self.carry.replay
        sums, counts = jax.device_get((replay.metric_sum, replay.metric_count))
        zeros = jax.device_put(np.zeros(len(METRIC_NAMES), np.float32), self.device)
        self.carry = self.carry.replace(replay=replay.replace(metric_sum=zeros, metric_count=zeros.copy()))
        return metric_sums(sums, counts, int(self.carry.update_step))

    def info(self) -> dict[str, float | str]:
        """The agent's ``info`` with the MJX program in ``compile/path``."""
        info = self.agent.info()
        info["compile/path"] = (
            f"{info['compile/path']}. MJX: one jitted lax.scan of {self.spec.length} interaction steps per call (env "
            f"step, action, replay insert, {self.spec.updates_per_step} update(s) per step on device-sampled "
            f"batches), compiled by the first call; evaluation: one jitted while_loop per round")
        return info

    # ------------------------------------------------------------------------------------------------ checkpoints
    def save_agent(self, directory: str) -> None:
        """``FlashSACAgent.save`` of the current agent state (networks, optimisers, update key and count)."""
        self.agent.state = self.carry.agent
        self.agent.update_step = int(self.carry.update_step)
        self.agent.save(directory)

    def load_agent(self, directory: str, load_optimizer: bool) -> None:
        """``FlashSACAgent.load`` into the carry."""
        self.agent.state = self.carry.agent
        self.agent.load(directory, load_optimizer=load_optimizer)
        self.carry = self.carry.replace(agent=self.agent.state,
                                        update_step=jnp.asarray(self.agent.update_step, jnp.int32))
        self.carry = jax.device_put(self.carry, self.device)

    def state_dict(self) -> dict[str, Any]:
        """The env state, exploration key and noise, reward normaliser, update count, the replay's ring index,
        size and sampler key, and the evaluation key, as numpy."""
        c = self.carry
        return {
            "env": _host(c.env),
            "explore": _host((c.key, c.noise_eps, c.noise_count, c.noise_repeat)),
            "normalizer": dict(zip(_NORMALIZER_FIELDS, _host([getattr(c, f) for f in _NORMALIZER_FIELDS]),
                                   strict=True)),
            "update_step": int(c.update_step),
            "replay": {"index": int(c.replay.index), "size": int(c.replay.size), "key": np.asarray(c.replay.key)},
            "eval_key": self.eval_key.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict`` output (the normaliser only with ``agent.load_reward_normalizer``).

        Raises:
            ValueError: arrays that do not fit this run (naming the entry).
        """
        c = self.carry
        key, eps, count, repeat = _restore_leaves((c.key, c.noise_eps, c.noise_count, c.noise_repeat),
                                                  state["explore"], "explore")
        c = c.replace(env=_restore_leaves(c.env, state["env"], "env"), key=key, noise_eps=eps, noise_count=count,
                      noise_repeat=repeat, update_step=jnp.asarray(int(state["update_step"]), jnp.int32))
        if self.cfg.agent.load_reward_normalizer:
            norm = state["normalizer"]
            c = c.replace(**{f: _restore_leaves(getattr(c, f), [norm[f]], f"normalizer/{f}")
                             for f in _NORMALIZER_FIELDS})
        replay = state["replay"]
        c = c.replace(replay=c.replay.replace(index=jnp.asarray(int(replay["index"]), jnp.int32),
                                              size=jnp.asarray(int(replay["size"]), jnp.int32),
                                              key=_restore_leaves(c.replay.key, [replay["key"]], "replay/key")))
        self.carry = jax.device_put(c, self.device)
        self.eval_key = np.asarray(state["eval_key"], np.uint32)

    def buffer_state(self) -> dict[str, Any]:
        """``rows``: the stored (size, 2O + A + 3) float32 rows (``ROW_KEYS`` columns), with ``index`` and ``size``;
        with n > 1 ``window``: the in-flight n-step window's (<= n - 1, E, 2O + A + 3) steps, oldest first."""
        replay = self.carry.replay
        size = int(replay.size)
        state = {"rows": np.asarray(jax.device_get(replay.rows[:size]), np.float32), "index": int(replay.index),
                 "size": size}
        if self.spec.n_step > 1:
            fill = int(self.carry.window_fill)
            window = np.asarray(jax.device_get(self.carry.window), np.float32)
            state["window"] = window[window.shape[0] - fill:].copy()
        return state

    def window_fill(self) -> int:
        """The steps in flight in the n-step window (0 with n = 1; one device read)."""
        return int(self.carry.window_fill)

    def load_buffer_state(self, state: dict[str, Any] | None) -> None:
        """Restores ``buffer_state`` output; None empties the replay (index and size 0).

        Raises:
            ValueError: rows of another width, or more than the capacity.
        """
        replay = self.carry.replay
        capacity, width = (int(d) for d in replay.rows.shape)
        data = np.zeros((capacity, width), np.float32)
        index = size = 0
        if state is not None:
            rows = np.asarray(state["rows"], np.float32)
            if rows.ndim != 2 or rows.shape[1] != width or rows.shape[0] > capacity:
                raise ValueError(f"replay rows must be (<= {capacity}, {width}), got {rows.shape}")
            data[:rows.shape[0]] = rows
            index, size = int(state["index"]), rows.shape[0]
        replay = replay.replace(rows=jnp.asarray(data), index=jnp.asarray(index, jnp.int32),
                                size=jnp.asarray(size, jnp.int32))
        window = np.zeros(self.carry.window.shape, np.float32)  # (n - 1, E, W)
        saved = None if state is None else state.get("window")
        if saved is not None and (np.ndim(saved) != 3 or np.shape(saved)[0] > window.shape[0]
                                  or np.shape(saved)[1:] != window.shape[1:]):
            log.warning("the saved n-step window %s is not resumed (n_step=%d, num_train_envs=%d): it restarts empty",
                        np.shape(saved), self.spec.n_step, self.num_envs)
            saved = None
        elif state is not None and saved is None and self.spec.n_step > 1:
            log.warning("the checkpoint has no n-step window (n_step=%d): it restarts empty", self.spec.n_step)
        fill = 0 if saved is None else int(np.shape(saved)[0])
        if fill:
            window[window.shape[0] - fill:] = np.asarray(saved, np.float32)
        self.carry = jax.device_put(self.carry.replace(replay=replay, window=jnp.asarray(window),
                                                       window_fill=jnp.asarray(fill, jnp.int32)), self.device)

    def close(self) -> None:
        """Waits for a background compilation still running (the envs are cached per process)."""
        if self._compiling is not None:
            self._compiling.join()
            self._compiling = None


def make_vector_trainer(cfg: Config) -> JaxVectorTrainer:
    """``agent_common.device.DeviceTrainerFactory`` of the JAX agent."""
    return JaxVectorTrainer(cfg)
