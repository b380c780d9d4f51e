"""The fused Pallas kernel ("pallas" backend) on CPU: interpret mode against the spec, CUDA cross-lowering, dispatch.

tests/conftest.py sets FLASHSAC_PALLAS_INTERPRET=1, so the kernel runs in Pallas interpret mode here; the lowering
check compiles the same kernel for CUDA (Triton IR, no execution) so unsupported shapes or ops fail on CPU CI.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import re
import subprocess
import sys
import textwrap
import warnings
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_impl
from jax_impl import dispatch, ops
from jax_impl import pallas_kernel as pk
from jax_impl.lowering import ALLOW_UNTESTED_JAX_ENV
from jax_impl.reference import categorical_td_target_reference
from shared_spec import CASES, Case, make_inputs
from shared_spec import reference as R
from shared_spec.launch_config import kernel_config
from shared_spec.tolerances import ATOL_BETWEEN, atol_vs_float64, max_abs_error
from tests.op_test_base import OpTests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
TRITON_CALL = "__gpu$xla.gpu.triton"


def to_jax(x: dict, dtype: str = "float32") -> dict:
    out = {k: jnp.asarray(v) for k, v in x.items()}
    out["next_log_probs"] = out["next_log_probs"].astype(DTYPES[dtype])
    return out


def pallas(x: dict, gamma, dtype: str = "float32", min_v: float = -5.0, max_v: float = 5.0) -> np.ndarray:
    """The kernel through the public dispatch, strict (a fallback would raise). Returns (B, N) float32 numpy."""
    out = jax_impl.categorical_td_target(**to_jax(x, dtype), gamma=gamma, min_v=min_v, max_v=max_v,
                                         backend="pallas", strict=True)
    assert out.dtype == jnp.float32
    return np.asarray(out)


_jnp_reference = jax.jit(categorical_td_target_reference, static_argnums=(6, 7))


def jnp_reference(x: dict, gamma: float, dtype: str = "float32", min_v: float = -5.0,
                  max_v: float = 5.0) -> np.ndarray:
    """The jitted jnp reference ("jax" backend) on the same inputs. Returns (B, N) float32 numpy."""
    a = to_jax(x, dtype)
    return np.asarray(_jnp_reference(*(a[k] for k in NAMES), jnp.float32(gamma), min_v, max_v))


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv(ops.INTERPRET_ENV, "1")
    yield


class TestPallasKernel(OpTests):
    """SPEC cases, golden cases, NaN policy, N = 1024, small discounts, bf16/fp16 (shared OpTests)."""

    name = "pallas"
    dtypes = ("float32", "bfloat16", "float16")

    def run(self, x, gamma, min_v=-5.0, max_v=5.0, dtype="float32"):
        return pallas(x, gamma, dtype, min_v, max_v)

    def reference_low_precision(self, x, dtype):
        return jnp_reference(x, 0.99, dtype)  # the 2x rule: the same-dtype jnp reference

    def test_matches_jnp_reference_and_nan_placement(self):
        for case in CASES + [Case(B=96, kind="nonfinite")]:
            x = case.inputs()
            support = dict(min_v=case.min_v, max_v=case.max_v)
            got, ref = pallas(x, case.gamma, **support), jnp_reference(x, case.gamma, **support)
            assert np.array_equal(np.isnan(got), np.isnan(ref)), f"{case.id}: NaN rows differ from the jnp reference"
            err = max_abs_error(got, ref)
            assert err <= ATOL_BETWEEN, f"{case.id}: {err:.3g} vs the jnp reference"

    def test_low_precision_vs_float64(self):
        for dtype in ("bfloat16", "float16"):
            x = make_inputs(64, kind="mixed", seed=8)
            got = pallas(x, 0.99, dtype)
            want = R.categorical_td_target(**dict(x, next_log_probs=np.asarray(
                jnp.asarray(x["next_log_probs"]).astype(DTYPES[dtype]).astype(jnp.float32))), gamma=0.99)
            assert max_abs_error(got, want) <= atol_vs_float64(101), dtype  # exact spec on the rounded log-probs

    def test_rows_per_program_do_not_change_the_bits(self):
        # Rows are independent and every row sum is exact (integer), so BR changes no bit.
        x = to_jax(make_inputs(40, kind="nonfinite", seed=9))
        outs = [np.asarray(ops.categorical_td_target_pallas(*(x[k] for k in NAMES), 0.99, block_rows=br))
                for br in (1, 8, 64)]
        for o in outs[1:]:
            assert np.array_equal(o.view(np.int32), outs[0].view(np.int32)), "a row depends on its program's rows"

    def test_exp_modes_agree(self):
        x = to_jax(make_inputs(33, kind="peaked", seed=10))
        a, b = (np.asarray(ops.categorical_td_target_pallas(*(x[k] for k in NAMES), 0.99, exp_mode=m))
                for m in pk.EXP_MODES)
        assert max_abs_error(a, b) <= 1e-6

    def test_row_chunking_when_flat_offsets_would_overflow_int32(self, monkeypatch):
        x = to_jax(make_inputs(37, N=11, E=2, kind="mixed", seed=11))
        args = [x[k] for k in NAMES]
        # num_warps (ignored in interpret mode) differs between the two calls: a distinct jit cache entry.
        forward = lambda nw: np.asarray(jax.jit(pk._pallas_forward, static_argnums=tuple(range(6, 12)))(  # noqa: E731
            *args, jnp.float32(0.9), -5.0, 5.0, True, None, nw, "ex2"))
        whole = forward(None)
        monkeypatch.setattr(pk, "MAX_FLAT", 2 * 11 * 10)  # 10 rows per chunk
        n0 = pk.trace_count()
        chunked = forward(4)
        assert pk.trace_count() - n0 == 1 + 4, "expected 4 chunks of <= 10 rows"
        assert np.array_equal(whole, chunked, equal_nan=True)
        assert max_abs_error(chunked, R.categorical_td_target(**make_inputs(37, N=11, E=2, kind="mixed", seed=11),
                                                              gamma=0.9)) <= atol_vs_float64(11)

    def test_inputs_between_2_30_and_2_31_elements_are_two_chunks(self):
        # E * R * N = 2 * 2**23 * 101 is in [2**30, 2**31): the kernel ANDs its offsets with 2**30 - 1, so one chunk
        # holds at most 2**30 - 1 elements (a single chunk up to 2**31 - 2 before). Traced only (eval_shape): nothing
        # of that size is allocated.
        E, B, N = 2, 2**23, 101
        assert 2**30 <= E * B * N < 2**31 and pk.MAX_FLAT == pk.OFF_MASK == 2**30 - 1
        f32 = functools.partial(jax.ShapeDtypeStruct, dtype=jnp.float32)
        n0 = pk.trace_count()
        out = jax.eval_shape(lambda *a: pk._pallas_forward(*a, -5.0, 5.0, True, None, None, "ex2"),
                             f32((E, B)), f32((E, B, N)), f32((B,)), f32((B,)), f32((B,)), f32(()))
        assert out.shape == (B, N)
        assert pk.trace_count() - n0 == 1 + 2, "expected 2 chunks of <= (2**30 - 1) // (E * N) rows"

    def test_deterministic(self):
        x = make_inputs(70, kind="mixed", seed=12)
        assert np.array_equal(pallas(x, 0.99), pallas(x, 0.99))


def offset_inputs(B: int, N: int, E: int, R: int, offset: int, kind: str = "mixed", seed: int = 0):
    """make_inputs for B rows, plus next_qs (E, R) / next_log_probs (E, R, N) holding them at rows [offset,
    offset + B): the other rows are decoys (NaN Q values, other log-probs), so a read of a wrong row shows."""
    x = make_inputs(B, N, E, seed=seed, kind=kind)
    rng = np.random.default_rng(seed + 1)
    q = np.full((E, R), np.nan, np.float32)
    lp = np.log(rng.dirichlet(np.ones(N), size=(E, R))).astype(np.float32)
    q[:, offset:offset + B], lp[:, offset:offset + B] = x["next_qs"], x["next_log_probs"]
    return x, q, lp


class TestRowOffset:
    """The row-offset form: next_qs (E, R) / next_log_probs (E, R, N) read at rows [row_offset, row_offset + B)."""

    @pytest.mark.parametrize("B, N, E, R, offset, dtype", [
        (8, 101, 2, 16, 8, "float32"),  # the agent's layout: the second half of 2B rows
        (9, 51, 3, 30, 0, "float32"),  # R > B at offset 0
        (13, 33, 2, 20, 7, "float32"),  # offset + B == R
        (5, 2, 1, 5, 0, "float32"),  # R == B: the plain form's layout
        (4, 7, 5, 11, 3, "bfloat16"),
    ])
    def test_offset_reads_equal_the_explicit_slice_bitwise(self, B, N, E, R, offset, dtype):
        x, q, lp = offset_inputs(B, N, E, R, offset, seed=B)
        rest = {k: jnp.asarray(x[k]) for k in NAMES[2:]}
        rest["terminated"] = rest["terminated"].reshape(B, 1)  # (B, 1) per-row inputs count B rows too
        q, lp = jnp.asarray(q), jnp.asarray(lp).astype(DTYPES[dtype])
        got = {}
        for backend in ("pallas", "jax"):
            op = functools.partial(jax_impl.categorical_td_target, gamma=0.97, backend=backend, strict=True)
            got[backend] = np.asarray(op(q, lp, **rest, row_offset=offset))
            want = np.asarray(op(q[:, offset:offset + B], lp[:, offset:offset + B], **rest))
            assert got[backend].shape == (B, N) and not np.isnan(got[backend]).all(), backend
            assert np.array_equal(got[backend].view(np.int32), want.view(np.int32)), backend  # NaN rows included
        if R > B:  # the decoys are read if the offset is wrong: the check can fail
            shifted = jax_impl.categorical_td_target(q, lp, **rest, gamma=0.97, backend="pallas", strict=True,
                                                     row_offset=(offset + 1) % (R - B + 1))
            assert not np.array_equal(np.asarray(shifted), got["pallas"], equal_nan=True)

    def test_offset_form_in_jit_with_a_traced_gamma_and_its_zero_gradient(self):
        B, R, offset = 6, 15, 4
        x, q, lp = offset_inputs(B, 21, 2, R, offset, seed=3)
        rest = [jnp.asarray(x[k]) for k in NAMES[2:]]

        def loss(lp, gamma):
            t = jax_impl.categorical_td_target(jnp.asarray(q), lp, *rest, gamma=gamma, backend="pallas", strict=True,
                                               row_offset=offset)
            return jnp.nansum(t), t

        (_, got), g_lp = jax.jit(jax.value_and_grad(loss, has_aux=True))(jnp.asarray(lp), jnp.float32(0.9))
        assert g_lp.shape == (2, R, 21) and not np.asarray(g_lp).any(), "the target must be stop-gradient"
        assert max_abs_error(np.asarray(got), R_ref(x, 0.9)) <= atol_vs_float64(21)

    def test_row_chunking_with_an_offset(self, monkeypatch):
        B, R, offset, N = 23, 31, 5, 11
        x, q, lp = offset_inputs(B, N, 2, R, offset, seed=4)
        args = [jnp.asarray(q), jnp.asarray(lp), *(jnp.asarray(x[k]) for k in NAMES[2:])]
        forward = lambda nw: np.asarray(jax.jit(pk._pallas_forward, static_argnums=tuple(range(6, 13)))(  # noqa: E731
            *args, jnp.float32(0.9), -5.0, 5.0, True, None, nw, "ex2", offset))
        whole = forward(None)
        monkeypatch.setattr(pk, "MAX_FLAT", 2 * N * 10)  # 10 rows per chunk: R = 31 rows would overflow
        n0 = pk.trace_count()
        chunked = forward(4)
        assert pk.trace_count() - n0 == 1 + 3, "expected 3 chunks of <= 10 target rows"
        assert np.array_equal(whole.view(np.int32), chunked.view(np.int32))
        assert max_abs_error(whole, R_ref(x, 0.9)) <= atol_vs_float64(N)

    @pytest.mark.parametrize("change, error, match", [
        (dict(row_offset=-1), ValueError, "row_offset must be >= 0, got -1"),
        (dict(row_offset=True), TypeError, "row_offset must be a static integer"),
        (dict(row_offset=2.0), TypeError, "row_offset must be a static integer"),
        (dict(row_offset=6), ValueError, r"row_offset \+ B must be <= R = 10 .*\[6, 11\)"),
        (dict(row_offset=0, next_qs=np.zeros((2, 9), np.float32)), ValueError, r"next_qs must have shape \(E, R\)"),
        (dict(row_offset=0, terminated=np.zeros(4, np.float32)), ValueError,
         r"terminated must have shape \(B,\) or \(B, 1\) with B = 5 \(from reward\)"),
        (dict(row_offset=0, reward=np.zeros((5, 2), np.float32)), ValueError, "reward must have shape"),
    ])
    def test_bad_row_offset_arguments(self, change, error, match):
        x, q, lp = offset_inputs(5, 6, 2, 10, 2)
        args = dict(next_qs=q, next_log_probs=lp, **{k: x[k] for k in NAMES[2:]})
        args.update(change)
        row_offset = args.pop("row_offset")
        arrays = [jnp.asarray(args[k]) for k in NAMES]
        for backend in ("pallas", "jax"):
            with pytest.raises(error, match=match):
                jax_impl.categorical_td_target(*arrays, gamma=0.9, backend=backend, row_offset=row_offset)
        with pytest.raises(error, match=match):  # the kernel wrapper and the reference check it too
            pk.launch(*arrays, 0.9, interpret=True, row_offset=row_offset)
        with pytest.raises(error, match=match):
            categorical_td_target_reference(*arrays, 0.9, row_offset=row_offset)
        with pytest.raises(TypeError, match="row_offset must be a static integer"):  # never a traced value
            jax.jit(lambda o: jax_impl.categorical_td_target(
                *[jnp.asarray(v) for v in (q, lp)], *(jnp.asarray(x[k]) for k in NAMES[2:]), gamma=0.9,
                backend="pallas", row_offset=o))(2)


def R_ref(x: dict, gamma: float) -> np.ndarray:
    """The float64 spec on make_inputs' arrays."""
    return R.categorical_td_target(**x, gamma=gamma)


