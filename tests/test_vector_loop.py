"""The driver over the device stepper (``agent_common.device``) with a framework-free fake trainer: the chunks it asks
for, when it evaluates, logs and checkpoints, how it counts updates, resume (also without the replay rows) and
closing. No JAX, no MJX: the JAX trainer itself is tested end to end in tests/test_agent_jax_mjx.py."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from agent_common.config import build_config
from agent_common.device import device_trainer, interaction_steps_per_call
from agent_common.driver import train
from agent_common.logger import read_eval_csv
from agent_common.runs.files import atomic_pickle, load_pickle
from simulators import mjx


class FakeTrainer:
    """Counts steps, replay rows and updates as the protocol says; its 'metrics' and 'returns' are those counts."""

    instances: list[FakeTrainer] = []

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.num_envs = cfg.num_train_envs
        self.steps = self.rows = self.updates = 0
        self.calls: list[int] = []
        self.evaluated_at: list[int] = []
        self.closed = 0
        self.metric_sum = 0.0
        self.metric_count = 0
        FakeTrainer.instances.append(self)

    def advance(self, num_steps: int) -> None:
        assert 1 <= num_steps <= interaction_steps_per_call(self.cfg)
        self.calls.append(num_steps)
        for _ in range(num_steps):
            self.steps += 1
            self.rows = min(self.cfg.agent.buffer_max_length, self.rows + self.num_envs)
            if self.rows >= self.cfg.agent.buffer_min_length:
                for _ in range(int(self.cfg.updates_per_interaction_step)):
                    self.updates += 1
                    self.metric_sum += self.updates
                    self.metric_count += 1

    def evaluate(self, num_episodes: int) -> dict[str, float]:
        self.evaluated_at.append(self.steps)
        return {"avg_return": float(self.steps), "avg_length": 1.0, "avg_success_once": 0.0, "avg_success_end": 0.0}

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        out = {"critic/loss": (self.metric_sum, self.metric_count)} if self.metric_count else {}
        self.metric_sum, self.metric_count = 0.0, 0
        return out

    def info(self) -> dict[str, float | str]:
        return {"compile/path": "fake trainer", "backend/fallback_count": 0.0}

    def save_agent(self, directory: str) -> None:
        atomic_pickle(os.path.join(directory, "actor.pkl"), {"updates": self.updates})

    def load_agent(self, directory: str, load_optimizer: bool) -> None:
        self.updates = load_pickle(os.path.join(directory, "actor.pkl"))["updates"]

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "rows": self.rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, self.rows = state["steps"], state["rows"]

    def buffer_state(self) -> dict[str, Any]:
        return {"rows": np.zeros((self.rows, 3), np.float32)}

    def load_buffer_state(self, state: dict[str, Any] | None) -> None:
        if state is None:
            self.rows = 0
        else:
            assert state["rows"].shape == (self.rows, 3)

    def close(self) -> None:
        self.closed += 1


# 3 envs, 100 interaction steps, updates from step 10 (30 rows), 2 per step; K = 7 (explicit); intervals 25 / 10 / 40
BASE = {"env.env_type": "mjx", "env.env_name": "hopper", "num_train_envs": 3, "num_env_steps": 300,
        "agent.buffer_min_length": 30, "agent.sample_batch_size": 30, "agent.buffer_max_length": 1000,
        "updates_per_interaction_step": 2, "interaction_steps_per_call": 7, "evaluation_per_interaction_step": 25,
        "logging_per_interaction_step": 10, "save_checkpoint_per_interaction_step": 40, "num_eval_envs": 1,
        "num_eval_episodes": 1, "progress_bar": False, "keep_checkpoints": 5}


@pytest.fixture(autouse=True)
def _mjx_extra(monkeypatch):
    monkeypatch.setattr(mjx, "missing", lambda: [])
    FakeTrainer.instances.clear()


def _train(tmp_path, **values: Any) -> Any:
    cfg = build_config({**BASE, "save_path": str(tmp_path / "run"), **values}, "jax")
    return train(cfg, device_trainer(FakeTrainer, "jax"))


def test_chunks_events_and_counts(tmp_path):
    result = _train(tmp_path)
    trainer = FakeTrainer.instances[-1]
    assert result.status == "completed" and result.env_step == 300 and trainer.closed == 1
    # calls of at most 7 steps, cut at every multiple of 10 (logging), 25 (evaluation), 40 (checkpoint) and at 100
    ends = np.cumsum(trainer.calls).tolist()
    assert ends[:7] == [7, 10, 17, 20, 25, 30, 37] and ends[-1] == 100 and sum(trainer.calls) == 100
    for boundary in (10, 20, 25, 30, 40, 50, 75, 80, 100):
        assert boundary in ends
    assert trainer.evaluated_at == [0, 25, 50, 75, 100]
    assert [step for step, _ in read_eval_csv(str(tmp_path / "run" / "eval.csv"))] == [0.0, 75.0, 150.0, 225.0, 300.0]
    assert trainer.updates == 2 * 91  # steps 10..100
    assert result.updates_per_second > 0 and result.checkpoint.endswith("step300")
    names = sorted(os.listdir(tmp_path / "run" / "checkpoints"))
    assert names == ["latest", "step120", "step240", "step300"]


def test_resume_continues_and_without_rows_warms_up_again(tmp_path, capsys):
    _train(tmp_path, num_env_steps=150)  # 50 steps: checkpoint at 40 and at the end (50)
    first = FakeTrainer.instances[-1]
    assert (first.steps, first.updates) == (50, 82)
    result = _train(tmp_path, agent_load_path=str(tmp_path / "run"), num_env_steps=300)
    resumed = FakeTrainer.instances[-1]
    assert "resumed from" in capsys.readouterr().err
    assert (resumed.steps, resumed.updates, result.env_step) == (100, 182, 300)
    assert resumed.evaluated_at == [75, 100]  # no evaluation at the resume step, the rest as an uninterrupted run
    # a checkpoint without rows: the replay starts empty and the warm-up (10 steps) runs again
    _train(tmp_path / "b", num_env_steps=150, save_buffer=False)
    _train(tmp_path / "b", agent_load_path=str(tmp_path / "b" / "run"), num_env_steps=300)
    again = FakeTrainer.instances[-1]
    assert "has no replay buffer" in capsys.readouterr().err
    assert again.updates == 82 + 2 * (50 - 9)  # steps 60..100 update


def test_budget_stop_checkpoints_with_rows(tmp_path):
    result = _train(tmp_path, max_wall_seconds=1e-9)
    trainer = FakeTrainer.instances[-1]
    assert result.status == "budget" and trainer.calls == [7] and trainer.closed == 1
    assert os.path.exists(tmp_path / "run" / "checkpoints" / "step21" / "replay_buffer.pkl")


class NStepFakeTrainer(FakeTrainer):
    """``FakeTrainer`` with an n-step window: a step's rows are stored n - 1 steps later; the window is saved with
    the rows."""

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.fill = 0

    def advance(self, num_steps: int) -> None:
        for _ in range(num_steps):
            if self.fill < self.cfg.n_step - 1:
                self.fill += 1
                self.steps += 1
                self.calls.append(1)
            else:
                super().advance(1)

    def window_fill(self) -> int:
        return self.fill

    def buffer_state(self) -> dict[str, Any]:
        return {**super().buffer_state(), "window": self.fill}

    def load_buffer_state(self, state: dict[str, Any] | None) -> None:
        super().load_buffer_state(state)
        self.fill = 0 if state is None else state["window"]


def test_the_rows_mirror_counts_the_n_step_window(tmp_path):
    """n_step=3: rows are stored from the 3rd step, so updates start 2 steps later (step 12); the loop's count of
    rows and updates follows, also across a resume (the window is in the checkpoint)."""
    cfg = build_config({**BASE, "save_path": str(tmp_path / "run"), "n_step": 3, "num_env_steps": 150}, "jax")
    train(cfg, device_trainer(NStepFakeTrainer, "jax"))
    first = FakeTrainer.instances[-1]
    assert (first.steps, first.rows, first.updates) == (50, 3 * 48, 2 * 39)  # updates on steps 12..50
    cfg = build_config({**BASE, "agent_load_path": str(tmp_path / "run"), "n_step": 3, "num_env_steps": 300}, "jax")
    train(cfg, device_trainer(NStepFakeTrainer, "jax"))
    resumed = FakeTrainer.instances[-1]
    assert (resumed.steps, resumed.updates) == (100, 2 * 89)
    state = load_pickle(str(tmp_path / "run" / "checkpoints" / "step300" / "loop_state.pkl"))
    assert (state["replay_rows"], state["num_updates"]) == (3 * 98, 2 * 89)  # the mirror equals the trainer


def test_several_processes_are_refused(tmp_path):
    from agent_common.keys import ConfigError
    from agent_common.replicas import Replicas

    cfg = build_config({**BASE, "save_path": str(tmp_path / "run")}, "jax")
    with pytest.raises(ConfigError, match="env.env_type=mjx runs in one process"):
        train(cfg, device_trainer(FakeTrainer, "jax"), Replicas(rank=0, world_size=2))
    assert not FakeTrainer.instances


_SLIDER = """<mujoco><visual><global offwidth="64" offheight="64"/></visual><worldbody>
<light pos="0 0 3" castshadow="false"/><geom type="plane" size="5 5 .1"/>
<body name="cart" pos="0 0 .2"><joint name="slide" type="slide" axis="1 0 0"/>
<geom type="box" size=".1 .1 .1" rgba="1 .5 0 1"/></body>
<camera name="follow" mode="trackcom" pos="0 -1.5 .5" xyaxes="1 0 0 0 .3 1"/></worldbody></mujoco>"""


class RecordingFakeTrainer(FakeTrainer):
    """``FakeTrainer`` with the recording hooks: round ``k`` of env ``i`` lasts ``3 + (k + i) % 3`` steps, its cart
    sliding from ``0.1 k``; its return is ``k``."""

    rounds: list[int] = []

    def recording_model(self) -> tuple[Any, float]:
        import mujoco

        return mujoco.MjModel.from_xml_string(_SLIDER), 0.05

    def record_round(self, num_envs: int, num_steps: int, index: int) -> dict[str, np.ndarray]:
        RecordingFakeTrainer.rounds.append(index)
        lengths = np.array([min(3 + (index + i) % 3, num_steps) for i in range(num_envs)])
        steps = np.arange(int(lengths.max()))[:, None]  # (T, 1)
        qpos = (0.1 * index + 0.2 * steps)[:, :, None] * np.ones((1, num_envs, 1))  # (T, n, 1)
        return {"qpos": qpos, "alive": steps < lengths[None, :], "returns": np.full(num_envs, float(index)),
                "finished": lengths <= num_steps}


needs_osmesa = pytest.mark.skipif(__import__("ctypes.util").util.find_library("OSMesa") is None,
                                  reason="needs libOSMesa (apt-get install libosmesa6) for MUJOCO_GL=osmesa")
RECORD = {"record_video": True, "record_size": 32, "num_eval_envs": 2, "num_eval_episodes": 2, "num_record_envs": 2,
          "num_record_episodes": 4, "recording_per_interaction_step": 33}


def _videos(run) -> dict[str, tuple[int, ...]]:
    from agent_common.video import read_video_frames

    return {name: read_video_frames(str(run / "videos" / name)).shape for name in sorted(os.listdir(run / "videos"))}


@needs_osmesa
def test_recording_schedule_frames_and_resume(tmp_path, monkeypatch, capsys):
    """Videos at the start, every 33 steps (the chunks end there) and at the end, each of 2 rounds of 2 envs side by
    side (a round as long as its longer episode); resumed from step 50 the run records the same later videos from
    the same rounds, and its checkpoint holds the same recorder state; with recording off no renderer is built."""
    from gymnasium.envs.mujoco import mujoco_rendering

    from agent_common.video import read_video_frames

    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    RecordingFakeTrainer.rounds.clear()
    cfg = build_config({**BASE, **RECORD, "save_path": str(tmp_path / "run")}, "jax")
    train(cfg, device_trainer(RecordingFakeTrainer, "jax"))
    ends = np.cumsum(RecordingFakeTrainer.instances[-1].calls).tolist()
    assert {33, 66, 99} <= set(ends)
    straight = _videos(tmp_path / "run")
    # round k lasts max(3 + k % 3, 3 + (k + 1) % 3) frames: rounds (0, 1) 4 + 5, (2, 3) 5 + 4, (4, 5) 5 + 5, ...
    assert straight == {"eval_step000000000.mp4": (9, 32, 64, 3), "eval_step000000099.mp4": (9, 32, 64, 3),
                        "eval_step000000198.mp4": (10, 32, 64, 3), "eval_step000000297.mp4": (9, 32, 64, 3),
                        "eval_step000000300.mp4": (9, 32, 64, 3)}
    assert RecordingFakeTrainer.rounds == list(range(10))
    assert "video " in capsys.readouterr().err

    RecordingFakeTrainer.rounds.clear()
    half = build_config({**BASE, **RECORD, "num_env_steps": 150, "save_path": str(tmp_path / "half")}, "jax")
    train(half, device_trainer(RecordingFakeTrainer, "jax"))  # videos at 0, 33 and 50 (its end): rounds 0..5
    resumed = build_config({**BASE, **RECORD, "agent_load_path": str(tmp_path / "half" / "checkpoints" / "step120"),
                            "save_path": str(tmp_path / "resumed")}, "jax")
    train(resumed, device_trainer(RecordingFakeTrainer, "jax"))  # from step 40: videos at 66, 99 and 100
    assert _videos(tmp_path / "resumed") == {k: v for k, v in straight.items() if k >= "eval_step000000198.mp4"}
    for name in _videos(tmp_path / "resumed"):
        np.testing.assert_array_equal(read_video_frames(str(tmp_path / "resumed" / "videos" / name)),
                                      read_video_frames(str(tmp_path / "run" / "videos" / name)))
    a = load_pickle(str(tmp_path / "run" / "checkpoints" / "step300" / "loop_state.pkl"))["videos"]
    b = load_pickle(str(tmp_path / "resumed" / "checkpoints" / "step300" / "loop_state.pkl"))["videos"]
    assert a == b and a["last_step"] == 100 and a["num_videos"] == 5 and a["recorder"] == {"rounds": 10}

    created = []
    viewer_init = mujoco_rendering.OffScreenViewer.__init__
    monkeypatch.setattr(mujoco_rendering.OffScreenViewer, "__init__",
                        lambda self, *args, **kw: (created.append(1), viewer_init(self, *args, **kw))[1])
    RecordingFakeTrainer.rounds.clear()
    off = build_config({**BASE, **RECORD, "record_video": False, "save_path": str(tmp_path / "off")}, "jax")
    train(off, device_trainer(RecordingFakeTrainer, "jax"))
    assert created == [] and RecordingFakeTrainer.rounds == [] and not (tmp_path / "off" / "videos").exists()


def test_recording_needs_a_trainer_that_records(tmp_path, monkeypatch):
    from agent_common.keys import ConfigError

    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    cfg = build_config({**BASE, **RECORD, "save_path": str(tmp_path / "run")}, "jax")
    with pytest.raises(ConfigError, match="record_video=true: the jax trainer of env.env_type=mjx cannot record"):
        train(cfg, device_trainer(FakeTrainer, "jax"))
    assert FakeTrainer.instances[-1].closed == 1
    with pytest.raises(ConfigError, match="num_record_envs.*must be <= num_eval_envs=1 with env.env_type=mjx"):
        build_config({**BASE, **RECORD, "num_eval_envs": 1}, "jax")
