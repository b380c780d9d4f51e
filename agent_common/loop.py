"""The training loop shared by both agents: env stepping, warm-up, updates, eval, logging, checkpoints, resume."""

from __future__ import annotations

import math
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from agent_common.buffer import ReplayBuffer
from agent_common.checkpoint import (
    AGENT_DIR,
    BUFFER_FILE,
    CONFIG_FILE,
    LOOP_STATE_FILE,
    CheckpointError,
    DiskFullError,
    atomic_pickle,
    atomic_write_text,
    checkpoint_dir,
    commit_checkpoint_dir,
    continue_lines,
    directory_size,
    is_disk_full,
    latest_checkpoint,
    load_newest,
    non_finite_message,
    prune_checkpoints,
    read_checkpoint_file,
    recover_checkpoints,
    set_aside_newer,
    warn,
    write_checkpoint,
)
from agent_common.config import config_to_yaml, parse_args
from agent_common.envs import evaluate, get_env_states, make_vec_env, set_env_states, step_env
from agent_common.logger import AverageMeter, RunLogger, UpdateTimeline, launch_time
from agent_common.noise import ZetaNoise
from agent_common.normalizer import RewardNormalizer
from agent_common.protocol import (
    Agent,
    AgentFactory,
    AsyncActingAgent,
    DeviceReplayAgent,
    PrecompilingAgent,
    SnapshotAgent,
    check_agent,
)
from agent_common.replicas import SINGLE, NullLogger, Replicas
from agent_common.run import (
    StopFlag,
    TrainResult,
    announce_compute_path,
    kept_on_resume,
    prepare_run_dir,
    report_first_update,
)
from agent_common.schema import VECTOR_ENV_TYPES, Config, ConfigError, check_training_run, run_dir_of_checkpoint
from agent_common.seeding import BUFFER_STREAM, NOISE_STREAM, WARMUP_STREAM
from agent_common.video import RunVideos, run_videos
from agent_common.wandb_logger import logger_options

__all__ = [
    "AGENT_DIR",
    "BUFFER_FILE",
    "LOOP_STATE_FILE",
    "Agent",
    "AgentFactory",
    "StopFlag",
    "TrainResult",
    "announce_compute_path",
    "evaluation_policy",
    "kept_on_resume",
    "prepare_run_dir",
    "report_first_update",
    "run_cli",
    "strict_backend_as_config_error",
    "train",
]

_AGREE_EVERY = 16  # interaction steps between the replicas' agreements on stopping early (one small collective)
BACKGROUND_INITIAL_EVALUATION = True
"""Whether ``train`` runs the step-0 evaluation on a background thread while training starts (``_Loop.
start_initial_evaluation``); False runs it first, before training. The run is the same either way (tests compare
the two)."""


class _EvaluationCancelled(Exception):
    """Raised inside a background evaluation's policy call once the main thread has cancelled it."""


class _BackgroundEvaluation:
    """One evaluation running on a thread of its own, for the main thread to poll, wait for or cancel.

    Args:
        run: ``run(cancelled) -> metrics``, the evaluation; ``cancelled()`` turns true when ``cancel`` is called, and
            ``run`` should then raise ``_EvaluationCancelled``.
        interaction_step: the interaction step the evaluation belongs to (where its result is logged).
        overlaps_updates: whether it may still run while the agent updates (it evaluates a snapshot of the policy);
            otherwise the loop waits for it before the agent's first call.
    """

    def __init__(self, run: Callable[[Callable[[], bool]], dict[str, float]], interaction_step: int,
                 overlaps_updates: bool) -> None:
        self.interaction_step = interaction_step
        self.overlaps_updates = overlaps_updates
        self._cancel = threading.Event()
        self._metrics: dict[str, float] | None = None
        self._error: BaseException | None = None

        def target() -> None:
            try:
                self._metrics = run(self._cancel.is_set)
            except BaseException as exc:  # noqa: BLE001  re-raised in the main thread by ``result``
                self._error = exc

        self._thread = threading.Thread(target=target, name="flashsac-initial-eval", daemon=True)
        self._thread.start()

    def done(self) -> bool:
        """Whether the evaluation has finished (or failed); a cheap check."""
        return not self._thread.is_alive()

    def result(self) -> dict[str, float]:
        """Waits for the evaluation (interruptibly: Ctrl-C still reaches the main thread) and returns its metrics.

        Raises:
            BaseException: whatever the evaluation raised, re-raised here with its traceback.
        """
        while self._thread.is_alive():
            self._thread.join(0.05)
        if self._error is not None:
            raise self._error
        assert self._metrics is not None
        return self._metrics

    def cancel(self) -> None:
        """Stops the evaluation at its next policy call and waits for the thread; any error of it is dropped (the
        caller is already handling one of its own)."""
        self._cancel.set()
        self._thread.join()


def evaluation_policy(agent: Agent) -> Callable[[np.ndarray], np.ndarray]:
    """The deterministic policy an evaluation acts with, taken at the call: a fresh ``policy_snapshot()`` where the
    agent has one (both agents' snapshots run on the host, beside the envs: no device round trip per action), else
    ``agent.act(obs, None)``."""
    if agent.capabilities.policy_snapshot:
        return cast(SnapshotAgent, agent).policy_snapshot()

    def policy(observation: np.ndarray) -> np.ndarray:
        return agent.act(observation, None)

    return policy


def _seed_globals(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)


