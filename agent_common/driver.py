"""The training driver: one for every simulator. It opens the run (its directory, a resume or a start from weights),
asks a stepper (``agent_common.trainer.Trainer``: ``host.HostStepper`` or ``device.DeviceStepper``) for interaction
steps in calls that end at every event, and does everything between them: evaluation, logging (TensorBoard,
``eval.csv``), checkpoints, stop signals, videos, the progress bar, the first-update and steady-rate report, and the
run's ``TrainResult``.

Events, on their intervals in interaction steps once the replay can sample: evaluation, video, logging, checkpoint.
Evaluation also runs at step 0 (on a background thread while training starts, where the stepper's evaluation may
run beside its steps: ``BACKGROUND_INITIAL_EVALUATION``) and at the end; a checkpoint is written at the end, on
Ctrl-C (first press), SIGTERM (one process) and when ``max_wall_seconds`` is reached, with the replay rows so that
the resume is exact. With several data-parallel replicas the intervals are divided among them, replica 0 evaluates,
logs and commits checkpoints, and they agree every ``AGREE_EVERY`` steps on stopping.

A resume (``agent_load_path``) first repairs the run's checkpoints after a crash, loads the newest usable one, moves
newer ones aside and cuts the run's ``eval.csv`` and TensorBoard history back to its step (``agent_common.runs``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from agent_common.config import config_to_yaml
from agent_common.keys import Config
from agent_common.logger import AverageMeter, RunLogger, UpdateTimeline, launch_time
from agent_common.replicas import SINGLE, NullLogger, Replicas
from agent_common.runs.checkpoints import latest_checkpoint, recover_checkpoints, set_aside_newer
from agent_common.runs.files import LOOP_STATE_FILE, CheckpointError, warn
from agent_common.runs.resume import kept_on_resume
from agent_common.runs.rundir import prepare_run_dir, run_dir_of_checkpoint
from agent_common.runs.state import Loaded, load_state, save_state
from agent_common.trainer import Trainer, TrainerFactory
from agent_common.validation import check_training_run
from agent_common.wandb_logger import logger_options

__all__ = ["AGREE_EVERY", "BACKGROUND_INITIAL_EVALUATION", "StopSignals", "TrainResult", "train"]

AGREE_EVERY = 16  # interaction steps between the replicas' agreements on stopping early (one small collective)
BACKGROUND_INITIAL_EVALUATION = True
"""Whether the step-0 evaluation runs on a background thread while training starts (where the stepper allows it:
``Evaluation.background``); False runs it first. The run is the same either way (tests compare the two)."""


@dataclasses.dataclass
class TrainResult:
    """Summary of one ``train`` call.

    Attributes:
        status: ``"completed"``, ``"budget"`` (max_wall_seconds reached) or ``"interrupted"`` (Ctrl-C, SIGTERM).
        env_step: env steps done in total (including resumed ones).
        run_dir: the run directory.
        checkpoint: the newest checkpoint of the run after this call: the last one written, else the one resumed
            from (None if there is none).
        evaluations: ``(env_step, metrics)`` for every evaluation of this call.
        wall_seconds: wall time of this call's loop.
        env_steps_per_second: env steps of this call / wall_seconds.
        updates_per_second: updates of this call / wall_seconds.
        update_seconds_mean: mean wall time of the calls that ran updates, per update.
        env_steps_this_call: env steps trained by this call (0: the run had already reached num_env_steps).
        last_eval_return: the run's latest evaluation return (also from before a resume; nan if none).
        last_eval_step: the env step of that evaluation (-1 if none).
        time_to_first_update: wall seconds from the process's launch to the end of this call's first update
            (imports, environment and agent construction, the random-action warm-up, the first update with any
            compilation it triggers, and whatever part of the initial evaluation the first update waits for,
            included; nan without an update).
        first_update_seconds: how long the call that ran the first update took.
        steady_updates_per_second: updates per wall second over the second half of the time between the first
            update's end and the last update (``UpdateTimeline.steady_rate``; nan with too few updates).
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
    env_steps_this_call: int = 0
    last_eval_return: float = float("nan")
    last_eval_step: int = -1
    time_to_first_update: float = float("nan")
    first_update_seconds: float = float("nan")
    steady_updates_per_second: float = float("nan")


