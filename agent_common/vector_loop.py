"""The training driver for MJX environments (``env.env_type=mjx``), shared by both agents; no framework imports.

The environments, the replay rows and the updates live on the device, so the per-step work is the agent's: a
``VectorTrainer`` runs whole chunks of interaction steps (``advance``) without the host. This driver plans the
chunks and does everything between them, as ``agent_common.loop`` does for gymnasium: evaluation, logging
(TensorBoard, ``eval.csv``), checkpoints and resume, the time-to-first-update and steady-rate report, the
``compute path:`` line, ``max_wall_seconds``, the stop signals (docs/flashsac.md, section 8) and, with
``record_video``, the evaluation videos (``agent_common.video.VectorRecorder``).

One interaction step is one step of every env (``num_train_envs`` env steps), as in the schema's intervals. A chunk
is at most ``interaction_steps_per_call(cfg)`` steps and ends at every multiple of the evaluation, logging,
checkpoint and (when recording) recording intervals and at the end of the run; those events run between chunks
once the replay can sample, as in the gymnasium loop. The driver mirrors the replay's fill on the host
(``num_train_envs`` rows per step, up to ``agent.buffer_max_length``), so it knows which steps ran updates without
reading the device.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from tqdm import tqdm

from agent_common.config import config_to_yaml
from agent_common.keys import Config, ConfigError
from agent_common.logger import AverageMeter, RunLogger, UpdateTimeline, launch_time
from agent_common.replicas import SINGLE, Replicas
from agent_common.run import (
    StopFlag,
    TrainResult,
    announce_compute_path,
    kept_on_resume,
    prepare_run_dir,
    report_first_update,
)
from agent_common.runs.checkpoints import (
    latest_checkpoint,
    load_newest,
    recover_checkpoints,
    set_aside_newer,
    write_checkpoint,
)
from agent_common.runs.files import (
    AGENT_DIR,
    BUFFER_FILE,
    CONFIG_FILE,
    LOOP_STATE_FILE,
    CheckpointError,
    atomic_pickle,
    atomic_write_text,
    directory_size,
    read_checkpoint_file,
    warn,
)
from agent_common.runs.rundir import run_dir_of_checkpoint
from agent_common.video import RunVideos, recording_on, run_videos
from agent_common.wandb_logger import logger_options

__all__ = [
    "DRIVER",
    "MAX_STEPS_PER_CALL",
    "StopSignals",
    "VectorFactory",
    "VectorTrainer",
    "interaction_steps_per_call",
    "train_vector",
]

DRIVER = "mjx"
"""``loop_state.pkl``'s ``driver`` entry: which loop wrote a checkpoint."""

MAX_STEPS_PER_CALL = 64
"""The most interaction steps of one ``advance`` call when ``interaction_steps_per_call`` is null."""


