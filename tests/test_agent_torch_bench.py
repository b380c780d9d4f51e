"""The H200 benchmark script runs end to end on CPU (interpreted Triton): split across calls, then summary + timing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.agent_test_utils import BENCH_TINY, REPO, run_agent_bench

TINY = ["num_threads=1", *BENCH_TINY]


def _bench(run_dir, budget: float, *extra: str):
    return run_agent_bench("bench.gpu_agent_torch", run_dir, budget, TINY, *extra, env={"TRITON_INTERPRET": "1"})


def _triton_interpretable() -> bool:
    code = "from torch_impl import resolve_backend; assert resolve_backend('triton', True, device='cpu')"
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True).returncode == 0


@pytest.mark.skipif(not _triton_interpretable(), reason="triton kernel not runnable under TRITON_INTERPRET=1 here")
def test_gpu_bench_script_splits_resumes_and_summarises(tmp_path):
    run = tmp_path / "bench_run"
    state = tmp_path / "state"
    first = _bench(run, 0.5, "--state-out", str(state))  # stops on the wall-clock budget right after the warm-up
    assert first.returncode == 0, first.stderr[-3000:]
    assert "NOT DONE" in first.stdout and "call 1: budget" in first.stdout
    assert (state / "run_state.tar.gz.part00").exists() and (state / "progress.json").exists()
    shutil.rmtree(run)  # the next call runs on a "fresh machine": the run comes back from the packed state
    outputs = []
    for _ in range(5):
        second = _bench(run, 120, "--state-in", str(state))
        outputs.append(second.stdout)
        assert second.returncode == 0, second.stderr[-3000:]
        if "\nDONE" in second.stdout:
            break
    assert "restored the run" in outputs[0] and "resumed from" in second.stderr + "".join(outputs)
    assert "\nDONE" in second.stdout and "update step: eager/torch" in second.stdout
    assert len(json.loads((run / "progress.json").read_text())["calls"]) >= 2
    summary = json.loads((run / "summary.json").read_text())
    assert sorted(summary["eval_returns"]) == ["0", "120", "60"]
    assert summary["final_return"] == summary["eval_returns"]["120"]
    timing = summary["paired_update_timing"]
    for variant in ("eager/torch", "eager/triton", "graph/torch", "graph/triton"):  # graph = eager on CPU
        assert timing[variant]["update_ms"] > 0
    assert timing["target_ms"]["triton"] > 0
    assert (run / "learning_curve.png").exists()
    assert "agent.categorical_target_strict=true" in summary["recipe"]
