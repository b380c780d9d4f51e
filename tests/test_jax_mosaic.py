"""The Mosaic GPU kernel ("mosaic" backend) on CPU: Mosaic GPU's interpret mode against the float64 spec and, bit for
bit, against the interpreted Pallas-Triton kernel; the CUDA cross-lowering with the PTX it carries; the dispatch.

Interpret mode runs the kernel body with the interpreted Pallas-Triton kernel's arithmetic (numpy's exp, the product
rounded before each accumulation, int64 exact sums); the GPU's ex2.approx / fma.rn / mul.rn are checked as the
instructions in the lowered kernel, the accumulation order under fma.rn through a NumPy model (below), and the bits
only on a GPU (`python -m bench kernel-validate`).
"""

from __future__ import annotations

import functools
import logging
import re
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_impl
from jax_impl import dispatch, mosaic_ops
from jax_impl import mosaic_kernel as mk
from jax_impl import pallas_kernel as pk
from jax_impl.lowering import ALLOW_UNTESTED_JAX_ENV
from shared_spec import make_inputs
from shared_spec import reference as R
from shared_spec.tolerances import ATOL_MASS, atol_vs_float64, max_abs_error, max_mass_error
from tests.op_test_base import selected_log_probs

NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv(mosaic_ops.INTERPRET_ENV, "1")
    yield


def bits(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), -1, np.asarray(x, np.float32).view(np.int32))


def inputs(B, N, E, kind, seed, dtype="float32", offset=0, min_v=-5.0, max_v=5.0):
    x = make_inputs(B + offset, N, E, seed=seed, kind=kind, min_v=min_v, max_v=max_v)
    a = [jnp.asarray(x[k]) for k in NAMES]
    a[1] = a[1].astype(DTYPES[dtype])
    a[2:] = [v[offset:] for v in a[2:]]
    rows = {k: (v[:, offset:] if k in NAMES[:2] else v[offset:]) for k, v in x.items()}
    if dtype != "float32":  # the spec on the rounded log-probs
        rows["next_log_probs"] = np.asarray(a[1][:, offset:].astype(jnp.float32))
    return a, rows


# (B, N, E, kind, gamma, log-prob dtype, row offset, support): odd B and B = 1, N from 2 to 1024, E != 2, every
# edge case of shared_spec.KINDS in the mixed rows, NaN rows, gamma 0, at and just below the band threshold 1/16,
# the row-offset (strided view) form read in place (N = 128) and through the padded copy (N = 7).
CONFIGS = [
    (9, 101, 2, "mixed", 0.99, "float32", 0, (-5.0, 5.0)),
    (7, 101, 2, "nonfinite", 0.99, "float32", 0, (-5.0, 5.0)),
    (5, 101, 2, "mixed", 1 / 16, "float32", 0, (-5.0, 5.0)),
    (5, 101, 3, "mixed", 0.06, "bfloat16", 0, (-5.0, 5.0)),
    (5, 9, 2, "integral", 0.0, "float32", 0, (-5.0, 5.0)),
    (1, 2, 1, "mixed", 0.5, "float32", 0, (-5.0, 5.0)),
    (3, 7, 3, "ties", 0.9, "float16", 2, (-5.0, 5.0)),
    (3, 128, 2, "terminated", 1.0, "float32", 4, (-3.0, 11.0)),
    (2, 1024, 2, "peaked", 0.99, "float32", 0, (-5.0, 5.0)),
]


@pytest.mark.parametrize("B, N, E, kind, gamma, dtype, offset, support", CONFIGS,
                         ids=[f"B{c[0]}-N{c[1]}-E{c[2]}-{c[3]}-g{c[4]:.3g}-{c[5]}-o{c[6]}" for c in CONFIGS])
