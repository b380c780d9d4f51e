"""The "triton" backend: the project's Triton kernel (triton_kernels/, the source the torch backend launches) called
from JAX through jaxlib's Triton kernel-call handler, an XLA custom call.

One kernel source for both frameworks: `triton_kernels.categorical_td_target_kernel_jax` inlines the same kernel body
as the torch entry point `categorical_td_target_kernel` (gamma read from a device scalar, the row offset applied to
the base pointers), under the same pinned launch configuration (`shared_spec.launch_config.kernel_config`), so the
two frameworks' targets are the same fp32 operations in the same order by construction. The custom call works under
`jax.jit` and `lax.scan` (XLA compiles it into the program); it has no batching rule (vmap is not supported) and no
derivative rule: the target is under stop_gradient, as for the other backends.

Two execution paths:
- GPU: pip Triton compiles the entry point to PTX at trace time (`triton_kernels.xla_call`), and the call is a
  `jax.ffi.ffi_call` of jaxlib's typed-FFI handler `triton_kernel_call_ffi` (CUDA plugin, jaxlib >= 0.10.1) with the
  serialised launch as its `opaque` attribute. That handler is marked compatible with XLA command buffers, so inside
  a jitted loop XLA records the kernel into the CUDA graph of the surrounding commands like any fused kernel;
  jax-triton 0.3.1's `triton_call` targets jaxlib's legacy handler `triton_kernel_call` instead, which XLA must run
  outside command buffers (each one then splits the loop body into separately launched pieces; docs/kernel_notes.md,
  "Speed notes").
- TRITON_INTERPRET=1 (CPU tests): the same JAX entry point launched by Triton's interpreter on host copies of the
  arrays, from a `jax.pure_callback` (also under jit and scan).

The gate runs the kernel once per configuration eagerly on a small input (masked tail, NaN rows) and compares it with
the jnp reference: a compile or launch failure there is the fallback reason.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import triton

from jax_impl.kernel_checks import gpu_reason, input_reason, run_isolated, self_test_once
from shared_spec.launch_config import MAX_E, MAX_N, kernel_config
from shared_spec.support import CategoricalSupport

__all__ = ["INTERPRET", "TESTED_TRITON", "categorical_td_target_triton", "compute_capability",
           "jaxlib_triton_reason", "launch_params", "reset_self_tests", "self_test_errors", "triton_gate"]

# Triton reads the same variable when it decorates the kernel (triton_kernels is imported below, after this).
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
TESTED_TRITON = ("3.6",)  # as torch_impl.ops
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")
CALL_NAME = "categorical_td_target_triton"  # the call's name in jaxlib's error messages

from triton_kernels.xla_call import TARGET, compile_kernel, kernel_call_opaque, kernel_parameters  # noqa: E402

_self_tests: dict[tuple, str | None] = {}
_self_test_errors: dict[tuple, str] = {}


def jaxlib_triton_reason() -> str | None:
    """None if jaxlib's CUDA plugin registers the Triton kernel-call handler `triton_kernel_call_ffi`, else why not
    (one line)."""
    try:
        from jax._src.lib import gpu_triton
    except ImportError as exc:
        return f"jaxlib has no gpu_triton module ({' '.join(str(exc).split())[:200]})"
    lib = getattr(gpu_triton, "_cuda_triton", None)
    if lib is None:
        return ("jaxlib's CUDA plugin is not installed (it registers the Triton kernel-call handler): pip install "
                f"\"jax[cuda13]=={jax.__version__}\"")
    try:
        names = set(lib.registrations())
    except Exception as exc:  # an older plugin without the FFI registrations
        names = set()
        why = f" ({type(exc).__name__})"
    else:
        why = ""
    if TARGET not in names:
        return (f"jaxlib {jax.__version__}'s CUDA plugin has no '{TARGET}' handler{why} (jaxlib >= 0.10.1 registers "
                f"it)")
    return None


@functools.lru_cache(maxsize=1)
def compute_capability() -> int:
    """The compute capability of JAX's first GPU as major * 10 + minor (what the PTX is compiled for)."""
    dev = jax.devices("gpu")[0]
    major, minor = str(dev.compute_capability).split(".")[:2]
    return int(major) * 10 + int(minor)


