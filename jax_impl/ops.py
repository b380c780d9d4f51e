"""The "pallas" backend: its gate, the first-use self-test, the exp-mode choice and the registered implementation.

The twin of torch_impl/ops.py. The kernel and its `pallas_call` live in jax_impl/pallas_kernel.py;
jax_impl/dispatch.py registers `categorical_td_target_pallas` and `pallas_gate` (an ImportError here becomes the
fallback reason).

Interpret rule (one rule, read at call and decision time): the kernel runs in Pallas interpret mode iff the
environment variable FLASHSAC_PALLAS_INTERPRET is "1" (tests/conftest.py sets it). Without it the kernel is
compiled for the GPU, and the gate refuses the CPU platform with a reason, so `backend="auto"` on a CPU machine uses
the fast jnp reference rather than the slow interpreter.

JAX 0.11 deprecates the Pallas Triton backend; its DeprecationWarning is raised when the enclosing jit lowers for
CUDA, possibly outside this package's call frames, so it is filtered by a process-wide filter for exactly that
message, installed when this module is imported (nothing else is silenced).
"""

from __future__ import annotations

import concurrent.futures
import logging
import traceback
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl import pallas_kernel
from jax_impl.lowering import INTERPRET_ENV, interpret_mode
from jax_impl.pallas_kernel import DEFAULT_EXP_MODE, EXP_MODES
from shared_spec.launch_config import MAX_E, MAX_N, kernel_config
from shared_spec.tolerances import atol_vs_float64

__all__ = ["DEPRECATION_MESSAGE", "INTERPRET_ENV", "TESTED_JAX", "categorical_td_target_pallas", "exp_mode",
           "filter_pallas_triton_deprecation", "interpret_mode", "pallas_gate", "reset_self_tests", "self_test",
           "self_test_errors", "self_test_results"]

DEPRECATION_MESSAGE = "The Pallas Triton backend is deprecated"


def filter_pallas_triton_deprecation() -> None:
    """Ignore exactly JAX 0.11's Pallas-Triton DeprecationWarning (a regex matched at the message start)."""
    warnings.filterwarnings("ignore", message=DEPRECATION_MESSAGE, category=DeprecationWarning)


filter_pallas_triton_deprecation()  # at import: the warning fires when the *enclosing* jit lowers for CUDA

log = logging.getLogger("flashsac.jax_impl")

# JAX versions this kernel was validated with (CPU interpret + CUDA cross-lowering: 0.10.2; H200: 0.11.2).
TESTED_JAX = ("0.10.", "0.11.")
JAX_VERSION = jax.__version__  # a module attribute so tests can simulate another version
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")


_self_tests: dict[tuple, str | None] = {}
_self_test_errors: dict[tuple, str] = {}  # full tracebacks of failed self-tests (the GPU benchmark reports them)
_exp_mode_choice = [DEFAULT_EXP_MODE]


def exp_mode() -> str:
    """The exp lowering the kernel uses in this process: "ex2" unless its self-test failed and "libdevice" passed."""
    return _exp_mode_choice[0]


def self_test_results() -> dict[tuple, str | None]:
    """(platform, dtype, E, N, interpret) -> None (passed) or the reason it failed, for every self-test run."""
    return dict(_self_tests)


def self_test_errors() -> dict[tuple, str]:
    """(platform, dtype, E, N, interpret, exp_mode) -> the traceback of a self-test that raised."""
    return dict(_self_test_errors)


def reset_self_tests() -> None:
    """Forget cached self-test results and the exp-mode choice (tests)."""
    _self_tests.clear()
    _self_test_errors.clear()
    _exp_mode_choice[0] = DEFAULT_EXP_MODE


def categorical_td_target_pallas(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma,
                                 min_v: float = -5.0, max_v: float = 5.0, *, interpret: bool | None = None,
                                 block_rows: int | None = None, num_warps: int | None = None,
                                 exp_mode: str | None = None, row_offset: int | None = None,
                                 rows_per_program: int | None = None, lanes_per_slot: int | None = None) -> jax.Array:
    """The registered "pallas" implementation: `pallas_kernel.launch` with this process's interpret rule and exp mode.

    Inputs are validated by jax_impl/dispatch.py; call through `jax_impl.categorical_td_target(backend="pallas")`.

    Args:
        next_qs ... gamma, min_v, max_v, row_offset: as `pallas_kernel.launch`.
        interpret: None -> `interpret_mode()` (FLASHSAC_PALLAS_INTERPRET=1).
        block_rows, num_warps, rows_per_program, lanes_per_slot: launch overrides (BR, num_warps, RPP, Q); None -> the
            pinned configuration.
        exp_mode: None -> `exp_mode()` (the mode the self-test selected; default "ex2").

    Returns:
        (B, N) float32; invalid rows are NaN.
    """
    return pallas_kernel.launch(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v, max_v,
                                interpret=interpret_mode() if interpret is None else bool(interpret),
                                block_rows=block_rows, num_warps=num_warps,
                                exp_mode=_exp_mode_choice[0] if exp_mode is None else exp_mode,
                                row_offset=row_offset, rows_per_program=rows_per_program,
                                lanes_per_slot=lanes_per_slot)


