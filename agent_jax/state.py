"""Explicit training state of the JAX FlashSAC agent: one RLTrainState per network, bundled in AgentState."""

from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState

from agent_jax.amp import LossScale
from agent_jax.networks import FlashSACActor, FlashSACDoubleCritic, FlashSACTemperature, normalize_parameters
from shared_spec.support import CategoricalSupport

__all__ = [
    "AgentState",
    "RLTrainState",
    "build_networks",
    "create_agent_state",
    "host_fold_in",
    "host_prng_key",
    "learning_rate_schedule",
    "make_optimizer",
]


class RLTrainState(TrainState):
    """flax TrainState plus BatchNorm running statistics and (critic only) the EMA target network.

    Attributes:
        batch_stats: the "batch_stats" collection ({} for the temperature).
        target_params: EMA copy of ``params`` (critic only, else None). Never re-projected after the EMA.
        target_batch_stats: running stats of the target network (critic only). The target critic always runs in
            training mode, so they are never read; they are kept so that the state mirrors the torch agent.
    """

    batch_stats: Any = None
    target_params: Any = None
    target_batch_stats: Any = None


@flax.struct.dataclass
class AgentState:
    """Everything the jitted update reads and writes.

    Attributes:
        actor: actor RLTrainState.
        critic: critic RLTrainState (with target_params).
        temperature: temperature RLTrainState (params {"log_temp": (1,)}).
        rng: (2,) uint32 raw PRNG key, split once per update step; saved in checkpoints.
        loss_scale: the fp16 loss scale (``agent_jax.amp.LossScale``; saved in checkpoints), None in fp32 and bf16.
    """

    actor: RLTrainState
    critic: RLTrainState
    temperature: RLTrainState
    rng: jax.Array
    loss_scale: LossScale | None = None


def host_prng_key(seed: int) -> np.ndarray:
    """``jax.random.PRNGKey(seed)`` (the raw threefry key, (2,) uint32) computed on the host: bitwise the same
    array, without compiling and running the device programs that JAX uses for it (a few tenths of a second each
    before a run's first update, tests/test_agent_jax_update.py compares the two).

    Raises:
        ValueError: a seed outside int32, where JAX's own rule applies (use ``jax.random.PRNGKey``).
    """
    if not -(2**31) <= int(seed) < 2**31:
        raise ValueError(f"seed must be an int32 for host_prng_key, got {seed}")
    return np.array([0, int(seed) & 0xFFFFFFFF], np.uint32)


def host_fold_in(key: np.ndarray, data: int) -> np.ndarray:
    """``jax.random.fold_in(key, data)`` of a raw (2,) uint32 threefry key, computed on the host with numpy: the
    Threefry-2x32 hash (20 rounds) of the counter (0, data) under ``key``, bitwise JAX's result."""
    k0, k1 = (np.uint32(k) for k in np.asarray(key, np.uint32))
    schedule = (k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA))
    x0, x1 = np.uint32(0), np.uint32(int(data) & 0xFFFFFFFF)
    with np.errstate(over="ignore"):
        x0, x1 = x0 + schedule[0], x1 + schedule[1]
        for i in range(5):
            for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
                x0 = x0 + x1
                x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
            x0 = x0 + schedule[(i + 1) % 3]
            x1 = x1 + schedule[(i + 2) % 3] + np.uint32(i + 1)
    return np.array([x0, x1], np.uint32)


def learning_rate_schedule(
    init_value: float, peak_value: float, end_value: float, warmup_steps: int, decay_steps: int
) -> optax.Schedule:
    """Upstream ``warmup_cosine_decay_scheduler`` (docs/flashsac.md) as an optax schedule.

    Linear warm-up init -> peak over ``warmup_steps``, then cosine peak -> end until ``decay_steps`` (the total
    length, warm-up included), then constant ``end_value``. Evaluated at the network's own optimiser step count.
    """
    warmup_steps, decay_steps = int(warmup_steps), int(decay_steps)
    if decay_steps <= warmup_steps:  # no cosine phase: warm-up, then the end value (agent_common's rule)
        warmup = optax.linear_schedule(init_value, peak_value, max(warmup_steps, 1))
        return optax.join_schedules([warmup, optax.constant_schedule(end_value)], [warmup_steps])
    return optax.warmup_cosine_decay_schedule(
        init_value=init_value,
        peak_value=peak_value,
        warmup_steps=warmup_steps,
        decay_steps=decay_steps,
        end_value=end_value,
    )


