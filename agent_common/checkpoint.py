"""Checkpoint files and directories: atomic writes (temp file in the same directory, fsync, os.replace), the
``<run>/checkpoints/step<N>/`` layout, finding the newest complete checkpoint by scanning, recovering from an
interrupted commit, pruning old checkpoints, and errors that name the file and say what to do."""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any

from agent_common.upstream_layout import describe_foreign_checkpoint

__all__ = [
    "AGENT_DIR",
    "BUFFER_FILE",
    "CONFIG_FILE",
    "LOOP_STATE_FILE",
    "CheckpointError",
    "DiskFullError",
    "NoCheckpointError",
    "atomic_pickle",
    "atomic_write",
    "atomic_write_text",
    "candidate_checkpoints",
    "checkpoint_dir",
    "checkpoint_framework",
    "checkpoint_step",
    "commit_checkpoint_dir",
    "complete_checkpoints",
    "converter_command",
    "directory_size",
    "holds_run",
    "is_disk_full",
    "latest_checkpoint",
    "load_pickle",
    "prune_checkpoints",
    "read_checkpoint_file",
    "recover_checkpoints",
    "resolve_checkpoint",
    "load_newest",
    "warn",
    "write_checkpoint",
]

LATEST_FILE = "latest"  # text file in <run>/checkpoints naming the newest checkpoint (for people; never read)
COMPLETE_FILE = "COMPLETE"  # marker written last inside a checkpoint directory
AGENT_DIR = "agent"  # <step dir>/agent/ holds the framework agent's files
LOOP_STATE_FILE = "loop_state.pkl"  # the training loop's state (counters, RNGs, env states, normaliser)
BUFFER_FILE = "replay_buffer.pkl"  # the replay buffer's rows (when the checkpoint has them)
CONFIG_FILE = "config.yaml"  # the resolved config, in the run directory and in every checkpoint
RUN_FILES = (CONFIG_FILE, "eval.csv", "checkpoints", "tb")  # any of these means a directory holds a run
_STEP_DIR = re.compile(r"^step(\d+)(\.tmp|\.old)?$")
_AGENT_MARKERS = {"torch": "actor.pt", "jax": "actor.pkl"}


class CheckpointError(Exception):
    """A checkpoint that cannot be used: unreadable, incomplete or written by the other framework. The message
    names the file or directory and says what to do."""


class NoCheckpointError(CheckpointError, FileNotFoundError):
    """No complete checkpoint where one was expected."""


class DiskFullError(OSError):
    """The disk filled up while writing a checkpoint or log; the message names the file."""


def is_disk_full(exc: BaseException) -> bool:
    """True for "No space left on device" / "Disk quota exceeded", also when wrapped in another exception."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return False


def _umask() -> int:
    """The process umask (read by setting it and setting it back: the only portable way)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _atomic_file(path: str, mode: str) -> Iterator[IO[Any]]:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; the file gets the mode open() would give it
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(directory)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and is_disk_full(exc):
            raise DiskFullError(exc.errno, f"disk full (No space left on device) while writing {path}") from exc
        raise


def atomic_write(path: str, write: Callable[[IO[bytes]], None]) -> None:
    """Writes a binary file atomically: ``write(f)`` into a temp file in the same dir, fsync, ``os.replace``.

    A crash leaves either the old file or the new one, never a partial file.

    Args:
        path: destination.
        write: callback that writes the content to the open binary file object (e.g. ``torch.save(obj, f)``).
    """
    with _atomic_file(path, "wb") as f:
        write(f)


def atomic_write_text(path: str, text: str) -> None:
    """Atomically writes a UTF-8 text file."""
    with _atomic_file(path, "w") as f:
        f.write(text)


def atomic_pickle(path: str, obj: Any) -> None:
    """Atomically pickles ``obj`` (numpy arrays, dicts, RNG states) to ``path``."""
    atomic_write(path, lambda f: pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL))


def load_pickle(path: str) -> Any:
    """Loads a pickle written by ``atomic_pickle`` (trusted, self-written files only)."""
    with open(path, "rb") as f:
        return pickle.load(f)


def read_checkpoint_file(path: str, read: Callable[[str], Any] = load_pickle) -> Any:
    """``read(path)``, with any failure (missing, truncated, not a checkpoint file) raised as ``CheckpointError``
    naming the file.

    Args:
        path: a file inside a checkpoint directory.
        read: the reader (``load_pickle``, or ``torch.load`` wrapped by the torch agent).
    """
    try:
        return read(path)
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing: the checkpoint is incomplete") from None
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is damaged or foreign
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CheckpointError(
            f"cannot read {path} ({type(exc).__name__}: {first}): the file is damaged or not a checkpoint file"
        ) from None


