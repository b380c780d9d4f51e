"""What both training drivers (``agent_common.loop``: gymnasium; ``agent_common.vector_loop``: MJX) share: the
run's result, the Ctrl-C flag, the run-directory check, what a resume keeps, and the compute-path and first-update
reports. Below both drivers, so neither imports the other."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from typing import Any, Protocol

from tqdm import tqdm

from agent_common.keys import Config, ConfigError, budget_defaults
from agent_common.logger import RunLogger, UpdateTimeline
from agent_common.runs.files import CheckpointError
from agent_common.runs.rundir import holds_run, run_dir_of_checkpoint, run_dir_taken_message, set_aside_incomplete_run
from agent_common.validation import check_training_run

__all__ = [
    "StopFlag",
    "TrainResult",
    "announce_compute_path",
    "kept_on_resume",
    "prepare_run_dir",
    "report_first_update",
]


class _HasInfo(Protocol):
    def info(self) -> dict[str, float | str]: ...


@dataclasses.dataclass
class TrainResult:
    """Summary of one ``train`` call.

    Attributes:
        status: ``"completed"``, ``"budget"`` (max_wall_seconds reached) or ``"interrupted"`` (Ctrl-C).
        env_step: env steps done in total (including resumed ones).
        run_dir: the run directory.
        checkpoint: the newest checkpoint of the run after this call: the last one written, else the one resumed
            from (None if there is none).
        evaluations: ``(env_step, metrics)`` for every evaluation of this call.
        wall_seconds: wall time of this call's loop.
        env_steps_per_second: env steps of this call / wall_seconds.
        updates_per_second: updates of this call / wall_seconds.
        update_seconds_mean: mean wall time of one ``agent.update`` call.
        env_steps_this_call: env steps trained by this call (0: the run had already reached num_env_steps).
        last_eval_return: the run's latest evaluation return (also from before a resume; nan if none).
        last_eval_step: the env step of that evaluation (-1 if none).
        time_to_first_update: wall seconds from the process's launch to the end of this call's first update
            (imports, environment and agent construction, the random-action warm-up, the first update with any
            compilation it triggers, and whatever part of the initial evaluation the first update waits for,
            included; nan without an update).
        first_update_seconds: how long that first ``agent.update`` call took.
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


class StopFlag:
    """First SIGINT requests a clean stop at the end of the current step; a second one aborts immediately."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> StopFlag:
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


def prepare_run_dir(cfg: Config, framework: str | None = None) -> None:
    """Checks the run and creates its directory before any work: ``schema.check_training_run`` (``framework``: the
    agent, for ``env.env_type=mjx``); a fresh run never writes into a directory that holds another run (only a
    resume of that run may); the directory must be creatable and writable.

    Raises:
        ConfigError: naming ``save_path`` and what to do instead.
    """
    check_training_run(cfg, framework)
    run_dir = cfg.save_path or "."
    resumed_run = run_dir_of_checkpoint(cfg.agent_load_path) if cfg.agent_load_path is not None else None
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise ConfigError(f"save_path={run_dir} is a file, not a directory; choose another save_path")
    if os.path.isdir(run_dir) and holds_run(run_dir):
        same = resumed_run is not None and os.path.isdir(resumed_run) and os.path.samefile(run_dir, resumed_run)
        if not same and cfg.overwrite_incomplete:
            try:
                print(set_aside_incomplete_run(run_dir), file=sys.stderr, flush=True)
            except CheckpointError as exc:
                raise ConfigError(f"save_path={run_dir}: {exc}") from None
        elif not same:
            raise ConfigError(run_dir_taken_message(run_dir))
    try:
        os.makedirs(run_dir, exist_ok=True)
        probe = os.path.join(run_dir, ".write_test")
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(
            f"save_path={run_dir} cannot be used as the run directory ({exc.strerror or exc}); choose another "
            "save_path"
        ) from None


def kept_on_resume(cfg: Config) -> list[str]:
    """The schedule keys whose values differ from what ``num_env_steps`` alone would derive (kept from the run)."""
    kept = []
    for key, derived in budget_defaults(cfg).items():
        obj: Any = cfg
        for part in key.split("."):
            obj = getattr(obj, part)
        if obj != derived and key != "recording_per_interaction_step":
            kept.append(f"{key}={obj} (num_env_steps={cfg.num_env_steps} would give {derived})")
    return kept


def announce_compute_path(agent: _HasInfo) -> None:
    """Prints the agent's ``compile/path`` line (how it computes and why) once, on stderr; the TensorBoard text of
    the same key comes with the agent's other ``info()``."""
    path = agent.info().get("compile/path")
    if isinstance(path, str):
        tqdm.write(f"compute path: {path}", file=sys.stderr)


def report_first_update(logger: RunLogger, timeline: UpdateTimeline, env_step: int, train_start: float) -> None:
    """The first update's line on stderr and its TensorBoard scalars (``perf/time_to_first_update_s``: from launch;
    ``perf/first_update_s``: the call itself)."""
    assert timeline.first_end is not None
    tqdm.write(
        f"first update at env step {env_step}: {timeline.time_to_first_update:.1f} s after launch "
        f"({timeline.first_end - train_start:.1f} s after training started; the update call took "
        f"{timeline.first_seconds:.2f} s)",
        file=sys.stderr,
    )
    logger.log_scalars({"perf/time_to_first_update_s": timeline.time_to_first_update,
                        "perf/first_update_s": timeline.first_seconds}, env_step)
