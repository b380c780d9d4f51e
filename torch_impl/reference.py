"""PyTorch reference path ("torch" backend): SPEC.md's fp32 operation order with upstream's scatter projection."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from shared_spec.support import CategoricalSupport

T = TypeVar("T")

__all__ = ["categorical_td_target_reference", "compile_safe_cache", "support_constants"]


def compile_safe_cache(fn: Callable[..., T]) -> Callable[..., T]:
    """``functools.lru_cache`` for eager calls; under ``torch.compile`` the plain function, which dynamo traces
    (dynamo ignores a cache wrapper anyway, with a UserWarning in every compiling process)."""
    cached = functools.lru_cache(maxsize=64)(fn)

    @functools.wraps(fn)
    def call(*args: Any) -> T:
        return fn(*args) if torch.compiler.is_compiling() else cached(*args)

    call.eager = cached  # type: ignore[attr-defined]  # for callers that already know they run eagerly
    return call


@compile_safe_cache
def support_constants(num_bins: int, min_v: float, max_v: float) -> tuple[float, float]:
    """(min_v, 1 / Delta) as the Python floats every torch/Triton path rounds to fp32 (SPEC.md section 3)."""
    sup = CategoricalSupport(num_bins, float(min_v), float(max_v))
    return sup.min_v, sup.inv_bin_width


def _round(x: torch.Tensor) -> torch.Tensor:
    """Identity on non-NaN values that stops FMA contraction of the product `x` into a following add (SPEC.md 3)."""
    return torch.where(x != x, 0.0, x)


def categorical_td_target_reference(
    next_qs: torch.Tensor,
    next_log_probs: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    next_alpha_log_pi: torch.Tensor,
    gamma: float,
    min_v: float,
    max_v: float,
) -> torch.Tensor:
    """Categorical TD target, line by line in SPEC.md's fp32 order; inputs already validated by the dispatcher.

    Deterministic on CPU. On CUDA the two `scatter_add_` calls use atomics (as upstream) unless
    `torch.use_deterministic_algorithms(True)` is set; the fused Triton kernel is the deterministic fast path.

    Returns:
        (B, N) float32 probabilities; invalid rows (SPEC.md section 6) are NaN.
    """
    E, B, N = next_log_probs.shape
    f32 = torch.float32
    mv, inv_delta = support_constants(N, min_v, max_v)
    q = next_qs.detach().to(f32)  # (E, B)
    r = reward.detach().reshape(B).to(f32)  # (B,)
    d = terminated.detach().reshape(B).to(f32)  # (B,)
    s = next_alpha_log_pi.detach().reshape(B).to(f32)  # (B,)
    idx = torch.argmin(q, dim=0)  # (B,) ties -> first critic
    lp = next_log_probs.detach().gather(0, idx.view(1, B, 1).expand(1, B, N))[0].to(f32)  # (B, N)

    # Index-space Bellman positions (SPEC.md section 3). Python scalars enter as their fp32 rounding
    # (TensorIterator casts wrapped numbers to the compute dtype). Every product that feeds an addition goes
    # through `_round`, so a compiler (Inductor emits Triton) cannot contract it into an FMA.
    g = float(gamma) * (1.0 - d)  # (B,)
    h_raw = g * (mv - s)  # (B,) NaN when g == 0 and alpha*log pi is infinite
    c_raw = ((r - mv) + h_raw) * inv_delta  # (B,) NaN flags the row (SPEC.md section 6)
    c = _round(((r - mv) + _round(h_raw)) * inv_delta)  # (B,)
    j = torch.arange(N, dtype=f32, device=r.device)  # (N,)
    b = torch.clamp(c[:, None] + _round(g[:, None] * j[None, :]), 0.0, N - 1)  # (B, N)
    p = torch.exp(lp)  # (B, N)

    bad = torch.isnan(r) | torch.isnan(s) | torch.isnan(q).any(dim=0)  # (B,)
    bad = bad | ~((d >= 0.0) & (d <= 1.0)) | ~((g >= 0.0) & (g < float("inf"))) | torch.isnan(c_raw)
    bad = bad | ~(p.sum(dim=1) < float("inf"))  # (B,) NaN / +inf log-prob, or an overflowing total mass
    b = torch.where(bad[:, None], 0.0, b)  # guard before .long(): upstream crashes on NaN here
    p = torch.where(bad[:, None], 0.0, p)

    low = torch.floor(b)  # (B, N)
    f = b - low  # (B, N) exact
    low_i = low.long()
    up_i = torch.clamp(low_i + 1, max=N - 1)
    m = torch.zeros(B, N, dtype=f32, device=r.device)
    m.scatter_add_(1, low_i, p * (1.0 - f))
    m.scatter_add_(1, up_i, p * f)
    return torch.where(bad[:, None], float("nan"), m)  # (B, N)
