"""The FlashSAC config schema, standard library only: dataclasses, defaults, type checks, validation, derived fields.

Everything here runs without omegaconf, numpy or a framework, so scripts can build a ``Config`` from Python values
(``build_config({"agent.sample_batch_size": 256}, "torch")``). ``agent_common.config`` adds the command line on
top: ``--overrides key=value`` strings parsed as YAML, "did you mean" for unknown keys, ``config.yaml`` files and
the restoration of a run's config on resume.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import importlib.util
import math
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_common.recipes import RECIPES, unknown_recipe
from shared_spec.dispatch import backend_names

__all__ = [
    "BACKENDS",
    "COMPILE_MODES",
    "COMPILE_SCOPES",
    "DMC_EPISODE_STEPS",
    "DMC_EXTRA_MODULES",
    "DMC_TASKS",
    "ENV_TYPES",
    "FRAMEWORKS",
    "KNOWN_KEYS",
    "MJX_EXTRA_MODULES",
    "MJX_TASKS",
    "MJX_TRAINING_FRAMEWORKS",
    "MENAGERIE_ENV",
    "MJLAB_EXTRA_MODULES",
    "MJLAB_TASKS",
    "MYOSUITE_EXTRA_MODULES",
    "MYOSUITE_TASKS",
    "PLAYGROUND_DM_TASKS",
    "PLAYGROUND_EXTRA_MODULES",
    "PLAYGROUND_LOCOMOTION_TASKS",
    "PLAYGROUND_TASKS",
    "VECTOR_ENV_TYPES",
    "RESUME_LOCKED",
    "SUPPORTED_ENVS",
    "AgentConfig",
    "Config",
    "ConfigError",
    "EnvConfig",
    "budget_defaults",
    "build_config",
    "check_training_run",
    "check_key",
    "config_help",
    "field_default",
    "field_docs",
    "dmc_missing",
    "menagerie_problem",
    "mjlab_missing",
    "mjx_missing",
    "myosuite_missing",
    "playground_missing",
    "config_to_dict",
    "flatten",
    "resume_conflicts",
    "run_dir_of_checkpoint",
    "target_entropy",
]

SUPPORTED_ENVS: tuple[str, ...] = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4")
"""gym-MuJoCo tasks of upstream's CPU-sim recipe (docs/flashsac.md)."""

MJX_TASKS: tuple[str, ...] = ("halfcheetah", "hopper", "walker2d", "ant", "humanoid")
"""Brax's MuJoCo tasks on the MJX backend (``env.env_type=mjx``, package ``mjx_envs``), in SUPPORTED_ENVS' order."""

DMC_TASKS: tuple[str, ...] = (
    "acrobot-swingup", "acrobot-swingup_sparse", "ball_in_cup-catch", "cartpole-balance", "cartpole-balance_sparse",
    "cartpole-swingup", "cartpole-swingup_sparse", "cartpole-three_poles", "cartpole-two_poles", "cheetah-run",
    "dog-fetch", "dog-run", "dog-stand", "dog-trot", "dog-walk", "finger-spin", "finger-turn_easy",
    "finger-turn_hard", "fish-swim", "fish-upright", "hopper-hop", "hopper-stand", "humanoid-run",
    "humanoid-run_pure_state", "humanoid-stand", "humanoid-walk", "humanoid_CMU-run", "humanoid_CMU-stand",
    "humanoid_CMU-walk", "lqr-lqr_2_1", "lqr-lqr_6_2", "manipulator-bring_ball", "manipulator-bring_peg",
    "manipulator-insert_ball", "manipulator-insert_peg", "pendulum-swingup", "point_mass-easy", "point_mass-hard",
    "quadruped-escape", "quadruped-fetch", "quadruped-run", "quadruped-walk", "reacher-easy", "reacher-hard",
    "stacker-stack_2", "stacker-stack_4", "swimmer-swimmer15", "swimmer-swimmer6", "walker-run", "walker-stand",
    "walker-walk",
)
"""DeepMind Control suite tasks (``env.env_type=dmc``) as upstream names them, ``<domain>-<task>``: every entry of
``dm_control.suite.ALL_TASKS`` (tests/test_dmc_envs.py checks the list against the installed dm_control)."""

DMC_EPISODE_STEPS = 1000
"""A DMC episode's length when ``env.max_episode_steps`` is null (upstream ``configs/env/dmc.yaml``)."""

DMC_EXTRA_MODULES: tuple[str, ...] = ("dm_control", "shimmy")
"""What ``env.env_type=dmc`` needs (the ``dmc`` extra)."""

