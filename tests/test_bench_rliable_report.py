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
    assert set(constants) == {"HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4"}
    source = "github.com/leeyngdo/FlashSAC@f2da589:flash_rl/envs/mujoco.py"
    assert all(c["source"] == source for c in constants.values())
