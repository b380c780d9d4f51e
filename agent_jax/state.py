"""Explicit training state of the JAX FlashSAC agent: one RLTrainState per network, bundled in AgentState."""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from agent_jax.networks import FlashSACActor, FlashSACDoubleCritic, FlashSACTemperature, normalize_parameters

__all__ = [
    "AgentState",
    "RLTrainState",
    "create_agent_state",
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
    """

    actor: RLTrainState
    critic: RLTrainState
    temperature: RLTrainState
    rng: jax.Array


def learning_rate_schedule(
    init_value: float, peak_value: float, end_value: float, warmup_steps: int, decay_steps: int
) -> optax.Schedule:
    """Upstream ``warmup_cosine_decay_scheduler`` (FLASHSAC.md section 11) as an optax schedule.

    Linear warm-up init -> peak over ``warmup_steps``, then cosine peak -> end until ``decay_steps`` (the total
    length, warm-up included), then constant ``end_value``. Evaluated at the network's own optimiser step count.
    """
    decay_steps = max(int(decay_steps), int(warmup_steps) + 1)
    return optax.warmup_cosine_decay_schedule(
        init_value=init_value,
        peak_value=peak_value,
        warmup_steps=int(warmup_steps),
        decay_steps=decay_steps,
        end_value=end_value,
    )


def make_optimizer(agent_cfg: Any) -> optax.GradientTransformation:
    """Adam (0.9, 0.999, eps 1e-8, no weight decay) on the warm-up + cosine schedule; one per network."""
    schedule = learning_rate_schedule(
        agent_cfg.learning_rate_init,
        agent_cfg.learning_rate_peak,
        agent_cfg.learning_rate_end,
        agent_cfg.learning_rate_warmup_step,
        agent_cfg.learning_rate_decay_step,
    )
    return optax.adam(learning_rate=schedule, b1=0.9, b2=0.999, eps=1e-8)


def build_networks(
    agent_cfg: Any, observation_dim: int, action_dim: int
) -> tuple[FlashSACActor, FlashSACDoubleCritic, FlashSACTemperature]:
    """The three flax modules from the (resolved) ``agent`` config section."""
    actor = FlashSACActor(
        num_blocks=agent_cfg.actor_num_blocks,
        input_dim=observation_dim,
        hidden_dim=agent_cfg.actor_hidden_dim,
        action_dim=action_dim,
    )
    critic = FlashSACDoubleCritic(
        num_blocks=agent_cfg.critic_num_blocks,
        input_dim=observation_dim + action_dim,
        hidden_dim=agent_cfg.critic_hidden_dim,
        num_bins=agent_cfg.critic_num_bins,
        min_v=float(agent_cfg.critic_min_v),
        max_v=float(agent_cfg.critic_max_v),
    )
    temperature = FlashSACTemperature(initial_value=agent_cfg.temp_initial_value)
    return actor, critic, temperature


def create_agent_state(agent_cfg: Any, observation_dim: int, action_dim: int, seed: int) -> AgentState:
    """Initialise all networks, project them once (FLASHSAC.md section 8.5) and build their optimisers.

    Args:
        agent_cfg: resolved ``Config.agent`` (needs the network, temperature and learning-rate keys).
        observation_dim: O.
        action_dim: A.
        seed: the run seed; all randomness of the agent derives from ``jax.random.PRNGKey(seed)``.

    Returns:
        AgentState with the target critic equal to the projected online critic.
    """
    actor_def, critic_def, temperature_def = build_networks(agent_cfg, observation_dim, action_dim)
    rng = jax.random.PRNGKey(seed)  # (2,) uint32
    rng, actor_key, critic_key, temperature_key = jax.random.split(rng, 4)
    obs = jnp.zeros((2, observation_dim), jnp.float32)  # (2, O)
    act = jnp.zeros((2, action_dim), jnp.float32)  # (2, A)

    actor_vars = actor_def.init(actor_key, obs, False, actor_key)
    actor_params = normalize_parameters(actor_def.apply, actor_vars["params"], actor_vars["batch_stats"])
    critic_vars = critic_def.init(critic_key, obs, act, False)
    critic_params = normalize_parameters(critic_def.apply, critic_vars["params"], critic_vars["batch_stats"])
    temperature_vars = temperature_def.init(temperature_key)

    actor = RLTrainState.create(
        apply_fn=actor_def.apply, params=actor_params, tx=make_optimizer(agent_cfg),
        batch_stats=actor_vars["batch_stats"],
    )
    critic = RLTrainState.create(
        apply_fn=critic_def.apply, params=critic_params, tx=make_optimizer(agent_cfg),
        batch_stats=critic_vars["batch_stats"],
        target_params=jax.tree_util.tree_map(jnp.copy, critic_params),
        target_batch_stats=jax.tree_util.tree_map(jnp.copy, critic_vars["batch_stats"]),
    )
    temperature = RLTrainState.create(
        apply_fn=temperature_def.apply, params=temperature_vars["params"], tx=make_optimizer(agent_cfg),
        batch_stats={},
    )
    # A concrete int32 step (not TrainState.create's weak-typed Python 0), so the first update and all later ones
    # share one executable.
    step0 = jnp.zeros((), jnp.int32)
    actor, critic, temperature = (s.replace(step=step0) for s in (actor, critic, temperature))
    return AgentState(actor=actor, critic=critic, temperature=temperature, rng=rng)
