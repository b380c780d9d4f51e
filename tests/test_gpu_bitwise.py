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
