"""Mixed precision of the torch agent's update (``agent.use_amp``, ``agent.amp_dtype``) with no host round trip.

``bf16``: autocast to bfloat16 around forwards and losses, no loss scaling (bf16 has fp32's exponent range).
``fp16``: autocast to float16 and a loss scale kept on the device (``DeviceLossScaler``): the loss is multiplied by
the scale before backward, the gradients are checked for inf/NaN and unscaled in one foreach kernel
(``torch._amp_foreach_non_finite_check_and_unscale_``), the fused Adam step receives the found-inf flag as a device
tensor and leaves parameters, moments and step count untouched when it is set, and the scale is lowered or grown
by ``torch._amp_update_scale_``. Nothing reads a tensor on the host, so the whole update can be captured in a CUDA
graph (``agent_torch.graphs``). Scaling constants are ``torch.amp.GradScaler``'s defaults and its state dict keys
are kept, so checkpoints load in either direction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["AMP_DTYPES", "DeviceLossScaler", "resolve_amp_dtype"]

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_amp_dtype(use_amp: bool, amp_dtype: str, device: torch.device) -> tuple[torch.dtype | None, str]:
    """The autocast dtype of the update (None: fp32) and why.

    ``agent.amp_dtype=auto`` is fp16 with a loss scale on CUDA (upstream's ``use_amp``) and bf16 on the CPU
    (fp16 CPU kernels are slow); ``bf16`` / ``fp16`` are used as given on either device.

    Raises:
        ValueError: an ``amp_dtype`` other than auto, bf16, fp16.
    """
    if amp_dtype not in ("auto", *AMP_DTYPES):
        raise ValueError(f"agent.amp_dtype must be auto, bf16 or fp16, got {amp_dtype!r}")
    if not use_amp:
        return None, "agent.use_amp=false: fp32"
    if amp_dtype == "auto":
        name = "fp16" if device.type == "cuda" else "bf16"
        return AMP_DTYPES[name], f"agent.use_amp=true, agent.amp_dtype=auto on {device.type}: {name}"
    return AMP_DTYPES[amp_dtype], f"agent.use_amp=true, agent.amp_dtype={amp_dtype}"


class DeviceLossScaler:
    """A dynamic loss scale whose state and decisions stay on the device (graph-capturable, no ``.item()``).

    Args:
        device: where the scale, growth counter and found-inf flag live (the parameters' device).
        init_scale, growth_factor, backoff_factor, growth_interval: as ``torch.amp.GradScaler``.

    Attributes:
        scale: () fp32 loss scale.
        growth_tracker: () int32 consecutive finite steps.
        found_inf: () fp32, 1 when the last ``step`` found an inf/NaN gradient (that step was skipped).
    """

    def __init__(self, device: torch.device, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.scale = torch.full((), float(init_scale), dtype=torch.float32, device=device)
        self.growth_tracker = torch.zeros((), dtype=torch.int32, device=device)
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * scale`` in fp32 (the tensor to call ``backward`` on)."""
        return loss.float() * self.scale

    def step(self, optimizer: torch.optim.Optimizer, params: Iterable[torch.Tensor]) -> None:
        """Unscales the gradients of ``params`` in place, sets ``found_inf``, runs the optimizer (skipped on the
        device when ``found_inf`` is set) and updates the scale.

        The optimizer must accept a ``found_inf`` tensor (fused Adam does: ``_step_supports_amp_scaling``).
        """
        if not getattr(optimizer, "_step_supports_amp_scaling", False):
            raise TypeError(f"DeviceLossScaler needs an optimizer that skips on a device found_inf flag (fused Adam);"
                            f" got {type(optimizer).__name__}")
        grads = [p.grad for p in params if p.grad is not None]
        self.found_inf.zero_()
        inv_scale = self.scale.double().reciprocal().float()  # as GradScaler: the exact fp32 reciprocal
        torch._amp_foreach_non_finite_check_and_unscale_(grads, self.found_inf, inv_scale)
        optimizer.grad_scale = None  # type: ignore[attr-defined]  # already unscaled
        optimizer.found_inf = self.found_inf  # type: ignore[attr-defined]
        try:
            optimizer.step()
        finally:
            del optimizer.grad_scale  # type: ignore[attr-defined]
            del optimizer.found_inf  # type: ignore[attr-defined]
        torch._amp_update_scale_(self.scale, self.growth_tracker, self.found_inf, self.growth_factor,
                                 self.backoff_factor, self.growth_interval)

    def state_dict(self) -> dict[str, Any]:
        """``torch.amp.GradScaler.state_dict`` keys and types (reads the device once: checkpoints only)."""
        return {
            "scale": float(self.scale),
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": int(self.growth_tracker),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict`` output or a ``torch.amp.GradScaler`` state dict (values copied in place, so a
        captured graph keeps reading the same tensors).

        Raises:
            ValueError: a state dict without ``scale`` or ``_growth_tracker``.
        """
        missing = [k for k in ("scale", "_growth_tracker") if k not in state]
        if missing:
            raise ValueError(f"loss-scaler state dict lacks {missing}; expected GradScaler keys, got {sorted(state)}")
        self.scale.fill_(float(state["scale"]))
        self.growth_tracker.fill_(int(state["_growth_tracker"]))
        self.growth_factor = float(state.get("growth_factor", self.growth_factor))
        self.backoff_factor = float(state.get("backoff_factor", self.backoff_factor))
        self.growth_interval = int(state.get("growth_interval", self.growth_interval))
