"""Inputs: float32 host arrays per (case, seed), and the same values as torch tensors / JAX arrays in the case's
memory layout and log-prob dtype."""

from __future__ import annotations

import numpy as np

from bench.common import GEN_ROWS, repeated_inputs
from bench.harness.cases import HarnessCase
from bench.harness.frameworks import TORCH_DTYPES, jax, jnp, torch, torch_device

ROW_ARGS = ("reward", "terminated", "next_alpha_log_pi")


def host_inputs(case: HarnessCase, seed: int) -> dict[str, np.ndarray]:
    """float32 numpy inputs from shared_spec.make_inputs (above GEN_ROWS rows, a generated block repeated:
    ``bench.common.repeated_inputs``). Per-row inputs are (B,) here; `reward_shape` is applied per framework."""
    return repeated_inputs(case.B, case.kind, case.N, case.E, seed=seed, block=GEN_ROWS)


def round_log_probs(x: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The inputs with log-probs rounded to `dtype` (and back to float32): what a low-precision run actually reads."""
    if dtype == "float32":
        return x
    lp = torch.from_numpy(np.ascontiguousarray(x["next_log_probs"])).to(TORCH_DTYPES[dtype]).float().numpy()
    return dict(x, next_log_probs=lp)


def _nan_filled(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=torch.float32, device=device)


def _torch_view(name: str, a: np.ndarray, case: HarnessCase, device: torch.device) -> torch.Tensor:
    """One input in the case's layout (float32; log-probs cast to the case dtype afterwards)."""
    src = torch.from_numpy(np.ascontiguousarray(a)).to(device)  # a copy on CUDA; cloned below on CPU
    B = case.B
    per_row = name in ROW_ARGS
    if per_row and case.reward_shape == "B1":
        src = src.reshape(B, 1)
    if case.layout == "contiguous":
        return src.clone()
    if case.layout == "chunk":  # upstream: x.chunk(2, dim=1)[1] of (E, 2B[, N]); per-row rows B..2B of (2B[, 1])
        dim = 0 if per_row else 1
        big = torch.cat([_nan_filled(tuple(src.shape), device), src], dim=dim)
        return big.chunk(2, dim=dim)[1]
    if case.layout == "transposed":
        if name == "next_log_probs":  # stored (N, E, B): strides (B, 1, E * B) after the permute
            return src.permute(2, 0, 1).contiguous().permute(1, 2, 0)
        if name == "next_qs":  # stored (B, E)
            return src.t().contiguous().t()
        wide = _nan_filled((B, 3), device)  # a column of a (B, 3) buffer: stride 3
        wide[:, 1] = src.reshape(B)
        return wide[:, 1:2] if case.reward_shape == "B1" else wide[:, 1]
    flat = _nan_filled((src.numel() + 5,), device)  # "offset"
    flat[5:] = src.reshape(-1)
    return flat[5:].view(tuple(src.shape))


def to_torch(x: dict[str, np.ndarray], case: HarnessCase, device: torch.device | None = None) -> dict:
    """Fresh torch tensors (never sharing memory with `x`) in the case's layout and log-prob dtype."""
    device = torch_device() if device is None else device
    out = {k: _torch_view(k, v, case, device) for k, v in x.items()}
    if case.dtype != "float32":
        lp = out["next_log_probs"]
        big = lp._base if lp._base is not None else lp
        # Keep the layout: cast the whole backing tensor, then take the same view of it.
        cast = big.to(TORCH_DTYPES[case.dtype])
        out["next_log_probs"] = cast.as_strided(lp.shape, lp.stride(), lp.storage_offset())
    return out


def to_jax(x: dict[str, np.ndarray], case: HarnessCase) -> dict:
    """Device arrays for JAX: the same values and shapes; non-contiguous layouts realised by jnp slicing/transposes."""
    dev = jax.devices()[0]
    out = {}
    for k, v in x.items():
        a = jax.device_put(np.ascontiguousarray(v), dev)
        if case.layout == "chunk":
            a = jnp.concatenate([jnp.full_like(a, jnp.nan), a], axis=0 if k in ROW_ARGS else 1)
            a = a[case.B:] if k in ROW_ARGS else a[:, case.B:]
        elif case.layout == "transposed" and a.ndim >= 2:
            axes = (1, 2, 0) if a.ndim == 3 else (1, 0)
            back = (2, 0, 1) if a.ndim == 3 else (1, 0)
            a = jnp.transpose(jnp.transpose(a, back), axes)
        if k in ROW_ARGS and case.reward_shape == "B1":
            a = a.reshape(case.B, 1)
        out[k] = a
    out["next_log_probs"] = out["next_log_probs"].astype(jnp.dtype(case.dtype))
    return out

