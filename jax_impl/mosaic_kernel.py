"""Fused, deterministic Pallas kernel on the Mosaic GPU backend (Hopper and newer) for FlashSAC's categorical TD
target: the kernel and its `pallas_call` only (gate, self-test and registration: jax_impl/mosaic_ops.py).

The algorithm is the Triton kernel's (SPEC.md section 8) with one row per program (one warpgroup of 128 threads, the
row's NP = max(128, BLOCK_N) lanes in Mosaic GPU's strided register layout), and the same fp32 operations in the same
order (SPEC.md section 3), with the Triton kernel's PTX where it uses inline PTX: exp is `ex2.approx.ftz.f32(x *
fp32(log2 e))`, every product that meets an addition is `mul.rn.f32` or `fma.rn.f32`, and the edge atoms' exact sums
truncate each term with `cvt.rzi.s64.f32`, split it into its low 19 bits and the rest, sum both parts over the row
in int32 (exact in any order) and join them with the Triton kernel's `cvt.rn.f32.s64`, so the integers, and the sum,
are those of the Triton kernel. The inline PTX goes through `plgpu.inline_mgpu` (`llvm.inline_asm` on each register).
Mosaic GPU marks its own fp additions and multiplications contractible (LLVM may fuse a product into the next add),
so no plain product of this kernel meets an addition (tests/test_jax_mosaic.py checks the kernel's jaxpr).

Two differences of form, neither changing a bit:
- The interior atoms' windows are the dense form: every lane adds, for every source j = 0 .. N - 1 in ascending
  order, fma(p_j, w, acc) with the hat weight w of the unclamped b_j (p_j read from the probabilities staged in
  shared memory). Sources outside the run feeding atom k add p * 0 = +0, which changes nothing, so the sum equals
  the Triton kernel's window sum (SPEC.md 8: the window contains the run). It costs N steps a row where the Triton
  kernel takes about 3 (band rows); Mosaic GPU has no per-lane gather from shared memory.
- The hat weight is the first form of SPEC.md 8 (min(clamp((k + 1) - b), clamp(b - (k - 1)))) for every atom; for
  k >= 2 it gives the same bits as the Triton kernel's clamp(1 - |b - k|) (both equal the section-3 weight inside
  (k - 1, k + 1) and 0 outside).
Mosaic GPU loads and stores whole register arrays without lane masks, so the log-probs are read from rows of NP
elements (-inf padded by XLA when N < NP) and the target is written as (B, NP) rows (sliced to N by XLA when
N < NP): one extra copy of each when N is not a power of 2 >= 128.

In interpret mode (any platform) the same kernel body runs in Mosaic GPU's interpret mode (GMEM, SMEM, the
warpgroup's threads and barriers simulated on the CPU) with the Pallas-Triton kernel's interpret-mode arithmetic
(numpy's float32 exp, R(p * w) + acc for the accumulation, numpy int64 for the exact sums): the approximate and
rounded PTX instructions are not emulated, so the interpreted kernels agree bit for bit with each other on the CPU
(tests/test_jax_mosaic.py), and the PTX is checked in the CUDA cross-lowering.
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from shared_spec.launch_config import kernel_config
from shared_spec.reference import check_shapes
from shared_spec.support import CategoricalSupport

__all__ = ["KERNEL_NAME", "launch", "padded_lanes", "trace_count"]

# plgpu.load requires an index argument in JAX 0.10 (`load(ref, idx, layout=...)`); later JAX makes it optional and
# deprecated, or drops it (the ref's `.at[]` selects): `_load` passes it only where it is required.
_LOAD_PARAMS = inspect.signature(plgpu.load).parameters
_LOAD_NEEDS_IDX = "idx" in _LOAD_PARAMS and _LOAD_PARAMS["idx"].default is inspect.Parameter.empty
# The lowering semantics the kernel is written for: its registers are Mosaic GPU fragmented arrays (strided layout,
# `plgpu.layout_cast`, `inline_mgpu` on each register). It is set explicitly: Warpgroup semantics, the default
# of JAX >= 0.11, does not lower this kernel (a 0-d bitcast_convert_type lowers to a vector<f32> that its scalar check
# rejects; bool conversions fail in its dialect lowering).
LOWERING_SEMANTICS = plgpu.LoweringSemantics.Lane


def _load(ref, layout):
    """All of `ref` loaded into registers with `layout` (plgpu.load, with its index argument where required)."""
    return plgpu.load(ref, (), layout=layout) if _LOAD_NEEDS_IDX else plgpu.load(ref, layout=layout)


HALF = 19  # the exact sums' split (the Triton kernel's HALF)
FLT_MAX = 3.4028234663852886e38
_LOG2E = 1.4426950408889634  # rounded to fp32 as the Triton kernel does
KERNEL_NAME = "categorical_td_target_mosaic"
WARPGROUP = 128
# Flat int32 offsets: E * R * NP (and B * NP) must stay below MAX_FLAT; larger inputs are split over rows.
MAX_FLAT = 2**31 - 1
_trace_count = [0]

_LO_ASM = "{ .reg .b64 a; cvt.rzi.s64.f32 a, $1; cvt.u32.u64 $0, a; and.b32 $0, $0, 524287; }"
_HI_ASM = "{ .reg .b64 a; cvt.rzi.s64.f32 a, $1; shr.u64 a, a, 19; cvt.u32.u64 $0, a; }"
_JOIN_ASM = ("{ .reg .b64 a, b; cvt.u64.u32 a, $1; shl.b64 a, a, 19; cvt.u64.u32 b, $2; add.s64 a, a, b; "
             "cvt.rn.f32.s64 $0, a; }")


def trace_count() -> int:
    """How many times the kernel wrapper has been traced (one per new shape/dtype/static configuration)."""
    return _trace_count[0]


def padded_lanes(N: int) -> int:
    """NP: the lanes of a row in the kernel, max(128, the Triton kernel's BLOCK_N)."""
    return max(WARPGROUP, kernel_config(1, N, True)["BLOCK_N"])


def _ptx(text: str, out_dtype, constraints: str, *xs: jax.Array, NP: int) -> jax.Array:
    """One PTX instruction sequence per element of (NP,) arrays (`llvm.inline_asm` on each register of Mosaic GPU's
    strided layout); constraints as in PTX inline asm ("=f,f,f": an fp32 result and two fp32 operands)."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import llvm, vector

    layout = plgpu.Layout.WG_STRIDED((NP,), vec_size=1)

    @plgpu.inline_mgpu(arg_types=tuple(layout for _ in xs),
                       return_type=plgpu.ShapeDtypeStruct((NP,), out_dtype, layout=layout))
    def f(ctx, *arrs):
        del ctx
        out_ty = ir.F32Type.get() if out_dtype == jnp.float32 else ir.IntegerType.get_signless(32)

        def op(*vals):
            ty = vals[0].type
            if not isinstance(ty, ir.VectorType):
                return llvm.inline_asm(out_ty, list(vals), text, constraints)
            [n] = ir.VectorType(ty).shape
            res = llvm.mlir_undef(ir.VectorType.get([n], out_ty))
            for i in range(n):
                pos = ir.DenseI64ArrayAttr.get([i])
                e = llvm.inline_asm(out_ty, [vector.extract(v, dynamic_position=[], static_position=pos)
                                             for v in vals], text, constraints)
                res = vector.insert(e, res, dynamic_position=[], static_position=pos)
            return res

        signed = None if out_dtype == jnp.float32 else True
        return arrs[0]._pointwise(op, *arrs[1:], output_is_signed=signed)

    return f(*(_vec(x, NP, False) for x in xs))


def _vec(x, NP: int, interpret: bool) -> jax.Array:
    """x broadcast to an (NP,) array in the strided layout (a row value on every lane, as the Triton kernel's (BR, 1)
    per-row registers)."""
    x = jnp.broadcast_to(jnp.asarray(x), (NP,))
    return x if interpret else plgpu.layout_cast(x, plgpu.Layout.WG_STRIDED((NP,), vec_size=1))


def _round(x: jax.Array) -> jax.Array:
    """Identity on non-NaN values; stops FMA contraction in interpret mode (SPEC.md 3)."""
    return jnp.where(x != x, 0.0, x)


def _td_kernel(gamma_ref, q_ref, lp_ref, r_ref, d_ref, s_ref, out_ref, p_smem, *, B: int, R: int, E: int, N: int,
               NP: int, BLOCK_N: int, row_offset: int, min_v: float, inv_delta: float, interpret: bool):
    """One program: row `program_id` (SPEC.md 8 steps 1-4). Refs: gamma (1,) f32; q (E*R,) f32; lp (E*R*NP,)
    f32/bf16/f16 (rows of NP, -inf past N); r, d, s (B,) f32; out (B*NP,) f32; p_smem (NP,) f32 (the staged
    probabilities)."""
    f32 = jnp.float32
    inf = float("inf")

    def mul(a, b):  # a product that meets an addition: mul.rn.f32 (NaN kept); R in interpret mode
        return _round(a * b) if interpret else _ptx("mul.rn.f32 $0, $1, $2;", f32, "=f,f,f", a, b, NP=NP)

    def fma(a, b, acc):  # fma.rn.f32; in interpret mode the product is rounded first (the Triton interpreter's)
        return acc + _round(a * b) if interpret else _ptx("fma.rn.f32 $0, $1, $2, $3;", f32, "=f,f,f,f", a, b, acc,
                                                         NP=NP)

    def fma_nan(a, b, acc):  # the epilogue's fma, where a NaN a reaches the result
        return acc + a * b if interpret else _ptx("fma.rn.f32 $0, $1, $2, $3;", f32, "=f,f,f,f", a, b, acc, NP=NP)

    def clamp01(x):
        return jnp.minimum(jnp.maximum(x, 0.0), 1.0)

    def fixed_sum(x, inv_scale):
        # sum_j trunc(x_j) * inv_scale, exact up to one rounding (the Triton kernel's _fixed_sum, SPEC.md 8 step 2):
        # each term truncated to int64 and split; both parts summed in int32; joined in int64 and rounded once.
        if interpret:
            total = jax.pure_callback(_fixed_total_np, jax.ShapeDtypeStruct((), f32), x)
            return total * inv_scale
        lo = jnp.sum(_ptx(_LO_ASM, jnp.int32, "=r,f", x, NP=NP))
        hi = jnp.sum(_ptx(_HI_ASM, jnp.int32, "=r,f", x, NP=NP))
        return _ptx(_JOIN_ASM, f32, "=f,r,r", hi, lo, NP=NP) * inv_scale

    row = jax.lax.axis_index("row")
    gamma = gamma_ref[0]
    # 1. Min-mean critic (strict <: ties -> the first), the row scalars.
    best = q_ref[row_offset + row]
    sel = jnp.int32(0)
    bad = best != best
    for e in range(1, E):
        qe = q_ref[e * R + row_offset + row]
        bad = bad | (qe != qe)
        take = qe < best
        best = jnp.where(take, qe, best)
        sel = jnp.where(take, jnp.int32(e), sel)
    r = _vec(r_ref[row], NP, interpret)
    d = _vec(d_ref[row], NP, interpret)
    s = _vec(s_ref[row], NP, interpret)
    g = _vec(gamma, NP, interpret) * (1.0 - d)
    c = mul((r - min_v) + mul(g, min_v - s), inv_delta)
    c_raw = ((r - min_v) + g * (min_v - s)) * inv_delta if interpret else c
    bad = _vec(bad, NP, interpret) | (c_raw != c_raw) | (jnp.minimum(jnp.maximum(d, 0.0), 1.0) != d)
    bad = bad | ~((g >= 0.0) & (g <= FLT_MAX))
    live = ~bad & (g > 0.0)
    gl = jnp.where(live, g, 0.0)
    cs = jnp.where(live, c, -1.0)
    k_i = jax.lax.broadcasted_iota(jnp.int32, (NP,), 0) if interpret else plgpu.broadcasted_iota(
        jnp.int32, (NP,), 0, layout=plgpu.Layout.WG_STRIDED((NP,), vec_size=1))
    kf = k_i.astype(f32)

    # 2. The full-row pass (lane = source j): p_j staged in shared memory; the edge atoms' exact sums.
    base = (sel * R + (row_offset + row)) * NP
    if interpret:
        lp = lp_ref[pl.ds(base, NP)].astype(f32)
        p = jax.pure_callback(np.exp, jax.ShapeDtypeStruct((NP,), f32), lp)
    else:
        lp = _load(lp_ref.at[pl.ds(base, NP)], plgpu.Layout.WG_STRIDED((NP,), vec_size=1))
        p = _ptx("ex2.approx.ftz.f32 $0, $1;", f32, "=f,f", lp.astype(f32) * np.float32(_LOG2E), NP=NP)
    p_smem[...] = p
    m_bits = jnp.max(jax.lax.bitcast_convert_type(p, jnp.int32) & 0x7FFFFFFF)  # the bits of the row's max p
    bad = bad | (m_bits >= 0x7F800000)  # a NaN or +inf probability
    FIX = 32 - BLOCK_N.bit_length() + HALF
    shift = jnp.minimum(FIX - 1 - ((m_bits >> 23) - 127), 126)
    scale = jax.lax.bitcast_convert_type((shift + 127) << 23, f32)
    inv_scale = jax.lax.bitcast_convert_type((127 - shift) << 23, f32)
    b = cs + mul(gl, kf)  # unclamped positions
    pst = p * scale  # exact
    if interpret:
        pst = jnp.where(pst < inf, pst, 0.0)  # as in the Triton kernel's interpret mode (the row is NaN anyway)
    e_lo = fixed_sum(pst * clamp01(1.0 - b), inv_scale)
    e_hi = fixed_sum(pst * clamp01(b - (N - 2.0)), inv_scale)
    # The total mass overflows fp32 only if max p >= 2**(127 - log2 BLOCK_N); the test is exact for every row.
    bad = bad | ~(fixed_sum(pst, inv_scale) < inf)

    def hat(bj):
        return jnp.minimum(clamp01((kf + 1.0) - bj), clamp01(bj - (kf - 1.0)))

    # 3. Interior atoms: every source in ascending j adds fma(p_j, hat(b_j), acc); sources outside the run add +0.
    acc = _vec(0.0, NP, interpret)
    if N > 2:
        def step(j, acc):
            jf = _vec(j.astype(f32), NP, interpret)
            return fma(_vec(p_smem[j], NP, interpret), hat(cs + mul(gl, jf)), acc)

        acc = jax.lax.fori_loop(0, N, step, acc)

    # 4. Edges, the two-hot of g == 0 rows (mass e_lo at b* = clamp(c)), NaN rows through the multiplier e_d.
    done = ~live | bad
    e_d = jnp.where(bad, jnp.nan, jnp.where(done, e_lo, 0.0))
    b_star = jnp.minimum(jnp.maximum(c, 0.0), N - 1.0)
    lo = jnp.where(done, e_d * clamp01(1.0 - b_star), e_lo)
    hi = jnp.where(done, e_d * clamp01(b_star - (N - 2.0)), e_hi)
    acc = fma_nan(e_d, hat(b_star), acc)
    acc = jnp.where(k_i == 0, lo, acc)
    acc = jnp.where(k_i == N - 1, hi, acc)
    out_ref[pl.ds(row * NP, NP)] = acc


def interpret_params(**kwargs):
    """Mosaic GPU's interpret mode parameters (`plgpu.InterpretGPUParams` where this JAX exports it): the kernel
    runs on the CPU with GMEM, SMEM, the warpgroup's threads and barriers simulated."""
    params = getattr(plgpu, "InterpretGPUParams", None)
    if params is None:
        from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams as params
    return params(**kwargs)


def _fixed_total_np(x) -> np.ndarray:
    """Interpret mode: the int64 sum of the truncated terms, rounded once to fp32 (the integers of the GPU path)."""
    return np.asarray(np.asarray(x).astype(np.int64).sum(), np.int64).astype(np.float32)


def _mosaic_forward(q, lp, r, d, s, gamma, min_v: float, max_v: float, interpret: bool, row_offset: int) -> jax.Array:
    """(B, N) float32 from q (E, R) f32, lp (E, R, N), r, d, s (B,) f32, gamma () f32, R >= row_offset + B;
    interpret: False, True or `interpret_params(...)`."""
    _trace_count[0] += 1
    E, R, N = lp.shape
    B = r.shape[0]
    NP = padded_lanes(N)
    rows_max = max(1, MAX_FLAT // (E * NP))
    if R > rows_max:  # int32 flat offsets would overflow: independent row chunks (rows never interact)
        o = row_offset
        parts = [_mosaic_forward(q[:, o + i:o + min(i + rows_max, B)], lp[:, o + i:o + min(i + rows_max, B)],
                                 r[i:i + rows_max], d[i:i + rows_max], s[i:i + rows_max], gamma, min_v, max_v,
                                 interpret, 0) for i in range(0, B, rows_max)]
        return jnp.concatenate(parts, axis=0)
    if NP != N:  # rows of NP lanes; -inf is probability 0 (the Triton kernel's masked lanes)
        lp = jnp.pad(lp[:, row_offset:row_offset + B], ((0, 0), (0, 0), (0, NP - N)), constant_values=-jnp.inf)
        q = q[:, row_offset:row_offset + B]
        R, row_offset = B, 0
    sup = CategoricalSupport(N, float(min_v), float(max_v))
    kernel = functools.partial(
        _td_kernel, B=B, R=R, E=E, N=N, NP=NP, BLOCK_N=kernel_config(1, N, True)["BLOCK_N"], row_offset=row_offset,
        min_v=float(np.float32(sup.min_v)), inv_delta=float(np.float32(sup.inv_bin_width)), interpret=bool(interpret))
    out = plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct((B * NP,), jnp.float32),
        grid=(B,),
        grid_names=("row",),
        scratch_types=[plgpu.SMEM((NP,), jnp.float32)],
        compiler_params=plgpu.CompilerParams(lowering_semantics=LOWERING_SEMANTICS),
        interpret=(interpret_params() if interpret is True else interpret) or None,
        kernel_name=KERNEL_NAME,
    )(gamma.reshape(1), q.reshape(E * R), lp.reshape(E * R * NP), r, d, s)
    out = out.reshape(B, NP)
    return out if NP == N else out[:, :N]


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8))
def _td_target(q, lp, r, d, s, gamma, min_v, max_v, config):
    return _mosaic_forward(q, lp, r, d, s, gamma, min_v, max_v, *config)


