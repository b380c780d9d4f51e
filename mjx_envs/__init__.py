"""Batched MuJoCo-XLA (MJX) environments for massively parallel simulation: Brax's MuJoCo tasks on the MJX backend.

Modules
    env         ``make_mjx_env`` -> ``MjxVecEnv``: ``num_envs`` copies of one task, vmapped, with a pure-JAX API
                (``reset(key) -> MjxEnvState``; ``step(state, action) -> MjxStep``) that fits inside ``jax.jit`` and
                ``lax.scan``. Finished envs are reset inside ``step`` and their true final observation is returned
                (``final_obs``); the episode-length limit (``truncated``) is kept apart from a task's own end
                (``terminated``). ``cached_mjx_env``: one env per configuration in a process.
    playground  ``PlaygroundVecEnv``: a MuJoCo Playground task (``env.env_type=mujoco_playground``) with the same API
                (the ``playground`` extra; locomotion tasks need a MuJoCo Menagerie checkout);
                ``cached_vector_env``: the env of a config's ``env`` group (mjx or mujoco_playground).
    torch_view  ``step_to_torch`` / ``from_torch``: a step's arrays as torch tensors and torch actions as JAX arrays,
                through DLPack, without copies; ``TorchEnv``: an env stepped from torch (the torch agent's).
    recipe      ``mjx_xla_flags``; ``GPU_RECIPE`` (``agent_common.recipes``: the ``mjx`` recipe) as ``--overrides``.

The task names are ``agent_common.schema.MJX_TASKS``. Everything here needs the ``mjx`` extra
(``pip install -e ".[mjx]"``: brax and mujoco-mjx); ``recipe`` imports no JAX (only ``agent_common``), and
this package's ``__init__`` only the standard library: the other modules are imported on first use of their names.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["GPU_RECIPE", "MjxEnvState", "MjxStep", "MjxVecEnv", "TorchEnv", "TorchStep", "cached_mjx_env",
           "make_mjx_env", "step_to_torch"]

_WHERE = {
    "GPU_RECIPE": "mjx_envs.recipe",
    "MjxEnvState": "mjx_envs.env",
    "MjxStep": "mjx_envs.env",
    "MjxVecEnv": "mjx_envs.env",
    "make_mjx_env": "mjx_envs.env",
    "cached_mjx_env": "mjx_envs.env",
    "TorchEnv": "mjx_envs.torch_view",
    "TorchStep": "mjx_envs.torch_view",
    "step_to_torch": "mjx_envs.torch_view",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mjx_envs' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