MYOSUITE_TASKS: dict[str, str] = {
    "myo-reach": "myoHandReachFixed-v0",
    "myo-reach-hard": "myoHandReachRandom-v0",
    "myo-pose": "myoHandPoseFixed-v0",
    "myo-pose-hard": "myoHandPoseRandom-v0",
    "myo-obj-hold": "myoHandObjHoldFixed-v0",
    "myo-obj-hold-hard": "myoHandObjHoldRandom-v0",
    "myo-key-turn": "myoHandKeyTurnFixed-v0",
    "myo-key-turn-hard": "myoHandKeyTurnRandom-v0",
    "myo-pen-twirl": "myoHandPenTwirlFixed-v0",
    "myo-pen-twirl-hard": "myoHandPenTwirlRandom-v0",
}
"""MyoSuite tasks (``env.env_type=myosuite``) as upstream names them (its ``MYOSUITE_TASKS_DICT``: the ten hand tasks
of its published results), with the MyoSuite environment id each one makes."""

MYOSUITE_EXTRA_MODULES: tuple[str, ...] = ("myosuite",)
"""What ``env.env_type=myosuite`` needs (the ``myosuite`` extra)."""

PLAYGROUND_DM_TASKS: tuple[str, ...] = (
    "AcrobotSwingup", "AcrobotSwingupSparse", "BallInCup", "CartpoleBalance", "CartpoleBalanceSparse",
    "CartpoleSwingup", "CartpoleSwingupSparse", "CheetahRun", "FingerSpin", "FingerTurnEasy", "FingerTurnHard",
    "FishSwim", "HopperHop", "HopperStand", "HumanoidRun", "HumanoidStand", "HumanoidWalk", "PendulumSwingup",
    "PointMass", "ReacherEasy", "ReacherHard", "SwimmerSwimmer6", "WalkerRun", "WalkerStand", "WalkerWalk",
)
"""MuJoCo Playground's DM Control suite tasks (``env.env_type=mujoco_playground``), assets in the wheel."""

PLAYGROUND_LOCOMOTION_TASKS: dict[str, str] = {
    "G1JoystickFlatTerrain": "unitree_g1",
    "G1JoystickRoughTerrain": "unitree_g1",
    "T1JoystickFlatTerrain": "booster_t1",
    "T1JoystickRoughTerrain": "booster_t1",
}
"""Upstream's published MuJoCo Playground tasks, with the MuJoCo Menagerie folder of each one's robot."""

PLAYGROUND_TASKS: tuple[str, ...] = PLAYGROUND_DM_TASKS + tuple(PLAYGROUND_LOCOMOTION_TASKS)

PLAYGROUND_EXTRA_MODULES: tuple[str, ...] = ("jax", "mujoco_playground", "mujoco_mjx")
"""What ``env.env_type=mujoco_playground`` needs (the ``playground`` extra)."""

MJLAB_TASKS: tuple[str, ...] = (
    "Mjlab-Velocity-Flat-Unitree-G1", "Mjlab-Velocity-Rough-Unitree-G1", "Mjlab-Velocity-Flat-Unitree-Go1",
    "Mjlab-Velocity-Rough-Unitree-Go1", "Mjlab-Lift-Cube-Yam", "Mjlab-Cartpole-Balance", "Mjlab-Cartpole-Swingup",
)
"""mjlab tasks (``env.env_type=mjlab``, torch agent): upstream's (scripts/run_mjlab.sh), assets in mjlab's wheel.
mjlab's other tasks observe camera images or need motion files (tests/test_mjlab_envs.py checks the list against the
installed mjlab)."""

MJLAB_EXTRA_MODULES: tuple[str, ...] = ("mjlab",)
"""What ``env.env_type=mjlab`` needs (the ``mjlab`` extra)."""

MENAGERIE_ENV = "MUJOCO_MENAGERIE_PATH"
"""Environment variable with a MuJoCo Menagerie checkout, used when ``env.menagerie_path`` is null."""

ENV_TYPES: dict[str, tuple[str, ...]] = {
    "mujoco": SUPPORTED_ENVS,
    "mjx": MJX_TASKS,
    "dmc": DMC_TASKS,
    "mujoco_playground": PLAYGROUND_TASKS,
    "mjlab": MJLAB_TASKS,
    "myosuite": tuple(MYOSUITE_TASKS),
}
"""``env.env_type`` values and the ``env.env_name`` values each allows."""

VECTOR_ENV_TYPES: tuple[str, ...] = ("mjx", "mujoco_playground", "mjlab")
"""The env types stepped on the device by ``agent_common.vector_loop`` (the others by the gymnasium loop)."""

MJX_TRAINING_FRAMEWORKS: tuple[str, ...] = ("jax", "torch")
"""The agents whose training CLI steps ``env.env_type=mjx`` (``agent_common.vector_loop``); the others exit 2."""

MJX_EXTRA_MODULES: tuple[str, ...] = ("jax", "brax", "mujoco_mjx")
"""What ``env.env_type=mjx`` needs (the ``mjx`` extra); ``mujoco_mjx`` stands for the mujoco-mjx distribution."""

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

