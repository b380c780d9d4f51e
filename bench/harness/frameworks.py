"""torch (always) and JAX (optional: when it is missing or broken, its implementations are skipped with the reason),
the torch device, and the helpers that treat outputs of both frameworks alike."""

from __future__ import annotations

import numpy as np
import torch  # imported before jax: the order used on the H200

import torch_impl
import torch_impl.dispatch as torch_dispatch

try:
    import jax
    import jax.numpy as jnp

    import jax_impl
    import jax_impl.dispatch as jax_dispatch

    JAX_IMPORT_ERROR: str | None = None
except Exception as _exc:  # noqa: BLE001  JAX missing or broken: its implementations are skipped with this reason
    jax = jnp = jax_impl = jax_dispatch = None  # type: ignore[assignment]
    JAX_IMPORT_ERROR = f"{type(_exc).__name__}: {_exc}"

__all__ = ["JAX_IMPORT_ERROR", "TORCH_DTYPES", "bits", "jax", "jax_dispatch", "jax_impl", "jnp", "out_dtype",
           "sync", "to_numpy", "torch", "torch_device", "torch_dispatch", "torch_impl"]

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_device() -> torch.device:
    """CUDA if present, else CPU (the Triton interpreter runs CPU tensors)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync(out: object) -> object:
    """Wait until ``out`` (a torch tensor or a JAX array) is computed; returns it."""
    if isinstance(out, torch.Tensor):
        if out.is_cuda:
            torch.cuda.synchronize()
    elif hasattr(out, "block_until_ready"):
        out.block_until_ready()
    return out


def to_numpy(out: object) -> np.ndarray:
    """The output as a host numpy array, dtype preserved (bf16 -> float32 for inspection only)."""
    if isinstance(out, torch.Tensor):
        t = out.detach()
        return (t.float() if t.dtype == torch.bfloat16 else t).cpu().numpy()
    return np.asarray(out)


def out_dtype(out: object) -> str:
    """The output's dtype name ("float32", ...) in either framework."""
    return str(out.dtype).replace("torch.", "")


def bits(a: np.ndarray) -> np.ndarray:
    """The array's bytes, for bitwise comparison (NaN == NaN when the bits are the same)."""
    return np.ascontiguousarray(a).view(np.uint8)
