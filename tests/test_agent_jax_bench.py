"""The H200 JAX-agent benchmark script runs end to end on CPU (Pallas interpret): split calls, resume, timing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "num_env_steps=120",
    "agent.buffer_min_length=60",
    "agent.sample_batch_size=8",
    "agent.actor_hidden_dim=8",
    "agent.critic_hidden_dim=8",
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "evaluation_per_interaction_step=60",
    "num_eval_episodes=1",
    "env.max_episode_steps=30",
]


def _bench(run_dir, budget: float, cache_dir, *extra: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "bench.gpu_agent_jax", "--run-dir", str(run_dir), "--budget", str(budget),
            "--timing-repeats", "1", "--timing-iters", "2", *extra]
    for item in TINY:
        args += ["--overrides", item]
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu", FLASHSAC_PALLAS_INTERPRET="1",
               JAX_COMPILATION_CACHE_DIR=str(cache_dir), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_gpu_bench_script_splits_resumes_and_summarises(tmp_path):
    run, state, cache = tmp_path / "bench_run", tmp_path / "state", tmp_path / "jax_cache"
    first = _bench(run, 0.5, cache, "--state-out", str(state))  # stops on the wall-clock budget after the warm-up
    assert first.returncode == 0, first.stderr[-3000:]
    assert "NOT DONE" in first.stdout and "call 1: budget" in first.stdout
    assert (state / "run_state.tar.gz.part00").exists() and (state / "progress.json").exists()
    shutil.rmtree(run)  # the next call runs on a "fresh machine": the run comes back from the packed state
    second = _bench(run, 240, cache, "--state-in", str(state))
    assert second.returncode == 0, second.stderr[-3000:]
    assert "restored the run" in second.stdout and "resumed from" in second.stderr
    assert "\nDONE" in second.stdout and "update step: jax" in second.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["agent"] == "jax" and len(json.loads((run / "progress.json").read_text())["calls"]) == 2
    assert sorted(summary["eval_returns"]) == ["0", "120", "60"]
    assert summary["final_return"] == summary["eval_returns"]["120"]
    timing = summary["paired_update_timing"]
    assert timing["jax"]["update_ms"] > 0 and timing["pallas"]["target_ms"] > 0
    assert "agent.categorical_target_backend=pallas" in summary["recipe"]
    assert "agent.categorical_target_strict=true" in summary["recipe"]
    assert (run / "learning_curve.png").exists()
