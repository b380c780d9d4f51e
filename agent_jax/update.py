"""Pure FlashSAC update functions (FLASHSAC.md sections 3-5, 9) and the one jitted update step that chains them."""

from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from agent_jax.networks import normalize_parameters
from agent_jax.state import AgentState, RLTrainState
from jax_impl import categorical_td_target

__all__ = [
    "Batch",
    "UpdateScalars",
    "add_prefix_to_keys",
    "compute_critic_target",
    "update_actor",
    "update_critic",
    "update_networks",
    "update_target",
    "update_temperature",
]

Array = jax.Array
Batch = dict[str, Array]
"""One replay batch: observation (B, O), action (B, A), reward (B,) *normalised*, terminated (B,) in {0, 1},
next_observation (B, O); all float32."""


@flax.struct.dataclass
class UpdateScalars:
    """Run-time scalars of the update, passed as traced f32 arrays so that changing them never recompiles.

    Attributes:
        gamma_n: gamma ** n_step, the discount of the n-step target.
        tau: target EMA rate.
        bc_alpha: weight of the optional BC term of the actor loss (0 = off).
        target_entropy: temperature target H-bar.
    """

    gamma_n: Array
    tau: Array
    bc_alpha: Array
    target_entropy: Array

    @classmethod
    def create(cls, gamma_n: float, tau: float, bc_alpha: float, target_entropy: float) -> UpdateScalars:
        f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
        return cls(gamma_n=f32(gamma_n), tau=f32(tau), bc_alpha=f32(bc_alpha), target_entropy=f32(target_entropy))


def add_prefix_to_keys(d: dict[str, Any], prefix: str) -> dict[str, Any]:
    """{"loss": x} -> {"<prefix>/loss": x} (upstream's metric naming)."""
    return {f"{prefix}/{k}": v for k, v in d.items()}


def _step_and_project(state: RLTrainState, grads: Any, batch_stats: Any) -> RLTrainState:
    """Adam step (the LR schedule reads the optimiser's own count), then the weight projection on the new params."""
    state = state.apply_gradients(grads=grads, batch_stats=batch_stats)
    return state.replace(params=normalize_parameters(state.apply_fn, state.params, state.batch_stats))


def _alpha(temperature: RLTrainState) -> Array:
    return temperature.apply_fn({"params": temperature.params})  # (1,)


def update_actor(
    actor: RLTrainState,
    critic: RLTrainState,
    temperature: RLTrainState,
    batch: Batch,
    key: Array,
    bc_alpha: Array,
) -> tuple[RLTrainState, dict[str, Array]]:
    """One actor step: maximise min-Q(s, a~pi) - alpha log pi on the batch.

    The actor runs on [s; s'] in BN-training mode (the loss uses the first half); Q comes from the online critic in
    BN-eval mode with its parameters held fixed (stop_gradient), so the gradient flows only through the action.

    Returns:
        (new actor state, {"actor/loss", "actor/entropy", "actor/mean_action"}: f32 scalars).
    """
    obs = batch["observation"]  # (B, O)
    batch_size = obs.shape[0]
    actor_obs_all = jnp.concatenate([obs, batch["next_observation"]], axis=0)  # (2B, O)
    critic_vars = {"params": jax.lax.stop_gradient(critic.params), "batch_stats": critic.batch_stats}
    temp_value = jax.lax.stop_gradient(_alpha(temperature))  # (1,)

    def loss_fn(params: Any) -> tuple[Array, tuple[Any, dict[str, Array]]]:
        (actions_all, info), updates = actor.apply_fn(
            {"params": params, "batch_stats": actor.batch_stats}, actor_obs_all, True, key, mutable=["batch_stats"]
        )
        actions = actions_all[:batch_size]  # (B, A)
        log_probs = info["log_prob"][:batch_size]  # (B,)
        qs, _ = critic.apply_fn(critic_vars, obs, actions, False)  # (2, B)
        q = jnp.minimum(qs[0], qs[1])  # (B,)
        loss = jnp.mean(log_probs * temp_value - q)
        # Optional BC term (arXiv 2306.02451); multiplied by 0 when off so that bc_alpha stays a traced scalar.
        bc_loss = jnp.mean(jnp.square(actions - batch["action"]))
        loss = loss + bc_alpha * jax.lax.stop_gradient(jnp.mean(jnp.abs(q))) * bc_loss
        metrics = {"loss": loss, "entropy": -jnp.mean(log_probs), "mean_action": jnp.mean(actions)}
        return loss, (updates["batch_stats"], metrics)

    grads, (batch_stats, metrics) = jax.grad(loss_fn, has_aux=True)(actor.params)
    actor = _step_and_project(actor, grads, batch_stats)
    return actor, add_prefix_to_keys(metrics, "actor")


