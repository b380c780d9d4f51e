"""Every config key, declared once: its type, default and one-line meaning (standard library only).

``Config`` holds the top-level keys and the ``env`` and ``agent`` groups (upstream's names: docs/flashsac.md); each
field is declared with ``key(default, help, section=...)``, which ``agent_common.help`` turns into ``--help``. Here
also: what the keys are as dotted names (``KNOWN_KEYS``), the allowed values of the choice keys (``CHOICES``), what
a resume keeps (``RESUME_LOCKED``) or re-derives (``DERIVED_FROM_BUDGET``), and the conversions every reader of a
value shares (``typed``, ``flatten``). The checks are ``agent_common.validation``'s, the resolved ``Config`` is built
by ``agent_common.config.build_config``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared_spec.dispatch import backend_names
from simulators import SIMULATORS

__all__ = [
    "BACKENDS",
    "CHOICES",
    "COMPILE_MODES",
    "COMPILE_SCOPES",
    "DERIVED_FROM_BUDGET",
    "FRAMEWORKS",
    "GROUPS",
    "KNOWN_KEYS",
    "LOGGER_TYPES",
    "RESUME_LOCKED",
    "SCOPE_UPDATE_MODES",
    "AgentConfig",
    "Config",
    "ConfigError",
    "EnvConfig",
    "budget_defaults",
    "check_key",
    "close_keys",
    "config_to_dict",
    "field_default",
    "field_help",
    "field_type",
    "flatten",
    "get",
    "key",
    "loggers",
    "target_entropy",
    "typed",
]

FRAMEWORKS: tuple[str, ...] = ("torch", "jax")

BACKENDS: dict[str, tuple[str, ...]] = {framework: backend_names(framework) for framework in FRAMEWORKS}
"""Allowed ``agent.categorical_target_backend`` values per framework: every backend its dispatcher knows
(``shared_spec.dispatch.backend_names``; torch: auto, torch, triton; jax: auto, jax, triton, pallas)."""

COMPILE_MODES: tuple[str, ...] = (
    "auto",
    "off",
    "default",
    "reduce-overhead",
    "max-autotune",
    "max-autotune-no-cudagraphs",
)
"""``agent.compile_mode`` values: upstream's torch.compile modes plus ``off``. ``auto`` resolves per framework."""

COMPILE_SCOPES: tuple[str, ...] = ("networks", "update")
"""``agent.compile_scope`` values (torch): what ``agent.compile_mode`` compiles, each network's forward and weight
projection (upstream's scope) or the whole update step and action selection (agent_torch/compiled.py)."""

SCOPE_UPDATE_MODES: tuple[str, ...] = ("auto", "off", "default", "max-autotune-no-cudagraphs")
"""``agent.compile_mode`` values that ``agent.compile_scope=update`` accepts: the modes without CUDA graphs of their
own, since the agent's own CUDA graphs replay the compiled update."""

LOGGER_TYPES: tuple[str, ...] = ("tensorboard", "wandb", "none")
"""What ``logger_type`` may name (one, or several joined by commas)."""


class ConfigError(ValueError):
    """An invalid configuration: unknown key, wrong type or invalid value. The message names the key."""


def key(default: Any, help: str, section: str | None = None) -> Any:  # noqa: A002 - the field's help text
    """A config field: its default, its one-line meaning for ``--help`` and, on the first field of a new part of
    its group, that part's title (``--help`` groups the keys by them)."""
    return field(default=default, metadata={"help": help, "section": section})


