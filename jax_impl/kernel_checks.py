"""The checks every JAX kernel backend's gate shares: the first-use self-test against the jnp reference, run
isolated from the caller's trace, and the NVIDIA GPU's compute-capability test."""

from __future__ import annotations

import concurrent.futures
import traceback
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from shared_spec.tolerances import atol_vs_float64

__all__ = ["SELF_TEST_GAMMA", "SELF_TEST_ROWS", "gpu_reason", "input_reason", "run_isolated", "self_test_once"]

SELF_TEST_ROWS = 19  # not a multiple of any kernel's rows per program: exercises the tail rows
SELF_TEST_GAMMA = 0.99
_NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")


def input_reason(dtype_name: str, E: int, N: int, dtypes: tuple[str, ...], max_n: int, max_e: int) -> str | None:
    """Why a kernel that takes log-probs of `dtypes`, 2 <= N <= max_n atoms and 1 <= E <= max_e critics cannot run
    a configuration, or None."""
    if dtype_name not in dtypes:
        return f"log-prob dtype {dtype_name} is not supported {dtypes}"
    if not 2 <= N <= max_n:
        return f"N = {N} atoms is outside the supported range [2, {max_n}]"
    if not 1 <= E <= max_e:
        return f"E = {E} critics is outside the supported range [1, {max_e}]"
    return None


def self_test_once(launch: Callable[..., jax.Array], platform: str, dtype_name: str, E: int, N: int, *,
                   extra: Callable[[list, np.ndarray], str | None] | None = None) -> str | None:
    """Run a kernel once on a small input with NaN rows and compare it with the jnp reference.

    Args:
        launch: the kernel call, `launch(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma)`.
        platform, dtype_name, E, N: the configuration (the log-prob dtype by name).
        extra: optional further check `extra(args, got) -> reason or None`, run on the same device right after the
            kernel (e.g. another launch configuration that must give the same bits).

    Returns:
        None if the output is float32 (B, N), `extra` passes, its NaN rows are the reference's and the other values
        within 2 atol_vs_float64(N) of it (each fp32 implementation is within atol_vs_float64(N) of the exact
        result); else the reason, prefixed "self-test: ".
    """
    from jax_impl.reference import categorical_td_target_reference
    from shared_spec.cases import make_inputs

    x = make_inputs(SELF_TEST_ROWS, N, E, seed=1234, kind="nonfinite")
    device = jax.devices(platform)[0]
    args = [jax.device_put(np.asarray(x[name]), device) for name in _NAMES]
    args[1] = args[1].astype(jnp.dtype(dtype_name))
    with jax.default_device(device):
        got = np.asarray(launch(*args, SELF_TEST_GAMMA))
        want = np.asarray(jax.jit(categorical_td_target_reference, static_argnums=(6, 7))(
            *args, jnp.float32(SELF_TEST_GAMMA), -5.0, 5.0))
        reason = None if extra is None else extra(args, got)
    if got.shape != want.shape or got.dtype != np.float32:
        return f"self-test: output {got.dtype}{got.shape}, expected float32{want.shape}"
    if reason is not None:
        return f"self-test: {reason}"
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return "self-test: NaN rows differ from the jnp reference"
    ok = ~np.isnan(want)
    err = float(np.abs(got[ok] - want[ok]).max()) if ok.any() else 0.0
    tol = 2 * atol_vs_float64(N)
    return None if err <= tol else f"self-test: max abs error {err:.3g} vs the jnp reference exceeds {tol:.3g}"


def run_isolated(fn: Callable[..., str | None], *args) -> tuple[str | None, str | None]:
    """Run a self-test `fn(*args)` in a worker thread, which has its own (empty) JAX trace context: a gate may be
    reached while the caller traces a jitted function, and the self-test must execute eagerly, not be staged into
    that trace. Returns (its reason, None), or for an exception (a lowering, compile or launch failure) the reason
    "self-test: <type>: <message>" and the traceback."""
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(fn, *args).result(), None
    except Exception as exc:
        return f"self-test: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500], traceback.format_exc()[-6000:]


def gpu_reason(platform: str, min_cc: tuple[int, int] = (8, 0)) -> str | None:
    """Why the first device of `platform` cannot run a kernel that needs an NVIDIA GPU of compute capability
    >= min_cc, or None."""
    try:
        dev = jax.devices(platform)[0]
    except RuntimeError as exc:
        return f"no {platform} device: {exc}"
    version = str(getattr(dev.client, "platform_version", "")).lower()
    if "rocm" in version or "hip" in version:
        return f"ROCm GPU ({dev.device_kind}): the kernel is validated on NVIDIA GPUs only"
    cc = getattr(dev, "compute_capability", None)
    if cc is None:
        return f"cannot read the compute capability of {dev.device_kind}"
    major, minor = (int(v) for v in str(cc).split(".")[:2])
    if (major, minor) < tuple(min_cc):
        return f"compute capability {major}.{minor} < {min_cc[0]}.{min_cc[1]} ({dev.device_kind})"
    return None