def test_interpreted_kernel_matches_the_spec_and_the_pallas_kernel_bitwise(B, N, E, kind, gamma, dtype, offset,
                                                                          support):
    a, rows = inputs(B, N, E, kind, seed=B * N + E, dtype=dtype, offset=offset, min_v=support[0], max_v=support[1])
    ro = offset if offset else None
    got = np.asarray(mk.launch(*a, gamma, *support, interpret=True, row_offset=ro))
    want = R.categorical_td_target(**rows, gamma=gamma, min_v=support[0], max_v=support[1])
    assert got.dtype == np.float32 and got.shape == (B, N)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want).any(axis=1)
    assert ok.any()
    assert max_abs_error(got[ok], want[ok]) <= atol_vs_float64(N)
    assert (got[ok] >= 0).all() and max_mass_error(got[ok], selected_log_probs(rows)[ok]) <= ATOL_MASS
    # The dense window sum and the per-lane exact sums give the Pallas-Triton kernel's bits (same interpretation).
    pallas = np.asarray(pk.launch(*a, gamma, *support, interpret=True, row_offset=ro))
    assert np.array_equal(bits(got), bits(pallas))


def test_total_mass_overflow_branch():
    """Log-probs of 87 overflow the row's total mass (a NaN row), 80 do not (SPEC.md 6.5): the total is summed only
    in the branch such rows take (the Triton kernel's), with the interpreted Pallas kernel's bits."""
    x = make_inputs(6, 101, 2, kind="random", seed=14)
    sel = np.argmin(x["next_qs"], axis=0)
    x["next_log_probs"][sel[1], 1] = 87.0
    x["next_log_probs"][sel[3], 3] += np.float32(80.0)
    a = [jnp.asarray(x[k]) for k in NAMES]
    got = np.asarray(mk.launch(*a, 0.99, interpret=True))
    want = R.categorical_td_target(**x, gamma=0.99)
    assert np.isnan(got[1]).all() and np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(bits(got), bits(np.asarray(pk.launch(*a, 0.99, interpret=True))))


def test_deterministic_and_rows_independent():
    a, _ = inputs(9, 33, 2, "nonfinite", seed=5)
    first = np.asarray(mk.launch(*a, 0.97, interpret=True))
    assert np.array_equal(bits(first), bits(np.asarray(mk.launch(*a, 0.97, interpret=True))))
    bad = np.isnan(first).all(axis=1)
    assert 0 < bad.sum() < 9 and not np.isnan(first[~bad]).any(), "a NaN row leaked into another row"
    clean = [np.array(v) for v in a]
    clean[0][:, bad] = 0.0
    clean[1][:, bad] = -np.log(33.0)
    for v in clean[2:]:
        v[bad] = 0.0
    again = np.asarray(mk.launch(*(jnp.asarray(v) for v in clean), 0.97, interpret=True))
    assert np.array_equal(bits(again[~bad]), bits(first[~bad]))


def test_no_races_in_the_simulated_gpu():
    """Mosaic GPU's interpreter with its race detector: the staged probabilities are written and read under the
    warpgroup barriers the lowering inserts around every shared-memory store."""
    from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as ipc

    a, _ = inputs(2, 5, 2, "mixed", seed=2)
    mk.launch(*a, 0.9, interpret=mk.interpret_params(detect_races=True)).block_until_ready()
    assert not ipc.get_races().races_found


def test_row_chunks_when_flat_offsets_would_overflow(monkeypatch):
    a, _ = inputs(7, 5, 2, "mixed", seed=4)
    whole = np.asarray(mk.launch(*a, 0.9, interpret=True))
    mk._jitted.clear_cache()
    monkeypatch.setattr(mk, "MAX_FLAT", 2 * 5 * 3)  # 3 rows of 2 critics x 5 atoms per chunk
    try:
        chunked = np.asarray(mk.launch(*a, 0.9, interpret=True))
    finally:
        mk._jitted.clear_cache()
    assert np.array_equal(bits(chunked), bits(whole))


