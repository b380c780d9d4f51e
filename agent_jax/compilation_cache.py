"""The JAX agent's persistent compilation cache: every compiled executable kept on disk, so a second run of the same
configuration (a resumed run, the next run of a benchmark) loads its programs instead of compiling them again.

On by default (``agent.compilation_cache_dir=auto``): the directory is ``$JAX_COMPILATION_CACHE_DIR`` when set, else
``<user cache dir>/flashsac/jax`` (``$XDG_CACHE_HOME`` or ``~/.cache``); ``off`` turns it off and any other value is
the directory itself. At the start of a run the least recently used programs are removed (and logged) until the cache
is under ``agent.compilation_cache_max_mb`` (``trim_cache``). Every program is cached, however fast it compiled
(unless ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` / ``JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES`` say otherwise).
``CacheCounter`` counts the programs loaded from the cache and those compiled, for the run's summary line.

Several runs may share one directory at once (e.g. seeds launched together). The rule that keeps this safe: a run
holds a shared ``flock`` on ``<dir>/flashsac-cache.lock`` from the moment it enables the cache until its process exits
(``hold_cache``), and the trim runs only under the exclusive lock, taken without waiting (``trim_cache``). So a trim
happens only while no other run (nor this one) has the directory in use; otherwise it is skipped and that is logged
once, and a later run that starts alone trims. Without working file locks (no ``fcntl``, a file system that refuses
them, a lock file that cannot be created) the trim is skipped, with a warning naming the reason. The trim touches only
JAX's entries, regular files named ``<program>-<64 hex digits>-cache``, and their ``-atime`` companions; any other
file in the directory is left alone. Concurrent runs also read and write entries: JAX writes an entry in place, so
without a lock a run could load a program another run is still writing. JAX locks each entry read and write (its own
``<dir>/.lockfile``) only when it has a size cap, so the cap given to JAX is one never reached
(``jax_compilation_cache_max_size``, unless ``$JAX_COMPILATION_CACHE_MAX_SIZE`` sets it): JAX never evicts, the trim
above does. JAX's locked writes read each entry's ``-atime`` file: entries written without one get it from their
modification time; a foreign ``*-cache`` file in the directory (or no ``filelock`` package) leaves JAX's lock off,
with a warning naming it. Runs of other programs that use the same directory without these locks are not covered:
give them a directory of their own.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import stat
from collections.abc import Mapping, Sequence
from typing import NamedTuple

try:
    import fcntl
except ImportError:  # no flock on this platform: the trim is skipped (see the module docstring)
    fcntl = None

__all__ = ["CACHE_ENV", "LOCK_FILE", "CacheCounter", "Trim", "compute_path", "default_cache_dir",
           "enable_persistent_cache", "hold_cache", "jax_cache_env", "resolve_cache_dir", "trim_cache"]

CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
_MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
_MIN_SIZE_ENV = "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"
_MAX_SIZE_ENV = "JAX_COMPILATION_CACHE_MAX_SIZE"
_NO_EVICTION = 2**62  # a JAX size cap never reached: JAX locks each entry read and write but never evicts
LOCK_FILE = "flashsac-cache.lock"  # in the cache directory: shared by each run using it, exclusive for the trim
_ENTRY = re.compile(r".+-[0-9a-f]{64}-cache")  # a JAX cache entry: <program>-<sha256 of its cache key>-cache
_held: dict[str, int] = {}  # cache directory -> this process's lock file descriptor, shared-locked until exit

log = logging.getLogger(__name__)


def jax_cache_env(cache_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Environment variables for a process whose JAX keeps every compiled executable in ``cache_dir`` (no minimum
    compile time or entry size). Set them before JAX initialises, e.g. in a subprocess's environment."""
    return {CACHE_ENV: str(cache_dir), _MIN_TIME_ENV: "0", _MIN_SIZE_ENV: "0"}


