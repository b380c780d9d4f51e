"""The training command below the argument parsing: ``run(cfg, framework)`` trains the config one command line
gave (``agent_common.config.parse_args``, called once by ``python -m agent_<framework>.train``, torchrun included),
chooses the stepper its simulator needs, and turns the outcome into an exit status and the lines a user reads.

Errors the user can fix end with one line on stderr and exit status 2 (config, run directory, checkpoint, strict
backend) or 1 (a full disk; a non-finite loss, reward or observation, with its likely causes and the last good
checkpoint); a run directory this call created and left empty is removed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from agent_common.device import DeviceTrainerFactory, device_trainer
from agent_common.driver import TrainResult, train
from agent_common.host import host_trainer
from agent_common.keys import Config, ConfigError
from agent_common.protocol import AgentFactory
from agent_common.replicas import SINGLE, Replicas
from agent_common.runs.checkpoints import non_finite_message
from agent_common.runs.commands import continue_lines
from agent_common.runs.files import CheckpointError, DiskFullError, is_disk_full
from agent_common.trainer import TrainerFactory
from agent_common.validation import check_training_run
from simulators import DEVICE, simulator

__all__ = ["Framework", "run", "summary"]


@dataclass(frozen=True)
class Framework:
    """An agent package as the training command sees it.

    Attributes:
        name: ``"torch"`` or ``"jax"``.
        make_agent: imports and returns the agent factory (the host stepper's agent); called once the config and
            the run directory are checked, so the framework is imported after them.
        make_device_trainer: imports and returns the ``DeviceTrainerFactory`` (the device stepper's trainer), or
            None where the package has none.
    """

    name: str
    make_agent: Callable[[], AgentFactory]
    make_device_trainer: Callable[[], DeviceTrainerFactory] | None = None

    def trainer(self, cfg: Config) -> TrainerFactory:
        """The stepper ``cfg``'s simulator needs.

        Raises:
            ConfigError: a device simulator and no device trainer (``check_training_run`` names it).
        """
        if simulator(cfg.env.env_type).STEPPER != DEVICE:
            return host_trainer(self.make_agent, lazy=True, framework=self.name)
        if self.make_device_trainer is None:
            check_training_run(cfg, None)
        return device_trainer(self.make_device_trainer, self.name, lazy=True)


def summary(result: TrainResult, num_env_steps: int) -> str:
    """The lines the command prints at the end: what happened, where everything is, how to continue."""
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


def run(cfg: Config, framework: Framework, replicas: Replicas = SINGLE) -> int:
    """Trains ``cfg`` (``agent_common.driver.train`` with the stepper its simulator needs) and prints where
    everything went (replica 0).

    Returns:
        The process exit status: 0 completed or stopped on the wall-clock budget, 130 after Ctrl-C or SIGTERM, 2
        for a config, run-directory, checkpoint or strict-backend error, 1 when the disk is full or a loss, reward
        or observation became non-finite.
    """
    run_dir = os.path.abspath(cfg.save_path or ".")
    first_created = None  # the outermost directory of run_dir that this call creates
    path = run_dir
    while not os.path.exists(path) and os.path.dirname(path) != path:
        first_created, path = path, os.path.dirname(path)
    try:
        result = train(cfg, framework.trainer(cfg), replicas)
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
        print(summary(result, cfg.num_env_steps), flush=True)
    return 130 if result.status == "interrupted" else 0
