"""The kernel's JAX entry point compiled for jaxlib's Triton kernel-call handler (no torch, no JAX imported here).

JAX's "triton" backend (jax_impl/triton_backend.py) calls `categorical_td_target_kernel_jax` through the XLA custom
call that jaxlib's CUDA plugin registers for Triton kernels, `triton_kernel_call_ffi` (a typed-FFI handler, jaxlib
>= 0.10.1, marked compatible with XLA command buffers). The call carries the whole launch in one string attribute,
`opaque`: a zlib-compressed `jax_triton.TritonAnyKernelCall` protocol buffer (jaxlib/gpu/triton.proto) holding the
kernel's PTX, name, warps and shared memory, the grid and, per kernel parameter in order, either an array (the next
XLA buffer: inputs, then the output) or a scalar value. jaxlib compiles the PTX with ptxas at the first launch and
keeps the module per PTX; every later launch looks the call up by its opaque string.

- `compile_kernel`: pip Triton compiles the entry point for `sm_<cc>` with the pinned launch configuration
  (`shared_spec.launch_config.kernel_config`, passed in as constexprs and warps), the same compiler and options as
  the torch backend's launch; every pointer is specialised as 16-byte aligned (XLA buffers are) and the stride of 1
  along N as a constant (contiguous JAX arrays). The PTX is built without line information (TRITON_DISABLE_LINE_INFO
  for this compilation only): its .loc directives and DWARF sections are most of the text, and the opaque string is
  hashed and compared on every launch that runs outside a command buffer.
- `kernel_call_opaque`: the serialised call (this module encodes the protocol buffer itself, so the custom call can
  be built, and checked, on a machine without the CUDA plugin; `python -m bench kernel-speed` on a GPU compares it
  with jaxlib's own serialisation).
"""

from __future__ import annotations

import functools
import os
import struct
import zlib
from typing import NamedTuple

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from triton_kernels.categorical_td_target import categorical_td_target_kernel_jax

__all__ = ["ARG_DTYPES", "CONSTANT_SCALARS", "POINTER_DIVISIBILITY", "TARGET", "CompiledKernel", "compile_kernel",
           "kernel_call_opaque", "kernel_parameters", "serialize_kernel_call"]

TARGET = "triton_kernel_call_ffi"  # jaxlib's typed-FFI Triton kernel-call handler (jaxlib/gpu/triton_kernels.cc)
POINTER_DIVISIBILITY = 16  # XLA buffers are at least 16-byte aligned; jaxlib checks it at each launch
# Scalars compiled in as constants (contiguous JAX arrays: unit stride along N).
CONSTANT_SCALARS = ("lp_stride_n",)
_POINTERS = ("q_ptr", "lp_ptr", "r_ptr", "d_ptr", "s_ptr", "gamma_ptr", "out_ptr")
_FLOATS = ("min_v", "inv_delta")
ARG_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # log-prob dtype name -> Triton's


class CompiledKernel(NamedTuple):
    name: str  # the kernel function's name in the PTX
    ptx: str
    shared: int  # bytes of shared memory per program
    num_warps: int
    cc: int  # compute capability, major * 10 + minor


def _int_type(v: int) -> str:
    """Triton's type of an integer argument (as Triton and jaxlib size them)."""
    if -(2**31) <= v < 2**31:
        return "i32"
    if -(2**63) <= v < 2**63:
        return "i64"
    raise ValueError(f"integer argument {v} does not fit int64")


@functools.lru_cache(maxsize=128)
def _compile(cc: int, lp_dtype: str, num_warps: int, constexprs: tuple, int_types: tuple) -> CompiledKernel:
    fn = categorical_td_target_kernel_jax
    types = dict(int_types)
    const = dict(constexprs)
    sig = {}
    for name in fn.arg_names:
        if name in const:
            sig[name] = "constexpr"
        elif name == "lp_ptr":
            sig[name] = f"*{ARG_DTYPES[lp_dtype]}"
        elif name in _POINTERS:
            sig[name] = "*fp32"
        elif name in _FLOATS:
            sig[name] = "fp32"
        else:
            sig[name] = types[name]
    attrs = {(fn.arg_names.index(p),): [["tt.divisibility", POINTER_DIVISIBILITY]] for p in _POINTERS}
    src = ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs)
    with knobs.compilation.scope():  # restores the knobs and the environment on exit
        os.environ["TRITON_DISABLE_LINE_INFO"] = "1"  # an environment knob: it enters Triton's cache key
        compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options={"num_warps": num_warps})
    return CompiledKernel(compiled.metadata.name, compiled.asm["ptx"], int(compiled.metadata.shared), num_warps, cc)


