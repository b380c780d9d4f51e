"""Integrity: the last file written into a checkpoint is its manifest ``COMPLETE``, which is also its commit marker.
It holds one ``<sha256>  <relative path>`` line per file of the checkpoint (the format of ``sha256sum``, so
``cd <run>/checkpoints/step<N> && sha256sum -c COMPLETE`` checks it by hand). Loading verifies every file against it
before anything is read (``verify_checkpoint``). A checkpoint written before manifests existed holds ``ok`` in
``COMPLETE``; it loads with a warning that it cannot be verified."""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

from agent_common.runs.files import (
    AGENT_DIR,
    BUFFER_FILE,
    CONFIG_FILE,
    LOOP_STATE_FILE,
    DamagedCheckpointError,
    atomic_write_text,
    warn_once,
)

__all__ = ["COMPLETE_FILE", "LEGACY_MARKER", "file_sha256", "forget", "read_manifest", "verify_checkpoint",
           "write_manifest"]

COMPLETE_FILE = "COMPLETE"  # written last inside a checkpoint directory: its manifest and its commit marker

LEGACY_MARKER = "ok"  # the whole content of COMPLETE in checkpoints written before manifests existed

_MANIFEST_LINE = re.compile(r"^([0-9a-f]{64})  (\S.*)$")

_VERIFIED: dict[str, tuple[Any, ...]] = {}  # realpath -> (manifest entries, file stats) of a verified checkpoint

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
        warn_once(f"{full} is not part of the checkpoint (not in its manifest); it is ignored")
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


def forget(ckpt: str) -> None:
    """Drops what this process remembers of a verified checkpoint (it was moved)."""
    _VERIFIED.pop(os.path.realpath(ckpt), None)
