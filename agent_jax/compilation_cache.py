"""A persistent JAX compilation cache for agent processes: every executable kept on disk, so a second run of the same
configuration (a resumed run, the next run of a benchmark) loads its update step instead of compiling it again. The
JAX counterpart of Triton's on-disk kernel cache, which torch runs get without asking."""

from __future__ import annotations

import os

__all__ = ["jax_cache_env"]


def jax_cache_env(cache_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Environment variables for a process whose JAX keeps every compiled executable in ``cache_dir`` (no minimum
    compile time or entry size). Set them before JAX initialises, e.g. in a subprocess's environment."""
    return {"JAX_COMPILATION_CACHE_DIR": str(cache_dir),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
