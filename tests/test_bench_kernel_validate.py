"""Smoke test of `python -m bench kernel-validate --tiny` (the interpreted kernels on the CPU) and its failure modes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import kernel_validate as kv

ONE_CASE = [dict(B=6, N=11, E=3, kind="nonfinite")]


def test_tiny_run_validates_the_interpreted_kernels_bitwise(tmp_path, capsys):
    every = ",".join(kv.BACKENDS)
    rc = kv.main(["--tiny", "--out", str(tmp_path), "--backends", every, "--require", every])
    out = capsys.readouterr().out
    assert rc == 0, out
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["mismatches"] == 0 and res["configurations"] == len(kv.cases(True))
    for b in ("torch/triton", "jax/triton", "jax/pallas", "jax/mosaic"):
        assert res["backends"][b]["validated"], res["backends"][b]
    assert all(r["bitwise"] == {"jax/triton": True, "jax/pallas": True, "jax/mosaic": True} for r in res["rows"])
    assert "| jax/triton | True |" in (tmp_path / "results.md").read_text()


def test_a_one_ulp_difference_fails_loudly(tmp_path, monkeypatch, capsys):
    from jax_impl import dispatch

    monkeypatch.setattr(kv, "cases", lambda tiny: ONE_CASE)
    real = dispatch.IMPLEMENTATIONS["triton"]

    def off_by_one_ulp(*args, **kwargs):
        out = real(*args, **kwargs)
        return out.at[0, 5].set(np.nextafter(out[0, 5], np.float32(2.0)))

    monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "triton", off_by_one_ulp)
    rc = kv.main(["--tiny", "--out", str(tmp_path), "--backends", "torch/triton,jax/triton"])
    out = capsys.readouterr().out
    assert rc == 1 and "MISMATCH jax/triton" in out and "FAILED: 1 mismatches" in out
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["rows"][0]["differing"]["jax/triton"] == 1 and not res["backends"]["jax/triton"]["validated"]


def test_a_required_backend_that_cannot_run_fails(tmp_path, monkeypatch, capsys):
    from jax_impl import dispatch

    monkeypatch.setattr(kv, "cases", lambda tiny: ONE_CASE)
    monkeypatch.setitem(dispatch.GATES, "pallas", lambda key: "simulated: no Pallas-Triton lowering")
    dispatch.reset_dispatch()
    try:
        rc = kv.main(["--tiny", "--out", str(tmp_path), "--backends", "torch/triton,jax/pallas",
                      "--require", "jax/pallas"])
    finally:
        dispatch.reset_dispatch()
    out = capsys.readouterr().out
    assert rc == 1 and "NOT VALIDATED jax/pallas" in out and "simulated: no Pallas-Triton lowering" in out


def test_record_writes_entries_auto_reads_and_needs_a_gpu(tmp_path):
    from shared_spec.dispatch import load_validation

    res = {"backends": {"jax/triton": {"validated": True, "result": "88/88 bitwise"},
                        "torch/triton": {"validated": False, "result": "80/88 bitwise"},
                        "jax/pallas": {"validated": False, "reason": "cannot run here"}}}
    path = tmp_path / "validated.json"
    path.write_text(json.dumps({"format": 1, "backends": {"jax/pallas": {
        "gpu": "G", "date": "d", "versions": {}, "result": "r", "passed": True}}}))
    kv.record_validation(res, str(path), "bench/results/x/results.json", "NVIDIA H200", {"jax": "0.11.2"},
                         "2026-12-05")
    entries = load_validation(path)
    assert entries["jax/triton"]["passed"] is True and entries["jax/triton"]["gpu"] == "NVIDIA H200"
    assert entries["torch/triton"]["passed"] is False
    assert entries["jax/pallas"]["result"] == "r", "a backend that could not run keeps its entry"
    with pytest.raises(SystemExit):
        kv.main(["--tiny", "--record", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        kv.main(["--out", str(tmp_path), "--backends", "jax/cuda"])
