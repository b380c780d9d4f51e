"""Typed FlashSAC config shared by the torch and JAX agents, with upstream's ``--overrides key=value`` CLI."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = [
    "AgentConfig",
    "Config",
    "ConfigError",
    "EnvConfig",
    "SUPPORTED_ENVS",
    "BACKENDS",
    "config_to_dict",
    "config_to_yaml",
    "load_config",
    "parse_args",
    "target_entropy",
]

SUPPORTED_ENVS: tuple[str, ...] = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4")
"""gym-MuJoCo tasks of upstream's CPU-sim recipe (FLASHSAC.md §14)."""

BACKENDS: dict[str, tuple[str, ...]] = {"torch": ("auto", "torch", "triton"), "jax": ("auto", "jax", "pallas")}
"""Allowed ``agent.categorical_target_backend`` values per framework."""

COMPILE_MODES: tuple[str, ...] = (
    "auto",
    "off",
    "default",
    "reduce-overhead",
    "max-autotune",
    "max-autotune-no-cudagraphs",
)
"""``agent.compile_mode`` values: upstream's torch.compile modes plus ``off``. ``auto`` resolves per framework."""

# Upstream selects config groups with `env=mujoco` / `agent=flashSAC`; these are the only groups that exist here.
_GROUP_SELECTIONS = {"env": ("mujoco",), "agent": ("flashSAC",)}


class ConfigError(ValueError):
    """An invalid configuration: unknown key, wrong type or invalid value. The message names the key."""


