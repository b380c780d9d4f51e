"""`python -m bench jax-speed --tiny`: the JAX agent's programs under XLA variants on the CPU, the report, and the
parsing of variants, compiled HLO and the CLI's compilation log."""

from __future__ import annotations

import json
import math
import os

import pytest

from bench.__main__ import main
from bench.jax_speed import MEASURES, compile_log, kernel_counts, parse_variant


def test_tiny_run_in_process(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # the job sets the CLI's flags: restored after
    out = tmp_path / "jax-speed"
    # one variant compiled with an XLA option (the agent's functions re-jitted), without the CLI runs
    assert main(["jax-speed", "--tiny", "--no-ttfu", "--rounds", "1", "--out", str(out),
                 "--variant", "cb=xla_gpu_enable_command_buffer:"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] and list(res["ms"]) == list(MEASURES)
    for measure, per_variant in res["ms"].items():
        assert len(per_variant["cb"]) == 1 and all(math.isfinite(v) and v > 0 for v in per_variant["cb"]), measure
    programs = res["programs"]["cb"]
    assert {"env_step(updates=(True,), act=True)", "env_step(updates=(False,), act=True)",
            "update_networks_flat(do_actor_update=True)", "policy_on_leaves(deterministic=False, host_output=True)",
            "policy_on_leaves(deterministic=False, host_output=False)"} <= set(programs)
    assert programs["env_step(updates=(True,), act=True)"]["fusions"] > programs["env_step(updates=(), act=True)"][
        "fusions"] > 0
    assert "| host path: act, action read from the device |" in (out / "results.md").read_text()


def test_parse_variant():
    assert parse_variant("default=") == ("default", {}, True)
    assert parse_variant("x=xla_gpu_enable_command_buffer:,xla_gpu_graph_min_graph_size:1,donate_state:false") == (
        "x", {"xla_gpu_enable_command_buffer": "", "xla_gpu_graph_min_graph_size": 1}, False)
    assert parse_variant("cb=xla_gpu_enable_command_buffer:FUSION,CUBLAS,WHILE,xla_gpu_graph_min_graph_size:1") == (
        "cb", {"xla_gpu_enable_command_buffer": "FUSION,CUBLAS,WHILE", "xla_gpu_graph_min_graph_size": 1}, True)
    for bad in ("nameless", "=a:1", "x=a"):
        with pytest.raises(ValueError):
            parse_variant(bad)


def test_kernel_counts_skip_fused_computations_and_count_command_buffers():
    text = """HloModule m

%fused_computation (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %e = f32[4]{0} exponential(%p)
}

%command_buffer (p0: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  ROOT %f = f32[4]{0} fusion(%p0), kind=kLoop, calls=%fused_computation
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %c = f32[4]{0} copy(%x)
  %call = f32[4]{0} call(%c), to_apply=%command_buffer
  ROOT %g = f32[4]{0} custom-call(%call), custom_call_target="__cublas$gemm"
}
"""
    counts = kernel_counts(text)
    assert counts["kernels"] == 3 and counts["fusions"] == 1 and counts["copies"] == 1
    assert counts["custom_calls"] == 1 and counts["command_buffers"] == 1 and counts["in_command_buffers"] == 1


def test_compile_log_splits_at_the_first_update():
    text = ("WARNING:jax._src.dispatch:Finished tracing env_step for jit in 1.5 sec\n"
            "WARNING:jax._src.dispatch:Finished jaxpr to MLIR module conversion jit(env_step) in 0.5 sec\n"
            "WARNING:jax._src.dispatch:Finished XLA compilation of jit(env_step) in 10.0 sec\n"
            "first update at env step 300: 41.7 s after launch (21.2 s after training started; ...)\n"
            "WARNING:jax._src.dispatch:Finished XLA compilation of jit(unpack) in 2.5 sec\n")
    log = compile_log(text)
    before, after = log["before_first_update"], log["after_first_update"]
    assert before["programs"] == 1 and before["trace_s"] == 1.5 and before["lower_s"] == 0.5
    assert before["by_program"]["env_step"]["compile_s"] == 10.0
    assert after["programs"] == 1 and after["by_program"]["unpack"]["compile_s"] == 2.5