def launch_params(E: int, B: int, N: int, row_offset: int, lp_dtype: str, interpret: bool = False) -> dict:
    """The kernel's launch for (E, B, N) rows of contiguous inputs: {"grid", "num_warps", "scalars" (the
    non-pointer arguments between the pointers, by name), "constexprs", "lp_dtype"}: what the custom call launches
    (tests check it against this)."""
    cfg = kernel_config(B, N, interpret)
    R = B + row_offset
    constexprs = {"ROW_OFFSET": int(row_offset), "E": E, "N": N, "BLOCK_N": cfg["BLOCK_N"], "BR": cfg["BR"],
                  "RPP": cfg["RPP"], "Q": cfg["Q"]}
    scalars = {"q_stride_e": R, "q_stride_b": 1, "lp_stride_e": R * N, "lp_stride_b": N, "lp_stride_n": 1,
               "r_stride": 1, "d_stride": 1, "s_stride": 1, "B": B, "out_stride_b": N}
    rows = cfg["BR"] * cfg["RPP"]
    return {"grid": ((B + rows - 1) // rows,), "num_warps": cfg["num_warps"], "scalars": scalars,
            "constexprs": constexprs, "lp_dtype": lp_dtype}


def _support(N: int, min_v: float, max_v: float) -> tuple[np.float32, np.float32]:
    sup = CategoricalSupport(N, float(min_v), float(max_v))
    return np.float32(sup.min_v), np.float32(sup.inv_bin_width)


def _rows(x: jax.Array) -> jax.Array:
    return x.reshape(-1)  # (B,) or (B, 1) -> (B,): a contiguous row vector (stride 1)


def _gpu_call(q, lp, r, d, s, gamma, mv, inv_delta, p: dict, cc: int) -> jax.Array:
    """The kernel as a `triton_kernel_call_ffi` custom call: compiled at trace time, launched by jaxlib."""
    B, N = p["scalars"]["B"], p["constexprs"]["N"]
    kernel = compile_kernel(cc, p["lp_dtype"], p["num_warps"], p["scalars"], p["constexprs"])
    opaque = kernel_call_opaque(kernel, p["grid"], kernel_parameters(p["scalars"], float(mv), float(inv_delta)),
                                name=CALL_NAME)
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((B, N), jnp.float32))
    return call(q, lp, r, d, s, gamma, opaque=opaque)


# The interpreter's thread, started from the importing thread: XLA's CPU threads, which run host callbacks, flush
# subnormals (FTZ/DAZ), and a thread inherits its creator's floating-point environment; the torch backend's
# interpreted kernel runs with the default environment, so this one does too (the same bits, subnormals included).
_HOST_THREAD: concurrent.futures.ThreadPoolExecutor | None = None
if INTERPRET:
    _HOST_THREAD = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="triton-interpret")
    _HOST_THREAD.submit(lambda: None).result()  # the thread starts now, in the importing thread's environment


def _host_launch(p: dict, mv: np.float32, inv_delta: np.float32, *arrays) -> np.ndarray:
    """`_interpret` in the interpreter's thread (a host callback's entry)."""
    return _HOST_THREAD.submit(_interpret, p, mv, inv_delta, *arrays).result()


def _interpret(p: dict, mv: np.float32, inv_delta: np.float32, *arrays) -> np.ndarray:
    from triton_kernels.jax_entry import interpret

    return interpret(p["grid"], p["num_warps"], p["scalars"], p["constexprs"], float(mv), float(inv_delta), *arrays)


@functools.partial(jax.jit, static_argnames=("min_v", "max_v", "row_offset", "interpret", "cc"))
def _jitted(q, lp, r, d, s, gamma, *, min_v: float, max_v: float, row_offset: int, interpret: bool,
            cc: int) -> jax.Array:
    E, R, N = lp.shape
    B = r.shape[0]
    p = launch_params(E, B, N, row_offset, jnp.dtype(lp.dtype).name, interpret)
    mv, inv_delta = _support(N, min_v, max_v)
    f32 = jnp.float32
    q, r, d, s = q.astype(f32), _rows(r).astype(f32), _rows(d).astype(f32), _rows(s).astype(f32)
    gamma = jnp.reshape(gamma.astype(f32), (1,))
    # The target is a stop-gradient quantity: no tangent reaches the call (neither the FFI call nor a host callback has
    # a derivative rule), and every gradient through it is zero.
    q, lp, r, d, s, gamma = jax.lax.stop_gradient((q, lp, r, d, s, gamma))
    if interpret:
        out = jax.pure_callback(functools.partial(_host_launch, p, mv, inv_delta),
                                jax.ShapeDtypeStruct((B, N), f32), q, lp, r, d, s, gamma)
    else:
        out = _gpu_call(q, lp, r, d, s, gamma, mv, inv_delta, p, cc)
    return out


