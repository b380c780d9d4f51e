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

import logging
import warnings

import jax
import numpy as np

from jax_impl import pallas_kernel
from jax_impl.kernel_checks import SELF_TEST_GAMMA, gpu_reason, input_reason, run_isolated, self_test_once
from jax_impl.lowering import INTERPRET_ENV, interpret_mode, jax_version_reason
from jax_impl.pallas_kernel import DEFAULT_EXP_MODE, EXP_MODES
from shared_spec.launch_config import MAX_E, MAX_N, kernel_config

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
    def tiles(args: list, got: np.ndarray) -> str | None:
        # On the GPU also the tiles and tile loop that large B runs (its BR and RPP > 1; the self-test's B is
        # small): they must compile and give the same bits (interpret mode: tests/test_kernel_bitwise.py).
        if interpret:
            return None
        big = kernel_config(1 << 20, N, False)
        out = np.asarray(pallas_kernel.launch(*args, SELF_TEST_GAMMA, interpret=False, exp_mode=exp_mode,
                                              block_rows=big["BR"], num_warps=big["num_warps"],
                                              rows_per_program=max(2, big["RPP"])))
        same = np.array_equal(np.where(np.isnan(out), -1, out.view(np.int32)),
                              np.where(np.isnan(got), -1, got.view(np.int32)))
        return None if same else "2 tiles per program give other bits than 1"

    return self_test_once(lambda *args: pallas_kernel.launch(*args, interpret=interpret, exp_mode=exp_mode),
                          platform, dtype_name, E, N, extra=tiles)


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
        # Isolated from the caller's trace; a lowering or compilation failure at first use is the reason.
        reason, error = run_isolated(_self_test_once, platform, dtype_name, int(E), int(N), interpret, mode)
        if error is not None:
            _self_test_errors[key + (mode,)] = error
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


def pallas_gate(key: tuple) -> str | None:
    """Why the Pallas kernel cannot run a configuration, or None. Called once per configuration, outside jit.

    Args:
        key: (platform, dtype_name, E, N): the JAX platform ("cpu", "gpu", "cuda", ...), the log-prob dtype name,
            the number of critics and of atoms.

    Returns:
        None if the kernel runs (after a passing self-test), else a one-line reason.
    """
    platform, dtype_name, E, N = key
    reason = jax_version_reason(JAX_VERSION, TESTED_JAX, "pallas")
    if reason is not None:
        return reason
    reason = input_reason(dtype_name, E, N, SUPPORTED_DTYPES, MAX_N, MAX_E)
    if reason is not None:
        return reason
    if not interpret_mode():
        if platform == "cpu":
            return (f"platform cpu: the Pallas-Triton kernel needs an NVIDIA GPU "
                    f"(set {INTERPRET_ENV}=1 to run it in interpret mode on CPU)")
        if platform not in ("gpu", "cuda"):
            return f"platform {platform} is not supported (NVIDIA GPU, or {INTERPRET_ENV}=1 for interpret mode)"
        reason = gpu_reason(platform)
        if reason is not None:
            return reason
    return self_test(platform, dtype_name, E, N)