SEED_MAX = 2**31 - 1  # the largest seed every RNG of both agents accepts (numpy, torch, the JAX PRNG key)
INT64_MAX = 2**63 - 1  # step counters, schedules and buffer indices are int64 in both agents
FLOAT32_MAX = 3.4028234663852886e38  # the agents compute in float32: a larger value becomes inf
LEARNING_RATE_MAX = 1.0  # Adam moves every weight by about the learning rate per step; above 1 the weights diverge
FASTEST_ENV_STEPS_PER_SECOND = 10**8  # far above any simulator these agents step (MJX on one GPU included)
LONGEST_WAIT_SECONDS = 30 * 86400  # an evaluation or checkpoint further away than this at that rate never comes
SMALLEST_ROW_BYTES = 4 * (2 * 11 + 3 + 3)  # one replay row of the smallest task (Hopper: O=11, A=3), float32


class ConfigError(ValueError):
    """An invalid configuration: unknown key, wrong type or invalid value. The message names the key."""


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

    env_type: str = "mujoco"  # mujoco (gymnasium) | mjx | mujoco_playground | mjlab (vector_loop) | dmc | myosuite
    env_name: str = "HalfCheetah-v4"  # one of ENV_TYPES[env_type]
    rescale_action: bool = True  # RescaleAction to [-1, 1] (the paper-era actor assumes [-1, 1])
    max_episode_steps: int | None = None  # null or <= 0 keeps the task's TimeLimit (1000; DMC: 1000; MyoSuite: 50-200)
    num_train_envs: int | None = None  # null -> top-level num_train_envs (upstream interpolation)
    num_eval_envs: int | None = None  # null -> top-level num_eval_envs
    menagerie_path: str | None = None  # Menagerie checkout (Playground locomotion); null: $MUJOCO_MENAGERIE_PATH
    device: str | None = None  # mjlab: the simulator's torch device (cpu | cuda | cuda:N); null: the agent's device


@dataclass
class AgentConfig(_Freezable):
    """``agent.*`` keys with upstream ``FlashSACConfig`` names (docs/flashsac.md) plus project keys."""

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
    actor_head: str = "paper"  # paper | upstream: actor head (log-std range, head projection/init, action scaling)
    # temperature
    temp_initial_value: float = 0.01  # initial alpha
    temp_target_sigma: float = 0.15  # target entropy = entropy of N(0, sigma^2) per dim + sum log range
    temp_target_entropy: float | None = None  # null -> derived from the action space (target_entropy())
    # learning rate: warm-up then cosine decay, per network optimizer step
    learning_rate_init: float = 3e-4  # learning rate at the first update (start of the warm-up)
    learning_rate_peak: float = 3e-4  # learning rate at the end of the warm-up (at most 1)
    learning_rate_end: float = 1.5e-4  # learning rate at the end of the cosine decay
    learning_rate_warmup_rate: float = 1e-6  # warm-up steps = int(rate * N_int * UTD)
    learning_rate_decay_rate: float = 1.0  # decay steps = int(rate * N_int * UTD)
    learning_rate_warmup_step: int | None = None  # derived when null
    learning_rate_decay_step: int | None = None  # derived when null
    # replay buffer
    sample_batch_size: int = 512  # B (CPU-sim recipe; yaml default 2048)
    buffer_max_length: int = 1_000_000  # replay capacity in transitions (oldest overwritten first)
    buffer_min_length: int = 10_000  # uniform random actions and no updates until this many transitions
    buffer_device_type: str = "auto"  # auto | cpu | cuda: where the replay rows live (docs/flashsac.md)
    act_before_update: bool = False  # changes the algorithm: act before the step's update (policy 1 update old)
    # precision and compilation
    use_amp: bool = False  # mixed-precision update: torch autocast / jax bf16 or fp16 compute dtype (agent.amp_dtype)
    amp_dtype: str = "auto"  # auto | bf16 | fp16 (with use_amp): auto = fp16 + loss scale on a GPU, bf16 on the CPU
    use_compile: bool = True  # torch.compile the networks (torch); ignored by jax (always jit)
    compile_mode: str = "auto"  # auto | off | torch.compile modes; auto -> off (on CUDA: CUDA graphs instead)
    compile_scope: str = "networks"  # torch: networks (each forward + projection) | update (whole update + acting)
    use_cuda_graph: bool = True  # project key (torch): capture update + acting in CUDA graphs; jax ignores it
    overlap_critic_step: bool = False  # torch, CUDA graphs: acting waits for the update's actor part only (bitwise)
    compilation_cache_dir: str = "auto"  # jax: auto ($JAX_COMPILATION_CACHE_DIR, else user cache dir) | off | a path
    compilation_cache_max_mb: int = 4096  # jax: size cap of that cache in MiB (least recently used programs removed)
    # checkpoint loading
    load_optimizer: bool = True  # restore optimizer/scheduler/scaler state on load
    load_reward_normalizer: bool = True  # restore reward normaliser on load
    # project keys
    categorical_target_backend: str = "auto"  # auto, the reference or a kernel of the framework (BACKENDS)
    categorical_target_strict: bool = False  # any backend fallback becomes an error


