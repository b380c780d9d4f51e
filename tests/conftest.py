"""Test configuration: interpreters on before any kernel module is imported; seeds; shared helpers."""

import os

# Must precede the first `import triton_kernels` / `@triton.jit` (the interpreter flag is read at decoration).
os.environ.setdefault("TRITON_INTERPRET", "1")
# Two host devices, so "wrong device" errors can be tested in JAX on a CPU-only machine.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("FLASHSAC_PALLAS_INTERPRET", "1")
# The JAX agents' persistent compilation cache (agent.compilation_cache_dir=auto reads $JAX_COMPILATION_CACHE_DIR):
# one fresh directory per test process (each xdist worker, inherited by the subprocesses it starts), never the user's
# ~/.cache, so two workers never write, trim or read one directory at once and no earlier run's programs are loaded.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="flashsac-test-jax-cache-")

import random  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    try:
        import torch

        torch.manual_seed(0)
    except ImportError:
        pass
    yield