class StopSignals:
    """The first Ctrl-C (SIGINT) requests a clean stop at the end of the current call (a checkpoint is written); a
    second one aborts at once. With ``sigterm``, SIGTERM (a scheduler's stop) also stops cleanly; it is left alone
    under torchrun, whose launcher sends it to end the replicas."""

    def __init__(self, sigterm: bool = True) -> None:
        self.requested = False
        self._sigterm = sigterm
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._interrupt)
            if self._sigterm:
                self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._terminate)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def _interrupt(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\nCtrl-C: finishing the current step, then saving a checkpoint (press again to abort without saving)",
              file=sys.stderr, flush=True)

    def _terminate(self, signum: int, frame: Any) -> None:
        if not self.requested:
            self.requested = True
            print("\nSIGTERM: finishing the current step, then saving a checkpoint", file=sys.stderr, flush=True)


class _BackgroundEvaluation:
    """One evaluation running on a thread of its own, for the driver to poll, wait for or cancel.

    Args:
        run: ``run(cancelled) -> metrics`` (``Evaluation.run``).
        interaction_step: the interaction step it belongs to (where its result is logged).
    """

    def __init__(self, run: Callable[[Callable[[], bool]], dict[str, float]], interaction_step: int) -> None:
        self.interaction_step = interaction_step
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


def _never() -> bool:
    return False


