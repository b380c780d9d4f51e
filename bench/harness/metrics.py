"""Correctness of one output against the float64 spec (shared_spec.reference): max abs error (both oracles), row
mass, negative values, NaN placement, the selected critic, the low-precision 2x rule, and all rows against the
framework's fp32 reference beyond the float64 prefix."""

from __future__ import annotations

import dataclasses

import numpy as np

from bench.common import F64_ROWS, first_rows
from bench.harness.cases import HarnessCase
from bench.harness.frameworks import to_numpy, torch, torch_impl
from bench.harness.inputs import round_log_probs, to_torch
from shared_spec import reference as R
from shared_spec.tolerances import (
    ATOL_BETWEEN,
    ATOL_FLOAT64,
    ATOL_MASS,
    LOW_PRECISION_FACTOR,
    atol_vs_float64,
    max_abs_error,
    max_mass_error,
)

__all__ = ["correctness_metrics", "critic_mismatch_fraction"]



def critic_mismatch_fraction(got: np.ndarray, x: dict[str, np.ndarray], gamma: float, tol: float) -> float:
    """Fraction of finite rows that match (within `tol`) another critic's projection but not the spec's choice
    (argmin, ties -> first). Rows where the candidates coincide within `tol` cannot disagree observably; rows that
    match no candidate are wrong values, counted by the max-abs check instead."""
    E = x["next_qs"].shape[0]
    if E == 1:
        return 0.0
    idx, _ = R.select_min_q(x["next_qs"].astype(np.float64), x["next_log_probs"].astype(np.float64))
    cands = np.stack([R.categorical_td_target(**dict(x, next_qs=np.zeros_like(x["next_qs"][i:i + 1]),
                                                     next_log_probs=x["next_log_probs"][i:i + 1]), gamma=gamma)
                      for i in range(E)])  # (E, B, N): the target if critic i were selected
    diff = np.abs(cands - got.astype(np.float64)[None])
    dist = np.where(np.isnan(diff).any(axis=2), np.inf, np.where(np.isnan(diff), 0.0, diff).max(axis=2))  # (E, B)
    ok = ~np.isnan(got).any(axis=1)
    if not ok.any():
        return 0.0
    chosen = dist[idx, np.arange(got.shape[0])]
    differs = (chosen > tol) & (dist.min(axis=0) <= tol)
    return float(differs[ok].mean())


def _nan_rows(a: np.ndarray) -> np.ndarray:
    return np.isnan(a).any(axis=1)


def correctness_metrics(got: np.ndarray, x: dict[str, np.ndarray], case: HarnessCase,
                        ref_fp32_full: np.ndarray | None) -> tuple[dict, list[str]]:
    """Compare one output with the float64 spec; returns (metrics, failure reasons)."""
    reasons: list[str] = []
    B, N = case.B, case.N
    n = min(B, F64_ROWS)
    xr = first_rows(round_log_probs(x, case.dtype), n)
    want = R.categorical_td_target(**xr, gamma=case.gamma)
    g = got[:n].astype(np.float64)
    tol = atol_vs_float64(N, "float32")  # vs the spec on the rounded log-probs: fp32 arithmetic
    unwritten = int((_nan_rows(g) & ~_nan_rows(want)).sum())
    spurious = int((~np.isnan(g).all(axis=1) & _nan_rows(want)).sum())
    m = {"rows_vs_float64": n, "tolerance": tol, "max_abs_error": max_abs_error(g, want),
         "max_abs_error_vs_hat_oracle": max_abs_error(g, R.categorical_td_target_hat(**xr, gamma=case.gamma)),
         "rows_nan_where_spec_finite": unwritten, "rows_finite_where_spec_nan": spurious}
    both = ~_nan_rows(g) & ~_nan_rows(want)
    m["max_abs_error_finite_rows"] = float(np.abs(g[both] - want[both]).max()) if both.any() else 0.0
    _, lp_sel = R.select_min_q(xr["next_qs"].astype(np.float64), xr["next_log_probs"].astype(np.float64))
    m["max_mass_error"] = max_mass_error(g, lp_sel)
    m["min_value"] = float(np.nanmin(g)) if not np.isnan(g).all() else None
    m["critic_mismatch_fraction"] = critic_mismatch_fraction(g, xr, case.gamma, tol)
    if unwritten:
        reasons.append(f"{unwritten}/{n} rows hold NaN where the spec is finite: rows left unwritten (the output "
                       "buffer was NaN-poisoned) or NaN leaking into valid rows")
    if spurious:
        reasons.append(f"{spurious}/{n} rows are not all-NaN where the NaN policy (SPEC.md 6) requires NaN")
    if not m["max_abs_error_finite_rows"] <= tol:
        reasons.append(f"max abs error {m['max_abs_error_finite_rows']:.3g} vs the float64 spec exceeds {tol:.3g}")
    if not unwritten and not spurious and not m["max_abs_error_vs_hat_oracle"] <= tol:
        reasons.append(f"max abs error {m['max_abs_error_vs_hat_oracle']:.3g} vs the float64 hat-form oracle (#2) "
                       f"exceeds {tol:.3g}")
    if not m["max_mass_error"] <= ATOL_MASS:
        reasons.append(f"max row-mass error {m['max_mass_error']:.3g} exceeds {ATOL_MASS:.3g}")
    if m["min_value"] is not None and m["min_value"] < 0:
        reasons.append(f"negative probability {m['min_value']:.3g}")
    if m["critic_mismatch_fraction"] > 0:
        reasons.append(f"{m['critic_mismatch_fraction']:.3f} of rows use the wrong critic (argmin, ties -> first)")
    if case.dtype != "float32":  # the 2x rule vs the fp32 truth
        xf = first_rows(x, n)
        want32 = R.categorical_td_target(**xf, gamma=case.gamma)
        t_low = to_torch(xr, dataclasses.replace(case, B=n, layout="contiguous", reward_shape="B"),
                         torch.device("cpu"))
        ref_low = to_numpy(torch_impl.categorical_td_target(**t_low, gamma=case.gamma, backend="torch"))
        m["err_vs_fp32_truth"] = max_abs_error(g, want32)
        m["torch_ref_same_dtype_err_vs_fp32_truth"] = max_abs_error(ref_low, want32)
        bound = LOW_PRECISION_FACTOR * m["torch_ref_same_dtype_err_vs_fp32_truth"] + ATOL_FLOAT64
        m["low_precision_bound"] = bound
        if not m["err_vs_fp32_truth"] <= bound:
            reasons.append(f"{case.dtype}: error {m['err_vs_fp32_truth']:.3g} vs the fp32 truth exceeds 2x the "
                           f"same-dtype torch reference's + atol = {bound:.3g}")
    if ref_fp32_full is not None and B > n:  # rows beyond the float64 prefix: vs the framework's fp32 reference
        m["max_abs_vs_fp32_reference_all_rows"] = max_abs_error(got, ref_fp32_full)
        if not m["max_abs_vs_fp32_reference_all_rows"] <= ATOL_BETWEEN / ATOL_FLOAT64 * tol:
            reasons.append(f"all {B} rows vs the fp32 reference: max abs error "
                           f"{m['max_abs_vs_fp32_reference_all_rows']:.3g} (or NaN placement) exceeds {ATOL_BETWEEN}")
    return m, reasons

