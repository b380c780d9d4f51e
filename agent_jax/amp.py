"""Mixed precision of the JAX agent's update (``agent.use_amp``, ``agent.amp_dtype``), all inside the jitted update.

``bf16`` / ``fp16``: the actor and critic modules compute in that dtype (flax's ``dtype`` convention: parameters,
optimiser state and BatchNorm running statistics stay float32, and each linear layer casts its input and weight to
the compute dtype at use). Normalisation statistics, the critic's log-softmax, the actor's Gaussian and tanh
log-probability, the temperature, the categorical TD target and every loss run in float32
(``agent_jax.networks``). The acting policy stays float32.

``fp16`` adds a dynamic loss scale (``LossScale``, carried in ``agent_jax.state.AgentState``): the actor's and the
critic's losses are multiplied by the scale before differentiation, the gradients are unscaled and checked for
inf/NaN, a step with a non-finite gradient leaves that network's parameters, BatchNorm statistics, optimiser state
and step count unchanged (``select_finite``), and the scale is lowered or grown. All of it is traced jnp code in the
one jitted update program: nothing is read back to the host. The constants and the checkpoint keys are
``torch.amp.GradScaler``'s, as the torch agent's ``DeviceLossScaler`` (``agent_torch.amp``).
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

__all__ = ["AMP_DTYPES", "LossScale", "resolve_amp_dtype", "select_finite"]

AMP_DTYPES: dict[str, Any] = {"bf16": jnp.bfloat16, "fp16": jnp.float16}

Array = jax.Array


def resolve_amp_dtype(use_amp: bool, amp_dtype: str, platform: str) -> tuple[Any, str]:
    """The compute dtype of the actor and critic in the update (None: float32) and why.

    ``agent.amp_dtype=auto`` picks what the torch agent's ``auto`` picks for the same device: fp16 with a loss
    scale on a GPU (upstream's ``use_amp``), bf16 elsewhere; ``bf16`` / ``fp16`` are used as given.

    Args:
        use_amp: ``agent.use_amp``.
        amp_dtype: ``agent.amp_dtype``: auto, bf16 or fp16.
        platform: the JAX platform of the agent's device ("cpu", "gpu", "cuda", "rocm", "tpu").

    Raises:
        ValueError: an ``amp_dtype`` other than auto, bf16, fp16.
    """
    if amp_dtype not in ("auto", *AMP_DTYPES):
        raise ValueError(f"agent.amp_dtype must be auto, bf16 or fp16, got {amp_dtype!r}")
    if not use_amp:
        return None, "agent.use_amp=false: fp32"
    if amp_dtype == "auto":
        name = "fp16" if platform in ("gpu", "cuda", "rocm") else "bf16"
        return AMP_DTYPES[name], f"agent.use_amp=true, agent.amp_dtype=auto on {platform}: {name}"
    return AMP_DTYPES[amp_dtype], f"agent.use_amp=true, agent.amp_dtype={amp_dtype}"


@flax.struct.dataclass
class LossScale:
    """A dynamic loss scale as device arrays, updated with ``torch._amp_update_scale_``'s rule.

    Attributes:
        scale: () float32 loss scale.
        growth_tracker: () int32 consecutive steps with finite gradients.
        found_inf: () float32, 1 when the last scaled step found an inf/NaN gradient (and was skipped).
        growth_factor: the scale's factor after ``growth_interval`` finite steps (static).
        backoff_factor: the scale's factor after a non-finite step (static).
        growth_interval: finite steps between growths (static).
    """

    scale: Array
    growth_tracker: Array
    found_inf: Array
    growth_factor: float = flax.struct.field(pytree_node=False, default=2.0)
    backoff_factor: float = flax.struct.field(pytree_node=False, default=0.5)
    growth_interval: int = flax.struct.field(pytree_node=False, default=2000)

    @classmethod
    def create(cls, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
               growth_interval: int = 2000) -> LossScale:
        """A fresh scale with ``torch.amp.GradScaler``'s defaults."""
        return cls(scale=jnp.asarray(init_scale, jnp.float32), growth_tracker=jnp.zeros((), jnp.int32),
                   found_inf=jnp.zeros((), jnp.float32), growth_factor=float(growth_factor),
                   backoff_factor=float(backoff_factor), growth_interval=int(growth_interval))

    def scale_loss(self, loss: Array) -> Array:
        """``loss * scale`` in float32 (the value to differentiate)."""
        return loss.astype(jnp.float32) * self.scale

    def unscale(self, grads: Any) -> tuple[Any, Array]:
        """Gradients of a scaled loss divided by the scale, and a () bool: any of them not finite."""
        inv_scale = 1.0 / self.scale  # () f32
        grads = jax.tree_util.tree_map(lambda g: g * inv_scale.astype(g.dtype), grads)
        finite = [jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)]
        return grads, jnp.logical_not(jnp.all(jnp.stack(finite)))

    def update(self, found_inf: Array) -> LossScale:
        """After one scaled step: on inf/NaN the scale times ``backoff_factor`` and the tracker reset; else the
        tracker counts up and, reaching ``growth_interval``, resets with the scale times ``growth_factor`` (kept only
        if finite)."""
        tracker = self.growth_tracker + 1
        grow = tracker >= self.growth_interval
        grown = self.scale * self.growth_factor
        scale = jnp.where(found_inf, self.scale * self.backoff_factor,
                          jnp.where(grow & jnp.isfinite(grown), grown, self.scale))
        tracker = jnp.where(found_inf | grow, jnp.zeros_like(tracker), tracker)
        return self.replace(scale=scale, growth_tracker=tracker, found_inf=found_inf.astype(jnp.float32))

    def state_dict(self) -> dict[str, Any]:
        """``torch.amp.GradScaler.state_dict`` keys and types (reads the device: checkpoints only)."""
        return {"scale": float(self.scale), "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": int(self.growth_tracker)}

    def load_state_dict(self, state: dict[str, Any]) -> LossScale:
        """A scale restored from ``state_dict`` output or a ``torch.amp.GradScaler`` state dict.

        Raises:
            ValueError: a state dict without ``scale`` or ``_growth_tracker``.
        """
        missing = [k for k in ("scale", "_growth_tracker") if k not in state]
        if missing:
            raise ValueError(f"loss-scaler state dict lacks {missing}; expected GradScaler keys, got {sorted(state)}")
        return self.replace(scale=jnp.asarray(float(state["scale"]), jnp.float32),
                            growth_tracker=jnp.asarray(int(state["_growth_tracker"]), jnp.int32),
                            found_inf=jnp.zeros((), jnp.float32),
                            growth_factor=float(state.get("growth_factor", self.growth_factor)),
                            backoff_factor=float(state.get("backoff_factor", self.backoff_factor)),
                            growth_interval=int(state.get("growth_interval", self.growth_interval)))


def select_finite(found_inf: Array, new: Any, old: Any) -> Any:
    """``old`` where ``found_inf`` is set, else ``new``, leaf by leaf (a skipped step, decided on the device)."""
    return jax.tree_util.tree_map(lambda n, o: jnp.where(found_inf, o, n), new, old)
