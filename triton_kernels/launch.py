"""Host-side launch of the Triton kernel: output allocation, the pinned configuration, grid and arguments."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import torch
import triton
from triton import knobs
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction

from shared_spec.launch_config import kernel_config, with_overrides
from triton_kernels.categorical_td_target import categorical_td_target_kernel

__all__ = ["INTERPRET", "FastLauncher", "fast_launcher", "kernel_constexprs", "kernel_grid", "launch"]

# Triton reads the same variable when it decorates the kernel: under TRITON_INTERPRET=1 it runs on CPU tensors.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

_config = functools.lru_cache(maxsize=256)(kernel_config)  # read-only dicts: never mutate the result

# A fast launcher: (next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v, inv_delta) -> out.
FastLauncher = Callable[..., torch.Tensor]

# Eager fast path: compiled kernels by launch signature. Triton's JITFunction.run binds and specialises every
# argument, checks the kernel's global constants and builds its cache key on each launch (29 us of host time per
# launch on the H200, against 14.6 us through the fast path, bench/results/h200-2026-12-01-kernel). A repeat launch
# with the same signature calls a closure built at the signature's first launch (`_fast`): it holds the compiled
# kernel, its launcher, the grid, the integer arguments and the constexprs, and passes the arguments, stream and hooks
# that JITFunction.run would pass. Triton's own options (debug, instrumentation knobs) are those of the signature's
# first launch; the kernel's global constants are not re-checked.
_COMPILED: dict[tuple, tuple[Any, FastLauncher]] = {}  # signature -> (JIT function, fast launcher)
_MAX_COMPILED = 256
_LAUNCHER_API = ("run", "function", "packed_metadata", "launch_metadata")  # used of a compiled kernel
# Triton 3.6's CudaLauncher.__call__ only allocates the global and profile scratch buffers (None when the kernel
# needs none, as this one) and calls its C `launch`; with no scratch the fast path calls `launch` itself.
_DIRECT_LAUNCH = triton.__version__.startswith("3.6")


_CONSTEXPRS = ("E", "N", "BLOCK_N", "BR", "RPP", "Q")  # the kernel's constexpr parameters, in order

# torch.cuda.current_device (what Triton's CUDA driver returns as get_current_device) and the C call behind it, which
# returns the same index without the Python wrapper once CUDA is initialised (the fast launchers call it).
_CUDA_CURRENT_DEVICE = torch.cuda.current_device
_C_GET_DEVICE = getattr(torch._C, "_cuda_getDevice", None)


def _takes(launcher, name: str) -> bool:
    """Whether the kernel has the constexpr parameter `name` ("RPP", "Q": this package's kernel has both; a baseline
    kernel file may predate them)."""
    if launcher is categorical_td_target_kernel:  # the eager path: no attribute lookups
        return True
    # torch.library.wrap_triton's wrapper holds the JIT function as `kernel`; a JITFunction has a `kernel` attribute
    # of its own (None until Triton's legacy launch path sets it), so only a non-None one is followed
    fn = getattr(launcher, "kernel", None) or launcher
    return fn is categorical_td_target_kernel or name in getattr(fn, "arg_names", (name,))


def kernel_constexprs(launcher, cfg: dict, E: int, N: int, config: dict | None = None) -> tuple[int, ...]:
    """The constexpr arguments of a launch of `launcher` with configuration `cfg`, in the kernel's parameter order:
    (E, N, BLOCK_N, BR, RPP, Q). A baseline kernel file without Q gets (E, N, BLOCK_N, BR, RPP) (it always runs its
    four slot tiles) and a `config` (the caller's overrides) giving Q raises ValueError; one without RPP gets
    (E, N, BLOCK_N, BR), one tile per program, and a `config` asking for RPP != 1 raises ValueError."""
    if _takes(launcher, "Q"):
        return (E, N, cfg["BLOCK_N"], cfg["BR"], cfg["RPP"], cfg["Q"])
    if config and "Q" in config:
        raise ValueError(f"this kernel has no Q parameter: it runs its own slot tiles, got Q = {config['Q']}")
    if _takes(launcher, "RPP"):
        return (E, N, cfg["BLOCK_N"], cfg["BR"], cfg["RPP"])
    if config and config.get("RPP", 1) != 1:
        raise ValueError("this kernel has no RPP parameter: it runs one tile per program")
    return (E, N, cfg["BLOCK_N"], cfg["BR"])


def kernel_grid(B, constexprs: tuple[int, ...]) -> tuple:
    """The launch grid for B rows: ceil(B / (BR * RPP)) programs of RPP tiles of BR rows (`kernel_constexprs`'
    constexprs; RPP = 1 for a kernel without it). A plain integer ceil division: triton.cdiv costs ~2 us per call."""
    rows = constexprs[3] * constexprs[4] if len(constexprs) > 4 else constexprs[3]
    return ((B + rows - 1) // rows,)


def _signature(launcher, device, num_warps: int, constexprs: tuple, next_qs, next_log_probs, reward, terminated,
               next_alpha_log_pi) -> tuple:
    """Everything Triton (3.6) specialises a launch on, at least: the tensors' dtypes and whether their addresses are
    multiples of 16 bytes, the integer arguments' values (Triton looks at value == 1, divisibility by 16 and the
    32/64-bit range: the strides and B, here with their exact values), the constexprs (`kernel_constexprs`: E, N,
    BLOCK_N, BR and RPP, which also fix the grid) and the launch options (num_warps); plus the current device (one
    loaded binary per device) and the tensors' device (the output's). The output's alignment is checked by the fast
    launcher itself (it allocates the output); its row stride is N (a new contiguous (B, N) tensor)."""
    return (id(launcher), device, next_log_probs.device, constexprs, num_warps, next_qs.stride(),
            next_log_probs.stride(), reward.stride(0), terminated.stride(0), next_alpha_log_pi.stride(0),
            next_log_probs.shape[1],
            next_qs.dtype, next_log_probs.dtype, reward.dtype, terminated.dtype, next_alpha_log_pi.dtype,
            next_qs.data_ptr() & 15, next_log_probs.data_ptr() & 15, reward.data_ptr() & 15,
            terminated.data_ptr() & 15, next_alpha_log_pi.data_ptr() & 15)


def _jit_run(launcher, grid: tuple, constexprs: tuple, num_warps: int, out, next_qs, next_log_probs, reward,
             terminated, next_alpha_log_pi, gamma: float, min_v: float, inv_delta: float):
    """Launch through `launcher[grid]` (JITFunction.run, or wrap_triton's); returns what it returns."""
    B = next_log_probs.shape[1]
    q_stride, lp_stride = next_qs.stride(), next_log_probs.stride()
    return launcher[grid](next_qs, q_stride[0], q_stride[1],
                          next_log_probs, lp_stride[0], lp_stride[1], lp_stride[2],
                          reward, reward.stride(0),
                          terminated, terminated.stride(0),
                          next_alpha_log_pi, next_alpha_log_pi.stride(0),
                          out, out.stride(0),
                          B, gamma, min_v, inv_delta,
                          **dict(zip(_CONSTEXPRS, constexprs, strict=False)), num_warps=num_warps)


def launch(launcher, next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma: float, min_v: float,
           inv_delta: float, config: dict | None = None, fast: bool = True) -> torch.Tensor:
    """Allocate the (B, N) fp32 output and launch the kernel through `launcher` (the JIT function or wrap_triton).

    Args:
        launcher: `categorical_td_target_kernel`, or `torch.library.wrap_triton` of it inside the registered op.
        next_qs (E, B), next_log_probs (E, B, N), reward / terminated / next_alpha_log_pi (B,) or (B, 1): validated
            tensors on one device, any strides (per-row inputs index rows with stride(0)).
        gamma, min_v, inv_delta: the fp32 scalars of SPEC.md section 3 (as Python floats).
        config: overrides of the pinned {"BR", "num_warps", "RPP", "Q"} (benchmark sweeps and tests only; BLOCK_N
            is derived from N, Q from BR and num_warps unless given: `shared_spec.launch_config.with_overrides`). A
            kernel without the RPP parameter (a baseline kernel file) is launched with one tile per program.
        fast: a JIT function launched on the GPU before with the same signature is called through its compiled
            launcher directly (the same kernel binary and arguments; False: always through JITFunction.run).

    Returns:
        (B, N) float32, contiguous.
    """
    E, B, N = next_log_probs.shape
    fast = fast and not INTERPRET and isinstance(launcher, JITFunction)  # B is a SymInt when traced: no cache then
    cfg = _config(B, N, False) if fast else kernel_config(B, N, INTERPRET)
    cfg = with_overrides(cfg, config, INTERPRET)
    constexprs = kernel_constexprs(launcher, cfg, E, N, config)
    if fast:
        key = _signature(launcher, driver.active.get_current_device(), cfg["num_warps"], constexprs, next_qs,
                         next_log_probs, reward, terminated, next_alpha_log_pi)
        hit = _COMPILED.get(key)
        if hit is not None and hit[0] is launcher:
            return hit[1](next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v, inv_delta)
    out = torch.empty((B, N), dtype=torch.float32, device=next_log_probs.device)
    grid = kernel_grid(B, constexprs)
    compiled = _jit_run(launcher, grid, constexprs, cfg["num_warps"], out, next_qs, next_log_probs, reward,
                        terminated, next_alpha_log_pi, gamma, min_v, inv_delta)
    if fast:  # first launch of this signature: Triton compiled (or loaded) and ran it
        if hasattr(compiled, "result"):  # an asynchronous compilation's future
            compiled = compiled.result()
        if all(hasattr(compiled, a) for a in _LAUNCHER_API):  # else (another Triton): always through JITFunction.run
            if len(_COMPILED) >= _MAX_COMPILED:
                _COMPILED.clear()
            _COMPILED[key] = (launcher, _fast(launcher, compiled, key[1], config, constexprs, cfg["num_warps"], grid,
                                              out, next_qs, next_log_probs, reward, terminated, next_alpha_log_pi))
    return out


def fast_launcher(launcher, next_qs, next_log_probs, reward, terminated, next_alpha_log_pi) -> FastLauncher | None:
    """The fast launcher `launch` keeps for these inputs' signature (pinned configuration, current device), or None
    (not launched yet, interpreted, not a JIT function). Calling it is `launch(launcher, ...)` for inputs of that
    signature: it takes launch's arguments without `launcher`, `config` and `fast`."""
    if INTERPRET or not isinstance(launcher, JITFunction):
        return None
    E, B, N = next_log_probs.shape
    cfg = _config(B, N, False)
    hit = _COMPILED.get(_signature(launcher, driver.active.get_current_device(), cfg["num_warps"],
                                   kernel_constexprs(launcher, cfg, E, N), next_qs, next_log_probs, reward,
                                   terminated, next_alpha_log_pi))
    return hit[1] if hit is not None and hit[0] is launcher else None


def _c_launch(run) -> tuple | None:
    """(C launch function, cooperative grid flag, PDL flag) behind Triton 3.6's CudaLauncher when it needs no
    scratch buffers (its __call__ then passes None for both), else None (call the launcher itself)."""
    if not _DIRECT_LAUNCH or type(run).__name__ != "CudaLauncher":
        return None
    try:
        if run.global_scratch_size == 0 and run.profile_scratch_size == 0:
            return run.launch, run.launch_cooperative_grid, run.launch_pdl
    except AttributeError:
        pass
    return None


def _fast(launcher, compiled, device, config: dict | None, constexprs: tuple, num_warps: int, grid: tuple, out,
          next_qs, next_log_probs, reward, terminated, next_alpha_log_pi) -> FastLauncher:
    """The fast launcher of one launch signature (see `_COMPILED`), built after its first launch through `launcher`
    with the overrides `config`, which gave it `constexprs` (`kernel_constexprs`), `num_warps` and `grid`.

    What it reads on every call, as JITFunction.run does: the current device (another one than the first launch's:
    through `launch`, which keeps a fast launcher per device), JIT pre-run hooks and the new output's alignment (JIT
    pre-run hooks, or an alignment other than the first launch's output's: through JITFunction.run), the device's
    current stream, and Triton's launch hooks (a profiler's hooks get the launch metadata; empty hook chains are
    passed as None, which the launcher skips, as calling an empty chain does)."""
    E, B, N = next_log_probs.shape
    config = dict(config) if config else None  # the caller's overrides as they were (for the way back to `launch`)
    (qs_e, qs_b), (lps_e, lps_b, lps_n) = next_qs.stride(), next_log_probs.stride()
    r_s, d_s, s_s = reward.stride(0), terminated.stride(0), next_alpha_log_pi.stride(0)
    grid0, out_align, out_device = grid[0], out.data_ptr() & 15, out.device
    drv = driver.active
    get_device, get_stream = drv.get_current_device, drv.get_current_stream
    if get_device is _CUDA_CURRENT_DEVICE and _C_GET_DEVICE is not None:  # the same index, no Python wrapper
        get_device = _C_GET_DEVICE
    run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
    direct = _c_launch(run)
    c_launch, coop, pdl = direct if direct is not None else (None, None, None)
    pre_run_hooks = getattr(launcher, "pre_run_hooks", ())  # appended to in place by JITFunction.add_pre_run_hook
    rt, empty, f32 = knobs.runtime, torch.empty, torch.float32

    def fast(q, lp, r, d, s, gamma: float, min_v: float, inv_delta: float) -> torch.Tensor:
        dev = get_device()
        if dev != device and not pre_run_hooks:  # another current device: launch keeps its own fast launcher
            return launch(launcher, q, lp, r, d, s, gamma, min_v, inv_delta, config=config)
        out = empty(B, N, dtype=f32, device=out_device)  # sizes as arguments: parsed faster than a tuple
        if pre_run_hooks or dev != device or out.data_ptr() & 15 != out_align:
            _jit_run(launcher, grid, constexprs, num_warps, out, q, lp, r, d, s, gamma, min_v, inv_delta)
            return out
        stream = get_stream(dev)
        enter, leave = rt.launch_enter_hook, rt.launch_exit_hook
        try:
            hooked = enter.calls or leave.calls
        except AttributeError:  # not a HookChain (a plain function, None): give it the metadata
            hooked = True
        if hooked:
            metadata = compiled.launch_metadata(grid, stream, q, qs_e, qs_b, lp, lps_e, lps_b, lps_n, r, r_s, d, d_s,
                                                s, s_s, out, N, B, gamma, min_v, inv_delta, *constexprs)
        else:
            metadata = enter = leave = None
        # Every kernel parameter in order, constexprs included (the output's row stride is N).
        if c_launch is None:
            run(grid0, 1, 1, stream, function, packed, metadata, enter, leave,
                q, qs_e, qs_b, lp, lps_e, lps_b, lps_n, r, r_s, d, d_s, s, s_s, out, N, B, gamma, min_v, inv_delta,
                *constexprs)
        else:
            c_launch(grid0, 1, 1, stream, function, coop, pdl, None, None, packed, metadata, enter, leave,
                     q, qs_e, qs_b, lp, lps_e, lps_b, lps_n, r, r_s, d, d_s, s, s_s, out, N, B, gamma, min_v,
                     inv_delta, *constexprs)
        return out

    return fast
