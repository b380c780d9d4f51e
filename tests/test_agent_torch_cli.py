"""The real CLI (`python -m agent_torch.train`): smoke run, logs, exact resume, Ctrl-C, wall budget, config errors."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from agent_common.runs.files import load_pickle
from tests.agent_test_utils import REPO, assert_nested_equal, module_cmd, run_module

TINY = [
    "num_threads=1",
    "deterministic=true",
    "progress_bar=false",
    "agent.categorical_target_backend=torch",
    "agent.actor_hidden_dim=16",
    "agent.critic_hidden_dim=16",
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=16",
    "agent.buffer_min_length=50",
    "env.max_episode_steps=50",
    "num_eval_episodes=1",
    "evaluation_per_interaction_step=60",
    "logging_per_interaction_step=20",
    "agent.learning_rate_decay_step=240",  # the schedule must not depend on num_env_steps in the resume test
    "save_buffer=true",
]
EXPECTED_SCALARS = {
    "actor/loss",
    "actor/entropy",
    "actor/mean_action",
    "critic/loss",
    "critic/max_entropy_bonus",
    "temperature/value",
    "temperature/loss",
    "avg_return",
    "avg_length",
    "avg_success_once",
    "avg_success_end",
    "backend/fallback_count",
    "perf/env_steps_per_second",
    "perf/updates_per_second",
    "perf/update_ms",
    "perf/time_to_first_update_s",
    "perf/first_update_s",
    "perf/steady_updates_per_second",
}


def _cli(overrides: list[str], cwd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_module("agent_torch.train", overrides=overrides, cwd=cwd, timeout=timeout)


def _eval_rows(run_dir) -> list[tuple[str, float, str]]:
    with open(os.path.join(run_dir, "eval.csv"), newline="") as f:
        return [(r["metric"], float(r["env_step"]), r["value"]) for r in csv.DictReader(f)]


def _checkpoint_tensors(ckpt_dir) -> dict[str, object]:
    out = {}
    for name in ("actor", "critic", "target_critic", "temperature"):
        out[name] = torch.load(os.path.join(ckpt_dir, "agent", f"{name}.pt"), weights_only=False)
    out["agent_state"] = torch.load(os.path.join(ckpt_dir, "agent", "agent_state.pt"), weights_only=False)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three CLI runs: 240 steps straight; 120 steps; resume of the latter to 240 in a fresh process."""
    root = tmp_path_factory.mktemp("cli")
    straight = _cli(TINY + ["num_env_steps=240", f"save_path={root / 'straight'}"], str(root))
    first = _cli(TINY + ["num_env_steps=120", f"save_path={root / 'split'}"], str(root))
    resumed = _cli(TINY + ["num_env_steps=240", f"agent_load_path={root / 'split'}"], str(root))
    return root, straight, first, resumed


