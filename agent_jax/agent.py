"""Thin JAX FlashSAC agent: owns the explicit state and calls the pure functions of update.py; no maths here."""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from agent_common.checkpoint import atomic_pickle, load_pickle
from agent_common.config import Config, target_entropy
from agent_common.noise import ZetaNoise
from agent_jax.state import AgentState, build_networks, create_agent_state
from agent_jax.update import Batch, UpdateScalars, update_networks
from jax_impl import backend_info, dispatch_stats, resolve_backend

__all__ = ["FlashSACAgent"]

log = logging.getLogger("flashsac.agent_jax")

AGENT_FILE = "agent_jax.pkl"  # one pickle of numpy arrays / Python scalars per checkpoint directory
UPDATE_KEYS = ("observation", "action", "reward", "terminated", "next_observation")


class FlashSACAgent:
    """JAX FlashSAC agent (FLASHSAC.md): acting with zeta-repeated noise, the jitted update step, checkpoints.

    Args:
        cfg: the resolved config (``agent_common.config.load_config(..., framework="jax")``).
        observation_dim: O.
        action_dim: A.
        action_low: (A,) lower bounds of the (rescaled) action space, for the target entropy.
        action_high: (A,) upper bounds.
        num_envs: number of training envs (rows of the exploration noise).

    Raises:
        ValueError: ``agent.use_amp=true`` (not implemented in JAX) or an asymmetric observation.
        jax_impl.BackendUnavailable: strict backend selection that cannot be met.
    """

    def __init__(self, cfg: Config, observation_dim: int, action_dim: int, action_low: Any, action_high: Any,
                 num_envs: int = 1) -> None:
        a = cfg.agent
        if a.use_amp:
            raise ValueError("agent.use_amp=true is not supported by the JAX agent (the CPU-sim recipe is fp32); "
                             "set agent.use_amp=false")
        self.cfg = cfg
        self.observation_dim = observation_dim
        self.action_dim = action_dim
        self.min_v = float(a.critic_min_v)
        self.max_v = float(a.critic_max_v)
        self.backend = resolve_backend(a.categorical_target_backend, strict=a.categorical_target_strict,
                                       num_bins=a.critic_num_bins)
        self.backend_decision: dict[str, Any] = backend_info(num_bins=a.critic_num_bins,
                                                             backend=a.categorical_target_backend)["decision"]
        self.target_entropy = target_entropy(a, action_low, action_high)
        self.scalars = UpdateScalars.create(
            gamma_n=float(a.gamma) ** int(a.n_step),
            tau=a.critic_target_update_tau,
            bc_alpha=a.actor_bc_alpha,
            target_entropy=self.target_entropy,
        )
        actor_def, _, _ = build_networks(a, observation_dim, action_dim)
        self._policy = jax.jit(functools.partial(policy_actions, actor_def), static_argnames=("deterministic",))
        self.state: AgentState = create_agent_state(a, observation_dim, action_dim, seed=int(a.seed))
        # Exploration noise from its own numpy generator (seed + 1 keeps it independent of the buffer's sampler).
        self.noise = ZetaNoise(num_envs, action_dim, a.actor_noise_zeta_mu, a.actor_noise_zeta_max,
                               seed=int(a.seed) + 1)
        self.update_step = 0
        self._infos: list[dict[str, jax.Array]] = []  # device scalars of the current logging window
        log.info("categorical_td_target backend: %s (%s)", self.backend, self.backend_decision.get("reason"))

    # ------------------------------------------------------------------------------------------------- acting

    def sample_actions(self, observations: np.ndarray, training: bool) -> np.ndarray:
        """Policy actions with BN on running statistics.

        Args:
            observations: (E, O) float32.
            training: True -> tanh(mean + std * eps) with the zeta-repeated noise (advances the noise state);
                False -> tanh(mean) (evaluation; the noise state is untouched).

        Returns:
            (E, A) float32 numpy actions in [-1, 1].
        """
        obs = np.asarray(observations, dtype=np.float32)  # (E, O)
        if training:
            eps = self.noise.sample()  # (E, A)
            if eps.shape[0] != obs.shape[0]:
                raise ValueError(f"noise has {eps.shape[0]} rows for {obs.shape[0]} observations")
        else:
            eps = np.zeros((obs.shape[0], self.action_dim), np.float32)  # (E, A) unused
        actions = self._policy(self.state.actor.params, self.state.actor.batch_stats, obs, eps,
                               deterministic=not training)
        return np.asarray(actions, dtype=np.float32)

    # ------------------------------------------------------------------------------------------------- update

    def update(self, batch: dict[str, np.ndarray]) -> None:
        """One FlashSAC update step on a sampled batch whose reward is already normalised.

        No host sync: the info scalars stay on the device until ``get_metrics``.

        Args:
            batch: observation (B, O), action (B, A), reward (B,) normalised, terminated (B,), next_observation
                (B, O); extra keys (e.g. truncated) are ignored.
        """
        device_batch: Batch = {k: jnp.asarray(batch[k], dtype=jnp.float32) for k in UPDATE_KEYS}
        do_actor_update = self.update_step % self.cfg.agent.actor_update_period == 0
        self.state, info = update_networks(
            self.state, device_batch, self.scalars, do_actor_update=do_actor_update,
            min_v=self.min_v, max_v=self.max_v, backend=self.backend,
        )
        self._infos.append(info)
        self.update_step += 1

    def get_metrics(self, reset: bool = True) -> dict[str, float]:
        """Per-key means of the update infos since the last call (one device->host transfer), plus backend counters.

        Returns:
            ``actor/*`` (actor steps only), ``critic/*``, ``temperature/*`` and ``backend/fallback_count``.
        """
        infos = jax.device_get(self._infos)
        if reset:
            self._infos = []
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for info in infos:
            for key, value in info.items():
                sums[key] = sums.get(key, 0.0) + float(value)
                counts[key] = counts.get(key, 0) + 1
        metrics = {key: sums[key] / counts[key] for key in sums}
        metrics["backend/fallback_count"] = float(dispatch_stats()["fallback_count"])
        return metrics

    def backend_text(self) -> str:
        """Human-readable backend selection, for the TensorBoard text ``backend``."""
        d = self.backend_decision
        return f"categorical_td_target backend: {self.backend} (requested {d.get('requested')}: {d.get('reason')})"

    # ------------------------------------------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Everything needed for an exact resume, as numpy arrays and Python scalars.

        Includes params, Adam states (with their step counts, which drive the LR schedules), BN running
        statistics, the target critic, the PRNG key, the update counter and the exploration-noise state.
        """
        flat = flax.serialization.to_state_dict(self.state)
        return {
            "state": jax.tree_util.tree_map(np.asarray, jax.device_get(flat)),
            "update_step": self.update_step,
            "noise": self.noise.state_dict(),
            "backend": self.backend,
        }

    def load_state_dict(self, state: dict[str, Any], load_optimizer: bool = True) -> None:
        """Restores ``state_dict()`` output (shapes must match the current config).

        Args:
            state: as returned by ``state_dict``.
            load_optimizer: False keeps freshly initialised optimiser states (``agent.load_optimizer``).
        """
        template = flax.serialization.to_state_dict(self.state)
        loaded = dict(state["state"])
        _check_shapes(template, loaded)
        if not load_optimizer:
            for name in ("actor", "critic", "temperature"):
                loaded[name] = dict(loaded[name], opt_state=template[name]["opt_state"], step=template[name]["step"])
        restored = flax.serialization.from_state_dict(self.state, jax.tree_util.tree_map(jnp.asarray, loaded))
        self.state = restored
        self.update_step = int(state["update_step"])
        self.noise.load_state_dict(state["noise"])
        self._infos = []

    def save(self, directory: str) -> str:
        """Atomically writes ``<directory>/agent_jax.pkl``; returns its path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, AGENT_FILE)
        atomic_pickle(path, self.state_dict())
        return path

    def load(self, directory: str, load_optimizer: bool = True) -> None:
        """Loads ``<directory>/agent_jax.pkl`` written by ``save``."""
        self.load_state_dict(load_pickle(os.path.join(directory, AGENT_FILE)), load_optimizer=load_optimizer)