class _Loop:
    """State of one training run; split out of ``train`` so checkpoint save/restore stay next to the state."""

    def __init__(self, cfg: Config, make_agent: AgentFactory, replicas: Replicas = SINGLE) -> None:
        self.cfg = cfg
        self.replicas = replicas
        if cfg.agent.act_before_update and replicas.world_size > 1:
            raise ConfigError(f"agent.act_before_update=true is not supported with {replicas.world_size} "
                              "data-parallel replicas: drop the override or train in one process")
        seed = replicas.seed(cfg.seed)  # this replica's env and host RNG seed (cfg.seed with one replica)
        _seed_globals(seed)
        env_cfg = cfg.env
        self.local_envs = int(cfg.num_train_envs)  # this replica's training envs
        self.num_envs = self.local_envs * replicas.world_size  # env steps of one interaction step, all replicas
        self.train_envs = make_vec_env(
            env_cfg.env_name, self.local_envs, seed, env_cfg.rescale_action, env_cfg.max_episode_steps,
            env_cfg.env_type,
        )
        self.eval_envs = make_vec_env(
            env_cfg.env_name, cfg.num_eval_envs, cfg.seed, env_cfg.rescale_action, env_cfg.max_episode_steps,
            env_cfg.env_type,
        )
        obs, _ = self.train_envs.reset(seed=seed)
        self.eval_envs.reset(seed=cfg.seed)
        self.observation = np.asarray(obs, dtype=np.float32)  # (E, O)
        obs_space = self.train_envs.single_observation_space
        act_space = self.train_envs.single_action_space
        assert isinstance(obs_space, gym.spaces.Box) and isinstance(act_space, gym.spaces.Box)
        self.action_low = np.asarray(act_space.low, dtype=np.float32)  # (A,)
        self.action_high = np.asarray(act_space.high, dtype=np.float32)  # (A,)
        action_dim = int(act_space.shape[0])
        self.agent = make_agent(cfg, obs_space, act_space)
        check_agent(self.agent)
        a = cfg.agent
        # An agent that keeps the replay rows itself (device buffer) also does the step's device work in ``step``.
        storage = (cast(DeviceReplayAgent, self.agent).replay_storage(a.buffer_max_length)
                   if self.agent.capabilities.device_replay else None)
        self.fused = storage is not None
        self.next_action: np.ndarray | None = None  # (E, A) computed by the previous ``agent.step``
        self.act_before_update = bool(a.act_before_update)
        if self.act_before_update and not self.agent.capabilities.act_async:
            raise ConfigError(f"agent.act_before_update=true needs an agent with act_async; "
                              f"{type(self.agent).__name__} has none: drop the override")
        # agent.act_before_update: the next action, dispatched before this step's updates and not yet read
        self.pending_action: Callable[[], np.ndarray] | None = None
        self.buffer = ReplayBuffer(
            int(obs_space.shape[0]),
            action_dim,
            a.buffer_max_length,
            a.buffer_min_length,
            cfg.n_step,
            cfg.gamma,
            seed=[seed, BUFFER_STREAM],
            storage=storage,
        )
        self.normalizer = RewardNormalizer(cfg.gamma, a.normalized_G_max, enabled=a.normalize_reward)
        self.noise = ZetaNoise(
            self.local_envs, action_dim, a.actor_noise_zeta_mu, a.actor_noise_zeta_max, seed=[seed, NOISE_STREAM]
        )
        self.warmup_rng = np.random.Generator(np.random.PCG64([seed, WARMUP_STREAM]))
        self.meter = AverageMeter()
        self.interaction_step = 0
        self.update_counter = 0.0
        self.num_updates = 0
        self.last_eval_step = -1
        self.last_checkpoint_step = -1
        self.last_checkpoint_has_buffer = False
        self.eval_envs_before_last_eval: list[dict[str, Any]] | None = None  # replayed by agent_*.evaluate
        self.last_eval_return = float("nan")
        self.num_interaction_steps = max(1, cfg.num_env_steps // self.num_envs)
        self.videos: RunVideos | None = None  # the run's recorder (record_video); its state goes in the checkpoint

    # ----------------------------------------------------------------------------------------- checkpoints
    def save(self, with_buffer: bool = False) -> str:
        """Writes ``<run>/checkpoints/step<env_step>/`` atomically, keeps the newest ``keep_checkpoints`` and
        returns a line saying what was written (path and size).

        Args:
            with_buffer: also write the replay buffer even if ``save_buffer`` is off (done when the run stops
                early, so that the resume is exact).

        Raises:
            DiskFullError: the disk filled up; the half-written ``.tmp`` directory is removed first.
        """
        env_step = self.interaction_step * self.num_envs
        run_dir = self.cfg.save_path or "."
        final = checkpoint_dir(run_dir, env_step)
        self.read_pending_action()  # the checkpoint holds it as ``next_action``
        self.take_metrics()  # the metrics summed on the device go into the meter, which the checkpoint holds
        if self.replicas.world_size > 1:
            return self._save_replicated(final + ".tmp", final, env_step, with_buffer)
        final, pruned = write_checkpoint(run_dir, env_step,
                                         lambda tmp: self._write_checkpoint(tmp, env_step, with_buffer),
                                         self.cfg.keep_checkpoints)
        self.last_checkpoint_step = self.interaction_step
        self.last_checkpoint_has_buffer = os.path.exists(os.path.join(final, BUFFER_FILE))
        size = directory_size(final) / 2**20
        buffer = f", replay buffer {len(self.buffer)} rows" if self.last_checkpoint_has_buffer else ", no replay buffer"
        removed = f"; removed {', '.join(os.path.basename(p) for p in pruned)}" if pruned else ""
        return f"checkpoint {final} ({size:.1f} MiB{buffer}){removed}"

    def _save_replicated(self, tmp: str, final: str, env_step: int, with_buffer: bool) -> str:
        """``save`` with several replicas: replica 0 creates the ``.tmp`` directory, every replica writes its loop
        state into it (replica 0 also the agent and the config), then replica 0 commits it; a replica that dies
        before the commit leaves only the ``.tmp`` directory, which a resume discards."""
        if self.replicas.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
        self.replicas.barrier()
        self._write_checkpoint(self.replicas.state_dir(tmp), env_step, with_buffer)
        self.replicas.barrier()
        self.last_checkpoint_step = self.interaction_step
        self.last_checkpoint_has_buffer = os.path.exists(os.path.join(self.replicas.state_dir(tmp), BUFFER_FILE))
        if not self.replicas.is_main:
            return f"replica {self.replicas.rank}: loop state written to {self.replicas.state_dir(final)}"
        commit_checkpoint_dir(tmp, final)
        pruned = prune_checkpoints(self.cfg.save_path or ".", self.cfg.keep_checkpoints)
        removed = f"; removed {', '.join(os.path.basename(p) for p in pruned)}" if pruned else ""
        return (f"checkpoint {final} ({directory_size(final) / 2**20:.1f} MiB, {self.replicas.world_size} "
                f"replicas){removed}")

    def _write_checkpoint(self, directory: str, env_step: int, with_buffer: bool) -> None:
        if self.replicas.is_main:
            self.agent.save(os.path.join(directory, AGENT_DIR))
        else:
            os.makedirs(directory, exist_ok=True)
        every = self.cfg.save_buffer_per_interaction_step
        save_data = with_buffer or (
            self.cfg.save_buffer if every is None
            else self.interaction_step % self.replicas.interval(every, every) == 0
        )
        config_yaml = config_to_yaml(self.cfg)
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
            "eval_envs_before_last_eval": self.eval_envs_before_last_eval,
            "meter": self.meter.state_dict(),
            "next_action": None if self.next_action is None else self.next_action.copy(),
            "videos": None if self.videos is None else self.videos.state_dict(),
            "config_yaml": config_yaml,
            "world_size": self.replicas.world_size,
        }
        if self.replicas.is_main:
            atomic_write_text(os.path.join(directory, CONFIG_FILE), config_yaml)
        atomic_pickle(os.path.join(directory, LOOP_STATE_FILE), state)
        if save_data:
            atomic_pickle(os.path.join(directory, BUFFER_FILE), self.buffer.state_dict(include_data=True))

    def start_from(self, path: str, framework: str) -> str:
        """A new run from the weights at ``path`` (``agent_init_path``): the agent's ``start_from`` (weights, with
        ``agent_init_optimizer`` the Adam state; fresh update counter, LR schedule and RNG), and with
        ``agent_init_reward_normalizer`` the source's reward normaliser. The loop state stays this run's own.

        Returns:
            One line for the run's log naming the source and what was taken from it.
        """
        from agent_common.start_from import resolve_init_source

        source = resolve_init_source(path, framework)
        self.agent.start_from(source.agent_dir, load_optimizer=self.cfg.agent_init_optimizer)
        taken = ["weights"] + (["optimizer state"] if self.cfg.agent_init_optimizer else [])
        if self.cfg.agent_init_reward_normalizer:
            state = source.normalizer_state()
            if state is None:
                warn(f"agent_init_path={path} has no reward normaliser state; this run's normaliser starts fresh")
            else:
                self.normalizer.load_state_dict(state)
                taken.append("reward normaliser")
        return (f"new run started from {', '.join(taken)} of {source.agent_dir} (agent_init_path={path}); update "
                "counter, LR schedule, replay buffer and loop state start fresh")

    def load(self, path: str) -> str:
        """Restores the newest usable checkpoint at ``path`` (a checkpoint dir or a run dir) and returns it.

        From a run directory, a checkpoint that cannot be read is skipped with a warning naming it, and the next
        older complete one is tried.

        Raises:
            CheckpointError: no usable checkpoint; the message names the file and says what to do.
        """
        return load_newest(path, self._load_checkpoint)

    def _load_checkpoint(self, ckpt: str) -> None:
        state_dir = self.replicas.state_dir(ckpt)
        if not os.path.exists(os.path.join(state_dir, LOOP_STATE_FILE)) and not self.replicas.is_main:
            raise CheckpointError(f"{ckpt} has no loop state of replica {self.replicas.rank} ({state_dir}): it was "
                                  f"written by fewer replicas; resume with the world size that wrote it")
        state = read_checkpoint_file(os.path.join(state_dir, LOOP_STATE_FILE))
        saved_world = int(state.get("world_size", 1))
        if saved_world != self.replicas.world_size:
            raise CheckpointError(f"{ckpt} was written by {saved_world} replica(s), this run has "
                                  f"{self.replicas.world_size}: resume with the same number of processes")
        buffer_path = self.cfg.buffer_load_path or os.path.join(state_dir, BUFFER_FILE)
        buffer_state = None
        if self.cfg.buffer_load_path is not None or state.get("buffer_saved", False):
            if not os.path.exists(buffer_path):
                raise CheckpointError(
                    f"{buffer_path} is missing although {os.path.join(state_dir, LOOP_STATE_FILE)} records a saved "
                    "replay buffer: the checkpoint is incomplete"
                )
            buffer_state = read_checkpoint_file(buffer_path)
        try:
            self.agent.load(os.path.join(ckpt, AGENT_DIR), load_optimizer=self.cfg.agent.load_optimizer)
        except (KeyError, RuntimeError, ValueError) as exc:  # entries or shapes that do not fit the networks
            detail = " ".join(str(exc).split())[:400]
            raise CheckpointError(f"{os.path.join(ckpt, AGENT_DIR)} does not fit this agent ({detail})") from None
        try:
            self._restore(state, buffer_state, ckpt)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"{os.path.join(ckpt, LOOP_STATE_FILE)} does not match this run ({type(exc).__name__}: {exc})"
            ) from None

    def _restore(self, state: dict[str, Any], buffer_state: dict[str, Any] | None, ckpt: str) -> None:
        self.interaction_step = int(state["interaction_step"])
        self.update_counter = float(state["update_counter"])
        self.num_updates = int(state["num_updates"])
        self.last_eval_step = int(state["last_eval_step"])
        self.last_eval_return = float(state["last_eval_return"])
        self.last_checkpoint_step = self.interaction_step
        self.last_checkpoint_has_buffer = buffer_state is not None
        self.observation = np.asarray(state["observation"], dtype=np.float32)  # (E, O)
        random.setstate(state["python_random"])
        np.random.set_state(state["numpy_global"])
        self.warmup_rng.bit_generator.state = state["warmup_rng"]
        self.noise.load_state_dict(state["noise"])
        if self.cfg.agent.load_reward_normalizer:
            self.normalizer.load_state_dict(state["reward_normalizer"])
        if buffer_state is not None:
            self.buffer.load_state_dict(buffer_state)
        else:
            self.buffer.load_state_dict(state["buffer"])
            warn(
                f"{ckpt} has no replay buffer (it was saved with save_buffer=false); collecting "
                f"{self.cfg.agent.buffer_min_length} random steps again before updates, so this resume is not exact"
            )
        set_env_states(self.train_envs, state["train_envs"])
        set_env_states(self.eval_envs, state["eval_envs"])
        self.eval_envs_before_last_eval = state.get("eval_envs_before_last_eval")
        self.meter.load_state_dict(state["meter"])
        if self.videos is not None:
            if state.get("videos") is None:
                warn(f"{ckpt} holds no video recorder state (it was written with record_video=false); the recorder "
                     "starts from its seeds and records from the next due step")
            else:
                self.videos.load_state_dict(state["videos"])
        # The action the agent's step already computed for the next env step (its noise is drawn); without the
        # buffer the run starts its warm-up again and acts at random.
        next_action = (state.get("next_action") if (self.fused or self.act_before_update) and buffer_state is not None
                       else None)
        self.next_action = None if next_action is None else np.asarray(next_action, dtype=np.float32)

    # ----------------------------------------------------------------------------------------- one step
    def act(self) -> np.ndarray:
        """Training action: the policy with zeta-repeated noise once the buffer can sample, else uniform random
        (with ``agent.step`` or ``agent.act_before_update``: the action computed in the previous step)."""
        self.read_pending_action()
        if self.next_action is not None:
            action, self.next_action = self.next_action, None
            return action  # (E, A)
        if self.buffer.can_sample():
            return self.agent.act(self.observation, self.noise.sample())  # (E, A)
        return self.warmup_rng.uniform(
            self.action_low, self.action_high, size=(self.local_envs, self.action_low.shape[0])
        ).astype(np.float32)  # (E, A)

    def read_pending_action(self) -> None:
        """Waits for the action ``dispatch_next_action`` dispatched (that action alone) and keeps it as
        ``next_action``; nothing when none is pending."""
        if self.pending_action is not None:
            self.next_action, self.pending_action = self.pending_action(), None

    def dispatch_next_action(self) -> None:
        """``agent.act_before_update``: dispatches the policy action for ``self.observation`` (its noise drawn now)
        with the parameters as they are before this step's updates; ``act`` reads it in the next step."""
        self.pending_action = cast(AsyncActingAgent, self.agent).act_async(self.observation, self.noise.sample())

    def due_updates(self) -> int:
        """Updates due after this step's transition (0 until the buffer can sample; fractional UTD accumulates)."""
        due = 0
        if self.buffer.can_sample():
            self.update_counter += self.cfg.updates_per_interaction_step
            while self.update_counter >= 1.0:
                self.update_counter -= 1.0
                due += 1
        return due

    def step_agent(self, num_updates: int) -> None:
        """The agent's fused step (``agent.step``): store the rows just added, run ``num_updates`` updates, and
        compute the next action on ``self.observation`` (its noise drawn now) once the buffer can sample; with
        ``agent.act_before_update`` that action is dispatched before the step (``dispatch_next_action``)."""
        if self.act_before_update and self.buffer.can_sample():
            self.dispatch_next_action()
            noise = None
        else:
            noise = self.noise.sample() if self.buffer.can_sample() else None
        scale = self.normalizer.scale() if self.normalizer.enabled else 1.0
        action = cast(DeviceReplayAgent, self.agent).step(self.observation, noise, num_updates, scale)
        if not self.act_before_update:
            self.next_action = action

    def take_metrics(self) -> None:
        """Moves the metrics the agent's step summed on the device into the meter (a device read-back)."""
        if not self.fused:
            return
        for key, (total, count) in cast(DeviceReplayAgent, self.agent).take_metrics().items():
            self.meter.sums[key] += total
            self.meter.counts[key] += count

    def evaluation_policy(self) -> Callable[[np.ndarray], np.ndarray]:
        """``evaluation_policy(self.agent)``: the deterministic policy an evaluation acts with."""
        return evaluation_policy(self.agent)

    def evaluate(self) -> dict[str, float]:
        """Deterministic evaluation on the eval env, with ``evaluation_policy()``."""
        self.eval_envs_before_last_eval = get_env_states(self.eval_envs)
        return evaluate(self.evaluation_policy(), self.eval_envs, self.cfg.num_eval_episodes)

    def start_initial_evaluation(self) -> _BackgroundEvaluation | None:
        """Starts the step-0 evaluation on a background thread, or returns None where it must run in the caller.

        The evaluation steps only the eval env and draws from no RNG the training uses, so what it returns and the
        eval env's state after it do not depend on when it runs, as long as it sees the step-0 policy. An agent
        with ``policy_snapshot()`` hands over a deterministic policy bound to a copy of its current actor, so the
        evaluation may run alongside the updates. Without one, the evaluation calls ``agent.act`` and must be over
        before the loop's first call into the agent (the first policy action or update); it runs in the background
        only where the main thread makes no framework calls until then (one process, the host replay buffer: the
        warm-up is host work), and is otherwise left to the caller. Tests hold the evaluation on its thread by
        replacing this module's ``evaluate`` (tests/test_runs.py: until given training steps or the first update).
        """
        if not BACKGROUND_INITIAL_EVALUATION:
            return None
        has_snapshot = self.agent.capabilities.policy_snapshot
        if not has_snapshot and (self.fused or self.replicas.world_size > 1):
            return None
        policy = self.evaluation_policy()
        envs, episodes = self.eval_envs, self.cfg.num_eval_episodes
        self.eval_envs_before_last_eval = get_env_states(envs)

        def run(cancelled: Callable[[], bool]) -> dict[str, float]:
            def act(observation: np.ndarray) -> np.ndarray:
                if cancelled():
                    raise _EvaluationCancelled
                return policy(observation)

            return evaluate(act, envs, episodes)

        return _BackgroundEvaluation(run, self.interaction_step, overlaps_updates=has_snapshot)

    def close(self) -> None:
        """Closes the envs."""
        self.train_envs.close()
        self.eval_envs.close()


