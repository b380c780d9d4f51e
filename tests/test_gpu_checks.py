"""bench/gpu_checks.py's sections on tiny CPU inputs (both kernels interpreted), so the H200 call cannot be the first
run of its code, and its failure collection."""

import pytest

gc = pytest.importorskip("bench.gpu_checks")


def test_eager_host_time_measures_every_variant():
    res = gc.eager_host_time("cpu", B=4, calls=2, blocks=1, warmup=1)
    assert set(res["us"]) == {"op_auto", "op_triton_strict", "bare_launch", "bare_launch_jit_run",
                              "registered_custom_op", "empty_custom_op", "torch_empty_output", "dispatch_only"}
    assert all(v["median"] > 0 for v in res["us"].values())
    assert "function calls" in res["cprofile_op_auto"]


def test_contract_checks_pass_on_the_interpreted_kernels():
    res = {"nan_policy": gc.nan_policy("cpu", B=24), "strict": gc.strict_mode("cpu"), "vjp": gc.pallas_vjp(B=8),
           "fast_launch": gc.fast_launch("cpu", [dict(B=3)])}
    assert res["nan_policy"]["triton_nonfinite"]["invalid_rows"] > 0
    assert gc.failures(res) == []


def test_failures_name_every_failed_check():
    res = {"a": {"ok": True, "bad": False}, "b": "FAILED:\ntraceback", "eager_host_time": {"us": {"x": False}}}
    assert gc.failures(res) == ["a.bad", "b"]
