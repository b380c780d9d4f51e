"""``agent_common.vector_loop`` with a framework-free fake trainer: the chunks it asks for, when it evaluates, logs and
checkpoints, how it counts updates, resume (also without the replay rows) and closing. No JAX, no MJX: the JAX
trainer itself is tested end to end in tests/test_agent_jax_mjx.py."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from agent_common import schema
from agent_common.checkpoint import atomic_pickle, load_pickle
from agent_common.logger import read_eval_csv
from agent_common.schema import build_config
from agent_common.vector_loop import interaction_steps_per_call, train_vector


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
    monkeypatch.setattr(schema, "mjx_missing", lambda: [])
    FakeTrainer.instances.clear()


def _train(tmp_path, **values: Any) -> Any:
    cfg = build_config({**BASE, "save_path": str(tmp_path / "run"), **values}, "jax")
    return train_vector(cfg, FakeTrainer, "jax")


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


def test_several_processes_are_refused(tmp_path):
    from agent_common.replicas import Replicas
    from agent_common.schema import ConfigError

    cfg = build_config({**BASE, "save_path": str(tmp_path / "run")}, "jax")
    with pytest.raises(ConfigError, match="env.env_type=mjx runs in one process"):
        train_vector(cfg, FakeTrainer, "jax", Replicas(rank=0, world_size=2))
    assert not FakeTrainer.instances