def categorical_td_target_triton(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma,
                                 min_v: float = -5.0, max_v: float = 5.0, *, row_offset: int | None = None,
                                 interpret: bool | None = None) -> jax.Array:
    """The registered "triton" implementation (inputs validated by jax_impl/dispatch.py).

    Args:
        next_qs (E, R), next_log_probs (E, R, N) float32/bfloat16/float16, reward / terminated / next_alpha_log_pi
            (B,) or (B, 1); R = B without a row offset, else R >= row_offset + B.
        gamma: Python float or (traced) scalar: a device operand of the kernel (changing it never recompiles).
        min_v, max_v: static support bounds.
        row_offset: None, or the static first row the target reads of next_qs and next_log_probs (in place).
        interpret: None -> TRITON_INTERPRET=1 (Triton's interpreter through a host callback).

    Returns:
        (B, N) float32 under stop_gradient; invalid rows are NaN.
    """
    gamma = jnp.asarray(gamma, jnp.float32)
    interpret = INTERPRET if interpret is None else bool(interpret)
    return _jitted(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v=float(min_v),
                   max_v=float(max_v), row_offset=0 if row_offset is None else int(row_offset), interpret=interpret,
                   cc=0 if interpret else compute_capability())


def self_test_errors() -> dict[tuple, str]:
    """Configuration -> the traceback of a self-test that raised (the GPU jobs report them)."""
    return dict(_self_test_errors)


def reset_self_tests() -> None:
    """Forget cached self-test results (tests)."""
    _self_tests.clear()
    _self_test_errors.clear()


def _self_test_once(platform: str, dtype_name: str, E: int, N: int) -> str | None:
    return self_test_once(categorical_td_target_triton, platform, dtype_name, E, N)


def self_test(platform: str, dtype_name: str, E: int, N: int) -> str | None:
    """Compile and run the kernel once per configuration on a tiny input and compare it with the jnp reference, in
    a worker thread (its own empty trace context: the gate may be reached while a jitted function is traced).
    Cached; an exception (compile or launch failure) or a mismatch becomes the returned reason."""
    key = (platform, dtype_name, int(E), int(N), INTERPRET)
    if key not in _self_tests:
        reason, error = run_isolated(_self_test_once, platform, dtype_name, int(E), int(N))
        if error is not None:
            _self_test_errors[key] = error
        _self_tests[key] = reason
    return _self_tests[key]


def triton_gate(key: tuple) -> str | None:
    """Why the Triton kernel cannot run from JAX for a configuration (platform, dtype name, E, N), or None (its
    self-test passed). Called once per configuration, outside jit."""
    platform, dtype_name, E, N = key
    if not triton.__version__.startswith(TESTED_TRITON):
        return f"triton {triton.__version__} is outside the tested range {TESTED_TRITON}"
    reason = input_reason(dtype_name, E, N, SUPPORTED_DTYPES, MAX_N, MAX_E)
    if reason is not None:
        return reason
    if INTERPRET:
        if platform != "cpu":
            return f"TRITON_INTERPRET=1 runs the kernel on CPU arrays only, got platform {platform}"
    else:
        if platform == "cpu":
            return "platform cpu: the Triton kernel needs an NVIDIA GPU (TRITON_INTERPRET=1 interprets it on CPU)"
        if platform not in ("gpu", "cuda"):
            return f"platform {platform} is not supported (NVIDIA GPU, or TRITON_INTERPRET=1 on CPU)"
        reason = jaxlib_triton_reason()
        if reason is not None:
            return reason
        reason = gpu_reason(platform)
        if reason is not None:
            return reason
    return self_test(platform, dtype_name, E, N)
