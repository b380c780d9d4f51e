"""The fixed categorical support (atoms) of FlashSAC's distributional critic, built in exactly one place."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["BAND_MIN_DISCOUNT", "CategoricalSupport"]

# SPEC.md section 8: kernel rows with g = gamma (1 - d) >= this use the estimated run bounds; rows with 0 < g below
# it take every source between the two piles. One value for the Triton and the Pallas kernel.
BAND_MIN_DISCOUNT = 0.0625


@dataclass(frozen=True)
class CategoricalSupport:
    """N equally spaced atoms z_j = min_v + j * bin_width on [min_v, max_v].

    Every implementation (numpy, torch, JAX, Triton, Pallas) derives its constants from this class, so the
    atoms, the bin width and the reciprocal bin width are defined once.

    Attributes:
        num_bins: N >= 2.
        min_v: lowest atom (FlashSAC: -normalized_G_max = -5.0).
        max_v: highest atom, > min_v (FlashSAC: +5.0).
    """

    num_bins: int = 101
    min_v: float = -5.0
    max_v: float = 5.0

    def __post_init__(self) -> None:
        validate_support(self.num_bins, self.min_v, self.max_v)

    @property
    def bin_width(self) -> float:
        """Delta = (max_v - min_v) / (N - 1), a Python float (float64)."""
        return (self.max_v - self.min_v) / (self.num_bins - 1)

    @property
    def inv_bin_width(self) -> float:
        """1 / Delta = (N - 1) / (max_v - min_v), float64. Implementations multiply by its fp32 rounding."""
        return (self.num_bins - 1) / (self.max_v - self.min_v)

    def atoms(self, dtype: type | np.dtype = np.float32) -> np.ndarray:
        """The atoms, computed in float64 as min_v + j * Delta and rounded once to `dtype`.

        Returns:
            (N,) array. atoms()[0] == min_v and atoms()[-1] == max_v exactly.
        """
        j = np.arange(self.num_bins, dtype=np.float64)
        z = self.min_v + j * self.bin_width  # (N,)
        z[-1] = self.max_v  # exact top atom regardless of rounding of j * Delta
        return z.astype(dtype)


def validate_support(num_bins: object, min_v: object, max_v: object) -> None:
    """Raise TypeError/ValueError naming the argument if (num_bins, min_v, max_v) is not a valid support."""
    if isinstance(num_bins, bool) or not isinstance(num_bins, int | np.integer):
        raise TypeError(f"num_bins must be an int >= 2, got {type(num_bins).__name__} {num_bins!r}")
    if num_bins < 2:
        raise ValueError(f"num_bins must be >= 2, got {num_bins}")
    for name, v in (("min_v", min_v), ("max_v", max_v)):
        if isinstance(v, bool) or not isinstance(v, int | float | np.floating | np.integer):
            raise TypeError(f"{name} must be a real number, got {type(v).__name__} {v!r}")
        if not math.isfinite(float(v)):
            raise ValueError(f"{name} must be finite, got {v}")
    if not float(min_v) < float(max_v):
        raise ValueError(f"min_v must be < max_v, got min_v={min_v}, max_v={max_v}")
