"""Atomic file writes for checkpoints and logs: temp file in the same directory, fsync, os.replace."""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any

__all__ = [
    "atomic_pickle",
    "atomic_write",
    "atomic_write_text",
    "checkpoint_dir",
    "commit_checkpoint_dir",
    "latest_checkpoint",
    "load_pickle",
    "resolve_checkpoint",
]

LATEST_FILE = "latest"  # text file in <run>/checkpoints naming the newest complete checkpoint directory
COMPLETE_FILE = "COMPLETE"  # marker written last inside a checkpoint directory


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
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
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


def checkpoint_dir(run_dir: str, env_step: int) -> str:
    """``<run>/checkpoints/step<env_step>``."""
    return os.path.join(run_dir, "checkpoints", f"step{env_step}")


def commit_checkpoint_dir(tmp_dir: str, final_dir: str) -> None:
    """Publishes a fully written checkpoint directory: marker file, rename into place, update ``latest``.

    Args:
        tmp_dir: directory holding the complete checkpoint (each file written with ``atomic_write``).
        final_dir: ``checkpoint_dir(run, step)``; an existing one is replaced.
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


def latest_checkpoint(run_dir: str) -> str | None:
    """The newest complete checkpoint of a run directory, or None."""
    ckpt_root = os.path.join(run_dir, "checkpoints")
    latest = os.path.join(ckpt_root, LATEST_FILE)
    if os.path.exists(latest):
        with open(latest) as f:
            candidate = os.path.join(ckpt_root, f.read().strip())
        if os.path.exists(os.path.join(candidate, COMPLETE_FILE)):
            return candidate
    return None


def resolve_checkpoint(path: str) -> str:
    """Accepts a checkpoint directory or a run directory (-> its latest checkpoint).

    Raises:
        FileNotFoundError: no complete checkpoint at ``path``.
    """
    if os.path.exists(os.path.join(path, COMPLETE_FILE)):
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise FileNotFoundError(f"no complete checkpoint at {path!r} (expected {COMPLETE_FILE} or checkpoints/latest)")
    return latest