def _framework_of(agent: Any) -> str:
    """``"torch"`` / ``"jax"`` from the agent's package (``agent_torch`` / ``agent_jax``)."""
    package = type(agent).__module__.split(".")[0]
    return package.removeprefix("agent_")


def strict_backend_as_config_error(make_agent: AgentFactory, unavailable: type[Exception]) -> AgentFactory:
    """Wraps an agent factory for the CLI: a strict backend that cannot run here (``unavailable``, the framework's
    ``BackendUnavailable``) becomes a one-line ``ConfigError`` naming the keys, instead of a traceback."""

    def build(cfg: Config, observation_space: gym.spaces.Box, action_space: gym.spaces.Box) -> Agent:
        try:
            return make_agent(cfg, observation_space, action_space)
        except unavailable as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"agent.categorical_target_backend={cfg.agent.categorical_target_backend} with "
                f"agent.categorical_target_strict=true cannot run here: {reason}. Use a GPU, or "
                "agent.categorical_target_strict=false (falls back to the reference, logged)"
            ) from None

    return build


def train(cfg: Config, make_agent: AgentFactory, replicas: Replicas = SINGLE) -> TrainResult:
    """Runs (or resumes) FlashSAC training as upstream ``train.py`` (docs/flashsac.md).

    Per interaction step: act (uniform random with a seeded RNG until ``buffer_min_length`` transitions, then the
    policy with zeta noise), step the envs, store the transition (true final obs on episode ends), update the reward
    statistics; once the buffer can sample, run ``updates_per_interaction_step`` updates (fractional counter), then
    evaluation, logging and checkpoints on their intervals. Evaluation also runs at step 0 and at the end; a
    checkpoint is written every ``save_checkpoint_per_interaction_step``, at the end, on Ctrl-C (first press) and when
    ``max_wall_seconds`` is reached.

    The step-0 evaluation runs on a background thread while training starts (``_Loop.start_initial_evaluation``) and
    is logged at env step 0 once it has finished; the loop waits for it before an agent without ``policy_snapshot``
    is first called, before any later evaluation or checkpoint, and at the end, and raises its error, so the run is
    the one with the evaluation first (``BACKGROUND_INITIAL_EVALUATION``).

    A resume (``agent_load_path``) first repairs the run's checkpoints after a crash (``recover_checkpoints``), loads
    the newest usable checkpoint, and cuts the run's eval.csv and TensorBoard history back to that checkpoint's
    step, so nothing is logged twice.

    Args:
        cfg: resolved config from ``load_config`` / ``parse_args``.
        make_agent: builds the framework agent.
        replicas: this process's place among data-parallel replicas (``agent_common.replicas``); one by default.

    Returns:
        A ``TrainResult``.

    Raises:
        ConfigError: the run directory cannot be used (see ``prepare_run_dir``).
        CheckpointError: no usable checkpoint to resume from.
        DiskFullError: the disk filled up while writing a checkpoint.
    """
    loop, logger, resumed_ckpt, videos = _open_run(cfg, make_agent, replicas)
    run = _Training(cfg, loop, logger, replicas, videos)  # the initial evaluation starts; the clock of this call starts
    with StopFlag() as stop:
        try:
            while loop.interaction_step < run.num_interaction_steps:
                run.sync_initial_eval()  # before this step's policy action
                loop.interaction_step += 1
                env_step = loop.interaction_step * loop.num_envs
                run.collect()  # act, step the envs, store the transition, update the reward statistics
                run.sync_initial_eval()  # before this step's first update
                if loop.fused:
                    run.step_agent(env_step)  # one agent call: store, update(s), next action
                if loop.buffer.can_sample():
                    if not loop.fused:
                        if loop.act_before_update:
                            loop.dispatch_next_action()  # the next action, before this step's updates
                        run.update(env_step)  # the due updates on batches sampled here
                    run.on_intervals(env_step)  # evaluation, logging and checkpoint when due
                status = run.stop_status(stop, run.show_progress(env_step))
                if status is not None:
                    run.status = status
                    break
            run.finish()  # the initial evaluation, the final evaluation and checkpoint
        finally:
            run.close()
    return run.result(resumed_ckpt)