class TestPallasJit:
    def test_gamma_change_does_not_recompile(self):
        x = to_jax(make_inputs(24, N=21))
        traces = []

        @jax.jit
        def step(x, gamma):
            traces.append(1)
            return jax_impl.categorical_td_target(**x, gamma=gamma, backend="pallas", strict=True)

        a = step(x, jnp.float32(0.99))
        n_kernel = pk.trace_count()
        b = step(x, jnp.float32(0.5))
        c = jax_impl.categorical_td_target(**x, gamma=0.3, backend="pallas", strict=True)  # Python floats, no jit
        n_eager = pk.trace_count()
        d = jax_impl.categorical_td_target(**x, gamma=0.7, backend="pallas", strict=True)
        assert len(traces) == 1 and pk.trace_count() == n_eager == n_kernel, "a gamma change re-traced the kernel"
        assert not np.array_equal(np.asarray(a), np.asarray(b))
        for gamma, out in ((0.5, b), (0.3, c), (0.7, d)):
            want = R.categorical_td_target(**make_inputs(24, N=21), gamma=gamma)
            assert max_abs_error(np.asarray(out), want) <= atol_vs_float64(21)

    def test_traced_gamma_outside_the_unit_interval(self):
        # SPEC.md 6.3: g = gamma (1 - d) not a finite number >= 0 -> NaN row; same placement as the jnp reference.
        x = make_inputs(24, N=21, kind="mixed", seed=13)
        step = jax.jit(lambda a, g: jax_impl.categorical_td_target(**a, gamma=g, backend="pallas", strict=True))
        for gamma in (-0.1, 1.5, float("nan"), float("inf")):
            got = np.asarray(step(to_jax(x), jnp.float32(gamma)))
            ref = jnp_reference(x, gamma)
            assert np.array_equal(np.isnan(got), np.isnan(ref)), gamma
            assert max_abs_error(got, ref) <= ATOL_BETWEEN, gamma
        assert np.isnan(got).all()  # gamma = inf: every row is invalid

    def test_grad_through_a_loss(self):
        x = to_jax(make_inputs(8, N=17))
        logits = jnp.asarray(np.random.default_rng(0).normal(size=(8, 17)), jnp.float32)

        def loss(logits, lp, backend):
            target = jax_impl.categorical_td_target(**dict(x, next_log_probs=lp), gamma=0.99, backend=backend)
            return -(target * jax.nn.log_softmax(logits)).sum(axis=-1).mean()

        g_logits, g_lp = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(
            logits, x["next_log_probs"], "pallas")
        r_logits, r_lp = jax.grad(loss, argnums=(0, 1))(logits, x["next_log_probs"], "jax")
        assert np.array_equal(np.asarray(g_lp), np.zeros(g_lp.shape)), "the target must be stop-gradient"
        assert np.abs(np.asarray(g_logits)).max() > 0
        np.testing.assert_allclose(np.asarray(g_logits), np.asarray(r_logits), atol=1e-6, rtol=0)
        assert np.array_equal(np.asarray(r_lp), np.asarray(g_lp))


