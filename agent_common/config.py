"""A config from values, ``--overrides`` strings or the command line: ``build_config`` (typed values -> the
validated, resolved, frozen ``Config``), ``load_config`` (upstream's ``key=value`` strings parsed as YAML by
omegaconf, a named recipe beneath them, a resume's stored config as their base), ``parse_args`` (the training
command's arguments, parsed once; ``--help`` from the declarations) and ``config_to_yaml``.

The keys are declared in ``agent_common.keys``, checked in ``agent_common.validation``; ``Config`` and
``ConfigError`` are re-exported here for the callers of ``load_config``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import Any, Literal

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from agent_common.help import training_help
from agent_common.keys import (
    BACKENDS,
    DERIVED_FROM_BUDGET,
    FRAMEWORKS,
    GROUPS,
    KNOWN_KEYS,
    AgentConfig,
    Config,
    ConfigError,
    EnvConfig,
    budget_defaults,
    check_key,
    config_to_dict,
    field_default,
    field_type,
    flatten,
    get,
    typed,
)
from agent_common.recipes import recipe_overrides
from agent_common.runs.checkpoints import no_checkpoint_message
from agent_common.runs.commands import set_train_program, train_command
from agent_common.runs.files import CONFIG_FILE, CheckpointError, read_config_file
from agent_common.runs.resume import NothingToResume, stored_config
from agent_common.runs.rundir import default_run_dir, run_dir_of_checkpoint
from agent_common.validation import resume_conflicts, validate
from simulators import simulator

__all__ = [
    "Config",
    "ConfigError",
    "build_config",
    "config_to_yaml",
    "load_config",
    "parse_args",
    "parse_overrides",
    "with_save_path",
]

# Upstream selects config groups with `env=mujoco` / `agent=flashSAC`; these are the only groups that exist here.
_GROUP_SELECTIONS = {"env": ("mujoco",), "agent": ("flashSAC",)}
# Per-invocation keys: a resume takes them from its own command line, never from the stored config.
_NOT_RESTORED = ("agent_load_path", "buffer_load_path", "save_path", "rederive_schedule_on_resume",
                 "overwrite_incomplete", "agent_init_path")
# Keys a resolved config fills from another key (upstream interpolations): never needed on a command line.
_MIRRORED = ("env.num_train_envs", "env.num_eval_envs", "agent.seed", "agent.gamma", "agent.n_step",
             "agent.critic_min_v", "agent.critic_max_v", "env.rescale_action")  # the last: the simulator's convention


def _resolve(cfg: Config) -> Config:
    """Fill derived fields in code (no eval resolvers), as upstream's interpolations would; ``env.rescale_action``
    from the simulator's convention when null."""
    derived = budget_defaults(cfg)

    def pick(key: str) -> Any:
        value = get(cfg, key)
        return derived[key] if value is None else value

    a = cfg.agent
    agent = dataclasses.replace(
        a,
        seed=cfg.seed,
        gamma=cfg.gamma,
        n_step=cfg.n_step,
        critic_min_v=-a.normalized_G_max if a.critic_min_v is None else a.critic_min_v,
        critic_max_v=a.normalized_G_max if a.critic_max_v is None else a.critic_max_v,
        learning_rate_warmup_step=pick("agent.learning_rate_warmup_step"),
        learning_rate_decay_step=pick("agent.learning_rate_decay_step"),
    )
    rescale = simulator(cfg.env.env_type).RESCALE_ACTION if cfg.env.rescale_action is None else cfg.env.rescale_action
    env = dataclasses.replace(cfg.env, num_train_envs=cfg.num_train_envs, num_eval_envs=cfg.num_eval_envs,
                              rescale_action=rescale)
    save_path = cfg.save_path
    if save_path is None and cfg.agent_load_path is not None:
        save_path = run_dir_of_checkpoint(cfg.agent_load_path)
    if save_path is None:
        save_path = default_run_dir(cfg)
    intervals = {key: pick(key) for key in DERIVED_FROM_BUDGET if "." not in key}
    return dataclasses.replace(cfg, env=env, agent=agent, save_path=save_path, **intervals)


def build_config(
    values: Mapping[str, Any] | None = None,
    framework: str = "torch",
    base: Mapping[str, Any] | None = None,
) -> Config:
    """The resolved, frozen config from typed values.

    Args:
        values: dotted keys -> Python values, e.g. ``{"agent.sample_batch_size": 256, "seed": 3}``; applied last.
        framework: ``"torch"`` or ``"jax"``; selects the allowed ``agent.categorical_target_backend`` values.
        base: dotted keys -> values applied before ``values`` (a stored run config on resume); defaults otherwise.

    Returns:
        A frozen ``Config`` with every derived field filled (intervals, LR steps, critic support, mirrored keys).

    Raises:
        ConfigError: unknown key, wrong type or invalid value; the message names the key.
    """
    if framework not in FRAMEWORKS:
        raise ConfigError(f"unknown framework {framework!r}; allowed: {', '.join(FRAMEWORKS)}")
    merged = dict(base or {})
    merged.update(values or {})
    flat: dict[str, Any] = {}
    for key, value in merged.items():
        check_key(key)
        flat[key] = typed(key, value)
    groups: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
    top: dict[str, Any] = {}
    for key, value in flat.items():
        group, _, name = key.partition(".")
        if name:
            groups[group][name] = value
        else:
            top[key] = value
    cfg = Config(**top, env=EnvConfig(**groups["env"]), agent=AgentConfig(**groups["agent"]))
    validate(cfg, framework)
    resolved = _resolve(cfg)
    resolved._freeze()
    return resolved


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
        try:
            ckpt, stored = stored_config(load_path, framework)
        except NothingToResume:
            raise ConfigError(no_checkpoint_message(load_path, start_over_command(load_path, framework))) from None
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
    from agent_common.runs.start_from import check_converted_architecture, resolve_init_source

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
        description="Train FlashSAC on one of the simulators below (env.env_type). "
        "Every config key below is set with --overrides KEY=VALUE; null means derived or taken from the named key.",
        epilog=training_help(),
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


def with_save_path(cfg: Config, save_path: str) -> Config:
    """``cfg`` with another run directory (resolved and frozen like it): a torchrun launch shares replica 0's."""
    changed = dataclasses.replace(cfg, save_path=save_path)
    changed._freeze()
    return changed


def config_to_yaml(cfg: Config) -> str:
    """YAML text of the resolved config."""
    return OmegaConf.to_yaml(OmegaConf.create(config_to_dict(cfg)))