def _open_run(cfg: Config, make_agent: AgentFactory, replicas: Replicas
              ) -> tuple[_Loop, RunLogger | NullLogger, str | None, RunVideos | None]:
    """Checks and creates the run directory, builds the run's state and, with ``agent_load_path``, repairs the run's
    checkpoints and resumes from the newest usable one; opens the run's logger and, with ``record_video``, its video
    recorder. Returns (state, logger, the checkpoint resumed from or None, the recorder or None)."""
    if replicas.is_main:
        prepare_run_dir(cfg)
    else:
        check_training_run(cfg)  # replica 0 creates the run directory
    run_dir = cfg.save_path or "."
    if cfg.agent_load_path is not None and replicas.is_main:
        source_run = run_dir_of_checkpoint(cfg.agent_load_path)
        if os.path.isdir(source_run) and os.path.samefile(source_run, run_dir):
            for line in recover_checkpoints(run_dir):
                print(line, file=sys.stderr, flush=True)
    replicas.barrier()  # the run directory exists and its checkpoints are repaired before any replica reads them
    loop = _Loop(cfg, make_agent, replicas)
    resumed_ckpt: str | None = None
    videos: RunVideos | None = None
    try:
        videos = run_videos(cfg, run_dir) if replicas.is_main else None  # None: no renderer is ever created
        loop.videos = videos
        if cfg.agent_load_path is not None:
            resumed_ckpt = loop.load(cfg.agent_load_path)
            resumed_step = loop.interaction_step * loop.num_envs
            if not replicas.same_on_all(resumed_step):
                raise CheckpointError(f"the replicas resumed from different checkpoints (replica {replicas.rank}: "
                                      f"{resumed_ckpt}); repair or remove the damaged one and resume again")
            print(f"resumed from {resumed_ckpt} at env step {resumed_step}", file=sys.stderr)
            for line in set_aside_newer(run_dir, resumed_step) if replicas.is_main else []:
                print(line, file=sys.stderr)  # the abandoned continuation, kept aside
            kept = kept_on_resume(cfg)
            if kept and replicas.is_main:
                print(
                    "the run's schedule and intervals are kept: " + "; ".join(kept)
                    + " (rederive_schedule_on_resume=true re-derives them from num_env_steps)",
                    file=sys.stderr,
                )
        if cfg.agent_init_path is not None:
            line = loop.start_from(cfg.agent_init_path, _framework_of(loop.agent))
            print(line, file=sys.stderr, flush=True)  # the run's config.yaml records agent_init_path too
        logger = NullLogger() if not replicas.is_main else RunLogger(
            run_dir,
            cfg.exp_name,
            cfg.env.env_name,
            cfg.seed,
            config_to_yaml(cfg),
            resume_step=None if resumed_ckpt is None else loop.interaction_step * loop.num_envs,
            **logger_options(cfg, run_dir),
        )
    except BaseException:
        loop.close()
        if videos is not None:
            videos.close()
        raise
    return loop, logger, resumed_ckpt, videos


