"""The training loop shared by both agents: env stepping, warm-up, updates, eval, logging, checkpoints, resume."""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from agent_common.buffer import ReplayBuffer
from agent_common.checkpoint import (
    atomic_pickle,
    checkpoint_dir,
    commit_checkpoint_dir,
    load_pickle,
    resolve_checkpoint,
)
from agent_common.config import Config, config_to_yaml, parse_args
from agent_common.envs import evaluate, get_env_states, make_vec_env, set_env_states, step_env
from agent_common.logger import AverageMeter, RunLogger
from agent_common.noise import ZetaNoise
from agent_common.normalizer import RewardNormalizer

__all__ = ["Agent", "AgentFactory", "TrainResult", "run_cli", "train"]

LOOP_STATE_FILE = "loop_state.pkl"
BUFFER_FILE = "replay_buffer.pkl"
AGENT_DIR = "agent"
# Independent RNG streams, all derived from cfg.seed (spawn keys keep them uncorrelated).
_NOISE_STREAM, _BUFFER_STREAM, _WARMUP_STREAM = 1, 2, 3


class Agent(Protocol):
    """What the loop needs from an agent (see ``agent_common.__init__`` for the full contract)."""

    def act(self, observation: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
        """(E, O) float32 -> (E, A) float32 actions in [-1, 1]; ``noise`` None means deterministic tanh(μ)."""
        ...

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """One FlashSAC update on a numpy batch (reward already normalised); returns upstream metric names."""
        ...

    def save(self, directory: str) -> None:
        """Writes the agent state (networks, optimizers, schedulers, scaler, counters, framework RNG)."""
        ...

    def load(self, directory: str, load_optimizer: bool = True) -> None:
        """Restores ``save`` output."""
        ...

    def info(self) -> dict[str, float | str]:
        """Diagnostics logged with the metrics (floats as scalars, strings as TensorBoard text)."""
        ...


AgentFactory = Callable[[Config, gym.spaces.Box, gym.spaces.Box], Agent]
"""``make_agent(cfg, observation_space, action_space) -> Agent``; seeds its framework RNG from ``cfg.seed``."""


@dataclasses.dataclass
class TrainResult:
    """Summary of one ``train`` call.

    Attributes:
        status: ``"completed"``, ``"budget"`` (max_wall_seconds reached) or ``"interrupted"`` (Ctrl-C).
        env_step: env steps done in total (including resumed ones).
        run_dir: the run directory.
        checkpoint: the last checkpoint directory written (None if none).
        evaluations: ``(env_step, metrics)`` for every evaluation of this call.
        wall_seconds: wall time of this call's loop.
        env_steps_per_second: env steps of this call / wall_seconds.
        updates_per_second: updates of this call / wall_seconds.
        update_seconds_mean: mean wall time of one ``agent.update`` call.
    """

    status: str
    env_step: int
    run_dir: str
    checkpoint: str | None
    evaluations: list[tuple[int, dict[str, float]]]
    wall_seconds: float
    env_steps_per_second: float
    updates_per_second: float
    update_seconds_mean: float


class _StopFlag:
    """First SIGINT requests a clean stop at the end of the current step; a second one aborts immediately."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> _StopFlag:
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            "\nCtrl-C: finishing the current step, then saving a checkpoint (press again to abort without saving)",
            file=sys.stderr,
            flush=True,
        )


def _seed_globals(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)


class _Loop:
    """State of one training run; split out of ``train`` so checkpoint save/restore stay next to the state."""

    def __init__(self, cfg: Config, make_agent: AgentFactory) -> None:
        self.cfg = cfg
        _seed_globals(cfg.seed)
        env_cfg = cfg.env
        self.num_envs = int(cfg.num_train_envs)
        self.train_envs = make_vec_env(
            env_cfg.env_name, self.num_envs, cfg.seed, env_cfg.rescale_action, env_cfg.max_episode_steps
        )
        self.eval_envs = make_vec_env(
            env_cfg.env_name, cfg.num_eval_envs, cfg.seed, env_cfg.rescale_action, env_cfg.max_episode_steps
        )
        obs, _ = self.train_envs.reset(seed=cfg.seed)
        self.eval_envs.reset(seed=cfg.seed)
        self.observation = np.asarray(obs, dtype=np.float32)  # (E, O)
        obs_space = self.train_envs.single_observation_space
        act_space = self.train_envs.single_action_space
        assert isinstance(obs_space, gym.spaces.Box) and isinstance(act_space, gym.spaces.Box)
        self.action_low = np.asarray(act_space.low, dtype=np.float32)  # (A,)
        self.action_high = np.asarray(act_space.high, dtype=np.float32)  # (A,)
        action_dim = int(act_space.shape[0])
        self.agent = make_agent(cfg, obs_space, act_space)
        a = cfg.agent
        self.buffer = ReplayBuffer(
            int(obs_space.shape[0]),
            action_dim,
            a.buffer_max_length,
            a.buffer_min_length,
            cfg.n_step,
            cfg.gamma,
            seed=[cfg.seed, _BUFFER_STREAM],
        )
        self.normalizer = RewardNormalizer(cfg.gamma, a.normalized_G_max, enabled=a.normalize_reward)
        self.noise = ZetaNoise(
            self.num_envs, action_dim, a.actor_noise_zeta_mu, a.actor_noise_zeta_max, seed=[cfg.seed, _NOISE_STREAM]
        )
        self.warmup_rng = np.random.Generator(np.random.PCG64([cfg.seed, _WARMUP_STREAM]))
        self.meter = AverageMeter()
        self.interaction_step = 0
        self.update_counter = 0.0
        self.num_updates = 0
        self.last_eval_step = -1
        self.last_checkpoint_step = -1
        self.last_eval_return = float("nan")
        self.num_interaction_steps = max(1, cfg.num_env_steps // self.num_envs)

    # ----------------------------------------------------------------------------------------- checkpoints
    def save(self, with_buffer: bool = False) -> str:
        """Writes ``<run>/checkpoints/step<env_step>/`` atomically and returns its path.

        Args:
            with_buffer: also write the replay buffer (always done when the run stops early, so that the resume is
                exact; otherwise only with ``save_buffer`` or on ``save_buffer_per_interaction_step``).
        """
        env_step = self.interaction_step * self.num_envs
        final = checkpoint_dir(self.cfg.save_path or ".", env_step)
        tmp = final + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        self.agent.save(os.path.join(tmp, AGENT_DIR))
        save_data = (
            with_buffer
            or self.cfg.save_buffer
            or (
                self.cfg.save_buffer_per_interaction_step is not None
                and self.interaction_step % self.cfg.save_buffer_per_interaction_step == 0
            )
        )
        state = {
            "interaction_step": self.interaction_step,
            "env_step": env_step,
            "update_counter": self.update_counter,
            "num_updates": self.num_updates,
            "last_eval_step": self.last_eval_step,
            "last_eval_return": self.last_eval_return,
            "observation": self.observation.copy(),
            "python_random": random.getstate(),
            "numpy_global": np.random.get_state(),
            "warmup_rng": self.warmup_rng.bit_generator.state,
            "noise": self.noise.state_dict(),
            "reward_normalizer": self.normalizer.state_dict(),
            "buffer": self.buffer.state_dict(include_data=False),
            "buffer_saved": bool(save_data),
            "train_envs": get_env_states(self.train_envs),
            "eval_envs": get_env_states(self.eval_envs),
            "meter": self.meter.state_dict(),
            "config_yaml": config_to_yaml(self.cfg),
        }
        atomic_pickle(os.path.join(tmp, LOOP_STATE_FILE), state)
        if save_data:
            atomic_pickle(os.path.join(tmp, BUFFER_FILE), self.buffer.state_dict(include_data=True))
        commit_checkpoint_dir(tmp, final)
        self.last_checkpoint_step = self.interaction_step
        return final

    def load(self, path: str) -> str:
        """Restores a checkpoint written by ``save`` (a checkpoint dir or a run dir) and returns its path."""
        ckpt = resolve_checkpoint(path)
        self.agent.load(os.path.join(ckpt, AGENT_DIR), load_optimizer=self.cfg.agent.load_optimizer)
        state = load_pickle(os.path.join(ckpt, LOOP_STATE_FILE))
        self.interaction_step = int(state["interaction_step"])
        self.update_counter = float(state["update_counter"])
        self.num_updates = int(state["num_updates"])
        self.last_eval_step = int(state["last_eval_step"])
        self.last_eval_return = float(state["last_eval_return"])
        self.last_checkpoint_step = self.interaction_step
        self.observation = np.asarray(state["observation"], dtype=np.float32)  # (E, O)
        random.setstate(state["python_random"])
        np.random.set_state(state["numpy_global"])
        self.warmup_rng.bit_generator.state = state["warmup_rng"]
        self.noise.load_state_dict(state["noise"])
        if self.cfg.agent.load_reward_normalizer:
            self.normalizer.load_state_dict(state["reward_normalizer"])
        buffer_path = self.cfg.buffer_load_path or os.path.join(ckpt, BUFFER_FILE)
        if os.path.exists(buffer_path):
            self.buffer.load_state_dict(load_pickle(buffer_path))
        else:
            self.buffer.load_state_dict(state["buffer"])
            print(
                f"note: no replay buffer in {ckpt}; collecting {self.cfg.agent.buffer_min_length} random steps "
                "again before updates (resume is not exact; set save_buffer=true for exact resume)",
                file=sys.stderr,
            )
        set_env_states(self.train_envs, state["train_envs"])
        set_env_states(self.eval_envs, state["eval_envs"])
        self.meter.load_state_dict(state["meter"])
        return ckpt

    # ----------------------------------------------------------------------------------------- one step
    def act(self) -> np.ndarray:
        """Training action: the policy with zeta-repeated noise once the buffer can sample, else uniform random."""
        if self.buffer.can_sample():
            return self.agent.act(self.observation, self.noise.sample())  # (E, A)
        return self.warmup_rng.uniform(
            self.action_low, self.action_high, size=(self.num_envs, self.action_low.shape[0])
        ).astype(np.float32)  # (E, A)

    def evaluate(self) -> dict[str, float]:
        """Deterministic evaluation on the eval env."""
        return evaluate(lambda obs: self.agent.act(obs, None), self.eval_envs, self.cfg.num_eval_episodes)

    def close(self) -> None:
        """Closes the envs."""
        self.train_envs.close()
        self.eval_envs.close()


def train(cfg: Config, make_agent: AgentFactory) -> TrainResult:
    """Runs (or resumes) FlashSAC training as upstream ``train.py`` (FLASHSAC.md §15).

    Per interaction step: act (uniform random with a seeded RNG until ``buffer_min_length`` transitions, then the
    policy with zeta noise), step the envs, store the transition (true final obs on episode ends), update the reward
    statistics; once the buffer can sample, run ``updates_per_interaction_step`` updates (fractional counter), then
    evaluation, logging and checkpoints on their intervals. Evaluation also runs at step 0 and at the end; a
    checkpoint is written at the end, on Ctrl-C (first press) and when ``max_wall_seconds`` is reached.

    Args:
        cfg: resolved config from ``load_config`` / ``parse_args``.
        make_agent: builds the framework agent.

    Returns:
        A ``TrainResult``.
    """
    loop = _Loop(cfg, make_agent)
    run_dir = cfg.save_path or "."
    if cfg.agent_load_path is not None:
        ckpt = loop.load(cfg.agent_load_path)
        print(f"resumed from {ckpt} at env step {loop.interaction_step * loop.num_envs}", file=sys.stderr)
    logger = RunLogger(
        run_dir,
        cfg.exp_name,
        cfg.env.env_name,
        cfg.seed,
        config_to_yaml(cfg),
        use_tensorboard=cfg.logger_type == "tensorboard",
    )
    evaluations: list[tuple[int, dict[str, float]]] = []

    def do_eval() -> None:
        metrics = loop.evaluate()
        env_step = loop.interaction_step * loop.num_envs
        logger.log_eval(metrics, env_step)
        evaluations.append((env_step, metrics))
        loop.last_eval_step = loop.interaction_step
        loop.last_eval_return = metrics["avg_return"]

    def log_info(step: int) -> dict[str, float]:
        scalars: dict[str, float] = {}
        for key, value in loop.agent.info().items():
            if isinstance(value, str):
                logger.log_text(key, value, step, only_if_changed=True)
            else:
                scalars[key] = float(value)
        return scalars

    start_step = loop.interaction_step
    log_info(start_step * loop.num_envs)
    if start_step == 0 and cfg.num_eval_episodes > 0:
        do_eval()
    n_int = loop.num_interaction_steps
    status = "completed"
    last_ckpt: str | None = None
    t_start = time.monotonic()
    window_start, window_env_steps, window_updates = t_start, 0, 0
    update_time, updates_this_call = 0.0, 0
    postfix_time = 0.0
    bar = tqdm(
        total=n_int * loop.num_envs,
        initial=start_step * loop.num_envs,
        unit="step",
        dynamic_ncols=True,
        disable=not cfg.progress_bar,
        file=sys.stderr,
        mininterval=1.0,
    )
    with _StopFlag() as stop:
        try:
            while loop.interaction_step < n_int:
                loop.interaction_step += 1
                step = loop.interaction_step
                env_step = step * loop.num_envs
                action = loop.act()  # (E, A)
                result = step_env(loop.train_envs, action)
                loop.buffer.add(
                    loop.observation,
                    action,
                    result.reward,
                    result.terminated,
                    result.truncated,
                    result.next_observation,
                )
                loop.normalizer.update(result.reward, result.terminated, result.truncated)
                loop.observation = result.reset_observation  # (E, O)
                window_env_steps += loop.num_envs
                if loop.buffer.can_sample():
                    loop.update_counter += cfg.updates_per_interaction_step
                    while loop.update_counter >= 1.0:
                        batch = loop.buffer.sample(cfg.agent.sample_batch_size)
                        batch["reward"] = loop.normalizer.normalize(batch["reward"])  # (B,)
                        t0 = time.perf_counter()
                        metrics = loop.agent.update(batch)
                        update_time += time.perf_counter() - t0
                        loop.meter.update(metrics)
                        loop.update_counter -= 1.0
                        loop.num_updates += 1
                        updates_this_call += 1
                        window_updates += 1
                    if step % (cfg.evaluation_per_interaction_step or n_int) == 0 and cfg.num_eval_episodes > 0:
                        do_eval()
                    if step % (cfg.logging_per_interaction_step or n_int) == 0:
                        now = time.monotonic()
                        scalars = loop.meter.averages()
                        scalars.update(log_info(env_step))
                        scalars["perf/env_steps_per_second"] = window_env_steps / max(now - window_start, 1e-9)
                        scalars["perf/updates_per_second"] = window_updates / max(now - window_start, 1e-9)
                        scalars["perf/update_ms"] = 1e3 * update_time / max(updates_this_call, 1)
                        logger.log_scalars(scalars, env_step)
                        loop.meter.reset()
                        window_start, window_env_steps, window_updates = now, 0, 0
                    if step % (cfg.save_checkpoint_per_interaction_step or n_int) == 0:
                        last_ckpt = loop.save()
                bar.update(loop.num_envs)
                now = time.monotonic()
                if now - postfix_time >= 1.0:
                    elapsed = max(now - t_start, 1e-9)
                    bar.set_postfix(
                        sps=f"{(env_step - start_step * loop.num_envs) / elapsed:.1f}",
                        ups=f"{updates_this_call / elapsed:.1f}",
                        eval=f"{loop.last_eval_return:.1f}",
                        refresh=False,
                    )
                    postfix_time = now
                if stop.requested:
                    status = "interrupted"
                    break
                if cfg.max_wall_seconds is not None and now - t_start >= cfg.max_wall_seconds:
                    status = "budget"
                    break
            if status == "completed":
                if loop.last_eval_step != loop.interaction_step and cfg.num_eval_episodes > 0:
                    do_eval()
            if status != "completed":
                last_ckpt = loop.save(with_buffer=True)  # stopped early: the resume must be exact
            elif loop.last_checkpoint_step != loop.interaction_step:
                last_ckpt = loop.save()
        finally:
            bar.close()
            logger.close()
            loop.close()
    wall = time.monotonic() - t_start
    env_steps_done = (loop.interaction_step - start_step) * loop.num_envs
    return TrainResult(
        status=status,
        env_step=loop.interaction_step * loop.num_envs,
        run_dir=run_dir,
        checkpoint=last_ckpt,
        evaluations=evaluations,
        wall_seconds=wall,
        env_steps_per_second=env_steps_done / max(wall, 1e-9),
        updates_per_second=updates_this_call / max(wall, 1e-9),
        update_seconds_mean=update_time / max(updates_this_call, 1),
    )


def run_cli(argv: list[str] | None, framework: str, make_agent_module: Callable[[], AgentFactory]) -> int:
    """``python -m agent_<framework>.train --overrides key=value ...``.

    Parses and validates the config first (exit 2 on a config error, before any env or framework work), then
    imports the agent (``make_agent_module()`` returns the factory), trains and prints where everything went.

    Args:
        argv: CLI arguments (default ``sys.argv[1:]``).
        framework: ``"torch"`` or ``"jax"``.
        make_agent_module: lazily imports and returns the agent factory.

    Returns:
        The process exit code: 0 completed or stopped on the wall-clock budget, 130 after Ctrl-C.
    """
    cfg = parse_args(argv, framework=framework, prog=f"python -m agent_{framework}.train")  # type: ignore[arg-type]
    make_agent = make_agent_module()
    result = train(cfg, make_agent)
    last = result.evaluations[-1][1]["avg_return"] if result.evaluations else float("nan")
    print(
        f"[{result.status}] env_step={result.env_step} wall={result.wall_seconds:.1f}s "
        f"env_steps/s={result.env_steps_per_second:.1f} updates/s={result.updates_per_second:.1f} "
        f"update_ms={1e3 * result.update_seconds_mean:.2f} last_eval_return={last:.1f}\n"
        f"  run dir:    {result.run_dir}\n"
        f"  tensorboard: {os.path.join(result.run_dir, 'tb')}\n"
        f"  eval csv:   {os.path.join(result.run_dir, 'eval.csv')}  "
        f"(plot: python -m agent_common.plot {result.run_dir})\n"
        f"  checkpoint: {result.checkpoint}"
        + ("" if result.status == "completed" else f"\n  resume:     --overrides agent_load_path={result.run_dir}"),
        flush=True,
    )
    return 130 if result.status == "interrupted" else 0
