"""Tolerance policy (SPEC.md section 7), used by every test and by the benchmark harness."""

from __future__ import annotations

import numpy as np

__all__ = ["ATOL_BETWEEN", "ATOL_EXP_SUM", "ATOL_FLOAT64", "ATOL_GOLDEN", "ATOL_MASS", "FP32_EPS",
           "LOW_PRECISION_FACTOR", "atol_vs_float64", "max_abs_error", "max_mass_error"]

# The fp32 machine epsilon (the spacing of fp32 numbers in [1, 2)).
FP32_EPS = float(np.finfo(np.float32).eps)
# Exp and summation error of an fp32 implementation, independent of N (p <= 1; an atom sums a few products).
ATOL_EXP_SUM = 1e-6


def atol_vs_float64(num_bins: int, dtype: object = "float32") -> float:
    """Absolute tolerance of an fp32 implementation against the float64 reference: 2 eps (N - 1) + 1e-6 (SPEC.md 7).

    Every fp32 implementation computes the same fp32 atom positions b in [0, N - 1]; a rounding error db of b moves
    p db of probability between two neighbouring atoms. b inherits the roundings of c and g j (numbers up to N - 1)
    and of r - min_v and g (min_v - s) scaled by 1 / Delta = (N - 1) / (max_v - min_v), so |db| scales with
    eps (N - 1): the fp32 spacing of N - 1 rounded up to the top of its binade (between 1 and 2 ulp(N - 1)). Measured
    maximum over the case matrix and extreme supports: 1.5 eps (N - 1). The fixed part covers exp and summation.

    Args:
        num_bins: N >= 2.
        dtype: the log-prob dtype ("float32" or "float64": the arithmetic is fp32 either way). bfloat16 / float16
            log-probs follow the low-precision rule instead (LOW_PRECISION_FACTOR).

    Returns:
        2.5e-5 at N = 101 (FlashSAC's support), 2.5e-4 at N = 1024.
    """
    if isinstance(num_bins, bool) or not isinstance(num_bins, int | np.integer) or num_bins < 2:
        raise ValueError(f"num_bins must be an int >= 2, got {num_bins!r}")
    name = _dtype_name(dtype)
    if name not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64 log-probs, got {name}: for {name} compare with the "
                         f"same-dtype reference (LOW_PRECISION_FACTOR)")
    return 2.0 * FP32_EPS * (int(num_bins) - 1) + ATOL_EXP_SUM


def _dtype_name(dtype: object) -> str:
    """"float32" for "float32", np.float32, np.dtype("float32"), torch.float32 or jnp.float32."""
    if isinstance(dtype, str):
        return dtype
    text = str(dtype)
    if text.startswith("torch."):
        return text.removeprefix("torch.")
    try:
        return np.dtype(dtype).name
    except TypeError:
        return text


# fp32 implementation vs the float64 reference at FlashSAC's N = 101 (use atol_vs_float64 for any other N).
ATOL_FLOAT64 = atol_vs_float64(101)
# Two fp32 implementations against each other at N = 101. On identical inputs they share b bit for bit and differ only
# by exp and the order of the sums (measured <= 1.2e-7); the margin covers inputs that differ by a few ulp (agents).
ATOL_BETWEEN = 3e-5
# Golden cases: the hand-computed values are exact decimals, the fp32 inputs are log(p) rounded to fp32.
ATOL_GOLDEN = 1e-6
# |sum_k m[k] - sum_j p_j| per row for fp32 implementations (an fp32 sum of ~100 terms <= 1).
ATOL_MASS = 1e-6
# bf16 / fp16 log-probs: the kernel's error vs fp32 must be <= 2x the same-dtype reference's error + ATOL_BETWEEN.
LOW_PRECISION_FACTOR = 2.0


def max_abs_error(got: np.ndarray, want: np.ndarray) -> float:
    """Max |got - want| over rows that are finite in `want`; NaN placement must match exactly (else inf)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape or not np.array_equal(np.isnan(got), np.isnan(want)):
        return float("inf")
    ok = ~np.isnan(want)
    return float(np.abs(got[ok] - want[ok]).max()) if ok.any() else 0.0


def max_mass_error(out: np.ndarray, log_probs_selected: np.ndarray) -> float:
    """Max over finite rows of |sum_k out[k] - sum_j exp(lp_j)|."""
    out = np.asarray(out, np.float64)
    ok = ~np.isnan(out).any(axis=1)
    if not ok.any():
        return 0.0
    mass = np.exp(np.asarray(log_probs_selected, np.float64)).sum(axis=1)
    return float(np.abs(out[ok].sum(axis=1) - mass[ok]).max())
