"""Lowers the "triton" backend's custom call for CUDA on a CPU-only machine and prints what it holds.

Run by tests/test_jax_triton.py in a subprocess without TRITON_INTERPRET (the lowering compiles the JIT function to
PTX with pip Triton, sm_90). Lowers a `lax.scan` of dependent calls, finds the `triton_kernel_call_ffi` custom call in
the StableHLO text, unescapes its `opaque` attribute and decodes it as jaxlib's `jax_triton.TritonAnyKernelCall`
protocol buffer with google.protobuf (a descriptor built from jaxlib/gpu/triton.proto's fields, independent of
triton_kernels.xla_call's encoder); also re-serialises the decoded message with protobuf to compare the bytes, and
compiles the torch entry point (triton_kernels.aot) at the same configuration, to count the same instructions.
Prints one JSON line per configuration.
"""

from __future__ import annotations

import json
import os
import re
import sys
import zlib

assert os.environ.get("TRITON_INTERPRET", "0") != "1", "run without TRITON_INTERPRET"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory  # noqa: E402

from jax_impl import triton_backend as tb  # noqa: E402
from triton_kernels.aot import compile_kernel as compile_torch_entry  # noqa: E402
from triton_kernels.xla_call import compile_kernel  # noqa: E402

OPS = ("ex2.approx.ftz.f32", "rcp.approx.ftz.f32", "fma.rn.f32", "mul.rn.f32", "cvt.rzi.s64.f32", "add.s64")
F = descriptor_pb2.FieldDescriptorProto


def _messages():
    """jax_triton.TritonAnyKernelCall and its parts, declared field by field as in jaxlib/gpu/triton.proto."""
    fd = descriptor_pb2.FileDescriptorProto(name="triton_test.proto", package="jax_triton", syntax="proto3")

    def message(parent, name, fields, oneof=None):
        m = parent.add()
        m.name = name
        if oneof:
            m.oneof_decl.add(name=oneof)
        for fname, number, ftype, extra in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=F.LABEL_OPTIONAL)
            if ftype == F.TYPE_MESSAGE:
                f.type_name = extra
            elif extra == "repeated":
                f.label = F.LABEL_REPEATED
            if oneof and extra != "plain":
                f.oneof_index = 0
        return m

    message(fd.message_type, "TritonKernel", [
        ("kernel_name", 1, F.TYPE_STRING, None), ("num_warps", 2, F.TYPE_UINT32, None),
        ("shared_mem_bytes", 3, F.TYPE_UINT32, None), ("ptx", 4, F.TYPE_STRING, None),
        ("ttir", 5, F.TYPE_STRING, None), ("compute_capability", 6, F.TYPE_UINT32, None),
        ("num_ctas", 10, F.TYPE_UINT32, None)])
    call = message(fd.message_type, "TritonKernelCall", [
        ("kernel", 1, F.TYPE_MESSAGE, ".jax_triton.TritonKernel"), ("grid_0", 2, F.TYPE_UINT32, None),
        ("grid_1", 3, F.TYPE_UINT32, None), ("grid_2", 4, F.TYPE_UINT32, None),
        ("parameters", 5, F.TYPE_MESSAGE, ".jax_triton.TritonKernelCall.Parameter")])
    call.field[-1].label = F.LABEL_REPEATED
    param = message(call.nested_type, "Parameter", [
        ("array", 1, F.TYPE_MESSAGE, ".jax_triton.TritonKernelCall.Parameter.Array"), ("bool_", 2, F.TYPE_BOOL, None),
        ("i32", 3, F.TYPE_INT32, None), ("u32", 4, F.TYPE_UINT32, None), ("i64", 5, F.TYPE_INT64, None),
        ("u64", 6, F.TYPE_UINT64, None), ("f32", 7, F.TYPE_FLOAT, None), ("f64", 8, F.TYPE_DOUBLE, None)],
        oneof="value")
    message(param.nested_type, "Array", [("bytes_to_zero", 1, F.TYPE_UINT64, None),
                                         ("ptr_divisibility", 2, F.TYPE_UINT64, None)])
    message(fd.message_type, "TritonAnyKernelCall", [
        ("kernel_call", 1, F.TYPE_MESSAGE, ".jax_triton.TritonKernelCall"), ("metadata", 3, F.TYPE_BYTES, "plain"),
        ("name", 4, F.TYPE_STRING, "plain")], oneof="value")
    kernel = fd.message_type[0]
    kernel.field[-1].proto3_optional = True  # optional uint32 num_ctas = 10
    kernel.oneof_decl.add(name="_num_ctas")
    kernel.field[-1].oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("jax_triton.TritonAnyKernelCall"))


def _unescape(text: str) -> bytes:
    """An MLIR string attribute's printed bytes: \\XX hex escapes, \\\\ and \\" (the rest printable ASCII)."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and re.fullmatch(r"[0-9A-Fa-f]{2}", text[i + 1:i + 3] or ""):
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
        elif c == "\\":
            out.append(ord({"n": "\n", "t": "\t"}.get(text[i + 1], text[i + 1])))
            i += 2
        else:
            out.append(ord(c))
            i += 1
    return bytes(out)


def lower(E: int, B: int, N: int, off: int, dtype: str) -> dict:
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
    calls = [line.strip() for line in text.splitlines() if "stablehlo.custom_call" in line]
    (call,) = calls
    opaque = _unescape(re.search(r'opaque = "((?:[^"\\]|\\.)*)"', call).group(1))
    raw = zlib.decompress(opaque)
    msg = _messages()()
    msg.ParseFromString(raw)
    decoded = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    ptx = decoded["kernel_call"]["kernel"].pop("ptx")
    exp = tb.launch_params(E, B, N, off, dtype)
    compiled = compile_kernel(90, dtype, exp["num_warps"], exp["scalars"], exp["constexprs"])
    torch_ptx = compile_torch_entry(N=N, E=E, B=B, lp_dtype={"float32": "fp32", "bfloat16": "bf16"}[dtype])[0]
    return dict(call=re.sub(r'opaque = "(?:[^"\\]|\\.)*"', 'opaque = "..."', call), in_while="stablehlo.while" in text,
                decoded=decoded, ptx_is_compiled=ptx == compiled.ptx, shared=compiled.shared,
                protobuf_bytes_equal=msg.SerializeToString(deterministic=True) == raw, line_info=".loc" in ptx,
                ops={op: ptx.count(op) for op in OPS}, torch_ops={op: torch_ptx.asm["ptx"].count(op) for op in OPS},
                gamma_load="ld.global" in ptx, expected=exp, opaque_bytes=len(opaque))


if __name__ == "__main__":
    tb.compute_capability = lambda: 90  # this machine has no GPU: compile for sm_90 (an H100 / H200)
    for spec in sys.argv[1:]:
        E, B, N, off, dtype = spec.split(",")
        print(json.dumps(lower(int(E), int(B), int(N), int(off), dtype), default=list), flush=True)
