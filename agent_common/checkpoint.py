"""Checkpoint files and directories: atomic writes (temp file in the same directory, fsync, os.replace), the
``<run>/checkpoints/step<N>/`` layout, finding the newest complete checkpoint by scanning, recovering from an
interrupted commit, pruning old checkpoints, and errors that name the file and say what to do.

Integrity: the last file written into a checkpoint is its manifest ``COMPLETE``, which is also its commit marker. It
holds one ``<sha256>  <relative path>`` line per file of the checkpoint (the format of ``sha256sum``, so
``cd <run>/checkpoints/step<N> && sha256sum -c COMPLETE`` checks it by hand). Loading verifies every file against it
before anything is read (``verify_checkpoint``); a checkpoint that fails is moved to
``<run>/checkpoints/damaged/step<N>-<reason>/`` (never deleted) and the newest one that verifies is used instead,
with one line naming the file and what failed (``select_checkpoint``). A checkpoint written before manifests existed
holds ``ok`` in ``COMPLETE``; it loads with a warning that it cannot be verified.

Decision order when a path is loaded: another program's layout (``detect_foreign_layout``: named, with the
conversion command; never moved) -> a checkpoint of this project without a manifest (warning) -> the integrity
check.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import pickle
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from agent_common.upstream_layout import describe_foreign_checkpoint, is_upstream_checkpoint

__all__ = [
    "AGENT_DIR",
    "BUFFER_FILE",
    "CONFIG_FILE",
    "LOOP_STATE_FILE",
    "CheckpointError",
    "DamagedCheckpointError",
    "DiskFullError",
    "ForeignCheckpointError",
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
    "continue_lines",
    "default_run_dir",
    "converter_command",
    "detect_foreign_layout",
    "directory_size",
    "file_sha256",
    "holds_run",
    "is_disk_full",
    "latest_checkpoint",
    "load_pickle",
    "no_checkpoint_message",
    "non_finite_message",
    "prune_checkpoints",
    "read_checkpoint_file",
    "recover_checkpoints",
    "resolve_checkpoint",
    "run_dir_of_checkpoint",
    "run_dir_taken_message",
    "load_newest",
    "select_checkpoint",
    "set_aside",
    "set_aside_incomplete_run",
    "set_aside_newer",
    "set_train_program",
    "train_command",
    "verify_checkpoint",
    "warn",
    "write_checkpoint",
    "write_manifest",
]

LATEST_FILE = "latest"  # text file in <run>/checkpoints naming the newest checkpoint (for people; never read)
COMPLETE_FILE = "COMPLETE"  # written last inside a checkpoint directory: its manifest and its commit marker
LEGACY_MARKER = "ok"  # the whole content of COMPLETE in checkpoints written before manifests existed
DAMAGED_DIR = "damaged"  # <run>/checkpoints/damaged/step<N>-<reason>: checkpoints that failed verification
SET_ASIDE_DIR = "set_aside"  # <run>/checkpoints/set_aside/step<N>: newer than the checkpoint a resume continues from
INCOMPLETE_RUN_DIR = "incomplete"  # <run>/incomplete-<k>/: a run without a complete checkpoint, started over
AGENT_DIR = "agent"  # <step dir>/agent/ holds the framework agent's files
LOOP_STATE_FILE = "loop_state.pkl"  # the training loop's state (counters, RNGs, env states, normaliser)
BUFFER_FILE = "replay_buffer.pkl"  # the replay buffer's rows (when the checkpoint has them)
CONFIG_FILE = "config.yaml"  # the resolved config, in the run directory and in every checkpoint
RUN_FILES = (CONFIG_FILE, "eval.csv", "checkpoints", "tb")  # any of these means a directory holds a run
_STEP_DIR = re.compile(r"^step(\d+)(\.tmp|\.old)?$")
_AGENT_MARKERS = {"torch": "actor.pt", "jax": "actor.pkl"}
_STALE_TMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # what _atomic_file's mkstemp names look like
_MANIFEST_LINE = re.compile(r"^([0-9a-f]{64})  (\S.*)$")


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
        raise DamagedCheckpointError(f"{path} is missing: the checkpoint is incomplete", path, "missing") from None
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is damaged or foreign
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise DamagedCheckpointError(
            f"cannot read {path} ({type(exc).__name__}: {first}): the file is damaged or not a checkpoint file",
            path,
            "unreadable",
        ) from None


def checkpoint_dir(run_dir: str, env_step: int) -> str:
    """``<run>/checkpoints/step<env_step>``."""
    return os.path.join(run_dir, "checkpoints", f"step{env_step}")


def checkpoint_step(path: str) -> int:
    """The env step of a ``step<N>`` checkpoint directory (-1 if the name is not one)."""
    match = _STEP_DIR.match(os.path.basename(os.path.normpath(path)))
    return int(match.group(1)) if match else -1


def commit_checkpoint_dir(tmp_dir: str, final_dir: str) -> None:
    """Publishes a fully written checkpoint directory: manifest (``write_manifest``, the commit marker), rename into
    place, update ``latest``.

    An existing ``final_dir`` is first renamed to ``<final>.old`` and deleted after the new one is in place; a
    crash in between leaves complete ``.tmp`` / ``.old`` directories that ``recover_checkpoints`` puts back.

    Args:
        tmp_dir: directory holding the complete checkpoint (each file written with ``atomic_write``).
        final_dir: ``checkpoint_dir(run, step)``.
    """
    write_manifest(tmp_dir)
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
    ``.tmp`` / ``.old`` directory is a leftover (half-written, or superseded) and is deleted, and so are the
    temporary files (``.<name>.<random>.tmp``) of atomic writes a kill interrupted in the run directory and in
    ``checkpoints/``.
    """
    root = os.path.join(run_dir, "checkpoints")
    done = []
    for directory in (run_dir, root):  # temporary files of atomic writes that a kill interrupted
        for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
            path = os.path.join(directory, name)
            if _STALE_TMP.match(name) and os.path.isfile(path):
                os.unlink(path)
                done.append(f"removed the stale temporary file {path} left by an interrupted write")
    if not os.path.isdir(root):
        return done
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
    foreign = detect_foreign_layout(path)
    if foreign is not None:
        raise ForeignCheckpointError(f"agent_load_path={path}: {foreign}")
    found = complete_checkpoints(path)
    if found:
        return found
    if os.path.basename(os.path.normpath(path)).startswith("step"):
        run = os.path.dirname(os.path.dirname(os.path.normpath(path)))
        raise NoCheckpointError(f"agent_load_path={path}: the checkpoint is incomplete (no {COMPLETE_FILE} manifest: "
                                "its save did not finish, or the manifest was deleted); resume from the run directory "
                                f"to use its newest complete checkpoint: {train_command(f'agent_load_path={run}')}")
    raise NoCheckpointError(no_checkpoint_message(path))


