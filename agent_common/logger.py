"""Run logging: TensorBoard event files (tensorboard package only), the eval-return CSV and the saved config."""

from __future__ import annotations

import bisect
import csv
import io
import math
import os
import time
from collections import defaultdict
from typing import Any

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.text.summary_v2 import text_pb
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from agent_common.runs.files import atomic_write_text

__all__ = ["CSV_HEADER", "AverageMeter", "RunLogger", "UpdateTimeline", "launch_time", "read_eval_csv"]

CSV_HEADER: tuple[str, ...] = ("", "exp_name", "env_name", "seed", "metric", "env_step", "value")
"""Upstream ``results/*.csv`` layout: an unnamed pandas index column, then the long-format columns."""

EVAL_CSV_METRICS: tuple[str, ...] = ("avg_return", "avg_length")


class AverageMeter:
    """Averages scalars over a logging window (upstream ``AverageMeterDict``); picklable for exact resume."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    def update(self, metrics: dict[str, float]) -> None:
        """Adds one sample per key."""
        for key, value in metrics.items():
            self.sums[key] += float(value)
            self.counts[key] += 1

    def averages(self) -> dict[str, float]:
        """Mean per key over the window."""
        return {key: self.sums[key] / self.counts[key] for key in self.sums if self.counts[key] > 0}

    def reset(self) -> None:
        """Starts a new window."""
        self.sums.clear()
        self.counts.clear()

    def state_dict(self) -> dict[str, Any]:
        """Window sums and counts."""
        return {"sums": dict(self.sums), "counts": dict(self.counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output."""
        self.reset()
        self.sums.update(state["sums"])
        self.counts.update(state["counts"])