def checkpoint_dir(run_dir: str, env_step: int) -> str:
    """``<run>/checkpoints/step<env_step>``."""
    return os.path.join(run_dir, "checkpoints", f"step{env_step}")


def checkpoint_step(path: str) -> int:
    """The env step of a ``step<N>`` checkpoint directory (-1 if the name is not one)."""
    match = _STEP_DIR.match(os.path.basename(os.path.normpath(path)))
    return int(match.group(1)) if match else -1


def commit_checkpoint_dir(tmp_dir: str, final_dir: str) -> None:
    """Publishes a fully written checkpoint directory: marker file, rename into place, update ``latest``.

    An existing ``final_dir`` is first renamed to ``<final>.old`` and deleted after the new one is in place; a
    crash in between leaves complete ``.tmp`` / ``.old`` directories that ``recover_checkpoints`` puts back.

    Args:
        tmp_dir: directory holding the complete checkpoint (each file written with ``atomic_write``).
        final_dir: ``checkpoint_dir(run, step)``.
    """
    atomic_write_text(os.path.join(tmp_dir, COMPLETE_FILE), "ok\n")
    if os.path.exists(final_dir):
        trash = final_dir + ".old"
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(final_dir, trash)
        os.replace(tmp_dir, final_dir)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp_dir, final_dir)
    parent = os.path.dirname(final_dir)
    _fsync_dir(parent)
    atomic_write_text(os.path.join(parent, LATEST_FILE), os.path.basename(final_dir) + "\n")


def _is_complete(path: str) -> bool:
    return os.path.isdir(path) and os.path.exists(os.path.join(path, COMPLETE_FILE))


def complete_checkpoints(run_dir: str) -> list[str]:
    """The run's complete ``step<N>`` checkpoint directories, newest first, found by scanning ``checkpoints/``."""
    root = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        match = _STEP_DIR.match(name)
        if match and match.group(2) is None and _is_complete(os.path.join(root, name)):
            found.append((int(match.group(1)), os.path.join(root, name)))
    return [path for _, path in sorted(found, reverse=True)]


def latest_checkpoint(run_dir: str) -> str | None:
    """The newest complete checkpoint of a run directory (by scanning), or None."""
    found = complete_checkpoints(run_dir)
    return found[0] if found else None


def recover_checkpoints(run_dir: str) -> list[str]:
    """Repairs ``<run>/checkpoints`` after a crash and returns what it did, one line per directory.

    A complete ``step<N>.tmp`` or ``step<N>.old`` whose ``step<N>`` is missing (a crash inside
    ``commit_checkpoint_dir``) is renamed to ``step<N>``, the ``.tmp`` first (it is the newer one); every other
    ``.tmp`` / ``.old`` directory is a leftover (half-written, or superseded) and is deleted.
    """
    root = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(root):
        return []
    done = []
    names = sorted(os.listdir(root), key=lambda n: (n.endswith(".old"), n))  # .tmp before .old for each step
    for name in names:
        match = _STEP_DIR.match(name)
        if not match or match.group(2) is None:
            continue
        path = os.path.join(root, name)
        final = os.path.join(root, f"step{match.group(1)}")
        if not os.path.exists(final) and _is_complete(path):
            os.replace(path, final)
            done.append(f"restored {final} from the complete {name} left by an interrupted save")
        else:
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"removed the stale {path}")
    if done:
        _fsync_dir(root)
    return done


def prune_checkpoints(run_dir: str, keep: int) -> list[str]:
    """Deletes all but the ``keep`` newest complete checkpoints; returns the deleted directories."""
    old = complete_checkpoints(run_dir)[keep:]
    for path in old:
        shutil.rmtree(path, ignore_errors=True)
    return old


def checkpoint_framework(path: str) -> str | None:
    """``"torch"`` or ``"jax"``: which agent wrote the checkpoint (from its agent files), None if unknown."""
    agent_dir = os.path.join(path, AGENT_DIR)
    for framework, marker in _AGENT_MARKERS.items():
        if os.path.exists(os.path.join(agent_dir, marker)):
            return framework
    return None


def converter_command(src: str, source: str, target: str) -> str:
    """The command that converts a checkpoint written by one agent for the other."""
    return f"python -m agent_interop.convert {source}-to-{target} {src} <new checkpoint dir>"


