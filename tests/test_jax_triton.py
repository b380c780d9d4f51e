"""The "triton" JAX backend: the Triton kernel of triton_kernels/ from JAX (jaxlib's Triton kernel-call handler on the
GPU, Triton's interpreter through a host callback under TRITON_INTERPRET=1), its custom call lowered for CUDA, and its
gate."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_impl
from jax_impl import dispatch
from jax_impl import triton_backend as tb
from shared_spec import make_inputs
from shared_spec import reference as R
from shared_spec.tolerances import atol_vs_float64, max_abs_error
from tests.op_test_base import OpTests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def to_jax(x: dict, dtype: str = "float32") -> dict:
    out = {k: jnp.asarray(v) for k, v in x.items()}
    out["next_log_probs"] = out["next_log_probs"].astype(DTYPES[dtype])
    return out


class TestJaxTritonInterpreted(OpTests):
    """The float64 spec's adversarial cases through `backend="triton"` (the interpreted Triton kernel)."""

    name = "jax-triton"

    def run(self, x, gamma, min_v=-5.0, max_v=5.0, dtype="float32"):
        out = jax_impl.categorical_td_target(**to_jax(x, dtype), gamma=gamma, min_v=min_v, max_v=max_v,
                                             backend="triton", strict=True)
        assert out.dtype == jnp.float32
        return np.asarray(out)

    def test_jit_scan_traced_gamma_row_offset_one_trace(self):
        """Under jit, in a lax.scan of dependent calls with a traced gamma, reading rows in place (row_offset)."""
        B, off = 7, 5
        x = make_inputs(B + off, 21, 2, seed=4, kind="mixed")
        traces = []

        @jax.jit
        def program(q, lp, r, d, s, gammas):
            traces.append(1)

            def step(r, gamma):
                out = jax_impl.categorical_td_target(q, lp, r, d, s, gamma=gamma, backend="triton", strict=True,
                                                     row_offset=off)
                return r + 0.0 * out[:, 0], out

            return jax.lax.scan(step, r, gammas)[1]

        xs = {k: (v if k in ("next_qs", "next_log_probs") else v[off:]) for k, v in x.items()}
        gammas = jnp.asarray([0.99, 0.5], jnp.float32)
        outs = np.asarray(program(*(jnp.asarray(xs[k]) for k in ("next_qs", "next_log_probs", "reward", "terminated",
                                                                   "next_alpha_log_pi")), gammas))
        program(*(jnp.asarray(xs[k]) for k in ("next_qs", "next_log_probs", "reward", "terminated",
                                                "next_alpha_log_pi")), gammas * 0.9)
        assert len(traces) == 1, "a new gamma does not retrace"
        rows = {k: (v[:, off:] if k in ("next_qs", "next_log_probs") else v[off:]) for k, v in x.items()}
        for i, g in enumerate((0.99, 0.5)):
            assert max_abs_error(outs[i], R.categorical_td_target(**rows, gamma=g)) <= atol_vs_float64(21)

    def test_stop_gradient(self):
        x = to_jax(make_inputs(4, 11))

        def loss(lp):
            return jax_impl.categorical_td_target(**dict(x, next_log_probs=lp), gamma=0.9, backend="triton").sum()

        g = jax.grad(loss)(x["next_log_probs"])
        assert np.array_equal(np.asarray(g), np.zeros(g.shape))


