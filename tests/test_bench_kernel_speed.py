"""Smoke test of `python -m bench kernel-speed --tiny` (the interpreted kernels on the CPU; the times mean nothing)."""

from __future__ import annotations

import json

import pytest

from bench import kernel_speed as ks


def test_tiny_run_times_every_backend_against_the_reference_and_the_floor(tmp_path, capsys):
    assert ks.main(["--tiny", "--out", str(tmp_path), "--backends", "jax,triton,pallas,mosaic"]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    (row,) = res["sizes"].values()
    assert set(row["us"]) == {"jax/jax", "jax/triton", "jax/pallas", "jax/mosaic", "torch/triton"}
    assert res["unavailable"] == {}
    assert row["floor_us"] == pytest.approx(ks.floor_bytes(8, 11, 2, 4) / res["bandwidth"]["bytes_per_s"] * 1e6)
    assert all(row["vs_floor"][n] == pytest.approx(row["us"][n] / row["floor_us"]) for n in row["us"])
    assert row["vs_jax"]["jax/jax"] == 1.0 and set(row["vs_jax"]) == {"jax/jax", "jax/triton", "jax/pallas",
                                                                     "jax/mosaic"}
    assert "| 8 |" in (tmp_path / "results.md").read_text()


def test_floor_bytes_and_bad_arguments(tmp_path):
    assert ks.floor_bytes(2, 101, 2, 2) == 2 * 101 * 2 + 2 * 101 * 4 + 2 * 2 * 4 + 3 * 2 * 4
    for bad in (["--backends", "jax,cuda"], ["--sizes", "8,x"], ["--sizes", "0"]):
        with pytest.raises(SystemExit):
            ks.main(["--tiny", "--out", str(tmp_path), *bad])
