"""`python -m bench kernel --tiny`: every variant timed on the CPU (the kernels in their interpreters), each output
checked against the float64 specification, Triton and Pallas compared bit for bit over every input kind, the copy
labelled a host copy."""

from __future__ import annotations

import json

from bench.__main__ import main


def test_tiny_run(tmp_path):
    out = tmp_path / "kernel"
    assert main(["kernel", "--tiny", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    (size,) = res["sizes"]
    assert size["B"] == 64 and set(size["us"]) == {"torch", "triton", "upstream_eager", "jax", "pallas"}
    assert all(len(v) == 2 and min(v) > 0 for k, v in size["us"].items() if k not in ("jax", "pallas"))
    assert all(len(size["us"][k]) == 2 and min(size["us"][k]) >= 0 for k in ("jax", "pallas"))  # loop - empty loop
    assert max(size["max_abs_err_vs_float64"].values()) < 1e-4 and size["triton_pallas_bitwise"] is True
    assert res["checks"] == {"configurations": 22, "repeats": 2, "failures": []}  # 11 input kinds x 2 dtypes
    assert res["copy"]["kind"] == "host copy (not a device floor)" and res["copy"]["bytes_per_s"] > 0
    md = (out / "results.md").read_text()
    assert "| 64 |" in md and "| yes |" in md and "not kernel performance" in md and "bench/upstream.py" in md
