"""A persistent JAX compilation cache for agent processes: every executable kept on disk, so a second run of the same
configuration (a resumed run, the next run of a benchmark) loads its update step instead of compiling it again. The
JAX counterpart of Triton's on-disk kernel cache, which torch runs get without asking."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["compute_path", "jax_cache_env"]


def jax_cache_env(cache_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Environment variables for a process whose JAX keeps every compiled executable in ``cache_dir`` (no minimum
    compile time or entry size). Set them before JAX initialises, e.g. in a subprocess's environment."""
    return {"JAX_COMPILATION_CACHE_DIR": str(cache_dir),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def compute_path(device: object, mesh_devices: Sequence[object] = ()) -> str:
    """One line naming how the JAX agent computes and why (the torch agent's ``compute_path`` counterpart): its update
    is one jitted XLA program, compiled by the first update (no compile mode to choose; with device replay rows on a
    background thread from the start of training, ``FlashSACAgent.precompile_step``), and whether compiled
    executables persist on disk (``JAX_COMPILATION_CACHE_DIR``, see ``jax_cache_env``) so that a later run of the same
    configuration loads them instead of compiling again. ``mesh_devices``: every device of a data-parallel update
    (``num_devices`` > 1), all named."""
    import jax

    cache_dir = jax.config.jax_compilation_cache_dir
    cache = (f"persistent compilation cache at {cache_dir} (a later run of this configuration loads its executables)"
             if cache_dir else "no persistent compilation cache (set JAX_COMPILATION_CACHE_DIR to keep executables)")
    if len(mesh_devices) > 1:
        processes = len({getattr(d, "process_index", 0) for d in mesh_devices})
        device = (f"{len(mesh_devices)} devices of {processes} process{'es' if processes > 1 else ''} "
                  f"(data parallel, batch split along the mesh): {', '.join(map(str, mesh_devices))}")
    return (f"jax {jax.__version__} on {device}: jit (XLA), compiled by the first update; {cache}. Why: JAX always "
            "jits the update; agent.use_compile, agent.compile_mode and agent.use_cuda_graph do not apply")