# The instructions the GPU path must carry (the Triton kernel's): exp, the rounded products and fused accumulations,
# the exact sums' truncation, split and join; with interior atoms (N > 2) the window's reciprocal and start.
PTX = ("ex2.approx.ftz.f32", "mul.rn.f32", "fma.rn.f32", "cvt.rzi.s64.f32", "and.b32 $0, $0, 524287",
       "shr.u64 a, a, 19", "cvt.rn.f32.s64")
WINDOW_PTX = ("rcp.approx.ftz.f32", "cvt.rpi.u32.f32", "cvt.rpi.f32.f32")


@pytest.mark.parametrize("default_semantics", ["this-jax", "Warpgroup"])
@pytest.mark.parametrize("N, E, dtype, offset", [(101, 2, "float32", 0), (2, 1, "bfloat16", 0),
                                                 (1024, 3, "float16", 0), (128, 2, "float32", 3)])
def test_lowers_for_cuda_to_a_mosaic_gpu_call_with_the_triton_kernels_ptx(N, E, dtype, offset, default_semantics,
                                                                          monkeypatch):
    """The Pallas Mosaic GPU lowering runs in Python (no GPU, no Mosaic GPU runtime needed). "Warpgroup": plgpu's
    CompilerParams default to Warpgroup lowering semantics (JAX >= 0.11's default); the kernel sets its own."""
    if default_semantics != "this-jax":
        plgpu = mk.plgpu
        semantics = getattr(plgpu.LoweringSemantics, default_semantics)
        monkeypatch.setattr(plgpu, "CompilerParams", functools.partial(plgpu.CompilerParams,
                                                                        lowering_semantics=semantics))
    a, _ = inputs(5, N, E, "mixed", seed=1, dtype=dtype, offset=offset)

    def f(*args):
        return mk.launch(*args[:5], args[5], interpret=False, row_offset=offset or None)

    mk._jitted.clear_cache()  # the kernel is traced afresh, with this test's CompilerParams
    try:
        text = jax.jit(f).trace(*a, jnp.float32(0.9)).lower(lowering_platforms=("cuda",)).as_text()
    finally:
        mk._jitted.clear_cache()
    assert "stablehlo.custom_call @mosaic_gpu_v2" in text and "__gpu$xla.gpu.triton" not in text
    # The rows are read and written in place (per-lane loads and masked stores): no padded copy, no sliced output.
    assert "stablehlo.pad" not in text and "stablehlo.slice" not in text
    if N > 2:  # the windows' per-lane gathers from the staged row and the loop past the unrolled steps
        assert "memref.load" in text and "scf.for" in text
    missing = [op for op in PTX + (WINDOW_PTX if N > 2 else ()) if op not in text]
    assert not missing, f"instructions missing from the lowered kernel: {missing}"