def resolve_checkpoint(path: str) -> str:
    """Accepts a checkpoint directory or a run directory (-> its newest complete checkpoint).

    Raises:
        NoCheckpointError: no complete checkpoint at ``path`` (also a ``FileNotFoundError``).
    """
    return candidate_checkpoints(path)[0]


def candidate_checkpoints(path: str) -> list[str]:
    """The checkpoints a resume from ``path`` may use, in order: a checkpoint directory alone, or a run
    directory's complete checkpoints, newest first (the loop falls back along them past damaged ones).

    Raises:
        NoCheckpointError: nothing usable, with what was found and what to do (another program's layout is named as
            such, with the conversion command; ``agent_common.upstream_layout``).
    """
    foreign = describe_foreign_checkpoint(path)
    if foreign is not None:
        raise NoCheckpointError(foreign)
    if _is_complete(path):
        return [path]
    if not os.path.isdir(path):
        raise NoCheckpointError(f"agent_load_path={path}: no such directory (give a run directory or one of its "
                                "checkpoints/step<N> directories)")
    found = complete_checkpoints(path)
    if found:
        return found
    if os.path.basename(os.path.normpath(path)).startswith("step"):
        raise NoCheckpointError(f"agent_load_path={path}: the checkpoint is incomplete (no {COMPLETE_FILE} marker: "
                                "its save was interrupted); resume from the run directory to use the newest "
                                "complete checkpoint")
    raise NoCheckpointError(f"agent_load_path={path}: no complete checkpoint in {os.path.join(path, 'checkpoints')} "
                            "(give a run directory that has checkpoints/step<N> directories)")


def holds_run(directory: str) -> bool:
    """Whether ``directory`` holds files of a training run (config.yaml, eval.csv, checkpoints/ or tb/)."""
    return any(os.path.exists(os.path.join(directory, name)) for name in RUN_FILES)


def directory_size(path: str) -> int:
    """Total size in bytes of the files under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


def warn(message: str) -> None:
    """One warning line on stderr (the CLI's channel for things the user should read)."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def write_checkpoint(run_dir: str, env_step: int, write: Callable[[str], None], keep: int) -> tuple[str, list[str]]:
    """Writes ``checkpoint_dir(run_dir, env_step)`` atomically: ``write(tmp)`` fills a fresh ``<final>.tmp``
    directory, ``commit_checkpoint_dir`` publishes it, then all but the ``keep`` newest checkpoints are removed.

    Returns:
        (the checkpoint directory, the removed older checkpoints).

    Raises:
        DiskFullError: the disk filled up (the half-written ``.tmp`` directory is removed first); the message names
            the checkpoint, the newest complete one and the resume command.
    """
    final = checkpoint_dir(run_dir, env_step)
    tmp = final + ".tmp"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        write(tmp)
        commit_checkpoint_dir(tmp, final)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written checkpoint must not keep the disk full
        if is_disk_full(exc):
            raise DiskFullError(
                f"disk full (No space left on device) while writing the checkpoint {final}: free space on that "
                f"disk, or move the run directory to another one, then resume with --overrides "
                f"agent_load_path={run_dir} (newest complete checkpoint: {latest_checkpoint(run_dir)})"
            ) from exc
        raise
    return final, prune_checkpoints(run_dir, keep)


def load_newest(path: str, load: Callable[[str], None]) -> str:
    """Restores the newest usable checkpoint at ``path`` (a checkpoint dir or a run dir) with ``load(ckpt)`` and
    returns it. From a run directory, a checkpoint whose ``load`` raises ``CheckpointError`` is skipped with a
    warning naming it, and the next older complete one is tried.

    Raises:
        CheckpointError: no usable checkpoint; the message names the file and says what to do.
    """
    candidates = candidate_checkpoints(path)
    failures = []
    for ckpt in candidates:
        try:
            load(ckpt)
            return ckpt
        except CheckpointError as exc:
            failures.append(str(exc))
            if ckpt != candidates[-1]:
                warn(f"skipping the checkpoint {ckpt}: {exc}; falling back to the previous one")
    if len(candidates) == 1:
        raise CheckpointError(f"{failures[0]}. Resume from another checkpoint (agent_load_path=<run dir> uses the "
                              "newest complete one), or start a new run")
    raise CheckpointError(f"no usable checkpoint under {path}: " + " | ".join(failures))