class _Run:
    """One ``train`` call: the stepper, the logger and videos of the run, the intervals, the clock, the counters of
    this call, and the events between the stepper's calls. ``open`` builds it; ``start`` begins the call (the
    precompilation, the compute-path line, the step-0 video and evaluation, then the clock)."""

    def __init__(self, cfg: Config, trainer: Trainer, replicas: Replicas) -> None:
        self.cfg, self.trainer, self.replicas = cfg, trainer, replicas
        self.run_dir = cfg.save_path or "."
        self.num_envs = int(trainer.num_envs)
        self.num_interaction_steps = max(1, cfg.num_env_steps // self.num_envs)
        n_int = self.num_interaction_steps
        self.eval_every = replicas.interval(cfg.evaluation_per_interaction_step, n_int)
        self.record_every = replicas.interval(cfg.recording_per_interaction_step, n_int)
        self.log_every = replicas.interval(cfg.logging_per_interaction_step, n_int)
        self.save_every = replicas.interval(cfg.save_checkpoint_per_interaction_step, n_int)
        self.logger: RunLogger | NullLogger = NullLogger()
        self.videos: Any = None  # the run's RunVideos (record_video); its state goes in the checkpoint
        self.meter = AverageMeter()
        self.last_eval_step = -1
        self.last_eval_return = float("nan")
        self.last_checkpoint_step = -1
        self.last_checkpoint_has_buffer = False
        self.resumed_ckpt: str | None = None
        self.evaluations: list[tuple[int, dict[str, float]]] = []
        self.initial_eval: _BackgroundEvaluation | None = None
        self.status = "completed"
        self.last_ckpt: str | None = None

    # ----------------------------------------------------------------------------------------- opening
    def open(self) -> None:
        """Videos, the resume or the start from weights, the logger (see ``train``)."""
        cfg, trainer, replicas = self.cfg, self.trainer, self.replicas
        self.videos = trainer.open_videos(cfg, self.run_dir) if replicas.is_main else None  # None: no renderer
        if cfg.agent_load_path is not None:
            self.resumed_ckpt = load_state(cfg.agent_load_path, self._restore, replicas=replicas,
                                           buffer_load_path=cfg.buffer_load_path)
            resumed_step = trainer.interaction_step * self.num_envs
            if not replicas.same_on_all(resumed_step):
                raise CheckpointError(f"the replicas resumed from different checkpoints (replica {replicas.rank}: "
                                      f"{self.resumed_ckpt}); repair or remove the damaged one and resume again")
            print(f"resumed from {self.resumed_ckpt} at env step {resumed_step}", file=sys.stderr)
            for line in set_aside_newer(self.run_dir, resumed_step) if replicas.is_main else []:
                print(line, file=sys.stderr)  # the abandoned continuation, kept aside
            kept = kept_on_resume(cfg)
            if kept and replicas.is_main:
                print("the run's schedule and intervals are kept: " + "; ".join(kept)
                      + " (rederive_schedule_on_resume=true re-derives them from num_env_steps)", file=sys.stderr)
        if cfg.agent_init_path is not None:
            print(trainer.start_from(cfg.agent_init_path), file=sys.stderr, flush=True)  # config.yaml records it too
        if replicas.is_main:
            self.logger = RunLogger(self.run_dir, cfg.exp_name, cfg.env.env_name, cfg.seed, config_to_yaml(cfg),
                                    resume_step=None if self.resumed_ckpt is None
                                    else trainer.interaction_step * self.num_envs,
                                    **logger_options(cfg, self.run_dir))

    def _restore(self, loaded: Loaded) -> None:
        """A checkpoint's contents into the stepper and the driver (``load_state``'s ``restore``).

        Raises:
            CheckpointError: the checkpoint is another stepper's, or its agent or loop state does not fit this run.
        """
        state, trainer = loaded.state, self.trainer
        state_file = os.path.join(loaded.path, LOOP_STATE_FILE)
        if state.get("driver") != trainer.state_tag:
            kind = "device" if state.get("driver") else "host"
            raise CheckpointError(f"{state_file} was written by the {kind} stepper, not the one of "
                                  f"env.env_type={self.cfg.env.env_type}")
        try:
            trainer.load_agent(loaded.agent_dir, self.cfg.agent.load_optimizer)
        except (KeyError, RuntimeError, ValueError) as exc:  # entries or shapes that do not fit the networks
            detail = " ".join(str(exc).split())[:400]
            raise CheckpointError(f"{loaded.agent_dir} does not fit this agent ({detail})") from None
        try:
            trainer.load_state_dict(state, loaded.buffer)
            self.last_eval_step = int(state["last_eval_step"])
            self.last_eval_return = float(state["last_eval_return"])
            self.meter.load_state_dict(state["meter"])
            if self.videos is not None and state.get("videos") is not None:
                self.videos.load_state_dict(state["videos"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{state_file} does not match this run ({type(exc).__name__}: {exc})") from None
        self.last_checkpoint_step = trainer.interaction_step
        self.last_checkpoint_has_buffer = loaded.buffer is not None
        if self.videos is not None and state.get("videos") is None:
            warn(f"{loaded.path} holds no video recorder state (it was written with record_video=false); the "
                 "recorder starts from its first round and records from the next due step")
        if loaded.buffer is None:
            warn(f"{loaded.path} has no replay buffer (it was saved with save_buffer=false); collecting "
                 f"{self.cfg.agent.buffer_min_length} random steps again before updates, so this resume is not exact")

    # ----------------------------------------------------------------------------------------- the call
    def start(self) -> None:
        cfg, trainer, replicas = self.cfg, self.trainer, self.replicas
        self.start_step = trainer.interaction_step
        if self.start_step < self.num_interaction_steps:
            trainer.precompile()  # the first updates' programs compile during the evaluation and the warm-up
        self.log_info(self.logger.first_step)
        if replicas.is_main:
            path = trainer.info().get("compile/path")
            if isinstance(path, str):
                tqdm.write(f"compute path: {path}", file=sys.stderr)
        self.timeline = UpdateTimeline(launch_time())
        if self.start_step == 0 and self.videos is not None:
            self.record_video()  # before the step-0 evaluation starts on its thread: they never run at once
        if self.start_step == 0 and cfg.num_eval_episodes > 0 and replicas.is_main:
            evaluation = trainer.evaluation(cfg.num_eval_episodes)
            if BACKGROUND_INITIAL_EVALUATION and evaluation.background:
                self.initial_eval = _BackgroundEvaluation(evaluation.run, self.start_step)
            else:
                self.log_eval(self._timed(evaluation.run), self.start_step)
        self.t_start = time.monotonic()
        self.window_start, self.window_env_steps, self.window_updates = self.t_start, 0, 0
        self.update_time, self.updates_this_call, self.postfix_time = 0.0, 0, 0.0
        self.bar = tqdm(total=self.num_interaction_steps * self.num_envs,
                        initial=min(self.start_step, self.num_interaction_steps) * self.num_envs, unit="step",
                        dynamic_ncols=True, disable=not cfg.progress_bar or not replicas.is_main, file=sys.stderr,
                        mininterval=1.0)

    def loop(self, stop: StopSignals) -> None:
        """Calls the stepper until the run's end or a stop, with the events between the calls."""
        trainer, n_int = self.trainer, self.num_interaction_steps
        while trainer.interaction_step < n_int:
            if self.initial_eval is not None and self.initial_eval.done():
                self.finish_initial_eval()  # logged once it has finished (its error is raised here)
            begin = trainer.interaction_step
            trainer.advance(self.call_end(begin) - begin, self.updated)
            step = trainer.interaction_step
            self.window_env_steps += (step - begin) * self.num_envs
            if trainer.can_sample():
                self.on_intervals(step)
            now = self.show_progress(step - begin, step)
            status = self.stop_status(stop, now, step)
            if status is not None:
                self.status = status
                break

    def call_end(self, start: int) -> int:
        """The last interaction step of the next call: at most ``steps_per_call`` steps on, and not past the next
        evaluation, video, logging or checkpoint step or the end of the run."""
        end = min(start + self.trainer.steps_per_call, self.num_interaction_steps)
        if end == start + 1:
            return end
        intervals = [self.log_every, self.save_every]
        if self.cfg.num_eval_episodes > 0:
            intervals.append(self.eval_every)
        if self.videos is not None:
            intervals.append(self.record_every)
        for every in intervals:
            end = min(end, (start // every + 1) * every)
        return end

    def updated(self, count: int, seconds: float, metrics: dict[str, float] | None) -> None:
        """The stepper's report of ``count`` updates that took ``seconds`` (``UpdateReport``)."""
        self.update_time += seconds
        first = self.timeline.record(time.monotonic(), self.updates_this_call + count, seconds)
        if first and self.replicas.is_main:
            env_step = self.trainer.interaction_step * self.num_envs
            timeline = self.timeline
            assert timeline.first_end is not None
            tqdm.write(f"first update at env step {env_step}: {timeline.time_to_first_update:.1f} s after launch "
                       f"({timeline.first_end - self.t_start:.1f} s after training started; the update call took "
                       f"{timeline.first_seconds:.2f} s)", file=sys.stderr)
            self.logger.log_scalars({"perf/time_to_first_update_s": timeline.time_to_first_update,
                                     "perf/first_update_s": timeline.first_seconds}, env_step)
        if metrics is not None:
            self.meter.update(metrics)
        self.updates_this_call += count
        self.window_updates += count

    def on_intervals(self, step: int) -> None:
        """Evaluation, video, logging and the checkpoint, each on its interval."""
        cfg = self.cfg
        if cfg.num_eval_episodes > 0 and step % self.eval_every == 0:
            self.do_eval()
        if self.videos is not None and self.videos.due(step, self.record_every):
            self.record_video()
        if step % self.log_every == 0:
            env_step = step * self.num_envs
            now = time.monotonic()
            self.take_metrics()
            scalars = self.meter.averages()
            scalars.update(self.log_info(env_step))
            scalars["perf/env_steps_per_second"] = self.window_env_steps / max(now - self.window_start, 1e-9)
            scalars["perf/updates_per_second"] = self.window_updates / max(now - self.window_start, 1e-9)
            scalars["perf/update_ms"] = 1e3 * self.update_time / max(self.updates_this_call, 1)
            self.logger.log_scalars(scalars, env_step)
            self.meter.reset()
            self.window_start, self.window_env_steps, self.window_updates = now, 0, 0
        if step % self.save_every == 0:
            self.last_ckpt = self.save()

    def show_progress(self, steps: int, step: int) -> float:
        """Advances the progress bar (its rates at most once a second); returns the time now."""
        self.bar.update(steps * self.num_envs)
        now = time.monotonic()
        if now - self.postfix_time >= 1.0:
            elapsed = max(now - self.t_start, 1e-9)
            self.bar.set_postfix(sps=f"{(step - self.start_step) * self.num_envs / elapsed:.1f}",
                                 ups=f"{self.updates_this_call / elapsed:.1f}", eval=f"{self.last_eval_return:.1f}",
                                 refresh=False)
            self.postfix_time = now
        return now

    def stop_status(self, stop: StopSignals, now: float, step: int) -> str | None:
        """``"interrupted"`` (Ctrl-C, SIGTERM) or ``"budget"`` (``max_wall_seconds``) when the run stops after this
        call, else None; several replicas agree every ``AGREE_EVERY`` steps, so all stop at the same one."""
        cfg, replicas = self.cfg, self.replicas
        stopping = stop.requested
        over_budget = cfg.max_wall_seconds is not None and now - self.t_start >= cfg.max_wall_seconds
        if replicas.world_size > 1:
            code = replicas.max_on_all(2 if stopping else int(over_budget)) if step % AGREE_EVERY == 0 else 0
            stopping, over_budget = code == 2, code == 1
        if stopping:
            return "interrupted"
        if over_budget:
            return "budget"
        return None

    # ----------------------------------------------------------------------------------------- evaluation, videos
    def _timed(self, run: Callable[[Callable[[], bool]], dict[str, float]]) -> dict[str, float]:
        """Runs an evaluation here and logs its share of the wall clock (``perf/eval_seconds``)."""
        t0 = time.perf_counter()
        metrics = run(_never)
        self.logger.log_scalars({"perf/eval_seconds": time.perf_counter() - t0},
                                self.trainer.interaction_step * self.num_envs)
        return metrics

    def log_eval(self, metrics: dict[str, float], interaction_step: int) -> None:
        env_step = interaction_step * self.num_envs
        self.logger.log_eval(metrics, env_step)
        self.evaluations.append((env_step, metrics))
        self.last_eval_step = interaction_step
        self.last_eval_return = metrics["avg_return"]

    def finish_initial_eval(self) -> None:
        """Waits for the background step-0 evaluation, if one runs, and logs it (its error is raised here)."""
        if self.initial_eval is not None:
            metrics = self.initial_eval.result()  # still pending if this raises: ``close`` ends it
            self.log_eval(metrics, self.initial_eval.interaction_step)
            self.initial_eval = None

    def do_eval(self) -> None:
        if not self.replicas.is_main:  # replica 0 alone evaluates
            return
        self.finish_initial_eval()  # evaluations are logged in step order, and this one steps the same eval env
        evaluation = self.trainer.evaluation(self.cfg.num_eval_episodes)
        self.log_eval(self._timed(evaluation.run), self.trainer.interaction_step)

    def record_video(self) -> None:
        step = self.trainer.interaction_step
        line = self.videos.record(self.trainer.video_player(), step, step * self.num_envs, self.logger)
        tqdm.write(line, file=sys.stderr)

    # ----------------------------------------------------------------------------------------- logging, checkpoints
    def log_info(self, step: int) -> dict[str, float]:
        scalars: dict[str, float] = {}
        for key, value in self.trainer.info().items():
            if isinstance(value, str):
                self.logger.log_text(key, value, step, only_if_changed=True)
            else:
                scalars[key] = float(value)
        return scalars

    def take_metrics(self) -> None:
        """Moves the metrics the stepper summed (on the device) into the meter."""
        for key, (total, count) in self.trainer.take_metrics().items():
            self.meter.sums[key] += total
            self.meter.counts[key] += count

    def save(self, with_buffer: bool = False) -> str:
        """Writes ``<run>/checkpoints/step<env_step>/`` (``runs.state.save_state``) and returns it.

        Args:
            with_buffer: also write the replay rows if ``save_buffer`` is off (the run stops early: the resume is
                exact).
        """
        self.finish_initial_eval()  # the checkpoint holds the eval env's state and the latest evaluation
        self.take_metrics()  # the metrics summed on the device go into the meter, which the checkpoint holds
        cfg, trainer, replicas = self.cfg, self.trainer, self.replicas
        step = trainer.interaction_step
        env_step = step * self.num_envs
        every = cfg.save_buffer_per_interaction_step
        save_data = with_buffer or (cfg.save_buffer if every is None else step % replicas.interval(every, every) == 0)
        config_yaml = config_to_yaml(cfg)
        state = {
            **trainer.state_dict(),
            "env_step": env_step,
            "last_eval_step": self.last_eval_step,
            "last_eval_return": self.last_eval_return,
            "meter": self.meter.state_dict(),
            "videos": None if self.videos is None else self.videos.state_dict(),
            "buffer_saved": bool(save_data),
            "config_yaml": config_yaml,
            "world_size": replicas.world_size,
        }
        saved = save_state(self.run_dir, env_step, state=state, config_yaml=config_yaml,
                           save_agent=trainer.save_agent, buffer=trainer.buffer_state if save_data else None,
                           keep=cfg.keep_checkpoints, replicas=replicas, rows=trainer.replay_rows)
        self.last_checkpoint_step = step
        self.last_checkpoint_has_buffer = saved.has_buffer
        if replicas.is_main:
            tqdm.write(saved.line, file=sys.stderr)
        return saved.path

    # ----------------------------------------------------------------------------------------- the end
    def finish(self) -> None:
        """After the last call: the initial evaluation's result, the steady update rate, the final evaluation and
        video (a completed run) and the final checkpoint (with the replay rows when the run stopped early)."""
        cfg, step = self.cfg, self.trainer.interaction_step
        if self.initial_eval is not None:
            if self.status != "completed" and not self.initial_eval.done():
                tqdm.write("waiting for the initial evaluation to finish: the checkpoint holds its result and "
                           "the eval env", file=sys.stderr)
            self.finish_initial_eval()
        if self.updates_this_call > 1 and math.isfinite(self.timeline.steady_rate()):
            self.logger.log_scalars({"perf/steady_updates_per_second": self.timeline.steady_rate()},
                                    step * self.num_envs)
        if self.status == "completed":
            if self.last_eval_step != step and cfg.num_eval_episodes > 0:
                self.do_eval()
            if self.videos is not None and self.videos.last_step != step:
                self.record_video()
            if self.last_checkpoint_step != step:
                self.last_ckpt = self.save()
        elif self.last_checkpoint_step != step or not self.last_checkpoint_has_buffer:
            self.last_ckpt = self.save(with_buffer=True)  # stopped early: the resume must be exact

    def close(self) -> None:
        """Cancels a still running initial evaluation (the run failed or was aborted), closes the bar, the videos,
        the logger and the stepper."""
        if self.initial_eval is not None:
            self.initial_eval.cancel()
        bar = getattr(self, "bar", None)
        if bar is not None:
            bar.close()
        if self.videos is not None:
            self.videos.close()
            tqdm.write(self.videos.summary(), file=sys.stderr)
        self.logger.close()
        self.trainer.close()

    def result(self) -> TrainResult:
        trainer, timeline = self.trainer, self.timeline
        wall = time.monotonic() - self.t_start
        env_steps_done = (trainer.interaction_step - self.start_step) * self.num_envs
        return TrainResult(
            status=self.status,
            env_step=trainer.interaction_step * self.num_envs,
            run_dir=self.run_dir,
            checkpoint=self.last_ckpt or latest_checkpoint(self.run_dir) or self.resumed_ckpt,
            evaluations=self.evaluations,
            wall_seconds=wall,
            env_steps_per_second=env_steps_done / max(wall, 1e-9),
            updates_per_second=self.updates_this_call / max(wall, 1e-9),
            update_seconds_mean=self.update_time / max(self.updates_this_call, 1),
            env_steps_this_call=env_steps_done,
            last_eval_return=self.last_eval_return,
            last_eval_step=self.last_eval_step * self.num_envs if self.last_eval_step >= 0 else -1,
            time_to_first_update=timeline.time_to_first_update,
            first_update_seconds=timeline.first_seconds,
            steady_updates_per_second=timeline.steady_rate(),
        )


def train(cfg: Config, make_trainer: TrainerFactory, replicas: Replicas = SINGLE) -> TrainResult:
    """Runs (or resumes) a training run: checks and creates the run directory, builds the stepper
    (``make_trainer``: ``host.host_trainer`` or ``device.device_trainer``), repairs and resumes from the run's
    newest usable checkpoint (``agent_load_path``) or starts from weights (``agent_init_path``), then drives the
    stepper to ``num_env_steps`` (see the module doc).

    Args:
        cfg: the resolved config (``agent_common.config.load_config`` / ``parse_args``).
        make_trainer: builds the stepper.
        replicas: this process's place among data-parallel replicas (``agent_common.replicas``); one by default.

    Returns:
        A ``TrainResult``.

    Raises:
        ConfigError: the run directory or the stepper cannot be used (the message names the key).
        CheckpointError: no usable checkpoint to resume from.
        DiskFullError: the disk filled up while writing a checkpoint.
    """
    if replicas.is_main:
        prepare_run_dir(cfg, make_trainer.framework)
    else:
        check_training_run(cfg, make_trainer.framework)  # replica 0 creates the run directory
    run_dir = cfg.save_path or "."
    if cfg.agent_load_path is not None and replicas.is_main:
        source_run = run_dir_of_checkpoint(cfg.agent_load_path)
        if os.path.isdir(source_run) and os.path.samefile(source_run, run_dir):
            for line in recover_checkpoints(run_dir):
                print(line, file=sys.stderr, flush=True)
    replicas.barrier()  # the run directory exists and its checkpoints are repaired before any replica reads them
    trainer = make_trainer.build(cfg, replicas)
    run = _Run(cfg, trainer, replicas)
    try:
        run.open()
    except BaseException:
        if run.videos is not None:
            run.videos.close()
        trainer.close()
        raise
    with StopSignals(sigterm=replicas.world_size == 1) as stop:
        try:
            run.start()  # the initial evaluation starts; the clock of this call starts
            run.loop(stop)
            run.finish()  # the initial evaluation, the final evaluation and checkpoint
        finally:
            run.close()
    return run.result()