@pytest.mark.usefixtures("pallas_validated_on_h200")
class TestMosaicDispatch:
    def setup_method(self):
        dispatch.reset_dispatch()
        mosaic_ops.reset_self_tests()

    def teardown_method(self):
        dispatch.reset_dispatch()
        mosaic_ops.reset_self_tests()

    def test_by_name_it_runs_the_kernel_and_auto_never_chooses_it_unvalidated(self):
        x = make_inputs(4, 7, 2, seed=8, kind="mixed")
        out = jax_impl.categorical_td_target(**{k: jnp.asarray(v) for k, v in x.items()}, gamma=0.9,
                                             backend="mosaic", strict=True)
        direct = mk.launch(*(jnp.asarray(x[k]) for k in NAMES), 0.9, interpret=True)
        assert np.array_equal(bits(np.asarray(out)), bits(np.asarray(direct)))
        assert jax_impl.resolve_backend("auto", num_bins=7).backend != "mosaic"

    def test_backend_info_says_why_it_cannot_run_here(self, monkeypatch):
        monkeypatch.setenv(mosaic_ops.INTERPRET_ENV, "0")
        monkeypatch.setitem(dispatch.GATES, "triton", lambda key: "simulated: triton")
        info = jax_impl.backend_info()
        assert list(info["backends"]) == ["jax", "triton", "pallas", "mosaic"]
        assert info["backends"]["mosaic"].startswith("platform cpu: the Mosaic GPU kernel needs an NVIDIA GPU of "
                                                     "compute capability >= 9.0")
        assert "no GPU validation result for jax/mosaic" in info["validated"]["mosaic"]
        assert info["auto_order"][-1] == "mosaic"

    def _expect_fallback(self, caplog, reason: str, **config):
        with caplog.at_level(logging.INFO, logger="flashsac.jax_impl"):
            for _ in range(2):
                assert jax_impl.resolve_backend("mosaic", **config).backend == "jax"
        hits = [r for r in caplog.records if reason in r.getMessage()]
        assert len(hits) == 1 and hits[0].levelno == logging.WARNING
        assert jax_impl.dispatch_stats()["fallback_count"] == 1
        with pytest.raises(jax_impl.BackendUnavailable, match=re.escape(reason)):
            jax_impl.resolve_backend("mosaic", strict=True, **config)

    def test_no_gpu(self, monkeypatch, caplog):
        monkeypatch.setenv(mosaic_ops.INTERPRET_ENV, "0")
        self._expect_fallback(caplog, "the Mosaic GPU kernel needs an NVIDIA GPU of compute capability >= 9.0")

    def test_pre_hopper_gpu(self, monkeypatch, caplog):
        monkeypatch.setenv(mosaic_ops.INTERPRET_ENV, "0")
        fake = SimpleNamespace(client=SimpleNamespace(platform_version="cuda 12.8"), compute_capability="8.0",
                               device_kind="NVIDIA A100")
        real_devices = jax.devices
        monkeypatch.setattr(jax, "devices", lambda backend=None: [fake] if backend == "gpu" else real_devices(backend))
        self._expect_fallback(caplog, "compute capability 8.0 < 9.0 (NVIDIA A100)", platform="gpu")

    def test_hopper_without_the_mosaic_gpu_runtime(self, monkeypatch, caplog):
        monkeypatch.setenv(mosaic_ops.INTERPRET_ENV, "0")
        fake = SimpleNamespace(client=SimpleNamespace(platform_version="cuda 13.0"), compute_capability="9.0",
                               device_kind="NVIDIA H200")
        real_devices = jax.devices
        monkeypatch.setattr(jax, "devices", lambda backend=None: [fake] if backend == "gpu" else real_devices(backend))
        monkeypatch.setattr(mosaic_ops, "MOSAIC_GPU_RUNTIME_MODULES", ("no_such_plugin._mosaic_gpu_ext",))
        self._expect_fallback(caplog, "the Mosaic GPU runtime is not installed (no_such_plugin._mosaic_gpu_ext: No "
                              "module named 'no_such_plugin')", platform="gpu")
        assert '"jax[cuda13]==' in mosaic_ops.mosaic_runtime_missing()

    def test_jax_version_outside_the_tested_range(self, monkeypatch, caplog):
        monkeypatch.delenv(ALLOW_UNTESTED_JAX_ENV, raising=False)
        monkeypatch.setattr(mosaic_ops, "JAX_VERSION", "0.13.0")
        self._expect_fallback(caplog, "jax 0.13.0 is outside the tested range")

    @pytest.mark.parametrize("config, reason", [(dict(dtype=jnp.float64), "dtype float64 is not supported"),
                                                (dict(num_bins=4097), "N = 4097 atoms")])
    def test_unsupported_configuration(self, caplog, config, reason):
        self._expect_fallback(caplog, reason, **config)

    def test_self_test_failure_is_a_fallback(self, monkeypatch, caplog):
        def broken(*args, **kwargs):
            raise RuntimeError("simulated Mosaic GPU lowering failure")

        mk._jitted.clear_cache()
        monkeypatch.setattr(mk, "_mosaic_forward", broken)
        try:
            self._expect_fallback(caplog, "self-test: RuntimeError: simulated Mosaic GPU lowering failure", num_bins=5)
        finally:
            mk._jitted.clear_cache()
        assert any("Traceback" in tb and "simulated" in tb for tb in mosaic_ops.self_test_errors().values())


