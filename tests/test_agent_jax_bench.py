"""The H200 JAX-agent benchmark script runs end to end on CPU (Pallas interpret): split calls, resume, timing."""

from __future__ import annotations

import json
import shutil

from agent_jax.compilation_cache import jax_cache_env
from tests.agent_test_utils import BENCH_TINY, run_agent_bench


def _bench(run_dir, budget: float, cache_dir, *extra: str):
    env = dict(JAX_PLATFORMS="cpu", FLASHSAC_PALLAS_INTERPRET="1", **jax_cache_env(cache_dir))
    return run_agent_bench("bench.gpu_agent_jax", run_dir, budget, BENCH_TINY, *extra, env=env)


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