@dataclass
class Config(_Freezable):
    """Top-level keys (upstream ``configs/flashSAC_base.yaml``) plus the ``env`` and ``agent`` groups.

    Interval keys are in interaction steps (env steps / num_train_envs); null means derived from N.
    """

    project_name: str = "FlashRL"  # W&B project (upstream's key)
    group_name: str = "test"  # run group: part of the default save_path; W&B group
    entity_name: str | None = None  # W&B entity (upstream's key; null: the W&B account's default entity)
    exp_name: str = "FlashSAC"  # written to the CSV's exp_name column (upstream results use "FlashSAC")
    seed: int = 0  # seed of every RNG (envs, networks, noise, replay sampling)
    logger_type: str = "tensorboard"  # tensorboard | wandb | none, or a comma list (tensorboard,wandb)
    save_path: str | None = None  # run directory; null -> runs/<group>/<exp>/<env>/seed<seed>-<MMDD-HHMMSS>
    agent_load_path: str | None = None  # run dir (-> its newest complete checkpoint) or checkpoint dir to resume
    buffer_load_path: str | None = None  # replay_buffer.pkl to load (default: the checkpoint's)
    agent_init_path: str | None = None  # a NEW run starts from this checkpoint's weights (run/checkpoint/converted dir)
    agent_init_optimizer: bool = True  # with agent_init_path: also its Adam moments and step counts (LR schedule fresh)
    agent_init_reward_normalizer: bool = True  # with agent_init_path: also its reward normaliser statistics
    num_env_steps: int = 1_000_000  # training budget in env steps (all train envs together)
    num_train_envs: int = 1  # parallel training environments
    num_eval_envs: int = 1  # parallel evaluation environments
    num_record_envs: int = 1  # envs filmed side by side in each evaluation video (with record_video=true)
    num_eval_episodes: int = 50  # episodes per evaluation (0: no evaluation)
    num_record_episodes: int = 1  # episodes per evaluation video (rounds of num_record_envs; with record_video=true)
    gamma: float = 0.99  # discount factor
    n_step: int = 1  # n-step returns in the TD target
    updates_per_interaction_step: float = 1.0  # UTD; fractional values accumulate
    evaluation_per_interaction_step: int | None = None  # null -> N/10
    metrics_per_interaction_step: int | None = None  # null -> N/10 (no extra metrics are computed)
    recording_per_interaction_step: int | None = None  # null -> N: a video at the start, every N and at the end
    logging_per_interaction_step: int | None = None  # null -> N/100
    save_checkpoint_per_interaction_step: int | None = None  # null -> N/10 (and always at the end)
    save_buffer_per_interaction_step: int | None = None  # null -> with every checkpoint if save_buffer, else every k
    # project keys
    record_video: bool = False  # evaluation videos in <run>/videos/*.mp4 (every env type; MUJOCO_GL=egl|osmesa)
    record_size: int = 480  # evaluation video frame width and height in pixels
    recipe: str | None = None  # named recipe under the overrides (agent_common.recipes: smoke | gym | mjx); null: none
    save_buffer: bool = True  # replay buffer in every checkpoint (exact resume); always on Ctrl-C / budget stops
    keep_checkpoints: int = 2  # newest complete checkpoints kept in <run>/checkpoints (older ones are deleted)
    overwrite_incomplete: bool = False  # start over in a save_path whose run has no complete checkpoint (its files
    # are moved to <save_path>/incomplete-<k>/ first, nothing is deleted)
    rederive_schedule_on_resume: bool = False  # resume: re-derive LR steps and intervals from num_env_steps (explicit
    # values of the run are re-derived too; this command line's overrides still win)
    max_wall_seconds: float | None = None  # checkpoint and exit cleanly once this much wall time has passed
    deterministic: bool = False  # deterministic algorithms (bitwise reproducible on CPU)
    progress_bar: bool = True  # tqdm bar with env steps/s, updates/s and the latest eval return
    num_threads: int | None = None  # framework intra-op threads (torch.set_num_threads); null = default
    num_devices: int = 1  # jax: local devices the update is data-parallel over (batch sharded); torch: 1 (torchrun)
    distributed_timeout_seconds: float = 1800.0  # torch under torchrun: a collective waiting longer fails the run
    interaction_steps_per_call: int | None = None  # mjx: most interaction steps per agent call (JAX: the lax.scan
    # length K); null -> derived from the logging interval (agent_common.vector_loop.interaction_steps_per_call)
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
"""Every valid dotted key."""

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

_CHOICES: dict[str, tuple[Any, ...]] = {
    "env.env_type": tuple(ENV_TYPES),
    "env.env_name": SUPPORTED_ENVS,  # replaced by ENV_TYPES[env.env_type] in _validate
    "agent.device_type": ("auto", "cpu", "cuda"),
    "agent.buffer_device_type": ("auto", "cpu", "cuda"),
    "agent.compile_mode": COMPILE_MODES,
    "agent.compile_scope": COMPILE_SCOPES,
    "agent.amp_dtype": ("auto", "bf16", "fp16"),
    "agent.actor_head": ("paper", "upstream"),
    "agent.asymmetric_observation": (False,),
}