class _Freezable:
    """Mixin: after ``_freeze()``, attribute assignment raises ``dataclasses.FrozenInstanceError``.

    The dataclasses stay mutable while a config is assembled; the resolved object handed to the agent is frozen.
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

    env_type: str = key(
        "mujoco", "the simulator: mujoco (gymnasium) | dmc | myosuite | mjx | mujoco_playground | mjlab")
    env_name: str = key("HalfCheetah-v4", "a task of the simulator (simulators.<env_type>.TASKS)")
    rescale_action: bool | None = key(
        None, "null: the simulator's convention (RescaleAction to [-1, 1]; MuJoCo Playground and mjlab: false)")
    max_episode_steps: int | None = key(
        None, "null or <= 0 keeps the task's TimeLimit (1000; DMC: 1000; MyoSuite: 50-200)")
    num_train_envs: int | None = key(None, "null -> top-level num_train_envs (upstream interpolation)")
    num_eval_envs: int | None = key(None, "null -> top-level num_eval_envs")
    menagerie_path: str | None = key(None, "Menagerie checkout (Playground locomotion); null: $MUJOCO_MENAGERIE_PATH")
    device: str | None = key(
        None, "mjlab: the simulator's torch device (cpu | cuda | cuda:N); null: the agent's device")


@dataclass
class AgentConfig(_Freezable):
    """``agent.*`` keys with upstream ``FlashSACConfig`` names (docs/flashsac.md) plus project keys."""

    seed: int | None = key(None, "null -> top-level seed")
    device_type: str = key("auto", "auto | cpu | cuda (upstream default cuda; auto = cuda if available)")
    gamma: float | None = key(None, "null -> top-level gamma")
    n_step: int | None = key(None, "null -> top-level n_step")
    asymmetric_observation: bool = key(False, "only false is supported for gym-MuJoCo")
    actor_num_blocks: int = key(2, "inverted residual blocks in the actor", section="networks")
    actor_hidden_dim: int = key(128, "actor width d (blocks expand to 4d)")
    critic_num_blocks: int = key(2, "inverted residual blocks per critic member")
    critic_hidden_dim: int = key(256, "critic width d")
    critic_num_bins: int = key(101, "categorical atoms K")
    critic_min_v: float | None = key(None, "null -> -normalized_G_max")
    critic_max_v: float | None = key(None, "null -> +normalized_G_max")
    critic_target_update_tau: float = key(0.01, "EMA rate after every critic update")
    normalize_reward: bool = key(
        True, "divide sampled rewards by max(std(G), G_max / normalized_G_max)", section="reward normalisation")
    normalized_G_max: float = key(5.0, "largest normalised |return|; the support is [-G_max, G_max]")
    actor_update_period: int = key(2, "actor and temperature update every k-th update", section="actor / exploration")
    actor_bc_alpha: float = key(0.0, "optional BC term weight (0 = off)")
    actor_noise_zeta_mu: float = key(2.0, "truncated-zeta exponent of the noise repetition length")
    actor_noise_zeta_max: int = key(16, "largest repetition length")
    actor_head: str = key("paper", "paper | upstream: actor head (log-std range, head projection/init, action scaling)")
    temp_initial_value: float = key(0.01, "initial alpha", section="temperature")
    temp_target_sigma: float = key(0.15, "target entropy = entropy of N(0, sigma^2) per dim + sum log range")
    temp_target_entropy: float | None = key(None, "null -> derived from the action space (target_entropy())")
    learning_rate_init: float = key(
        3e-4, "learning rate at the first update (start of the warm-up)",
        section="learning rate: warm-up then cosine decay, per network optimizer step")
    learning_rate_peak: float = key(3e-4, "learning rate at the end of the warm-up (at most 1)")
    learning_rate_end: float = key(1.5e-4, "learning rate at the end of the cosine decay")
    learning_rate_warmup_rate: float = key(1e-6, "warm-up steps = int(rate * N_int * UTD)")
    learning_rate_decay_rate: float = key(1.0, "decay steps = int(rate * N_int * UTD)")
    learning_rate_warmup_step: int | None = key(None, "derived when null")
    learning_rate_decay_step: int | None = key(None, "derived when null")
    sample_batch_size: int = key(512, "B (CPU-sim recipe; yaml default 2048)", section="replay buffer")
    buffer_max_length: int = key(1_000_000, "replay capacity in transitions (oldest overwritten first)")
    buffer_min_length: int = key(10_000, "uniform random actions and no updates until this many transitions")
    buffer_device_type: str = key("auto", "auto | cpu | cuda: where the replay rows live (docs/flashsac.md)")
    act_before_update: bool = key(False, "changes the algorithm: act before the step's update (policy 1 update old)")
    use_amp: bool = key(
        False, "mixed-precision update: torch autocast / jax bf16 or fp16 compute dtype (agent.amp_dtype)",
        section="precision and compilation")
    amp_dtype: str = key(
        "auto", "auto | bf16 | fp16 (with use_amp): auto = fp16 + loss scale on a GPU, bf16 on the CPU")
    use_compile: bool = key(True, "torch.compile the networks (torch); ignored by jax (always jit)")
    compile_mode: str = key("auto", "auto | off | torch.compile modes; auto -> off (on CUDA: CUDA graphs instead)")
    compile_scope: str = key("networks", "torch: networks (each forward + projection) | update (whole update + acting)")
    use_cuda_graph: bool = key(True, "project key (torch): capture update + acting in CUDA graphs; jax ignores it")
    overlap_critic_step: bool = key(
        False, "torch, CUDA graphs: acting waits for the update's actor part only (bitwise)")
    compilation_cache_dir: str = key(
        "auto", "jax: auto ($JAX_COMPILATION_CACHE_DIR, else user cache dir) | off | a path")
    compilation_cache_max_mb: int = key(
        4096, "jax: size cap of that cache in MiB (least recently used programs removed)")
    load_optimizer: bool = key(True, "restore optimizer/scheduler/scaler state on load", section="checkpoint loading")
    load_reward_normalizer: bool = key(True, "restore reward normaliser on load")
    categorical_target_backend: str = key(
        "auto", "auto, the reference or a kernel of the framework (BACKENDS)", section="project keys")
    categorical_target_strict: bool = key(False, "any backend fallback becomes an error")


@dataclass
class Config(_Freezable):
    """Top-level keys (upstream ``configs/flashSAC_base.yaml``) plus the ``env`` and ``agent`` groups.

    Interval keys are in interaction steps (env steps / num_train_envs); null means derived from N.
    """

    project_name: str = key("FlashRL", "W&B project (upstream's key)")
    group_name: str = key("test", "run group: part of the default save_path; W&B group")
    entity_name: str | None = key(None, "W&B entity (upstream's key; null: the W&B account's default entity)")
    exp_name: str = key("FlashSAC", "written to the CSV's exp_name column (upstream results use 'FlashSAC')")
    seed: int = key(0, "seed of every RNG (envs, networks, noise, replay sampling)")
    logger_type: str = key("tensorboard", "tensorboard | wandb | none, or a comma list (tensorboard,wandb)")
    save_path: str | None = key(None, "run directory; null -> runs/<group>/<exp>/<env>/seed<seed>-<MMDD-HHMMSS>")
    agent_load_path: str | None = key(None, "run dir (-> its newest complete checkpoint) or checkpoint dir to resume")
    buffer_load_path: str | None = key(None, "replay_buffer.pkl to load (default: the checkpoint's)")
    agent_init_path: str | None = key(
        None, "a NEW run starts from this checkpoint's weights (run/checkpoint/converted dir)")
    agent_init_optimizer: bool = key(
        True, "with agent_init_path: also its Adam moments and step counts (LR schedule fresh)")
    agent_init_reward_normalizer: bool = key(True, "with agent_init_path: also its reward normaliser statistics")
    num_env_steps: int = key(1_000_000, "training budget in env steps (all train envs together)")
    num_train_envs: int = key(1, "parallel training environments")
    num_eval_envs: int = key(1, "parallel evaluation environments")
    num_record_envs: int = key(1, "envs filmed side by side in each evaluation video (with record_video=true)")
    num_eval_episodes: int = key(50, "episodes per evaluation (0: no evaluation)")
    num_record_episodes: int = key(
        1, "episodes per evaluation video (rounds of num_record_envs; with record_video=true)")
    gamma: float = key(0.99, "discount factor")
    n_step: int = key(1, "n-step returns in the TD target")
    updates_per_interaction_step: float = key(1.0, "UTD; fractional values accumulate")
    evaluation_per_interaction_step: int | None = key(None, "null -> N/10")
    metrics_per_interaction_step: int | None = key(None, "null -> N/10 (no extra metrics are computed)")
    recording_per_interaction_step: int | None = key(None, "null -> N: a video at the start, every N and at the end")
    logging_per_interaction_step: int | None = key(None, "null -> N/100")
    save_checkpoint_per_interaction_step: int | None = key(None, "null -> N/10 (and always at the end)")
    save_buffer_per_interaction_step: int | None = key(
        None, "null -> with every checkpoint if save_buffer, else every k")
    record_video: bool = key(
        False, "evaluation videos in <run>/videos/*.mp4 (every env type; MUJOCO_GL=egl|osmesa)", section="project keys")
    record_size: int = key(480, "evaluation video frame width and height in pixels")
    recipe: str | None = key(
        None, "named recipe under the overrides (agent_common.recipes: smoke | gym | mjx ...); null: none")
    save_buffer: bool = key(True, "replay buffer in every checkpoint (exact resume); always on Ctrl-C / budget stops")
    keep_checkpoints: int = key(2, "newest complete checkpoints kept in <run>/checkpoints (older ones are deleted)")
    overwrite_incomplete: bool = key(
        False, "start over in a save_path whose run has no complete checkpoint (its files are moved to "
        "<save_path>/incomplete-<k>/ first, nothing is deleted)")
    rederive_schedule_on_resume: bool = key(
        False, "resume: re-derive LR steps and intervals from num_env_steps (explicit values of the run are re-derived "
        "too; this command line's overrides still win)")
    max_wall_seconds: float | None = key(None, "checkpoint and exit cleanly once this much wall time has passed")
    deterministic: bool = key(False, "deterministic algorithms (bitwise reproducible on CPU)")
    progress_bar: bool = key(True, "tqdm bar with env steps/s, updates/s and the latest eval return")
    num_threads: int | None = key(None, "framework intra-op threads (torch.set_num_threads); null = default")
    num_devices: int = key(
        1, "jax: local devices the update is data-parallel over (batch sharded); torch: 1 (torchrun)")
    distributed_timeout_seconds: float = key(1800.0, "torch under torchrun: a collective waiting longer fails the run")
    interaction_steps_per_call: int | None = key(
        None, "mjx: most interaction steps per agent call (JAX: the lax.scan length K); null -> derived from the "
        "logging interval (agent_common.driver.steps_per_call)")
    env: EnvConfig = field(default_factory=EnvConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)


def _flat_fields(cls: type, prefix: str = "") -> dict[str, dataclasses.Field[Any]]:
    out: dict[str, dataclasses.Field[Any]] = {}
    for f in dataclasses.fields(cls):
        factory = f.default_factory
        if factory is not dataclasses.MISSING and dataclasses.is_dataclass(factory):
            out.update(_flat_fields(factory, prefix + f.name + "."))  # type: ignore[arg-type]
        else:
            out[prefix + f.name] = f
    return out


_FIELDS = _flat_fields(Config)
KNOWN_KEYS: tuple[str, ...] = tuple(_FIELDS)
"""Every valid dotted key, in declaration order."""

GROUPS: tuple[str, ...] = ("env", "agent")

DERIVED_FROM_BUDGET: tuple[str, ...] = (
    "agent.learning_rate_warmup_step",
    "agent.learning_rate_decay_step",
    "evaluation_per_interaction_step",
    "metrics_per_interaction_step",
    "recording_per_interaction_step",
    "logging_per_interaction_step",
    "save_checkpoint_per_interaction_step",
)
"""Keys derived from ``num_env_steps`` when null: a resume that extends the budget keeps the checkpoint's values."""