def no_checkpoint_message(run_dir: str, start_over: str | None = None) -> str:
    """What a run directory without a complete checkpoint holds, and the next commands: start it over in place
    (``overwrite_incomplete=true``, which moves its files aside first), start a new run elsewhere, or remove it.

    Args:
        run_dir: the run directory.
        start_over: the exact command that starts the run over with its own config (``agent_common.config`` builds
            it from the run's ``config.yaml``); None: a generic one.
    """
    root = os.path.join(run_dir, "checkpoints")
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    interrupted = [n for n in names if _STEP_DIR.match(n) and n.endswith(".tmp")]
    what = (f"the save of {', '.join(interrupted)} was interrupted" if interrupted
            else "the run stopped before its first checkpoint")
    start_over = start_over or train_command(f"save_path={run_dir}", "overwrite_incomplete=true",
                                             "<the run's other overrides>")
    return (f"agent_load_path={run_dir}: no complete checkpoint in {root} ({what}), so there is nothing to resume. "
            f"Start the run over in place: {start_over} (its files are first moved to "
            f"{os.path.join(run_dir, INCOMPLETE_RUN_DIR)}-<k>/, nothing is deleted); or start a new run elsewhere "
            f"with save_path=<new dir>; or remove the directory yourself (rm -r {run_dir})")


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
    returns it: ``select_checkpoint(path, load)``.

    Raises:
        CheckpointError: no usable checkpoint; the message names the file and says what to do.
    """
    return select_checkpoint(path, load)


# ---------------------------------------------------------------------------------------------------------------
# integrity: manifests, verification, damaged checkpoints moved aside
# ---------------------------------------------------------------------------------------------------------------

_VERIFIED: dict[str, tuple[Any, ...]] = {}  # realpath -> (manifest entries, file stats) of a verified checkpoint
_REPORTED: set[str] = set()  # warnings already printed by this process (a checkpoint is looked at more than once)
_LOADED: list[str] = []  # what select_checkpoint decided in this process, for non_finite_message
_TRAIN_PROGRAM = ["python -m agent_<torch|jax>.train"]


def set_train_program(program: str) -> None:
    """The program the printed next commands start with (``python -m agent_torch.train``); set by the CLI."""
    _TRAIN_PROGRAM[0] = program


def train_command(*overrides: str) -> str:
    """``<program> --overrides a=b --overrides c=d``: a command the user can run as printed."""
    return " ".join([_TRAIN_PROGRAM[0], *(f"--overrides {item}" for item in overrides)])


def _warn_once(message: str) -> None:
    if message not in _REPORTED:
        _REPORTED.add(message)
        warn(message)


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's bytes, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _checkpoint_files(directory: str) -> list[str]:
    """Every file under ``directory`` except its manifest, as sorted ``/``-separated relative paths."""
    out = []
    for root, _, files in os.walk(directory):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), directory).replace(os.sep, "/")
            if rel != COMPLETE_FILE:
                out.append(rel)
    return sorted(out)


def write_manifest(directory: str) -> None:
    """Writes ``<directory>/COMPLETE`` (atomically, last): ``<sha256>  <relative path>`` for every other file."""
    lines = [f"{file_sha256(os.path.join(directory, rel))}  {rel}\n" for rel in _checkpoint_files(directory)]
    atomic_write_text(os.path.join(directory, COMPLETE_FILE), "".join(lines))


def read_manifest(ckpt: str) -> dict[str, str] | None:
    """The manifest of a checkpoint: relative path -> SHA-256; None for a checkpoint written before manifests.

    Raises:
        DamagedCheckpointError: no manifest, or one that cannot be read or parsed.
    """
    path = os.path.join(ckpt, COMPLETE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise DamagedCheckpointError(f"{ckpt} has no manifest ({COMPLETE_FILE}): its save did not finish, or the "
                                     "manifest was deleted", ckpt, "incomplete") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DamagedCheckpointError(f"cannot read the manifest {path} ({type(exc).__name__})", path,
                                     "manifest") from None
    if text.strip() == LEGACY_MARKER:
        return None
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _MANIFEST_LINE.match(line)
        rel = match.group(2) if match else ""
        if match is None or rel in entries or rel.startswith("/") or ".." in rel.split("/"):
            raise DamagedCheckpointError(f"the manifest {path} is damaged (line {number} is not "
                                         "'<sha256>  <file>')", path, "manifest")
        entries[rel] = match.group(1)
    if not entries or not text.endswith("\n"):
        raise DamagedCheckpointError(f"the manifest {path} is damaged (truncated)", path, "manifest")
    return entries


def _read_on_load(rel: str) -> bool:
    """Whether the loaders read a file at this place of a checkpoint (so it must be covered by the manifest)."""
    top = rel.split("/")[0]
    return top in (AGENT_DIR, "ranks") or os.path.basename(rel) in (CONFIG_FILE, LOOP_STATE_FILE, BUFFER_FILE)


def verify_checkpoint(ckpt: str) -> bool:
    """Checks every file of a checkpoint against its manifest (SHA-256) before anything of it is read.

    A checkpoint verified once by this process is not hashed again while its files keep their sizes and times.

    Returns:
        True when verified; False for a checkpoint written before manifests (nothing to verify against).

    Raises:
        DamagedCheckpointError: a file missing, unreadable, changed, or read on load but not in the manifest; the
            message names the file and what failed.
    """
    entries = read_manifest(ckpt)
    if entries is None:
        return False
    manifest = os.path.join(ckpt, COMPLETE_FILE)
    stats = []
    for rel in sorted(entries):
        full = os.path.join(ckpt, *rel.split("/"))
        try:
            st = os.stat(full)
        except OSError:
            raise DamagedCheckpointError(f"{full} is missing (the manifest {manifest} lists it)", full,
                                         "missing") from None
        stats.append((rel, st.st_size, st.st_mtime_ns))
    extra = [rel for rel in _checkpoint_files(ckpt) if rel not in entries]
    for rel in extra:
        full = os.path.join(ckpt, *rel.split("/"))
        if _read_on_load(rel):
            raise DamagedCheckpointError(f"{full} is not listed in the manifest {manifest} (the manifest is damaged "
                                         "or the file was added after the checkpoint was written)", full, "manifest")
        _warn_once(f"{full} is not part of the checkpoint (not in its manifest); it is ignored")
    key = os.path.realpath(ckpt)
    signature = (tuple(sorted(entries.items())), tuple(stats))
    if _VERIFIED.get(key) == signature:
        return True
    for rel, digest in sorted(entries.items()):
        full = os.path.join(ckpt, *rel.split("/"))
        try:
            actual = file_sha256(full)
        except OSError as exc:
            raise DamagedCheckpointError(f"cannot read {full} ({exc.strerror or exc})", full, "unreadable") from None
        if actual != digest:
            raise DamagedCheckpointError(
                f"{full} does not match its SHA-256 in the manifest {manifest} ({actual[:12]}... on disk, "
                f"{digest[:12]}... when written): the file was damaged or changed after the checkpoint was written",
                full,
                "checksum",
            )
    _VERIFIED[key] = signature
    return True


def _upstream_step(path: str) -> bool:
    """An upstream FlashSAC checkpoint folder (``agent_common.upstream_layout``) holding none of this project's
    checkpoint files."""
    if any(os.path.exists(os.path.join(path, name)) for name in (COMPLETE_FILE, LOOP_STATE_FILE, AGENT_DIR)):
        return False
    return is_upstream_checkpoint(path)


def detect_foreign_layout(path: str) -> str | None:
    """Whether ``path`` holds another program's checkpoint rather than this project's, checked first by every
    loader (a folder this project did not write is never moved or changed).

    Recognised: upstream FlashSAC's checkpoint (``actor.pt``, ``critic.pt``, ``target_critic.pt``, ``temperature.pt``,
    ``agent_state.pt`` as its ``train.py`` writes them into ``<save_path>/step<N>/``) and a directory holding such
    ``step<N>`` folders (directly, as upstream's run directory, or in ``checkpoints/``).

    Returns:
        None, or one sentence naming the layout and the conversion command.
    """
    if not os.path.isdir(path):
        return None
    if _upstream_step(path):
        step, what = path, "an upstream FlashSAC checkpoint (actor.pt, critic.pt, target_critic.pt, temperature.pt)"
    else:
        steps = []
        for folder in (path, os.path.join(path, "checkpoints")):
            for name in os.listdir(folder) if os.path.isdir(folder) else []:
                child = os.path.join(folder, name)
                if _STEP_DIR.match(name) and not name.endswith((".tmp", ".old")) and _upstream_step(child):
                    steps.append((checkpoint_step(child), child))
        if not steps:
            return None
        step = max(steps)[1]
        what = f"an upstream FlashSAC run directory (step<N> folders of upstream checkpoints; newest {step})"
    return (f"{path} holds {what}: another program's layout, not a checkpoint of this project (nothing was "
            f"interrupted, and nothing there is changed). Convert it first: python -m agent_interop.convert "
            f"upstream-to-torch {step} <out dir> (or upstream-to-jax for the JAX agent), then use <out dir>")


def _may_move() -> bool:
    """Only one process moves checkpoints: replica 0 of a data-parallel launch (``RANK`` unset or 0)."""
    return os.environ.get("RANK", "0") in ("", "0")


def set_aside(ckpt: str, reason: str, into: str = DAMAGED_DIR) -> str | None:
    """Moves a checkpoint of a run out of the way, never deleting it: ``<run>/checkpoints/<into>/step<N>-<reason>``
    (``-<k>`` added if that exists). Only ``step<N>`` directories inside a ``checkpoints/`` directory are moved, by
    replica 0 alone, and never a folder in another program's layout.

    Returns:
        Where it went, or None when it was left in place.
    """
    ckpt = os.path.normpath(ckpt)
    parent = os.path.dirname(ckpt)
    if (os.path.basename(parent) != "checkpoints" or checkpoint_step(ckpt) < 0 or not os.path.isdir(ckpt)
            or not _may_move() or detect_foreign_layout(ckpt) is not None):
        return None
    root = os.path.join(parent, into)
    os.makedirs(root, exist_ok=True)
    base = os.path.join(root, os.path.basename(ckpt) + (f"-{reason}" if reason else ""))
    dest, k = base, 1
    while os.path.exists(dest):
        dest, k = f"{base}-{k}", k + 1
    os.replace(ckpt, dest)
    _fsync_dir(parent)
    _VERIFIED.pop(os.path.realpath(ckpt), None)
    return dest


def set_aside_newer(run_dir: str, env_step: int) -> list[str]:
    """Moves the run's complete checkpoints newer than ``env_step`` (the one a resume continues from) to
    ``<run>/checkpoints/set_aside/``, so the continuation never overwrites them; one line per move."""
    lines = []
    for newer in complete_checkpoints(run_dir):
        if checkpoint_step(newer) > env_step:
            dest = set_aside(newer, "", SET_ASIDE_DIR)
            if dest is not None:
                lines.append(f"moved {newer} to {dest}: it is newer than the checkpoint the run continues from "
                             "(delete it by hand when it is not needed)")
    return lines


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
    _fsync_dir(run_dir)
    return f"overwrite_incomplete=true: moved the incomplete run's files ({', '.join(entries)}) to {dest}"


def _newer_incomplete(run_dir: str, newest: int) -> list[str]:
    """``step<N>`` directories of a run without a manifest (not ``.tmp`` / ``.old``) that hold this project's files
    and are newer than step ``newest``: checkpoints whose manifest was lost."""
    root = os.path.join(run_dir, "checkpoints")
    out = []
    for name in os.listdir(root) if os.path.isdir(root) else []:
        path = os.path.join(root, name)
        match = _STEP_DIR.match(name)
        if (match and match.group(2) is None and not _is_complete(path) and int(match.group(1)) > newest
                and any(os.path.exists(os.path.join(path, f)) for f in (AGENT_DIR, LOOP_STATE_FILE, CONFIG_FILE))):
            out.append(path)
    return sorted(out, key=checkpoint_step, reverse=True)


def select_checkpoint(path: str, use: Callable[[str], Any] | None = None) -> str:
    """The newest usable checkpoint at ``path`` (a checkpoint directory, or a run directory: its complete
    checkpoints newest first), after ``use(ckpt)`` succeeded on it (e.g. restoring it).

    Decision order: another program's layout (``ForeignCheckpointError`` with the conversion command, nothing
    moved) -> a checkpoint without a manifest (loaded with a warning that it cannot be verified) -> the integrity
    check (``verify_checkpoint``) before ``use`` reads anything. A checkpoint of a run directory that is damaged (a
    file missing, unreadable or not matching the manifest, also found by ``use`` for one without a manifest) is
    moved to ``<run>/checkpoints/damaged/step<N>-<reason>/`` and the next older one is tried, with one warning line
    naming the file and what failed; one that is intact but not usable (``use`` raised another ``CheckpointError``)
    is skipped with a warning and left in place.

    Raises:
        ForeignCheckpointError: ``path`` is in another program's layout.
        CheckpointError: nothing usable; the message names what failed and the next command.
    """
    candidates = candidate_checkpoints(path)
    single = len(candidates) == 1 and os.path.normpath(candidates[0]) == os.path.normpath(path)
    run_dir = os.path.dirname(os.path.dirname(os.path.normpath(candidates[0])))
    failures: list[str] = []
    pending = [] if single else _newer_incomplete(run_dir, checkpoint_step(candidates[0]))
    for lost in pending:  # a step<N> newer than every complete one whose manifest is gone
        moved = set_aside(lost, "incomplete")
        _warn_once(f"skipping {lost}: it has no manifest ({COMPLETE_FILE}; deleted, or its save did not finish)"
                   + (f"; moved to {moved}" if moved else ""))
    for index, ckpt in enumerate(candidates):
        try:
            verified = verify_checkpoint(ckpt)
            if not verified:
                _warn_once(f"{ckpt} was written before checkpoints had manifests: its files cannot be verified "
                           "(the next checkpoint of this run will have one)")
            if use is not None:
                use(ckpt)
            _LOADED.append(f"{ckpt} ({'verified' if verified else 'not verified: no manifest'})")
            return ckpt
        except DamagedCheckpointError as exc:
            inside = os.path.realpath(exc.file).startswith(os.path.realpath(ckpt))
            moved = set_aside(ckpt, exc.reason) if inside and not single else None
            line = f"{exc}" + (f"; the checkpoint was moved to {moved}" if moved else "")
        except ForeignCheckpointError:
            raise
        except CheckpointError as exc:
            line = str(exc)
        failures.append(line if single else f"{ckpt}: {line}")
        _LOADED.append(f"skipped {ckpt}: {line}")
        if index + 1 < len(candidates):
            _warn_once(f"skipping the checkpoint {ckpt}: {line}; falling back to {candidates[index + 1]}")
    if single:
        raise CheckpointError(f"{failures[0]}. Resume from the run directory instead (it uses the newest checkpoint "
                              f"that verifies): {train_command(f'agent_load_path={run_dir}')}, or start a new run")
    raise CheckpointError(
        f"no usable checkpoint under {path}: " + " | ".join(failures)
        + f". Damaged checkpoints are kept in {os.path.join(run_dir, 'checkpoints', DAMAGED_DIR)}. Start the run over "
        f"in place with overwrite_incomplete=true and its overrides, or start a new run elsewhere (save_path=<new dir>)"
    )


def non_finite_message(error: BaseException, run_dir: str, learning_rate_peak: float, normalize_reward: bool) -> str:
    """The message for a non-finite loss, reward or observation: the error, its likely causes, the checkpoint the
    run started from (and whether it was verified) and the newest checkpoint of the run that verifies."""
    last_good = None
    for ckpt in complete_checkpoints(run_dir):
        try:
            verified = verify_checkpoint(ckpt)
        except CheckpointError:
            continue
        last_good = ckpt + ("" if verified else " (written before manifests: not verified)")
        break
    loaded = f"; this process loaded: {' | '.join(dict.fromkeys(_LOADED))}" if _LOADED else ""
    causes = [
        f"a learning rate too high for this task (agent.learning_rate_peak={learning_rate_peak:g})",
        f"the reward scale (agent.normalize_reward={str(normalize_reward).lower()}; rewards of the environment far "
        "larger than the support)",
        "a checkpoint that could not be verified (written before manifests, or damaged) loaded into the run",
    ]
    resume = (f"resume from it with {train_command(f'agent_load_path={run_dir}')} after changing the cause"
              if last_good else "no checkpoint of this run verifies; start a new run")
    return (f"{error}. Likely causes: " + "; ".join(causes) + loaded
            + f". Last good checkpoint: {last_good}; {resume}")


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


def continue_lines(status: str, run_dir: str, num_env_steps: int) -> list[str]:
    """The summary lines that say how to continue a run: resume an interrupted one, extend a completed one (a
    resume with a larger ``num_env_steps``; the run's schedule is kept unless ``rederive_schedule_on_resume``)."""
    if status != "completed":
        return [f"  resume:     {train_command(f'agent_load_path={run_dir}')}"]
    return [f"  extend:     {train_command(f'agent_load_path={run_dir}', f'num_env_steps={2 * num_env_steps}')}"
            "  (any larger num_env_steps)"]