# ------------------------------------------------------------------------------------------------------------------
# A NumPy model of the GPU arithmetic (interpret mode rounds each product before adding it; the GPU fuses them with
# fma.rn.f32): with true fp32 fused multiply-adds, the dense sum over every source gives the bits of any window that
# contains the run of sources feeding an atom (the Triton kernel's window), and the two hat forms agree for k >= 2.


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """fl32(a * b + c) rounded once (fma.rn.f32): a * b is exact in float64, the sum is rounded to odd in float64
    (TwoSum), and float64 -> float32 is then correctly rounded (53 >= 2 * 24 + 2)."""
    x = a.astype(np.float64) * b.astype(np.float64)
    y = np.broadcast_to(c, x.shape).astype(np.float64)
    s = x + y
    bb = s - x
    err = (x - (s - bb)) + (y - bb)
    even = (s.view(np.int64) & 1) == 0
    s = np.where((err != 0) & even, np.nextafter(s, s + err), s)
    return s.astype(np.float32)


def test_fma32_is_a_single_rounding():
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(10000).astype(np.float32) for _ in range(3))
    from fractions import Fraction

    for i in range(0, 10000, 97):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        lo = np.float32(float(exact))
        cands = [np.nextafter(lo, np.float32(-np.inf)), lo, np.nextafter(lo, np.float32(np.inf))]
        best = min(cands, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.array(v).view(np.int32)) & 1))
        assert fma32(a[i:i + 1], b[i:i + 1], c[i:i + 1])[0] == best
    assert fma32(np.float32([2 ** -30]), np.float32([1.0]), np.float32([1.0]))[0] == np.float32(1.0)


