"""bench/gpu_mjx.py (the two device calls of issue 17) and bench/mjx_learning.py (their learning report), on CPU
without training: the learning runs' config is upstream's GPU recipe and valid, the budgets add up, the archive
leaves checkpoints and the compilation cache out, the speed sweep skips what its budget cannot hold, and the report
reads eval curves and TensorBoard wall times. (The whole pipeline was rehearsed on CPU at tiny sizes; it trains for
minutes, too long for CI.)"""

from __future__ import annotations

import json
import os
import tarfile
import time

import pytest

from agent_common import schema
from agent_common.config import parse_overrides
from agent_common.schema import build_config
from bench import gpu_mjx, mjx_learning, mjx_training_speed


@pytest.fixture
def extra_installed(monkeypatch):
    monkeypatch.setattr(schema, "mjx_missing", lambda: [])


def _args(*extra: str):
    return gpu_mjx.parse_args(["call1", *extra])


def test_learning_runs_are_upstreams_gpu_recipe(extra_installed, tmp_path):
    a = _args()
    overrides = gpu_mjx.learning_overrides(a, 2, str(tmp_path / "seed2"), 480.7)
    cfg = build_config(parse_overrides(overrides), "jax")
    assert (cfg.env.env_type, cfg.env.env_name, cfg.num_train_envs, cfg.num_env_steps, cfg.seed) == (
        "mjx", "halfcheetah", 1024, 50_000_896, 2)
    assert (cfg.agent.sample_batch_size, cfg.updates_per_interaction_step, cfg.agent.buffer_max_length,
            cfg.agent.buffer_min_length) == (2048, 2, 10_000_000, 100_000)
    assert (cfg.num_eval_envs, cfg.num_eval_episodes, cfg.evaluation_per_interaction_step) == (50, 50, 1000)
    assert cfg.max_wall_seconds == 480 and cfg.save_path == str(tmp_path / "seed2") and not cfg.save_buffer
    assert cfg.save_checkpoint_per_interaction_step > cfg.num_env_steps // cfg.num_train_envs  # only at the stop
    assert cfg.agent.categorical_target_backend == "pallas" and cfg.agent.categorical_target_strict
    tiny = _args("--learn-overrides", "num_eval_envs=2", "--overrides", "agent.sample_batch_size=8")
    cfg = build_config(parse_overrides(gpu_mjx.learning_overrides(tiny, 0, str(tmp_path / "s"), 1)), "jax")
    assert (cfg.num_eval_envs, cfg.agent.sample_batch_size) == (2, 8)  # later overrides win


def test_budgets_add_up():
    a = _args()
    # launched at call 1's latest start: the runs end, checkpoint included, pack_s before call 2's deadline
    left1 = a.deadline_s - a.learn_start_by_s
    wall = gpu_mjx.learn_wall_seconds(left1, a)
    assert wall == int(left1 + a.gap_s + a.call2_deadline_s - a.pack_s - a.startup_s - a.stop_s) > 400
    end_in_call2 = a.startup_s + wall + a.stop_s - left1 - a.gap_s
    assert end_in_call2 <= a.call2_deadline_s - a.pack_s
    assert a.deadline_s <= 560 and a.call2_deadline_s <= 560  # the device calls' length, the install before them
    assert a.learn_start_by_s <= a.deadline_s - 60  # call 1 sees the runs start
    assert gpu_mjx.learn_wall_seconds(-1e4, a) == 1


def test_commands(tmp_path):
    a = _args("--root", str(tmp_path))
    cmd = gpu_mjx._speed_command(a, "torch", [256, 1024], str(tmp_path / "sweep"), 120, ["agent.use_amp=false"], 99.6)
    assert cmd[cmd.index("--envs") + 1:cmd.index("--envs") + 3] == ["256", "1024"]
    assert cmd[cmd.index("--cache-dir") + 1] == str(tmp_path / "jax_cache")
    assert cmd[cmd.index("--backend") + 1] == "triton" and cmd[-2:] == ["--budget-s", "99"]
    assert cmd[cmd.index("--overrides") + 1] == "agent.use_amp=false"
    assert a.xla_variant == []  # the device-loop flag is the default already (mjx_envs.recipe)
    assert gpu_mjx._xla_env("--x=1")["XLA_FLAGS"].endswith("--x=1")
    with pytest.raises(SystemExit):
        gpu_mjx.parse_args(["call1", "--backend", "cuda=triton"])


