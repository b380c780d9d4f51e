"""The two interpreted kernels (Triton interpreter, Pallas interpret mode) compute the same bits on CPU; the JAX
"triton" backend (the Triton kernel's JAX entry point, interpreted) gives the torch Triton kernel's bits exactly.

Both kernels perform the same fp32 operations in the same order (SPEC.md section 8: exact integer edge sums,
ascending window scan) and, in interpret mode, take exp and the fixed-point split from the same functions (numpy;
the Pallas kernel calls them through host callbacks). One difference is left, and it is the reason for the only
tolerance here: XLA on CPU flushes subnormal numbers to zero in its arithmetic and numpy does not, so an output whose
value sits at the subnormal scale (a sum holding a product below 2**-126) can differ, by less than 2**-125 in
absolute value. Every other element must be bitwise identical. On the GPU both kernels flush alike (ex2.approx.ftz)
and are compared bit for bit on the GPU by `python -m bench kernel-validate`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl
import torch_impl
from shared_spec import make_inputs
from shared_spec import reference as R
from shared_spec.tolerances import atol_vs_float64, max_abs_error

SUBNORMAL_SCALE = 2.0**-125


def _inputs(B, N, E, kind, seed, strided):
    """(torch args, JAX args, JAX row kwargs) of the same inputs. strided: next_qs / next_log_probs as the second half
    of (E, 2B[, N]) buffers (a decoy first half): torch chunk views, and the whole JAX arrays with row_offset=B."""
    x = make_inputs(B, N, E, seed=seed, kind=kind)
    t_args = {k: torch.from_numpy(v) for k, v in x.items()}
    j_args, rows = {k: jnp.asarray(v) for k, v in x.items()}, {}
    if strided:
        for k in ("next_qs", "next_log_probs"):
            full = np.ascontiguousarray(np.concatenate([np.flip(x[k], 1), x[k]], axis=1))
            t_args[k], j_args[k] = torch.from_numpy(full).chunk(2, dim=1)[1], jnp.asarray(full)
        rows = {"row_offset": B}
    return t_args, j_args, rows


def _both(B, N, E, kind, gamma, seed=0, strided=False, jax_triton=False):
    """Both kernels on the same inputs (strided: see `_inputs`); jax_triton: also the JAX "triton" backend's output
    (the same interpreted Triton kernel through its JAX entry point), as a third value."""
    t_args, j_args, rows = _inputs(B, N, E, kind, seed, strided)
    t = torch_impl.categorical_td_target(**t_args, gamma=gamma, backend="triton", strict=True).numpy()
    p = np.asarray(jax_impl.categorical_td_target(**j_args, gamma=gamma, backend="pallas", strict=True, **rows))
    if jax_triton:
        return t, p, np.asarray(jax_impl.categorical_td_target(**j_args, gamma=gamma, backend="triton", strict=True,
                                                               **rows))
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
    t, p, jt = _both(B, N, E, kind, gamma, strided=strided, jax_triton=True)
    # The JAX "triton" backend runs the torch kernel's body: every bit equal, subnormals included, and the float64
    # spec's bound (SPEC.md section 7).
    assert np.array_equal(np.where(np.isnan(t), -1, t.view(np.int32)), np.where(np.isnan(jt), -1, jt.view(np.int32)))
    x = make_inputs(B, N, E, seed=0, kind=kind)
    want = R.categorical_td_target(**x, gamma=gamma)
    assert np.array_equal(np.isnan(want), np.isnan(jt)) and max_abs_error(jt, want) <= atol_vs_float64(N)
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


def _configured(B, N, E, kind, gamma, configs, strided=False, seed=5):
    """Both interpreted kernels on the same inputs under each (BR, RPP) or (BR, RPP, Q) (Q: lanes per slot tile, the
    interpreter's own without it): {(kernel, *config): (B, N) numpy}."""
    from jax_impl import ops as pallas_ops
    from torch_impl.reference import support_constants
    from triton_kernels import categorical_td_target_kernel, launch

    t_args, j_args, rows = _inputs(B, N, E, kind, seed, strided)
    names = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
    mv, inv_delta = support_constants(N, -5.0, 5.0)
    out = {}
    for cfg in configs:
        br, rpp, q = (*cfg, None)[:3]
        out["triton", *cfg] = launch(categorical_td_target_kernel, *(t_args[k] for k in names), gamma, mv, inv_delta,
                                     config={"BR": br, "RPP": rpp, **({"Q": q} if q else {})}).numpy()
        out["pallas", *cfg] = np.asarray(pallas_ops.categorical_td_target_pallas(
            *(j_args[k] for k in names), gamma, block_rows=br, rows_per_program=rpp, lanes_per_slot=q, **rows))
    return out


@pytest.mark.parametrize("B,kind,gamma,strided,configs", [
    (1, "nonfinite", 0.99, False, [(1, 4)]),  # one row: every prefetch lies past the end (clamped, never stored)
    # odd B, NaN and +-inf rows: 7 = 2 * 3 + 1 (the last program runs one tile); 4 tiles of 2 rows, the last partial
    # (row 7 is row 6 again); the GPU's row pairs: 7 slot tiles of 16 lanes, the last holding 5 (atoms 96-100)
    (7, "nonfinite", 0.99, False, [(1, 3), (2, 4), (2, 4, 16)]),
    (6, "mixed", 0.05, True, [(2, 2), (2, 2, 16)]),  # long windows (the window loop in the tile loop); row_offset
    (21, "mixed", 0.99, True, [(1, 16)]),  # the agents' layout, fewer tiles in the last program (21 = 16 + 5)
])
def test_tiles_per_program_do_not_change_the_bits(B, kind, gamma, strided, configs):
    """RPP > 1 (a loop over tiles with the next tile's loads issued early, SPEC.md 8) computes each row exactly as
    one row per program does, in both kernels (each against its own bits)."""
    out = _configured(B, 101, 2, kind, gamma, [(1, 1), *configs], strided)
    for kernel in ("triton", "pallas"):
        ref = out[kernel, 1, 1]
        for cfg in configs:
            got = out[kernel, *cfg]
            assert got.shape == ref.shape
            assert np.array_equal(np.isnan(got), np.isnan(ref)), (kernel, cfg)
            assert np.array_equal(got.view(np.int32), ref.view(np.int32)), (kernel, cfg)
    if kind == "nonfinite" and B > 1:  # the check sees NaN rows beside finite ones
        nan_rows = np.isnan(out["triton", 1, 1]).all(axis=1)
        assert nan_rows.any() and not nan_rows.all()


def test_the_baseline_kernel_file_computes_the_same_bits():
    """tests/kernel_baselines/categorical_td_target_v2.py (the one-tile kernel, no RPP parameter) runs through
    triton_kernels.launch with one tile per program and gives the package kernel's bits (RPP 1 and 3)."""
    import importlib.util
    import os

    from torch_impl.reference import support_constants
    from triton_kernels import categorical_td_target_kernel, launch

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "kernel_baselines",
                        "categorical_td_target_v2.py")
    spec = importlib.util.spec_from_file_location("baseline_v2_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = make_inputs(9, 101, 2, seed=4, kind="nonfinite")
    args = [torch.from_numpy(x[k]) for k in ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")]
    mv, inv_delta = support_constants(101, -5.0, 5.0)
    base = launch(mod.categorical_td_target_kernel, *args, 0.99, mv, inv_delta, config={"BR": 1, "num_warps": 1})
    for rpp in (1, 3):
        ours = launch(categorical_td_target_kernel, *args, 0.99, mv, inv_delta, config={"BR": 1, "RPP": rpp})
        assert np.array_equal(base.numpy().view(np.int32), ours.numpy().view(np.int32)), rpp
    with pytest.raises(ValueError, match="RPP"):
        launch(mod.categorical_td_target_kernel, *args, 0.99, mv, inv_delta, config={"BR": 1, "RPP": 2})


def _baseline_kernel(name):
    """The kernel of tests/kernel_baselines/categorical_td_target_<name>.py."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "kernel_baselines",
                        f"categorical_td_target_{name}.py")
    spec = importlib.util.spec_from_file_location(f"baseline_{name}_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.categorical_td_target_kernel


# B rows: 23 = 3 * 6 + 5 (RPP 3 of 2-row tiles: a partial last program and tile; BR 4: a partial last tile). The
# long-window cases (gamma near the band threshold: the interpreter scans up to the whole row per row) take
# 9 = 6 + 3 rows, the same partial last program, tile (both tile shapes) and window loop on fewer rows.
@pytest.mark.parametrize("N,kind,gamma,support,B", [
    (101, "nonfinite", 0.99, (-5.0, 5.0), 23),  # NaN and +-inf rows, terminated rows, clamps at both ends
    (101, "mixed", 0.99, (0.0, 1.0), 23),  # the support of a sum of 0-1 rewards: many sources near atom 1
    (101, "random", 0.0626, (-5.0, 5.0), 9),  # just above the band threshold: long windows, the window loop
    (101, "mixed", 0.0624, (-5.0, 5.0), 9),  # just below it: the whole row
    (101, "integral", 1.0, (-5.0, 5.0), 23),  # integer b: all mass on one atom
    (51, "mixed", 0.5, (-5.0, 5.0), 23),  # two slot tiles
    (256, "peaked", 0.99, (-3.0, 11.0), 23),  # slot tiles of 64 lanes (two warps on the GPU)
    (2, "mixed", 0.0, (-5.0, 5.0), 23),  # no interior atom; gamma = 0
    (101, "atom1", 0.99, (0.0, 1.0), 23),  # sources and two-hots at 0 < b < 1/2 (below)
    (51, "atom1", 0.0626, (0.0, 1.0), 9),
])
def test_the_kernel_computes_the_bits_of_the_kernel_before_the_row_pairs(N, kind, gamma, support, B):
    """The kernel (rows sharing a warp with slot tiles of 32 / BR lanes, SPEC.md 8) gives, bit for bit, the output of
    main's kernel before them (tests/kernel_baselines/categorical_td_target_cut2.py: one row a warp, four slot tiles,
    the kernel the GPU timings compare it with): the slot tiles change no weight of SPEC.md section 3, atom 1's
    included, and no sum (Triton interpreter, one row a tile with RPP 1 and 3 and rows in pairs with 16-lane slot tiles,
    against the baseline's 4 rows a tile; the Pallas kernel in interpret mode too, in pairs, up to XLA:CPU's flush of
    subnormal values, see the module docstring)."""
    from jax_impl import ops as pallas_ops
    from torch_impl.reference import support_constants
    from triton_kernels import categorical_td_target_kernel, launch

    base_kernel = _baseline_kernel("cut2")
    x = make_inputs(B, N, 2, seed=7 + N, kind="random" if kind == "atom1" else kind, min_v=support[0],
                    max_v=support[1])
    if kind == "atom1":
        # s = min_v = 0 and r = u Delta / 2: source 0 at b = c = u / 2 in (0, 1/2), with bits below 2**-24 (atom 1's
        # weight is b, where 1 - fl(1 - b) would differ; a min_v far from 0 would round them away); terminated rows
        # put their two-hot there.
        rng = np.random.default_rng(N)
        delta = (support[1] - support[0]) / (N - 1)
        x["next_alpha_log_pi"][:] = support[0]
        x["reward"][:] = (support[0] + rng.uniform(0.01, 0.99, B) * delta / 2).astype(np.float32)
        x["terminated"][:] = (np.arange(B) % 3 == 0).astype(np.float32)
    args = [torch.from_numpy(x[k]) for k in ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")]
    mv, inv_delta = support_constants(N, *support)
    base = launch(base_kernel, *args, gamma, mv, inv_delta, config={"BR": 4, "RPP": 1}).numpy()
    for cfg in ({"BR": 4, "RPP": 1}, {"BR": 2, "RPP": 3}, {"BR": 2, "RPP": 3, "Q": 16 if N > 2 else 2}):
        ours = launch(categorical_td_target_kernel, *args, gamma, mv, inv_delta, config=cfg).numpy()
        assert np.array_equal(np.isnan(base), np.isnan(ours)), cfg
        assert np.array_equal(base.view(np.int32), ours.view(np.int32)), (cfg, np.abs(base - ours).max())
    names = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
    pal = np.asarray(pallas_ops.categorical_td_target_pallas(*(jnp.asarray(x[k]) for k in names), gamma,
                                                             min_v=support[0], max_v=support[1], block_rows=2,
                                                             rows_per_program=3,
                                                             lanes_per_slot=16 if N > 2 else 2))
    ok = ~np.isnan(base)
    assert np.array_equal(np.isnan(base), np.isnan(pal))
    assert np.all((base.view(np.int32) == pal.view(np.int32)) | ~ok |
                  (np.abs(base.astype(np.float64) - pal.astype(np.float64)) < SUBNORMAL_SCALE))
