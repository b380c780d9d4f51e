"""Host launch of the kernel's JAX entry point by Triton's interpreter (TRITON_INTERPRET=1, CPU).

jax_impl's "triton" backend calls `interpret` from a host callback: numpy arrays in, numpy array out, with the
arguments its custom call passes on the GPU (`categorical_td_target_kernel_jax`'s parameters). The interpreter runs on
torch CPU tensors, which is why this lives here and not in jax_impl (which never imports torch).
"""

from __future__ import annotations

import numpy as np
import torch

from triton_kernels.categorical_td_target import categorical_td_target_kernel_jax

__all__ = ["interpret"]


def _tensor(x) -> torch.Tensor:
    x = np.array(x)  # a writable host copy
    if x.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: torch reads its bits
        return torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def interpret(grid: tuple, num_warps: int, scalars: dict, constexprs: dict, min_v: float, inv_delta: float, q, lp, r,
              d, s, gamma) -> np.ndarray:
    """Launch `categorical_td_target_kernel_jax` interpreted on host copies of the arrays; returns the (B, N) fp32
    output. scalars / constexprs: the integer arguments and constexprs by parameter name (jax_impl's
    `triton_backend.launch_params`); min_v, inv_delta: the fp32 support constants as Python floats."""
    sc = scalars
    out = torch.empty((sc["B"], constexprs["N"]), dtype=torch.float32)
    categorical_td_target_kernel_jax[grid](
        _tensor(q), sc["q_stride_e"], sc["q_stride_b"], _tensor(lp), sc["lp_stride_e"], sc["lp_stride_b"],
        sc["lp_stride_n"], _tensor(r), sc["r_stride"], _tensor(d), sc["d_stride"], _tensor(s), sc["s_stride"],
        _tensor(gamma), sc["B"], float(min_v), float(inv_delta), sc["out_stride_b"], out,
        **constexprs, num_warps=num_warps)
    return out.numpy()