class VectorTrainer(Protocol):
    """What a framework provides for MJX training (``agent_jax.vector``; the torch agent's counterpart).

    Attributes:
        num_envs: E, the training envs (``num_train_envs``).
    """

    num_envs: int

    def advance(self, num_steps: int) -> None:
        """Runs ``num_steps`` interaction steps (1 <= num_steps <= ``interaction_steps_per_call(cfg)``) and returns
        when they are done. Each step: the action (uniform random in the action bounds while the replay holds fewer
        than ``agent.buffer_min_length`` rows before this step's rows, else the policy with zeta-repeated noise),
        the env step, the E rows stored (``agent_common.buffer.ROW_KEYS``: the true final observation as the
        successor; with ``n_step`` n > 1 the n-step rows of the step n − 1 steps back, once n steps were taken, with
        ``agent_common.buffer.ReplayBuffer``'s rule, the n − 1 newest steps in flight), the reward normaliser
        updated (per-env running return, ``agent_common.normalizer``), then,
        once the replay holds ``buffer_min_length`` rows, ``updates_per_interaction_step`` updates on batches
        sampled on the device (rewards divided by the normaliser's scale; actor and temperature every
        ``actor_update_period``-th update of the run)."""
        ...

    def evaluate(self, num_episodes: int) -> dict[str, float]:
        """The deterministic policy on the MJX evaluation envs (``num_eval_envs``): ``num_episodes //
        num_eval_envs`` rounds, each from a fresh reset until every env has finished once, returns counted up to
        each env's first end (as ``agent_common.envs.evaluate``). Keys ``avg_return``, ``avg_length``,
        ``avg_success_once``, ``avg_success_end``."""
        ...

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        """The update metrics since the last call, ``{name: (sum, count)}`` (upstream names); resets the sums.

        Raises:
            FloatingPointError: a non-finite sum.
        """
        ...

    def info(self) -> dict[str, float | str]:
        """As ``Agent.info``: ``backend/*`` and ``compile/path`` (printed once as the ``compute path:`` line)."""
        ...

    def save_agent(self, directory: str) -> None:
        """Writes the agent's files (the framework agent's ``save`` layout)."""
        ...

    def load_agent(self, directory: str, load_optimizer: bool) -> None:
        """Restores ``save_agent`` output."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything else a bitwise resume needs but the replay rows, as picklable host values: env state, keys
        or generators, noise, reward normaliser, counters, the replay's ring index, size and sampler state."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict`` output (the reward normaliser only if ``agent.load_reward_normalizer``)."""
        ...

    def buffer_state(self) -> dict[str, Any]:
        """The replay rows for a checkpoint (``rows``: (size, 2O + A + 3) float32 in ``ROW_KEYS`` columns)."""
        ...

    def load_buffer_state(self, state: dict[str, Any] | None) -> None:
        """Restores ``buffer_state`` output after ``load_state_dict``; None empties the replay (a checkpoint
        without rows: the warm-up starts again)."""
        ...

    def close(self) -> None:
        """Releases what the trainer holds (called once, also after an error)."""
        ...

    # Needed with ``n_step`` > 1: ``window_fill() -> int``, the steps in flight in the n-step window (0 .. n − 1;
    # read after ``load_buffer_state``, which may restart the window empty).
    # Optional: ``precompile() -> None``, called once before the initial evaluation of a run that has steps left:
    # starts compiling the training program in the background (the first ``advance`` waits for it).
    # Needed by ``record_video``: ``recording_model() -> (MjModel, seconds per step)`` and
    # ``record_round(num_envs, num_steps, index) -> {"qpos", "alive", "returns", "finished"}``, one round of the
    # deterministic policy on copies of the evaluation envs from the recording key folded with ``index`` (the same
    # round for the same index), at most ``num_steps`` steps; only the first ``num_envs`` envs' joint positions
    # reach the host (``agent_common.video.VectorRecorder`` renders them).


VectorFactory = Callable[[Config], VectorTrainer]
"""``make_vector_trainer(cfg) -> VectorTrainer``; raises ``ConfigError`` for a config it cannot run, before work."""


