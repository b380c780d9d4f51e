"""`python -m bench breakdown --tiny`: both agents' training step part by part on the CPU, and the report."""

from __future__ import annotations

import json
import math

import pytest

from bench.__main__ import main
from bench.breakdown import PARTS, perfetto_gpu_kernels


def test_tiny_run(tmp_path):
    out = tmp_path / "breakdown"
    assert main(["breakdown", "--tiny", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert list(res["agents"]) == ["torch", "jax"]
    for framework, agent in res["agents"].items():
        assert list(agent["ms"]) == list(PARTS), framework
        for part, blocks in agent["ms"].items():
            assert len(blocks) == 1 and all(math.isfinite(v) and v > 0 for v in blocks), (framework, part)
        assert agent["median_ms"]["training step"] > agent["median_ms"]["env step"]
    assert "agent.categorical_target_backend=torch" in res["config"]["overrides"]["torch"]
    assert "agent.categorical_target_backend=jax" in res["config"]["overrides"]["jax"]
    report = (out / "results.md").read_text()
    assert "| eval action: evaluation policy |" in report and "| torch ms | torch % of step |" in report


def test_bad_frameworks_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["breakdown", "--tiny", "--out", "unused", "--frameworks", "torch,tf"])
    assert exc.value.code == 2 and "--frameworks" in capsys.readouterr().err


def test_perfetto_kernels_are_the_gpu_stream_events_without_copies():
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
            {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 2, "tid": 1, "args": {"name": "Stream #13(Compute)"}},
            {"ph": "M", "name": "thread_name", "pid": 2, "tid": 2, "args": {"name": "XLA Ops"}}]
    events = [{"ph": "X", "pid": 2, "tid": 1, "name": "loop_fusion_3", "dur": 2.5},
              {"ph": "X", "pid": 2, "tid": 1, "name": "MemcpyD2H", "dur": 9.0},
              {"ph": "X", "pid": 2, "tid": 2, "name": "fusion.3", "dur": 2.5},  # derived line: not a launch
              {"ph": "X", "pid": 1, "tid": 7, "name": "PjitFunction", "dur": 40.0},
              {"ph": "X", "pid": 2, "tid": 1, "name": "gemm_fusion", "dur": 4.0}]
    kernels, threads = perfetto_gpu_kernels({"traceEvents": meta + events})
    assert kernels == [("loop_fusion_3", 2.5), ("gemm_fusion", 4.0)] and threads == ["Stream #13(Compute)"]
    assert perfetto_gpu_kernels(meta[:3]) == ([], [])
