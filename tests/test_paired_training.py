"""Statistics of the paired end-to-end training benchmark (bench/paired_training.py) on synthetic numbers (CPU).

The training runs themselves need the GPU and the agents; only the arithmetic is tested here.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.paired_training import merge_overrides, pair_saving_percent, summarize_savings, train_command

# The seed project's six paired torch/Triton savings have this shape: mean 3.23, median 2.39, range -2.26..9.87.
SEED_PROJECT_LIKE = [-2.26, 1.50, 2.00, 2.78, 5.49, 9.87]


def test_pair_saving_is_relative_to_the_reference():
    assert pair_saving_percent(100.0, 90.0) == pytest.approx(10.0)
    assert pair_saving_percent(100.0, 110.0) == pytest.approx(-10.0)
    with pytest.raises(ValueError, match="positive"):
        pair_saving_percent(0.0, 1.0)


def test_summary_statistics():
    s = summarize_savings(SEED_PROJECT_LIKE, n_boot=4000, seed=1)
    a = np.array(SEED_PROJECT_LIKE)
    assert s["n"] == 6
    assert s["mean"] == pytest.approx(a.mean()) and s["median"] == pytest.approx(np.median(a))
    assert (s["min"], s["max"]) == (-2.26, 9.87)
    assert s["std"] == pytest.approx(a.std(ddof=1))
    lo, hi = s["mean_ci"]
    assert s["min"] <= lo < s["mean"] < hi <= s["max"]
    assert s["min"] <= s["median_ci"][0] <= s["median"] <= s["median_ci"][1] <= s["max"]
    # The percentile bootstrap of the mean is close to the normal interval mean +- 1.96 * sd / sqrt(n).
    half = 1.96 * a.std(ddof=0) / np.sqrt(a.size)
    assert lo == pytest.approx(a.mean() - half, abs=0.6) and hi == pytest.approx(a.mean() + half, abs=0.6)


def test_summary_is_deterministic_and_the_interval_narrows_with_more_pairs():
    assert summarize_savings(SEED_PROJECT_LIKE, seed=3) == summarize_savings(SEED_PROJECT_LIKE, seed=3)
    few, many = np.array(SEED_PROJECT_LIKE), np.tile(SEED_PROJECT_LIKE, 100)  # same spread, 100x the pairs
    w_few = np.diff(summarize_savings(few)["mean_ci"])[0]
    w_many = np.diff(summarize_savings(many)["mean_ci"])[0]
    assert w_many < w_few / 5  # ~ 1 / sqrt(100)
    lo, hi = summarize_savings(many)["mean_ci"]
    assert lo < many.mean() < hi and hi - lo == pytest.approx(2 * 1.96 * many.std() / np.sqrt(many.size), rel=0.15)


def test_summary_edge_cases():
    one = summarize_savings([4.2])
    assert one["mean_ci"] == [4.2, 4.2] and one["std"] == 0.0
    with pytest.raises(ValueError, match="no savings"):
        summarize_savings([])
    with pytest.raises(ValueError, match="finite"):
        summarize_savings([1.0, float("nan")])


def test_commands_pin_backend_seed_and_strict_mode():
    cmd = train_command("jax", "pallas", 2, 500, "/tmp/run", ["agent.sample_batch_size=64"])
    assert cmd[1:3] == ["-m", "agent_jax.train"]
    pairs = dict(o.split("=", 1) for o in cmd[4::2])
    assert cmd[3::2] == ["--overrides"] * len(pairs)
    assert pairs["agent.categorical_target_backend"] == "pallas" and pairs["seed"] == "2"
    assert pairs["agent.categorical_target_strict"] == "true" and pairs["num_env_steps"] == "500"
    assert pairs["agent.sample_batch_size"] == "64"


def test_user_overrides_replace_the_short_run_defaults():
    merged = merge_overrides(("agent.buffer_min_length=1000", "num_eval_episodes=1"), ["agent.buffer_min_length=50"])
    assert merged == ["num_eval_episodes=1", "agent.buffer_min_length=50"]


def test_report_is_written_after_every_pair(tmp_path, monkeypatch):
    # a benchmark cut short (device-call timeout) must keep the pairs it finished: the report is rewritten after each
    import json

    import bench.paired_training as pt

    calls = []

    def fake_pair(fw, seed, repeat, steps, out, overrides, timeout_s):
        calls.append((fw, seed))
        if len(calls) == 3:
            raise KeyboardInterrupt  # stands in for the kill
        return {"framework": fw, "seed": seed, "repeat": repeat, "order": ["a", "b"], "ok": True, "runs": {},
                "t_reference_s": 10.0, "t_kernel_s": 9.0, "saving_percent": 10.0}

    monkeypatch.setattr(pt, "run_pair", fake_pair)
    with pytest.raises(KeyboardInterrupt):
        pt.main(["--out", str(tmp_path), "--seeds", "0,1", "--frameworks", "torch", "--no-warm-up"])
    res = json.loads((tmp_path / "results.json").read_text())
    assert len(res["pairs"]) == 2 and res["complete"] is False
    assert res["summary"]["torch"]["n"] == 2
    assert "**Partial**" in (tmp_path / "results.md").read_text()


def test_warm_up_runs_first_and_jax_runs_share_a_compilation_cache(tmp_path, monkeypatch):
    import json

    import bench.paired_training as pt

    runs = []

    def fake_run(cmd, log_path, timeout_s, extra_env=None):
        runs.append((cmd, extra_env or {}))
        return {"cmd": " ".join(cmd), "returncode": 0, "wall_s": 1.0, "log": log_path, "log_tail": ""}

    monkeypatch.setattr(pt, "timed_run", fake_run)
    assert pt.main(["--out", str(tmp_path), "--seeds", "0", "--repeats", "1"]) == 0
    warm, timed = runs[:4], runs[4:]
    assert [c[c.index("-m") + 1] for c, _ in warm] == ["agent_torch.train"] * 2 + ["agent_jax.train"] * 2
    assert all("num_env_steps=5000" in c for c, _ in warm)  # the timed runs' programs (LR horizon)
    assert len(timed) == 4 and all("num_env_steps=5000" in c for c, _ in timed)
    for cmd, env in runs:
        is_jax = "agent_jax.train" in cmd
        assert ("JAX_COMPILATION_CACHE_DIR" in env) == is_jax
        if is_jax:
            assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "jax_cache")
    assert len(json.loads((tmp_path / "results.json").read_text())["config"]["warm_ups"]) == 4


def test_training_loop_time_is_read_from_the_cli_result_line(tmp_path, monkeypatch):
    # the loop's wall time (agent_common.loop.run_cli prints "[completed] ... wall=12.3s ...") is reported beside the
    # process time, and its saving summarised separately; a run without that line has no loop time
    import json
    import sys

    import bench.paired_training as pt

    script = ("import sys; print('[completed] env_step=3000 wall=' + sys.argv[1] + 's env_steps/s=1.0 "
              "update_ms=1.00 last_eval_return=0.0')")
    run = pt.timed_run([sys.executable, "-c", script, "12.5"], str(tmp_path / "a.log"), 60)
    assert run["returncode"] == 0 and run["loop_s"] == 12.5 and run["wall_s"] > 0
    silent = pt.timed_run([sys.executable, "-c", "print('no result line')"], str(tmp_path / "b.log"), 60)
    assert silent["loop_s"] is None

    loops = iter(["10.0", "9.0", "20.0", "20.0"])

    def fake_command(fw, backend, seed, steps, run_dir, extra):
        return [sys.executable, "-c", script, next(loops)]

    monkeypatch.setattr(pt, "train_command", fake_command)
    assert pt.main(["--out", str(tmp_path / "out"), "--seeds", "0,1", "--frameworks", "torch", "--repeats", "1",
                    "--no-warm-up"]) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [p["loop_saving_percent"] for p in res["pairs"]] == pytest.approx([10.0, 0.0])
    assert res["summary_loop"]["torch"]["mean"] == pytest.approx(5.0)
    assert "training loop" in (tmp_path / "out" / "results.md").read_text()
