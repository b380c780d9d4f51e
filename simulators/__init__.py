"""The simulators the agents train on: one module per ``env.env_type``, each declaring its tasks, extra, checks and
defaults and building its envs (``simulators.base.Simulator``: what a module declares).

Modules
    mujoco      gymnasium's MuJoCo tasks (the default)                      host: one env per process / worker
    dmc         DeepMind Control through shimmy                             host
    myosuite    MyoSuite's hand tasks                                       host
    mjx         Brax's MuJoCo tasks on MJX (JAX)                            device
    playground  MuJoCo Playground on MJX (JAX)                              device
    mjlab       mjlab on MuJoCo Warp (torch; the torch agent only)          device
    base        ``Simulator``, ``HOST`` / ``DEVICE``, the extras' check
    wrappers    gymnasium wrappers the host simulators share
    mjx_env, playground_env, mjlab_env
                the device simulators' envs (JAX; JAX; torch), imported only by their ``make_env``
    torch_view  JAX envs stepped from torch through DLPack (the torch agent on MJX / Playground)

A host simulator's ``make(env_name, seed, render_size)`` builds one gymnasium env (``agent_common.envs`` wraps and
vectorises it; its snapshot hooks ``model_data``, ``task_state``, ``set_task_state`` make resumes exact); a device
simulator's envs (their arrays in ``ARRAYS``: JAX or torch) come from ``make_device_env``, which imports the module
its ``ENV_MODULE`` names. Adding a simulator is one module here, its line in ``SIMULATORS``, its
recipe (``agent_common.recipes``) and its tests. The declarations import nothing heavy: the config reads them
before any framework is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

from simulators import dmc, mjlab, mjx, mujoco, myosuite, playground
from simulators.base import DEVICE, HOST

__all__ = ["DEVICE", "HOST", "SIMULATORS", "device_env_types", "make_device_env", "simulator"]

SIMULATORS: dict[str, Any] = {sim.NAME: sim for sim in (mujoco, mjx, dmc, playground, mjlab, myosuite)}
"""``env.env_type`` -> its simulator module, in the order ``--help`` and the docs list them."""


def simulator(env_type: str) -> Any:
    """The simulator module of ``env_type``.

    Raises:
        KeyError: an unknown env type (the config refuses one before this is asked).
    """
    return SIMULATORS[env_type]


def device_env_types() -> tuple[str, ...]:
    """The env types stepped on the device (``STEPPER == DEVICE``)."""
    return tuple(name for name, sim in SIMULATORS.items() if sim.STEPPER == DEVICE)


def make_device_env(cfg: Any, num_envs: int, seed: int, device: Any = None) -> Any:
    """The batched envs of a device simulator's config: ``make_env(cfg, num_envs, seed, device)`` of the module its
    ``ENV_MODULE`` names (JAX envs for ``ARRAYS == "jax"``, torch envs on ``device`` for ``"torch"``), imported here,
    on use: a declaration imports nothing heavy.

    Raises:
        ValueError: a config value the simulator cannot use on this machine (its message names the key).
    """
    module = importlib.import_module(simulator(cfg.env.env_type).ENV_MODULE)
    return module.make_env(cfg, num_envs, seed, device)