def close_keys(key: str, n: int = 3) -> list[str]:
    """The few known keys closest to a misspelled one (whole key, then its last part: a key without its group)."""
    found = difflib.get_close_matches(key, KNOWN_KEYS, n=n, cutoff=0.6)
    if not found:
        last = {k.rsplit(".", 1)[-1]: k for k in KNOWN_KEYS}
        found = [last[m] for m in difflib.get_close_matches(key.rsplit(".", 1)[-1], list(last), n=n, cutoff=0.75)]
    return found


def check_key(key: str, suggestions: Sequence[str] = ()) -> None:
    """Raises ``ConfigError`` for a key that is not in ``KNOWN_KEYS``, naming the few closest keys only
    (``suggestions``, else ``close_keys``) and where the full list is (``--help``)."""
    if key in _FIELDS:
        return
    found = list(suggestions) or close_keys(key)
    hint = f" Did you mean: {', '.join(found)}?" if found else " No known key is close to it."
    raise ConfigError(f"unknown config key '{key}'.{hint} Every key with its type, default and meaning: --help")


_CLASS_PREFIX = {"Config": "", "EnvConfig": "env.", "AgentConfig": "agent."}
_SOURCE_CLASS = re.compile(r"^class (\w+)\(")
_SOURCE_FIELD = re.compile(r"^    (\w+): [^=]+? = (.+?)(?:  # (.*))?$")
_SOURCE_COMMENT = re.compile(r"^    # ?(.*)$")


def field_docs() -> dict[str, tuple[str, str]]:
    """Every key's (section, one-line meaning), read from the comments of the config dataclasses in this file: the
    comment after a field is its meaning (continued on the next comment line while a parenthesis is open); a comment
    line between fields starts a section."""
    with open(__file__, encoding="utf-8") as f:
        lines = f.read().splitlines()
    docs: dict[str, list[str]] = {}
    prefix: str | None = None
    section, last = "", None
    for line in lines:
        match = _SOURCE_CLASS.match(line)
        if match or (line and not line.startswith(" ")):
            prefix = _CLASS_PREFIX.get(match.group(1)) if match else None
            section, last = "", None
            continue
        if prefix is None:
            continue
        match = _SOURCE_FIELD.match(line)
        if match and prefix + match.group(1) in _FIELDS:
            last = prefix + match.group(1)
            docs[last] = [section, (match.group(3) or "").strip()]
            continue
        match = _SOURCE_COMMENT.match(line)
        if match:
            text = match.group(1).strip()
            if last is not None and docs[last][1].count("(") > docs[last][1].count(")"):
                docs[last][1] += " " + text
            else:
                section, last = text, None
    return {key: (docs[key][0], docs[key][1]) for key in KNOWN_KEYS if key in docs}


def field_default(key: str) -> Any:
    """The default value of a dotted key (None where null means derived or mirrored)."""
    return _FIELDS[key].default


def _default_text(key: str) -> str:
    value = field_default(key)
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def config_help() -> str:
    """Every config key with its type, default and meaning, grouped (top-level, ``env.*``, ``agent.*``, then the
    sections of the schema), for ``--help``."""
    docs = field_docs()
    out = ["config keys (--overrides KEY=VALUE; type = default, meaning):"]
    heading = None
    for key in KNOWN_KEYS:
        section, meaning = docs.get(key, ("", ""))
        group = key.split(".")[0] if "." in key else "top-level"
        title = f"{group}: {section}" if section else group
        if title != heading:
            out += ["", f"{title}"]
            heading = title
        base, nullable = field_type(key)
        kind = f"{base}{'|null' if nullable else ''} = {_default_text(key)}"
        out.append(f"  {key:<40} {kind:<22} {meaning}".rstrip())
    return "\n".join(out)


def field_type(key: str) -> tuple[str, bool]:
    """(base type name, nullable) of a dotted key: ``("int", True)`` for ``int | None``."""
    text = str(_FIELDS[key].type).replace(" ", "")
    parts = text.split("|")
    return [p for p in parts if p != "None"][0], "None" in parts


