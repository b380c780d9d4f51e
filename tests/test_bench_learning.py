"""`python -m bench learning --tiny`: one tiny Hopper run trained through the runner, collected and reported against
the published figures (at step 0, the only published step a tiny run reaches)."""

from __future__ import annotations

import csv
import json
import os

from bench.__main__ import main


def test_tiny_run(tmp_path):
    out = tmp_path / "learning"
    assert main(["learning", "--tiny", "--out", str(out)]) == 0
    run = out / "collected" / "torch" / "Hopper-v4" / "seed0"
    assert {"eval.csv", "config.yaml", "run.json"} <= set(os.listdir(run))
    with open(run / "eval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["env_step"]) for r in rows if r["metric"] == "avg_return"] == [0, 30, 60]
    res = json.loads((out / "results.json").read_text())
    (row,) = res["rows"]
    assert (row["agent"], row["task"], row["env_step"], row["seeds"]) == ("torch", "Hopper-v4", 0, [0])
    assert row["published"]["mean"] != 0 and not row["published_protocol"]
    assert (out / "learning_curves.png").stat().st_size > 1000
    assert "python -m bench learning report" in (out / "results.md").read_text()
    rliable = json.loads((out / "rliable.json").read_text())  # the robust aggregates beside the per-seed table
    suite = rliable["suites"]["gym-mujoco"]
    assert set(suite["aggregates"]["torch"]) == {"IQM", "median", "mean"}  # each a (point, low, high) triple
    assert all(len(v) == 3 for v in suite["aggregates"]["torch"].values())
    assert (out / suite["profile"]).stat().st_size > 1000
    assert "rliable.md" in (out / "results.md").read_text() and (out / "rliable.md").is_file()


def _settings(cmd: list[str]) -> dict[str, str]:
    pairs = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--overrides"]
    return dict(p.split("=", 1) for p in pairs)


def test_each_suite_trains_on_its_recipe_with_the_published_schedule(tmp_path):
    import pytest

    from bench.learning import RunSpec, parse_runs, published_decay, suite_of, train_command

    assert [suite_of(t) for t in ("Hopper-v4", "dog-walk", "myo-reach", "G1JoystickFlatTerrain")] == [
        "gym", "dmc", "myosuite", "playground"]
    with pytest.raises(ValueError, match="'dog-walks'"):
        suite_of("dog-walks")
    with pytest.raises(ValueError, match="'dog-walks'"):
        parse_runs("torch:dog-walks:0")
    gym = _settings(train_command(RunSpec("torch", "Hopper-v4", 0), str(tmp_path), 100_000, 600))
    assert (gym["env.env_name"], gym["agent.learning_rate_decay_step"], gym["agent.learning_rate_warmup_step"],
            gym["evaluation_per_interaction_step"]) == ("Hopper-v4", "1000000", "1", "20_000")
    dmc = _settings(train_command(RunSpec("jax", "dog-walk", 3), str(tmp_path), 100_000, 600))
    assert (dmc["env.env_type"], dmc["env.env_name"], dmc["num_env_steps"], dmc["seed"]) == (
        "dmc", "dog-walk", "100000", "3")
    assert dmc["agent.learning_rate_decay_step"] == "1000000" == str(published_decay("dog-walk"))
    myo = _settings(train_command(RunSpec("torch-jaxinit", "myo-reach", 0), str(tmp_path), 100_000, 600))
    assert (myo["env.env_type"], myo["gamma"]) == ("myosuite", "0.95")
    # Playground: 1024 envs, 2 updates per step; the published runs' 50,000,896 env steps are 48,829 interaction
    # steps, so their learning rate decays over 97,658 updates; upstream's AMP only for the torch agent
    g1 = train_command(RunSpec("torch", "G1JoystickFlatTerrain", 0), str(tmp_path), 10_493_952, 600)
    play = _settings(g1)
    assert (play["env.env_type"], play["num_train_envs"], play["agent.learning_rate_decay_step"],
            play["agent.learning_rate_warmup_step"], play["agent.use_amp"]) == (
        "mujoco_playground", "1024", "97658", "0", "true")
    assert published_decay("G1JoystickFlatTerrain") == 97_658
    assert "agent.use_amp" not in _settings(
        train_command(RunSpec("jax", "G1JoystickFlatTerrain", 0), str(tmp_path), 10_493_952, 600))


def test_suites_published_returns_and_the_playground_step_match():
    from bench.learning import load_published_suites, match_step

    published = load_published_suites()
    dog = published["dog-walk"][100_000]  # 5 seeds: 173.5-302.1 (results/stateRL_cpusim/FlashSAC.csv)
    assert dog["n"] == 5 and round(dog["min"], 1) == 173.5 and round(dog["max"], 1) == 302.1
    assert abs(dog["mean"] - 243.718) < 0.001
    assert 10_493_952 in published["G1JoystickFlatTerrain"] and 100_000 in published["myo-reach"]
    # a 1024-env run evaluating every 4,880 interaction steps: 9,994,240 is 4.8 % below 10,493,952 (no match); its
    # final evaluation at 10,493,952 matches exactly; on the 100k grid only equal steps match
    assert match_step([4_997_120, 9_994_240], 10_493_952, 0.02) is None
    assert match_step([9_994_240, 10_493_952], 10_493_952, 0.02) == 10_493_952
    assert match_step([10_300_000, 10_690_000], 10_493_952, 0.02) == 10_300_000  # the nearer one
    assert match_step([99_999], 100_000, 0.0) is None and match_step([100_000], 100_000, 0.0) == 100_000
