"""A trained policy out of a checkpoint, and the evaluation-only command both agents share.

``load_policy(path, framework, make_agent)`` builds the agent the checkpoint's stored config describes, loads its
networks (no optimizer, no replay buffer) and returns a ``Policy``: ``policy(obs) -> action`` for one observation
``(O,)`` or a batch ``(E, O)``, deterministic (tanh of the mean, as the evaluation) or sampled (tanh(mean + std * eps),
eps ~ N(0, 1) from the policy's own seeded generator); the deterministic one acts through the agent's
``policy_snapshot()`` (on the host) where it has one, as the training loop's evaluation. Actions are in the env's
rescaled space [-1, 1] (the training envs wrap ``RescaleAction``).

``evaluate_main`` is ``python -m agent_<framework>.evaluate <run dir or checkpoint> --episodes N [--video]``: N
episodes on an evaluation env seeded as the run's (or ``--seed``), each episode's return printed, then the mean.
``--replay-last-eval`` restores the run's evaluation env to its state before the checkpoint's latest evaluation and
plays ``num_eval_episodes`` as the run did: the same returns as that evaluation (the loop keeps that state in every
checkpoint).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from agent_common.config import load_config
from agent_common.envs import evaluate, make_env, make_vec_env, set_env_states
from agent_common.keys import Config, ConfigError
from agent_common.runs.files import AGENT_DIR, LOOP_STATE_FILE, CheckpointError, read_checkpoint_file

__all__ = ["Policy", "evaluate_main", "load_policy", "run_episodes"]


class Policy:
    """A loaded agent's actor as ``obs -> action``.

    Args:
        agent: the agent (``act(obs, noise)``).
        cfg: its config (the checkpoint's).
        checkpoint: the checkpoint directory it was loaded from.
        deterministic: tanh(mean) when true, else sampled.
        seed: seed of the sampling noise.

    Attributes:
        observation_dim: O.
        action_dim: A.
    """

    def __init__(self, agent: Any, cfg: Config, checkpoint: str, observation_dim: int, action_dim: int,
                 deterministic: bool = True, seed: int = 0) -> None:
        self.agent = agent
        self.cfg = cfg
        self.checkpoint = checkpoint
        self.observation_dim = observation_dim
        self.action_dim = action_dim
        self.deterministic = deterministic
        self.rng = np.random.default_rng(seed)
        # the deterministic actions come from the agent's host-side snapshot where it has one, as the training
        # loop's evaluation does: a replayed evaluation acts with the same arithmetic as the run's
        self._snapshot: Callable[[np.ndarray], np.ndarray] | None = (
            agent.policy_snapshot() if deterministic and agent.capabilities.policy_snapshot else None)

    def __call__(self, observation: np.ndarray) -> np.ndarray:
        """(O,) or (E, O) observations -> (A,) or (E, A) float32 actions in [-1, 1].

        Raises:
            ValueError: the observation's shape is not (O,) or (E, O), or it is not finite.
        """
        obs = np.asarray(observation, dtype=np.float32)
        single = obs.ndim == 1
        batch = obs[None] if single else obs  # (E, O)
        if batch.ndim != 2 or batch.shape[1] != self.observation_dim:
            raise ValueError(f"observation must be ({self.observation_dim},) or (E, {self.observation_dim}) for "
                             f"{self.cfg.env.env_name}, got {obs.shape}")
        if not np.isfinite(batch).all():
            raise ValueError("observation holds a non-finite value")
        if self._snapshot is not None:
            action = np.asarray(self._snapshot(batch), dtype=np.float32)  # (E, A)
        else:
            noise = None if self.deterministic else self.rng.standard_normal(
                (batch.shape[0], self.action_dim)).astype(np.float32)  # (E, A)
            action = np.asarray(self.agent.act(batch, noise), dtype=np.float32)  # (E, A)
        return action[0] if single else action


def _checkpoint_of(path: str) -> str:
    from agent_common.runs.checkpoints import candidate_checkpoints

    return candidate_checkpoints(path)[0]


def load_policy(path: str, framework: str, make_agent: Callable[[Config, gym.spaces.Box, gym.spaces.Box], Any],
                deterministic: bool = True, seed: int = 0, overrides: Sequence[str] = ()) -> Policy:
    """The policy of the newest complete checkpoint at ``path`` (a run directory or a checkpoint directory).

    Args:
        path: run or checkpoint directory.
        framework: ``"torch"`` or ``"jax"`` (a checkpoint of the other one is refused with the converter command).
        make_agent: the framework's agent factory.
        deterministic: see ``Policy``.
        seed: seed of the sampling noise.
        overrides: config overrides on top of the stored config (e.g. ``agent.device_type=cpu``).

    Raises:
        ConfigError: no checkpoint there, another framework's checkpoint, or a bad override.
        CheckpointError: the agent files do not fit the stored config.
    """
    cfg = load_config([f"agent_load_path={path}", *overrides], framework)  # type: ignore[arg-type]
    ckpt = _checkpoint_of(path)
    env = make_env(cfg.env.env_name, cfg.seed, cfg.env.rescale_action, cfg.env.max_episode_steps,
                   env_type=cfg.env.env_type)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    assert isinstance(obs_space, gym.spaces.Box) and isinstance(act_space, gym.spaces.Box)
    agent = make_agent(cfg, obs_space, act_space)
    try:
        agent.load(os.path.join(ckpt, AGENT_DIR), load_optimizer=False)
    except (KeyError, RuntimeError, ValueError, OSError) as exc:
        raise CheckpointError(f"{os.path.join(ckpt, AGENT_DIR)} does not fit its config "
                              f"({' '.join(str(exc).split())[:300]})") from None
    return Policy(agent, cfg, ckpt, int(obs_space.shape[0]), int(act_space.shape[0]), deterministic, seed)


def run_episodes(policy: Callable[[np.ndarray], np.ndarray], cfg: Config, episodes: int, seed: int) -> list[float]:
    """``episodes`` episodes on one env seeded with ``seed`` (reset once with it), as the training loop's evaluation
    steps them; returns each episode's return."""
    envs = make_vec_env(cfg.env.env_name, 1, seed, cfg.env.rescale_action, cfg.env.max_episode_steps)
    try:
        envs.reset(seed=seed)
        returns = []
        for _ in range(episodes):
            returns.append(evaluate(policy, envs, 1)["avg_return"])
        return returns
    finally:
        envs.close()


def replay_last_evaluation(policy: Callable[[np.ndarray], np.ndarray], cfg: Config, checkpoint: str) -> tuple[
        float, float]:
    """(replayed mean return, the run's recorded one) of the checkpoint's latest evaluation.

    Raises:
        CheckpointError: the checkpoint keeps no evaluation-env state from before its latest evaluation.
    """
    state = read_checkpoint_file(os.path.join(checkpoint, LOOP_STATE_FILE))
    before = state.get("eval_envs_before_last_eval")
    if before is None:
        raise CheckpointError(f"{os.path.join(checkpoint, LOOP_STATE_FILE)} keeps no evaluation-env state from before "
                              "its latest evaluation (no evaluation ran, or an older loop wrote it); evaluate without "
                              "--replay-last-eval")
    envs = make_vec_env(cfg.env.env_name, cfg.num_eval_envs, cfg.seed, cfg.env.rescale_action,
                        cfg.env.max_episode_steps)
    try:
        envs.reset(seed=cfg.seed)
        set_env_states(envs, before)
        replayed = evaluate(policy, envs, cfg.num_eval_episodes)["avg_return"]
    finally:
        envs.close()
    return replayed, float(state["last_eval_return"])


def evaluate_main(argv: Sequence[str] | None, framework: str,
                  make_agent: Callable[[], Callable[[Config, gym.spaces.Box, gym.spaces.Box], Any]],
                  export: Callable[[Policy, str], str] | None = None) -> int:
    """``python -m agent_<framework>.evaluate``; returns the exit code (2: a bad path, checkpoint or argument)."""
    parser = argparse.ArgumentParser(prog=f"python -m agent_{framework}.evaluate",
                                     description="Evaluate a trained checkpoint (no training).")
    parser.add_argument("path", help="run directory (its newest complete checkpoint) or checkpoint directory")
    parser.add_argument("--episodes", type=int, default=10, help="episodes to play (default 10)")
    parser.add_argument("--seed", type=int, default=None, help="env seed (default: the run's seed)")
    parser.add_argument("--sampled", action="store_true", help="sample actions instead of tanh(mean)")
    parser.add_argument("--video", nargs="?", const="", default=None, metavar="DIR",
                        help="also write an MP4 of the episodes (to DIR, default <checkpoint>/videos)")
    parser.add_argument("--replay-last-eval", action="store_true",
                        help="replay the checkpoint's latest evaluation (its env state and num_eval_episodes)")
    parser.add_argument("--export", metavar="FILE", default=None, help="also export the deterministic actor to FILE")
    parser.add_argument("--overrides", action="append", default=[], help="config key=value on top of the stored one")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    try:
        policy = load_policy(args.path, framework, make_agent(), deterministic=not args.sampled,
                             seed=0 if args.seed is None else args.seed, overrides=args.overrides)
    except (ConfigError, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cfg = policy.cfg
    print(f"checkpoint {policy.checkpoint} ({cfg.env.env_name}, {framework}, "
          f"{'deterministic' if policy.deterministic else 'sampled'} actions)", flush=True)
    if args.replay_last_eval:
        try:
            replayed, recorded = replay_last_evaluation(policy, cfg, policy.checkpoint)
        except CheckpointError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        same = "same" if replayed == recorded or (math.isnan(replayed) and math.isnan(recorded)) else "DIFFERENT"
        print(f"replayed last evaluation: avg_return={replayed!r} (the run logged {recorded!r}: {same})", flush=True)
    seed = cfg.seed if args.seed is None else args.seed
    returns = run_episodes(policy, cfg, args.episodes, seed)
    for i, value in enumerate(returns):
        print(f"episode {i}: return {value:.3f}")
    print(f"mean return {np.mean(returns):.3f} over {len(returns)} episodes (seed {seed})", flush=True)
    if args.video is not None:
        from agent_common.video import VideoRecorder

        out = args.video or os.path.join(policy.checkpoint, "videos")
        try:
            recorder = VideoRecorder(cfg.env.env_name, 1, seed, cfg.env.rescale_action, cfg.env.max_episode_steps,
                                     cfg.record_size, out)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        try:
            frames, video_returns = recorder.record(policy, args.episodes)
            path = recorder.write(frames, f"evaluate_seed{seed}")
        finally:
            recorder.close()
        print(f"video {path} ({len(frames)} frames; returns {[round(r, 3) for r in video_returns]})")
    if args.export is not None:
        if export is None:
            print("error: this agent has no actor export", file=sys.stderr)
            return 2
        print(f"exported the deterministic actor to {export(policy, args.export)}")
    return 0