def make_optimizer(agent_cfg: Any) -> optax.GradientTransformation:
    """Adam (0.9, 0.999, eps 1e-8, no weight decay) on the warm-up + cosine schedule.

    The transformation is stateless, so the three networks share it; each network has its own optimiser *state*
    (and step count, which drives its own LR schedule). Cached by the schedule values, so that agents with equal
    configs have equal pytree metadata and share compiled update steps.
    """
    return _adam(float(agent_cfg.learning_rate_init), float(agent_cfg.learning_rate_peak),
                 float(agent_cfg.learning_rate_end), int(agent_cfg.learning_rate_warmup_step),
                 int(agent_cfg.learning_rate_decay_step))


@functools.cache
def _adam(init_value: float, peak_value: float, end_value: float, warmup_steps: int,
          decay_steps: int) -> optax.GradientTransformation:
    schedule = learning_rate_schedule(init_value, peak_value, end_value, warmup_steps, decay_steps)
    return optax.adam(learning_rate=schedule, b1=0.9, b2=0.999, eps=1e-8)


def build_networks(
    agent_cfg: Any, observation_dim: int, action_dim: int, action_low: Any = None, action_high: Any = None,
    compute_dtype: Any = None,
) -> tuple[FlashSACActor, FlashSACDoubleCritic, FlashSACTemperature]:
    """The three flax modules from the (resolved) ``agent`` config section, as agent_torch builds them.

    ``action_low`` / ``action_high`` (A,) are the env's bounds, used by ``agent.actor_head=upstream`` (None: [-1, 1]).
    ``compute_dtype`` (bfloat16 / float16, from ``agent_jax.amp.resolve_amp_dtype``) is the actor's and critic's
    compute dtype under mixed precision; None: float32. Parameters are float32 either way.

    Cached by their hyper-parameters: a TrainState's ``apply_fn`` is the bound ``module.apply``, and bound methods
    compare equal only for the same module *object*, so sharing the objects lets agents with equal configs share
    compiled update steps (jit keys on the state's pytree metadata).
    """
    support = CategoricalSupport(agent_cfg.critic_num_bins, float(agent_cfg.critic_min_v),
                                 float(agent_cfg.critic_max_v))
    head = str(getattr(agent_cfg, "actor_head", "paper"))
    bias: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    if head == "upstream" and action_low is not None and action_high is not None:
        b, r = action_bounds(int(action_dim), action_low, action_high)
        bias, scale = tuple(float(v) for v in b), tuple(float(v) for v in r)
    return _modules(int(observation_dim), int(action_dim), int(agent_cfg.actor_num_blocks),
                    int(agent_cfg.actor_hidden_dim), int(agent_cfg.critic_num_blocks),
                    int(agent_cfg.critic_hidden_dim), tuple(support.atoms().tolist()),
                    float(agent_cfg.temp_initial_value), head, bias, scale,
                    None if compute_dtype is None else jnp.dtype(compute_dtype).name)


def action_bounds(action_dim: int, action_low: Any, action_high: Any) -> tuple[np.ndarray, np.ndarray]:
    """(bias, range) = ((high + low) / 2, (high - low) / 2) as (A,) float32, as upstream computes them.

    Raises:
        ValueError: bounds of another shape, not finite, or high < low.
    """
    low = np.asarray(action_low, dtype=np.float32).reshape(-1)
    high = np.asarray(action_high, dtype=np.float32).reshape(-1)
    if low.shape != (action_dim,) or high.shape != (action_dim,):
        raise ValueError(f"action bounds: expected shape ({action_dim},), got low {low.shape}, high {high.shape}")
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(f"action bounds must be finite for a tanh-squashed policy, got low {low.tolist()}, "
                         f"high {high.tolist()}")
    if (high < low).any():
        raise ValueError(f"action bounds: high < low (low {low.tolist()}, high {high.tolist()})")
    return np.float32(0.5) * (high + low), np.float32(0.5) * (high - low)


