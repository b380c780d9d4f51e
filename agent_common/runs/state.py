"""A checkpoint's files for the driver: ``save_state`` writes one (the agent's files, ``config.yaml``, the loop state,
the replay rows when asked, one state directory per data-parallel replica) atomically, ``load_state`` finds the
newest usable one and hands its contents to the driver. The driver decides what the state holds; this module
decides where it goes and what a load may trust.

Several replicas: replica 0 creates ``step<N>.tmp``, every replica writes its loop state (and rows) into its own
directory of it (``Replicas.state_dir``: replica 0 the checkpoint itself, the others ``ranks/rank<r>/``), replica 0
adds the agent and the config and commits; a replica that dies before the commit leaves only the ``.tmp`` directory,
which a resume discards.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_common.replicas import SINGLE, Replicas
from agent_common.runs.checkpoints import (
    checkpoint_dir,
    commit_checkpoint_dir,
    prune_checkpoints,
    select_checkpoint,
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
)

__all__ = ["Loaded", "Saved", "load_state", "save_state"]


@dataclass(frozen=True)
class Saved:
    """What ``save_state`` wrote: the checkpoint, the older ones it removed, whether it holds the replay rows, and
    the line that says so (replica 0: path, size, rows; another replica: where its state went)."""

    path: str
    pruned: list[str]
    has_buffer: bool
    line: str


@dataclass(frozen=True)
class Loaded:
    """A checkpoint ``load_state`` read for this replica: its directory, the agent's directory, the loop state and
    the replay rows (None: the checkpoint has none and no ``buffer_load_path`` was given)."""

    path: str
    agent_dir: str
    state: dict[str, Any]
    buffer: dict[str, Any] | None


def save_state(run_dir: str, env_step: int, *, state: dict[str, Any], config_yaml: str,
               save_agent: Callable[[str], None], buffer: Callable[[], dict[str, Any]] | None, keep: int,
               replicas: Replicas = SINGLE, rows: int = 0) -> Saved:
    """Writes ``<run>/checkpoints/step<env_step>/`` atomically and keeps the newest ``keep`` checkpoints.

    Args:
        state: the loop state (``loop_state.pkl``).
        config_yaml: the resolved config (``config.yaml``, written by replica 0).
        save_agent: writes the agent's files into the directory it is given (called on replica 0).
        buffer: returns the replay rows to write (``replay_buffer.pkl``), or None for none.
        rows: the replay rows' count, for the line.

    Raises:
        DiskFullError: the disk filled up; the half-written ``.tmp`` directory is removed first.
    """
    def write(directory: str) -> None:
        if replicas.is_main:
            save_agent(os.path.join(directory, AGENT_DIR))
            atomic_write_text(os.path.join(directory, CONFIG_FILE), config_yaml)
        else:
            os.makedirs(directory, exist_ok=True)
        atomic_pickle(os.path.join(directory, LOOP_STATE_FILE), state)
        if buffer is not None:
            atomic_pickle(os.path.join(directory, BUFFER_FILE), buffer())

    has_buffer = buffer is not None
    if replicas.world_size == 1:
        final, pruned = write_checkpoint(run_dir, env_step, write, keep)
        kept = f", replay buffer {rows} rows" if has_buffer else ", no replay buffer"
        removed = f"; removed {', '.join(os.path.basename(p) for p in pruned)}" if pruned else ""
        return Saved(final, pruned, has_buffer,
                     f"checkpoint {final} ({directory_size(final) / 2**20:.1f} MiB{kept}){removed}")
    final = checkpoint_dir(run_dir, env_step)
    tmp = final + ".tmp"
    if replicas.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    replicas.barrier()
    write(replicas.state_dir(tmp))
    replicas.barrier()
    if not replicas.is_main:
        return Saved(final, [], has_buffer,
                     f"replica {replicas.rank}: loop state written to {replicas.state_dir(final)}")
    commit_checkpoint_dir(tmp, final)
    pruned = prune_checkpoints(run_dir, keep)
    removed = f"; removed {', '.join(os.path.basename(p) for p in pruned)}" if pruned else ""
    return Saved(final, pruned, has_buffer, f"checkpoint {final} ({directory_size(final) / 2**20:.1f} MiB, "
                                            f"{replicas.world_size} replicas){removed}")


def load_state(path: str, restore: Callable[[Loaded], None], *, replicas: Replicas = SINGLE,
               buffer_load_path: str | None = None) -> str:
    """Restores the newest usable checkpoint at ``path`` (a checkpoint or a run directory) with ``restore`` and
    returns it. From a run directory a checkpoint that cannot be used is skipped with a warning naming it, and the
    next older one is tried (``select_checkpoint``).

    Checks, before ``restore``: this replica's loop state exists and was written by as many replicas as this run
    has; the replay rows the loop state records (or ``buffer_load_path``) exist. ``restore`` raises
    ``CheckpointError`` for contents that do not fit the run.

    Raises:
        CheckpointError: no usable checkpoint; the message names the file and says what to do.
    """
    def use(ckpt: str) -> None:
        state_dir = replicas.state_dir(ckpt)
        state_file = os.path.join(state_dir, LOOP_STATE_FILE)
        if not os.path.exists(state_file) and not replicas.is_main:
            raise CheckpointError(f"{ckpt} has no loop state of replica {replicas.rank} ({state_dir}): it was "
                                  f"written by fewer replicas; resume with the world size that wrote it")
        state = read_checkpoint_file(state_file)
        if not isinstance(state, dict):
            raise CheckpointError(f"{state_file} is not a loop state (expected a mapping, got {type(state).__name__})")
        saved_world = int(state.get("world_size", 1))
        if saved_world != replicas.world_size:
            raise CheckpointError(f"{ckpt} was written by {saved_world} replica(s), this run has "
                                  f"{replicas.world_size}: resume with the same number of processes")
        buffer_path = buffer_load_path or os.path.join(state_dir, BUFFER_FILE)
        rows = None
        if buffer_load_path is not None or state.get("buffer_saved", False):
            if not os.path.exists(buffer_path):
                raise CheckpointError(f"{buffer_path} is missing although {state_file} records a saved replay "
                                      "buffer: the checkpoint is incomplete")
            rows = read_checkpoint_file(buffer_path)
        restore(Loaded(ckpt, os.path.join(ckpt, AGENT_DIR), state, rows))

    return select_checkpoint(path, use)