def interaction_steps_per_call(cfg: Config) -> int:
    """K, the most interaction steps of one ``advance`` call: ``interaction_steps_per_call``, or when null the
    logging interval L cut into equal calls of at most ``MAX_STEPS_PER_CALL`` steps, ceil(L / ceil(L / 64))."""
    if cfg.interaction_steps_per_call is not None:
        return int(cfg.interaction_steps_per_call)
    every = max(1, int(cfg.logging_per_interaction_step or 1))
    calls = -(-every // MAX_STEPS_PER_CALL)
    return -(-every // calls)


class StopSignals(StopFlag):
    """``StopFlag`` (first Ctrl-C: stop after the current call and checkpoint; second: abort) plus SIGTERM, which
    also stops after the current call and checkpoints."""

    def __enter__(self) -> StopSignals:
        super().__enter__()
        self._previous_term: Any = None
        if threading.current_thread() is threading.main_thread():
            self._previous_term = signal.signal(signal.SIGTERM, self._terminate)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous_term is not None:
            signal.signal(signal.SIGTERM, self._previous_term)
        super().__exit__(*exc)

    def _terminate(self, signum: int, frame: Any) -> None:
        if not self.requested:
            self.requested = True
            print("\nSIGTERM: finishing the current call, then saving a checkpoint", file=sys.stderr, flush=True)


class _VectorRun:
    """The driver's state of one run: counters, the host mirror of the replay's fill, the metric meter, and the
    checkpoint save / load around the trainer."""

    def __init__(self, cfg: Config, trainer: VectorTrainer) -> None:
        self.cfg = cfg
        self.trainer = trainer
        self.num_envs = int(trainer.num_envs)
        self.capacity = int(cfg.agent.buffer_max_length)
        self.min_rows = int(cfg.agent.buffer_min_length)
        self.updates_per_step = int(cfg.updates_per_interaction_step)
        self.steps_per_call = interaction_steps_per_call(cfg)
        self.num_interaction_steps = max(1, cfg.num_env_steps // self.num_envs)
        self.interaction_step = 0
        self.replay_rows = 0  # rows the trainer's replay holds (host mirror)
        self.n_step = int(cfg.n_step)
        self.window_fill = 0  # steps in the trainer's n-step window, not stored yet (host mirror, <= n_step - 1)
        self.num_updates = 0
        self.last_eval_step = -1
        self.last_eval_return = float("nan")
        self.last_checkpoint_step = -1
        self.last_checkpoint_has_buffer = False
        self.meter = AverageMeter()
        self.videos: RunVideos | None = None  # the run's recorder (record_video); its state goes in the checkpoint
        self.record_every = cfg.recording_per_interaction_step or self.num_interaction_steps

    def can_sample(self) -> bool:
        return self.replay_rows >= self.min_rows

    def chunk_end(self) -> int:
        """The last interaction step of the next call: at most K steps on, and not past the next evaluation,
        logging or checkpoint step or the end of the run."""
        cfg = self.cfg
        start = self.interaction_step
        end = min(start + self.steps_per_call, self.num_interaction_steps)
        intervals = [cfg.logging_per_interaction_step, cfg.save_checkpoint_per_interaction_step]
        if cfg.num_eval_episodes > 0:
            intervals.append(cfg.evaluation_per_interaction_step)
        if self.videos is not None:
            intervals.append(self.record_every)
        for every in intervals:
            if every:
                end = min(end, (start // every + 1) * every)
        return end

    def advance(self, end: int) -> int:
        """Runs the steps up to ``end`` and returns how many updates they ran."""
        rows, updates, fill = self.replay_rows, 0, self.window_fill
        for _ in range(end - self.interaction_step):
            if fill < self.n_step - 1:  # the step enters the n-step window; nothing is stored yet
                fill += 1
            else:
                rows = min(self.capacity, rows + self.num_envs)
            if rows >= self.min_rows:
                updates += self.updates_per_step
        self.trainer.advance(end - self.interaction_step)
        self.interaction_step, self.replay_rows, self.window_fill = end, rows, fill
        self.num_updates += updates
        return updates

    def take_metrics(self) -> None:
        for key, (total, count) in self.trainer.take_metrics().items():
            self.meter.sums[key] += total
            self.meter.counts[key] += count

    # ----------------------------------------------------------------------------------------- checkpoints
    def save(self, with_buffer: bool = False) -> tuple[str, str]:
        """Writes ``<run>/checkpoints/step<env_step>/`` atomically (``checkpoint.write_checkpoint``) and returns
        (its path, a line saying what was written).

        Args:
            with_buffer: also write the replay rows if ``save_buffer`` is off (the run stops early).
        """
        cfg = self.cfg
        run_dir = cfg.save_path or "."
        self.take_metrics()  # the metrics summed on the device go into the meter, which the checkpoint holds
        every = cfg.save_buffer_per_interaction_step
        save_data = with_buffer or (cfg.save_buffer if every is None else self.interaction_step % every == 0)
        config_yaml = config_to_yaml(cfg)
        state = {
            "driver": DRIVER,
            "interaction_step": self.interaction_step,
            "env_step": self.interaction_step * self.num_envs,
            "replay_rows": self.replay_rows,
            "num_updates": self.num_updates,
            "last_eval_step": self.last_eval_step,
            "last_eval_return": self.last_eval_return,
            "meter": self.meter.state_dict(),
            "videos": None if self.videos is None else self.videos.state_dict(),
            "buffer_saved": bool(save_data),
            "config_yaml": config_yaml,
            "world_size": 1,
            "trainer": self.trainer.state_dict(),
        }

        def write(directory: str) -> None:
            self.trainer.save_agent(os.path.join(directory, AGENT_DIR))
            atomic_write_text(os.path.join(directory, CONFIG_FILE), config_yaml)
            atomic_pickle(os.path.join(directory, LOOP_STATE_FILE), state)
            if save_data:
                atomic_pickle(os.path.join(directory, BUFFER_FILE), self.trainer.buffer_state())

        final, pruned = write_checkpoint(run_dir, self.interaction_step * self.num_envs, write, cfg.keep_checkpoints)
        self.last_checkpoint_step = self.interaction_step
        self.last_checkpoint_has_buffer = bool(save_data)
        buffer = f", replay buffer {self.replay_rows} rows" if save_data else ", no replay buffer"
        removed = f"; removed {', '.join(os.path.basename(p) for p in pruned)}" if pruned else ""
        return final, f"checkpoint {final} ({directory_size(final) / 2**20:.1f} MiB{buffer}){removed}"

    def load(self, path: str) -> str:
        """Restores the newest usable checkpoint at ``path`` (a checkpoint or a run directory; unreadable ones are
        skipped with a warning) and returns it.

        Raises:
            CheckpointError: no usable checkpoint; the message names the file and says what to do.
        """
        return load_newest(path, self._load_checkpoint)

    def _load_checkpoint(self, ckpt: str) -> None:
        state_file = os.path.join(ckpt, LOOP_STATE_FILE)
        state = read_checkpoint_file(state_file)
        if not isinstance(state, dict) or state.get("driver") != DRIVER:
            raise CheckpointError(f"{state_file} was not written by the MJX driver (env.env_type=mjx)")
        buffer_path = self.cfg.buffer_load_path or os.path.join(ckpt, BUFFER_FILE)
        buffer_state = None
        if self.cfg.buffer_load_path is not None or state.get("buffer_saved", False):
            if not os.path.exists(buffer_path):
                raise CheckpointError(f"{buffer_path} is missing although {state_file} records a saved replay buffer: "
                                      "the checkpoint is incomplete")
            buffer_state = read_checkpoint_file(buffer_path)
        try:
            self.trainer.load_agent(os.path.join(ckpt, AGENT_DIR), self.cfg.agent.load_optimizer)
        except (KeyError, RuntimeError, ValueError) as exc:  # entries or shapes that do not fit the networks
            detail = " ".join(str(exc).split())[:400]
            raise CheckpointError(f"{os.path.join(ckpt, AGENT_DIR)} does not fit this agent ({detail})") from None
        try:
            self.trainer.load_state_dict(state["trainer"])
            self.trainer.load_buffer_state(buffer_state)
            self.interaction_step = int(state["interaction_step"])
            self.replay_rows = int(state["replay_rows"]) if buffer_state is not None else 0
            self.window_fill = int(self.trainer.window_fill()) if self.n_step > 1 else 0  # type: ignore[attr-defined]
            self.num_updates = int(state["num_updates"])
            self.last_eval_step = int(state["last_eval_step"])
            self.last_eval_return = float(state["last_eval_return"])
            self.meter.load_state_dict(state["meter"])
            if self.videos is not None and state.get("videos") is not None:
                self.videos.load_state_dict(state["videos"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{state_file} does not match this run ({type(exc).__name__}: {exc})") from None
        self.last_checkpoint_step = self.interaction_step
        self.last_checkpoint_has_buffer = buffer_state is not None
        if self.videos is not None and state.get("videos") is None:
            warn(f"{ckpt} holds no video recorder state (it was written with record_video=false); the recorder "
                 "starts from its first round and records from the next due step")
        if buffer_state is None:
            warn(f"{ckpt} has no replay buffer (it was saved with save_buffer=false); collecting "
                 f"{self.min_rows} random steps again before updates, so this resume is not exact")


def train_vector(cfg: Config, make_trainer: VectorFactory, framework: str,
                 replicas: Replicas = SINGLE) -> TrainResult:
    """Runs (or resumes) FlashSAC training on MJX environments (``env.env_type=mjx``); ``run_cli`` calls it.

    Per call: ``advance`` over up to K interaction steps (see the module doc), then, once the replay can sample,
    evaluation, logging and a checkpoint on their intervals. Evaluation also runs at step 0 and at the end; a
    checkpoint is written on every checkpoint step, at the end, on Ctrl-C / SIGTERM and when ``max_wall_seconds``
    is reached (with the replay rows, so the resume is exact). A resume repairs the run's checkpoints, loads the
    newest usable one, removes newer ones and cuts ``eval.csv`` and TensorBoard back to its step.

    Args:
        cfg: the resolved config (``env.env_type=mjx``).
        make_trainer: the framework's ``VectorFactory``.
        framework: ``"torch"`` or ``"jax"`` (``schema.check_training_run``).
        replicas: must be one process.

    Raises:
        ConfigError: the run cannot be used (several processes, the run directory, the trainer's own checks).
        CheckpointError: no usable checkpoint to resume from.
        DiskFullError: the disk filled up while writing a checkpoint.
    """
    if replicas.world_size > 1:
        raise ConfigError(f"env.env_type={cfg.env.env_type} runs in one process (got {replicas.world_size} replicas): "
                          "the envs, the replay and the update share one device; start it without torchrun")
    prepare_run_dir(cfg, framework)
    run_dir = cfg.save_path or "."
    if cfg.agent_load_path is not None:
        source_run = run_dir_of_checkpoint(cfg.agent_load_path)
        if os.path.isdir(source_run) and os.path.samefile(source_run, run_dir):
            for line in recover_checkpoints(run_dir):
                print(line, file=sys.stderr, flush=True)
    trainer = make_trainer(cfg)
    run = _VectorRun(cfg, trainer)
    num_envs = run.num_envs
    resumed_ckpt: str | None = None
    videos: RunVideos | None = None
    try:
        if recording_on(cfg) and not callable(getattr(trainer, "record_round", None)):
            raise ConfigError(f"record_video=true: the {framework} trainer of env.env_type={cfg.env.env_type} cannot "
                              "record evaluation videos (no record_round); set record_video=false")
        videos = run_videos(cfg, run_dir, trainer)  # None: no renderer is ever created
        run.videos = videos
        if cfg.agent_load_path is not None:
            resumed_ckpt = run.load(cfg.agent_load_path)
            resumed_step = run.interaction_step * num_envs
            print(f"resumed from {resumed_ckpt} at env step {resumed_step}", file=sys.stderr)
            for line in set_aside_newer(run_dir, resumed_step):
                print(line, file=sys.stderr)  # the abandoned continuation, kept aside
            kept = kept_on_resume(cfg)
            if kept:
                print("the run's schedule and intervals are kept: " + "; ".join(kept)
                      + " (rederive_schedule_on_resume=true re-derives them from num_env_steps)", file=sys.stderr)
        logger = RunLogger(run_dir, cfg.exp_name, cfg.env.env_name, cfg.seed, config_to_yaml(cfg),
                           resume_step=None if resumed_ckpt is None else run.interaction_step * num_envs,
                           **logger_options(cfg, run_dir))
    except BaseException:
        if videos is not None:
            videos.close()
        trainer.close()
        raise
    evaluations: list[tuple[int, dict[str, float]]] = []

    def do_eval() -> None:
        t0 = time.perf_counter()
        metrics = trainer.evaluate(cfg.num_eval_episodes)
        env_step = run.interaction_step * num_envs
        logger.log_eval(metrics, env_step)
        logger.log_scalars({"perf/eval_seconds": time.perf_counter() - t0}, env_step)  # its share of the wall clock
        evaluations.append((env_step, metrics))
        run.last_eval_step = run.interaction_step
        run.last_eval_return = metrics["avg_return"]

    def log_info(step: int) -> dict[str, float]:
        scalars: dict[str, float] = {}
        for key, value in trainer.info().items():
            if isinstance(value, str):
                logger.log_text(key, value, step, only_if_changed=True)
            else:
                scalars[key] = float(value)
        return scalars

    def record_video() -> None:
        assert videos is not None
        line = videos.record(trainer.record_round, run.interaction_step,  # type: ignore[attr-defined]
                             run.interaction_step * num_envs, logger)
        tqdm.write(line, file=sys.stderr)

    def save(with_buffer: bool = False) -> str:
        path, line = run.save(with_buffer=with_buffer)
        tqdm.write(line, file=sys.stderr)
        return path

    start_step = run.interaction_step
    n_int = run.num_interaction_steps
    precompile = getattr(trainer, "precompile", None)
    if callable(precompile) and start_step < n_int:
        precompile()  # the training program compiles during the initial evaluation
    log_info(logger.first_step)
    announce_compute_path(trainer)  # type: ignore[arg-type]
    timeline = UpdateTimeline(launch_time())
    if start_step == 0 and videos is not None:
        record_video()
    if start_step == 0 and cfg.num_eval_episodes > 0:
        do_eval()
    status = "completed"
    last_ckpt: str | None = None
    t_start = time.monotonic()
    window_start, window_env_steps, window_updates = t_start, 0, 0
    update_time, updates_this_call, postfix_time = 0.0, 0, 0.0
    bar = tqdm(total=n_int * num_envs, initial=min(start_step, n_int) * num_envs, unit="step", dynamic_ncols=True,
               disable=not cfg.progress_bar, file=sys.stderr, mininterval=1.0)
    with StopSignals() as stop:
        try:
            while run.interaction_step < n_int:
                begin = run.interaction_step
                end = run.chunk_end()
                t0 = time.perf_counter()
                due = run.advance(end)
                seconds = time.perf_counter() - t0
                step, env_step = end, end * num_envs
                window_env_steps += (end - begin) * num_envs
                if due:
                    update_time += seconds
                    updates_this_call += due
                    window_updates += due
                    if timeline.record(time.monotonic(), updates_this_call, seconds):
                        report_first_update(logger, timeline, env_step, t_start)
                if run.can_sample():
                    if cfg.num_eval_episodes > 0 and step % cfg.evaluation_per_interaction_step == 0:
                        do_eval()
                    if videos is not None and videos.due(step, run.record_every):
                        record_video()
                    if step % cfg.logging_per_interaction_step == 0:
                        now = time.monotonic()
                        run.take_metrics()
                        scalars = run.meter.averages()
                        scalars.update(log_info(env_step))
                        scalars["perf/env_steps_per_second"] = window_env_steps / max(now - window_start, 1e-9)
                        scalars["perf/updates_per_second"] = window_updates / max(now - window_start, 1e-9)
                        scalars["perf/update_ms"] = 1e3 * update_time / max(updates_this_call, 1)
                        logger.log_scalars(scalars, env_step)
                        run.meter.reset()
                        window_start, window_env_steps, window_updates = now, 0, 0
                    if step % cfg.save_checkpoint_per_interaction_step == 0:
                        last_ckpt = save()
                bar.update((end - begin) * num_envs)
                now = time.monotonic()
                if now - postfix_time >= 1.0:
                    elapsed = max(now - t_start, 1e-9)
                    bar.set_postfix(sps=f"{(env_step - start_step * num_envs) / elapsed:.1f}",
                                    ups=f"{updates_this_call / elapsed:.1f}", eval=f"{run.last_eval_return:.1f}",
                                    refresh=False)
                    postfix_time = now
                if stop.requested:
                    status = "interrupted"
                    break
                if cfg.max_wall_seconds is not None and now - t_start >= cfg.max_wall_seconds:
                    status = "budget"
                    break
            if updates_this_call > 1 and math.isfinite(timeline.steady_rate()):
                logger.log_scalars({"perf/steady_updates_per_second": timeline.steady_rate()},
                                   run.interaction_step * num_envs)
            if status == "completed":
                if run.last_eval_step != run.interaction_step and cfg.num_eval_episodes > 0:
                    do_eval()
                if videos is not None and videos.last_step != run.interaction_step:
                    record_video()
                if run.last_checkpoint_step != run.interaction_step:
                    last_ckpt = save()
            elif run.last_checkpoint_step != run.interaction_step or not run.last_checkpoint_has_buffer:
                last_ckpt = save(with_buffer=True)  # stopped early: the resume must be exact
        finally:
            bar.close()
            if videos is not None:
                videos.close()
                tqdm.write(videos.summary(), file=sys.stderr)
            logger.close()
            trainer.close()
    wall = time.monotonic() - t_start
    env_steps_done = (run.interaction_step - start_step) * num_envs
    return TrainResult(
        status=status,
        env_step=run.interaction_step * num_envs,
        run_dir=run_dir,
        checkpoint=last_ckpt or latest_checkpoint(run_dir) or resumed_ckpt,
        evaluations=evaluations,
        wall_seconds=wall,
        env_steps_per_second=env_steps_done / max(wall, 1e-9),
        updates_per_second=updates_this_call / max(wall, 1e-9),
        update_seconds_mean=update_time / max(updates_this_call, 1),
        env_steps_this_call=env_steps_done,
        last_eval_return=run.last_eval_return,
        last_eval_step=run.last_eval_step * num_envs if run.last_eval_step >= 0 else -1,
        time_to_first_update=timeline.time_to_first_update,
        first_update_seconds=timeline.first_seconds,
        steady_updates_per_second=timeline.steady_rate(),
    )