def default_cache_dir(environ: Mapping[str, str] = os.environ) -> str:
    """``<user cache dir>/flashsac/jax``: ``$XDG_CACHE_HOME`` if set, else ``~/.cache``."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "flashsac", "jax")


def resolve_cache_dir(setting: str, environ: Mapping[str, str] = os.environ) -> tuple[str | None, str]:
    """The cache directory for ``agent.compilation_cache_dir`` (None: off) and why.

    Raises:
        ValueError: an empty setting.
    """
    if not setting:
        raise ValueError("agent.compilation_cache_dir must be auto, off or a directory, got ''")
    if setting == "off":
        return None, "agent.compilation_cache_dir=off"
    if setting != "auto":
        return os.path.abspath(os.path.expanduser(setting)), f"agent.compilation_cache_dir={setting}"
    if environ.get(CACHE_ENV):
        return os.path.abspath(environ[CACHE_ENV]), f"${CACHE_ENV}"
    return default_cache_dir(environ), "agent.compilation_cache_dir=auto: the user cache directory"


class Trim(NamedTuple):
    """What ``trim_cache`` did: entries removed, their bytes, and why it did nothing (None: it ran)."""

    removed: int
    removed_bytes: int
    skipped: str | None = None


def _open_lock(path: str) -> int:
    return os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)


def hold_cache(path: str) -> str | None:
    """Marks the cache directory ``path`` in use by this process until it exits: a shared ``flock`` on its
    ``LOCK_FILE`` (waits for a trim under way to finish), so no other run trims it meanwhile. Returns None, or why
    it cannot (then no run can trim it either: the trim needs the same lock)."""
    if path in _held:
        return None
    if fcntl is None:
        return "fcntl.flock is not available on this platform"
    try:
        fd = _open_lock(path)
    except OSError as exc:
        return f"cannot open {os.path.join(path, LOCK_FILE)}: {exc}"
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError as exc:
        os.close(fd)
        return f"cannot lock {os.path.join(path, LOCK_FILE)}: {exc}"
    _held[path] = fd
    return None


def trim_cache(path: str, max_bytes: int) -> Trim:
    """Removes JAX cache entries (regular files ``<program>-<64 hex digits>-cache`` and their ``-atime``
    companions) from ``path``, least recently used first (the later of access and modification time), until the
    entries total at most ``max_bytes``; other files are never touched.

    Runs only under the exclusive ``flock`` on ``<path>/LOCK_FILE``, taken without waiting: while any run (this
    process included, see ``hold_cache``) has the directory in use, or without working file locks, nothing is
    removed and ``Trim.skipped`` says why.
    """
    if fcntl is None:
        return Trim(0, 0, "fcntl.flock is not available on this platform")
    try:
        fd = _open_lock(path)
    except OSError as exc:
        return Trim(0, 0, f"cannot open {os.path.join(path, LOCK_FILE)}: {exc}")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return Trim(0, 0, "a run has the cache in use (another one, or this one)")
        except OSError as exc:
            return Trim(0, 0, f"cannot lock {os.path.join(path, LOCK_FILE)}: {exc}")
        return _remove_least_recently_used(path, max_bytes)
    finally:
        os.close(fd)  # releases the exclusive lock


def _remove_least_recently_used(path: str, max_bytes: int) -> Trim:
    entries = []
    for name in os.listdir(path):
        if not _ENTRY.fullmatch(name):
            continue
        full = os.path.join(path, name)
        try:
            st = os.lstat(full)
        except OSError:  # removed meanwhile by a program that does not take the lock
            continue
        if stat.S_ISREG(st.st_mode):
            used = max(st.st_atime, st.st_mtime)
            try:  # JAX rewrites the -atime file at each load
                used = max(used, os.stat(full[: -len("-cache")] + "-atime").st_mtime)
            except OSError:
                pass
            entries.append((used, st.st_size, full))
    total = sum(size for _, size, _ in entries)
    removed = removed_bytes = 0
    for _, size, full in sorted(entries):
        if total <= max_bytes:
            break
        for victim in (full, full[: -len("-cache")] + "-atime"):
            try:
                os.remove(victim)
            except FileNotFoundError:
                pass
        total -= size
        removed += 1
        removed_bytes += size
    return Trim(removed, removed_bytes)


def _prepare_entry_lock(path: str) -> str | None:
    """Readies ``path`` for JAX's per-entry lock (see the module docstring): every JAX entry gets its ``-atime`` file
    (written from its modification time where missing; existing files are kept). Returns None, or why JAX's lock
    must stay off: no ``filelock`` package, a ``*-cache`` name that is not a JAX entry, an unreadable directory."""
    if importlib.util.find_spec("filelock") is None:
        return "the filelock package is not installed: pip install filelock"
    try:
        names = set(os.listdir(path))
        for name in sorted(n for n in names if n.endswith("-cache")):
            full = os.path.join(path, name)
            if not (_ENTRY.fullmatch(name) and stat.S_ISREG(os.lstat(full).st_mode)):
                return f"{full} is not a JAX cache entry: move it out of the directory"
            atime = name[: -len("-cache")] + "-atime"
            if atime not in names:
                st = os.stat(full)
                try:
                    with open(os.path.join(path, atime), "xb") as f:
                        f.write(st.st_mtime_ns.to_bytes(8, "little"))
                except FileExistsError:  # written meanwhile by JAX
                    continue
                os.utime(os.path.join(path, atime), ns=(st.st_atime_ns, st.st_mtime_ns))  # not "used now" to the trim
    except OSError as exc:
        return f"cannot prepare {path}: {exc}"
    return None


class CacheCounter:
    """Counts, from JAX's monitoring events, the programs loaded from the persistent cache (``hits``) and those
    compiled because the cache had none (``misses``), from ``start()`` on."""

    _instance: CacheCounter | None = None

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0

    @classmethod
    def start(cls) -> CacheCounter:
        """The process's counter (registered with ``jax.monitoring`` once)."""
        if cls._instance is None:
            import jax

            counter = cls()

            def listen(event: str, **_: object) -> None:
                if event == "/jax/compilation_cache/cache_hits":
                    counter.hits += 1
                elif event == "/jax/compilation_cache/cache_misses":
                    counter.misses += 1

            jax.monitoring.register_event_listener(listen)
            cls._instance = counter
        return cls._instance

    def summary(self) -> str:
        import jax

        cache_dir = jax.config.jax_compilation_cache_dir
        if not cache_dir or not jax.config.jax_enable_compilation_cache:
            return "jax compilation cache: off"
        return (f"jax compilation cache {cache_dir}: {self.hits} programs loaded from the cache, {self.misses} "
                "compiled and stored")


