"""bench/host_overhead_cpu.py on tiny inputs: every variant timed, the fast path engaged, the real kernel restored."""

import importlib

import pytest

h = pytest.importorskip("bench.host_overhead_cpu")


def test_measures_every_variant_and_restores_the_kernel():
    from torch_impl import dispatch, ops

    L = importlib.import_module("triton_kernels.launch")
    before = L.INTERPRET, L.driver, ops.categorical_td_target_kernel
    res = h.measure(B=8, calls=3, rounds=2)
    assert set(res["us"]) == {"op_auto", "op_auto_no_grad", "op_triton_strict", "bare_launch", "dispatch_only",
                              "torch_empty_output", "torch_empty_sizes_as_args", "empty_python_call"}
    assert res["jit_launches"] == 1 and all(v["median_us"] > 0 for v in res["us"].values())
    assert (L.INTERPRET, L.driver, ops.categorical_td_target_kernel) == before
    assert not dispatch._PLANS and not L._COMPILED
