"""Host-side launch of the Triton kernel: output allocation, the pinned configuration, grid and arguments."""

from __future__ import annotations

import os

import torch

from shared_spec.launch_config import kernel_config

__all__ = ["INTERPRET", "launch"]

# Triton reads the same variable when it decorates the kernel: under TRITON_INTERPRET=1 it runs on CPU tensors.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def launch(launcher, next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma: float, min_v: float,
           inv_delta: float, config: dict | None = None) -> torch.Tensor:
    """Allocate the (B, N) fp32 output and launch the kernel through `launcher` (the JIT function or wrap_triton).

    Args:
        launcher: `categorical_td_target_kernel`, or `torch.library.wrap_triton` of it inside the registered op.
        next_qs (E, B), next_log_probs (E, B, N), reward / terminated / next_alpha_log_pi (B,) or (B, 1): validated
            tensors on one device, any strides (per-row inputs index rows with stride(0)).
        gamma, min_v, inv_delta: the fp32 scalars of SPEC.md section 3 (as Python floats).
        config: overrides of the pinned {"BR", "num_warps"} (benchmark sweeps only; BLOCK_N is derived from N).

    Returns:
        (B, N) float32, contiguous.
    """
    E, B, N = next_log_probs.shape
    out = torch.empty((B, N), dtype=torch.float32, device=next_log_probs.device)
    cfg = kernel_config(B, N, INTERPRET)
    if config:
        cfg = dict(cfg, **config)
    grid = ((B + cfg["BR"] - 1) // cfg["BR"],)  # plain integer ceil division: triton.cdiv costs ~2 us per call
    q_stride, lp_stride = next_qs.stride(), next_log_probs.stride()  # one call per tensor: host time counts here
    launcher[grid](
        next_qs, q_stride[0], q_stride[1],
        next_log_probs, lp_stride[0], lp_stride[1], lp_stride[2],
        reward, reward.stride(0),
        terminated, terminated.stride(0),
        next_alpha_log_pi, next_alpha_log_pi.stride(0),
        out, out.stride(0),
        B, gamma, min_v, inv_delta,
        E=E, N=N, BLOCK_N=cfg["BLOCK_N"], BR=cfg["BR"], num_warps=cfg["num_warps"],
    )
    return out
