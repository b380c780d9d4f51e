"""Lowers the "triton" backend's jax-triton custom call for CUDA on a CPU-only machine and prints what it holds.

Run by tests/test_jax_triton.py in a subprocess without TRITON_INTERPRET (jax-triton needs the JIT function). This
jaxlib has no CUDA Triton support, so jaxlib.gpu_triton's kernel-call builders are replaced by recorders: jax-triton
still compiles the kernel to PTX with pip Triton (sm_90) and emits the XLA custom call, and the recorders keep the
kernel, grid and parameters it would serialise. Also compiles the torch entry point (triton_kernels.aot) at the same
configuration, to count the same instructions. Prints one JSON line per configuration.
"""

from __future__ import annotations

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET", "0") != "1", "run without TRITON_INTERPRET"
os.environ["JAX_PLATFORMS"] = "cpu"

import jaxlib.gpu_triton as lib  # noqa: E402

RECORD: dict[str, list] = {"kernels": [], "calls": []}


class _Kernel:
    def __init__(self, name, num_warps, num_ctas, shared_mem, ptx, ttir, cc):
        RECORD["kernels"].append(dict(name=name, num_warps=num_warps, num_ctas=num_ctas, cc=cc, ptx=ptx))


class _Call:
    def __init__(self, kernel, g0, g1, g2, params):
        RECORD["calls"].append(dict(grid=[g0, g1, g2], params=params))

    def to_proto(self, name, metadata):
        return b"recorded"


lib.get_compute_capability = lambda device: 90
lib.get_serialized_metadata = lambda *a: b""
lib.TritonKernel, lib.TritonKernelCall = _Kernel, _Call
lib.create_array_parameter = lambda zeroed_bytes, divisibility: ["array", zeroed_bytes, divisibility]
lib.create_scalar_parameter = lambda value, dtype: ["scalar", value, dtype]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jax_impl import triton_backend as tb  # noqa: E402
from triton_kernels.aot import compile_kernel  # noqa: E402

OPS = ("ex2.approx.ftz.f32", "rcp.approx.ftz.f32", "fma.rn.f32", "mul.rn.f32", "cvt.rzi.s64.f32", "add.s64")


def lower(E: int, B: int, N: int, off: int, dtype: str) -> dict:
    RECORD["kernels"].clear()
    RECORD["calls"].clear()
    args = (jax.ShapeDtypeStruct((E, B + off), jnp.float32), jax.ShapeDtypeStruct((E, B + off, N), jnp.dtype(dtype)),
            jax.ShapeDtypeStruct((B,), jnp.float32), jax.ShapeDtypeStruct((B, 1), jnp.float32),
            jax.ShapeDtypeStruct((B,), jnp.float32))

    def step(carry, gamma):  # dependent calls with a traced gamma, as the agents' update loop
        q, lp, r, d, s = carry
        out = tb.categorical_td_target_triton(q, lp, r, d, s, gamma, -5.0, 5.0, row_offset=off or None,
                                              interpret=False)
        return (q, lp, r + out[:, 0], d, s), out.sum()

    def program(q, lp, r, d, s, gammas):
        return jax.lax.scan(step, (q, lp, r, d, s), gammas)[1]

    text = jax.jit(program).trace(*args, jax.ShapeDtypeStruct((3,), jnp.float32)).lower(
        lowering_platforms=("cuda",)).as_text()
    kernel = dict(RECORD["kernels"][0])
    ptx = kernel.pop("ptx")
    torch_ptx = compile_kernel(N=N, E=E, B=B, lp_dtype={"float32": "fp32", "bfloat16": "bf16"}[dtype])[0].asm["ptx"]
    return dict(custom_calls=[line.strip() for line in text.splitlines() if "@triton_kernel_call" in line],
                in_while="stablehlo.while" in text, kernel=kernel, calls=list(RECORD["calls"]),
                ops={op: ptx.count(op) for op in OPS}, torch_ops={op: torch_ptx.count(op) for op in OPS},
                gamma_load="ld.global" in ptx, expected=tb.launch_params(E, B, N, off, dtype),
                cache_dir=os.environ.get("TRITON_CACHE_DIR"))


if __name__ == "__main__":
    for spec in sys.argv[1:]:
        E, B, N, off, dtype = spec.split(",")
        print(json.dumps(lower(int(E), int(B), int(N), int(off), dtype), default=list), flush=True)