def _positions(x: dict, gamma: float, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p, b, g) of the valid rows with g > 0: the section-3 fp32 operation order (numpy rounds every product)."""
    f32 = np.float32
    sel = np.argmin(x["next_qs"], axis=0)
    lp = np.take_along_axis(x["next_log_probs"], sel[None, :, None], axis=0)[0].astype(f32)
    r, d, s = (x[k].astype(f32) for k in ("reward", "terminated", "next_alpha_log_pi"))
    min_v, inv_delta = f32(-5.0), f32((N - 1) / 10.0)
    g = f32(gamma) * (f32(1) - d)
    c = ((r - min_v) + g * (min_v - s)) * inv_delta
    b = c[:, None] + g[:, None] * np.arange(N, dtype=f32)[None, :]
    p = np.exp(lp)
    ok = np.isfinite(b).all(axis=1) & np.isfinite(p).all(axis=1) & (g > 0) & (d >= 0) & (d <= 1)
    return p[ok], b[ok], g[ok]


def _hat_first(b, k):
    return np.minimum(np.clip((k + np.float32(1)) - b, 0, 1), np.clip(b - (k - np.float32(1)), 0, 1))


@pytest.mark.parametrize("N, kind, gamma", [(101, "mixed", 0.99), (101, "peaked", 0.5), (101, "integral", 1.0),
                                            (7, "random", 0.3), (256, "mixed", 0.07), (1024, "peaked", 0.99)])
def test_model_dense_fma_sum_equals_every_window_containing_the_run(N, kind, gamma):
    x = make_inputs(24 if N <= 256 else 6, N, 2, seed=N + 1, kind=kind)
    p, b, _ = _positions(x, gamma, N)
    assert len(p) > 0
    k = np.arange(N, dtype=np.float32)[None, :]
    dense = np.zeros(b.shape, np.float32)
    w_all = [_hat_first(b[:, j:j + 1], k) for j in range(N)]  # (rows, N) weights of source j at every atom
    for j in range(N):
        dense = fma32(p[:, j:j + 1], w_all[j], dense)
    # The run feeding atom k: sources with k - 1 < b_j < k + 1 (a contiguous, possibly empty range, as b is sorted).
    feeds = (b[:, :, None] > k[:, None, :] - 1) & (b[:, :, None] < k[:, None, :] + 1)  # (rows, j, k)
    first = np.where(feeds.any(axis=1), feeds.argmax(axis=1), 0)
    last = np.where(feeds.any(axis=1), N - 1 - feeds[:, ::-1].argmax(axis=1), -1)
    rng = np.random.default_rng(N)
    for _ in range(3):  # windows [j0, j1] around the run, each edge moved outwards by a random amount
        j0 = np.maximum(first - rng.integers(0, 3, first.shape), 0)
        j1 = np.minimum(np.maximum(last, first) + rng.integers(0, 3, last.shape), N - 1)
        win = np.zeros(b.shape, np.float32)
        for j in range(N):
            inside = (j0 <= j) & (j <= j1)
            win = np.where(inside, fma32(p[:, j:j + 1], w_all[j], win), win)
        assert np.array_equal(win.view(np.int32), dense.view(np.int32))
    # The two hat forms give the same weight bits at every atom k >= 2 (the Triton kernel's second form there).
    for j in range(0, N, max(1, N // 16)):
        second = np.clip(np.float32(1) - np.abs(b[:, j:j + 1] - k), 0, 1)
        assert np.array_equal(w_all[j][:, 2:].view(np.int32), second[:, 2:].view(np.int32))


# ------------------------------------------------------------------------------------------------------------------
# Mosaic GPU marks its fp additions and multiplications contractible (LLVM may fuse a product into a following add):
# on the GPU path no plain product may meet an addition; each is mul.rn.f32 / fma.rn.f32 inline PTX.

_TRANSPARENT = {"broadcast_in_dim", "reshape", "squeeze", "layout_cast", "convert_element_type", "copy"}


def _products_meeting_additions(jaxpr) -> list[str]:
    """Float `mul` results that reach an `add` or `sub` through register-level no-ops (broadcasts, reshapes, layout
    casts), also inside nested jaxprs (jnp.where's jit, loops)."""
    found = []

    def subjaxprs(eqn):
        for v in eqn.params.values():
            for item in v if isinstance(v, (tuple, list)) else [v]:
                if hasattr(item, "jaxpr") and hasattr(item, "consts"):
                    yield item.jaxpr
                elif type(item).__name__ == "Jaxpr":
                    yield item

    def reaches_add(j, var) -> bool:
        for e in j.eqns:
            if not any(v is var for v in e.invars):
                continue
            name = e.primitive.name
            if name in ("add", "sub"):
                return True
            if name in _TRANSPARENT and reaches_add(j, e.outvars[0]):
                return True
            if name == "jit":
                inner = e.params["jaxpr"].jaxpr
                for pos, v in enumerate(e.invars):
                    if v is var and reaches_add(inner, inner.invars[pos]):
                        return True
        return False

    def walk(j):
        for e in j.eqns:
            if e.primitive.name == "mul" and jnp.issubdtype(e.outvars[0].aval.dtype, jnp.floating):
                if reaches_add(j, e.outvars[0]):
                    found.append(str(e))
            for sub in subjaxprs(e):
                walk(sub)

    walk(jaxpr)
    return found


def test_no_plain_product_meets_an_addition_on_the_gpu_path():
    a, _ = inputs(3, 101, 2, "mixed", seed=1)

    def kernel_jaxpr(interpret):
        return jax.make_jaxpr(lambda *x: mk._mosaic_forward(*x, -5.0, 5.0, interpret, 0))(*a, jnp.float32(0.9)).jaxpr

    assert _products_meeting_additions(kernel_jaxpr(False)) == []
    # The check sees them: interpret mode computes the raw c (g * (min_v - s) added unrounded) and the epilogue's
    # acc + a * b with plain products.
    assert len(_products_meeting_additions(kernel_jaxpr(True))) >= 2
