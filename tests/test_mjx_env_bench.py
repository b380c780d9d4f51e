"""bench.mjx_env_speed: the timing and the report on a tiny pure-JAX stand-in env (the MJX env itself is tested in
test_mjx_envs.py; compiling it again here would cost a minute of CI), and bad arguments."""

from __future__ import annotations

import json
from typing import NamedTuple

import pytest

from bench import mjx_env_speed


class _Out(NamedTuple):
    state: object
    reward: object
    truncated: object


class _CountingEnv:
    """E scalar states that add the mean of each action row; the reward is the new state."""

    action_size = 2

    def __init__(self, task: str, num_envs: int) -> None:
        self.task, self.num_envs = task, num_envs

    def reset(self, key):
        import jax.numpy as jnp

        return jnp.zeros(self.num_envs)

    def step(self, state, action):
        import jax.numpy as jnp

        assert action.shape == (self.num_envs, self.action_size)
        nxt = state + action.mean(axis=1)
        return _Out(nxt, nxt, jnp.zeros(self.num_envs))


def test_bad_arguments_exit_2(tmp_path):
    with pytest.raises(SystemExit) as exc:
        mjx_env_speed.main(["--out", str(tmp_path), "--steps", "0"])
    assert exc.value.code == 2


def test_measure_and_report(tmp_path):
    pytest.importorskip("jax")
    row = mjx_env_speed.measure("stand-in", 8, steps=5, repeats=3, make_env=_CountingEnv)
    assert (row["task"], row["num_envs"], row["steps_per_call"], len(row["seconds_per_call"])) == ("stand-in", 8, 5, 3)
    assert row["compilations"] == 1
    assert row["min_env_steps_per_s"] <= row["median_env_steps_per_s"] <= row["max_env_steps_per_s"]
    assert row["median_env_steps_per_s"] == pytest.approx(8 * 5 / sorted(row["seconds_per_call"])[1])
    res = {"environment": {"gpu": None}, "args": {"envs": [8, 16]}, "envs_8": row, "envs_16": "FAILED: boom"}
    text = mjx_env_speed.markdown(res, [8, 16])
    assert "| 8 | 5 |" in text and "| 16 | failed: see results.json |" in text
    assert row["first_call_sum"] == mjx_env_speed.measure("stand-in", 8, steps=5, repeats=1, make_env=_CountingEnv)[
        "first_call_sum"]  # deterministic: the check that an XLA_FLAGS variant computes the same
    json.dumps(res)  # what write_results stores
