"""bench/training_speed.py on the CPU: both CLIs on a tiny recipe, one round, and its report."""

from __future__ import annotations

import json
import os

from bench.training_speed import main, parse_result_line, recipe, summarize


def test_recipe_and_result_line_parsing():
    jax_recipe = recipe("jax", 1000, 200, 100, tiny=True, extra=["agent.sample_batch_size=4"])
    assert "agent.buffer_device_type=auto" in jax_recipe and "agent.buffer_device_type=cpu" not in jax_recipe
    assert "agent.sample_batch_size=4" in jax_recipe and "agent.sample_batch_size=8" not in jax_recipe
    torch_recipe = recipe("torch", 1000, 200, 100, tiny=False, extra=["agent.buffer_device_type=cuda"])
    assert "agent.use_compile=false" in torch_recipe and "agent.buffer_device_type=cuda" in torch_recipe
    line = ("[completed] env_step=90 wall=1.5s env_steps/s=60.2 updates/s=40.1 update_ms=3.10 "
            "last_eval_return=1.0")
    assert parse_result_line("noise\n" + line + "\n  run dir: x") == {"env_steps_per_second": 60.2,
                                                                      "updates_per_second": 40.1}
    assert parse_result_line("[interrupted] env_step=3") == {}
    assert summarize([3.0, 1.0, 2.0]) == {"n": 3, "median": 2.0, "min": 1.0, "max": 3.0}
    assert summarize([]) == {"n": 0}


def test_both_clis_on_a_tiny_recipe(tmp_path):
    out = tmp_path / "speed"
    code = main(["--out", str(out), "--tiny", "--rounds", "1", "--num-env-steps", "60", "--buffer-min-length", "30",
                 "--log-every", "10", "--torch-backend", "torch", "--jax-backend", "jax", "--no-warm-up",
                 "--torch-overrides", "agent.device_type=cpu", "--jax-overrides", "agent.device_type=cpu"])
    with open(out / "results.json") as f:
        res = json.load(f)
    assert code == 0, [r["log_tail"] for r in res["runs"]]
    assert [r["framework"] for r in res["runs"]] == ["torch", "jax"]
    for r in res["runs"]:
        assert r["updates_per_second"] > 0 and r["env_steps_per_second"] > 0
        assert r["steady_updates_per_second"] > 0 and r["steady_windows"] == 3  # ending at 40, 50, 60
    assert res["summary"]["jax"]["steady_updates_per_second"]["n"] == 1
    assert res["jax_over_torch_steady_updates"]["n"] == 1
    assert os.path.exists(out / "results.md") and "JAX / torch steady updates/s" in (out / "results.md").read_text()


def test_warm_up_runs_have_the_timed_runs_length(tmp_path, monkeypatch):
    # the JAX programs hold the LR schedule's horizon (num_env_steps) as constants: a shorter warm-up compiles others
    import bench.training_speed as ts

    cmds = []

    def fake_run(cmd, log_path, timeout_s, extra_env=None):
        cmds.append(cmd)
        return {"cmd": " ".join(cmd), "returncode": 1, "wall_s": 1.0, "log": log_path, "log_tail": ""}

    monkeypatch.setattr(ts, "timed_run", fake_run)
    ts.main(["--out", str(tmp_path), "--rounds", "1", "--num-env-steps", "7000", "--buffer-min-length", "2000"])
    assert len(cmds) == 4 and all("num_env_steps=7000" in c for c in cmds)


def test_a_third_side_runs_jax_with_extra_xla_flags_in_rotated_rounds(tmp_path, monkeypatch):
    import bench.training_speed as ts

    calls = []

    def fake_run(cmd, log_path, timeout_s, extra_env=None):
        calls.append((os.path.basename(log_path), cmd[cmd.index("-m") + 1], (extra_env or {}).get("XLA_FLAGS")))
        return {"cmd": " ".join(cmd), "returncode": 1, "wall_s": 1.0, "log": log_path, "log_tail": ""}

    monkeypatch.setattr(ts, "timed_run", fake_run)
    monkeypatch.setenv("XLA_FLAGS", "--xla_base=1")
    ts.main(["--out", str(tmp_path), "--rounds", "3", "--num-env-steps", "7000", "--buffer-min-length", "2000",
             "--jax-xla-flags=--xla_gpu_command_buffer_update_mode=NEVER_UPDATE"])
    logs = [c[0] for c in calls]
    assert logs[:3] == ["warmup-torch.log", "warmup-jax.log", "warmup-jax-xla.log"]
    assert logs[3:] == [f"{s}-round{r}.log" for r, sides in enumerate([("torch", "jax", "jax-xla"),
                                                                      ("jax", "jax-xla", "torch"),
                                                                      ("jax-xla", "torch", "jax")]) for s in sides]
    for log, module, flags in calls:
        assert module == ("agent_torch.train" if log.startswith(("torch", "warmup-torch")) else "agent_jax.train")
        if "jax-xla" in log:
            assert flags == "--xla_base=1 --xla_gpu_command_buffer_update_mode=NEVER_UPDATE"
        else:
            assert flags is None  # the other sides inherit the environment's XLA_FLAGS unchanged
    with open(tmp_path / "results.json") as f:
        res = json.load(f)
    assert res["config"]["sides"] == ["torch", "jax", "jax-xla"] and set(res["summary"]) == set(res["config"]["sides"])
    assert res["jax_xla_over_jax_steady_updates"] == {"n": 0}  # every fake run failed: no ratio
