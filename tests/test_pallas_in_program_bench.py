"""bench/pallas_in_program.py on the CPU (Pallas in interpret mode): every section runs and reports."""

from __future__ import annotations

import json

from bench.pallas_in_program import custom_call_context, main

HLO = """HloModule m
ENTRY %main (p0: f32[2,8,4]) -> f32[8,4] {
  %p0 = f32[2,16,4]{2,1,0} parameter(0)
  %slice.1 = f32[2,8,4]{2,1,0} slice(%p0), slice={[0:2], [8:16], [0:4]}
  %copy.2 = f32[2,8,4]{1,2,0} copy(%slice.1)
  %kernel = f32[8,4]{1,0} custom-call(%copy.2), custom_call_target="__gpu$xla.gpu.triton"
  ROOT %neg = f32[8,4]{1,0} negate(%kernel)
}
"""


def test_custom_call_context_names_the_operands_and_users():
    ctx = custom_call_context(HLO)
    assert ctx["counts"]["copy"] == 1 and ctx["counts"]["custom-call"] == 1 and ctx["counts"]["slice"] == 1
    (call,) = ctx["custom_calls"]
    assert call["operands"] == ["%copy.2 = f32[2,8,4]{1,2,0} copy(%slice.1)"]
    assert call["users"] == ["ROOT %neg = f32[8,4]{1,0} negate(%kernel)"]


def test_tiny_run_writes_every_section(tmp_path):
    out = tmp_path / "pip"
    code = main(["--out", str(out), "--tiny", "--sizes", "16", "--scan-k", "2", "--update-k", "2", "--repeats", "1"])
    res = json.loads((out / "results.json").read_text())
    assert code == 0, res["errors"]
    (scan,) = res["scan"]
    assert {"jax_dense_us", "pallas_dense_us", "jax_sliced_us", "pallas_sliced_us"} <= set(scan)
    (update,) = res["update"]
    assert update["jax_ms"]["median"] > 0 and update["pallas_ms"]["median"] > 0
    assert {"scan_pallas_sliced_B16", "update_pallas_B16", "update_jax_B16"} <= set(res["hlo"])
    assert (out / "hlo" / "update_pallas_B16.txt").exists() and (out / "results.md").exists()
