"""An MJX step's arrays as torch tensors through DLPack: the same device memory, no copy.

The torch agent steps the MJX environments in JAX and reads the results as torch tensors. ``torch.from_dlpack``
shares the JAX buffer (on the GPU the DLPack protocol orders the two frameworks' streams); the tensor must be
treated as read-only, since JAX assumes its arrays never change. The env state stays a JAX pytree.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from mjx_envs.env import MjxStep

__all__ = ["TorchStep", "step_to_torch", "to_torch"]


class TorchStep(NamedTuple):
    """``MjxStep``'s arrays as torch tensors (same shapes and dtypes: float32), sharing the JAX buffers."""

    obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor


def to_torch(array: Any) -> torch.Tensor:
    """One JAX array as a torch tensor on the same device, sharing its memory (``torch.from_dlpack``).

    Raises:
        TypeError: ``array`` does not implement the DLPack protocol (not a JAX or other DLPack array).
    """
    if not hasattr(array, "__dlpack__"):
        raise TypeError(f"array: expected a JAX array (DLPack protocol), got {type(array).__name__}")
    return torch.from_dlpack(array)


def step_to_torch(step: MjxStep) -> TorchStep:
    """The tensors of one ``MjxVecEnv.step`` result (everything but the env state) as zero-copy torch views."""
    return TorchStep(
        obs=to_torch(step.obs),
        reward=to_torch(step.reward),
        terminated=to_torch(step.terminated),
        truncated=to_torch(step.truncated),
        final_obs=to_torch(step.final_obs),
    )
