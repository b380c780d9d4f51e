"""The command line on top of ``agent_common.schema``: upstream's ``--overrides key=value`` (values parsed as YAML by
omegaconf), "did you mean" for unknown keys, ``config.yaml`` files, and the run's own config on resume.

The schema names (``Config``, ``AgentConfig``, ``EnvConfig``, ``ConfigError``, ``target_entropy``, ...) live in
``agent_common.schema`` (standard library only) and are re-exported here for the callers of ``load_config``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Literal

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from agent_common.checkpoint import (
    CONFIG_FILE,
    CheckpointError,
    DamagedCheckpointError,
    NoCheckpointError,
    checkpoint_framework,
    converter_command,
    no_checkpoint_message,
    select_checkpoint,
    set_train_program,
    train_command,
)
from agent_common.recipes import recipe_overrides, recipes_help
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
    config_help,
    config_to_dict,
    field_default,
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
_NOT_RESTORED = ("agent_load_path", "buffer_load_path", "save_path", "rederive_schedule_on_resume",
                 "overwrite_incomplete", "agent_init_path")
# Keys a resolved config fills from another key (upstream interpolations): never needed on a command line.
_MIRRORED = ("env.num_train_envs", "env.num_eval_envs", "agent.seed", "agent.gamma", "agent.n_step",
             "agent.critic_min_v", "agent.critic_max_v")


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
        check_key(key)
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
        raise DamagedCheckpointError(f"{path} is missing", path, "missing") from None
    except Exception as exc:  # noqa: BLE001 - any parse failure means the file is damaged
        raise DamagedCheckpointError(f"cannot read {path} ({type(exc).__name__}): the file is damaged", path,
                                     "unreadable") from None
    if not isinstance(tree, dict):
        raise DamagedCheckpointError(f"{path} is not a config file (expected a mapping of keys)", path, "unreadable")
    return flatten(tree)  # type: ignore[arg-type]


def _stored_config(load_path: str, framework: str) -> tuple[str, dict[str, Any]]:
    """(checkpoint, its stored config) for a resume from ``load_path``, checked for the framework: the newest
    checkpoint that verifies and whose config reads (``checkpoint.select_checkpoint``: a damaged one is moved aside
    with a warning and the next older one is used).

    Raises:
        ConfigError: no checkpoint there (with the next commands), a checkpoint of the other framework (with the
            converter command), another program's layout, or no readable stored config.
    """
    stored: dict[str, Any] = {}

    def read(ckpt: str) -> None:
        written_by = checkpoint_framework(ckpt)
        if written_by is not None and written_by != framework:
            raise ConfigError(
                f"agent_load_path={load_path}: {ckpt} was written by the {written_by} agent, this is the {framework} "
                f"agent; convert it first: {converter_command(ckpt, written_by, framework)}"
            )
        for path in (os.path.join(ckpt, CONFIG_FILE), os.path.join(run_dir_of_checkpoint(ckpt), CONFIG_FILE)):
            if os.path.exists(path):
                stored.clear()
                stored.update(read_config_file(path))
                return
        raise ConfigError(f"agent_load_path={load_path}: no {CONFIG_FILE} in {ckpt} or its run directory, so the "
                          "run's config cannot be restored")

    try:
        ckpt = select_checkpoint(load_path, read)
    except NoCheckpointError as exc:
        if os.path.exists(os.path.join(load_path, CONFIG_FILE)) and "nothing to resume" in str(exc):
            raise ConfigError(no_checkpoint_message(load_path, start_over_command(load_path, framework))) from None
        raise ConfigError(str(exc)) from None
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
    return ckpt, stored


def start_over_command(run_dir: str, framework: str) -> str | None:
    """The command that starts a run without a complete checkpoint over in place with its own config (read from
    ``<run>/config.yaml``: every key that differs from what the defaults give), or None if that file is unusable."""
    try:
        stored = read_config_file(os.path.join(run_dir, CONFIG_FILE))
        stored = {k: v for k, v in stored.items() if k in KNOWN_KEYS and k not in _NOT_RESTORED}
        values = {k: v for k, v in stored.items() if k not in DERIVED_FROM_BUDGET and k not in _MIRRORED
                  and v != field_default(k)}
        resolved = flatten(config_to_dict(build_config(values, framework)))
        values.update({k: stored[k] for k in (*DERIVED_FROM_BUDGET, *_MIRRORED)
                       if k in stored and resolved.get(k) != stored[k]})
    except (CheckpointError, ConfigError):
        return None
    backend = values.get("agent.categorical_target_backend")
    if backend is not None and backend not in BACKENDS[framework]:
        values.pop("agent.categorical_target_backend")

    def text(value: Any) -> str:
        return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)

    return train_command(f"save_path={run_dir}", "overwrite_incomplete=true",
                         *(f"{k}={text(v)}" for k, v in sorted(values.items()) if k != "save_path"))


def with_recipe(values: dict[str, Any], framework: str) -> dict[str, Any]:
    """``values`` on top of the overrides of the named recipe ``values["recipe"]`` (``agent_common.recipes``), or
    ``values`` unchanged without one.

    Raises:
        ConfigError: an unknown recipe, naming it and listing the known ones.
    """
    name = values.get("recipe")
    if name is None:
        return values
    try:
        recipe = parse_overrides(recipe_overrides(name, framework))
    except ValueError as exc:
        raise ConfigError(f"invalid value for 'recipe': {exc}") from None
    return {**recipe, **values}


def load_config(overrides: list[str] | None = None, framework: Literal["torch", "jax"] = "torch") -> Config:
    """Build the resolved, frozen config from ``key=value`` overrides.

    With ``agent_load_path`` (a resume), the base is the checkpoint's stored config, not the defaults: the
    overrides apply on top, and one that would change the checkpoint's task, architecture or update configuration
    (``schema.RESUME_LOCKED``) is refused. The keys derived from ``num_env_steps`` (LR schedule steps, intervals)
    keep their stored values when the budget changes, unless ``rederive_schedule_on_resume=true``.

    Args:
        overrides: dotted ``key=value`` strings, e.g. ``["agent.sample_batch_size=256", "seed=3"]``. Values are
            parsed as YAML (``null``, ``true``, ``1_000_000``, ``3e-4``). ``env=mujoco`` and ``agent=flashSAC``
            (upstream group selections) are accepted and ignored. ``recipe=NAME`` applies the named recipe's
            overrides (``agent_common.recipes``) beneath all of them.
        framework: ``"torch"`` or ``"jax"``; selects the allowed ``agent.categorical_target_backend`` values.

    Returns:
        A frozen ``Config`` with every derived field filled (intervals, LR steps, critic support, mirrored keys).

    Raises:
        ConfigError: unknown key, wrong type, invalid value, or a resume that cannot be done; the message names the
            key (and, for a resume conflict, both values).
    """
    values = with_recipe(parse_overrides(overrides), framework)
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
    from agent_common.start_from import check_converted_architecture, resolve_init_source

    try:
        check_converted_architecture(resolve_init_source(cfg.agent_init_path, framework), cfg)
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None


def parse_args(
    argv: list[str] | None = None, framework: Literal["torch", "jax"] = "torch", prog: str | None = None
) -> Config:
    """Parse upstream's CLI (``--overrides key=value``, repeatable; ``--recipe NAME`` beneath them) and return the
    resolved config.

    On a config error this prints the message to stderr and exits with status 2, before any env or GPU work.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).
        framework: ``"torch"`` or ``"jax"``.
        prog: program name for ``--help``.

    Returns:
        The frozen resolved ``Config``.
    """
    set_train_program(prog or f"python -m agent_{framework}.train")
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Train FlashSAC on gym-MuJoCo, DeepMind Control, MJX, MuJoCo Playground or mjlab (env.env_type). "
        "Every config key below is set with --overrides KEY=VALUE; null means derived or taken from the named key.",
        epilog=recipes_help() + "\n\n" + config_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--recipe",
        metavar="NAME",
        help="named recipe (listed below); --overrides apply on top; the run's config.yaml records it",
    )
    parser.add_argument(
        "--overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override, repeatable (e.g. --overrides env.env_name=Hopper-v4)",
    )
    args = parser.parse_args(argv)
    overrides = args.overrides if args.recipe is None else [f"recipe={args.recipe}", *args.overrides]
    try:
        return load_config(overrides, framework)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def config_to_yaml(cfg: Config) -> str:
    """YAML text of the resolved config."""
    return OmegaConf.to_yaml(OmegaConf.create(config_to_dict(cfg)))
