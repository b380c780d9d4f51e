"""The files of a run: their names, atomic writes (a temp file in the same directory, fsync, ``os.replace``), reading
a checkpoint's files with one error naming the file, and the errors of the lifecycle."""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any

from agent_common.keys import flatten

__all__ = [
    "AGENT_DIR",
    "BUFFER_FILE",
    "CONFIG_FILE",
    "INCOMPLETE_RUN_DIR",
    "LOOP_STATE_FILE",
    "RUN_FILES",
    "CheckpointError",
    "DamagedCheckpointError",
    "DiskFullError",
    "ForeignCheckpointError",
    "NoCheckpointError",
    "atomic_pickle",
    "atomic_write",
    "atomic_write_text",
    "directory_size",
    "fsync_dir",
    "is_disk_full",
    "load_pickle",
    "read_checkpoint_file",
    "read_config_file",
    "warn",
    "warn_once",
]

AGENT_DIR = "agent"  # <step dir>/agent/ holds the framework agent's files
LOOP_STATE_FILE = "loop_state.pkl"  # the driver's and the trainer's state (counters, RNGs, env states, normaliser)
BUFFER_FILE = "replay_buffer.pkl"  # the replay buffer's rows (when the checkpoint has them)
CONFIG_FILE = "config.yaml"  # the resolved config, in the run directory and in every checkpoint
RUN_FILES = (CONFIG_FILE, "eval.csv", "checkpoints", "tb")  # any of these means a directory holds a run
INCOMPLETE_RUN_DIR = "incomplete"  # <run>/incomplete-<k>/: a run without a complete checkpoint, started over


class CheckpointError(Exception):
    """A checkpoint that cannot be used: unreadable, incomplete or written by the other framework. The message
    names the file or directory and says what to do."""

class NoCheckpointError(CheckpointError, FileNotFoundError):
    """No complete checkpoint where one was expected."""

class ForeignCheckpointError(CheckpointError):
    """A folder in another program's checkpoint layout (``detect_foreign_layout``); it is never moved or changed."""

class DamagedCheckpointError(CheckpointError):
    """A file of a checkpoint is missing, unreadable or does not match the checkpoint's manifest.

    Attributes:
        file: the file (or the checkpoint directory, for a missing manifest).
        reason: a short word for the damage (``checksum``, ``missing``, ``unreadable``, ``manifest``, ``incomplete``),
            used in the name the damaged checkpoint is moved to.
    """

    def __init__(self, message: str, file: str, reason: str) -> None:
        super().__init__(message)
        self.file = file
        self.reason = reason

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

def fsync_dir(path: str) -> None:
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
        fsync_dir(directory)
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
        raise DamagedCheckpointError(f"{path} is missing: the checkpoint is incomplete", path, "missing") from None
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is damaged or foreign
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise DamagedCheckpointError(
            f"cannot read {path} ({type(exc).__name__}: {first}): the file is damaged or not a checkpoint file",
            path,
            "unreadable",
        ) from None

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


_REPORTED: set[str] = set()  # warnings already printed by this process (a checkpoint is looked at more than once)


def warn_once(message: str) -> None:
    """``warn``, once per process for the same message."""
    if message not in _REPORTED:
        _REPORTED.add(message)
        warn(message)


def read_config_file(path: str) -> dict[str, Any]:
    """A ``config.yaml`` as flat dotted keys -> values.

    Raises:
        CheckpointError: the file is missing or not a config written by these agents, naming it.
    """
    from omegaconf import OmegaConf  # the YAML reader of the command line; imported where a config file is read

    try:
        tree = OmegaConf.to_container(OmegaConf.load(path))
    except FileNotFoundError:
        raise DamagedCheckpointError(f"{path} is missing", path, "missing") from None
    except Exception as exc:  # noqa: BLE001 - any parse failure means the file is damaged
        raise DamagedCheckpointError(f"cannot read {path} ({type(exc).__name__}): the file is damaged", path,
                                     "unreadable") from None
    if not isinstance(tree, dict):
        raise DamagedCheckpointError(f"{path} is not a config file (expected a mapping of keys)", path, "unreadable")
    return flatten(tree)  # type: ignore[arg-type]
