"""bench.gpu_bitwise's CPU-side parts: the sweep's launch configurations and the case matrix (the runs need a GPU)."""

import pytest

from bench import gpu_bitwise


def test_sweep_entries_are_br_warps_and_tiles_per_program():
    assert gpu_bitwise.parse_sweep("1:1,2:2:4, 1:1:16,") == [(1, 1, 1), (2, 2, 4), (1, 1, 16)]
    assert gpu_bitwise.parse_sweep("") == []
    for bad in ("1", "1:1:1:1", "0:1", "1:1:0", "a:1"):
        with pytest.raises(ValueError):
            gpu_bitwise.parse_sweep(bad)


def test_case_matrix_covers_tails_of_the_pinned_tiles_per_program(monkeypatch):
    from shared_spec import launch_config
    from shared_spec.launch_config import kernel_config

    monkeypatch.setattr(launch_config, "GPU_MAX_RPP", 16)  # the pinned cap, kept here if it is ever changed

    cases = gpu_bitwise._cases(quick=False)
    tails = [c for c in cases if kernel_config(c["B"], c.get("N", 101), False)["RPP"] > 1
             and c["B"] % kernel_config(c["B"], c.get("N", 101), False)["RPP"]]
    assert {c["kind"] for c in tails} >= {"nonfinite", "mixed"} and any(c.get("strided") for c in tails)
    assert all(c.get("strided") for c in gpu_bitwise._cases(quick=False, strided_only=True))


def test_kernel_records_are_the_two_kernels_device_durations_by_exact_name():
    from jax_impl import pallas_kernel
    from triton_kernels import categorical_td_target_kernel

    # the names the device reports: the Triton JIT function's and the pallas_call's
    assert gpu_bitwise.KERNEL_NAMES == {"triton": categorical_td_target_kernel.__name__,
                                        "pallas": pallas_kernel.KERNEL_NAME}
    tri, pal = gpu_bitwise.KERNEL_NAMES["triton"], gpu_bitwise.KERNEL_NAMES["pallas"]
    events = [
        {"ph": "X", "cat": "kernel", "name": tri, "dur": 2.5},
        {"ph": "X", "cat": "kernel", "name": pal, "dur": 2.25},
        {"ph": "X", "cat": "kernel", "name": "reduce_kernel", "dur": 9.0},  # the sums between calls
        {"ph": "X", "cat": "cuda_runtime", "name": tri, "dur": 7.0},  # a host-side record of the same name
        {"ph": "i", "cat": "kernel", "name": pal, "dur": 1.0},
        {"ph": "X", "cat": "kernel", "name": tri + "_other", "dur": 4.0},
        {"ph": "X", "cat": "kernel", "name": tri, "dur": 3},
    ]
    assert gpu_bitwise.kernel_records(events) == {"triton": [2.5, 3.0], "pallas": [2.25]}
    assert gpu_bitwise.kernel_records([]) == {"triton": [], "pallas": []}