def update_temperature(
    temperature: RLTrainState, entropy: Array, target_entropy: Array
) -> tuple[RLTrainState, dict[str, Array]]:
    """alpha step on loss = alpha * (H - H-bar), gradient w.r.t. log alpha; H is the actor's (detached) entropy.

    Returns:
        (new temperature state, {"temperature/value", "temperature/loss"}: f32 scalars, value before the step).
    """
    entropy = jax.lax.stop_gradient(entropy)

    def loss_fn(params: Any) -> tuple[Array, Array]:
        value = temperature.apply_fn({"params": params})  # (1,)
        loss = jnp.sum(value * jnp.mean(entropy - target_entropy))
        return loss, value[0]

    grads, value = jax.grad(loss_fn, has_aux=True)(temperature.params)
    loss = value * jnp.mean(entropy - target_entropy)
    temperature = temperature.apply_gradients(grads=grads)
    return temperature, add_prefix_to_keys({"value": value, "loss": loss}, "temperature")


def compute_critic_target(
    actor: RLTrainState,
    critic: RLTrainState,
    temperature: RLTrainState,
    batch: Batch,
    key: Array,
    gamma_n: Array,
    min_v: float,
    max_v: float,
    backend: str,
) -> tuple[Array, Array, Array, Any]:
    """Target distribution of the critic update (FLASHSAC.md section 3, step 1), under stop_gradient.

    a' ~ pi(s') with BN on running stats; the target critic runs on [(s, a); (s', a')] in BN-training mode and its
    (s', a') half feeds ``jax_impl.categorical_td_target`` (min-Q selection, alpha log pi shift, projection).

    Returns:
        target_probs (B, K), next_actions a' (B, A), next_alpha_log_pi (B,), and the target critic's updated
        batch_stats; all gradient-free.
    """
    obs, next_obs = batch["observation"], batch["next_observation"]  # (B, O)
    batch_size = obs.shape[0]
    next_actions, info = actor.apply_fn(
        {"params": actor.params, "batch_stats": actor.batch_stats}, next_obs, False, key
    )  # (B, A)
    next_alpha_log_pi = _alpha(temperature)[0] * info["log_prob"]  # (B,)
    obs_all = jnp.concatenate([obs, next_obs], axis=0)  # (2B, O)
    act_all = jnp.concatenate([batch["action"], next_actions], axis=0)  # (2B, A)
    (qs_all, q_info), updates = critic.apply_fn(
        {"params": critic.target_params, "batch_stats": critic.target_batch_stats}, obs_all, act_all, True,
        mutable=["batch_stats"],
    )  # (2, 2B), (2, 2B, K)
    next_qs = qs_all[:, batch_size:]  # (2, B)
    next_log_probs = q_info["log_prob"][:, batch_size:]  # (2, B, K)
    target_probs = categorical_td_target(
        next_qs, next_log_probs, batch["reward"], batch["terminated"], next_alpha_log_pi,
        gamma=gamma_n, min_v=min_v, max_v=max_v, backend=backend,
    )  # (B, K)
    outputs = jax.lax.stop_gradient((target_probs, next_actions, next_alpha_log_pi))  # (B, K), (B, A), (B,)
    return (*outputs, updates["batch_stats"])