def test_smoke_run_writes_logs_csv_config_and_checkpoint(runs):
    """R1 + R9: the real CLI trains, evaluates, logs upstream's keys, writes the CSV, config and checkpoint."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root, straight, _, _ = runs
    assert straight.returncode == 0, straight.stderr[-3000:]
    run = root / "straight"
    assert "[completed] env_step=240" in straight.stdout and str(run) in straight.stdout
    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = set(acc.Tags()["scalars"])
    assert EXPECTED_SCALARS <= scalars, EXPECTED_SCALARS - scalars
    assert all(e.value == e.value for e in acc.Scalars("critic/loss"))  # finite (not NaN)
    assert {"config", "backend/selected", "compile/path"} <= set(acc.Tags()["tensors"])
    assert len(acc.Tensors("compile/path")) == 1  # logged once
    assert straight.stderr.count("compute path: torch") == 1 and "eager, CUDA graphs off" in straight.stderr
    assert [e.step for e in acc.Scalars("perf/time_to_first_update_s")] == [50]  # buffer_min_length=50
    first = re.search(r"first update at env step 50: ([0-9.]+) s after launch", straight.stderr)
    summary = re.search(r"time_to_first_update=([0-9.]+)s steady_updates/s=([0-9.]+)", straight.stdout)
    assert first and summary and float(first.group(1)) == float(summary.group(1)) > 0 and float(summary.group(2)) > 0
    assert [e.step for e in acc.Scalars("critic/loss")] == [60, 80, 100, 120, 140, 160, 180, 200, 220, 240]
    rows = _eval_rows(run)
    assert [(m, s) for m, s, _ in rows if m == "avg_return"] == [
        ("avg_return", s) for s in (0.0, 60.0, 120.0, 180.0, 240.0)
    ]
    with open(run / "eval.csv") as f:
        assert f.readline().strip() == ",exp_name,env_name,seed,metric,env_step,value"
    assert "categorical_target_backend: torch" in (run / "config.yaml").read_text()
    ckpt = run / "checkpoints" / "step240"
    assert (ckpt / "COMPLETE").exists() and (run / "checkpoints" / "latest").read_text().strip() == "step240"
    assert sorted(os.listdir(ckpt / "agent")) == [
        "actor.pt",
        "agent_state.pt",
        "critic.pt",
        "target_critic.pt",
        "temperature.pt",
    ]
    state = load_pickle(str(ckpt / "loop_state.pkl"))
    assert state["env_step"] == 240 and state["num_updates"] == 191
    assert {
        "python_random",
        "numpy_global",
        "warmup_rng",
        "noise",
        "reward_normalizer",
        "train_envs",
        "eval_envs",
    } <= set(state)
    plot = subprocess.run(
        [sys.executable, "-m", "agent_common.plot", str(run)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert plot.returncode == 0 and (run / "learning_curve.png").exists(), plot.stderr


def test_resume_equals_uninterrupted_run_bitwise(runs):
    """R4: 120 steps + checkpoint + resume in a fresh process == 240 steps straight (params, optimizers, evals)."""
    root, straight, first, resumed = runs
    assert first.returncode == 0, first.stderr[-3000:]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and "at env step 120" in resumed.stderr
    a = _checkpoint_tensors(root / "straight" / "checkpoints" / "step240")
    b = _checkpoint_tensors(root / "split" / "checkpoints" / "step240")
    assert_nested_equal(a, b)
    assert _eval_rows(root / "straight") == _eval_rows(root / "split")
    sa = load_pickle(str(root / "straight" / "checkpoints" / "step240" / "loop_state.pkl"))
    sb = load_pickle(str(root / "split" / "checkpoints" / "step240" / "loop_state.pkl"))
    for key in ("observation", "noise", "reward_normalizer", "warmup_rng", "num_updates", "train_envs"):
        assert_nested_equal(sa[key], sb[key], key)


def test_config_errors_exit_before_any_work(tmp_path):
    """R8: unknown key / bad value -> non-zero exit naming the key and allowed values; nothing is created."""
    bad_key = _cli(["agent.sample_batchsize=3"], str(tmp_path), timeout=120)
    assert bad_key.returncode == 2
    assert "agent.sample_batchsize" in bad_key.stderr and "agent.sample_batch_size" in bad_key.stderr
    bad_value = _cli(["agent.categorical_target_backend=pallas"], str(tmp_path), timeout=120)
    assert bad_value.returncode == 2
    assert "agent.categorical_target_backend" in bad_value.stderr and "auto, torch, triton" in bad_value.stderr
    bad_type = _cli(["num_env_steps=many"], str(tmp_path), timeout=120)
    assert bad_type.returncode == 2 and "num_env_steps" in bad_type.stderr
    assert os.listdir(tmp_path) == []  # no run directory, no env work


def test_ctrl_c_saves_checkpoint_with_buffer_and_exits_130(tmp_path):
    overrides = TINY + [
        "num_env_steps=1_000_000",
        "evaluation_per_interaction_step=100_000",
        f"save_path={tmp_path / 'run'}",
    ]
    args = module_cmd("agent_torch.train", overrides=overrides)
    proc = subprocess.Popen(
        args,
        cwd=str(tmp_path),
        env=dict(os.environ, PYTHONPATH=REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    csv_path = tmp_path / "run" / "eval.csv"
    while time.time() < deadline and not (csv_path.exists() and len(csv_path.read_text().splitlines()) > 1):
        time.sleep(0.2)
    time.sleep(1.5)  # past the warm-up, into updates
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "[interrupted]" in out and "agent_load_path=" in out
    ckpt = tmp_path / "run" / "checkpoints"
    step_dir = ckpt / (ckpt / "latest").read_text().strip()
    assert (step_dir / "COMPLETE").exists()
    assert load_pickle(str(step_dir / "loop_state.pkl"))["env_step"] > 0
    assert (step_dir / "replay_buffer.pkl").exists()  # stopped early: buffer saved so the resume is exact


def test_max_wall_seconds_checkpoints_and_exits_cleanly(tmp_path):
    res = _cli(
        TINY
        + [
            "num_env_steps=1_000_000",
            "max_wall_seconds=3",
            "evaluation_per_interaction_step=100_000",
            f"save_path={tmp_path / 'run'}",
        ],
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "[budget]" in res.stdout and f"agent_load_path={tmp_path / 'run'}" in res.stdout
    assert (tmp_path / "run" / "checkpoints" / "latest").exists()
