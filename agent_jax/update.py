"""FlashSAC update steps as pure functions returning info dicts with upstream's metric names (docs/flashsac.md).

The twin of agent_torch/update.py (same function names, arguments in the same order, same info keys); here every
function takes and returns explicit state, and ``update_networks`` chains them inside one ``jax.jit``.

Under fp16 mixed precision (``agent_jax.amp``) the actor's and the critic's steps take the state's loss scale: the
gradients are those of the scaled loss, unscaled, and a step whose gradients are not finite is skipped on the device
(``select_finite``); the temperature's step is never scaled. With no loss scale (fp32, bf16) these functions are the
plain steps.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from agent_common.buffer import flat_widths
from agent_jax import parallel
from agent_jax.amp import LossScale, select_finite
from agent_jax.networks import normalize_parameters
from agent_jax.packing import PackedTree, pack_like, unpack
from agent_jax.state import AgentState, RLTrainState
from jax_impl import categorical_td_target

__all__ = [
    "UPDATE_FLAT_JIT",
    "Batch",
    "UpdateContext",
    "actor_grads",
    "critic_grads",
    "critic_target",
    "metric_names",
    "update_actor",
    "update_critic",
    "update_networks",
    "update_networks_flat",
    "update_target",
    "update_temperature",
]

Array = jax.Array


@flax.struct.dataclass
class Batch:
    """A replay batch on the device (all float32).

    Attributes:
        observation: (B, O).
        action: (B, A).
        reward: (B,) normalised n-step reward.
        terminated: (B,) in {0, 1}; truncated transitions are not terminated and bootstrap.
        next_observation: (B, O) true successor observation.
    """

    observation: Array
    action: Array
    reward: Array
    terminated: Array
    next_observation: Array

    @classmethod
    def from_flat(cls, flat: Array, observation_dim: int) -> Batch:
        """Slices of a flat (B, 2O + A + 2) batch, columns as ``agent_common.buffer.flat_batch`` lays them out."""
        action_dim = flat.shape[1] - 2 * observation_dim - 2
        bounds = np.cumsum(flat_widths(observation_dim, action_dim))[:-1]
        observation, action, reward, terminated, next_observation = jnp.split(flat, bounds, axis=1)
        return cls(observation=observation, action=action, reward=reward[:, 0], terminated=terminated[:, 0],
                   next_observation=next_observation)  # (B, O), (B, A), (B,), (B,), (B, O)


@flax.struct.dataclass
class UpdateContext:
    """Per-agent constants of the update.

    The run-time scalars are traced f32 arrays (pytree leaves), so new values never recompile the update step;
    ``min_v``, ``max_v`` (they define the atoms) and ``backend`` are static pytree metadata.

    Attributes:
        discount: gamma ** n_step.
        target_entropy: temperature target H-bar.
        bc_alpha: actor BC weight (0 = off).
        tau: target EMA rate.
        min_v: lowest atom.
        max_v: highest atom.
        backend: resolved ``categorical_td_target`` backend ("jax" or "pallas"), chosen once outside jit.
    """

    discount: Array
    target_entropy: Array
    bc_alpha: Array
    tau: Array
    min_v: float = flax.struct.field(pytree_node=False, default=-5.0)
    max_v: float = flax.struct.field(pytree_node=False, default=5.0)
    backend: str = flax.struct.field(pytree_node=False, default="jax")

    @classmethod
    def create(cls, discount: float, target_entropy: float, bc_alpha: float, tau: float, min_v: float,
               max_v: float, backend: str) -> UpdateContext:
        """Builds the context with the scalars as f32 numpy arrays (jit takes them as f32 scalars; the agent commits
        them to its device; numpy builds them without a device program)."""
        f32 = functools.partial(np.asarray, dtype=np.float32)
        return cls(discount=f32(discount), target_entropy=f32(target_entropy), bc_alpha=f32(bc_alpha), tau=f32(tau),
                   min_v=float(min_v), max_v=float(max_v), backend=str(backend))


def metric_names(do_actor_update: bool) -> tuple[str, ...]:
    """The info keys of ``update_networks``: actor and temperature metrics (when due), then critic (the order of the
    agent's stacked metrics)."""
    actor = ("actor/loss", "actor/entropy", "actor/mean_action", "temperature/value", "temperature/loss")
    return (actor if do_actor_update else ()) + ("critic/loss", "critic/max_entropy_bonus")


def _step(state: RLTrainState, grads: Any, batch_stats: Any, project: bool = True) -> RLTrainState:
    """Adam step (the LR schedule reads the optimiser's own step count), then the weight projection."""
    state = state.apply_gradients(grads=grads, batch_stats=batch_stats)
    if project:
        state = state.replace(params=normalize_parameters(state.apply_fn, state.params, state.batch_stats))
    return state


def _value_and_grad(loss_fn: Any, params: Any,
                    loss_scale: LossScale | None) -> tuple[Array, Any, Any, Array | None]:
    """(loss, aux, gradients, found_inf) of ``loss_fn(params) -> (loss, aux)``.

    With a loss scale the gradients are those of ``loss * scale``, divided by the scale, and ``found_inf`` is a () bool
    (any gradient not finite); without one, plain gradients and None."""
    if loss_scale is None:
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return loss, aux, grads, None

    def scaled(p: Any) -> tuple[Array, tuple[Array, Any]]:
        loss, aux = loss_fn(p)
        return loss_scale.scale_loss(loss), (loss, aux)

    (_, (loss, aux)), grads = jax.value_and_grad(scaled, has_aux=True)(params)
    grads, found_inf = loss_scale.unscale(grads)
    return loss, aux, grads, found_inf


def _scaled_step(state: RLTrainState, grads: Any, batch_stats: Any, loss_scale: LossScale | None,
                 found_inf: Array | None) -> tuple[RLTrainState, LossScale | None]:
    """``_step``, then under a loss scale: the old state back where ``found_inf`` (the whole network: parameters,
    BN statistics, Adam moments and step count) and the scale updated."""
    new = _step(state, grads, batch_stats)
    if loss_scale is None:
        return new, None
    assert found_inf is not None
    return select_finite(found_inf, new, state), loss_scale.update(found_inf)


def _alpha(temperature: RLTrainState, params: Any = None) -> Array:
    return temperature.apply_fn({"params": temperature.params if params is None else params})  # (1,)


def actor_grads(actor: RLTrainState, critic: RLTrainState, temperature: RLTrainState, batch: Batch,
                ctx: UpdateContext, key: Array,
                loss_scale: LossScale | None = None) -> tuple[Any, Any, dict[str, Array], Array | None]:
    """The actor's gradients: BN-training forward on [s; s'], Q from the online critic in BN-eval mode, loss
    alpha log pi - min Q.

    Args:
        actor: actor state.
        critic: online critic state (held fixed: stop_gradient on its parameters, gradients flow through a only).
        temperature: temperature state (alpha is detached).
        batch: replay batch.
        ctx: update constants.
        key: PRNG key of the reparametrised sample.
        loss_scale: fp16 loss scale, or None.

    Returns:
        (gradients (unscaled), the actor's new batch_stats, info: ``actor/loss``, ``actor/entropy`` (-mean log pi),
        ``actor/mean_action`` f32 scalars, found_inf: () bool under a loss scale, else None).
    """
    batch_size = batch.observation.shape[0]
    obs_all = jnp.concatenate([batch.observation, batch.next_observation], axis=0)  # (2B, O)
    critic_vars = {"params": jax.lax.stop_gradient(critic.params), "batch_stats": critic.batch_stats}
    alpha = jax.lax.stop_gradient(_alpha(temperature))  # (1,)

    def loss_fn(params: Any) -> tuple[Array, tuple[Any, dict[str, Array]]]:
        (actions_all, log_probs_all), updates = actor.apply_fn(
            {"params": params, "batch_stats": actor.batch_stats}, obs_all, True, key, mutable=["batch_stats"]
        )  # (2B, A), (2B,)
        actions = actions_all[:batch_size]  # (B, A)
        log_probs = log_probs_all[:batch_size]  # (B,)
        qs, _ = critic.apply_fn(critic_vars, batch.observation, actions, False)  # (2, B)
        q = jnp.min(qs, axis=0)  # (B,)
        loss = jnp.mean(alpha * log_probs - q)  # ()
        # Optional BC term (arXiv 2306.02451). bc_alpha is traced, so the term is always built and weighted by 0
        # when off; that keeps bc_alpha a run-time value (no recompilation) at the cost of one tiny reduction.
        bc = jnp.mean(jnp.square(actions - batch.action))  # ()
        loss = loss + ctx.bc_alpha * jax.lax.stop_gradient(jnp.mean(jnp.abs(q))) * bc  # ()
        info = {"actor/loss": loss, "actor/entropy": -jnp.mean(log_probs), "actor/mean_action": jnp.mean(actions)}
        return loss, (updates["batch_stats"], info)

    _, (batch_stats, info), grads, found_inf = _value_and_grad(loss_fn, actor.params, loss_scale)
    return grads, batch_stats, info, found_inf


def update_actor(actor: RLTrainState, critic: RLTrainState, temperature: RLTrainState, batch: Batch,
                 ctx: UpdateContext, key: Array,
                 loss_scale: LossScale | None = None) -> tuple[RLTrainState, dict[str, Array], LossScale | None]:
    """Actor step on ``actor_grads`` (arguments as there), then the weight projection.

    Returns:
        (new actor state, ``actor_grads``' info, the updated loss scale or None). Under a loss scale, a step with
        non-finite gradients leaves the actor as it was.
    """
    grads, batch_stats, info, found_inf = actor_grads(actor, critic, temperature, batch, ctx, key, loss_scale)
    actor, loss_scale = _scaled_step(actor, grads, batch_stats, loss_scale, found_inf)
    return actor, info, loss_scale


def update_temperature(temperature: RLTrainState, entropy: Array,
                       ctx: UpdateContext) -> tuple[RLTrainState, dict[str, Array]]:
    """Temperature step: loss = alpha (H - H-bar), gradient w.r.t. log alpha (alpha falls when H > H-bar).

    Args:
        temperature: temperature state.
        entropy: () actor entropy from ``update_actor`` (detached here).
        ctx: update constants (target entropy).

    Returns:
        (new temperature state, ``temperature/value`` (alpha before the step) and ``temperature/loss``).
    """
    entropy = jax.lax.stop_gradient(entropy)

    def loss_fn(params: Any) -> tuple[Array, Array]:
        alpha = _alpha(temperature, params)  # (1,)
        return jnp.mean(alpha * (entropy - ctx.target_entropy)), alpha[0]

    (loss, alpha), grads = jax.value_and_grad(loss_fn, has_aux=True)(temperature.params)
    return _step(temperature, grads, temperature.batch_stats, project=False), {
        "temperature/value": alpha,
        "temperature/loss": loss,
    }


def critic_target(actor: RLTrainState, critic: RLTrainState, temperature: RLTrainState, batch: Batch,
                  ctx: UpdateContext, key: Array) -> tuple[Array, Array, Array, Any]:
    """The categorical TD target (stop_gradient), through the project's dispatching op.

    a' from the actor with running-stat BN; the EMA target critic runs in BN-training mode on the joint 2B batch
    [(s, a); (s', a')] and its second half feeds ``jax_impl.categorical_td_target``: the whole (E, 2B) / (E, 2B, K)
    outputs go in with ``row_offset=B``, so the Pallas kernel reads rows B..2B-1 in place (no slice, hence no copy,
    before its custom call; the jnp target slices inside, where XLA fuses it).

    Args:
        actor: actor state (already updated this step if it was an actor step).
        critic: critic state; its ``target_params`` / ``target_batch_stats`` are used.
        temperature: temperature state.
        batch: replay batch.
        ctx: update constants.
        key: PRNG key of a' ~ pi(s').

    Returns:
        target_probs (B, K), alpha log pi(a'|s') (B,), a' (B, A) (the online critic's joint batch reuses it), and
        the target critic's updated batch_stats.
    """
    batch_size = batch.observation.shape[0]
    next_actions, next_log_probs_pi = actor.apply_fn(
        {"params": actor.params, "batch_stats": actor.batch_stats}, batch.next_observation, False, key
    )  # (B, A), (B,)
    next_alpha_log_pi = _alpha(temperature) * next_log_probs_pi  # (B,)
    obs_all = jnp.concatenate([batch.observation, batch.next_observation], axis=0)  # (2B, O)
    act_all = jnp.concatenate([batch.action, next_actions], axis=0)  # (2B, A)
    (target_qs, target_log_probs), updates = critic.apply_fn(
        {"params": critic.target_params, "batch_stats": critic.target_batch_stats}, obs_all, act_all, True,
        mutable=["batch_stats"],
    )  # (2, 2B), (2, 2B, K)
    target_probs = parallel.rows_per_device(categorical_td_target)(  # each device's rows under data parallel
        target_qs,  # (2, 2B): rows B..2B-1 are Q(s', a')
        target_log_probs,  # (2, 2B, K)
        batch.reward,
        batch.terminated,
        next_alpha_log_pi,
        gamma=ctx.discount,
        min_v=ctx.min_v,
        max_v=ctx.max_v,
        backend=ctx.backend,
        row_offset=batch_size,
    )  # (B, K)
    outputs = jax.lax.stop_gradient((target_probs, next_alpha_log_pi, next_actions))  # (B, K), (B,), (B, A)
    return (*outputs, updates["batch_stats"])


def critic_grads(actor: RLTrainState, critic: RLTrainState, temperature: RLTrainState, batch: Batch,
                 ctx: UpdateContext, key: Array,
                 loss_scale: LossScale | None = None) -> tuple[Any, Any, dict[str, Array], Array | None, Any]:
    """The critic's gradients: cross-entropy of both members against the min-mean target distribution.

    Args:
        actor: actor state (already updated this step if it was an actor step).
        critic: critic state with its EMA target.
        temperature: temperature state.
        batch: replay batch.
        ctx: update constants.
        key: PRNG key of a' ~ pi(s').
        loss_scale: fp16 loss scale, or None.

    Returns:
        (gradients (unscaled), the critic's new batch_stats, info: ``critic/loss`` and ``critic/max_entropy_bonus``
        (max alpha log pi(a'|s')), found_inf: () bool under a loss scale, else None, the target critic's new
        batch_stats).
    """
    batch_size = batch.observation.shape[0]
    target_probs, next_alpha_log_pi, next_actions, target_batch_stats = critic_target(
        actor, critic, temperature, batch, ctx, key
    )  # (B, K), (B,), (B, A)
    obs_all = jnp.concatenate([batch.observation, batch.next_observation], axis=0)  # (2B, O)
    act_all = jnp.concatenate([batch.action, next_actions], axis=0)  # (2B, A) the same a' as the target

    def loss_fn(params: Any) -> tuple[Array, Any]:
        (_, log_probs_all), updates = critic.apply_fn(
            {"params": params, "batch_stats": critic.batch_stats}, obs_all, act_all, True, mutable=["batch_stats"]
        )  # (2, 2B, K)
        log_probs = log_probs_all[:, :batch_size]  # (2, B, K)
        ce = -jnp.sum(target_probs[None] * log_probs, axis=-1)  # (2, B)
        return jnp.mean(ce), updates["batch_stats"]

    loss, batch_stats, grads, found_inf = _value_and_grad(loss_fn, critic.params, loss_scale)
    info = {"critic/loss": loss, "critic/max_entropy_bonus": jnp.max(next_alpha_log_pi)}
    return grads, batch_stats, info, found_inf, target_batch_stats


def update_critic(actor: RLTrainState, critic: RLTrainState, temperature: RLTrainState, batch: Batch,
                  ctx: UpdateContext, key: Array,
                  loss_scale: LossScale | None = None) -> tuple[RLTrainState, dict[str, Array], LossScale | None]:
    """Critic step on ``critic_grads`` (arguments as there), then the weight projection.

    Returns:
        (new critic state, ``critic_grads``' info, the updated loss scale or None). Under a loss scale, a step with
        non-finite gradients leaves the online critic as it was.
    """
    grads, batch_stats, info, found_inf, target_batch_stats = critic_grads(actor, critic, temperature, batch, ctx,
                                                                           key, loss_scale)
    critic, loss_scale = _scaled_step(critic, grads, batch_stats, loss_scale, found_inf)
    return critic.replace(target_batch_stats=target_batch_stats), info, loss_scale


def update_target(critic: RLTrainState, tau: Array) -> RLTrainState:
    """EMA of parameters only: target <- target + tau (online - target) (torch ``lerp_`` with weight < 0.5).

    BN running stats are not averaged, and the target is never re-projected.
    """
    target = jax.tree_util.tree_map(lambda t, p: t + tau * (p - t), critic.target_params, critic.params)
    return critic.replace(target_params=target)


@functools.partial(jax.jit, static_argnames=("do_actor_update",), donate_argnums=(0,))
def update_networks(state: AgentState, batch: Batch, ctx: UpdateContext, *,
                    do_actor_update: bool) -> tuple[AgentState, dict[str, Array]]:
    """The whole FlashSAC update step in one jit: [actor -> temperature] (when due) -> critic -> target EMA.

    ``do_actor_update`` is a static flag (so at most two executables) rather than a ``lax.cond``: XLA:GPU reads a
    conditional's predicate back to the host, which would add a device sync to every update, while the host already
    knows the schedule (``update_step % actor_update_period``) without reading the device.

    Args:
        state: AgentState (donated: its buffers are reused for the result).
        batch: replay batch.
        ctx: update constants (scalars traced; min_v / max_v / backend static).
        do_actor_update: whether this step first updates the actor and the temperature.

    Returns:
        (new AgentState, info dict of f32 scalars with upstream's metric names).
    """
    batch = parallel.constrain_batch(batch)  # under agent_jax.parallel.data_parallel: rows split over the devices
    rng, actor_key, critic_key = jax.random.split(state.rng, 3)
    actor, temperature, loss_scale = state.actor, state.temperature, state.loss_scale
    info: dict[str, Array] = {}
    if do_actor_update:
        actor, actor_info, loss_scale = update_actor(actor, state.critic, temperature, batch, ctx, actor_key,
                                                     loss_scale)
        temperature, temperature_info = update_temperature(temperature, actor_info["actor/entropy"], ctx)
        info.update(actor_info)
        info.update(temperature_info)
    critic, critic_info, loss_scale = update_critic(actor, state.critic, temperature, batch, ctx, critic_key,
                                                    loss_scale)
    info.update(critic_info)
    critic = update_target(critic, ctx.tau)
    state = parallel.constrain_replicated(AgentState(actor=actor, critic=critic, temperature=temperature, rng=rng,
                                                     loss_scale=loss_scale))
    return state, info


UPDATE_FLAT_JIT: dict[str, Any] = {"static_argnames": ("observation_dim", "do_actor_update"), "donate_argnums": (0,)}
"""``jax.jit``'s arguments of ``update_networks_flat`` (a benchmark compiles the same function with other XLA
options)."""


@functools.partial(jax.jit, **UPDATE_FLAT_JIT)
def update_networks_flat(state: Any, flat: Array, ctx: UpdateContext, *, observation_dim: int,
                         do_actor_update: bool) -> tuple[Any, Array]:
    """``update_networks`` on a flat batch, with the metrics stacked: what the agent runs each update.

    The twin of the torch agent's ``_update_step``: the batch arrives in one host -> device copy
    (``agent_common.buffer.flat_batch``) and the metrics go back in one read-back.

    Args:
        state: AgentState, or the AgentState as a ``PackedTree`` (``agent_jax.packing``, as ``agent_jax.step.env_step``
            takes it: a few arrays to dispatch instead of every leaf; unpacked and packed again inside) (donated).
        flat: (B, 2O + A + 2) batch, columns in ``agent_common.buffer.UPDATE_KEYS`` order.
        ctx: update constants.
        observation_dim: O (static).
        do_actor_update: whether this step first updates the actor and the temperature (static).

    Returns:
        (new AgentState in the form it came in, (M,) f32 metrics in ``metric_names(do_actor_update)`` order).
    """
    layout = state.layout if isinstance(state, PackedTree) else None
    if layout is not None:
        state = unpack(state)
    state, info = update_networks(state, Batch.from_flat(flat, observation_dim), ctx, do_actor_update=do_actor_update)
    if layout is not None:
        state = pack_like(state, layout)
    names = metric_names(do_actor_update)
    if set(info) != set(names):  # trace time: keeps metric_names in step with update_networks
        raise AssertionError(f"update_networks returned metrics {sorted(info)}, metric_names says {names}")
    return state, jnp.stack([info[k] for k in names])
