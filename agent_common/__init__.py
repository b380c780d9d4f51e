"""Framework-free FlashSAC pieces shared by ``agent_torch`` and ``agent_jax`` (numpy, gymnasium, omegaconf only).

Modules
    schema      standard library only: the ``Config`` schema (``env.*``, ``agent.*`` with upstream key names),
                ``build_config(values, framework)``, validation, derived fields, ``ConfigError``,
                ``RESUME_LOCKED`` (what a resume may not change), ``target_entropy(agent_cfg, low, high)``.
    config      the command line (omegaconf): ``load_config(overrides, framework)``, ``parse_args(argv, framework)``
                (``--overrides key=value``, repeatable, "did you mean"), the run's stored config on resume.
    envs        ``make_env``, ``make_vec_env`` (SameStep autoreset; gymnasium MuJoCo or DMC through shimmy),
                ``step_env`` -> ``StepResult`` (true final obs for finished episodes), ``evaluate(act, envs,
                num_episodes)``, ``get_env_states``/``set_env_states``.
    noise       ``ZetaNoise`` (truncated-zeta noise repetition; ``sample() -> (E, A)``; state_dict/load_state_dict).
    normalizer  ``RewardNormalizer`` (``update(r, term, trunc)``, ``normalize(r)``, ``scale()``, state_dict).
    buffer      ``ReplayBuffer`` (n-step, numpy, seeded uniform sampling; ``add``, ``sample(B)``, state_dict; the rows
                optionally in an agent's ``RowStorage``).
    schedule    ``warmup_cosine_decay(step, init, peak, end, warmup_steps, decay_steps)``.
    logger      ``RunLogger`` (TensorBoard events via the tensorboard package, ``eval.csv`` in upstream's layout,
                ``config.yaml``), ``AverageMeter``, ``read_eval_csv``.
    checkpoint  ``atomic_write``, ``atomic_write_text``, ``atomic_pickle``, ``load_pickle``, ``resolve_checkpoint``,
                checkpoint discovery by scanning, crash recovery, pruning, ``CheckpointError``, ``DiskFullError``.
    recipes     standard library only: the named recipes (``--recipe smoke | gym | mjx | dmc | playground |
                myosuite | mjlab``).
    run         what both drivers share: ``TrainResult``, ``StopFlag``, ``prepare_run_dir``, ``kept_on_resume``.
    protocol    ``Agent`` (what the loop calls), ``Capabilities`` (its optional parts), ``check_agent``.
    loop        ``train(cfg, make_agent) -> TrainResult`` and ``run_cli(argv, framework, factory_loader)``.
    vector_loop ``train_vector(cfg, make_trainer, framework)``: the device driver (``env.env_type`` mjx,
                mujoco_playground or mjlab) over an agent's ``VectorTrainer`` (chunks of interaction steps on the
                device; evaluation, logging, checkpoints between).
    plot        ``python -m agent_common.plot <run_dir> [--reference published.csv]`` -> ``learning_curve.png``.

Agent interface (what ``loop.train`` calls; ``agent_common.protocol``: the protocols and their check; both frameworks
implement it identically)
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
        written with ``checkpoint.atomic_write``. The loop saves everything else (counters, python/numpy RNG,
        env states, noise, reward normaliser, optional replay buffer) in ``loop_state.pkl``.
    ``agent.info() -> dict[str, float | str]``
        Diagnostics: ``backend/fallback_count`` (float), ``backend/selected`` (str, logged as text) and
        ``compile/path`` (str: how the agent computes -- compilation, CUDA graphs, jit cache -- and why; the loop
        also prints it once on stderr at the start of training).
    ``agent.capabilities`` (``protocol.Capabilities``): which of the optional parts below the agent implements.
    Optional (``device_replay``), for an agent that keeps the replay rows on its device (``agent.buffer_device_type``):
    ``agent.replay_storage(capacity) -> buffer.RowStorage | None``
        Called once by the loop; a storage makes the loop's ``ReplayBuffer`` write its rows there and turns on:
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
        the loop's background initial evaluation runs alongside the updates; without it evaluations call ``act``
        and the loop waits for the initial one before its first call into the agent.

Checkpoint layout: ``<save_path>/checkpoints/step<env_step>/{agent/, config.yaml, loop_state.pkl, replay_buffer.pkl,
COMPLETE}`` (``COMPLETE``, written last, is the SHA-256 manifest of the other files, verified before a load);
``agent_load_path`` accepts the step directory or the run directory (its newest checkpoint that verifies, found by
scanning; damaged ones are moved to ``checkpoints/damaged/``; ``checkpoints/latest`` only names it for people).
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
    # Lazy, so that importing the schema (agent_common.schema) does not import omegaconf.
    if name in ("load_config", "parse_args"):
        from agent_common import config

        return getattr(config, name)
    raise AttributeError(f"module 'agent_common' has no attribute {name!r}")
