"""Upstream FlashSAC's target path, reimplemented faithfully as the benchmark baseline.

`_select_min_q_log_probs` + `_compute_categorical_td_target`: argmin + gather, value-space Bellman atoms from a
`linspace`, division by the bin width, floor/upper/fraction, two `scatter_add_` (atomics on CUDA). Upstream wraps
both in default-mode `torch.compile`; `compiled()` returns them that way. No NaN guard (as upstream).
"""

from __future__ import annotations

import torch

__all__ = ["compiled", "eager", "upstream_target"]


def _select_min_q_log_probs(next_qs: torch.Tensor, next_q_log_probs: torch.Tensor) -> torch.Tensor:
    min_idx = torch.argmin(next_qs, dim=0)  # (B,) ties -> critic 0
    index = min_idx.view(1, -1, 1).expand(1, next_q_log_probs.shape[1], next_q_log_probs.shape[2])  # (1, B, K)
    return next_q_log_probs.gather(0, index).squeeze(0)  # (B, K)


def _compute_categorical_td_target(next_q_log_probs: torch.Tensor, reward: torch.Tensor, done: torch.Tensor,
                                   actor_entropy: torch.Tensor, gamma: float, num_bins: int, min_v: float,
                                   max_v: float) -> torch.Tensor:
    delta_z = (max_v - min_v) / (num_bins - 1)
    bin_values = torch.linspace(min_v, max_v, num_bins, device=reward.device, dtype=next_q_log_probs.dtype)
    bin_values = bin_values.reshape(1, -1)  # (1, K)
    reward, done, actor_entropy = reward.reshape(-1, 1), done.reshape(-1, 1), actor_entropy.reshape(-1, 1)  # (B, 1)
    target_bin_values = reward + gamma * (bin_values - actor_entropy) * (1.0 - done)  # (B, K)
    target_bin_values = torch.clamp(target_bin_values, min_v, max_v)
    b = (target_bin_values - min_v) / delta_z  # (B, K)
    l = b.floor().long()  # (B, K)
    u = torch.clamp(l + 1, max=num_bins - 1)  # (B, K)
    f = b - l  # (B, K)
    next_probs = torch.exp(next_q_log_probs)  # (B, K)
    target = torch.zeros_like(next_probs)  # (B, K)
    target.scatter_add_(1, l, next_probs * (1.0 - f))
    target.scatter_add_(1, u, next_probs * f)
    return target


def upstream_target(select, compute, next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma,
                    min_v=-5.0, max_v=5.0):
    """Call the pair the way upstream's critic update does (two compiled regions)."""
    lp = select(next_qs, next_log_probs)
    return compute(lp, reward, terminated, next_alpha_log_pi, gamma, next_log_probs.shape[2], min_v, max_v)


def eager():
    return _select_min_q_log_probs, _compute_categorical_td_target


def compiled(mode: str | None = None):
    """Both functions under `torch.compile` (default mode, as upstream decorates them)."""
    kw = {} if mode is None else {"mode": mode}
    return torch.compile(_select_min_q_log_probs, **kw), torch.compile(_compute_categorical_td_target, **kw)
