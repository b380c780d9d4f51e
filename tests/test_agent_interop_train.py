"""``python -m agent_interop.train``: an agent trained from the other framework's initial state, through the agent's
own CLI (the conversion itself is tested in test_agent_parity.py)."""

from __future__ import annotations

import os

import torch

from tests.agent_test_utils import run_module
from tests.test_agent_torch_cli import TINY


def _final_actor(run_dir) -> dict:
    ckpts = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    state = torch.load(os.path.join(run_dir, "checkpoints", ckpts[-1], "agent", "actor.pt"), weights_only=False)
    return state["network_state_dict"]


def test_torch_agent_trains_from_the_jax_initial_state(tmp_path):
    settings = [*TINY, "num_env_steps=60", "seed=3"]
    swapped = run_module("agent_interop.train", "--agent", "torch", "--init-from", "jax",
                         overrides=[*settings, f"save_path={tmp_path / 'swapped'}"], cwd=str(tmp_path))
    assert swapped.returncode == 0, swapped.stderr[-2000:]
    own = run_module("agent_torch.train", overrides=[*settings, f"save_path={tmp_path / 'own'}"], cwd=str(tmp_path))
    assert own.returncode == 0, own.stderr[-2000:]
    assert os.path.isfile(tmp_path / "swapped" / "eval.csv")
    a, b = _final_actor(tmp_path / "swapped"), _final_actor(tmp_path / "own")
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)  # another start, another run


def test_bad_requests_exit_2_naming_the_argument(tmp_path):
    same = run_module("agent_interop.train", "--agent", "jax", "--init-from", "jax", overrides=TINY,
                      cwd=str(tmp_path))
    assert same.returncode == 2 and "--init-from: expected the other framework than --agent 'jax'" in same.stderr
    mjx = run_module("agent_interop.train", "--agent", "torch", "--init-from", "jax",
                     overrides=["env.env_type=mjx", "env.env_name=halfcheetah"], cwd=str(tmp_path))
    assert mjx.returncode == 2 and "expected env.env_type=mujoco" in mjx.stderr, mjx.stderr[-1000:]
    key = run_module("agent_interop.train", "--agent", "torch", "--init-from", "jax", overrides=["agent.nope=1"],
                     cwd=str(tmp_path))
    assert key.returncode == 2 and "agent.nope" in key.stderr