def test_pack_leaves_checkpoints_and_cache_out(tmp_path):
    a = _args("--root", str(tmp_path / "root"), "--out", str(tmp_path / "out"))
    p = gpu_mjx.Phase(a, "call2")
    for rel in ("learn/seed0/eval.csv", "learn/seed0/checkpoints/step1/replay_buffer.pkl", "jax_cache/x",
                "sweep/jax/results.md"):
        os.makedirs(os.path.dirname(os.path.join(p.root, rel)), exist_ok=True)
        open(os.path.join(p.root, rel), "w").write("x")
    p.pack()
    with tarfile.open(tmp_path / "out" / "gpu_mjx_call2.tgz") as tar:
        names = set(tar.getnames())
    assert {"root/learn/seed0/eval.csv", "root/sweep/jax/results.md"} <= names
    assert not [n for n in names if "checkpoints" in n or "jax_cache" in n]


def test_speed_sweep_skips_what_the_budget_cannot_hold(tmp_path):
    rc = mjx_training_speed.main(["--out", str(tmp_path), "--framework", "jax", "--envs", "8", "16", "--budget-s",
                                  "0", "--backend", "jax"])
    res = json.load(open(tmp_path / "results.json"))
    assert rc == 1 and [r["returncode"] for r in res["runs"]] == ["skipped", "skipped"]
    assert "| 8 | skipped |" in (tmp_path / "results.md").read_text()


# ------------------------------------------------------------------------------------------------- the report


def _fake_run(path, seed: int, envs: int, env_type: str, evals: list[tuple[int, float, float]], monkeypatch,
              start: float = 1000.0, launch: float | None = None) -> str:
    """A run directory: config.yaml, eval.csv and TensorBoard avg_return events at (step, return, wall seconds)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    os.makedirs(path / "tb")
    (path / "config.yaml").write_text(
        f"seed: {seed}\nnum_train_envs: {envs}\nupdates_per_interaction_step: 2.0\n"
        f"env:\n  env_type: {env_type}\n  env_name: halfcheetah\n"
        "agent:\n  sample_batch_size: 2048\n  categorical_target_backend: pallas\n")
    rows = [",exp_name,env_name,seed,metric,env_step,value"]
    rows += [f"{i},FlashSAC,halfcheetah,{seed},avg_return,{s}.0,{v}" for i, (s, v, _t) in enumerate(evals)]
    (path / "eval.csv").write_text("\n".join(rows) + "\n")
    monkeypatch.setattr(time, "time", lambda: start)  # the event file's first event: the logger's start
    writer = EventFileWriter(str(path / "tb"))
    monkeypatch.undo()
    for step, value, secs in evals:
        summary = Summary(value=[Summary.Value(tag="avg_return", simple_value=value)])
        writer.add_event(Event(wall_time=start + secs, step=step, summary=summary))
    writer.close()
    if launch is not None:
        (path.parent / f"{path.name}.launch.json").write_text(json.dumps({"launch_unix": launch}))
    return str(path)


def test_report_reads_curves_and_wall_times(tmp_path, monkeypatch):
    mjx = [_fake_run(tmp_path / f"seed{s}", s, 1024, "mjx",
                     [(0, -300.0, 30.0), (1_024_000, 2500.0 + s * 1000, 100.0), (2_048_000, 5200.0, 170.0 + s)],
                     monkeypatch, launch=1000.0 - 40) for s in range(3)]
    cpu = [_fake_run(tmp_path / "cpu0", 0, 1, "mujoco", [(0, -250.0, 5.0), (20_000, 3400.0, 48.0)], monkeypatch)]
    text = mjx_learning.report(str(tmp_path / "out"), {"GPU recipe": mjx, "CPU recipe": cpu}, [3000.0, 5000.0])
    res = json.load(open(tmp_path / "out" / "mjx_learning.json"))
    reach = res["reach"]["3000.0"]
    got = [(x["env_step"], x["s"], x["s_from_launch"]) for x in reach["runs"]["GPU recipe, JAX"]]
    assert got == [(2_048_000, 170.0, 210.0), (1_024_000, 100.0, 140.0), (1_024_000, 100.0, 140.0)]
    assert reach["median"]["GPU recipe, JAX"]["s"] == 100.0 and reach["median"]["CPU recipe, JAX"]["s"] == 48.0
    assert res["reach"]["5000.0"]["runs"]["CPU recipe, JAX"] == [None]
    assert "not reached (best 3,400 at 20,000)" in text and "CPU recipe, JAX: 0.48" in text
    assert "| 1,024,000 | 2,500 @ 100 | 3,500 @ 100 | 4,500 @ 100 | 3,500 |" in text
    assert (tmp_path / "out" / "mjx_learning.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        mjx_learning.main(["--out", str(tmp_path), "--mjx", str(tmp_path / "nowhere")])