def policy_actions(actor_def: Any, params: Any, batch_stats: Any, observations: jax.Array, eps: jax.Array,
                   deterministic: bool) -> jax.Array:
    """Acting (FLASHSAC.md section 12): BN on running stats; tanh(mean) or tanh(mean + std * eps).

    Args:
        actor_def: the FlashSACActor module.
        params, batch_stats: actor variables.
        observations: (E, O).
        eps: (E, A) held exploration noise (ignored when deterministic).
        deterministic: evaluation mode.

    Returns:
        (E, A) actions in [-1, 1].
    """
    mean, std = actor_def.apply(
        {"params": params, "batch_stats": batch_stats}, observations, False, method="get_mean_and_std"
    )  # (E, A), (E, A)
    if deterministic:
        return jnp.tanh(mean)  # (E, A)
    return jnp.tanh(mean + std * eps)  # (E, A)


def _check_shapes(template: Any, loaded: Any, path: str = "") -> None:
    """Raise ValueError naming the first leaf whose shape differs between the live state and a checkpoint."""
    if isinstance(template, dict):
        if not isinstance(loaded, dict) or set(template) != set(loaded):
            raise ValueError(f"checkpoint structure differs at '{path or '/'}': "
                             f"expected keys {sorted(template) if isinstance(template, dict) else template}, "
                             f"got {sorted(loaded) if isinstance(loaded, dict) else type(loaded).__name__}")
        for key in template:
            _check_shapes(template[key], loaded[key], f"{path}/{key}")
        return
    t_shape = tuple(np.shape(template))
    l_shape = tuple(np.shape(loaded))
    if t_shape != l_shape:
        raise ValueError(f"checkpoint leaf '{path}' has shape {l_shape}, the current config expects {t_shape}")

