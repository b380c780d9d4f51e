"""Tolerance policy (SPEC.md section 7), used by every test and by the benchmark harness."""

from __future__ import annotations

import numpy as np

__all__ = ["ATOL_BETWEEN", "ATOL_FLOAT64", "ATOL_GOLDEN", "ATOL_MASS", "LOW_PRECISION_FACTOR", "atol_vs_float64",
           "max_abs_error", "max_mass_error"]

# fp32 implementation vs the float64 reference, on probabilities, rtol = 0. The error is the fp32 rounding of the
# atom positions b (|db| up to ~1e-5 near b = N - 1, times the moved mass p <= 1); measured maxima are in SPEC.md.
ATOL_FLOAT64 = 2e-5
# Two fp32 implementations against each other (each can be off by ~ATOL_FLOAT64 in opposite directions).
ATOL_BETWEEN = 3e-5
# Golden cases: the hand-computed values are exact decimals, the fp32 inputs are log(p) rounded to fp32.
ATOL_GOLDEN = 1e-6
# |sum_k m[k] - sum_j p_j| per row for fp32 implementations (an fp32 sum of ~100 terms <= 1).
ATOL_MASS = 1e-6
# bf16 / fp16 log-probs: the kernel's error vs fp32 must be <= 2x the same-dtype reference's error + ATOL_FLOAT64.
LOW_PRECISION_FACTOR = 2.0


def atol_vs_float64(dtype_name: str) -> float:
    """Absolute tolerance against the float64 reference for log-probs of this dtype (fp32 only; see the 2x rule)."""
    if dtype_name not in ("float32",):
        raise ValueError(f"the low-precision rule applies to {dtype_name}: compare with the same-dtype reference")
    return ATOL_FLOAT64


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
