"""The "triton" backend: its gate, and the fused kernel registered as torch.ops.flashsac.categorical_td_target.

The twin of jax_impl/ops.py. The kernel and its launch live in triton_kernels/; torch_impl/dispatch.py registers
`categorical_td_target_triton` and `triton_gate` (an ImportError here becomes the fallback reason).
"""

from __future__ import annotations

import torch
import triton

from shared_spec.launch_config import MAX_E, MAX_N
from torch_impl.reference import support_constants
from triton_kernels import INTERPRET, categorical_td_target_kernel, launch
from triton_kernels.launch import FastLauncher, fast_launcher

__all__ = ["INTERPRET", "TESTED_TRITON", "categorical_td_target_triton", "eager_launcher", "triton_gate"]

# The pip triton versions this kernel was validated with (CPU interpreter: 3.6.0; H200: 3.6.0 under torch 2.11).
TESTED_TRITON = ("3.6",)

_CAPABILITY: dict[int, tuple[int, int]] = {}  # cached per device index: no runtime query inside the op


def _capability(index: int | None) -> tuple[int, int]:
    index = torch.cuda.current_device() if index is None else index
    if index not in _CAPABILITY:
        _CAPABILITY[index] = torch.cuda.get_device_capability(index)
    return _CAPABILITY[index]


def triton_gate(key: tuple) -> str | None:
    """Why the kernel cannot run a configuration (device type, device index, dtype, E, N, needs_grad), or None."""
    device_type, index, dtype, E, N, needs_grad = key
    if not triton.__version__.startswith(TESTED_TRITON):
        return f"triton {triton.__version__} is outside the tested range {TESTED_TRITON}"
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return f"log-prob dtype {dtype} is not supported (float32, bfloat16, float16)"
    if not 2 <= N <= MAX_N:
        return f"N = {N} atoms is outside the supported range [2, {MAX_N}]"
    if not 1 <= E <= MAX_E:
        return f"E = {E} critics is outside the supported range [1, {MAX_E}]"
    if needs_grad:
        return "an input requires grad under grad mode (the kernel is forward-only; the target is stop-gradient)"
    if INTERPRET:
        return None if device_type == "cpu" else f"TRITON_INTERPRET=1 runs CPU tensors only, got {device_type}"
    if device_type != "cuda":
        return f"the device is {device_type}: the kernel needs CUDA (set TRITON_INTERPRET=1 to interpret on CPU)"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    major, minor = _capability(index)
    if major < 8:
        return f"compute capability {major}.{minor} < 8.0"
    return None


@torch.library.triton_op("flashsac::categorical_td_target", mutates_args={})
def _categorical_td_target_op(next_qs: torch.Tensor, next_log_probs: torch.Tensor, reward: torch.Tensor,
                              terminated: torch.Tensor, next_alpha_log_pi: torch.Tensor, gamma: float, min_v: float,
                              inv_delta: float) -> torch.Tensor:
    return launch(torch.library.wrap_triton(categorical_td_target_kernel), next_qs, next_log_probs, reward,
                  terminated, next_alpha_log_pi, gamma, min_v, inv_delta)


def categorical_td_target_triton(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma: float,
                                 min_v: float, max_v: float) -> torch.Tensor:
    """Run the fused kernel (inputs validated and gated by torch_impl/dispatch.py). Returns (B, N) fp32.

    Under torch.compile / export the registered op is called, so Inductor sees the kernel (no graph break). In eager
    mode the same kernel is launched directly: the custom-op dispatch would add host time to a launch-bound op.
    """
    # (B,) and (B, 1) per-row inputs both index rows with stride(0): no reshape needed.
    if torch.compiler.is_compiling():
        mv, inv_delta = support_constants(next_log_probs.shape[2], min_v, max_v)
        return torch.ops.flashsac.categorical_td_target(next_qs, next_log_probs, reward, terminated,
                                                        next_alpha_log_pi, float(gamma), mv, inv_delta)
    mv, inv_delta = support_constants.eager(next_log_probs.shape[2], min_v, max_v)
    return launch(categorical_td_target_kernel, next_qs, next_log_probs, reward, terminated, next_alpha_log_pi,
                  float(gamma), mv, inv_delta)


def eager_launcher(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi) -> FastLauncher | None:
    """The kernel's fast launcher for these inputs' launch signature once `categorical_td_target_triton` launched
    them eagerly on the GPU (else None): `fast(*tensors, gamma, min_v, inv_delta)` with support_constants' min_v and
    1 / Delta is that eager call without its Python around the launch (torch_impl/dispatch.py keeps it per input
    signature)."""
    return fast_launcher(categorical_td_target_kernel, next_qs, next_log_probs, reward, terminated,
                         next_alpha_log_pi)
