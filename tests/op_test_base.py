"""One shared test class for every implementation of the op; each backend is a small subclass (STYLE 15)."""

from __future__ import annotations

import numpy as np
import pytest

from shared_spec import CASES, GOLDEN, Case, make_inputs
from shared_spec import reference as R
from shared_spec.tolerances import ATOL_BETWEEN, ATOL_GOLDEN, ATOL_MASS, atol_vs_float64, max_abs_error, max_mass_error


def selected_log_probs(x: dict) -> np.ndarray:
    _, lp = R.select_min_q(x["next_qs"].astype(np.float64), x["next_log_probs"].astype(np.float64))
    return lp


class OpTests:
    """Subclasses set `name` and implement `run(inputs, gamma, min_v, max_v, dtype) -> np.ndarray (B, N)`."""

    name = "?"
    dtypes = ("float32",)

    def run(self, x: dict, gamma: float, min_v: float = -5.0, max_v: float = 5.0, dtype: str = "float32"):
        raise NotImplementedError

    @pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g.name)
    def test_golden(self, golden):
        got = self.run(golden.inputs, golden.gamma, golden.min_v, golden.max_v)
        assert np.array_equal(np.isnan(got), np.isnan(golden.expected)), "NaN rows differ from the golden case"
        assert max_abs_error(got, golden.expected) <= ATOL_GOLDEN

    @pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
    def test_matches_float64_spec(self, case: Case):
        x = case.inputs()
        got = self.run(x, case.gamma, case.min_v, case.max_v)
        want = R.categorical_td_target(**x, gamma=case.gamma, min_v=case.min_v, max_v=case.max_v)
        assert got.dtype == np.float32 and got.shape == want.shape
        err = max_abs_error(got, want)
        assert err <= atol_vs_float64(case.N), f"{self.name} {case.id}: max abs error {err:.3g} vs float64"
        assert (got[~np.isnan(got)] >= 0).all(), "negative probability"
        assert max_mass_error(got, selected_log_probs(x)) <= ATOL_MASS

    def test_nonfinite_rows_follow_the_policy_and_stay_local(self):
        x = make_inputs(200, kind="nonfinite", seed=3)
        got = self.run(x, 0.99)
        want = R.categorical_td_target(**x, gamma=0.99)
        bad = np.isnan(want).any(axis=1)
        assert 0 < bad.sum() < 200
        assert np.isnan(got[bad]).all(), "an invalid row is not all NaN"
        assert not np.isnan(got[~bad]).any(), "NaN leaked into a valid row"
        clean = {k: np.array(v) for k, v in x.items()}
        for k in ("reward", "terminated", "next_alpha_log_pi"):
            clean[k][bad] = 0.0
        clean["next_qs"][:, bad] = 0.0
        clean["next_log_probs"][:, bad] = -np.log(101.0)
        assert np.array_equal(self.run(clean, 0.99)[~bad], got[~bad]), "valid rows depend on other rows' values"

    def test_overflowing_log_probs_make_a_nan_row(self):
        # SPEC.md 6.5: exp(100) overflows float32, so the row's mass is not finite -> NaN row, other rows untouched.
        x = make_inputs(6, kind="ties", seed=13)
        x["next_log_probs"][0, 2, 7] = 100.0
        x["next_log_probs"][1, 4, 7] = np.inf  # critic 1 is never selected (ties -> critic 0): invisible
        got = self.run(x, 0.99)
        assert np.isnan(got[2]).all()
        assert not np.isnan(np.delete(got, 2, axis=0)).any()
        assert np.array_equal(np.isnan(got), np.isnan(R.categorical_td_target(**x, gamma=0.99)))

    def test_large_finite_log_probs_overflow_only_the_sum(self):
        # SPEC.md 6.5 with every exp finite: 101 x exp(87) overflows float32 (NaN row), 101 x exp(80) does not (the
        # row follows the arithmetic, scaled up by e**80).
        x = make_inputs(6, kind="random", seed=14)
        sel = np.argmin(x["next_qs"], axis=0)
        x["next_log_probs"][sel[1], 1] = 87.0
        x["next_log_probs"][sel[3], 3] += np.float32(80.0)
        got, want = self.run(x, 0.99), R.categorical_td_target(**x, gamma=0.99)
        assert np.isnan(got[1]).all() and np.array_equal(np.isnan(got), np.isnan(want))
        assert np.abs(got[3] - want[3]).max() <= atol_vs_float64(101) * want[3].sum()
        assert max_abs_error(np.delete(got, [1, 3], axis=0), np.delete(want, [1, 3], axis=0)) <= atol_vs_float64(101)

    @pytest.mark.parametrize("gamma", [0.01, 0.07])
    def test_small_discount(self, gamma):
        # g < 1/16 leaves the banded path (SPEC.md 8); still exact.
        x = make_inputs(40, kind="mixed", seed=6)
        assert max_abs_error(self.run(x, gamma), R.categorical_td_target(**x, gamma=gamma)) <= atol_vs_float64(101)

    def test_low_precision_log_probs(self):
        for dtype in self.dtypes:
            if dtype == "float32":
                continue
            x = make_inputs(64, kind="mixed", seed=7)
            got = self.run(x, 0.99, dtype=dtype)
            fp32 = self.run(x, 0.99)
            ref_low = self.reference_low_precision(x, dtype)
            ref_err = max_abs_error(ref_low, fp32)
            assert max_abs_error(got, fp32) <= 2 * ref_err + ATOL_BETWEEN, dtype

    def reference_low_precision(self, x: dict, dtype: str) -> np.ndarray:
        """The same-dtype framework reference (the 2x rule); default: float64 spec on rounded inputs."""
        import ml_dtypes

        lp = x["next_log_probs"].astype(getattr(ml_dtypes, dtype) if dtype == "bfloat16" else dtype)
        return R.categorical_td_target(**dict(x, next_log_probs=lp.astype(np.float32)), gamma=0.99)
