"""Framework-free FlashSAC pieces shared by ``agent_torch`` and ``agent_jax`` (numpy, gymnasium, omegaconf only).

The configuration (each idea in one module)
    keys        every config key declared once (type, default, meaning), ``ConfigError``, the derived defaults
    validation  the checks of a config, the simulator's own (``simulators``) included
    help        ``--help`` built from the declarations
    config      ``build_config(values)``, ``load_config(overrides)`` (recipes, a resume's stored config),
                ``parse_args(argv)``: the command line, parsed once
    recipes     the named recipes (``--recipe smoke | gym | mjx | dmc | playground | myosuite | mjlab``)

Training (one driver, two steppers)
    cli         ``run(cfg, framework)``: the training command below the parsing (exit statuses, summary lines)
    driver      ``train(cfg, make_trainer)``: evaluation, logging, checkpoints, stop signals, videos, progress
    trainer     ``Trainer``: what the driver calls on a stepper
    host        ``HostStepper``: gymnasium, DMC, MyoSuite envs on the host over an ``Agent`` (``protocol``)
    device      ``DeviceStepper``: MJX, Playground, mjlab on the device over a framework's ``DeviceTrainer``
    protocol    ``Agent`` (what the host stepper calls), ``Capabilities``, ``check_agent``
    runs/       the run's lifecycle: directory, checkpoints (atomic, verified, recovered, pruned), resume,
                start from weights (its ``__init__`` maps it)
    replicas    data-parallel replicas as the driver sees them

Pieces
    envs        the host simulators' vector envs (SameStep autoreset, true final observations, snapshots),
                ``evaluate(act, envs, num_episodes)``
    buffer, noise, normalizer, schedule, seeding
                ``ReplayBuffer`` (n-step), ``ZetaNoise``, ``RewardNormalizer``, ``warmup_cosine_decay``, RNG streams
    logger, wandb_logger, video, plot, policy, architecture
                TensorBoard / ``eval.csv`` / W&B, evaluation videos, ``python -m agent_common.plot``,
                ``load_policy`` and ``python -m agent_<framework>.evaluate``, what a checkpoint's shapes state

Agent interface (what the host stepper calls; ``agent_common.protocol``: the protocols and their check; both
frameworks implement it identically)
    ``make_agent(cfg: Config, observation_space: Box, action_space: Box) -> agent``
        Seeds the framework RNG from ``cfg.seed`` and builds networks; target entropy from ``target_entropy``.
    ``agent.act(observation: (E, O) float32, noise: (E, A) float32 | None) -> (E, A) float32``
        ``noise=None``: deterministic ``tanh(mu)`` (evaluation). Otherwise ``tanh(mu + sigma * noise)`` with the
        noise from ``ZetaNoise.sample()`` (BN on running stats, no autocast). Must not consume framework RNG.
    ``agent.update(batch: dict[str, np.ndarray]) -> dict[str, float]``
        One FlashSAC update (actor + temperature when ``update_step % actor_update_period == 0``, then critic,
        then target EMA). ``batch`` has ``buffer.BATCH_KEYS``; ``batch["reward"]`` is already normalised.
        Returns upstream metric names (``critic/loss``, ``actor/loss``, ``temperature/value``, ...). Raises
        ``FloatingPointError`` on a non-finite loss.
    ``agent.save(directory: str)`` / ``agent.load(directory: str, load_optimizer: bool = True)``
        Networks, target, optimizers, schedulers, grad scaler, update counter and framework RNG state; files
        written with ``runs.files.atomic_write``. The driver saves everything else (counters, python/numpy RNG,
        env states, noise, reward normaliser, optional replay buffer) in ``loop_state.pkl``.
    ``agent.info() -> dict[str, float | str]``
        Diagnostics: ``backend/fallback_count`` (float), ``backend/selected`` (str, logged as text) and
        ``compile/path`` (str: how the agent computes -- compilation, CUDA graphs, jit cache -- and why; the driver
        also prints it once on stderr at the start of training).
    ``agent.capabilities`` (``protocol.Capabilities``): which of the optional parts below the agent implements.
    Optional (``device_replay``), for an agent that keeps the replay rows on its device (``agent.buffer_device_type``):
    ``agent.replay_storage(capacity) -> buffer.RowStorage | None``
        Called once by the stepper; a storage makes its ``ReplayBuffer`` write its rows there and turns on:
    ``agent.step(observation, noise | None, num_updates, reward_scale) -> (E, A) action | None``
        Per env step, after the transition is stored: the due updates on batches the agent samples itself
        (rewards divided by ``reward_scale``), then the action for ``observation`` (None when ``noise`` is None).
    ``agent.take_metrics() -> {name: (sum, count)}``
        The metrics of ``step`` since the last call (read at logging steps and checkpoints).
    ``agent.precompile_step(num_envs)`` (optional too: ``precompile_step``)
        Called once before the initial evaluation: starts compiling the first updates' programs in the background.
    Optional for any agent (``policy_snapshot``):
    ``agent.policy_snapshot() -> (obs: (E, O) float32) -> (E, A) float32``
        The deterministic policy as it is now (``act(obs, None)``), unchanged by later updates and callable from
        another thread; every evaluation acts with a fresh one (both agents' run on the host, beside the envs), and
        the driver's background initial evaluation runs alongside the updates; without it evaluations call ``act``
        and the initial one runs before the first step.

Checkpoint layout: ``agent_common.runs``.
"""

from typing import Any

from agent_common.buffer import BATCH_KEYS, ReplayBuffer
from agent_common.keys import AgentConfig, Config, ConfigError, EnvConfig, target_entropy
from agent_common.noise import ZetaNoise
from agent_common.normalizer import RewardNormalizer
from agent_common.runs.checkpoints import resolve_checkpoint
from agent_common.runs.files import atomic_pickle, atomic_write, atomic_write_text, load_pickle
from agent_common.schedule import warmup_cosine_decay

__all__ = [
    "BATCH_KEYS",
    "AgentConfig",
    "Config",
    "ConfigError",
    "EnvConfig",
    "ReplayBuffer",
    "RewardNormalizer",
    "ZetaNoise",
    "atomic_pickle",
    "atomic_write",
    "atomic_write_text",
    "build_config",
    "load_config",
    "load_pickle",
    "parse_args",
    "resolve_checkpoint",
    "target_entropy",
    "warmup_cosine_decay",
]


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the package does not import omegaconf (the command line's YAML reader).
    if name in ("build_config", "load_config", "parse_args"):
        from agent_common import config

        return getattr(config, name)
    raise AttributeError(f"module 'agent_common' has no attribute {name!r}")