class _Training:
    """One ``train`` call on a run's state (``_Loop``): the pieces of an interaction step, evaluation, logging,
    checkpoints, the progress bar, the end of the run and its ``TrainResult``. Constructing it starts the call:
    the agent's precompilation, its info, the compute-path line and the step-0 evaluation, then the clock."""

    def __init__(self, cfg: Config, loop: _Loop, logger: RunLogger | NullLogger, replicas: Replicas,
                 videos: RunVideos | None = None) -> None:
        self.cfg, self.loop, self.logger, self.replicas, self.videos = cfg, loop, logger, replicas, videos
        self.run_dir = cfg.save_path or "."
        self.evaluations: list[tuple[int, dict[str, float]]] = []
        self.initial_eval: _BackgroundEvaluation | None = None  # the step-0 evaluation while it runs in the background
        self.start_step = loop.interaction_step
        if loop.fused and loop.agent.capabilities.precompile_step and self.start_step < loop.num_interaction_steps:
            # the first updates' programs compile during the evaluation and the warm-up
            cast(PrecompilingAgent, loop.agent).precompile_step(loop.local_envs)
        self.log_info(logger.first_step)
        if replicas.is_main:
            announce_compute_path(loop.agent)
        self.timeline = UpdateTimeline(launch_time())
        if self.start_step == 0 and videos is not None:
            self.record_video()  # before the step-0 evaluation starts on its thread: they never call the agent at once
        if self.start_step == 0 and cfg.num_eval_episodes > 0 and replicas.is_main:
            self.initial_eval = loop.start_initial_evaluation()  # None: it runs here, before training
            if self.initial_eval is None:
                self.do_eval()
        self.num_interaction_steps = loop.num_interaction_steps
        self.status = "completed"
        self.last_ckpt: str | None = None
        self.t_start = time.monotonic()
        self.window_start, self.window_env_steps, self.window_updates = self.t_start, 0, 0
        self.update_time, self.updates_this_call = 0.0, 0
        self.postfix_time = 0.0
        self.bar = tqdm(
            total=self.num_interaction_steps * loop.num_envs,
            initial=min(self.start_step, self.num_interaction_steps) * loop.num_envs,
            unit="step",
            dynamic_ncols=True,
            disable=not cfg.progress_bar or not replicas.is_main,
            file=sys.stderr,
            mininterval=1.0,
        )

    # ----------------------------------------------------------------------------------------- evaluation
    def log_eval(self, metrics: dict[str, float], interaction_step: int) -> None:
        env_step = interaction_step * self.loop.num_envs
        self.logger.log_eval(metrics, env_step)
        self.evaluations.append((env_step, metrics))
        self.loop.last_eval_step = interaction_step
        self.loop.last_eval_return = metrics["avg_return"]

    def finish_initial_eval(self) -> None:
        """Waits for the background step-0 evaluation, if one runs, and logs it (its error is raised here)."""
        if self.initial_eval is not None:
            metrics = self.initial_eval.result()  # still pending if this raises: the run's ``close`` ends it
            self.log_eval(metrics, self.initial_eval.interaction_step)
            self.initial_eval = None

    def sync_initial_eval(self) -> None:
        """Logs the background step-0 evaluation once it has finished; for an agent without a snapshot, waits for it
        as soon as the agent will be called (the buffer can sample: the first policy action and update)."""
        if self.initial_eval is not None and (self.initial_eval.done() or (
                not self.initial_eval.overlaps_updates and self.loop.buffer.can_sample())):
            self.finish_initial_eval()

    def do_eval(self) -> None:
        if not self.replicas.is_main:  # replica 0 alone evaluates
            return
        self.finish_initial_eval()  # evaluations are logged in step order, and this one steps the same eval env
        self.log_eval(self.loop.evaluate(), self.loop.interaction_step)

    def record_video(self) -> None:
        assert self.videos is not None
        loop = self.loop
        line = self.videos.record(loop.evaluation_policy(), loop.interaction_step,
                                  loop.interaction_step * loop.num_envs, self.logger)
        tqdm.write(line, file=sys.stderr)

    # ----------------------------------------------------------------------------------------- logging, checkpoints
    def log_info(self, step: int) -> dict[str, float]:
        scalars: dict[str, float] = {}
        for key, value in self.loop.agent.info().items():
            if isinstance(value, str):
                self.logger.log_text(key, value, step, only_if_changed=True)
            else:
                scalars[key] = float(value)
        return scalars

    def save(self, with_buffer: bool = False) -> str:
        self.finish_initial_eval()  # the checkpoint holds the eval env's state and the latest evaluation
        line = self.loop.save(with_buffer=with_buffer)
        if self.replicas.is_main:
            tqdm.write(line, file=sys.stderr)
        return checkpoint_dir(self.run_dir, self.loop.interaction_step * self.loop.num_envs)

    # ----------------------------------------------------------------------------------------- one step
    def collect(self) -> None:
        """Acts, steps the training envs and stores the transition; updates the reward statistics."""
        loop = self.loop
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
        self.window_env_steps += loop.num_envs

    def step_agent(self, env_step: int) -> None:
        """The agent's fused step (one call: store, the due updates, next action; metrics stay on the device)."""
        loop = self.loop
        due = loop.due_updates()
        t0 = time.perf_counter()
        loop.step_agent(due)
        if due:
            update_seconds = time.perf_counter() - t0
            self.update_time += update_seconds
            first = self.timeline.record(time.monotonic(), self.updates_this_call + due, update_seconds)
            if first and self.replicas.is_main:
                report_first_update(self.logger, self.timeline, env_step, self.t_start)
        loop.num_updates += due
        self.updates_this_call += due
        self.window_updates += due

    def update(self, env_step: int) -> None:
        """The due updates (fractional UTD accumulates), each on a batch sampled from the buffer here."""
        loop, cfg = self.loop, self.cfg
        loop.update_counter += cfg.updates_per_interaction_step
        while loop.update_counter >= 1.0:
            batch = loop.buffer.sample(cfg.agent.sample_batch_size * cfg.num_devices)  # jax: N devices
            batch["reward"] = loop.normalizer.normalize(batch["reward"])  # (B,)
            t0 = time.perf_counter()
            metrics = loop.agent.update(batch)
            update_seconds = time.perf_counter() - t0
            self.update_time += update_seconds
            first = self.timeline.record(time.monotonic(), self.updates_this_call + 1, update_seconds)
            if first and self.replicas.is_main:
                report_first_update(self.logger, self.timeline, env_step, self.t_start)
            loop.meter.update(metrics)
            loop.update_counter -= 1.0
            loop.num_updates += 1
            self.updates_this_call += 1
            self.window_updates += 1

    def on_intervals(self, env_step: int) -> None:
        """Evaluation, logging and the checkpoint, each on its interval."""
        cfg, loop, replicas, n_int = self.cfg, self.loop, self.replicas, self.num_interaction_steps
        step = loop.interaction_step
        if step % replicas.interval(cfg.evaluation_per_interaction_step, n_int) == 0 and (
            cfg.num_eval_episodes > 0
        ):
            self.do_eval()
        if self.videos is not None and self.videos.due(step, replicas.interval(cfg.recording_per_interaction_step,
                                                                              n_int)):
            self.record_video()
        if step % replicas.interval(cfg.logging_per_interaction_step, n_int) == 0:
            now = time.monotonic()
            loop.take_metrics()
            scalars = loop.meter.averages()
            scalars.update(self.log_info(env_step))
            scalars["perf/env_steps_per_second"] = self.window_env_steps / max(now - self.window_start, 1e-9)
            scalars["perf/updates_per_second"] = self.window_updates / max(now - self.window_start, 1e-9)
            scalars["perf/update_ms"] = 1e3 * self.update_time / max(self.updates_this_call, 1)
            self.logger.log_scalars(scalars, env_step)
            loop.meter.reset()
            self.window_start, self.window_env_steps, self.window_updates = now, 0, 0
        if step % replicas.interval(cfg.save_checkpoint_per_interaction_step, n_int) == 0:
            self.last_ckpt = self.save()

    def show_progress(self, env_step: int) -> float:
        """Advances the progress bar (its rates at most once a second); returns the time now."""
        loop = self.loop
        self.bar.update(loop.num_envs)
        now = time.monotonic()
        if now - self.postfix_time >= 1.0:
            elapsed = max(now - self.t_start, 1e-9)
            self.bar.set_postfix(
                sps=f"{(env_step - self.start_step * loop.num_envs) / elapsed:.1f}",
                ups=f"{self.updates_this_call / elapsed:.1f}",
                eval=f"{loop.last_eval_return:.1f}",
                refresh=False,
            )
            self.postfix_time = now
        return now

    def stop_status(self, stop: StopFlag, now: float) -> str | None:
        """``"interrupted"`` (Ctrl-C) or ``"budget"`` (``max_wall_seconds``) when the run stops after this step, else
        None; several replicas agree every ``_AGREE_EVERY`` steps, so all stop at the same one."""
        cfg, replicas = self.cfg, self.replicas
        stopping = stop.requested
        over_budget = cfg.max_wall_seconds is not None and now - self.t_start >= cfg.max_wall_seconds
        if replicas.world_size > 1:
            step = self.loop.interaction_step
            code = replicas.max_on_all(2 if stopping else int(over_budget)) if step % _AGREE_EVERY == 0 else 0
            stopping, over_budget = code == 2, code == 1
        if stopping:
            return "interrupted"
        if over_budget:
            return "budget"
        return None

    # ----------------------------------------------------------------------------------------- the end
    def finish(self) -> None:
        """After the last step: the initial evaluation's result, the steady update rate, the final evaluation (a
        completed run) and the final checkpoint (with the replay buffer when the run stopped early)."""
        loop, cfg, status = self.loop, self.cfg, self.status
        if self.initial_eval is not None:
            if status != "completed" and not self.initial_eval.done():
                tqdm.write("waiting for the initial evaluation to finish: the checkpoint holds its result and "
                           "the eval env", file=sys.stderr)
            self.finish_initial_eval()
        if self.updates_this_call > 1 and math.isfinite(self.timeline.steady_rate()):
            self.logger.log_scalars({"perf/steady_updates_per_second": self.timeline.steady_rate()},
                                    loop.interaction_step * loop.num_envs)
        if status == "completed":
            if loop.last_eval_step != loop.interaction_step and cfg.num_eval_episodes > 0:
                self.do_eval()
            if self.videos is not None and self.videos.last_step != loop.interaction_step:
                self.record_video()
        if status != "completed":
            if loop.last_checkpoint_step != loop.interaction_step or not loop.last_checkpoint_has_buffer:
                self.last_ckpt = self.save(with_buffer=True)  # stopped early: the resume must be exact
        elif loop.last_checkpoint_step != loop.interaction_step:
            self.last_ckpt = self.save()

    def close(self) -> None:
        """Cancels a still running initial evaluation (the run failed or was aborted), closes the bar, the logger
        and the envs."""
        if self.initial_eval is not None:
            self.initial_eval.cancel()
        self.bar.close()
        if self.videos is not None:
            self.videos.close()
            tqdm.write(self.videos.summary(), file=sys.stderr)
        self.logger.close()
        self.loop.close()

    def result(self, resumed_ckpt: str | None) -> TrainResult:
        loop, timeline = self.loop, self.timeline
        wall = time.monotonic() - self.t_start
        env_steps_done = (loop.interaction_step - self.start_step) * loop.num_envs
        return TrainResult(
            status=self.status,
            env_step=loop.interaction_step * loop.num_envs,
            run_dir=self.run_dir,
            checkpoint=self.last_ckpt or latest_checkpoint(self.run_dir) or resumed_ckpt,
            evaluations=self.evaluations,
            wall_seconds=wall,
            env_steps_per_second=env_steps_done / max(wall, 1e-9),
            updates_per_second=self.updates_this_call / max(wall, 1e-9),
            update_seconds_mean=self.update_time / max(self.updates_this_call, 1),
            env_steps_this_call=env_steps_done,
            last_eval_return=loop.last_eval_return,
            last_eval_step=loop.last_eval_step * loop.num_envs if loop.last_eval_step >= 0 else -1,
            time_to_first_update=timeline.time_to_first_update,
            first_update_seconds=timeline.first_seconds,
            steady_updates_per_second=timeline.steady_rate(),
        )