class _Freezable:
    """Mixin: after ``_freeze()``, attribute assignment raises ``dataclasses.FrozenInstanceError``.

    The schema must stay mutable for ``OmegaConf.structured`` + merge (a ``frozen=True`` dataclass becomes a
    read-only node, STYLE.md convention 13); the resolved object handed to the agent is frozen with this.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_frozen", False):
            raise dataclasses.FrozenInstanceError(f"resolved config is frozen; cannot assign {name!r}")
        object.__setattr__(self, name, value)

    def _freeze(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, _Freezable):
                value._freeze()
        object.__setattr__(self, "_frozen", True)


@dataclass
class EnvConfig(_Freezable):
    """``env.*`` keys (upstream ``configs/env/mujoco.yaml``)."""

    env_type: str = "mujoco"  # only gym-MuJoCo is supported
    env_name: str = "HalfCheetah-v4"  # one of SUPPORTED_ENVS
    rescale_action: bool = True  # RescaleAction to [-1, 1] (the paper-era actor assumes [-1, 1])
    max_episode_steps: int | None = None  # null or <= 0 keeps the task's TimeLimit (1000)
    num_train_envs: int | None = None  # null -> top-level num_train_envs (upstream interpolation)
    num_eval_envs: int | None = None  # null -> top-level num_eval_envs


@dataclass
class AgentConfig(_Freezable):
    """``agent.*`` keys with upstream ``FlashSACConfig`` names (FLASHSAC.md §1, §19) plus project keys."""

    seed: int | None = None  # null -> top-level seed
    device_type: str = "auto"  # auto | cpu | cuda (upstream default cuda; auto = cuda if available)
    gamma: float | None = None  # null -> top-level gamma
    n_step: int | None = None  # null -> top-level n_step
    asymmetric_observation: bool = False  # only false is supported for gym-MuJoCo
    # networks
    actor_num_blocks: int = 2  # inverted residual blocks in the actor
    actor_hidden_dim: int = 128  # actor width d (blocks expand to 4d)
    critic_num_blocks: int = 2  # inverted residual blocks per critic member
    critic_hidden_dim: int = 256  # critic width d
    critic_num_bins: int = 101  # categorical atoms K
    critic_min_v: float | None = None  # null -> -normalized_G_max
    critic_max_v: float | None = None  # null -> +normalized_G_max
    critic_target_update_tau: float = 0.01  # EMA rate after every critic update
    # reward normalisation
    normalize_reward: bool = True  # divide sampled rewards by max(std(G), G_max / normalized_G_max)
    normalized_G_max: float = 5.0  # largest normalised |return|; the support is [-G_max, G_max]
    # actor / exploration
    actor_update_period: int = 2  # actor and temperature update every k-th update
    actor_bc_alpha: float = 0.0  # optional BC term weight (0 = off)
    actor_noise_zeta_mu: float = 2.0  # truncated-zeta exponent of the noise repetition length
    actor_noise_zeta_max: int = 16  # largest repetition length
    # temperature
    temp_initial_value: float = 0.01  # initial alpha
    temp_target_sigma: float = 0.15  # target entropy = entropy of N(0, sigma^2) per dim + sum log range
    temp_target_entropy: float | None = None  # null -> derived from the action space (target_entropy())
    # learning rate: warm-up then cosine decay, per network optimizer step
    learning_rate_init: float = 3e-4
    learning_rate_peak: float = 3e-4
    learning_rate_end: float = 1.5e-4
    learning_rate_warmup_rate: float = 1e-6  # warm-up steps = int(rate * N_int * UTD)
    learning_rate_decay_rate: float = 1.0  # decay steps = int(rate * N_int * UTD)
    learning_rate_warmup_step: int | None = None  # derived when null
    learning_rate_decay_step: int | None = None  # derived when null
    # replay buffer
    sample_batch_size: int = 512  # B (CPU-sim recipe; yaml default 2048)
    buffer_max_length: int = 1_000_000
    buffer_min_length: int = 10_000  # uniform random actions and no updates until this many transitions
    buffer_device_type: str = "cpu"  # cpu | cuda (accepted; storage is host numpy, batches go to the device)
    # precision and compilation
    use_amp: bool = False  # fp16 autocast + GradScaler (torch) / bf16 matmuls (jax)
    use_compile: bool = True  # torch.compile the networks (torch); ignored by jax (always jit)
    compile_mode: str = "auto"  # auto | off | torch.compile modes; auto -> off without CUDA
    use_cuda_graph: bool = True  # project key (torch): capture update + acting in CUDA graphs; jax ignores it
    # checkpoint loading
    load_optimizer: bool = True  # restore optimizer/scheduler/scaler state on load
    load_reward_normalizer: bool = True  # restore reward normaliser on load
    # project keys
    categorical_target_backend: str = "auto"  # torch: auto|torch|triton; jax: auto|jax|pallas
    categorical_target_strict: bool = False  # any backend fallback becomes an error


@dataclass
class Config(_Freezable):
    """Top-level keys (upstream ``configs/flashSAC_base.yaml``) plus the ``env`` and ``agent`` groups.

    Interval keys are in interaction steps (env steps / num_train_envs); null means derived from N.
    """

    project_name: str = "FlashRL"
    group_name: str = "test"
    exp_name: str = "FlashSAC"  # written to the CSV's exp_name column (upstream results use "FlashSAC")
    seed: int = 0
    logger_type: str = "tensorboard"  # tensorboard | none
    save_path: str | None = None  # run directory; null -> runs/<group>/<exp>/<env>/seed<seed>-<MMDD-HHMMSS>
    agent_load_path: str | None = None  # checkpoint dir (or run dir -> its latest checkpoint) to resume from
    buffer_load_path: str | None = None  # replay_buffer.npz to load (default: the checkpoint's, if saved)
    num_env_steps: int = 1_000_000
    num_train_envs: int = 1
    num_eval_envs: int = 1
    num_record_envs: int = 1  # accepted for upstream CLI compatibility; video recording is not implemented
    num_eval_episodes: int = 50
    num_record_episodes: int = 1  # accepted for upstream CLI compatibility; video recording is not implemented
    gamma: float = 0.99
    n_step: int = 1
    updates_per_interaction_step: float = 1.0  # UTD; fractional values accumulate
    evaluation_per_interaction_step: int | None = None  # null -> N/10
    metrics_per_interaction_step: int | None = None  # null -> N/10 (no extra metrics are computed)
    recording_per_interaction_step: int | None = None  # null -> N (recording not implemented)
    logging_per_interaction_step: int | None = None  # null -> N/100
    save_checkpoint_per_interaction_step: int | None = None  # null -> N (one checkpoint at the end)
    save_buffer_per_interaction_step: int | None = None  # null -> buffer saved only if save_buffer
    # project keys
    save_buffer: bool = False  # buffer in every checkpoint (always on Ctrl-C / max_wall_seconds)
    max_wall_seconds: float | None = None  # checkpoint and exit cleanly once this much wall time has passed
    deterministic: bool = False  # deterministic algorithms (bitwise reproducible on CPU)
    progress_bar: bool = True  # tqdm bar with env steps/s, updates/s and the latest eval return
    num_threads: int | None = None  # framework intra-op threads (torch.set_num_threads); null = default
    env: EnvConfig = field(default_factory=EnvConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)


def _flat_fields(cls: type, prefix: str = "") -> dict[str, dataclasses.Field[Any]]:
    out: dict[str, dataclasses.Field[Any]] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default_factory) if f.default_factory is not dataclasses.MISSING else False:
            out.update(_flat_fields(f.default_factory, prefix + f.name + "."))  # type: ignore[arg-type]
        else:
            out[prefix + f.name] = f
    return out


KNOWN_KEYS: tuple[str, ...] = tuple(_flat_fields(Config))
"""Every valid dotted override key."""


def _choices(framework: str) -> dict[str, tuple[Any, ...]]:
    return {
        "logger_type": ("tensorboard", "none"),
        "env.env_type": ("mujoco",),
        "env.env_name": SUPPORTED_ENVS,
        "agent.device_type": ("auto", "cpu", "cuda"),
        "agent.buffer_device_type": ("cpu", "cuda"),
        "agent.compile_mode": COMPILE_MODES,
        "agent.categorical_target_backend": BACKENDS[framework],
        "agent.asymmetric_observation": (False,),
    }


def _split_override(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    key = key.strip().lstrip("+")
    if not sep or not key:
        raise ConfigError(f"override {item!r} is not of the form key=value")
    return key, value


def _check_key(key: str) -> None:
    if key in KNOWN_KEYS:
        return
    close = difflib.get_close_matches(key, KNOWN_KEYS, n=3, cutoff=0.6)
    group = key.split(".")[0] + "." if "." in key else ""
    siblings = [k for k in KNOWN_KEYS if group and k.startswith(group)]
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    listing = f" Allowed keys under '{group[:-1]}': {', '.join(siblings)}." if siblings else ""
    raise ConfigError(f"unknown config key '{key}'.{hint}{listing}")


def _quote_if_string_field(key: str, value: str) -> str:
    """Keeps string fields literal: YAML 1.1 would read ``compile_mode=off`` as the boolean False."""
    field_type = str(_flat_fields(Config)[key].type)
    stripped = value.strip()
    if "str" not in field_type or stripped in ("null", "~", "") or stripped[:1] in ("'", '"'):
        return value
    return "'" + stripped.replace("'", "''") + "'"


def _get(cfg: Config, key: str) -> Any:
    obj: Any = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def _require(cond: bool, key: str, value: Any, what: str) -> None:
    if not cond:
        raise ConfigError(f"invalid value {value!r} for '{key}': {what}")


def _validate(cfg: Config, framework: str) -> None:
    for key, allowed in _choices(framework).items():
        value = _get(cfg, key)
        if value not in allowed:
            raise ConfigError(
                f"invalid value {value!r} for '{key}'. Allowed values: {', '.join(map(str, allowed))}"
                + (f" (framework {framework})" if key == "agent.categorical_target_backend" else "")
            )
    positive_int = [
        "num_env_steps",
        "num_train_envs",
        "num_eval_envs",
        "n_step",
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
        value = _get(cfg, key)
        _require(value is not None and value >= 1, key, value, "must be an integer >= 1")
    for key in [k for k in KNOWN_KEYS if k.endswith("_per_interaction_step")] + ["num_threads"]:
        value = _get(cfg, key)
        _require(value is None or value >= 1, key, value, "must be null or an integer >= 1")
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
    _require(a.buffer_min_length >= 1, "agent.buffer_min_length", a.buffer_min_length, "must be >= 1")
    _require(
        a.buffer_min_length <= a.buffer_max_length,
        "agent.buffer_min_length",
        a.buffer_min_length,
        f"must be <= agent.buffer_max_length={a.buffer_max_length}",
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
    for key in ("learning_rate_init", "learning_rate_peak", "learning_rate_end"):
        value = getattr(a, key)
        _require(value >= 0, f"agent.{key}", value, "must be >= 0")
    if a.critic_min_v is not None and a.critic_max_v is not None:
        _require(
            a.critic_min_v < a.critic_max_v,
            "agent.critic_min_v",
            a.critic_min_v,
            f"must be < agent.critic_max_v={a.critic_max_v}",
        )
    # mirrored keys (upstream interpolations) may be set in both places only if they agree
    for top, sub in (
        ("num_train_envs", "env.num_train_envs"),
        ("num_eval_envs", "env.num_eval_envs"),
        ("seed", "agent.seed"),
        ("gamma", "agent.gamma"),
        ("n_step", "agent.n_step"),
    ):
        sub_value = _get(cfg, sub)
        _require(
            sub_value is None or sub_value == _get(cfg, top),
            sub,
            sub_value,
            f"mirrors '{top}' (= {_get(cfg, top)!r}); set '{top}' instead or make them equal",
        )


def _resolve(cfg: Config, framework: str) -> Config:
    """Fill derived fields in code (no eval resolvers), as upstream's interpolations would."""
    n_int = max(1, cfg.num_env_steps // cfg.num_train_envs)
    utd = cfg.updates_per_interaction_step
    agent = dataclasses.replace(
        cfg.agent,
        seed=cfg.seed,
        gamma=cfg.gamma,
        n_step=cfg.n_step,
        critic_min_v=-cfg.agent.normalized_G_max if cfg.agent.critic_min_v is None else cfg.agent.critic_min_v,
        critic_max_v=cfg.agent.normalized_G_max if cfg.agent.critic_max_v is None else cfg.agent.critic_max_v,
        learning_rate_warmup_step=(
            int(cfg.agent.learning_rate_warmup_rate * n_int * utd)
            if cfg.agent.learning_rate_warmup_step is None
            else cfg.agent.learning_rate_warmup_step
        ),
        learning_rate_decay_step=(
            int(cfg.agent.learning_rate_decay_rate * n_int * utd)
            if cfg.agent.learning_rate_decay_step is None
            else cfg.agent.learning_rate_decay_step
        ),
    )
    env = dataclasses.replace(cfg.env, num_train_envs=cfg.num_train_envs, num_eval_envs=cfg.num_eval_envs)

    def interval(value: int | None, divisor: int) -> int:
        return value if value is not None else max(1, n_int // divisor)

    save_path = cfg.save_path
    if save_path is None and cfg.agent_load_path is not None:
        save_path = _run_dir_of_checkpoint(cfg.agent_load_path)
    if save_path is None:
        stamp = time.strftime("%m%d-%H%M%S")
        save_path = os.path.join("runs", cfg.group_name, cfg.exp_name, cfg.env.env_name, f"seed{cfg.seed}-{stamp}")
    return dataclasses.replace(
        cfg,
        env=env,
        agent=agent,
        save_path=save_path,
        evaluation_per_interaction_step=interval(cfg.evaluation_per_interaction_step, 10),
        metrics_per_interaction_step=interval(cfg.metrics_per_interaction_step, 10),
        recording_per_interaction_step=interval(cfg.recording_per_interaction_step, 1),
        logging_per_interaction_step=interval(cfg.logging_per_interaction_step, 100),
        save_checkpoint_per_interaction_step=interval(cfg.save_checkpoint_per_interaction_step, 1),
    )


def _run_dir_of_checkpoint(path: str) -> str:
    """``<run>/checkpoints/step<k>`` -> ``<run>``; a run directory is returned unchanged."""
    path = os.path.normpath(path)
    parent = os.path.dirname(path)
    if os.path.basename(parent) == "checkpoints":
        return os.path.dirname(parent)
    return path


def load_config(overrides: list[str] | None = None, framework: Literal["torch", "jax"] = "torch") -> Config:
    """Build the resolved, frozen config from ``key=value`` overrides.

    Args:
        overrides: dotted ``key=value`` strings, e.g. ``["agent.sample_batch_size=256", "seed=3"]``. Values are
            parsed as YAML (``null``, ``true``, ``1_000_000``, ``3e-4``). ``env=mujoco`` and ``agent=flashSAC``
            (upstream group selections) are accepted and ignored.
        framework: ``"torch"`` or ``"jax"``; selects the allowed ``agent.categorical_target_backend`` values.

    Returns:
        A frozen ``Config`` with every derived field filled (intervals, LR steps, critic support, mirrored keys).

    Raises:
        ConfigError: unknown key, wrong type or invalid value; the message names the key and the allowed values.
    """
    if framework not in BACKENDS:
        raise ConfigError(f"unknown framework {framework!r}; allowed: {', '.join(BACKENDS)}")
    dotlist: list[str] = []
    for item in overrides or []:
        key, value = _split_override(item)
        if key in _GROUP_SELECTIONS:
            if value.strip() not in _GROUP_SELECTIONS[key]:
                raise ConfigError(
                    f"invalid value {value!r} for config group '{key}'. Allowed values: "
                    + ", ".join(_GROUP_SELECTIONS[key])
                )
            continue
        _check_key(key)
        dotlist.append(f"{key}={_quote_if_string_field(key, value)}")
    try:
        schema = OmegaConf.structured(Config)
        merged = OmegaConf.merge(schema, OmegaConf.from_dotlist(dotlist))
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        field_type = _flat_fields(Config).get(str(key))
        expected = f" (expected {field_type.type})" if field_type is not None else ""
        message = str(getattr(exc, "msg", exc)).splitlines()[0]
        raise ConfigError(f"invalid value for '{key}'{expected}: {message}") from None
    assert isinstance(cfg, Config)
    _validate(cfg, framework)
    resolved = _resolve(cfg, framework)
    resolved._freeze()
    return resolved


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


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dict of the config (for YAML / TensorBoard text)."""
    return dataclasses.asdict(cfg)


def config_to_yaml(cfg: Config) -> str:
    """YAML text of the resolved config."""
    return OmegaConf.to_yaml(OmegaConf.create(config_to_dict(cfg)))


def target_entropy(cfg: AgentConfig, action_low: Any, action_high: Any) -> float:
    """Temperature target H̄ = ½·A·ln(2πe·σ²) + Σ ln max(|range|, 1e-6) unless ``temp_target_entropy`` is set.

    Args:
        cfg: agent config (uses ``temp_target_sigma`` and ``temp_target_entropy``).
        action_low: (A,) lower action bounds as seen by the agent (after RescaleAction).
        action_high: (A,) upper action bounds.

    Returns:
        The target entropy as a Python float (FLASHSAC.md §4).
    """
    import numpy as np

    if cfg.temp_target_entropy is not None:
        return float(cfg.temp_target_entropy)
    low = np.asarray(action_low, dtype=np.float64)  # (A,)
    high = np.asarray(action_high, dtype=np.float64)  # (A,)
    action_dim = low.shape[0]
    half_range = (high - low) / 2.0  # (A,)
    gauss = 0.5 * action_dim * np.log(2.0 * np.pi * np.e * cfg.temp_target_sigma**2)
    return float(gauss + np.sum(np.log(np.maximum(np.abs(half_range), 1e-6))))
