"""The "mosaic" backend: the Mosaic GPU kernel's gate, its first-use self-test and the registered implementation.

The kernel and its `plgpu.kernel` call live in jax_impl/mosaic_kernel.py; jax_impl/dispatch.py registers
`categorical_td_target_mosaic` and `mosaic_gate` lazily (an import failure of this module becomes the gate's reason).

Interpret rule: the Pallas kernels' one rule (`jax_impl.lowering.interpret_mode`, FLASHSAC_PALLAS_INTERPRET=1): the
kernel then runs in Mosaic GPU's interpret mode on any platform. Without it the kernel is compiled for the GPU, which
needs an NVIDIA GPU of compute capability >= 9.0 (Hopper and newer: Mosaic GPU targets sm_90a and up) and the Mosaic
GPU runtime, the `_mosaic_gpu_ext` extension and `libmosaic_gpu_runtime.so` that JAX loads from
`jaxlib.mosaic.gpu`, `jax_cuda12_plugin` or `jax_cuda13_plugin` (the CUDA plugin wheels ship them, e.g.
jax-cuda13-plugin 0.11.2, which `pip install "jax[cuda13]==0.11.2"` installs).
"""

from __future__ import annotations

import importlib

import jax

from jax_impl import mosaic_kernel
from jax_impl.kernel_checks import gpu_reason, input_reason, run_isolated, self_test_once
from jax_impl.lowering import INTERPRET_ENV, interpret_mode, jax_version_reason
from shared_spec.launch_config import MAX_E, MAX_N

__all__ = ["MOSAIC_GPU_RUNTIME_MODULES", "TESTED_JAX", "categorical_td_target_mosaic", "mosaic_gate",
           "mosaic_runtime_missing", "reset_self_tests", "self_test", "self_test_errors"]

# JAX versions the kernel was checked with (interpret mode and the CUDA cross-lowering on the CPU: 0.10.2, 0.11.2).
# Mosaic GPU's Pallas API changes between JAX releases; the self-test decides on the GPU.
TESTED_JAX = ("0.10.", "0.11.")
JAX_VERSION = jax.__version__  # a module attribute so tests can simulate another version
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")
MIN_COMPUTE_CAPABILITY = (9, 0)
# Where JAX looks for the Mosaic GPU runtime extension, in its order (jax/_src/lib/mosaic_gpu.py).
MOSAIC_GPU_RUNTIME_MODULES = ("jaxlib.mosaic.gpu._mosaic_gpu_ext", "jax_cuda12_plugin._mosaic_gpu_ext",
                              "jax_cuda13_plugin._mosaic_gpu_ext")

_self_tests: dict[tuple, str | None] = {}
_self_test_errors: dict[tuple, str] = {}


def mosaic_runtime_missing() -> str | None:
    """None if the Mosaic GPU runtime extension imports, else why not (one line, with the package that ships it)."""
    errors = []
    for name in MOSAIC_GPU_RUNTIME_MODULES:
        try:
            importlib.import_module(name)
            return None
        except ImportError as exc:
            errors.append(f"{name}: {' '.join(str(exc).split())[:120]}")
    return (f"the Mosaic GPU runtime is not installed ({'; '.join(errors)}); the JAX CUDA plugin ships it: pip install "
            f"\"jax[cuda13]=={JAX_VERSION}\" (jax-cuda13-plugin) or \"jax[cuda12]=={JAX_VERSION}\"")


def categorical_td_target_mosaic(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma,
                                 min_v: float = -5.0, max_v: float = 5.0, *, interpret: bool | None = None,
                                 row_offset: int | None = None) -> jax.Array:
    """The registered "mosaic" implementation: `mosaic_kernel.launch` with this process's interpret rule.

    Inputs are validated by jax_impl/dispatch.py; call through `jax_impl.categorical_td_target(backend="mosaic")`.
    """
    return mosaic_kernel.launch(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v, max_v,
                                interpret=interpret_mode() if interpret is None else interpret, row_offset=row_offset)


def _self_test_once(platform: str, dtype_name: str, E: int, N: int, interpret: bool) -> str | None:
    return self_test_once(lambda *args: mosaic_kernel.launch(*args, interpret=interpret), platform, dtype_name, E, N)


def self_test(platform: str, dtype_name: str, E: int, N: int) -> str | None:
    """Compile and run the kernel once per configuration on a tiny input (NaN rows) and compare it with the jnp
    reference, isolated from the caller's trace. Cached; an exception or a mismatch becomes the returned reason."""
    interpret = interpret_mode()
    key = (platform, dtype_name, int(E), int(N), interpret)
    if key not in _self_tests:
        reason, error = run_isolated(_self_test_once, platform, dtype_name, int(E), int(N), interpret)
        if error is not None:
            _self_test_errors[key] = error
        _self_tests[key] = reason
    return _self_tests[key]


def self_test_errors() -> dict[tuple, str]:
    """(platform, dtype, E, N, interpret) -> the traceback of a self-test that raised."""
    return dict(_self_test_errors)


def reset_self_tests() -> None:
    """Forget cached self-test results (tests)."""
    _self_tests.clear()
    _self_test_errors.clear()


def mosaic_gate(key: tuple) -> str | None:
    """Why the Mosaic GPU kernel cannot run a configuration (platform, dtype name, E, N), or None (its self-test
    passed). Called once per configuration, outside jit."""
    platform, dtype_name, E, N = key
    reason = jax_version_reason(JAX_VERSION, TESTED_JAX, "mosaic")
    if reason is not None:
        return reason
    reason = input_reason(dtype_name, E, N, SUPPORTED_DTYPES, MAX_N, MAX_E)
    if reason is not None:
        return reason
    if not interpret_mode():
        if platform == "cpu":
            return (f"platform cpu: the Mosaic GPU kernel needs an NVIDIA GPU of compute capability >= 9.0 "
                    f"(set {INTERPRET_ENV}=1 to run it in interpret mode on CPU)")
        if platform not in ("gpu", "cuda"):
            return f"platform {platform} is not supported (NVIDIA GPU, or {INTERPRET_ENV}=1 for interpret mode)"
        reason = gpu_reason(platform, MIN_COMPUTE_CAPABILITY) or mosaic_runtime_missing()
        if reason is not None:
            return reason
    return self_test(platform, dtype_name, E, N)