def _summary(result: TrainResult, num_env_steps: int) -> str:
    """The lines the CLI prints at the end: what happened, where everything is, how to resume."""
    if result.env_steps_this_call == 0 and result.status == "completed":
        head = (
            f"[completed] nothing to train: the run is already at env step {result.env_step} "
            f"(num_env_steps={num_env_steps}; raise it to train further). "
            f"last_eval_return={result.last_eval_return:.1f} at env step {result.last_eval_step}"
        )
    else:
        head = (
            f"[{result.status}] env_step={result.env_step} wall={result.wall_seconds:.1f}s "
            f"env_steps/s={result.env_steps_per_second:.1f} updates/s={result.updates_per_second:.1f} "
            f"update_ms={1e3 * result.update_seconds_mean:.2f} last_eval_return={result.last_eval_return:.1f} "
            f"time_to_first_update={result.time_to_first_update:.1f}s "
            f"steady_updates/s={result.steady_updates_per_second:.1f}"
        )
    lines = [
        head,
        f"  run dir:    {result.run_dir}",
        f"  tensorboard: {os.path.join(result.run_dir, 'tb')}",
        f"  eval csv:   {os.path.join(result.run_dir, 'eval.csv')}  (plot: python -m agent_common.plot "
        f"{result.run_dir})",
        f"  checkpoint: {result.checkpoint}",
    ]
    lines += continue_lines(result.status, result.run_dir, num_env_steps)
    return "\n".join(lines)


