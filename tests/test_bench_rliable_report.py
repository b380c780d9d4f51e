"""``python -m bench rliable-report --tiny``: the rliable table, per-seed returns and performance profile from the
committed per-seed data; the normalisation and the stratified-bootstrap aggregates on known inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import rliable_report as rr
from bench.__main__ import main as bench_main


def test_tiny_writes_table_profile_and_json(tmp_path):
    assert bench_main(["rliable-report", "--tiny", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "rliable.json").read_text())
    body = record["suites"]["gym-mujoco"]
    assert record["step"] == 100_000 and set(body["aggregates"]) >= {"torch", "jax", rr.PUBLISHED_LABEL}
    published = body["groups"][rr.PUBLISHED_LABEL]
    # the published HalfCheetah seeds at 100k, normalised with the committed constants
    half = published["tasks"].index("HalfCheetah-v4")
    assert published["returns"]["HalfCheetah-v4"][0] == pytest.approx(9738.214665166022)
    assert published["normalised"][half][0] == pytest.approx((9738.214665166022 + 289.415) / (10574 + 289.415))
    for agg in body["aggregates"].values():
        for point, low, high in agg.values():
            assert low <= point <= high
    png = (tmp_path / "performance_profile_gym-mujoco.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    md = (tmp_path / "rliable.md").read_text()
    assert (tmp_path / "results.md").read_text() == md
    assert "| group | tasks x runs | IQM | median | mean |" in md
    assert "| FlashSAC (published) | HalfCheetah-v4 | 0 |" in md


def test_aggregates_on_known_scores():
    x = np.array([[0.0], [1.0], [2.0], [3.0], [100.0]])  # 5 runs, 1 task
    agg = rr.aggregate({"a": x}, reps=200)["a"]
    assert agg["IQM"][0] == pytest.approx(2.0)  # mean of the middle 50 %: runs 1, 2, 3
    assert agg["mean"][0] == pytest.approx(21.2)
    constants = rr.load_normalization()
    assert rr.normalise(np.array([-289.415, 10574.0]), "HalfCheetah-v4", constants).tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="no normalisation constants for 'Pusher-v4'"):
        rr.normalise(np.array([1.0]), "Pusher-v4", constants)


def test_normalization_file_cites_its_source():
    constants = rr.load_normalization()
    gym = {"HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4"}
    assert gym <= set(constants)
    source = "github.com/leeyngdo/FlashSAC@f2da589:flash_rl/envs/mujoco.py"
    assert all(constants[t]["source"] == source and constants[t]["suite"] == "gym-mujoco" for t in gym)
    # DeepMind Control: the range of a return (reward in [0, 1] over 1000 steps) for every published DMC task
    dmc = {t for t, c in constants.items() if c["suite"] == "dmc"}
    assert "dog-walk" in dmc and dmc | gym == set(constants)
    assert all((constants[t]["random_return"], constants[t]["reference_return"]) == (0.0, 1000.0) for t in dmc)


def test_a_dmc_run_is_aggregated_beside_the_published_dmc_seeds(tmp_path):
    folder = tmp_path / "collected"
    for seed, value in ((0, 250.0), (1, 300.0)):
        run = folder / "torch" / "dog-walk" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "eval.csv").write_text(f"metric,env_step,value\navg_return,0,3.0\navg_return,100000,{value}\n")
    record = rr.write_report([str(folder)], str(tmp_path / "out"), reps=200)
    body = record["suites"]["dmc"]
    published = body["groups"][rr.PUBLISHED_LABEL]
    assert published["tasks"] == ["dog-walk"] and len(published["seeds"]["dog-walk"]) == 5
    assert sorted(published["returns"]["dog-walk"])[0] == pytest.approx(173.54743855880116)
    assert body["groups"]["torch"]["normalised"][0] == pytest.approx([0.25, 0.3])
    md = (tmp_path / "out" / "rliable.md").read_text()
    assert "flashsac_suites_per_seed.csv" in md and record["no_constants"] == []
    run = folder / "torch" / "myo-reach" / "seed0"  # MyoSuite: no constants, named as left out
    run.mkdir(parents=True)
    (run / "eval.csv").write_text("metric,env_step,value\navg_return,0,3.0\navg_return,100000,700.0\n")
    record = rr.write_report([str(folder)], str(tmp_path / "out"), reps=200)
    assert record["no_constants"] == ["myo-reach"] and set(record["suites"]) == {"dmc"}
    assert "Left out, no normalisation constants: myo-reach." in (tmp_path / "out" / "rliable.md").read_text()
