"""The run directory: where a run lives (``save_path``, derived when null), the check and creation before any work
(``prepare_run_dir``: a fresh run never writes into another run's directory), and a run without a complete
checkpoint started over in place (``set_aside_incomplete_run``: its files are moved, never deleted)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from agent_common.keys import Config, ConfigError
from agent_common.runs.checkpoints import complete_checkpoints, latest_checkpoint
from agent_common.runs.commands import train_command
from agent_common.runs.files import INCOMPLETE_RUN_DIR, RUN_FILES, CheckpointError, fsync_dir
from agent_common.validation import check_training_run

__all__ = ["default_run_dir", "holds_run", "prepare_run_dir", "run_dir_of_checkpoint", "run_dir_taken_message",
           "set_aside_incomplete_run"]

def run_dir_of_checkpoint(path: str) -> str:
    """``<run>/checkpoints/step<k>`` -> ``<run>``; a run directory is returned unchanged."""
    path = os.path.normpath(path)
    parent = os.path.dirname(path)
    if os.path.basename(parent) == "checkpoints":
        return os.path.dirname(parent)
    return path

def default_run_dir(cfg: Any) -> str:
    """``runs/<group>/<exp>/<env>/seed<seed>-<MMDD-HHMMSS>``, with a ``-<k>`` suffix if that directory exists (two
    runs started in the same second get two directories)."""
    stamp = time.strftime("%m%d-%H%M%S")
    base = os.path.join("runs", cfg.group_name, cfg.exp_name, cfg.env.env_name, f"seed{cfg.seed}-{stamp}")
    path, k = base, 1
    while os.path.exists(path):
        path, k = f"{base}-{k}", k + 1
    return path

def holds_run(directory: str) -> bool:
    """Whether ``directory`` holds files of a training run (config.yaml, eval.csv, checkpoints/ or tb/)."""
    return any(os.path.exists(os.path.join(directory, name)) for name in RUN_FILES)

def set_aside_incomplete_run(run_dir: str) -> str:
    """Moves everything in a run directory that has no complete checkpoint into ``<run>/incomplete-<k>/`` (for
    ``overwrite_incomplete=true``) and returns the line saying so. Earlier ``incomplete-<k>`` folders stay.

    Raises:
        CheckpointError: the run has a complete checkpoint (resume it instead), naming the command.
    """
    found = complete_checkpoints(run_dir)
    if found:
        raise CheckpointError(f"{run_dir} holds a complete checkpoint ({found[0]}); overwrite_incomplete=true starts "
                              f"over only a run without one. Resume it: {train_command(f'agent_load_path={run_dir}')}")
    prefix = INCOMPLETE_RUN_DIR + "-"
    entries = [n for n in sorted(os.listdir(run_dir)) if not n.startswith(prefix)]
    k = 1
    while os.path.exists(os.path.join(run_dir, f"{prefix}{k}")):
        k += 1
    dest = os.path.join(run_dir, f"{prefix}{k}")
    os.makedirs(dest)
    for name in entries:
        os.replace(os.path.join(run_dir, name), os.path.join(dest, name))
    fsync_dir(run_dir)
    return f"overwrite_incomplete=true: moved the incomplete run's files ({', '.join(entries)}) to {dest}"

def run_dir_taken_message(run_dir: str) -> str:
    """The refusal for a fresh run whose ``save_path`` holds another run, with the next commands: resume it (when
    it has a complete checkpoint) or start it over in place (when it has none), or choose another directory."""
    newest = latest_checkpoint(run_dir)
    if newest is not None:
        first = f"Resume it: {train_command(f'agent_load_path={run_dir}')} (newest checkpoint: {newest})"
    else:
        first = ("It has no complete checkpoint, so it cannot be resumed; start it over in place by adding "
                 f"--overrides overwrite_incomplete=true to this command (its files are first moved to "
                 f"{os.path.join(run_dir, INCOMPLETE_RUN_DIR)}-<k>/, nothing is deleted)")
    return (f"save_path={run_dir} already holds a run (config.yaml, eval.csv, checkpoints/ or tb/); a new run never "
            f"writes into it. {first}; or choose another save_path (null: a new timestamped directory under runs/); "
            f"or remove the directory yourself (rm -r {run_dir})")


def prepare_run_dir(cfg: Config, framework: str | None = None) -> None:
    """Checks the run and creates its directory before any work: ``agent_common.validation.check_training_run``
    (``framework``: the agent that trains); a fresh run never writes into a directory that holds another run (only a
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