def run_cli(
    argv: list[str] | None,
    framework: str,
    make_agent_module: Callable[[], AgentFactory],
    replicas: Replicas = SINGLE,
    make_vector_module: Callable[[], Any] | None = None,
) -> int:
    """``python -m agent_<framework>.train --overrides key=value ...``.

    Parses and validates the config and the run directory first (exit 2 on an error, before any env or framework
    work), then imports the agent (``make_agent_module()`` returns the factory), trains and prints where everything
    went. Errors the user can fix end with one line on stderr, not a traceback.

    Args:
        argv: CLI arguments (default ``sys.argv[1:]``).
        framework: ``"torch"`` or ``"jax"``.
        make_agent_module: lazily imports and returns the agent factory.
        replicas: data-parallel replicas (``agent_torch.distributed`` under torchrun); replica 0 alone prints
            the summary.
        make_vector_module: lazily imports and returns the agent's ``agent_common.vector_loop.VectorFactory``;
            with ``env.env_type=mjx`` the run is ``vector_loop.train_vector`` instead of ``train``.

    Returns:
        The process exit code: 0 completed or stopped on the wall-clock budget, 130 after Ctrl-C, 2 for a config,
        run-directory, checkpoint or strict-backend error, 1 when the disk is full or a loss, reward or observation
        became non-finite (with its likely causes and the last good checkpoint).
    """
    cfg = parse_args(argv, framework=framework, prog=f"python -m agent_{framework}.train")  # type: ignore[arg-type]
    run_dir = os.path.abspath(cfg.save_path or ".")
    first_created = None  # the outermost directory of run_dir that this call creates
    path = run_dir
    while not os.path.exists(path) and os.path.dirname(path) != path:
        first_created, path = path, os.path.dirname(path)
    try:
        if replicas.is_main:
            prepare_run_dir(cfg, framework if make_vector_module is not None else None)
        if cfg.env.env_type in VECTOR_ENV_TYPES and make_vector_module is not None:
            from agent_common.vector_loop import train_vector  # imports this module

            result = train_vector(cfg, make_vector_module(), framework, replicas)
        else:
            result = train(cfg, make_agent_module(), replicas)
    except (ConfigError, CheckpointError) as exc:
        if first_created is not None:  # nothing was written: leave no empty run directory (or parents) behind
            path = run_dir
            while os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)
                if path == first_created:
                    break
                path = os.path.dirname(path)
        kind = "config" if isinstance(exc, ConfigError) else "checkpoint"
        print(f"{kind} error: {exc}", file=sys.stderr)
        return 2
    except FloatingPointError as exc:
        print(f"error: {non_finite_message(exc, run_dir, cfg.agent.learning_rate_peak, cfg.agent.normalize_reward)}",
              file=sys.stderr)
        return 1
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        message = str(exc) if isinstance(exc, DiskFullError) else f"disk full (No space left on device): {exc}"
        print(f"error: {message}", file=sys.stderr)
        return 1
    if replicas.is_main:
        print(_summary(result, cfg.num_env_steps), flush=True)
    return 130 if result.status == "interrupted" else 0
