"""One kernel backend through its public op with a strict backend: torch (`torch_impl.categorical_td_target`) or JAX
(`jax_impl.categorical_td_target`); each imports only its own framework, when first used."""

from __future__ import annotations

import platform
from typing import Any

import numpy as np

__all__ = ["Runner", "versions"]


def versions() -> dict[str, str]:
    """Python and the installed torch, triton, jax, jaxlib and jax-triton versions (package metadata only)."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("torch", "triton", "jax", "jaxlib", "jax-triton"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


class Runner:
    """Runs one backend ("torch/triton", "jax/pallas", ...) on numpy inputs, on the GPU (`gpu`) or, interpreted, on
    the CPU, and returns its (B, N) float32 output as numpy."""

    def __init__(self, backend: str, gpu: bool) -> None:
        self.backend = backend
        self.framework, self.name = backend.split("/")
        self.gpu = gpu
        if self.framework == "torch":
            import torch

            import torch_impl

            self.torch, self.op = torch, torch_impl.categorical_td_target
        else:
            import jax
            import jax.numpy as jnp

            import jax_impl

            self.jax, self.jnp, self.op = jax, jnp, jax_impl.categorical_td_target

    def device(self) -> str:
        """The device this backend runs on: the GPU's name (as the framework reports it), or "cpu (interpreters)"."""
        if not self.gpu:
            return "cpu (interpreters)"
        if self.framework == "torch":
            return self.torch.cuda.get_device_name(0)
        return str(self.jax.devices()[0].device_kind)

    def __call__(self, x: dict[str, np.ndarray], gamma: float, dtype: str, strided: bool) -> np.ndarray:
        B = x["reward"].shape[0]
        if self.framework == "torch":
            torch = self.torch
            dev = "cuda" if self.gpu else "cpu"
            if strided:  # upstream's x.chunk(2, dim=1)[1]: views into (E, 2B[, N]) buffers with a decoy first half
                t: dict[str, Any] = {}
                for k, v in x.items():
                    axis = 1 if v.ndim >= 2 else 0
                    full = np.ascontiguousarray(np.concatenate([np.flip(v, axis), v], axis=axis))
                    t[k] = torch.from_numpy(full).to(dev).chunk(2, dim=axis)[1]
            else:
                t = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in x.items()}
            t["next_log_probs"] = t["next_log_probs"].to(getattr(torch, dtype))
            out = self.op(**t, gamma=gamma, backend=self.name, strict=True)
            return out.cpu().numpy()
        jnp = self.jnp
        j, rows = {k: jnp.asarray(v) for k, v in x.items()}, {}
        if strided:  # the whole (E, 2B[, N]) arrays, their second half read in place
            for k in ("next_qs", "next_log_probs"):
                j[k] = jnp.asarray(np.ascontiguousarray(np.concatenate([np.flip(x[k], 1), x[k]], axis=1)))
            rows = {"row_offset": B}
        j["next_log_probs"] = j["next_log_probs"].astype(getattr(jnp, dtype))
        return np.asarray(self.jax.device_get(self.op(**j, gamma=gamma, backend=self.name, strict=True, **rows)))