def test_custom_call_lowered_for_cuda_holds_the_kernel_its_operands_and_grid():
    """The backend's call lowered for CUDA on this CPU machine: one `triton_kernel_call_ffi` custom call (jaxlib's
    typed-FFI handler, which XLA may record into command buffers) inside the scan's while loop, operands (q, lp, r, d,
    s, gamma) with gamma a device scalar; its opaque attribute decodes (google.protobuf, from triton.proto's fields) to
    the compiled PTX without line information, the pinned grid, warps and parameters in the kernel's order, with the
    same bytes as protobuf's own serialisation, and the PTX has the torch entry point's approximate and rounded
    instructions."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    specs = ["2,1000,101,24,bfloat16", "3,1048576,51,0,float32"]  # pinned RPP 1 with a row offset; RPP > 1
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "jax_triton_lowering_worker.py"), *specs],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(results) == 2
    for spec, res in zip(specs, results, strict=True):
        E, B, N, off, dtype = spec.split(",")
        E, B, N, off = int(E), int(B), int(N), int(off)
        R_ = B + off
        lp_type = {"bfloat16": "bf16", "float32": "f32"}[dtype]
        assert res["call"].startswith("%") and "stablehlo.custom_call @triton_kernel_call_ffi(" in res["call"]
        assert (f"(tensor<{E}x{R_}xf32>, tensor<{E}x{R_}x{N}x{lp_type}>, tensor<{B}xf32>, tensor<{B}xf32>, "
                f"tensor<{B}xf32>, tensor<1xf32>) -> tensor<{B}x{N}xf32>") in res["call"], res["call"]
        assert res["in_while"]
        exp = res["expected"]
        call = res["decoded"]["kernel_call"]
        kernel = {"kernel_name": "categorical_td_target_kernel_jax", "num_warps": exp["num_warps"],
                  "compute_capability": 90, "num_ctas": 1}
        if res["shared"]:
            kernel["shared_mem_bytes"] = res["shared"]
        assert call["kernel"] == kernel and res["decoded"]["name"] == "categorical_td_target_triton"
        assert res["ptx_is_compiled"] and not res["line_info"] and res["protobuf_bytes_equal"]
        assert (call["grid_0"], call["grid_1"], call["grid_2"]) == (exp["grid"][0], 1, 1)
        if B > 1 << 16:
            assert exp["constexprs"]["RPP"] > 1 and exp["grid"][0] * exp["constexprs"]["RPP"] * exp["constexprs"][
                "BR"] >= B
        sc = exp["scalars"]
        arr = {"array": {"ptr_divisibility": "16"}}
        want = [arr, {"i32": sc["q_stride_e"]}, {"i32": 1}, arr, {"i32": sc["lp_stride_e"]}, {"i32": N},  # lp: unit
                arr, {"i32": 1}, arr, {"i32": 1}, arr, {"i32": 1}, arr, {"i32": B},  # stride along N: a constant
                {"f32": -5.0}, {"f32": (N - 1) / 10.0}, {"i32": N}, arr]
        assert call["parameters"] == want
        assert res["ops"] == res["torch_ops"], "the same source: the same approximate and rounded instructions"
        assert res["ops"]["ex2.approx.ftz.f32"] > 0 and res["ops"]["rcp.approx.ftz.f32"] > 0 and res["gamma_load"]
        assert res["opaque_bytes"] < 12_000, "no TTIR and no line information in the opaque string"


class TestJaxTritonGate:
    def setup_method(self):
        dispatch.reset_dispatch()
        tb.reset_self_tests()

    def teardown_method(self):
        dispatch.reset_dispatch()
        tb.reset_self_tests()

    def test_reasons(self, monkeypatch):
        assert tb.triton_gate(("cpu", "float32", 2, 101)) is None  # interpreted here
        assert "TRITON_INTERPRET=1 runs the kernel on CPU arrays only" in tb.triton_gate(("gpu", "float32", 2, 101))
        assert "float64" in tb.triton_gate(("cpu", "float64", 2, 101))
        assert "N = 5000" in tb.triton_gate(("cpu", "float32", 2, 5000))
        assert "E = 17" in tb.triton_gate(("cpu", "float32", 17, 101))
        monkeypatch.setattr(tb, "INTERPRET", False)
        assert "needs an NVIDIA GPU" in tb.triton_gate(("cpu", "float32", 2, 101))

        monkeypatch.setattr(tb, "jaxlib_triton_reason", lambda: "jaxlib's CUDA plugin is not installed (...)")
        assert "jaxlib's CUDA plugin is not installed" in tb.triton_gate(("gpu", "float32", 2, 101))
        monkeypatch.setattr(tb.triton, "__version__", "3.7.0")
        assert "triton 3.7.0 is outside the tested range" in tb.triton_gate(("gpu", "float32", 2, 101))

    def test_jaxlib_handler_reason(self, monkeypatch):
        """The handler's presence is read from jaxlib's CUDA plugin registrations (absent on this CPU jaxlib)."""
        from jax._src.lib import gpu_triton

        if getattr(gpu_triton, "_cuda_triton", None) is None:
            assert "jaxlib's CUDA plugin is not installed" in tb.jaxlib_triton_reason()

        class Plugin:
            names: tuple = ("triton_kernel_call",)  # a plugin with the legacy handler only

            @classmethod
            def registrations(cls):
                return dict.fromkeys(cls.names)

        monkeypatch.setattr(gpu_triton, "_cuda_triton", Plugin, raising=False)
        assert "has no 'triton_kernel_call_ffi' handler (jaxlib >= 0.10.1" in tb.jaxlib_triton_reason()
        monkeypatch.setattr(Plugin, "names", ("triton_kernel_call", "triton_kernel_call_ffi"))
        assert tb.jaxlib_triton_reason() is None

    def test_self_test_failure_is_a_logged_fallback(self, monkeypatch, caplog):
        def broken(*args):
            raise RuntimeError("simulated PTX compile failure")

        monkeypatch.setattr(tb, "_self_test_once", broken)
        with caplog.at_level(logging.WARNING, logger="flashsac.jax_impl"):
            for _ in range(2):
                decision = jax_impl.resolve_backend("triton", num_bins=9)
        assert decision.backend == "jax" and "self-test: RuntimeError: simulated PTX compile failure" in (
            decision.reason)
        assert len(caplog.records) == 1 and jax_impl.dispatch_stats()["fallback_count"] == 1
        assert any("simulated PTX" in text for text in tb.self_test_errors().values())
        with pytest.raises(jax_impl.BackendUnavailable, match="simulated PTX compile failure"):
            jax_impl.resolve_backend("triton", num_bins=9, strict=True)
