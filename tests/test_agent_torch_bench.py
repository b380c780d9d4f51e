"""The H200 benchmark script runs end to end on CPU (interpreted Triton): split across calls, then summary + timing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from bench.gpu_agent_torch import graph_check
from tests.agent_test_utils import BENCH_TINY, REPO, run_agent_bench

TINY = ["num_threads=1", *BENCH_TINY]
# --graph-check on small networks with the torch reference target
SMALL = ["agent.actor_hidden_dim=16", "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1",
         "agent.critic_num_blocks=1", "agent.sample_batch_size=16", "agent.categorical_target_backend=torch"]


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


def test_graph_check_script_plumbing_on_cpu():
    # on CPU both agents run eagerly, so the check must report bitwise-equal agents (same init, batches and noise)
    result = graph_check(SMALL, repeats=1, iters=2)
    assert result["bitwise_equal_params"] and result["max_act_diff"] == 0.0
    assert max(result["max_metric_diff_per_update"]) == 0.0 and result["graphs_captured"] == 0
    assert result["cuda_graph"]["graph"].startswith("device cpu")
    assert set(result["timing"]) >= {"eager/torch", "eager/triton", "graph/torch", "graph/triton", "target_ms"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device (run on the H200)")
def test_cuda_graph_agent_matches_eager_agent():
    result = graph_check(["agent.sample_batch_size=256"], repeats=1, iters=5)
    assert result["graphs_captured"] == 4  # update with / without actor step, act with / without noise
    assert max(result["max_param_diff_per_update"]) < 1e-4 and result["max_act_diff"] < 1e-5
