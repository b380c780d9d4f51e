"""FlashSAC update steps as free functions returning info dicts with upstream's metric names (docs/flashsac.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from agent_torch.amp import DeviceLossScaler
from agent_torch.networks import normalize_parameters
from agent_torch.state import Network
from torch_impl import categorical_td_target

__all__ = ["Batch", "UpdateContext", "UpdateFunctions", "actor_action", "actor_loss", "critic_loss", "finish_critic",
           "temperature_loss", "update_actor", "update_critic", "update_target", "update_temperature"]


@dataclass(frozen=True)
class Batch:
    """A replay batch on the training device (all float32).

    Attributes:
        observation: (B, O).
        action: (B, A).
        reward: (B,) normalised n-step reward.
        terminated: (B,) in {0, 1}; truncated transitions are not terminated and bootstrap.
        next_observation: (B, O) true successor observation.
        observation_all: (2B, O) [observation; next_observation], or None (then each step concatenates them
            itself); the agent builds it once per update, for the actor, the target and the critic.
    """

    observation: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    next_observation: torch.Tensor
    observation_all: torch.Tensor | None = None

    def joint_observation(self) -> torch.Tensor:
        """(2B, O) [observation; next_observation] (``observation_all`` when given)."""
        if self.observation_all is not None:
            return self.observation_all
        return torch.cat([self.observation, self.next_observation], dim=0)


@dataclass(frozen=True)
class UpdateContext:
    """Per-agent constants of the update.

    Attributes:
        discount: gamma ** n_step.
        min_v: lowest atom.
        max_v: highest atom.
        target_entropy: temperature target H̄.
        bc_alpha: actor BC weight (0 = off).
        tau: target EMA rate.
        amp_dtype: autocast dtype around forwards and losses (``torch.bfloat16`` / ``torch.float16``), or None
            for fp32 (``agent_torch.amp.resolve_amp_dtype``).
        device_type: ``"cuda"`` or ``"cpu"`` (autocast device).
        backend: ``agent.categorical_target_backend``.
        strict: ``agent.categorical_target_strict``.
        autocast_cache: autocast's cache of cast weights; off when the update is captured in a CUDA graph (the
            cache would hold tensors created during capture).
    """

    discount: float
    min_v: float
    max_v: float
    target_entropy: float
    bc_alpha: float
    tau: float
    amp_dtype: torch.dtype | None
    device_type: str
    backend: str
    strict: bool
    autocast_cache: bool = True

    def autocast(self) -> torch.autocast:
        dtype = self.amp_dtype if self.amp_dtype is not None else torch.bfloat16  # unused when disabled
        return torch.autocast(self.device_type, dtype=dtype, enabled=self.amp_dtype is not None,
                              cache_enabled=self.autocast_cache)


def _step(net: Network, loss: torch.Tensor, scaler: DeviceLossScaler | None, project: bool = True) -> None:
    """Backward, optimizer step (through the shared device loss scaler if given), then weight projection (unless
    ``project`` is False: the caller projects, ``finish_critic``).

    The LR scheduler is stepped by the caller after the update (outside any captured CUDA graph): the agent steps
    the scheduler of every network this update stepped. With data-parallel replicas, ``net.grad_sync`` averages
    the gradients between backward and step (the scaled ones under AMP, so an overflow on any replica is seen by
    all).
    """
    assert net.optimizer is not None and net.scheduler is not None
    net.optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale_loss(loss).backward()
        if net.grad_sync is not None:
            net.grad_sync()
        scaler.step(net.optimizer, net.module.parameters())  # skipped on the device on inf/NaN gradients
    else:
        loss.backward()
        if net.grad_sync is not None:
            net.grad_sync()
        net.optimizer.step()
    if project:
        net.normalize()


def _frozen_critic(critic: Network, observation: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The online critic's BN-eval forward with its parameters' gradients stopped (the action keeps its gradient).

    Eagerly the parameters' ``requires_grad`` is switched off around the call; a compiled update (which cannot
    switch it) calls the module on detached parameters (``torch.func.functional_call``): the same operations.
    """
    if torch.compiler.is_compiling():
        params = {name: p.detach() for name, p in critic.module.named_parameters()}
        return torch.func.functional_call(critic.module, params, (observation, action), {"training": False})
    critic.module.requires_grad_(False)
    try:
        return critic.apply(observation, action, training=False)
    finally:
        critic.module.requires_grad_(True)


