"""MuJoCo Playground's G1 / T1 joystick tasks end to end: a tiny training run of each agent through its CLI, the robot
loaded from the MuJoCo Menagerie checkout that ``$MUJOCO_MENAGERIE_PATH`` names, with ``git`` and network connections
refused in the run's process (nothing may be cloned or downloaded).

Runs only where ``MUJOCO_MENAGERIE_PATH`` is set (and the playground extra is installed). Each case compiles the
robot's MJX step on the CPU: several minutes a case on a 2-core machine (marked ``slow``)::

    MUJOCO_MENAGERIE_PATH=/data/mujoco_menagerie python -m pytest -q tests/test_playground_locomotion.py
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from simulators.playground import LOCOMOTION_TASKS as PLAYGROUND_LOCOMOTION_TASKS
from simulators.playground import MENAGERIE_ENV
from tests.agent_test_utils import REPO

MENAGERIE = os.environ.get(MENAGERIE_ENV) or None
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("mujoco_playground") is None,
                       reason="the playground extra is not installed (pip install -e \".[mjx,playground]\")"),
    pytest.mark.skipif(MENAGERIE is None, reason=f"{MENAGERIE_ENV} is not set (a MuJoCo Menagerie checkout with "
                       "unitree_g1 and booster_t1; docs/simulators.md)"),
]

CLI = ["env.env_type=mujoco_playground", "env.rescale_action=false", "env.max_episode_steps=10",
       "num_train_envs=2", "num_eval_envs=2", "num_eval_episodes=2", "num_env_steps=20",
       "agent.buffer_min_length=8", "agent.sample_batch_size=8", "agent.buffer_max_length=32",
       "agent.critic_hidden_dim=8", "agent.actor_hidden_dim=8", "agent.critic_num_blocks=1",
       "agent.actor_num_blocks=1", "agent.critic_num_bins=11", "evaluation_per_interaction_step=5",
       "save_checkpoint_per_interaction_step=10", "progress_bar=false", "agent.device_type=cpu", "num_threads=1"]

# Runs the CLI with subprocess.Popen refusing any git command and sockets refusing to connect.
RUNNER = textwrap.dedent("""
    import socket, subprocess, sys
    _Popen = subprocess.Popen
    class _NoGit(_Popen):
        def __init__(self, args, *a, **k):
            program = args[0] if isinstance(args, (list, tuple)) else str(args).split()[0]
            if str(program).rsplit("/", 1)[-1] == "git":
                raise RuntimeError(f"git was run: {args}")
            super().__init__(args, *a, **k)
    def _no_connect(self, *a, **k):
        raise RuntimeError(f"network connection attempted: {a}")
    subprocess.Popen = _NoGit
    socket.socket.connect = _no_connect
    framework = sys.argv[1]
    if framework == "jax":
        from agent_jax.train import main
    else:
        from agent_torch.train import main
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.parametrize("framework", ["jax", "torch"])
@pytest.mark.parametrize("task", ["G1JoystickFlatTerrain", "T1JoystickFlatTerrain"])
def test_tiny_cli_run_on_a_locomotion_task(task, framework, tmp_path):
    from agent_common.logger import read_eval_csv

    assert os.path.isdir(os.path.join(MENAGERIE, PLAYGROUND_LOCOMOTION_TASKS[task]))
    run = tmp_path / "run"
    overrides = [*CLI, f"env.env_name={task}", f"agent.categorical_target_backend={framework}", f"save_path={run}"]
    argv = [a for o in overrides for a in ("--overrides", o)]
    env = {**os.environ, "PYTHONPATH": REPO, "FLASHSAC_MJX_FAST_COMPILE": "1"}
    out = subprocess.run([sys.executable, "-c", RUNNER, framework, *argv], capture_output=True, text=True,
                         cwd=REPO, env=env, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    returns = [v for _, v in read_eval_csv(str(run / "eval.csv"))]
    assert len(returns) >= 2 and all(np.isfinite(returns))
    assert (run / "checkpoints" / "step20").is_dir()
