"""The checkpoints of a run: the ``<run>/checkpoints/step<N>/`` layout, writing one atomically (``write_checkpoint``:
a ``.tmp`` directory, its manifest, a rename), finding the newest complete one by scanning, recovering from an
interrupted commit, pruning old ones, setting damaged or abandoned ones aside (never deleting them) and choosing the
one to load (``select_checkpoint``).

Decision order when a path is loaded: another program's layout (``detect_foreign_layout``: named, with the
conversion command; never moved) -> a checkpoint of this project without a manifest (warning) -> the integrity
check (``agent_common.runs.manifest``). A checkpoint that fails it is moved to
``<run>/checkpoints/damaged/step<N>-<reason>/`` and the newest one that verifies is used instead, with one line
naming the file and what failed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from typing import Any

from agent_common.runs.commands import train_command
from agent_common.runs.files import (
    AGENT_DIR,
    CONFIG_FILE,
    INCOMPLETE_RUN_DIR,
    LOOP_STATE_FILE,
    CheckpointError,
    DamagedCheckpointError,
    DiskFullError,
    ForeignCheckpointError,
    NoCheckpointError,
    atomic_write_text,
    fsync_dir,
    is_disk_full,
    warn_once,
)
from agent_common.runs.manifest import COMPLETE_FILE, forget, verify_checkpoint, write_manifest
from agent_common.runs.upstream_layout import describe_foreign_checkpoint, is_upstream_checkpoint

__all__ = [
    "candidate_checkpoints",
    "checkpoint_dir",
    "checkpoint_framework",
    "checkpoint_step",
    "commit_checkpoint_dir",
    "complete_checkpoints",
    "detect_foreign_layout",
    "latest_checkpoint",
    "load_newest",
    "no_checkpoint_message",
    "non_finite_message",
    "prune_checkpoints",
    "recover_checkpoints",
    "resolve_checkpoint",
    "select_checkpoint",
    "set_aside",
    "set_aside_newer",
    "write_checkpoint",
]

LATEST_FILE = "latest"  # text file in <run>/checkpoints naming the newest checkpoint (for people; never read)

DAMAGED_DIR = "damaged"  # <run>/checkpoints/damaged/step<N>-<reason>: checkpoints that failed verification

SET_ASIDE_DIR = "set_aside"  # <run>/checkpoints/set_aside/step<N>: newer than the checkpoint a resume continues from

_STEP_DIR = re.compile(r"^step(\d+)(\.tmp|\.old)?$")

_AGENT_MARKERS = {"torch": "actor.pt", "jax": "actor.pkl"}

_STALE_TMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # what _atomic_file's mkstemp names look like

_LOADED: list[str] = []  # what select_checkpoint decided in this process, for non_finite_message

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
    fsync_dir(parent)
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
        fsync_dir(root)
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
            such, with the conversion command; ``agent_common.runs.upstream_layout``).
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

def _upstream_step(path: str) -> bool:
    """An upstream FlashSAC checkpoint folder (``agent_common.runs.upstream_layout``) holding none of this project's
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
    fsync_dir(parent)
    forget(ckpt)
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
        warn_once(f"skipping {lost}: it has no manifest ({COMPLETE_FILE}; deleted, or its save did not finish)"
                   + (f"; moved to {moved}" if moved else ""))
    for index, ckpt in enumerate(candidates):
        try:
            verified = verify_checkpoint(ckpt)
            if not verified:
                warn_once(f"{ckpt} was written before checkpoints had manifests: its files cannot be verified "
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
            warn_once(f"skipping the checkpoint {ckpt}: {line}; falling back to {candidates[index + 1]}")
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