def cuda_target():
    """The context for cross-lowering Pallas-Triton for CUDA without a GPU. None is needed before JAX 0.12; from 0.12
    on the lowering reads its target GPU from the abstract mesh's device (here an H100: compute capability 9.0)."""
    if importlib.util.find_spec("jax._src.pallas.triton.gpu_info") is None:
        return contextlib.nullcontext()
    device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100 80GB HBM3", num_cores=132, platform="gpu")
    mesh = jax.sharding.AbstractMesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,), abstract_device=device)
    return jax.sharding.use_abstract_mesh(mesh)


class TestLowering:
    """Cross-lower the kernel for CUDA on this CPU machine: Pallas-Triton's rules (power-of-2 shapes, no in-register
    gather, ...) are enforced and the Triton IR is embedded; XLA's TTIR -> PTX step needs a GPU
    (`python -m bench kernel-validate`).
    """

    @pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
    @pytest.mark.parametrize("E", [1, 2, 3])
    @pytest.mark.parametrize("N", [2, 51, 101, 1024])
    def test_lowers_for_cuda(self, N, E, dtype, rpp=None):
        B = 37
        x = to_jax(make_inputs(B, N=N, E=E), dtype)
        f = lambda *a: pk.launch(*a[:5], a[5], interpret=False, rows_per_program=rpp)  # noqa: E731
        args = (*(x[k] for k in NAMES), jnp.float32(0.9))
        with cuda_target():
            text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        assert f"stablehlo.custom_call @{TRITON_CALL}" in text
        cfg = kernel_config(B, N, interpret=False)
        grid = re.search(r"grid_x = (\d+)", text)
        assert grid and int(grid.group(1)) == -(-B // (cfg["BR"] * (rpp or cfg["RPP"])))
        warps = re.search(r"num_warps = (\d+)", text)
        assert warps and int(warps.group(1)) == cfg["num_warps"]
        assert "ex2.approx.ftz.f32" in text and "__nv_expf" not in text  # the Triton kernel's exp instruction

    @pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
    @pytest.mark.parametrize("E,N", [(2, 101), (3, 51), (1, 1024)])
    def test_the_tile_loop_lowers_for_cuda(self, N, E, dtype):
        # RPP > 1: the software-pipelined loop over tiles (a fori_loop with a traced bound) through Pallas-Triton.
        self.test_lowers_for_cuda(N, E, dtype, rpp=4)

    def test_unsupported_op_fails_the_lowering(self):
        # The check is not vacuous: a non-power-of-2 block is rejected by the same cross-lowering.
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import triton as plt

        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0

        f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((101,), jnp.float32),
                           compiler_params=plt.CompilerParams(num_warps=4, num_stages=1))
        x = jnp.zeros(101, jnp.float32)
        with cuda_target(), pytest.raises(Exception, match="power of 2"):
            jax.jit(f).trace(x).lower(lowering_platforms=("cuda",))


