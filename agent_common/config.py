"""The command line on top of ``agent_common.schema``: upstream's ``--overrides key=value`` (values parsed as YAML by
omegaconf), "did you mean" for unknown keys, ``config.yaml`` files, and the run's own config on resume.

The schema names (``Config``, ``AgentConfig``, ``EnvConfig``, ``ConfigError``, ``target_entropy``, ...) live in
``agent_common.schema`` (standard library only) and are re-exported here for the callers of ``load_config``.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import Any, Literal

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from agent_common.checkpoint import (
    CONFIG_FILE,
    CheckpointError,
    candidate_checkpoints,
    checkpoint_framework,
    converter_command,
)
from agent_common.schema import (
    BACKENDS,
    DERIVED_FROM_BUDGET,
    KNOWN_KEYS,
    SUPPORTED_ENVS,
    AgentConfig,
    Config,
    ConfigError,
    EnvConfig,
    build_config,
    check_key,
    config_to_dict,
    field_type,
    flatten,
    resume_conflicts,
    run_dir_of_checkpoint,
    target_entropy,
)

__all__ = [
    "BACKENDS",
    "SUPPORTED_ENVS",
    "AgentConfig",
    "Config",
    "ConfigError",
    "EnvConfig",
    "config_to_dict",
    "config_to_yaml",
    "load_config",
    "parse_args",
    "parse_overrides",
    "read_config_file",
    "target_entropy",
]

# Upstream selects config groups with `env=mujoco` / `agent=flashSAC`; these are the only groups that exist here.
_GROUP_SELECTIONS = {"env": ("mujoco",), "agent": ("flashSAC",)}
# Per-invocation keys: a resume takes them from its own command line, never from the stored config.
_NOT_RESTORED = ("agent_load_path", "buffer_load_path", "save_path", "rederive_schedule_on_resume", "agent_init_path")


def _split_override(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    key = key.strip().lstrip("+")
    if not sep or not key:
        raise ConfigError(f"override {item!r} is not of the form key=value")
    return key, value


def _parse_value(key: str, value: str) -> Any:
    """A YAML scalar (``null``, ``true``, ``1_000_000``, ``3e-4``); string fields stay literal (YAML 1.1 would
    read ``compile_mode=off`` as the boolean False)."""
    stripped = value.strip()
    if field_type(key)[0] == "str" and stripped not in ("null", "~", "") and stripped[:1] not in ("'", '"'):
        return stripped
    try:
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist([f"v={value}"]))
    except OmegaConfBaseException as exc:
        message = str(getattr(exc, "msg", exc)).splitlines()[0]
        raise ConfigError(f"invalid value {value!r} for '{key}' (expected {field_type(key)[0]}): {message}") from None
    assert isinstance(parsed, dict)
    return parsed["v"]


def parse_overrides(overrides: list[str] | None) -> dict[str, Any]:
    """``["agent.gamma=0.9", ...]`` -> ``{"agent.gamma": 0.9, ...}`` (unknown keys -> ``ConfigError`` with "did you
    mean"); ``env=mujoco`` and ``agent=flashSAC`` (upstream group selections) are accepted and dropped."""
    values: dict[str, Any] = {}
    for item in overrides or []:
        key, value = _split_override(item)
        if key in _GROUP_SELECTIONS:
            if value.strip() not in _GROUP_SELECTIONS[key]:
                raise ConfigError(
                    f"invalid value {value!r} for config group '{key}'. Allowed values: "
                    + ", ".join(_GROUP_SELECTIONS[key])
                )
            continue
        check_key(key, difflib.get_close_matches(key, KNOWN_KEYS, n=3, cutoff=0.6))
        values[key] = _parse_value(key, value)
    return values


def read_config_file(path: str) -> dict[str, Any]:
    """A ``config.yaml`` as flat dotted keys -> values.

    Raises:
        CheckpointError: the file is missing or not a config written by these agents, naming it.
    """
    try:
        tree = OmegaConf.to_container(OmegaConf.load(path))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except Exception as exc:  # noqa: BLE001 - any parse failure means the file is damaged
        raise CheckpointError(f"cannot read {path} ({type(exc).__name__}): the file is damaged") from None
    if not isinstance(tree, dict):
        raise CheckpointError(f"{path} is not a config file (expected a mapping of keys)")
    return flatten(tree)  # type: ignore[arg-type]


def _stored_config(load_path: str, framework: str) -> tuple[str, dict[str, Any]]:
    """(checkpoint, its stored config) for a resume from ``load_path``, checked for the framework.

    Raises:
        ConfigError: no checkpoint there, a checkpoint of the other framework (with the converter command), or no
            readable stored config.
    """
    try:
        ckpt = candidate_checkpoints(load_path)[0]
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
    written_by = checkpoint_framework(ckpt)
    if written_by is not None and written_by != framework:
        raise ConfigError(
            f"agent_load_path={load_path}: {ckpt} was written by the {written_by} agent, this is the {framework} "
            f"agent; convert it first: {converter_command(ckpt, written_by, framework)}"
        )
    sources = [os.path.join(ckpt, CONFIG_FILE), os.path.join(run_dir_of_checkpoint(ckpt), CONFIG_FILE)]
    for path in sources:
        if os.path.exists(path):
            try:
                return ckpt, read_config_file(path)
            except CheckpointError as exc:
                raise ConfigError(f"agent_load_path={load_path}: {exc}") from None
    raise ConfigError(f"agent_load_path={load_path}: no {CONFIG_FILE} in {ckpt} or its run directory, so the run's "
                      "config cannot be restored")


def load_config(overrides: list[str] | None = None, framework: Literal["torch", "jax"] = "torch") -> Config:
    """Build the resolved, frozen config from ``key=value`` overrides.

    With ``agent_load_path`` (a resume), the base is the checkpoint's stored config, not the defaults: the
    overrides apply on top, and one that would change the checkpoint's task, architecture or update configuration
    (``schema.RESUME_LOCKED``) is refused. The keys derived from ``num_env_steps`` (LR schedule steps, intervals)
    keep their stored values when the budget changes, unless ``rederive_schedule_on_resume=true``.

    Args:
        overrides: dotted ``key=value`` strings, e.g. ``["agent.sample_batch_size=256", "seed=3"]``. Values are
            parsed as YAML (``null``, ``true``, ``1_000_000``, ``3e-4``). ``env=mujoco`` and ``agent=flashSAC``
            (upstream group selections) are accepted and ignored.
        framework: ``"torch"`` or ``"jax"``; selects the allowed ``agent.categorical_target_backend`` values.

    Returns:
        A frozen ``Config`` with every derived field filled (intervals, LR steps, critic support, mirrored keys).

    Raises:
        ConfigError: unknown key, wrong type, invalid value, or a resume that cannot be done; the message names the
            key (and, for a resume conflict, both values).
    """
    values = parse_overrides(overrides)
    base: dict[str, Any] | None = None
    load_path = values.get("agent_load_path")
    if load_path is not None and values.get("agent_init_path") is not None:
        raise ConfigError(f"agent_init_path={values['agent_init_path']} starts a new run from weights and "
                          f"agent_load_path={load_path} resumes a run: give one of them")
    if load_path is not None:
        if not isinstance(load_path, str):
            raise ConfigError(f"invalid value {load_path!r} for 'agent_load_path' (expected str)")
        ckpt, stored = _stored_config(load_path, framework)
        conflicts = resume_conflicts(stored, values)
        if conflicts:
            raise ConfigError(
                f"cannot resume {ckpt} with these overrides: " + "; ".join(conflicts)
                + ". A resume continues the same run; start a new run (without agent_load_path) to change these"
            )
        base = {k: v for k, v in stored.items() if k in KNOWN_KEYS and k not in _NOT_RESTORED}
        if base.get("agent.categorical_target_backend") not in BACKENDS[framework]:
            base.pop("agent.categorical_target_backend", None)  # a checkpoint converted from the other framework
        if values.get("rederive_schedule_on_resume", False):
            base.update({key: None for key in DERIVED_FROM_BUDGET})
    cfg = build_config(values, framework, base)
    check_init_path(cfg, framework)
    return cfg


def check_init_path(cfg: Config, framework: str) -> None:
    """``agent_init_path`` (a new run from a checkpoint's weights) resolves for this framework and is not combined
    with a resume.

    Raises:
        ConfigError: naming the key, what was found and the command to run.
    """
    if cfg.agent_init_path is None:
        return
    from agent_common.start_from import resolve_init_source

    try:
        resolve_init_source(cfg.agent_init_path, framework)
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None


def parse_args(
    argv: list[str] | None = None, framework: Literal["torch", "jax"] = "torch", prog: str | None = None
) -> Config:
    """Parse upstream's CLI (``--overrides key=value``, repeatable) and return the resolved config.

    On a config error this prints the message to stderr and exits with status 2, before any env or GPU work.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).
        framework: ``"torch"`` or ``"jax"``.
        prog: program name for ``--help``.

    Returns:
        The frozen resolved ``Config``.
    """
    parser = argparse.ArgumentParser(prog=prog, description="Train FlashSAC on gym-MuJoCo.")
    parser.add_argument(
        "--overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override, repeatable (e.g. --overrides env.env_name=Hopper-v4)",
    )
    args = parser.parse_args(argv)
    try:
        return load_config(args.overrides, framework)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def config_to_yaml(cfg: Config) -> str:
    """YAML text of the resolved config."""
    return OmegaConf.to_yaml(OmegaConf.create(config_to_dict(cfg)))