def actor_loss(actor: Network, critic: Network, temperature: Network, batch: Batch,
               ctx: UpdateContext) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The actor step's forward: BN-training forward on [s; s'], Q from the online critic in BN-eval mode (its
    parameters frozen), loss α·log π − min Q (α detached).

    Returns:
        The () loss and ``actor/loss``, ``actor/entropy`` (−mean log π), ``actor/mean_action`` as 0-d tensors.
    """
    batch_size = batch.observation.shape[0]
    with ctx.autocast():
        obs_all = batch.joint_observation()  # (2B, O)
        actions_all, log_probs_all = actor.apply(obs_all, training=True)  # (2B, A), (2B,)
        actions = actions_all[:batch_size]  # (B, A)
        log_probs = log_probs_all[:batch_size]  # (B,)
        qs, _ = _frozen_critic(critic, batch.observation, actions)  # (2, B)
        q = qs.min(dim=0).values  # (B,)
        alpha = temperature.module().detach()  # (1,)
        loss = (alpha * log_probs - q).mean()  # ()
        if ctx.bc_alpha > 0:
            bc = ((actions - batch.action) ** 2).mean()  # ()
            loss = loss + ctx.bc_alpha * q.abs().mean().detach() * bc  # ()
    return loss, {
        "actor/loss": loss.detach(),
        "actor/entropy": -log_probs.detach().float().mean(),
        "actor/mean_action": actions.detach().float().mean(),
    }


def update_actor(
    actor: Network,
    critic: Network,
    temperature: Network,
    batch: Batch,
    ctx: UpdateContext,
    scaler: DeviceLossScaler | None,
    loss_fn: Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]] = actor_loss,
) -> dict[str, torch.Tensor]:
    """Actor step: ``actor_loss``, then backward, optimizer step and weight projection.

    Args:
        actor: actor bundle.
        critic: online critic bundle (parameters frozen during this step).
        temperature: temperature bundle (α is detached).
        batch: replay batch.
        ctx: update constants.
        scaler: shared device loss scaler (fp16 AMP) or None.
        loss_fn: ``actor_loss`` or its compiled form (``agent_torch.compiled``).

    Returns:
        ``actor/loss``, ``actor/entropy`` (−mean log π), ``actor/mean_action`` as 0-d tensors.
    """
    loss, info = loss_fn(actor, critic, temperature, batch, ctx)
    _step(actor, loss, scaler)
    return info


def temperature_loss(temperature: Network, entropy: torch.Tensor,
                     ctx: UpdateContext) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The temperature step's forward, outside autocast: loss = α·(H − H̄), its gradient w.r.t. log α.

    Returns:
        The () loss and ``temperature/value`` (α before the step), ``temperature/loss``.
    """
    alpha = temperature.module()  # (1,)
    loss = (alpha * (entropy.detach().float() - ctx.target_entropy)).mean()  # ()
    return loss, {"temperature/value": alpha.detach()[0], "temperature/loss": loss.detach()}


def update_temperature(
    temperature: Network,
    entropy: torch.Tensor,
    ctx: UpdateContext,
    loss_fn: Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]] = temperature_loss,
) -> dict[str, torch.Tensor]:
    """Temperature step, never scaled: ``temperature_loss``, then backward and optimizer step.

    Args:
        temperature: temperature bundle.
        entropy: () detached actor entropy from ``update_actor``.
        ctx: update constants (target entropy).
        loss_fn: ``temperature_loss`` or its compiled form.

    Returns:
        ``temperature/value`` (α before the step) and ``temperature/loss``.
    """
    loss, info = loss_fn(temperature, entropy, ctx)
    _step(temperature, loss, None)
    return info


def critic_target(
    actor: Network, target_critic: Network, temperature: Network, batch: Batch, ctx: UpdateContext
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The categorical TD target (no grad), through the project's dispatching op.

    a' from the actor with running-stat BN; the target critic runs in BN-training mode on the joint 2B batch
    [(s, a); (s', a')] and its second half feeds ``torch_impl.categorical_td_target``.

    Returns:
        target_probs (B, K) fp32, α·log π(a'|s') (B,) and a' (B, A) (the critic's joint batch reuses it).
    """
    return _critic_target(actor, target_critic, temperature, batch, ctx)[:3]


def _critic_target(
    actor: Network, target_critic: Network, temperature: Network, batch: Batch, ctx: UpdateContext
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``critic_target``, plus the joint (2B, A) actions [a; a'] (the online critic's joint batch)."""
    batch_size = batch.observation.shape[0]
    with torch.no_grad():
        next_actions, next_log_probs_pi = actor.apply(batch.next_observation, training=False)  # (B, A), (B,)
        if actor.compiled_forward:  # a compiled forward's outputs may be CUDA-graph buffers it overwrites
            next_actions = next_actions.clone()  # (B, A)
            next_log_probs_pi = next_log_probs_pi.clone()  # (B,)
        alpha = temperature.module()  # (1,)
        next_alpha_log_pi = (alpha * next_log_probs_pi).float()  # (B,)
        obs_all = batch.joint_observation()  # (2B, O)
        act_all = torch.cat([batch.action, next_actions.to(batch.action.dtype)], dim=0)  # (2B, A)
        target_qs, target_log_probs = target_critic.apply(obs_all, act_all, training=True)  # (2, 2B), (2, 2B, K)
        next_qs = target_qs[:, batch_size:].float()  # (2, B) strided view
        next_log_probs = target_log_probs[:, batch_size:].float()  # (2, B, K) non-contiguous view
        target_probs = categorical_td_target(
            next_qs,
            next_log_probs,
            batch.reward,
            batch.terminated,
            next_alpha_log_pi,
            gamma=ctx.discount,
            min_v=ctx.min_v,
            max_v=ctx.max_v,
            backend=ctx.backend,
            strict=ctx.strict,
        )  # (B, K)
    return target_probs, next_alpha_log_pi, next_actions, act_all