def compile_kernel(cc: int, lp_dtype: str, num_warps: int, scalars: dict, constexprs: dict) -> CompiledKernel:
    """`categorical_td_target_kernel_jax` compiled by pip Triton for `sm_<cc>` (cached per configuration).

    Args:
        cc: compute capability as major * 10 + minor (90 on an H100 / H200).
        lp_dtype: the log-probs' dtype name ("float32", "bfloat16", "float16").
        num_warps: warps per program (the pinned configuration's).
        scalars: the integer arguments by parameter name (jax_impl.triton_backend.launch_params' "scalars"); those of
            CONSTANT_SCALARS are compiled in as constants, the others are runtime arguments typed by their value.
        constexprs: the kernel's constexpr arguments by name (ROW_OFFSET, E, N, BLOCK_N, BR, RPP, Q).
    """
    const = dict(constexprs, **{k: int(scalars[k]) for k in CONSTANT_SCALARS})
    int_types = tuple(sorted((k, _int_type(int(v))) for k, v in scalars.items() if k not in CONSTANT_SCALARS))
    return _compile(int(cc), lp_dtype, int(num_warps), tuple(sorted(const.items())), int_types)


def kernel_parameters(scalars: dict, min_v: float, inv_delta: float) -> list[tuple[str, object]]:
    """The launch's parameters in the kernel's order, as jaxlib's handler takes them: ("array", divisibility) for
    each pointer (XLA passes the buffers in this order: the inputs q, lp, r, d, s, gamma, then the output), (type,
    value) for each runtime scalar; constexprs and CONSTANT_SCALARS are not parameters."""
    params: list[tuple[str, object]] = []
    for name in categorical_td_target_kernel_jax.arg_names:
        if name in _POINTERS:
            params.append(("array", POINTER_DIVISIBILITY))
        elif name in _FLOATS:
            params.append(("fp32", float({"min_v": min_v, "inv_delta": inv_delta}[name])))
        elif name in scalars and name not in CONSTANT_SCALARS:
            params.append((_int_type(int(scalars[name])), int(scalars[name])))
    return params


# ----------------------------------------------------------------------------------- protocol buffer encoding
# proto3 wire format: a field is a varint tag (number << 3 | wire type) and its value; wire type 0 = varint, 1 = 64
# bits, 2 = length-delimited, 5 = 32 bits. Fields are written in field-number order, and scalar fields holding
# their default (0, "") are left out, except members of a oneof and fields marked optional, as protobuf's C++
# serialiser does (so the bytes equal jaxlib's own `to_proto`).


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative integers as 64-bit two's complement (ten bytes), as protobuf encodes int32/int64
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _uint(number: int, value: int, always: bool = False) -> bytes:
    return _tag(number, 0) + _varint(value) if value or always else b""


def _bytes(number: int, value: bytes, always: bool = False) -> bytes:
    return _tag(number, 2) + _varint(len(value)) + value if value or always else b""


def _parameter(kind: str, value) -> bytes:
    """One jax_triton.TritonKernelCall.Parameter (a oneof: written even when zero)."""
    if kind == "array":  # Array{bytes_to_zero = 1 (0: nothing zeroed), ptr_divisibility = 2}
        return _bytes(1, _uint(2, int(value)), always=True)
    if kind == "i32":
        return _uint(3, int(value), always=True)
    if kind == "i64":
        return _uint(5, int(value), always=True)
    if kind == "fp32":
        return _tag(7, 5) + struct.pack("<f", value)
    raise ValueError(f"unsupported parameter kind {kind!r}")


def serialize_kernel_call(kernel: CompiledKernel, grid: tuple[int, ...], params: list[tuple[str, object]],
                          name: str = "") -> bytes:
    """The serialised jax_triton.TritonAnyKernelCall (uncompressed) of one launch: TritonKernel {kernel_name = 1,
    num_warps = 2, shared_mem_bytes = 3, ptx = 4, ttir = 5 (left empty: jaxlib launches the PTX), compute_capability
    = 6, num_ctas = 10}, TritonKernelCall {kernel = 1, grid_0..2 = 2..4, parameters = 5}, TritonAnyKernelCall
    {kernel_call = 1, metadata = 3, name = 4}."""
    g = tuple(grid) + (1,) * (3 - len(grid))
    k = (_bytes(1, kernel.name.encode()) + _uint(2, kernel.num_warps) + _uint(3, kernel.shared)
         + _bytes(4, kernel.ptx.encode()) + _uint(6, kernel.cc) + _uint(10, 1, always=True))
    call = _bytes(1, k, always=True) + _uint(2, g[0]) + _uint(3, g[1]) + _uint(4, g[2])
    call += b"".join(_bytes(5, _parameter(kind, v), always=True) for kind, v in params)
    return _bytes(1, call, always=True) + _bytes(4, name.encode())


def kernel_call_opaque(kernel: CompiledKernel, grid: tuple[int, ...], params: list[tuple[str, object]],
                       name: str = "") -> bytes:
    """The handler's `opaque` attribute: `serialize_kernel_call`, zlib-compressed."""
    return zlib.compress(serialize_kernel_call(kernel, grid, params, name))
