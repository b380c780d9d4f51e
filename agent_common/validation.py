"""The checks of a config: every value on its own and against the others, the simulator's (``simulators``:
``check``), the device steppers' (``_validate_device_run``), what only a training run needs
(``check_training_run``) and what a resume may not change (``resume_conflicts``). Standard library only: each check
names the key, the value and what it must be, before any file, env or framework work."""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping
from typing import Any

from agent_common.keys import (
    BACKENDS,
    CHOICES,
    KNOWN_KEYS,
    LOGGER_TYPES,
    RESUME_LOCKED,
    SCOPE_UPDATE_MODES,
    Config,
    ConfigError,
    budget_defaults,
    get,
    loggers,
    typed,
)
from agent_common.recipes import RECIPES, unknown_recipe
from simulators import DEVICE, SIMULATORS, simulator
from simulators.base import extra_problem

__all__ = ["check_training_run", "resume_conflicts", "validate"]

SEED_MAX = 2**31 - 1  # the largest seed every RNG of both agents accepts (numpy, torch, the JAX PRNG key)
INT64_MAX = 2**63 - 1  # step counters, schedules and buffer indices are int64 in both agents
FLOAT32_MAX = 3.4028234663852886e38  # the agents compute in float32: a larger value becomes inf
LEARNING_RATE_MAX = 1.0  # Adam moves every weight by about the learning rate per step; above 1 the weights diverge
FASTEST_ENV_STEPS_PER_SECOND = 10**8  # far above any simulator these agents step (MJX on one GPU included)
LONGEST_WAIT_SECONDS = 30 * 86400  # an evaluation or checkpoint further away than this at that rate never comes
SMALLEST_ROW_BYTES = 4 * (2 * 11 + 3 + 3)  # one replay row of the smallest task (Hopper: O=11, A=3), float32


def _require(cond: bool, name: str, value: Any, what: str) -> None:
    if not cond:
        raise ConfigError(f"invalid value {value!r} for '{name}': {what}")