def _self_test_once(platform: str, dtype_name: str, E: int, N: int, interpret: bool, exp_mode: str) -> str | None:
    from jax_impl.reference import categorical_td_target_reference
    from shared_spec.cases import make_inputs

    B = 19  # not a multiple of the rows per program: exercises the masked tail rows
    x = make_inputs(B, N, E, seed=1234, kind="nonfinite")
    device = jax.devices(platform)[0]
    args = [jax.device_put(np.asarray(x[name]), device) for name in
            ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")]
    args[1] = args[1].astype(jnp.dtype(dtype_name))
    with jax.default_device(device):
        got = np.asarray(pallas_kernel.launch(*args, 0.99, interpret=interpret, exp_mode=exp_mode))
        want = np.asarray(jax.jit(categorical_td_target_reference, static_argnums=(6, 7))(
            *args, jnp.float32(0.99), -5.0, 5.0))
        # On the GPU also the tiles and tile loop that large B runs (its BR and RPP > 1; B = 19 is a small B): they
        # must compile and give the same bits (interpret mode: tests/test_kernel_bitwise.py).
        big = kernel_config(1 << 20, N, False)
        tiles = None if interpret else np.asarray(pallas_kernel.launch(
            *args, 0.99, interpret=False, exp_mode=exp_mode, block_rows=big["BR"], num_warps=big["num_warps"],
            rows_per_program=max(2, big["RPP"])))
    if got.shape != want.shape or got.dtype != np.float32:
        return f"self-test: output {got.dtype}{got.shape}, expected float32{want.shape}"
    if tiles is not None and not np.array_equal(np.where(np.isnan(tiles), -1, tiles.view(np.int32)),
                                                np.where(np.isnan(got), -1, got.view(np.int32))):
        return "self-test: 2 tiles per program give other bits than 1"
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return "self-test: NaN rows differ from the jnp reference"
    ok = ~np.isnan(want)
    err = float(np.abs(got[ok] - want[ok]).max()) if ok.any() else 0.0
    # Each fp32 implementation is within atol_vs_float64(N) of the exact result, so within twice that of each other.
    tol = 2 * atol_vs_float64(N)
    if not err <= tol:
        return f"self-test: max abs error {err:.3g} vs the jnp reference exceeds {tol:.3g}"
    return None


def self_test(platform: str, dtype_name: str, E: int, N: int) -> str | None:
    """Compile and run the kernel once per configuration on a tiny input (NaN rows, masked tail) and compare it
    with the jnp reference. Cached. A lowering/compile error or a mismatch becomes the returned reason.

    On the GPU, if the default exp_mode ("ex2", inline PTX) fails but "libdevice" passes, the process switches to
    "libdevice" (logged once) instead of losing the kernel.
    """
    interpret = interpret_mode()
    key = (platform, dtype_name, int(E), int(N), interpret)
    if key in _self_tests:
        return _self_tests[key]
    modes = [_exp_mode_choice[0]] + [m for m in EXP_MODES if m != _exp_mode_choice[0]]
    reasons = []
    for mode in modes:
        try:
            # A worker thread has its own (empty) JAX trace context: the gate may be reached while the caller is
            # tracing a jitted function, and the self-test must execute eagerly, not be staged into that trace.
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                reason = pool.submit(_self_test_once, platform, dtype_name, int(E), int(N), interpret, mode).result()
        except Exception as exc:  # a lowering or compilation failure at first use
            reason = f"self-test: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
            _self_test_errors[key + (mode,)] = traceback.format_exc()[-6000:]
        if reason is None:
            if mode != _exp_mode_choice[0]:
                log.warning("categorical_td_target pallas: exp_mode=%r failed its self-test (%s); using %r",
                            _exp_mode_choice[0], "; ".join(reasons), mode)
                _exp_mode_choice[0] = mode
            break
        reasons.append(f"exp_mode={mode}: {reason}")
    result = None if reason is None else "; ".join(reasons)
    _self_tests[key] = result
    return result


def _gpu_reason(platform: str) -> str | None:
    try:
        devices = jax.devices(platform)
    except RuntimeError as exc:
        return f"no {platform} device: {exc}"
    dev = devices[0]
    version = str(getattr(dev.client, "platform_version", "")).lower()
    if "rocm" in version or "hip" in version:
        return f"ROCm GPU ({dev.device_kind}): the kernel is validated on NVIDIA GPUs only"
    cc = getattr(dev, "compute_capability", None)
    if cc is None:
        return f"cannot read the compute capability of {dev.device_kind}"
    major, minor = (int(v) for v in str(cc).split(".")[:2])
    if major < 8:
        return f"compute capability {major}.{minor} < 8.0 ({dev.device_kind})"
    return None


def pallas_gate(key: tuple) -> str | None:
    """Why the Pallas kernel cannot run a configuration, or None. Called once per configuration, outside jit.

    Args:
        key: (platform, dtype_name, E, N): the JAX platform ("cpu", "gpu", "cuda", ...), the log-prob dtype name,
            the number of critics and of atoms.

    Returns:
        None if the kernel runs (after a passing self-test), else a one-line reason.
    """
    platform, dtype_name, E, N = key
    if not str(JAX_VERSION).startswith(TESTED_JAX):
        return f"jax {JAX_VERSION} is outside the tested range (0.10.x, 0.11.x)"
    if dtype_name not in SUPPORTED_DTYPES:
        return f"log-prob dtype {dtype_name} is not supported {SUPPORTED_DTYPES}"
    if not 2 <= N <= MAX_N:
        return f"N = {N} atoms is outside the supported range [2, {MAX_N}]"
    if not 1 <= E <= MAX_E:
        return f"E = {E} critics is outside the supported range [1, {MAX_E}]"
    if not interpret_mode():
        if platform == "cpu":
            return (f"platform cpu: the Pallas-Triton kernel needs an NVIDIA GPU "
                    f"(set {INTERPRET_ENV}=1 to run it in interpret mode on CPU)")
        if platform not in ("gpu", "cuda"):
            return f"platform {platform} is not supported (NVIDIA GPU, or {INTERPRET_ENV}=1 for interpret mode)"
        reason = _gpu_reason(platform)
        if reason is not None:
            return reason
    return self_test(platform, dtype_name, E, N)
