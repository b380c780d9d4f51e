"""Brax's MuJoCo tasks on MJX (``env.env_type=mjx``): thousands of envs on the accelerator, stepped by the agents'
device steppers.

The envs themselves are ``simulators.mjx_env.MjxVecEnv`` (JAX, built by its ``make_env``); this module declares.
A process that steps MJX sets ``XLA_FLAGS`` first (``xla_flags``): XLA reads them when JAX starts its backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from simulators.base import DEVICE, Problem, missing_modules

__all__ = ["DETERMINISTIC_FLAG", "DEVICE_LOOPS_FLAG", "NAME", "TASKS", "check", "missing", "xla_flags"]

NAME = "mjx"
TASKS: tuple[str, ...] = ("halfcheetah", "hopper", "walker2d", "ant", "humanoid")
"""Brax's MuJoCo tasks on the MJX backend, in ``simulators.mujoco.TASKS``' order."""
SUMMARY = "Brax's halfcheetah ... humanoid on MJX, thousands of envs on the accelerator"
EXTRA = "mjx"
NEEDS = "the MJX environments need the mjx extra"
INSTALL = '-e ".[mjx]"'
MODULES: tuple[str, ...] = ("jax", "brax", "mujoco_mjx")
"""What the ``mjx`` extra installs; ``mujoco_mjx`` stands for the mujoco-mjx distribution."""
STEPPER = DEVICE
FRAMEWORKS: tuple[str, ...] = ("jax", "torch")
ONLY_FRAMEWORKS = None
RESCALE_ACTION = True
RECORDS_VIDEO = None
OWN_KEYS: dict[str, str] = {}
ARRAYS = "jax"
"""The framework of the envs' arrays: the torch agent steps them through ``simulators.torch_view.TorchEnv``."""
ENV_MODULE = "simulators.mjx_env"
"""The module whose ``make_env(cfg, num_envs, seed, device)`` builds the envs (``simulators.make_device_env``)."""

DEVICE_LOOPS_FLAG = "--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL"
"""XLA flag for processes that step MJX environments: XLA's command buffers (CUDA graphs) also take while loops and
conditionals, so the while loops of MJX's constraint solver iterate on the device instead of copying each
iteration's condition to the host. On the H200 the batched halfcheetah step ran 2.5x faster with it (70.7k against
27.9k env steps/s at 1024 envs) and, with deterministic ops, computed bitwise the same rollout
(bench/results/h200-2026-12-01-xla-flags)."""

DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"
"""XLA flag for deterministic GPU ops (``deterministic=true``): XLA's default ops make GPU results vary between runs."""


def missing() -> list[str]:
    """The modules of ``MODULES`` that are not installed."""
    return missing_modules(MODULES)


def check(cfg: Any, framework: str) -> Iterator[Problem]:
    """No checks of its own (the config checks its extra)."""
    return iter(())


def xla_flags(current: str, deterministic: bool = False) -> str:
    """``XLA_FLAGS`` for a process that steps MJX environments: ``current`` plus ``DEVICE_LOOPS_FLAG`` (unless
    ``current`` already chooses the command-buffer types with ``--xla_gpu_enable_command_buffer``), plus
    ``DETERMINISTIC_FLAG`` when ``deterministic`` (unless already there). XLA reads the variable when JAX first
    initialises its GPU backend, so set it before any JAX work."""
    flags = current.split()
    if not any(f.startswith("--xla_gpu_enable_command_buffer=") for f in flags):
        flags.append(DEVICE_LOOPS_FLAG)
    if deterministic and not any(f.startswith("--xla_gpu_deterministic_ops=") for f in flags):
        flags.append(DETERMINISTIC_FLAG)
    return " ".join(flags)
