"""bench/gpu_checks.py's sections on tiny CPU inputs (both kernels interpreted), so the H200 call cannot be the first
run of its code, and its failure collection."""

import importlib
import sys

import pytest

gc = pytest.importorskip("bench.gpu_checks")


def test_eager_host_time_measures_every_variant():
    res = gc.eager_host_time("cpu", B=4, calls=2, blocks=1, warmup=1)
    # on CPU: no stream and no compiled launcher (the interpreter), so no launch parts
    assert set(res["us"]) == {"op_auto", "op_auto_no_grad", "op_triton_strict", "bare_launch",
                              "bare_launch_jit_run", "registered_custom_op", "empty_custom_op", "torch_empty_output",
                              "torch_empty_sizes_as_args", "dispatch_only"}
    assert all(v["median"] > 0 and v["loop_mean"] > 0 for v in res["us"].values())
    assert "function calls" in res["cprofile_op_auto"]
    assert [row["variant"] for row in res["breakdown"]] == [
        "torch_empty_output", "torch_empty_sizes_as_args", "bare_launch", "op_auto", "op_auto_no_grad",
        "dispatch_only", "empty_custom_op", "bare_launch_jit_run"]
    assert res["launch_parts"] == {} and set(res["derived_us"]) == {"op_minus_fast_path_launch",
                                                                    "op_minus_empty_custom_op"}


def test_launch_parts_on_a_stand_in_gpu(monkeypatch):
    """The CUDA-only parts of the breakdown (stream lookups, prebuilt launches, the fast launcher), on CPU tensors
    with a stand-in JIT function, driver and torch stream calls, so the GPU run is not the first run of this code."""
    from types import SimpleNamespace

    import torch

    from bench import host_overhead_cpu
    from shared_spec import make_inputs

    L = importlib.import_module("triton_kernels.launch")  # the module (the package exports its `launch` function)
    jit = host_overhead_cpu._stand_ins()
    monkeypatch.setattr(L, "INTERPRET", False)
    monkeypatch.setattr(L, "driver", SimpleNamespace(active=SimpleNamespace(get_current_device=int,
                                                                            get_current_stream=abs)))
    # the module triton.runtime.driver (the attribute of that name in triton.runtime is its DriverConfig)
    monkeypatch.setattr(sys.modules["triton.runtime.driver"], "driver", L.driver)
    monkeypatch.setattr("triton_kernels.categorical_td_target_kernel", jit)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", abs, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", int, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=0))
    L._COMPILED.clear()
    try:
        t = {k: torch.from_numpy(v) for k, v in make_inputs(8, 101, 2, seed=0).items()}
        parts, checks = gc._launch_parts(tuple(t[k] for k in gc.NAMES), -5.0, 10.0)
    finally:
        L._COMPILED.clear()
    assert set(parts) == {"stream_triton_driver", "stream_torch_current_stream", "stream_raw_c",
                          "compiled_run_prebuilt", "fast_launcher_direct"}
    for fn in parts.values():
        fn()
    assert checks["stream_handles_agree"] and checks["fast_launcher_cached"]
    assert "compiled_run_prebuilt_equals_bare_launch" in checks  # the stand-in writes nothing: not checked here


def test_contract_checks_pass_on_the_interpreted_kernels():
    res = {"nan_policy": gc.nan_policy("cpu", B=24), "strict": gc.strict_mode("cpu"), "vjp": gc.pallas_vjp(B=8),
           "fast_launch": gc.fast_launch("cpu", [dict(B=3)])}
    assert res["nan_policy"]["triton_nonfinite"]["invalid_rows"] > 0
    assert gc.failures(res) == []


def test_failures_name_every_failed_check():
    res = {"a": {"ok": True, "bad": False}, "b": "FAILED:\ntraceback", "eager_host_time": {"us": {"x": False}}}
    assert gc.failures(res) == ["a.bad", "b"]
