"""Jit-able jnp reference ("jax" backend): SPEC.md's fp32 operation order, deterministic dense projection."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from shared_spec.reference import check_shapes
from shared_spec.support import CategoricalSupport

__all__ = ["categorical_td_target_reference"]


def _round(x: jax.Array) -> jax.Array:
    """Identity on non-NaN values that stops FMA contraction of the product `x` into a following add (SPEC.md 3)."""
    return jnp.where(x != x, 0.0, x)


def categorical_td_target_reference(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma,
                                    min_v: float = -5.0, max_v: float = 5.0, *,
                                    row_offset: int | None = None) -> jax.Array:
    """Categorical TD target in jnp, following SPEC.md's fp32 order; no scatter (no `.at[].add`), so deterministic.

    The projection is the dense gather form with the floor/fraction weights of SPEC.md section 4:
    out[k] = sum_j p_j * ([k == l_j] (1 - f_j) + [k == l_j + 1] f_j), which XLA fuses into one reduction
    (no (B, N, N) buffer is materialised).

    Args:
        next_qs: (E, B). next_log_probs: (E, B, N) float32/bfloat16/float16.
        reward, terminated, next_alpha_log_pi: (B,) or (B, 1).
        gamma: gamma ** n_step, a Python float or a traced scalar (no recompilation when its value changes).
        min_v, max_v: static support bounds.
        row_offset: None, or the row-offset form (SPEC.md section 1): next_qs (E, R) and next_log_probs (E, R, N)
            hold R rows and the target reads rows [row_offset, row_offset + B), B = the rows of reward (a static
            int, validated here). The rows are sliced here, inside the caller's program, where XLA fuses the slice
            into its consumers.

    Returns:
        (B, N) float32, wrapped in stop_gradient; invalid rows (SPEC.md section 6) are NaN.
    """
    if row_offset is not None:
        shapes = (next_qs.shape, next_log_probs.shape, reward.shape, terminated.shape, next_alpha_log_pi.shape)
        B = check_shapes(*shapes, row_offset=row_offset).B
        start = int(row_offset)
        next_qs = jax.lax.slice_in_dim(next_qs, start, start + B, axis=1)  # (E, B)
        next_log_probs = jax.lax.slice_in_dim(next_log_probs, start, start + B, axis=1)  # (E, B, N)
    E, B, N = next_log_probs.shape
    sup = CategoricalSupport(N, float(min_v), float(max_v))
    f32 = jnp.float32
    mv = f32(sup.min_v)
    inv_delta = f32(sup.inv_bin_width)
    q = jax.lax.stop_gradient(next_qs).astype(f32)  # (E, B)
    r = jax.lax.stop_gradient(reward).reshape(B).astype(f32)  # (B,)
    d = jax.lax.stop_gradient(terminated).reshape(B).astype(f32)  # (B,)
    s = jax.lax.stop_gradient(next_alpha_log_pi).reshape(B).astype(f32)  # (B,)
    idx = jnp.argmin(q, axis=0)  # (B,) ties -> first critic
    lp = jnp.take_along_axis(jax.lax.stop_gradient(next_log_probs), idx[None, :, None], axis=0)[0].astype(f32)

    # Every product that feeds an addition goes through `_round`: XLA contracts a*b + c into an FMA otherwise.
    g = jnp.asarray(gamma, f32) * (1.0 - d)  # (B,)
    h_raw = g * (mv - s)  # (B,) NaN when g == 0 and alpha*log pi is infinite
    c_raw = ((r - mv) + h_raw) * inv_delta  # (B,) NaN flags the row (SPEC.md section 6)
    c = _round(((r - mv) + _round(h_raw)) * inv_delta)  # (B,)
    j = jnp.arange(N, dtype=f32)  # (N,)
    b = jnp.clip(c[:, None] + _round(g[:, None] * j[None, :]), 0.0, N - 1)  # (B, N)
    p = jnp.exp(lp)  # (B, N)

    bad = jnp.isnan(r) | jnp.isnan(s) | jnp.isnan(q).any(axis=0)  # (B,)
    bad = bad | ~((d >= 0.0) & (d <= 1.0)) | ~((g >= 0.0) & (g < jnp.inf)) | jnp.isnan(c_raw)
    bad = bad | ~(p.sum(axis=1) < jnp.inf)  # (B,) NaN / +inf log-prob, or an overflowing total mass
    b = jnp.where(bad[:, None], 0.0, b)
    p = jnp.where(bad[:, None], 0.0, p)

    low = jnp.floor(b)  # (B, N)
    f = b - low  # (B, N) exact
    k = jnp.arange(N, dtype=f32)[None, None, :]  # (1, 1, N) destination atoms
    w = jnp.where(k == low[:, :, None], 1.0 - f[:, :, None], jnp.where(k == low[:, :, None] + 1.0, f[:, :, None], 0.0))
    m = (p[:, :, None] * w).sum(axis=1)  # (B, N) a fused reduction over sources
    return jax.lax.stop_gradient(jnp.where(bad[:, None], jnp.nan, m))