@pytest.mark.usefixtures("pallas_validated_on_h200")
class TestPallasDispatch:
    def setup_method(self):
        dispatch.reset_dispatch()
        ops.reset_self_tests()

    def teardown_method(self):
        dispatch.reset_dispatch()
        ops.reset_self_tests()

    def test_auto_prefers_pallas_and_backend_info(self):
        assert jax_impl.resolve_backend("auto", num_bins=101).backend == "pallas"
        info = jax_impl.backend_info()
        assert info["backends"]["pallas"] == "available" and info["interpret"] is True
        assert info["decision"] is None and info["fallback_count"] == 0
        assert info["decisions"] == [{"requested": "auto", "backend": "pallas",
                                      "reason": "auto: pallas validated on NVIDIA H200, available",
                                      "config": "platform=cpu, dtype=float32, E=2, N=101"}]

    def _expect_fallback(self, caplog, reason: str, **config):
        with caplog.at_level(logging.INFO, logger="flashsac.jax_impl"):
            for _ in range(3):
                assert jax_impl.resolve_backend("pallas", **config).backend == "jax"
        hits = [r for r in caplog.records if reason in r.getMessage()]
        assert len(hits) == 1, f"the fallback must be logged once, got {[r.getMessage() for r in caplog.records]}"
        assert hits[0].levelno == logging.WARNING
        assert jax_impl.dispatch_stats()["fallback_count"] == 1
        if "platform" not in config:  # backend_info reports the default platform
            lp = jax.ShapeDtypeStruct((config.get("num_critics", 2), 3, config.get("num_bins", 101)),
                                      config.get("dtype", jnp.float32))
            info = jax_impl.backend_info(lp, backend="pallas")
            assert info["decision"]["backend"] == "jax" and reason in info["decision"]["reason"]
            assert info["fallback_count"] == 1, "backend_info only reports: no second fallback is counted"
            if not config:  # the probe configuration (float32, E = 2, N = 101) is the one that falls back
                assert reason in info["backends"]["pallas"]
        with pytest.raises(jax_impl.BackendUnavailable, match=re.escape(reason)):
            jax_impl.resolve_backend("pallas", strict=True, **config)

    def test_no_gpu(self, monkeypatch, caplog):
        monkeypatch.setenv(ops.INTERPRET_ENV, "0")
        self._expect_fallback(caplog, "needs an NVIDIA GPU")

    def test_old_gpu(self, monkeypatch, caplog):
        monkeypatch.setenv(ops.INTERPRET_ENV, "0")
        fake = SimpleNamespace(client=SimpleNamespace(platform_version="cuda 12.8"), compute_capability="7.5",
                               device_kind="Tesla T4")
        real_devices = jax.devices
        monkeypatch.setattr(jax, "devices", lambda backend=None: [fake] if backend == "gpu" else real_devices(backend))
        self._expect_fallback(caplog, "compute capability 7.5 < 8.0", platform="gpu")

    def test_jax_version_outside_the_tested_range(self, monkeypatch, caplog):
        monkeypatch.delenv(ALLOW_UNTESTED_JAX_ENV, raising=False)
        monkeypatch.setattr(ops, "JAX_VERSION", "0.9.1")
        self._expect_fallback(caplog, f"jax 0.9.1 is outside the tested range (0.10.x, 0.11.x); set "
                              f"{ALLOW_UNTESTED_JAX_ENV}=1")

    def test_untested_jax_runs_its_self_test_when_allowed(self, monkeypatch, caplog):
        monkeypatch.setenv(ALLOW_UNTESTED_JAX_ENV, "1")
        monkeypatch.setattr(ops, "JAX_VERSION", "0.99.0")
        with caplog.at_level(logging.INFO, logger="flashsac.jax_impl"):
            assert jax_impl.resolve_backend("pallas").backend == "pallas"
        assert "jax 0.99.0 is outside the tested range (0.10.x, 0.11.x); running it because" in caplog.text

    @pytest.mark.parametrize("config, reason", [
        (dict(dtype=jnp.float64), "dtype float64 is not supported"),
        (dict(num_bins=4097), "N = 4097 atoms"),
        (dict(num_critics=17), "E = 17 critics"),
    ])
    def test_unsupported_configuration(self, caplog, config, reason):
        self._expect_fallback(caplog, reason, **config)

    @pytest.fixture
    def fresh_jit_cache(self):
        """Broken kernels are traced into the jit cache: clear it before and after a test that patches the kernel."""
        pk._jitted.clear_cache()
        yield
        pk._jitted.clear_cache()

    @pytest.mark.usefixtures("fresh_jit_cache")
    def test_self_test_failure_is_a_fallback(self, monkeypatch, caplog):
        def broken(*args, **kwargs):
            raise RuntimeError("simulated Triton lowering failure")

        monkeypatch.setattr(pk, "_pallas_forward", broken)
        self._expect_fallback(caplog, "simulated Triton lowering failure", num_bins=7)
        assert any("Traceback" in tb and "simulated" in tb for tb in ops.self_test_errors().values())

    @pytest.mark.usefixtures("fresh_jit_cache")
    def test_self_test_mismatch_is_a_fallback(self, monkeypatch, caplog):
        real = pk._pallas_forward
        monkeypatch.setattr(pk, "_pallas_forward", lambda *a: real(*a) + 0.01)
        self._expect_fallback(caplog, "self-test: max abs error", num_bins=9)

    def test_exp_mode_switch_when_inline_asm_fails(self, monkeypatch, caplog):
        real = ops._self_test_once
        monkeypatch.setattr(ops, "_self_test_once", lambda *a: "simulated ptxas error" if a[-1] == "ex2" else real(*a))
        with caplog.at_level(logging.WARNING, logger="flashsac.jax_impl"):
            assert jax_impl.resolve_backend("pallas", num_bins=13).backend == "pallas"
        assert ops.exp_mode() == "libdevice"
        assert any("simulated ptxas error" in r.getMessage() for r in caplog.records)

    def test_pallas_used_in_the_dispatch_when_available(self, monkeypatch):
        calls = []
        real = dispatch.IMPLEMENTATIONS["pallas"]
        monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "pallas", lambda *a: calls.append(1) or real(*a))
        x = make_inputs(5, N=6)
        out = jax_impl.categorical_td_target(**to_jax(x), gamma=0.9, backend="auto")
        assert calls == [1]
        assert max_abs_error(np.asarray(out), R.categorical_td_target(**x, gamma=0.9)) <= atol_vs_float64(6)

    def test_a_jax_without_the_pallas_triton_lowering(self):
        """The lowering's absence (simulated: its module cannot be imported) is the pallas backend's one-line reason;
        auto still runs and the other backends are untouched (the Mosaic GPU kernel passes its self-test)."""
        code = textwrap.dedent("""
            import sys, importlib.abc
            class Gone(importlib.abc.MetaPathFinder):
                def find_spec(self, name, path=None, target=None):
                    if name == "jax.experimental.pallas.triton":
                        raise ModuleNotFoundError("No module named 'jax.experimental.pallas.triton'")
            sys.meta_path.insert(0, Gone())
            import numpy as np
            import jax_impl
            from shared_spec import make_inputs
            from shared_spec import reference as R
            x = make_inputs(5, 11)
            out = jax_impl.categorical_td_target(**x, gamma=0.9, backend="auto")
            assert np.abs(np.asarray(out) - R.categorical_td_target(**x, gamma=0.9)).max() < 1e-5
            print("AUTO", jax_impl.resolve_backend("auto", num_bins=11).backend)
            info = jax_impl.backend_info()["backends"]
            print("INFO", info["pallas"])
            print("MOSAIC", info["mosaic"])
            try:
                jax_impl.categorical_td_target(**x, gamma=0.9, backend="pallas", strict=True)
            except jax_impl.BackendUnavailable as exc:
                print("STRICT", exc)
        """)
        env = dict(os.environ, PYTHONPATH=ROOT)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
        assert lines["AUTO"] == "jax"
        info = lines["INFO"]
        assert info.startswith("the pallas backend failed to import (jax ") and "no Pallas-Triton lowering" in info
        assert info.endswith("use backend='triton' (the Triton kernel through jaxlib's Triton kernel call))")
        assert lines["MOSAIC"] == "available", "the Mosaic GPU kernel does not need the Pallas-Triton lowering"
        assert lines["STRICT"].startswith("backend='pallas' with strict=True: the pallas kernel cannot run: the pallas "
                                          "backend failed to import (jax ")
        assert "\n" not in lines["STRICT"]

    def test_only_the_pallas_triton_deprecation_is_filtered(self):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ops.filter_pallas_triton_deprecation()
            warnings.warn(ops.DEPRECATION_MESSAGE + " and will be removed in a future JAX version.", DeprecationWarning,
                          stacklevel=1)
            warnings.warn("some other deprecation", DeprecationWarning, stacklevel=1)
        assert [str(w.message) for w in seen] == ["some other deprecation"]