def _typed(key: str, value: Any) -> Any:
    """``value`` as the field's type (int -> float widening, integral floats -> int), else ``ConfigError``."""
    base, nullable = field_type(key)
    if value is None:
        if nullable:
            return None
        raise ConfigError(f"invalid value None for '{key}' (expected {base}): the key is not nullable")
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
    raise ConfigError(f"invalid value {value!r} for '{key}' (expected {base}{' or null' if nullable else ''})")


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"agent": {"gamma": 0.9}}`` -> ``{"agent.gamma": 0.9}`` (the ``env`` / ``agent`` groups only)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if not prefix and key in GROUPS and isinstance(value, Mapping):
            out.update(flatten(value, key + "."))
        else:
            out[prefix + key] = value
    return out


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dict of the config (for YAML / TensorBoard text)."""
    return dataclasses.asdict(cfg)


def _get(cfg: Config, key: str) -> Any:
    obj: Any = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def _require(cond: bool, key: str, value: Any, what: str) -> None:
    if not cond:
        raise ConfigError(f"invalid value {value!r} for '{key}': {what}")


def _validate(cfg: Config, framework: str) -> None:
    """Every check that needs no file, env or framework: types are already checked by ``build_config``."""
    choices = dict(_CHOICES, **{"agent.categorical_target_backend": BACKENDS[framework]})
    for key, allowed in choices.items():
        if key == "env.env_name":
            allowed = ENV_TYPES[cfg.env.env_type]  # env.env_type was checked just before
        value = _get(cfg, key)
        if value not in allowed:
            raise ConfigError(
                f"invalid value {value!r} for '{key}'. Allowed values: {', '.join(map(str, allowed))}"
                + (f" (framework {framework})" if key == "agent.categorical_target_backend" else "")
                + (f" (env.env_type {cfg.env.env_type})" if key == "env.env_name" else "")
            )
    _require(cfg.agent.compile_scope != "update" or cfg.agent.compile_mode in SCOPE_UPDATE_MODES,
             "agent.compile_mode", cfg.agent.compile_mode,
             f"agent.compile_scope=update replays the compiled update in the agent's own CUDA graphs, so the mode "
             f"must bring none: one of {', '.join(SCOPE_UPDATE_MODES)} (or agent.compile_scope=networks)")
    if cfg.recipe is not None and cfg.recipe not in RECIPES:
        raise ConfigError(f"invalid value for 'recipe': {unknown_recipe(cfg.recipe)}")
    for key in KNOWN_KEYS:  # no inf or nan anywhere: each would fail (or silently misbehave) after setup
        value = _get(cfg, key)
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
        value = _get(cfg, key)
        _require(value is not None and value >= 1, key, value, "must be an integer >= 1")
    _require(cfg.record_size % 2 == 0, "record_size", cfg.record_size, "must be even (H.264 video frames)")
    for key in ("num_record_envs", "num_record_episodes"):
        _require(_get(cfg, key) >= 0, key, _get(cfg, key), "must be an integer >= 0")
    for key in [k for k in KNOWN_KEYS if k.endswith("_per_interaction_step")] + ["num_threads",
                                                                                   "interaction_steps_per_call"]:
        value = _get(cfg, key)
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
            f"invalid value {_get(cfg, key)!r} for '{key}': the support [critic_min_v, critic_max_v] = "
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
        sub_value = _get(cfg, sub)
        _require(
            sub_value is None or sub_value == _get(cfg, top),
            sub,
            sub_value,
            f"mirrors '{top}' (= {_get(cfg, top)!r}); set '{top}' instead or make them equal",
        )
    _require(
        not (cfg.overwrite_incomplete and cfg.agent_load_path is not None),
        "overwrite_incomplete",
        cfg.overwrite_incomplete,
        "starts a run over in save_path; it cannot be combined with agent_load_path (a resume)",
    )
    _validate_derived(cfg)
    _require(not (cfg.record_video and cfg.env.env_type in VECTOR_ENV_TYPES
                  and cfg.num_record_envs > cfg.num_eval_envs), "num_record_envs", cfg.num_record_envs,
             f"must be <= num_eval_envs={cfg.num_eval_envs} with env.env_type={cfg.env.env_type}: the filmed envs are "
             "copies of the first evaluation envs")
    _require(not (cfg.record_video and cfg.env.env_type == "mjlab"), "record_video", cfg.record_video,
             "must be false with env.env_type=mjlab: its evaluation videos are not recorded (MuJoCo Warp's state is "
             "not rendered here)")
    if cfg.env.env_type == "mjx":
        _validate_mjx(cfg)
    if cfg.env.env_type == "mujoco_playground":
        _validate_playground(cfg)
    if cfg.env.env_type == "mjlab":
        _validate_mjlab(cfg, framework)
    else:
        _require(cfg.env.device is None, "env.device", cfg.env.device,
                 f"is the mjlab simulator's device; leave it null with env.env_type={cfg.env.env_type}")
    if cfg.env.env_type == "dmc":
        missing = dmc_missing()
        if missing:
            raise ConfigError(
                f"invalid value 'dmc' for 'env.env_type': the DeepMind Control tasks need the dmc extra "
                f"(pip install -e \".[dmc]\"); not installed: {', '.join(missing)}"
            )
    if cfg.env.env_type == "myosuite":
        missing = myosuite_missing()
        if missing:
            raise ConfigError(
                f"invalid value 'myosuite' for 'env.env_type': the MyoSuite tasks need the myosuite extra "
                f"(pip install -e \".[myosuite]\"); not installed: {', '.join(missing)}"
            )


def dmc_missing() -> list[str]:
    """The modules of ``DMC_EXTRA_MODULES`` that are not installed (found without importing them)."""
    return [name for name in DMC_EXTRA_MODULES if importlib.util.find_spec(name) is None]


def myosuite_missing() -> list[str]:
    """The modules of ``MYOSUITE_EXTRA_MODULES`` that are not installed (found without importing them)."""
    return [name for name in MYOSUITE_EXTRA_MODULES if importlib.util.find_spec(name) is None]


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
        value = _get(cfg, key)
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
        if _get(cfg, key) is None:
            rate = key.replace("_step", "_rate")
            _require(derived[key] <= INT64_MAX, rate, _get(cfg, rate),
                     f"derives {key}={derived[key]} (rate * num_env_steps / num_train_envs * UTD), beyond int64")
    limit = FASTEST_ENV_STEPS_PER_SECOND * LONGEST_WAIT_SECONDS
    events = ["save_checkpoint_per_interaction_step", "logging_per_interaction_step"]
    if cfg.num_eval_episodes > 0:
        events.insert(0, "evaluation_per_interaction_step")
    for key in events:
        given = _get(cfg, key)
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


def _missing_modules(modules: tuple[str, ...]) -> list[str]:
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


def mjx_missing() -> list[str]:
    """The modules of ``MJX_EXTRA_MODULES`` that are not installed."""
    return _missing_modules(MJX_EXTRA_MODULES)


LOGGER_TYPES: tuple[str, ...] = ("tensorboard", "wandb", "none")
"""What ``logger_type`` may name (one, or several joined by commas)."""


def loggers(cfg: Config) -> tuple[str, ...]:
    """The loggers ``cfg.logger_type`` names: ``"tensorboard,wandb"`` -> ``("tensorboard", "wandb")``; ``none`` ->
    ``()``."""
    return tuple(name for name in (part.strip() for part in cfg.logger_type.split(",")) if name and name != "none")


def _validate_loggers(value: str) -> None:
    names = [part.strip() for part in value.split(",")]
    bad = [name for name in names if name not in LOGGER_TYPES]
    if bad or not names or ("none" in names and len(names) > 1):
        raise ConfigError(
            f"invalid value {value!r} for 'logger_type'. Allowed values: {', '.join(LOGGER_TYPES)}, or several of "
            "tensorboard / wandb joined by commas (e.g. logger_type=tensorboard,wandb)"
        )


def playground_missing() -> list[str]:
    """The modules of ``PLAYGROUND_EXTRA_MODULES`` that are not installed (found without importing them)."""
    return _missing_modules(PLAYGROUND_EXTRA_MODULES)


def menagerie_problem(task: str, path: str | None) -> str | None:
    """None when ``task`` needs no MuJoCo Menagerie checkout or ``path`` holds its robot; else one line saying what
    is missing and where to get it."""
    robot = PLAYGROUND_LOCOMOTION_TASKS.get(task)
    if robot is None:
        return None
    get = ("git clone https://github.com/google-deepmind/mujoco_menagerie and set env.menagerie_path=<dir> "
           f"(or {MENAGERIE_ENV}=<dir>)")
    if not path:
        return f"{task} loads its robot from a MuJoCo Menagerie checkout and none is set: {get}"
    if not os.path.isdir(os.path.join(path, robot)):
        return f"{task} needs {os.path.join(path, robot)} (MuJoCo Menagerie's {robot}), which does not exist: {get}"
    return None


def _validate_playground(cfg: Config) -> None:
    """``env.env_type=mujoco_playground``: the extra, actions left to the task, the Menagerie checkout of a
    locomotion task, and the vectorised env count (as ``mjx``)."""
    missing = playground_missing()
    if missing:
        raise ConfigError(
            f"invalid value 'mujoco_playground' for 'env.env_type': MuJoCo Playground needs the playground extra "
            f"(pip install -e \".[mjx,playground]\"); not installed: {', '.join(missing)}"
        )
    _require(not cfg.env.rescale_action, "env.rescale_action", cfg.env.rescale_action,
             "MuJoCo Playground tasks take actions in [-1, 1] themselves; set env.rescale_action=false")
    path = cfg.env.menagerie_path or os.environ.get(MENAGERIE_ENV) or None
    problem = menagerie_problem(cfg.env.env_name, path)
    if problem:
        raise ConfigError(f"invalid value {path!r} for 'env.menagerie_path': {problem}")
    _validate_vector(cfg)


def mjlab_missing() -> list[str]:
    """The modules of ``MJLAB_EXTRA_MODULES`` that are not installed (found without importing them)."""
    return _missing_modules(MJLAB_EXTRA_MODULES)


def _validate_mjlab(cfg: Config, framework: str) -> None:
    """``env.env_type=mjlab``: the torch agent, the extra, actions left to the task, the simulator's device, and the
    vectorised env count (as ``mjx``)."""
    _require(framework == "torch", "env.env_type", cfg.env.env_type,
             f"mjlab steps MuJoCo Warp from torch and is wired into the torch agent only (got the {framework} agent); "
             "train it with python -m agent_torch.train")
    missing = mjlab_missing()
    if missing:
        raise ConfigError(
            f"invalid value 'mjlab' for 'env.env_type': mjlab's tasks need the mjlab extra "
            f"(pip install -c constraints/ci.txt -e \".[mjlab]\"); not installed: {', '.join(missing)}"
        )
    _require(not cfg.env.rescale_action, "env.rescale_action", cfg.env.rescale_action,
             "mjlab tasks take actions in [-1, 1] and scale them themselves; set env.rescale_action=false")
    device = cfg.env.device
    _require(device is None or re.fullmatch(r"cpu|cuda(:\d+)?", device) is not None, "env.device", device,
             "must be null (the agent's device), cpu, cuda or cuda:N")
    _validate_vector(cfg)


def _validate_mjx(cfg: Config) -> None:
    """``env.env_type=mjx``: the extra is installed, and the vectorised env count fits the buffer and the batch."""
    missing = mjx_missing()
    if missing:
        raise ConfigError(
            f"invalid value 'mjx' for 'env.env_type': the MJX environments need the mjx extra "
            f"(pip install -e \".[mjx]\"); not installed: {', '.join(missing)}"
        )
    _validate_vector(cfg)


def _validate_vector(cfg: Config) -> None:
    """An env type of ``VECTOR_ENV_TYPES``: the vectorised env count fits the buffer and the batch."""
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
    # the training program runs the same steps every interaction step (agent_common.vector_loop)
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
        framework: the agent that trains (``"torch"`` / ``"jax"``); None: the gymnasium loop, which steps no MJX
            environments.

    Raises:
        ConfigError: ``agent.buffer_min_length`` above ``num_env_steps`` (the run would end without one update), or
            ``env.env_type=mjx`` for an agent not in ``MJX_TRAINING_FRAMEWORKS``.
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
    _require(not (cfg.agent.act_before_update and cfg.env.env_type in VECTOR_ENV_TYPES), "agent.act_before_update",
             cfg.agent.act_before_update, f"applies to the gymnasium loop (env.env_type=mujoco or dmc), not to "
             f"env.env_type={cfg.env.env_type} (its envs step on the device): drop the override")
    _require(not (cfg.agent.act_before_update and cfg.num_devices > 1), "agent.act_before_update",
             cfg.agent.act_before_update, f"is not supported with num_devices={cfg.num_devices} (data parallel): "
             "drop the override or set num_devices=1")
    if cfg.env.env_type in VECTOR_ENV_TYPES and cfg.agent_init_path is not None:
        raise ConfigError(f"agent_init_path={cfg.agent_init_path}: starting from weights is wired into the gymnasium "
                          f"loop (env.env_type=mujoco or dmc), not into the vector loop (env.env_type="
                          f"{cfg.env.env_type}) yet")
    if cfg.env.env_type in VECTOR_ENV_TYPES and framework not in MJX_TRAINING_FRAMEWORKS:
        raise ConfigError(
            f"env.env_type={cfg.env.env_type!r} is not wired into this agent yet: the gymnasium training loop steps "
            "gymnasium only; "
            "train MJX tasks through an agent CLI that runs agent_common.vector_loop, or use env.env_type=mujoco"
        )


def run_dir_of_checkpoint(path: str) -> str:
    """``<run>/checkpoints/step<k>`` -> ``<run>``; a run directory is returned unchanged."""
    path = os.path.normpath(path)
    parent = os.path.dirname(path)
    if os.path.basename(parent) == "checkpoints":
        return os.path.dirname(parent)
    return path


def _default_save_path(cfg: Config) -> str:
    """``runs/<group>/<exp>/<env>/seed<seed>-<MMDD-HHMMSS>``, with a ``-<k>`` suffix if that directory exists (two
    runs started in the same second get two directories)."""
    stamp = time.strftime("%m%d-%H%M%S")
    base = os.path.join("runs", cfg.group_name, cfg.exp_name, cfg.env.env_name, f"seed{cfg.seed}-{stamp}")
    path, k = base, 1
    while os.path.exists(path):
        path, k = f"{base}-{k}", k + 1
    return path


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


def _resolve(cfg: Config) -> Config:
    """Fill derived fields in code (no eval resolvers), as upstream's interpolations would."""
    derived = budget_defaults(cfg)

    def pick(key: str) -> Any:
        value = _get(cfg, key)
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
    env = dataclasses.replace(cfg.env, num_train_envs=cfg.num_train_envs, num_eval_envs=cfg.num_eval_envs)
    save_path = cfg.save_path
    if save_path is None and cfg.agent_load_path is not None:
        save_path = run_dir_of_checkpoint(cfg.agent_load_path)
    if save_path is None:
        save_path = _default_save_path(cfg)
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
        flat[key] = _typed(key, value)
    groups: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
    top: dict[str, Any] = {}
    for key, value in flat.items():
        group, _, name = key.partition(".")
        if name:
            groups[group][name] = value
        else:
            top[key] = value
    cfg = Config(**top, env=EnvConfig(**groups["env"]), agent=AgentConfig(**groups["agent"]))
    _validate(cfg, framework)
    resolved = _resolve(cfg)
    resolved._freeze()
    return resolved


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
        old = _typed(key, stored[key])
        new = _typed(key, value)
        if new != old:
            out.append(f"{key}={new!r} would change the {what} of the checkpoint ({key}={old!r} there)")
    return out


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