@functools.lru_cache(maxsize=32)
def _modules(observation_dim: int, action_dim: int, actor_num_blocks: int, actor_hidden_dim: int,
             critic_num_blocks: int, critic_hidden_dim: int, atoms: tuple[float, ...],
             temp_initial_value: float, head: str = "paper", action_bias: tuple[float, ...] = (),
             action_range: tuple[float, ...] = (),
             dtype_name: str | None = None) -> tuple[FlashSACActor, FlashSACDoubleCritic, FlashSACTemperature]:
    dtype = None if dtype_name is None else jnp.dtype(dtype_name)
    actor = FlashSACActor(observation_dim, action_dim, actor_num_blocks, actor_hidden_dim, head, action_bias,
                          action_range, dtype)
    critic = FlashSACDoubleCritic(observation_dim + action_dim, critic_num_blocks, critic_hidden_dim, atoms,
                                  dtype=dtype)
    return actor, critic, FlashSACTemperature(temp_initial_value)


def create_agent_state(agent_cfg: Any, observation_dim: int, action_dim: int, seed: int, action_low: Any = None,
                       action_high: Any = None, compute_dtype: Any = None) -> AgentState:
    """Initialise all networks, project them once (docs/flashsac.md) and build their optimisers.

    Args:
        agent_cfg: resolved ``Config.agent`` (needs the network, temperature and learning-rate keys).
        observation_dim: O.
        action_dim: A.
        seed: the run seed; all randomness of the agent derives from ``jax.random.PRNGKey(seed)``.
        action_low: (A,) env bounds for ``agent.actor_head=upstream`` (None: [-1, 1]).
        action_high: (A,).
        compute_dtype: None (float32), bfloat16 or float16 (mixed precision: ``build_networks``); float16 adds a
            loss scale (``agent_jax.amp.LossScale``) to the state.

    Returns:
        AgentState with the target critic equal to the projected online critic. The parameters do not depend on
        ``compute_dtype``.
    """
    actor_def, critic_def, temperature_def = build_networks(agent_cfg, observation_dim, action_dim, action_low,
                                                            action_high, compute_dtype)
    state = _init_state(actor_def, critic_def, temperature_def, make_optimizer(agent_cfg), int(observation_dim),
                        int(action_dim), host_prng_key(seed))
    if compute_dtype is not None and jnp.dtype(compute_dtype) == jnp.float16:
        state = state.replace(loss_scale=LossScale.create())
    return state


# One jit instead of op-by-op dispatch (seconds of tiny compilations on CPU), cached across agents by the (cached,
# hashable) module and optimiser objects. jit outputs never alias each other, so the target critic gets its own
# buffers (the update donates its input state).
@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4, 5))
def _init_state(actor_def: FlashSACActor, critic_def: FlashSACDoubleCritic, temperature_def: FlashSACTemperature,
                tx: optax.GradientTransformation, observation_dim: int, action_dim: int, rng: jax.Array) -> AgentState:
    rng, actor_key, critic_key, temperature_key = jax.random.split(rng, 4)
    obs = jnp.zeros((2, observation_dim), jnp.float32)  # (2, O)
    act = jnp.zeros((2, action_dim), jnp.float32)  # (2, A)
    actor_vars = actor_def.init(actor_key, obs, False, actor_key)
    actor_params = normalize_parameters(actor_def.apply, actor_vars["params"], actor_vars["batch_stats"])
    critic_vars = critic_def.init(critic_key, obs, act, False)
    critic_params = normalize_parameters(critic_def.apply, critic_vars["params"], critic_vars["batch_stats"])
    temperature_vars = temperature_def.init(temperature_key)
    actor = RLTrainState.create(apply_fn=actor_def.apply, params=actor_params, tx=tx,
                                batch_stats=actor_vars["batch_stats"])
    critic = RLTrainState.create(apply_fn=critic_def.apply, params=critic_params, tx=tx,
                                 batch_stats=critic_vars["batch_stats"], target_params=critic_params,
                                 target_batch_stats=critic_vars["batch_stats"])
    temperature = RLTrainState.create(apply_fn=temperature_def.apply, params=temperature_vars["params"], tx=tx,
                                      batch_stats={})
    # A concrete int32 step (not TrainState.create's weak-typed Python 0), so the first update and all later ones
    # share one executable.
    actor, critic, temperature = (s.replace(step=jnp.zeros((), jnp.int32)) for s in (actor, critic, temperature))
    return AgentState(actor=actor, critic=critic, temperature=temperature, rng=rng)
