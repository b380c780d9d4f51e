"""What a simulator module declares (``Simulator``), and the helpers the declarations share (standard library only).

A simulator is a module of this package, named in ``simulators.SIMULATORS`` under its ``env.env_type``. Its
declarations are read before any framework is imported (config validation, ``--help``); its constructors import
the simulator itself, and a device simulator's framework code lives in a module of its own (``mjx_env``,
``playground_env``, ``mjlab_env``) that only the constructor imports.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["HOST", "DEVICE", "Problem", "Simulator", "extra_problem", "missing_modules"]

HOST = "host"
"""``Simulator.STEPPER`` of a simulator whose envs step on the host, one gymnasium env per process or worker
(``agent_common.host``: the agent's host stepper)."""

DEVICE = "device"
"""``Simulator.STEPPER`` of a simulator whose envs step on the agent's device in batches (the framework's device
stepper: ``agent_torch.vector``, ``agent_jax.vector``)."""

Problem = tuple[str, Any, str]
"""``(key, value, what)``: one invalid config value a simulator's ``check`` found; the config raises it as
``invalid value <value> for '<key>': <what>``."""


class Simulator(Protocol):
    """The declarations of a simulator module (module attributes; ``simulators.mujoco`` is the smallest example).

    Attributes:
        NAME: its ``env.env_type`` value.
        TASKS: the ``env.env_name`` values it accepts.
        SUMMARY: one line for ``--help`` and the docs' table: what it is.
        EXTRA: the pip extra that installs it (None: always installed).
        NEEDS: what the extra error says is needed (``"the MJX environments need the mjx extra"``).
        INSTALL: the pip command's arguments that install the extra.
        MODULES: the modules the extra installs, checked without importing them (``missing``).
        STEPPER: ``HOST`` or ``DEVICE``.
        FRAMEWORKS: the agents that train on it.
        ONLY_FRAMEWORKS: why only those (the config error's reason), or None where both agents do.
        RESCALE_ACTION: ``env.rescale_action`` when it is null: whether actions in [-1, 1] are rescaled to the
            task's range (False: the task takes [-1, 1] itself).
        RECORDS_VIDEO: None where ``record_video`` works, else why it does not (the config error's reason).
        OWN_KEYS: config keys only this simulator reads, each with what it is (other simulators refuse a value).

    A host simulator also declares ``EPISODE_STEPS`` (its episode limit when ``env.max_episode_steps`` is null, or
    None: the registered one), ``RENDERS_ITSELF`` (gymnasium's ``render_mode``; else ``agent_common.video`` films its
    physics), ``SNAPSHOT_KEYS`` and the functions ``make(env_name, seed, render_size)``, ``model_data(base)``,
    ``control_timestep(base)``, ``task_state(base)`` and ``set_task_state(base, snapshot, restore_physics)``. A
    device simulator declares ``ARRAYS`` (``"jax"`` or ``"torch"``) and ``ENV_MODULE``, the module whose
    ``make_env(cfg, num_envs, seed, device)`` builds its envs (``simulators.make_device_env``).
    """

    NAME: str
    TASKS: tuple[str, ...]
    SUMMARY: str
    EXTRA: str | None
    NEEDS: str
    INSTALL: str
    MODULES: tuple[str, ...]
    STEPPER: str
    FRAMEWORKS: tuple[str, ...]
    ONLY_FRAMEWORKS: str | None
    RESCALE_ACTION: bool
    RECORDS_VIDEO: str | None
    OWN_KEYS: dict[str, str]

    def missing(self) -> list[str]:
        """The modules of ``MODULES`` that are not installed (found without importing them)."""
        ...

    def check(self, cfg: Any, framework: str) -> Iterator[Problem]:
        """The simulator's own checks of a config (``agent_common.keys.Config``, before its derived values are
        filled) for the ``framework`` agent, in order, after the agent (``FRAMEWORKS``) and the extra
        (``missing``); the first one found is the config error."""
        ...


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """The distributions of ``modules`` that are not installed, found without importing any of them
    (``importlib.util.find_spec``; mujoco-mjx by its distribution record, since its module lives inside mujoco)."""
    missing = []
    for name in modules:
        if name == "mujoco_mjx":
            try:
                importlib.metadata.version("mujoco-mjx")
            except importlib.metadata.PackageNotFoundError:
                missing.append("mujoco-mjx")
        elif importlib.util.find_spec(name) is None:
            missing.append("playground" if name == "mujoco_playground" else name)
    return missing


def extra_problem(name: str, needs: str, install: str, missing: list[str]) -> Problem | None:
    """The config error for simulator ``name`` when modules of its extra are ``missing``: what ``needs`` them and
    the pip arguments that ``install`` them; None when nothing is missing."""
    if not missing:
        return None
    return ("env.env_type", name, f"{needs} (pip install {install}); not installed: {', '.join(missing)}")