def validate(cfg: Config, framework: str) -> None:
    """Every check that needs no file, env or framework (types are already checked by ``build_config``), the
    simulator's own checks (``check``) included.

    Raises:
        ConfigError: the first invalid value, naming the key, the value and what it must be.
    """
    sim = SIMULATORS.get(cfg.env.env_type)
    choices = dict(CHOICES, **{"agent.categorical_target_backend": BACKENDS[framework]})
    for name, allowed in choices.items():
        if name == "env.env_name":
            allowed = sim.TASKS  # env.env_type was checked just before
        value = get(cfg, name)
        if value not in allowed:
            raise ConfigError(
                f"invalid value {value!r} for '{name}'. Allowed values: {', '.join(map(str, allowed))}"
                + (f" (framework {framework})" if name == "agent.categorical_target_backend" else "")
                + (f" (env.env_type {cfg.env.env_type})" if name == "env.env_name" else "")
            )
    _require(cfg.agent.compile_scope != "update" or cfg.agent.compile_mode in SCOPE_UPDATE_MODES,
             "agent.compile_mode", cfg.agent.compile_mode,
             f"agent.compile_scope=update replays the compiled update in the agent's own CUDA graphs, so the mode "
             f"must bring none: one of {', '.join(SCOPE_UPDATE_MODES)} (or agent.compile_scope=networks)")
    if cfg.recipe is not None and cfg.recipe not in RECIPES:
        raise ConfigError(f"invalid value for 'recipe': {unknown_recipe(cfg.recipe)}")
    for key in KNOWN_KEYS:  # no inf or nan anywhere: each would fail (or silently misbehave) after setup
        value = get(cfg, key)
        if isinstance(value, float):
            _require(math.isfinite(value), key, value, "must be a finite number")
    _validate_loggers(cfg.logger_type)
    positive_int = [
        "record_size",
        "num_env_steps",
        "num_train_envs",
        "num_eval_envs",
        "n_step",
        "keep_checkpoints",
        "agent.actor_num_blocks",
        "agent.actor_hidden_dim",
        "agent.critic_num_blocks",
        "agent.critic_hidden_dim",
        "agent.actor_update_period",
        "agent.actor_noise_zeta_max",
        "agent.sample_batch_size",
        "agent.buffer_max_length",
    ]
    for key in positive_int:
        value = get(cfg, key)
        _require(value is not None and value >= 1, key, value, "must be an integer >= 1")
    _require(cfg.record_size % 2 == 0, "record_size", cfg.record_size, "must be even (H.264 video frames)")
    for key in ("num_record_envs", "num_record_episodes"):
        _require(get(cfg, key) >= 0, key, get(cfg, key), "must be an integer >= 0")
    for key in [k for k in KNOWN_KEYS if k.endswith("_per_interaction_step")] + ["num_threads",
                                                                                   "interaction_steps_per_call"]:
        value = get(cfg, key)
        _require(value is None or value >= 1, key, value, "must be null or an integer >= 1")
    _require(0 <= cfg.seed <= SEED_MAX, "seed", cfg.seed, f"must be an integer in [0, {SEED_MAX}]")
    _require(cfg.num_devices >= 1, "num_devices", cfg.num_devices, "must be an integer >= 1")
    _require(
        framework == "jax" or cfg.num_devices == 1,
        "num_devices",
        cfg.num_devices,
        "the torch agent runs one device per process: keep num_devices=1 and start one process per GPU with "
        "torchrun --nproc_per_node=N -m agent_torch.train",
    )
    _require(
        cfg.distributed_timeout_seconds > 0,
        "distributed_timeout_seconds",
        cfg.distributed_timeout_seconds,
        "must be > 0",
    )
    _require(cfg.num_eval_episodes >= 0, "num_eval_episodes", cfg.num_eval_episodes, "must be >= 0")
    _require(
        cfg.num_eval_episodes % cfg.num_eval_envs == 0 or cfg.num_eval_episodes == 0,
        "num_eval_episodes",
        cfg.num_eval_episodes,
        f"must be a multiple of num_eval_envs={cfg.num_eval_envs}",
    )
    _require(0.0 < cfg.gamma <= 1.0, "gamma", cfg.gamma, "must be in (0, 1]")
    _require(
        cfg.updates_per_interaction_step > 0,
        "updates_per_interaction_step",
        cfg.updates_per_interaction_step,
        "must be > 0",
    )
    _require(
        cfg.max_wall_seconds is None or cfg.max_wall_seconds > 0,
        "max_wall_seconds",
        cfg.max_wall_seconds,
        "must be null or > 0",
    )
    a = cfg.agent
    _require(a.critic_num_bins >= 2, "agent.critic_num_bins", a.critic_num_bins, "must be an integer >= 2")
    _require(a.compilation_cache_max_mb >= 1, "agent.compilation_cache_max_mb", a.compilation_cache_max_mb,
             "must be >= 1 (MiB)")
    _require(a.compilation_cache_dir != "", "agent.compilation_cache_dir", a.compilation_cache_dir,
             "must be auto, off or a directory")
    _require(a.buffer_min_length >= 1, "agent.buffer_min_length", a.buffer_min_length, "must be >= 1")
    _require(
        a.buffer_min_length <= a.buffer_max_length,
        "agent.buffer_min_length",
        a.buffer_min_length,
        f"must be <= agent.buffer_max_length={a.buffer_max_length}",
    )
    _require(
        a.sample_batch_size <= a.buffer_max_length,
        "agent.sample_batch_size",
        a.sample_batch_size,
        f"must be <= agent.buffer_max_length={a.buffer_max_length} (every batch would repeat rows)",
    )
    _require(
        0.0 < a.critic_target_update_tau <= 1.0,
        "agent.critic_target_update_tau",
        a.critic_target_update_tau,
        "must be in (0, 1]",
    )
    _require(a.normalized_G_max > 0, "agent.normalized_G_max", a.normalized_G_max, "must be > 0")
    _require(a.actor_noise_zeta_mu > 0, "agent.actor_noise_zeta_mu", a.actor_noise_zeta_mu, "must be > 0")
    _require(a.temp_initial_value > 0, "agent.temp_initial_value", a.temp_initial_value, "must be > 0")
    _require(a.temp_target_sigma > 0, "agent.temp_target_sigma", a.temp_target_sigma, "must be > 0")
    _require(a.actor_bc_alpha >= 0, "agent.actor_bc_alpha", a.actor_bc_alpha, "must be >= 0")
    for key in (
        "learning_rate_init",
        "learning_rate_peak",
        "learning_rate_end",
        "learning_rate_warmup_rate",
        "learning_rate_decay_rate",
    ):
        value = getattr(a, key)
        _require(value >= 0, f"agent.{key}", value, "must be >= 0")
    _require(
        a.learning_rate_warmup_step is None or a.learning_rate_warmup_step >= 0,
        "agent.learning_rate_warmup_step",
        a.learning_rate_warmup_step,
        "must be null or >= 0",
    )
    _require(
        a.learning_rate_decay_step is None or a.learning_rate_decay_step >= 1,
        "agent.learning_rate_decay_step",
        a.learning_rate_decay_step,
        "must be null or >= 1",
    )
    # the support as it will be resolved (a null bound is -/+ normalized_G_max)
    min_v = -a.normalized_G_max if a.critic_min_v is None else a.critic_min_v
    max_v = a.normalized_G_max if a.critic_max_v is None else a.critic_max_v
    if min_v >= max_v:
        key = "agent.critic_min_v" if a.critic_min_v is not None else "agent.critic_max_v"
        raise ConfigError(
            f"invalid value {get(cfg, key)!r} for '{key}': the support [critic_min_v, critic_max_v] = "
            f"[{min_v}, {max_v}] is empty (a null bound is -/+ agent.normalized_G_max={a.normalized_G_max})"
        )
    # mirrored keys (upstream interpolations) may be set in both places only if they agree
    for top, sub in (
        ("num_train_envs", "env.num_train_envs"),
        ("num_eval_envs", "env.num_eval_envs"),
        ("seed", "agent.seed"),
        ("gamma", "agent.gamma"),
        ("n_step", "agent.n_step"),
    ):
        sub_value = get(cfg, sub)
        _require(
            sub_value is None or sub_value == get(cfg, top),
            sub,
            sub_value,
            f"mirrors '{top}' (= {get(cfg, top)!r}); set '{top}' instead or make them equal",
        )
    _require(
        not (cfg.overwrite_incomplete and cfg.agent_load_path is not None),
        "overwrite_incomplete",
        cfg.overwrite_incomplete,
        "starts a run over in save_path; it cannot be combined with agent_load_path (a resume)",
    )
    _validate_derived(cfg)
    _require(not (cfg.record_video and sim.STEPPER == DEVICE and cfg.num_record_envs > cfg.num_eval_envs),
             "num_record_envs", cfg.num_record_envs,
             f"must be <= num_eval_envs={cfg.num_eval_envs} with env.env_type={cfg.env.env_type}: the filmed envs are "
             "copies of the first evaluation envs")
    _require(not (cfg.record_video and sim.RECORDS_VIDEO), "record_video", cfg.record_video,
             f"must be false with env.env_type={cfg.env.env_type}: {sim.RECORDS_VIDEO}")
    _require(framework in sim.FRAMEWORKS, "env.env_type", sim.NAME,
             f"{sim.ONLY_FRAMEWORKS} and is wired into the {' and '.join(sim.FRAMEWORKS)} agent only (got the "
             f"{framework} agent); train it with python -m agent_{sim.FRAMEWORKS[0]}.train")
    extra = extra_problem(sim.NAME, sim.NEEDS, sim.INSTALL, sim.missing())
    for problem in ([extra] if extra else []) + list(sim.check(cfg, framework)):
        _require(False, *problem)
    if sim.STEPPER == DEVICE:
        _validate_device_run(cfg)
    for other in SIMULATORS.values():
        for name, what in other.OWN_KEYS.items():
            _require(other is sim or get(cfg, name) is None, name, get(cfg, name),
                     f"{what}; leave it null with env.env_type={cfg.env.env_type}")


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _validate_derived(cfg: Config) -> None:
    """Values that pass the checks of each key but would misbehave once the run starts: counts beyond int64,
    floats beyond float32, learning rates that make the weights diverge, intervals (given or derived from
    ``num_env_steps``) so long that no evaluation or checkpoint would ever come, and a replay buffer or networks
    larger than this machine's memory."""
    for key in KNOWN_KEYS:
        value = get(cfg, key)
        if isinstance(value, int) and not isinstance(value, bool):
            _require(value <= INT64_MAX, key, value, f"must fit in int64 (<= {INT64_MAX}): the agents count in int64")
        elif isinstance(value, float):
            _require(abs(value) <= FLOAT32_MAX, key, value,
                     f"must be within float32 (|value| <= {FLOAT32_MAX:.4g}): the agents compute in float32, where "
                     "it becomes inf")
    for key in ("learning_rate_init", "learning_rate_peak", "learning_rate_end"):
        value = getattr(cfg.agent, key)
        _require(value <= LEARNING_RATE_MAX, f"agent.{key}", value,
                 f"must be <= {LEARNING_RATE_MAX:g}: Adam moves every weight by about the learning rate per step, so "
                 "the weights diverge and the losses become non-finite within a few updates")
    derived = budget_defaults(cfg)
    n_int = max(1, cfg.num_env_steps // cfg.num_train_envs)
    _require(n_int * cfg.updates_per_interaction_step <= INT64_MAX, "updates_per_interaction_step",
             cfg.updates_per_interaction_step,
             f"num_env_steps={cfg.num_env_steps} with it makes more updates than int64 counts")
    for key in ("agent.learning_rate_warmup_step", "agent.learning_rate_decay_step"):
        if get(cfg, key) is None:
            rate = key.replace("_step", "_rate")
            _require(derived[key] <= INT64_MAX, rate, get(cfg, rate),
                     f"derives {key}={derived[key]} (rate * num_env_steps / num_train_envs * UTD), beyond int64")
    limit = FASTEST_ENV_STEPS_PER_SECOND * LONGEST_WAIT_SECONDS
    events = ["save_checkpoint_per_interaction_step", "logging_per_interaction_step"]
    if cfg.num_eval_episodes > 0:
        events.insert(0, "evaluation_per_interaction_step")
    for key in events:
        given = get(cfg, key)
        every = derived[key] if given is None else given
        first = min(every, n_int) * cfg.num_train_envs  # the end of the run has one anyway
        if first > limit:
            days = first / FASTEST_ENV_STEPS_PER_SECOND / 86400
            what = (f"the first {key.split('_per_')[0].replace('save_', '')} would come after {first:.3g} env steps, "
                    f"{days:.3g} days even at {FASTEST_ENV_STEPS_PER_SECOND:.0e} env steps/s (far above any simulator "
                    "here), so it would never come")
            if given is None:
                _require(False, "num_env_steps", cfg.num_env_steps,
                         f"{what} ({key}={every} is derived from it: N/10 or N/100 interaction steps); lower "
                         "num_env_steps, or set the interval")
            _require(False, key, given, f"{what}; lower it")
    memory = _physical_memory()
    if memory is not None:
        rows = cfg.agent.buffer_max_length
        _require(rows * SMALLEST_ROW_BYTES <= memory, "agent.buffer_max_length", rows,
                 f"the replay rows alone need at least {rows * SMALLEST_ROW_BYTES / 2**30:.3g} GiB "
                 f"({SMALLEST_ROW_BYTES} bytes a row for the smallest task), more than this machine's "
                 f"{memory / 2**30:.3g} GiB")
        for net in ("actor", "critic"):
            dim, blocks = getattr(cfg.agent, f"{net}_hidden_dim"), getattr(cfg.agent, f"{net}_num_blocks")
            weights = 4 * 8 * dim * dim * blocks  # each block: d -> 4d -> d, float32
            _require(weights <= memory, f"agent.{net}_hidden_dim", dim,
                     f"with agent.{net}_num_blocks={blocks} the {net}'s weights alone need {weights / 2**30:.3g} GiB, "
                     f"more than this machine's {memory / 2**30:.3g} GiB")


def _validate_loggers(value: str) -> None:
    names = [part.strip() for part in value.split(",")]
    bad = [name for name in names if name not in LOGGER_TYPES]
    if bad or not names or ("none" in names and len(names) > 1):
        raise ConfigError(
            f"invalid value {value!r} for 'logger_type'. Allowed values: {', '.join(LOGGER_TYPES)}, or several of "
            "tensorboard / wandb joined by commas (e.g. logger_type=tensorboard,wandb)"
        )


def _validate_device_run(cfg: Config) -> None:
    """A device simulator: the vectorised env count fits the buffer and the batch, and every interaction step runs
    the same updates on one device (the device steppers' training program)."""
    a, envs = cfg.agent, cfg.num_train_envs
    _require(
        envs <= a.buffer_max_length,
        "num_train_envs",
        envs,
        f"must be <= agent.buffer_max_length={a.buffer_max_length} (every env step stores num_train_envs rows)",
    )
    _require(
        envs <= cfg.num_env_steps,
        "num_env_steps",
        cfg.num_env_steps,
        f"must be >= num_train_envs={envs} (one interaction step steps every env once)",
    )
    # updates start once the buffer holds buffer_min_length rows, and it fills num_train_envs rows at a time
    first_fill = -(-a.buffer_min_length // envs) * envs
    _require(
        a.sample_batch_size <= first_fill,
        "agent.sample_batch_size",
        a.sample_batch_size,
        f"the env count cannot fill the first batch: updates start when the buffer holds {first_fill} rows "
        f"(agent.buffer_min_length={a.buffer_min_length} rounded up to whole steps of num_train_envs={envs}); "
        "raise agent.buffer_min_length or num_train_envs, or lower the batch",
    )
    # the training program runs the same steps every interaction step (the device steppers)
    utd = cfg.updates_per_interaction_step
    _require(
        utd == int(utd),
        "updates_per_interaction_step",
        utd,
        "must be a whole number with env.env_type=mjx (every interaction step runs the same number of updates)",
    )
    _require(cfg.num_devices == 1, "num_devices", cfg.num_devices, "must be 1 with env.env_type=mjx (the envs, the "
             "replay and the update run on one device)")


def check_training_run(cfg: Config, framework: str | None = None) -> None:
    """The checks that only a training run needs (a config built just to construct an agent may skip them).

    Args:
        cfg: the resolved config.
        framework: the agent that trains (``"torch"`` / ``"jax"``); None: no device stepper (a host simulator
            only).

    Raises:
        ConfigError: ``agent.buffer_min_length`` above ``num_env_steps`` (the run would end without one update), or
            a device simulator for an agent not in its ``FRAMEWORKS``.
    """
    _require(
        cfg.agent.buffer_min_length <= cfg.num_env_steps,
        "agent.buffer_min_length",
        cfg.agent.buffer_min_length,
        f"must be <= num_env_steps={cfg.num_env_steps}, or the run would end without a single update",
    )
    missing = [f"{module} (pip install -e \".[{extra}]\")" for module, extra, wanted in (
        ("wandb", "wandb", "wandb" in loggers(cfg)), ("imageio_ffmpeg", "video", cfg.record_video))
        if wanted and importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(f"logger_type={cfg.logger_type} record_video={cfg.record_video} needs packages that are not "
                          f"installed: {', '.join(missing)}")
    device = simulator(cfg.env.env_type).STEPPER == DEVICE
    _require(not (cfg.agent.act_before_update and device), "agent.act_before_update",
             cfg.agent.act_before_update, f"applies to the host stepper (env.env_type=mujoco, dmc or myosuite), not to "
             f"env.env_type={cfg.env.env_type} (its envs step on the device): drop the override")
    _require(not (cfg.agent.act_before_update and cfg.num_devices > 1), "agent.act_before_update",
             cfg.agent.act_before_update, f"is not supported with num_devices={cfg.num_devices} (data parallel): "
             "drop the override or set num_devices=1")
    if device and cfg.agent_init_path is not None:
        raise ConfigError(f"agent_init_path={cfg.agent_init_path}: starting from weights is wired into the host "
                          f"stepper (env.env_type=mujoco, dmc or myosuite), not into the device steppers (env.env_type="
                          f"{cfg.env.env_type}) yet")
    if device and framework not in simulator(cfg.env.env_type).FRAMEWORKS:
        raise ConfigError(
            f"env.env_type={cfg.env.env_type!r} is not wired into this agent yet: its envs step on the device, and "
            f"only the agents {', '.join(simulator(cfg.env.env_type).FRAMEWORKS)} have a device stepper for them; "
            "train it with one of them, or use env.env_type=mujoco"
        )


def resume_conflicts(stored: Mapping[str, Any], requested: Mapping[str, Any]) -> list[str]:
    """The requested values that would change a locked key (``RESUME_LOCKED``) of a stored run config.

    Args:
        stored: the checkpoint's resolved config, flattened (``flatten(config_to_dict(cfg))``).
        requested: the new command line's typed values (dotted keys).

    Returns:
        One line per conflict, naming the key, what it belongs to and both values; empty if there is none.
    """
    out = []
    for key, value in requested.items():
        what = RESUME_LOCKED.get(key)
        if what is None or key not in stored:
            continue
        old = typed(key, stored[key])
        new = typed(key, value)
        if new != old:
            out.append(f"{key}={new!r} would change the {what} of the checkpoint ({key}={old!r} there)")
    return out