def budget_defaults(cfg: Config) -> dict[str, int]:
    """What each ``DERIVED_FROM_BUDGET`` key is when null, for ``cfg``'s ``num_env_steps`` (N_int interaction steps):
    LR warm-up / decay steps = int(rate * N_int * UTD), evaluation and metrics every N_int/10, logging every
    N_int/100, checkpoints every N_int/10, recording every N_int."""
    n_int = max(1, cfg.num_env_steps // cfg.num_train_envs)
    utd = cfg.updates_per_interaction_step
    return {
        "agent.learning_rate_warmup_step": int(cfg.agent.learning_rate_warmup_rate * n_int * utd),
        "agent.learning_rate_decay_step": max(1, int(cfg.agent.learning_rate_decay_rate * n_int * utd)),
        "evaluation_per_interaction_step": max(1, n_int // 10),
        "metrics_per_interaction_step": max(1, n_int // 10),
        "recording_per_interaction_step": n_int,
        "logging_per_interaction_step": max(1, n_int // 100),
        "save_checkpoint_per_interaction_step": max(1, n_int // 10),
    }


_TASK = "task"
_ARCH = "architecture"
_UPDATE = "update configuration"
RESUME_LOCKED: dict[str, str] = {
    "seed": "run (its seed)",
    "env.env_type": _TASK,
    "env.env_name": _TASK,
    "env.rescale_action": _TASK,
    "env.max_episode_steps": _TASK,
    "num_train_envs": _TASK,
    "num_eval_envs": _TASK,
    "agent.asymmetric_observation": _TASK,
    "agent.actor_num_blocks": _ARCH,
    "agent.actor_hidden_dim": _ARCH,
    "agent.actor_head": _ARCH,
    "agent.critic_num_blocks": _ARCH,
    "agent.critic_hidden_dim": _ARCH,
    "agent.critic_num_bins": _ARCH,
    "agent.critic_min_v": _ARCH,
    "agent.critic_max_v": _ARCH,
    "agent.normalized_G_max": _ARCH,
    "gamma": _UPDATE,
    "n_step": _UPDATE,
    "updates_per_interaction_step": _UPDATE,
    "agent.critic_target_update_tau": _UPDATE,
    "agent.normalize_reward": _UPDATE,
    "agent.actor_update_period": _UPDATE,
    "agent.actor_bc_alpha": _UPDATE,
    "agent.actor_noise_zeta_mu": _UPDATE,
    "agent.actor_noise_zeta_max": _UPDATE,
    "agent.temp_initial_value": _UPDATE,
    "agent.temp_target_sigma": _UPDATE,
    "agent.temp_target_entropy": _UPDATE,
    "agent.learning_rate_init": _UPDATE,
    "agent.learning_rate_peak": _UPDATE,
    "agent.learning_rate_end": _UPDATE,
    "agent.learning_rate_warmup_rate": _UPDATE,
    "agent.learning_rate_decay_rate": _UPDATE,
    "agent.learning_rate_warmup_step": _UPDATE,
    "agent.learning_rate_decay_step": _UPDATE,
    "agent.sample_batch_size": _UPDATE,
    "agent.buffer_max_length": _UPDATE,
    "agent.buffer_min_length": _UPDATE,
    "agent.use_amp": _UPDATE,
    "agent.amp_dtype": _UPDATE,
}
"""Keys a resume may not change, with what they belong to: the checkpoint's task, architecture or update
configuration (its seed names the run). Everything else (budget, intervals, logging, backends, devices, paths)
may change on resume."""

CHOICES: dict[str, tuple[Any, ...]] = {
    "env.env_type": tuple(SIMULATORS),
    "env.env_name": (),  # the simulator's TASKS (agent_common.validation)
    "agent.device_type": ("auto", "cpu", "cuda"),
    "agent.buffer_device_type": ("auto", "cpu", "cuda"),
    "agent.compile_mode": COMPILE_MODES,
    "agent.compile_scope": COMPILE_SCOPES,
    "agent.amp_dtype": ("auto", "bf16", "fp16"),
    "agent.actor_head": ("paper", "upstream"),
    "agent.asymmetric_observation": (False,),
    "agent.categorical_target_backend": (),  # BACKENDS[framework]
}
"""The allowed values of the keys that name one of a few choices (the two left empty depend on another value)."""


def close_keys(name: str, n: int = 3) -> list[str]:
    """The few known keys closest to a misspelled one (whole key, then its last part: a key without its group)."""
    found = difflib.get_close_matches(name, KNOWN_KEYS, n=n, cutoff=0.6)
    if not found:
        last = {k.rsplit(".", 1)[-1]: k for k in KNOWN_KEYS}
        found = [last[m] for m in difflib.get_close_matches(name.rsplit(".", 1)[-1], list(last), n=n, cutoff=0.75)]
    return found


def check_key(name: str, suggestions: Sequence[str] = ()) -> None:
    """Raises ``ConfigError`` for a key that is not in ``KNOWN_KEYS``, naming the few closest keys only
    (``suggestions``, else ``close_keys``) and where the full list is (``--help``)."""
    if name in _FIELDS:
        return
    found = list(suggestions) or close_keys(name)
    hint = f" Did you mean: {', '.join(found)}?" if found else " No known key is close to it."
    raise ConfigError(f"unknown config key '{name}'.{hint} Every key with its type, default and meaning: --help")


def field_default(name: str) -> Any:
    """The default value of a dotted key (None where null means derived or mirrored)."""
    return _FIELDS[name].default


def field_help(name: str) -> tuple[str | None, str]:
    """(the section a dotted key opens or None, its one-line meaning), as declared with ``key``."""
    meta = _FIELDS[name].metadata
    return meta.get("section"), meta.get("help", "")


def field_type(name: str) -> tuple[str, bool]:
    """(base type name, nullable) of a dotted key: ``("int", True)`` for ``int | None``."""
    text = str(_FIELDS[name].type).replace(" ", "")
    parts = text.split("|")
    return [p for p in parts if p != "None"][0], "None" in parts


def typed(name: str, value: Any) -> Any:
    """``value`` as the field's type (int -> float widening, integral floats -> int), else ``ConfigError``."""
    base, nullable = field_type(name)
    if value is None:
        if nullable:
            return None
        raise ConfigError(f"invalid value None for '{name}' (expected {base}): the key is not nullable")
    if base == "bool":
        if isinstance(value, bool):
            return value
    elif base == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and math.isfinite(value) and value == int(value):
            return int(value)
    elif base == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif base == "str":
        if isinstance(value, str):
            return value
    raise ConfigError(f"invalid value {value!r} for '{name}' (expected {base}{' or null' if nullable else ''})")


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"agent": {"gamma": 0.9}}`` -> ``{"agent.gamma": 0.9}`` (the ``env`` / ``agent`` groups only)."""
    out: dict[str, Any] = {}
    for name, value in tree.items():
        if not prefix and name in GROUPS and isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[prefix + name] = value
    return out


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dict of the config (for YAML / TensorBoard text)."""
    return dataclasses.asdict(cfg)


def get(cfg: Config, name: str) -> Any:
    """The value of a dotted key."""
    obj: Any = cfg
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def loggers(cfg: Config) -> tuple[str, ...]:
    """The loggers ``cfg.logger_type`` names: ``"tensorboard,wandb"`` -> ``("tensorboard", "wandb")``; ``none`` ->
    ``()``."""
    return tuple(name for name in (part.strip() for part in cfg.logger_type.split(",")) if name and name != "none")


def target_entropy(cfg: AgentConfig, action_low: Iterable[float], action_high: Iterable[float]) -> float:
    """Temperature target H̄ = ½·A·ln(2πe·σ²) + Σ ln max(|range|, 1e-6) unless ``temp_target_entropy`` is set.

    Args:
        cfg: agent config (uses ``temp_target_sigma`` and ``temp_target_entropy``).
        action_low: (A,) lower action bounds as seen by the agent (after RescaleAction).
        action_high: (A,) upper action bounds.

    Returns:
        The target entropy as a Python float (docs/flashsac.md), summed in float64.
    """
    if cfg.temp_target_entropy is not None:
        return float(cfg.temp_target_entropy)
    low = [float(v) for v in action_low]
    high = [float(v) for v in action_high]
    gauss = 0.5 * len(low) * math.log(2.0 * math.pi * math.e * cfg.temp_target_sigma**2)
    return gauss + math.fsum(math.log(max(abs((h - lo) / 2.0), 1e-6)) for lo, h in zip(low, high, strict=True))