def critic_loss(actor: Network, critic: Network, target_critic: Network, temperature: Network, batch: Batch,
                ctx: UpdateContext) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The critic step's forward: the categorical target (``critic_target``), then the cross-entropy of both
    members against it on the online critic's BN-training forward of the joint batch.

    Returns:
        The () loss and ``critic/loss``, ``critic/max_entropy_bonus`` (max α·log π(a'|s')).
    """
    batch_size = batch.observation.shape[0]
    with ctx.autocast():
        target_probs, next_alpha_log_pi, _, act_all = _critic_target(
            actor, target_critic, temperature, batch, ctx
        )  # (B, K), (B,), (B, A), (2B, A) the same a' as the target
        obs_all = batch.joint_observation()  # (2B, O)
        _, log_probs_all = critic.apply(obs_all, act_all, training=True)  # (2, 2B, K)
        log_probs = log_probs_all[:, :batch_size].float()  # (2, B, K)
        ce = -(target_probs.unsqueeze(0) * log_probs).sum(dim=-1)  # (2, B)
        loss = ce.mean()  # ()
    return loss, {"critic/loss": loss.detach(), "critic/max_entropy_bonus": next_alpha_log_pi.max()}


def update_critic(
    actor: Network,
    critic: Network,
    target_critic: Network,
    temperature: Network,
    batch: Batch,
    ctx: UpdateContext,
    scaler: DeviceLossScaler | None,
    loss_fn: Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]] = critic_loss,
    project: bool = True,
) -> dict[str, torch.Tensor]:
    """Critic step: ``critic_loss`` (cross-entropy of both members against the min-mean target distribution), then
    backward, optimizer step and, if ``project``, weight projection (else the caller's ``finish_critic`` does it).

    Args:
        actor: actor bundle (already updated this step if it was an actor step).
        critic: online critic bundle.
        target_critic: EMA target critic bundle.
        temperature: temperature bundle.
        batch: replay batch.
        ctx: update constants.
        scaler: shared device loss scaler (fp16 AMP) or None.
        loss_fn: ``critic_loss`` or its compiled form.
        project: project the critic's weights here.

    Returns:
        ``critic/loss`` and ``critic/max_entropy_bonus`` (max α·log π(a'|s')).
    """
    loss, info = loss_fn(actor, critic, target_critic, temperature, batch, ctx)
    _step(critic, loss, scaler, project=project)
    return info


@torch.no_grad()
def update_target(critic: Network, target_critic: Network, tau: float) -> None:
    """EMA of parameters only: θ̄ ← θ̄ + τ(θ − θ̄). BN running stats are not averaged; no projection."""
    target_params = list(target_critic.module.parameters())
    online_params = list(critic.module.parameters())
    torch._foreach_lerp_(target_params, online_params, tau)


def finish_critic(critic: Network, target_critic: Network, tau: float) -> None:
    """The end of every update: the critic's weight projection after its optimizer step, then the target EMA
    (``update_target``); one piece, so a compiled update fuses the two."""
    critic.normalize()
    update_target(critic, target_critic, tau)


def actor_action(actor: torch.nn.Module, obs: torch.Tensor, eps: torch.Tensor | None = None) -> torch.Tensor:
    """tanh(μ) or tanh(μ + σ·eps) for (E, O) observations, as (E, A) (scaled to the env's bounds with
    ``agent.actor_head=upstream``); BN on running statistics."""
    mean, std = actor.get_mean_and_std(obs, training=False)  # (E, A), (E, A)
    return actor.scale_action(torch.tanh(mean) if eps is None else torch.tanh(mean + std * eps))


@dataclass(frozen=True)
class UpdateFunctions:
    """The pieces of one update and of action selection that ``agent.compile_scope=update`` compiles
    (``agent_torch.compiled``); these defaults run them eagerly. The backward passes, the optimizer steps (fused
    Adam) and any gradient all-reduce run between them, outside."""

    actor_loss: Callable[..., Any] = actor_loss
    temperature_loss: Callable[..., Any] = temperature_loss
    critic_loss: Callable[..., Any] = critic_loss
    finish_critic: Callable[..., Any] = finish_critic
    project: Callable[..., Any] = normalize_parameters  # the actor's projection (``Network.project_fn``)
    act: Callable[..., Any] = actor_action