def _td_target_fwd(q, lp, r, d, s, gamma, min_v, max_v, config):
    return _mosaic_forward(q, lp, r, d, s, gamma, min_v, max_v, *config), (q, lp, r, d, s, gamma)


def _td_target_bwd(min_v, max_v, config, res, ct):
    del min_v, max_v, config, ct  # a stop-gradient quantity: zero cotangents
    return tuple(jnp.zeros_like(x) for x in res)


_td_target.defvjp(_td_target_fwd, _td_target_bwd)


@functools.partial(jax.jit, static_argnames=("min_v", "max_v", "interpret", "row_offset"))
def _jitted(q, lp, r, d, s, gamma, *, min_v, max_v, interpret, row_offset):
    B = r.shape[0]
    f32 = jnp.float32
    return _td_target(q.astype(f32), lp, r.reshape(B).astype(f32), d.reshape(B).astype(f32),
                      s.reshape(B).astype(f32), jnp.asarray(gamma, f32).reshape(()), float(min_v), float(max_v),
                      (interpret, row_offset))


def launch(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v: float = -5.0,
           max_v: float = 5.0, *, interpret: bool, row_offset: int | None = None) -> jax.Array:
    """Run the Mosaic GPU kernel (jit-compiled; usable inside `jax.jit`) on validated inputs.

    Args:
        next_qs: (E, B), or (E, R) with a row offset. next_log_probs: (E, B, N), or (E, R, N) with a row offset;
            float32/bfloat16/float16 (upcast in-kernel).
        reward, terminated, next_alpha_log_pi: (B,) or (B, 1).
        gamma: gamma ** n_step, a Python float or a (traced) scalar (a runtime input: never recompiles).
        min_v, max_v: static support bounds.
        interpret: True: Mosaic GPU's interpret mode (any platform, slow) instead of the GPU compilation; or
            `interpret_params(...)` (e.g. detect_races=True).
        row_offset: None, or a static int >= 0: the rows [row_offset, row_offset + B) of next_qs and next_log_probs.

    Returns:
        (B, N) float32; a stop-gradient quantity (zero cotangents); invalid rows are NaN.
    """
    if row_offset is not None:
        check_shapes(*(x.shape for x in (next_qs, next_log_probs, reward, terminated, next_alpha_log_pi)),
                     row_offset=row_offset)
    gamma = jnp.asarray(gamma, jnp.float32)
    return _jitted(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v=float(min_v),
                   max_v=float(max_v), interpret=interpret if hasattr(interpret, "detect_races") else bool(interpret),
                   row_offset=0 if row_offset is None else int(row_offset))