def update_critic(
    actor: RLTrainState,
    critic: RLTrainState,
    temperature: RLTrainState,
    batch: Batch,
    key: Array,
    gamma_n: Array,
    min_v: float,
    max_v: float,
    backend: str,
) -> tuple[RLTrainState, dict[str, Array]]:
    """One critic step: cross-entropy of both ensemble members against the min-Q target distribution.

    The online critic runs on the same joint 2B batch in BN-training mode; the loss uses the (s, a) half.

    Returns:
        (new critic state, {"critic/loss", "critic/max_entropy_bonus"}: f32 scalars).
    """
    batch_size = batch["observation"].shape[0]
    target_probs, next_actions, next_alpha_log_pi, target_batch_stats = compute_critic_target(
        actor, critic, temperature, batch, key, gamma_n, min_v, max_v, backend
    )  # (B, K), (B, A), (B,)
    obs_all = jnp.concatenate([batch["observation"], batch["next_observation"]], axis=0)  # (2B, O)
    act_all = jnp.concatenate([batch["action"], next_actions], axis=0)  # (2B, A)

    def loss_fn(params: Any) -> tuple[Array, Any]:
        (_, info), updates = critic.apply_fn(
            {"params": params, "batch_stats": critic.batch_stats}, obs_all, act_all, True, mutable=["batch_stats"]
        )
        pred_log_probs = info["log_prob"][:, :batch_size]  # (2, B, K)
        ce = -jnp.sum(target_probs[None] * pred_log_probs, axis=-1)  # (2, B)
        return jnp.mean(ce), updates["batch_stats"]

    (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(critic.params)
    critic = _step_and_project(critic, grads, batch_stats)
    critic = critic.replace(target_batch_stats=target_batch_stats)
    metrics = {"loss": loss, "max_entropy_bonus": jnp.max(next_alpha_log_pi)}
    return critic, add_prefix_to_keys(metrics, "critic")


def update_target(critic: RLTrainState, tau: Array) -> RLTrainState:
    """EMA of the parameters only: target <- target + tau (online - target) (torch lerp_ with weight < 0.5)."""
    target = jax.tree_util.tree_map(lambda t, p: t + tau * (p - t), critic.target_params, critic.params)
    return critic.replace(target_params=target)


@functools.partial(jax.jit, static_argnames=("do_actor_update", "min_v", "max_v", "backend"), donate_argnums=(0,))
def update_networks(
    state: AgentState,
    batch: Batch,
    scalars: UpdateScalars,
    *,
    do_actor_update: bool,
    min_v: float,
    max_v: float,
    backend: str,
) -> tuple[AgentState, dict[str, Array]]:
    """The whole FlashSAC update step in one jit: [actor -> temperature] (when due) -> critic -> target EMA.

    ``do_actor_update`` is static (two executables at most) rather than a ``lax.cond``: XLA:GPU evaluates a
    conditional's predicate on the host, which would add a device sync to every update. The host knows the
    schedule (update_step % actor_update_period) without reading the device.

    Args:
        state: AgentState (donated: its buffers are reused for the result).
        batch: one replay batch (see ``Batch``).
        scalars: traced run-time scalars (gamma ** n_step, tau, bc_alpha, target entropy).
        do_actor_update: whether this step updates the actor and the temperature first.
        min_v, max_v: critic support bounds (static; they define the atoms).
        backend: resolved ``categorical_td_target`` backend, "jax" or "pallas" (static, chosen outside jit).

    Returns:
        (new AgentState, info dict of f32 scalars with the upstream metric names).
    """
    rng, actor_key, critic_key = jax.random.split(state.rng, 3)
    actor, temperature = state.actor, state.temperature
    info: dict[str, Array] = {}
    if do_actor_update:
        actor, actor_info = update_actor(actor, state.critic, temperature, batch, actor_key, scalars.bc_alpha)
        temperature, temperature_info = update_temperature(
            temperature, actor_info["actor/entropy"], scalars.target_entropy
        )
        info.update(actor_info)
        info.update(temperature_info)
    critic, critic_info = update_critic(
        actor, state.critic, temperature, batch, critic_key, scalars.gamma_n, min_v, max_v, backend
    )
    info.update(critic_info)
    critic = update_target(critic, scalars.tau)
    return AgentState(actor=actor, critic=critic, temperature=temperature, rng=rng), info
