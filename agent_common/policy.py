"""A trained policy out of a checkpoint, and the evaluation-only command both agents share.

``load_policy(path, framework, make_agent, read_architecture)`` builds the agent the checkpoint's stored config
describes, loads its networks (no optimizer, no replay buffer) and returns a ``Policy``: ``policy(obs) -> action``
for one observation ``(O,)`` or a batch ``(E, O)``, deterministic (tanh of the mean, as the evaluation) or sampled
(tanh(mean + std * eps), eps ~ N(0, 1) from the policy's own seeded generator); the deterministic one acts through
the agent's ``policy_snapshot()`` (on the host) where it has one, as the training loop's evaluation. Actions are in
the env's rescaled space [-1, 1] (the training envs wrap ``RescaleAction``).

``path`` is a run directory (its newest complete checkpoint), a checkpoint directory, or a folder written by ``python
-m agent_interop.convert`` (``agent/`` + ``imported_from.json`` from upstream FlashSAC, or an agent directory of
``actor.pt`` / ``actor.pkl`` ...). A converted folder holds no config: the architecture comes from its files' shapes
(``agent_common.architecture``), the actor head and the keys given to the converter from ``imported_from.json``, and
the task from ``env.env_name`` (given to the converter or to ``load_policy``; an upstream checkpoint does not name
it). Anything else is refused naming what was expected and the command to run.

``evaluate_main`` is ``python -m agent_<framework>.evaluate <run, checkpoint or converted dir> --episodes N``: N
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

from agent_common.architecture import Architecture, read_conversion_record
from agent_common.config import load_config, parse_overrides
from agent_common.envs import evaluate, make_env, make_vec_env, set_env_states
from agent_common.keys import Config, ConfigError
from agent_common.runs.commands import converter_command
from agent_common.runs.files import AGENT_DIR, LOOP_STATE_FILE, CheckpointError, read_checkpoint_file
from agent_common.runs.manifest import COMPLETE_FILE
from agent_common.runs.rundir import holds_run
from agent_common.runs.upstream_layout import IMPORTED_FILE, is_upstream_checkpoint, upstream_checkpoints_in

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


_AGENT_FILES = ("actor", "critic", "target_critic", "temperature", "agent_state")  # what each agent's save writes
_EXTENSIONS = {"torch": "pt", "jax": "pkl"}


def _agent_framework(agent_dir: str) -> str | None:
    """The framework whose agent files (every one of ``_AGENT_FILES``) ``agent_dir`` holds, or None."""
    return next((fw for fw, ext in _EXTENSIONS.items()
                 if all(os.path.isfile(os.path.join(agent_dir, f"{name}.{ext}")) for name in _AGENT_FILES)), None)


def converted_agent_dir(path: str) -> str | None:
    """The agent directory of a folder written by ``python -m agent_interop.convert`` that is not a training
    checkpoint: ``<path>/agent`` of an imported folder (``imported_from.json``), or ``path`` itself when it holds
    this project's agent files directly; None for anything else (a run or checkpoint directory, upstream's layout).
    """
    if os.path.isfile(os.path.join(path, IMPORTED_FILE)) and os.path.isdir(os.path.join(path, AGENT_DIR)):
        return os.path.join(path, AGENT_DIR)
    if _agent_framework(path) is not None and not is_upstream_checkpoint(path):
        return path
    return None


def _refuse_unknown(path: str, framework: str) -> None:
    """Raises ``ConfigError`` for a folder ``load_policy`` cannot read: upstream's own layout (with the conversion
    command) or a directory that is neither a run, a checkpoint nor a converted folder. A missing path and a run
    directory are left to the resume logic (``load_config``), which names what is missing there."""
    if not os.path.isdir(path):
        return
    evaluate = f"python -m agent_{framework}.evaluate"
    if is_upstream_checkpoint(path) or upstream_checkpoints_in(path):
        src = path if is_upstream_checkpoint(path) else upstream_checkpoints_in(path)[0]
        raise ConfigError(f"{path} holds upstream FlashSAC's checkpoint layout (another program's; it was left as it "
                          f"is); convert it, then load the converted folder: python -m agent_interop.convert "
                          f"upstream-to-{framework} {src} <new dir> --overrides env.env_name=<its task>, then "
                          f"{evaluate} <new dir>")
    is_checkpoint = os.path.exists(os.path.join(path, COMPLETE_FILE)) or os.path.isdir(os.path.join(path, AGENT_DIR))
    if holds_run(path) or is_checkpoint or os.path.basename(os.path.normpath(path)).startswith("step"):
        return
    found = ", ".join(sorted(os.listdir(path))[:8]) or "nothing"
    raise ConfigError(f"{path} is not a policy to load (found: {found}); expected a run directory (config.yaml, "
                      "checkpoints/), one of its checkpoints/step<N> directories, or a folder written by python -m "
                      f"agent_interop.convert (agent/ + {IMPORTED_FILE}, or an agent's actor.pt / actor.pkl ...). "
                      f"Train one with python -m agent_{framework}.train, or convert one: python -m "
                      "agent_interop.convert --help")


def _converted_config(path: str, agent_dir: str, framework: str, overrides: Sequence[str],
                      read_architecture: Callable[[str], Architecture]) -> tuple[Config, Architecture]:
    """(config, architecture) of a converted folder: the architecture from its files, the keys the converter
    recorded, then ``overrides``; every configured architecture key is checked against the files.

    Raises:
        ConfigError: another framework's agent (with the converter command), no task named, a key that does not fit
            the files, or a bad override.
        CheckpointError: a file is missing or unreadable, naming it.
    """
    written_by = _agent_framework(agent_dir)
    if written_by is None:
        raise CheckpointError(f"{agent_dir} does not hold an agent's files ({', '.join(_AGENT_FILES)}, each .pt or "
                              f"each .pkl; found: {', '.join(sorted(os.listdir(agent_dir))) or 'nothing'}): the "
                              "conversion did not finish; convert the source again")
    if written_by != framework:
        raise ConfigError(f"{path} holds the {written_by} agent's files ({agent_dir}), this is the {framework} agent; "
                          f"convert it first: {converter_command(path, written_by, framework)}")
    record = read_conversion_record(path) or {}
    recorded = record.get("overrides", [])
    arch = read_architecture(agent_dir)
    given = parse_overrides([*recorded, *overrides])
    if "env.env_name" not in given:
        what = (f"converted from {record.get('source_program', 'another checkpoint')}" if record
                else "an agent directory without a config")
        raise ConfigError(f"{path} ({what}) does not name the task its policy was trained on: give it with --overrides "
                          f"env.env_name=<task> (and env.env_type if not gym-MuJoCo); the policy takes "
                          f"{arch.observation_dim} observations and gives {arch.action_dim} actions")
    cfg = load_config([*recorded, *arch.overrides(given), *overrides], framework)  # type: ignore[arg-type]
    arch.check(cfg.agent)
    return cfg, arch


def load_policy(path: str, framework: str, make_agent: Callable[[Config, gym.spaces.Box, gym.spaces.Box], Any],
                deterministic: bool = True, seed: int = 0, overrides: Sequence[str] = (),
                read_architecture: Callable[[str], Architecture] | None = None) -> Policy:
    """The policy at ``path``: a run directory's newest complete checkpoint, a checkpoint directory, or a folder
    written by ``python -m agent_interop.convert`` (see the module doc).

    Args:
        path: run, checkpoint or converted directory.
        framework: ``"torch"`` or ``"jax"`` (a checkpoint of the other one is refused with the converter command).
        make_agent: the framework's agent factory.
        deterministic: see ``Policy``.
        seed: seed of the sampling noise.
        overrides: config overrides on top of the stored config (e.g. ``agent.device_type=cpu``; for a converted
            folder ``env.env_name=<task>`` if the converter was not given it).
        read_architecture: the framework's reader of its agent files (``agent_<framework>.policy.read_architecture``);
            a converted folder needs it.

    Raises:
        ConfigError: no checkpoint there, another framework's checkpoint, another program's layout, a converted
            folder without its task, an env whose widths differ from the policy's, or a bad override.
        CheckpointError: the agent files do not fit the stored config, or a file is missing or unreadable.
    """
    agent_dir = converted_agent_dir(path) if os.path.isdir(path) else None
    arch = None
    if agent_dir is None:
        _refuse_unknown(path, framework)
        cfg = load_config([f"agent_load_path={path}", *overrides], framework)  # type: ignore[arg-type]
        ckpt = _checkpoint_of(path)
        agent_dir = os.path.join(ckpt, AGENT_DIR)
    else:
        if read_architecture is None:
            raise ConfigError(f"{path} is a converted folder: load it with agent_{framework}.policy.load_policy")
        cfg, arch = _converted_config(path, agent_dir, framework, overrides, read_architecture)
        ckpt = path
    env = make_env(cfg.env.env_name, cfg.seed, cfg.env.rescale_action, cfg.env.max_episode_steps,
                   env_type=cfg.env.env_type)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    assert isinstance(obs_space, gym.spaces.Box) and isinstance(act_space, gym.spaces.Box)
    widths = (int(obs_space.shape[0]), int(act_space.shape[0]))
    if arch is not None and widths != (arch.observation_dim, arch.action_dim):
        raise ConfigError(f"env.env_name={cfg.env.env_name} has {widths[0]} observations and {widths[1]} actions, "
                          f"the policy in {path} takes {arch.observation_dim} and gives {arch.action_dim}: give the "
                          "task it was trained on (--overrides env.env_name=<task>)")
    agent = make_agent(cfg, obs_space, act_space)
    try:
        agent.load(agent_dir, load_optimizer=False)
    except (KeyError, RuntimeError, ValueError, OSError) as exc:
        raise CheckpointError(f"{agent_dir} does not fit its config "
                              f"({' '.join(str(exc).split())[:300]})") from None
    return Policy(agent, cfg, ckpt, widths[0], widths[1], deterministic, seed)


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
    if converted_agent_dir(checkpoint) is not None:
        raise CheckpointError(f"{checkpoint} is a converted folder: it holds the agent only, not a training loop's "
                              "evaluation state; evaluate without --replay-last-eval")
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


def evaluate_main(argv: Sequence[str] | None, framework: str, load: Callable[..., Policy],
                  export: Callable[[Policy, str], str] | None = None) -> int:
    """``python -m agent_<framework>.evaluate``; returns the exit code (2: a bad path, checkpoint or argument).

    Args:
        argv: the arguments.
        framework: ``"torch"`` or ``"jax"``.
        load: the framework's ``load_policy(path, deterministic, seed, overrides)``.
        export: the framework's ``export_actor``.
    """
    parser = argparse.ArgumentParser(
        prog=f"python -m agent_{framework}.evaluate", description="Evaluate a trained policy (no training).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"examples:\n  python -m agent_{framework}.evaluate runs/HalfCheetah-v4/seed0 --episodes 10\n"
               f"  python -m agent_interop.convert upstream-to-{framework} <upstream step dir> converted "
               "--overrides env.env_name=HalfCheetah-v4\n"
               f"  python -m agent_{framework}.evaluate converted --episodes 10 --export actor."
               f"{'pt' if framework == 'torch' else 'npz'}")
    parser.add_argument("path", help="a run directory (its newest complete checkpoint), one of its checkpoints/step<N> "
                        "directories, or a folder written by python -m agent_interop.convert (a converted upstream "
                        "checkpoint needs --overrides env.env_name=<task> unless the converter was given it)")
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
    if args.replay_last_eval and os.path.isdir(args.path) and converted_agent_dir(args.path) is not None:
        print(f"error: {args.path} is a converted folder: it holds the agent only, not a training loop's evaluation "
              "state; evaluate without --replay-last-eval", file=sys.stderr)
        return 2
    try:
        policy = load(args.path, deterministic=not args.sampled, seed=0 if args.seed is None else args.seed,
                      overrides=args.overrides)
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