def enable_persistent_cache(setting: str, max_mb: int) -> str:
    """Points JAX's persistent compilation cache at ``resolve_cache_dir(setting)`` with a ``max_mb`` MiB cap (call
    before the first compilation) and starts the ``CacheCounter``; returns a line saying where and why.

    A directory that cannot be created turns the cache off once, with a logged warning naming it (the run goes on
    compiling as without a cache).
    """
    import jax

    path, why = resolve_cache_dir(setting)
    if path is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return f"jax compilation cache off ({why})"
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        log.warning("jax compilation cache off: cannot create %s (%s); set agent.compilation_cache_dir=<writable "
                    "directory> or off", path, exc)
        jax.config.update("jax_enable_compilation_cache", False)
        return f"jax compilation cache off (cannot create {path}: {exc})"
    trim = trim_cache(path, int(max_mb) * 2**20)
    if trim.removed:
        log.warning("jax compilation cache %s: removed the %d least recently used programs (%.1f MiB) to stay under "
                    "agent.compilation_cache_max_mb=%d", path, trim.removed, trim.removed_bytes / 2**20, max_mb)
    elif trim.skipped:
        log_skip = log.info if trim.skipped.startswith("a run has") else log.warning
        log_skip("jax compilation cache %s: not trimmed to agent.compilation_cache_max_mb=%d (%s); a run that starts "
                 "alone trims it", path, max_mb, trim.skipped)
    not_held = hold_cache(path)
    if not_held and not_held != trim.skipped:
        log.warning("jax compilation cache %s: cannot mark it in use (%s); no run can trim it meanwhile", path,
                    not_held)
    if _MAX_SIZE_ENV not in os.environ:
        no_entry_lock = _prepare_entry_lock(path)
        if no_entry_lock:
            log.warning("jax compilation cache %s: JAX's per-entry lock is off (%s); a run sharing the directory at "
                        "the same time could load a program another one is still writing", path, no_entry_lock)
        jax.config.update("jax_compilation_cache_max_size", -1 if no_entry_lock else _NO_EVICTION)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", path)
    if _MIN_TIME_ENV not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if _MIN_SIZE_ENV not in os.environ:
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    CacheCounter.start()
    trimmed = (f"; removed {trim.removed} least recently used programs" if trim.removed
               else f"; not trimmed: {trim.skipped}" if trim.skipped else "")
    return f"jax compilation cache at {path} (cap {max_mb} MiB{trimmed}; {why})"


def compute_path(device: object, mesh_devices: Sequence[object] = ()) -> str:
    """One line naming how the JAX agent computes and why (the torch agent's ``compute_path`` counterpart): its update
    is one jitted XLA program, compiled by the first update (no compile mode to choose; with device replay rows on a
    background thread from the start of training, ``FlashSACAgent.precompile_step``), and whether compiled
    executables persist on disk (``agent.compilation_cache_dir``, ``enable_persistent_cache``) so that a later run of
    the same configuration loads them instead of compiling again. ``mesh_devices``: every device of a data-parallel
    update (``num_devices`` > 1), all named."""
    import jax

    cache_dir = jax.config.jax_compilation_cache_dir if jax.config.jax_enable_compilation_cache else None
    cache = (f"persistent compilation cache at {cache_dir} (a later run of this configuration loads its executables)"
             if cache_dir else "no persistent compilation cache (agent.compilation_cache_dir=off)")
    if len(mesh_devices) > 1:
        processes = len({getattr(d, "process_index", 0) for d in mesh_devices})
        device = (f"{len(mesh_devices)} devices of {processes} process{'es' if processes > 1 else ''} "
                  f"(data parallel, batch split along the mesh): {', '.join(map(str, mesh_devices))}")
    return (f"jax {jax.__version__} on {device}: jit (XLA), compiled by the first update; {cache}. Why: JAX always "
            "jits the update; agent.use_compile, agent.compile_mode and agent.use_cuda_graph do not apply")
