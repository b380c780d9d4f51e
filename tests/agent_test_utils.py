"""Helpers shared by the agent tests: the CLI subprocess runners, bitwise nested equality, and the
random transitions of the replay-row tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping

import gymnasium as gym
import numpy as np

from agent_common.buffer import ReplayBuffer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def module_cmd(module: str, *args: str, overrides: Iterable[str] = ()) -> list[str]:
    """``python -m module *args --overrides o1 --overrides o2 ...``"""
    cmd = [sys.executable, "-m", module, *args]
    for item in overrides:
        cmd += ["--overrides", item]
    return cmd


def run_module(
    module: str,
    *args: str,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str = REPO,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Runs ``module_cmd(...)`` in a fresh process with PYTHONPATH=REPO (``env`` entries win), output captured."""
    full_env = dict(os.environ, PYTHONPATH=REPO)
    full_env.update(env or {})
    return subprocess.run(
        module_cmd(module, *args, overrides=overrides),
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_nested_equal(a, b, path: str = "") -> None:
    """Bitwise equality of nested dicts / lists / tuples of torch tensors, arrays and scalars."""
    torch = sys.modules.get("torch")  # a torch tensor can only be here if torch is imported
    if torch is not None and isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"keys differ at {path}: {sorted(a)} vs {sorted(b)}"
        for k in a:
            assert_nested_equal(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_nested_equal(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray | np.generic) or hasattr(a, "__array__"):
        np.testing.assert_array_equal(a, b, err_msg=path, strict=True)  # same shape, dtype and values (diff shown)
        assert np.array_equal(a, b), f"{path}: NaN"  # and no NaN (assert_array_equal alone takes NaN == NaN)
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


# ------------------------------------------------------------------------------------ device replay rows (both agents)
# a HalfCheetah-shaped task: the replay-row tests of both agents store the same random transitions
OBS_DIM, ACT_DIM, NUM_ENVS = 17, 6, 2
OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
ACT_SPACE = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)


def replay_buffer(capacity: int, storage=None) -> ReplayBuffer:
    """A 1-step replay buffer for the task above (host rows, or the rows in ``storage``)."""
    return ReplayBuffer(OBS_DIM, ACT_DIM, capacity, 1, 1, 0.99, seed=0, storage=storage)


def random_transition(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """(obs, action, reward, terminated, truncated, next_obs) for NUM_ENVS envs, about 20 % of them ending."""
    done = rng.random(NUM_ENVS) < 0.2
    return (rng.standard_normal((NUM_ENVS, OBS_DIM)).astype(np.float32),
            rng.uniform(-1, 1, (NUM_ENVS, ACT_DIM)).astype(np.float32),
            rng.standard_normal(NUM_ENVS).astype(np.float32),
            (done & (rng.random(NUM_ENVS) < 0.5)).astype(np.float32),
            (done & (rng.random(NUM_ENVS) >= 0.5)).astype(np.float32),
            rng.standard_normal((NUM_ENVS, OBS_DIM)).astype(np.float32))
