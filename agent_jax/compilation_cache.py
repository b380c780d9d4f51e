"""The JAX agent's persistent compilation cache: every compiled executable kept on disk, so a second run of the same
configuration (a resumed run, the next run of a benchmark) loads its programs instead of compiling them again.

On by default (``agent.compilation_cache_dir=auto``): the directory is ``$JAX_COMPILATION_CACHE_DIR`` when set, else
``<user cache dir>/flashsac/jax`` (``$XDG_CACHE_HOME`` or ``~/.cache``); ``off`` turns it off and any other value is
the directory itself. At the start of a run the least recently used programs are removed (and logged) until the cache
is under ``agent.compilation_cache_max_mb`` (``trim_cache``; only JAX's own entry files are touched). Every program
is cached, however fast it compiled (unless ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` /
``JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES`` say otherwise).
``CacheCounter`` counts the programs loaded from the cache and those compiled, for the run's summary line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

__all__ = ["CACHE_ENV", "CacheCounter", "compute_path", "default_cache_dir", "enable_persistent_cache",
           "jax_cache_env", "resolve_cache_dir", "trim_cache"]

CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
_MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
_MIN_SIZE_ENV = "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"

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


def trim_cache(path: str, max_bytes: int) -> tuple[int, int]:
    """Removes JAX cache entries (``*-cache`` files and their ``*-atime`` companions) from ``path``, least recently
    used first (the later of access and modification time), until the entries total at most ``max_bytes``; other
    files are never touched. Returns (entries removed, bytes removed)."""
    entries = []
    for name in os.listdir(path):
        if not name.endswith("-cache"):
            continue
        full = os.path.join(path, name)
        try:
            st = os.stat(full)
        except OSError:  # removed meanwhile by another process
            continue
        entries.append((max(st.st_atime, st.st_mtime), st.st_size, full))
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
    return removed, removed_bytes


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
    removed, removed_bytes = trim_cache(path, int(max_mb) * 2**20)
    if removed:
        log.warning("jax compilation cache %s: removed the %d least recently used programs (%.1f MiB) to stay under "
                    "agent.compilation_cache_max_mb=%d", path, removed, removed_bytes / 2**20, max_mb)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", path)
    if _MIN_TIME_ENV not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if _MIN_SIZE_ENV not in os.environ:
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    CacheCounter.start()
    trimmed = f"; removed {removed} least recently used programs" if removed else ""
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
