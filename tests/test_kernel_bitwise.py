"""The two interpreted kernels (Triton interpreter, Pallas interpret mode) compute the same bits on CPU.

Both kernels perform the same fp32 operations in the same order (SPEC.md section 8: exact integer edge sums,
ascending window scan) and, in interpret mode, take exp and the fixed-point split from the same functions (numpy;
the Pallas kernel calls them through host callbacks). One difference is left, and it is the reason for the only
tolerance here: XLA on CPU flushes subnormal numbers to zero in its arithmetic and numpy does not, so an output whose
value sits at the subnormal scale (a sum holding a product below 2**-126) can differ, by less than 2**-125 in
absolute value. Every other element must be bitwise identical. On the GPU both kernels flush alike (ex2.approx.ftz)
and are compared bit for bit by bench/gpu_bitwise.py.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl
import torch_impl
from shared_spec import make_inputs

SUBNORMAL_SCALE = 2.0**-125


def _both(B, N, E, kind, gamma, seed=0, strided=False):
    """Both kernels on the same inputs. strided: next_qs / next_log_probs as the second half of (E, 2B[, N])
    buffers (a decoy first half): torch chunk views, and the whole JAX arrays with row_offset=B."""
    x = make_inputs(B, N, E, seed=seed, kind=kind)
    t_args = {k: torch.from_numpy(v) for k, v in x.items()}
    j_args, rows = {k: jnp.asarray(v) for k, v in x.items()}, {}
    if strided:
        for k in ("next_qs", "next_log_probs"):
            full = np.ascontiguousarray(np.concatenate([np.flip(x[k], 1), x[k]], axis=1))
            t_args[k], j_args[k] = torch.from_numpy(full).chunk(2, dim=1)[1], jnp.asarray(full)
        rows = {"row_offset": B}
    t = torch_impl.categorical_td_target(**t_args, gamma=gamma, backend="triton", strict=True).numpy()
    p = np.asarray(jax_impl.categorical_td_target(**j_args, gamma=gamma, backend="pallas", strict=True, **rows))
    return t, p


@pytest.mark.parametrize("B,N,E,kind,gamma,strided", [
    (37, 101, 2, "nonfinite", 0.99, False),  # every input kind, NaN and +-inf rows
    (19, 51, 3, "mixed", 0.5, False),
    (19, 101, 2, "mixed", 0.05, False),  # below the band threshold: the whole interior is scanned
    (9, 2, 1, "mixed", 1.0, False),
    (5, 256, 2, "peaked", 0.99, False),
    (21, 51, 2, "nonfinite", 0.99, True),  # the agents' layout: torch views, JAX row_offset
])
def test_interpreted_kernels_agree_bitwise(B, N, E, kind, gamma, strided):
    t, p = _both(B, N, E, kind, gamma, strided=strided)
    assert np.array_equal(np.isnan(t), np.isnan(p)), "NaN rows differ"
    ok = ~np.isnan(t)
    same_bits = t.view(np.int32) == p.view(np.int32)
    subnormal_scale = np.abs(t.astype(np.float64) - p.astype(np.float64)) < SUBNORMAL_SCALE
    assert np.all(same_bits | ~ok | subnormal_scale), np.abs(t - p)[ok].max()
    # The check can fail: a one-ulp change of an ordinary element is caught.
    q = p.copy()
    i = np.argwhere(ok & (np.abs(p) > 1e-3))[0]
    q[tuple(i)] = np.nextafter(q[tuple(i)], np.float32(2.0))
    assert not np.all((t.view(np.int32) == q.view(np.int32)) | ~ok |
                      (np.abs(t.astype(np.float64) - q.astype(np.float64)) < SUBNORMAL_SCALE))


def test_tile_shape_does_not_change_the_bits():
    """Every row sum is exact and the window sums are per lane: rows per program change nothing (the Triton kernel
    here; the Pallas kernel's twin is in tests/test_jax_pallas.py)."""
    from torch_impl.reference import support_constants
    from triton_kernels import categorical_td_target_kernel, launch

    x = make_inputs(21, 101, 2, seed=3, kind="nonfinite")
    args = [torch.from_numpy(x[k]) for k in ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")]
    mv, inv_delta = support_constants(101, -5.0, 5.0)
    a, b = (launch(categorical_td_target_kernel, *args, 0.99, mv, inv_delta, config={"BR": br}).numpy()
            for br in (1, 8))
    assert np.array_equal(a.view(np.int32), b.view(np.int32))
