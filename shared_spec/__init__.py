"""Framework-neutral specification of FlashSAC's categorical TD target: support, float64 references, cases."""

from shared_spec.cases import CASES, GOLDEN, KINDS, Case, GoldenCase, make_inputs
from shared_spec.reference import (
    Shapes,
    categorical_td_target,
    categorical_td_target_hat,
    check_gamma,
    check_shapes,
    select_min_q,
)
from shared_spec.support import CategoricalSupport, validate_support
from shared_spec.tolerances import ATOL_BETWEEN, ATOL_FLOAT64, ATOL_GOLDEN, ATOL_MASS, atol_vs_float64

__all__ = [
    "ATOL_BETWEEN",
    "ATOL_FLOAT64",
    "ATOL_GOLDEN",
    "ATOL_MASS",
    "CASES",
    "GOLDEN",
    "KINDS",
    "Case",
    "CategoricalSupport",
    "GoldenCase",
    "Shapes",
    "atol_vs_float64",
    "categorical_td_target",
    "categorical_td_target_hat",
    "check_gamma",
    "check_shapes",
    "make_inputs",
    "select_min_q",
    "validate_support",
]