def _process_age_seconds() -> float | None:
    """Seconds since this process started, from ``/proc`` (Linux); None where that cannot be read."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # the command name may hold spaces: split after it
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22 of stat: start time in ticks
    except (OSError, ValueError, IndexError, AttributeError):  # AttributeError: no os.sysconf (Windows)
        return None


_AGE = _process_age_seconds()
_LAUNCH = time.monotonic() - (_AGE or 0.0)  # process start on the monotonic clock (else: when this module loaded)


def launch_time() -> float:
    """The process's start on ``time.monotonic()``'s clock: read from ``/proc`` on Linux, elsewhere the time this
    module was imported (the training CLIs import it before torch or JAX). Time to first update counts from here."""
    return _LAUNCH


class UpdateTimeline:
    """When a run's updates happened, in bounded memory: time to first update and the steady update rate.

    ``record(now, count)`` after each update (``count`` = updates so far in this process). The first call fixes the
    first update's end; further samples are kept with a stride that doubles whenever ``max_samples`` are held, so a
    run of any length keeps at most ``max_samples`` (time, count) pairs, and the last one always.

    Args:
        launch: the process start (``launch_time()``), on the same clock as ``now``.
        max_samples: samples kept at most (>= 4).
    """

    def __init__(self, launch: float, max_samples: int = 4096) -> None:
        if max_samples < 4:
            raise ValueError(f"max_samples must be >= 4, got {max_samples}")
        self.launch = launch
        self.max_samples = max_samples
        self.first_end: float | None = None  # when the first update returned
        self.first_seconds = float("nan")  # how long that first update call took (compilation / capture included)
        self._times: list[float] = []
        self._counts: list[int] = []
        self._stride = 1
        self._last: tuple[float, int] | None = None

    def record(self, now: float, count: int, seconds: float | None = None) -> bool:
        """Notes that ``count`` updates were done at ``now``; ``seconds``: the update call's own duration. Returns
        True for the first update (the caller may report it)."""
        first = self.first_end is None
        if first:
            self.first_end = now
            self.first_seconds = float("nan") if seconds is None else float(seconds)
        self._last = (now, count)
        if first or count % self._stride == 0:
            self._times.append(now)
            self._counts.append(count)
            if len(self._times) > self.max_samples:  # keep every other sample (the first stays), double the stride
                self._times, self._counts = self._times[::2], self._counts[::2]
                self._stride *= 2
        return first

    @property
    def time_to_first_update(self) -> float:
        """Seconds from launch to the end of the first update (nan before it)."""
        return float("nan") if self.first_end is None else self.first_end - self.launch

    def steady_rate(self, fraction: float = 0.5) -> float:
        """Updates per wall second over the last ``fraction`` of the time between the first update's end and the
        last update (everything the loop does in that window counts: env steps, evaluation, logging). The first
        update, with any compilation or graph capture, is never inside the window; nan with fewer than two samples
        or no time between them."""
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        if self.first_end is None or self._last is None:
            return float("nan")
        t_end, n_end = self._last
        start = t_end - fraction * (t_end - self.first_end)
        i = min(bisect.bisect_left(self._times, start), len(self._times) - 1)
        t0, n0 = self._times[i], self._counts[i]
        if t_end <= t0 or n_end <= n0:
            return float("nan")
        return (n_end - n0) / (t_end - t0)


class RunLogger:
    """Writes ``<run>/tb/`` TensorBoard events, ``<run>/eval.csv`` and ``<run>/config.yaml``.

    Scalars use upstream's key names (``actor/loss``, ``critic/loss``, ``avg_return``, ...) at x = env_step.
    A resume (``resume_step``) drops the CSV rows after the checkpoint's step (they are evaluated again) and starts
    its event file with a TensorBoard session start at ``resume_step + 1``, so TensorBoard discards the earlier
    sessions' events after the checkpoint: one consistent run per directory, nothing logged twice.

    Args:
        run_dir: the run directory (``cfg.save_path``).
        exp_name: CSV ``exp_name`` column.
        env_name: CSV ``env_name`` column.
        seed: CSV ``seed`` column.
        config_yaml: resolved config text, saved as ``config.yaml`` and as TensorBoard text ``config``.
        use_tensorboard: False for ``logger_type=none`` (the CSV and config are still written).
        resume_step: the env step of the checkpoint a resume starts from; None for a fresh run.
        wandb: keyword arguments of ``agent_common.wandb_logger.WandbSink`` (project, entity, group, name, config)
            to log to W&B as well; None: no W&B.

    Attributes:
        first_step: the first env step this logger writes at (0, or ``resume_step + 1``).
    """

    def __init__(
        self,
        run_dir: str,
        exp_name: str,
        env_name: str,
        seed: int,
        config_yaml: str,
        use_tensorboard: bool = True,
        resume_step: int | None = None,
        wandb: dict[str, Any] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.exp_name = exp_name
        self.env_name = env_name
        self.seed = seed
        self.first_step = 0 if resume_step is None else resume_step + 1
        os.makedirs(run_dir, exist_ok=True)
        atomic_write_text(os.path.join(run_dir, "config.yaml"), config_yaml)
        self.csv_path = os.path.join(run_dir, "eval.csv")
        if resume_step is not None and os.path.exists(self.csv_path):
            _truncate_eval_csv(self.csv_path, resume_step)
        new_csv = not os.path.exists(self.csv_path)
        self._csv_rows = 0 if new_csv else max(0, sum(1 for _ in open(self.csv_path)) - 1)
        self._csv_file = open(self.csv_path, "a", newline="")
        self._csv = csv.writer(self._csv_file)
        if new_csv:
            self._csv.writerow(CSV_HEADER)
            self._csv_file.flush()
        self.tb_dir = os.path.join(run_dir, "tb")
        self._texts: dict[str, str] = {}  # last text per tag, so unchanged texts are not re-logged
        self._wandb: Any = None
        if wandb is not None:
            from agent_common.wandb_logger import WandbSink

            self._wandb = WandbSink(run_dir, **wandb)
        self._writer: EventFileWriter | None = None
        if use_tensorboard:
            os.makedirs(self.tb_dir, exist_ok=True)
            self._writer = EventFileWriter(self.tb_dir, flush_secs=30)
            if resume_step is not None:
                start = SessionLog(status=SessionLog.START)
                self._writer.add_event(Event(wall_time=time.time(), step=self.first_step, session_log=start))
            self.log_text("config", "```\n" + config_yaml + "\n```", self.first_step)

    def log_scalars(self, metrics: dict[str, float], step: int) -> None:
        """Writes scalars at ``step`` (non-numeric values are ignored)."""
        numbers = {key: float(value) for key, value in metrics.items() if isinstance(value, int | float)}
        if self._wandb is not None and numbers:
            self._wandb.log(numbers, step)
        if self._writer is None:
            return
        values = [Summary.Value(tag=key, simple_value=value) for key, value in numbers.items()]
        if values:
            self._writer.add_event(Event(wall_time=time.time(), step=int(step), summary=Summary(value=values)))

    def log_text(self, tag: str, text: str, step: int, only_if_changed: bool = False) -> None:
        """Writes a TensorBoard text summary (e.g. the selected backend and fallback reasons)."""
        if only_if_changed and self._texts.get(tag) == text:
            return
        self._texts[tag] = text
        if self._wandb is not None:
            self._wandb.log_text(tag, text)
        if self._writer is None:
            return
        summary = text_pb(tag, text)
        self._writer.add_event(Event(wall_time=time.time(), step=int(step), summary=summary))

    def log_eval(self, metrics: dict[str, float], env_step: int) -> None:
        """Writes eval metrics to TensorBoard (no prefix, as upstream) and the CSV rows for ``EVAL_CSV_METRICS``."""
        self.log_scalars(metrics, env_step)
        for metric in EVAL_CSV_METRICS:
            if metric in metrics and not math.isnan(metrics[metric]):
                self._csv.writerow(
                    [
                        self._csv_rows,
                        self.exp_name,
                        self.env_name,
                        self.seed,
                        metric,
                        float(env_step),
                        repr(float(metrics[metric])),
                    ]
                )
                self._csv_rows += 1
        self._csv_file.flush()

    def log_video(self, tag: str, path: str, frames: np.ndarray, fps: int, step: int) -> None:
        """Logs an evaluation video (already written to ``path`` as MP4): an animated GIF image in TensorBoard (as
        upstream), the MP4 file in W&B."""
        if self._wandb is not None:
            self._wandb.log_video(tag, path, fps, step)
        if self._writer is None:
            return
        from PIL import Image

        images = [Image.fromarray(frame) for frame in frames]  # (H, W, 3) each
        buffer = io.BytesIO()
        images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:],
                       duration=max(20, round(1000 / fps)), loop=0)
        height, width = frames.shape[1:3]
        image = Summary.Image(encoded_image_string=buffer.getvalue(), height=height, width=width)
        self._writer.add_event(Event(wall_time=time.time(), step=int(step),
                                     summary=Summary(value=[Summary.Value(tag=tag, image=image)])))

    def flush(self) -> None:
        """Flushes the event file and the CSV."""
        if self._writer is not None:
            self._writer.flush()
        self._csv_file.flush()

    def close(self) -> None:
        """Flushes and closes everything."""
        if self._wandb is not None:
            self._wandb.close()
            self._wandb = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if not self._csv_file.closed:
            self._csv_file.close()


def _truncate_eval_csv(path: str, last_step: int) -> None:
    """Rewrites an eval CSV (atomically) without the rows after ``last_step``, renumbering the index column."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return
    header, body = rows[0], rows[1:]
    step_col = header.index("env_step") if "env_step" in header else None
    kept = [r for r in body if step_col is None or len(r) <= step_col or float(r[step_col]) <= last_step]
    if len(kept) == len(body):
        return
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(header)
    for index, row in enumerate(kept):
        writer.writerow([index, *row[1:]])
    atomic_write_text(path, buffer.getvalue())


def read_eval_csv(path: str, metric: str = "avg_return") -> list[tuple[float, float]]:
    """Reads ``(env_step, value)`` pairs for ``metric`` from an eval CSV (ours or upstream's layout)."""
    out: list[tuple[float, float]] = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("metric") == metric:
                out.append((float(row["env_step"]), float(row["value"])))
    return out
