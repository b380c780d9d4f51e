"""Fused, deterministic Pallas kernel on the Mosaic GPU backend (Hopper and newer) for FlashSAC's categorical TD
target: the kernel and its `pallas_call` only (gate, self-test and registration: jax_impl/mosaic_ops.py).

The algorithm is the Triton kernel's (SPEC.md section 8) with one row per program (one warpgroup of 128 threads, the
row's NP = max(128, BLOCK_N) lanes in Mosaic GPU's strided register layout, one lane a thread at N <= 128), and the
same fp32 operations in the same order (SPEC.md section 3), with the Triton kernel's PTX where it uses inline PTX:
exp is `ex2.approx.ftz.f32(x * fp32(log2 e))`, every product that meets an addition is `mul.rn.f32` or
`fma.rn.f32`, and the edge atoms' exact sums truncate each term with `cvt.rzi.s64.f32`, split it into its low 19 bits
and the rest, sum both parts over the row in int32 (exact in any order) and join them with the Triton kernel's
`cvt.rn.f32.s64`, so the integers, and the sum, are those of the Triton kernel. The inline PTX goes through
`plgpu.inline_mgpu` (`llvm.inline_asm` on each register). Mosaic GPU marks its own fp additions and multiplications
contractible (LLVM may fuse a product into the next add), so no plain product of this kernel meets an addition
(tests/test_jax_mosaic.py checks the kernel's jaxpr).

The interior atoms' windows are the Triton kernel's (SPEC.md 8 step 3): each lane scans the W sources from its
window start j0, p_j gathered per lane from the probabilities staged in shared memory (`_gather`: a `memref.load` per
register, the per-lane gather Mosaic GPU's Pallas API does not offer), 3 unrolled steps for band rows (W = 3 at
gamma = 0.99), then a loop up to the row's W. One difference of form, changing no bit: the hat weight is the first
form of SPEC.md 8 (min(clamp((k + 1) - b), clamp(b - (k - 1)))) for every atom; for k >= 2 it gives the same bits as
the Triton kernel's clamp(1 - |b - k|) (both equal the section-3 weight inside (k - 1, k + 1) and 0 outside). Rows
are read and written in place: each lane loads log-prob min(k, N - 1) of the selected row (`_gather` on the flat
log-probs; lanes past N become -inf, probability 0) and stores its target lane if k < N (`_store_lanes`), so no XLA
pad or slice copies the rows.

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
from shared_spec.support import BAND_MIN_DISCOUNT, CategoricalSupport

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
# The interior atoms' windows (SPEC.md 8, the Triton kernel's constants): rows with 0 < g < G_BAND_MIN scan the whole
# row; the window margin in units of N / g source steps; the window steps every row takes, unrolled.
G_BAND_MIN = BAND_MIN_DISCOUNT
WINDOW_MARGIN = 2.0**-18
UNROLL = 3
FLT_MAX = 3.4028234663852886e38
_LOG2E = 1.4426950408889634  # rounded to fp32 as the Triton kernel does
KERNEL_NAME = "categorical_td_target_mosaic"
WARPGROUP = 128
# Flat int32 offsets: E * R * N (and B * N) must stay below MAX_FLAT; larger inputs are split over rows.
MAX_FLAT = 2**31 - 1
_trace_count = [0]

_LO_ASM = "{ .reg .b64 a; cvt.rzi.s64.f32 a, $1; cvt.u32.u64 $0, a; and.b32 $0, $0, 524287; }"
_HI_ASM = "{ .reg .b64 a; cvt.rzi.s64.f32 a, $1; shr.u64 a, a, 19; cvt.u32.u64 $0, a; }"
_JOIN_ASM = ("{ .reg .b64 a, b; cvt.u64.u32 a, $1; shl.b64 a, a, 19; cvt.u64.u32 b, $2; add.s64 a, a, b; "
             "cvt.rn.f32.s64 $0, a; }")
# clamp(ceil(x), 0, hi) as an int32 (the window start; the Triton kernel's min.f32 and saturating conversion).
_WINDOW_START_ASM = "{ .reg .f32 t; min.f32 t, $1, $2; cvt.rpi.u32.f32 $0, t; }"


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


def _gather(ref, idx: jax.Array, NP: int, dtype=jnp.float32) -> jax.Array:
    """ref[idx] for a flat shared- or global-memory ref of `dtype` and (NP,) int32 indices in bounds: each thread
    loads its own lanes' elements (a `memref.load` per register of the strided layout: ld.shared / ld.global at a
    per-thread address; consecutive lanes read consecutive elements), the per-lane gather that Mosaic GPU's Pallas
    API does not offer."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import arith, llvm, memref, vector

    layout = plgpu.Layout.WG_STRIDED((NP,), vec_size=1)

    @plgpu.inline_mgpu(arg_types=(plgpu.RefType(), layout),
                       return_type=plgpu.ShapeDtypeStruct((NP,), dtype, layout=layout))
    def f(ctx, mem, index):
        del ctx
        elem, index_ty = ir.MemRefType(mem.type).element_type, ir.IndexType.get()

        def load(i):
            return memref.load(mem, [arith.index_cast(index_ty, i)])

        def op(v):
            if not isinstance(v.type, ir.VectorType):
                return load(v)
            [n] = ir.VectorType(v.type).shape
            res = llvm.mlir_undef(ir.VectorType.get([n], elem))
            for i in range(n):
                pos = ir.DenseI64ArrayAttr.get([i])
                res = vector.insert(load(vector.extract(v, dynamic_position=[], static_position=pos)), res,
                                    dynamic_position=[], static_position=pos)
            return res

        return index._pointwise(op, output_is_signed=None)

    return f(ref, _vec(idx, NP, False))


def _store_lanes(ref, idx: jax.Array, x: jax.Array, lane: jax.Array, n: int, NP: int) -> None:
    """ref[idx] = x on the lanes with lane < n (a flat global-memory f32 ref; (NP,) int32 idx and lane, f32 x): each
    thread stores its own lanes' elements under an `scf.if` (the row's lanes past N are not written)."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import arith, memref, scf, vector

    layout = plgpu.Layout.WG_STRIDED((NP,), vec_size=1)

    @plgpu.inline_mgpu(arg_types=(plgpu.RefType(), layout, layout, layout))
    def f(ctx, mem, index, value, lanes):
        del ctx
        index_ty, i32 = ir.IndexType.get(), ir.IntegerType.get_signless(32)
        bound = arith.constant(i32, n)

        def store(i, v, k):
            cond = arith.cmpi(arith.CmpIPredicate.slt, k, bound)
            if_op = scf.IfOp(cond)
            with ir.InsertionPoint(if_op.then_block):
                memref.store(v, mem, [arith.index_cast(index_ty, i)])
                scf.yield_([])

        def op(iv, vv, kv):
            if not isinstance(iv.type, ir.VectorType):
                store(iv, vv, kv)
                return iv
            [m] = ir.VectorType(iv.type).shape
            for j in range(m):
                pos = ir.DenseI64ArrayAttr.get([j])
                store(*(vector.extract(t, dynamic_position=[], static_position=pos) for t in (iv, vv, kv)))
            return iv

        index._pointwise(op, value, lanes)  # the stores are the point; the returned array is unused

    f(ref, _vec(idx, NP, False), _vec(x, NP, False), _vec(lane, NP, False))


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
    """One program: row `program_id` (SPEC.md 8 steps 1-4). Refs: gamma (1,) f32; q (E*R,) f32; lp (E*R*N,)
    f32/bf16/f16; r, d, s (B,) f32; out (B*N,) f32; p_smem (NP,) f32 (the staged
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
    base = (sel * R + (row_offset + row)) * N  # the selected critic's row, read in place (lanes past N: -inf)
    if interpret:
        lp = lp_ref[pl.ds(base, N)].astype(f32)
        if NP > N:
            lp = jnp.concatenate([lp, jnp.full((NP - N,), -inf, f32)])
        p = jax.pure_callback(np.exp, jax.ShapeDtypeStruct((NP,), f32), lp)
    else:
        lp = _gather(lp_ref, base + jnp.minimum(k_i, N - 1), NP, lp_ref.dtype).astype(f32)
        lp = jnp.where(k_i < N, lp, -inf)
        p = _ptx("ex2.approx.ftz.f32 $0, $1;", f32, "=f,f", lp * np.float32(_LOG2E), NP=NP)
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
    # The total mass can overflow fp32 only if max p >= 2**(127 - log2 BLOCK_N); only then is it summed (the same
    # way), as in the Triton kernel: a branch (scf.if), which real data never takes.
    bad = jax.lax.cond((m_bits >> 23) >= 254 - BLOCK_N.bit_length(),
                       lambda bad: bad | ~(fixed_sum(pst, inv_scale) < inf), lambda bad: bad, bad)

    def hat(bj):
        return jnp.minimum(clamp01((kf + 1.0) - bj), clamp01(bj - (kf - 1.0)))

    # 3. Interior atoms 1 <= k <= N - 2 (lane = destination atom k), the Triton kernel's windows (SPEC.md 8): the
    #    sources feeding atom k form a run (b is non-decreasing in j); the lane scans W sources from j0 in ascending
    #    j, each adding fma(p_j, hat(b_j), acc) with p_j gathered from the staged row, and every source of the window
    #    outside the run adds +0, so the sum does not depend on the window. Band rows (1/16 <= g <= 1): j0 and
    #    W = ceil(2 / g + 2 eps) from the line c + g j with a margin above the estimates' fp32 error (their roundings
    #    only move the window, never the result; each product is mul.rn: Mosaic GPU may contract plain ones); rows
    #    with 0 < g < 1/16 or g > 1: the whole row; g == 0 and invalid rows: UNROLL sources of weight 0. j0 is
    #    clamped into [0, N - W], so every gather is in bounds; one row per program, so W is the program's.
    acc = _vec(0.0, NP, interpret)
    if N > 2:
        band = live & (g >= G_BAND_MIN) & (g <= 1.0)
        inv_g = (1.0 / jnp.where(band, g, 1.0) if interpret else
                 _ptx("rcp.approx.ftz.f32 $0, $1;", f32, "=f,f", jnp.where(band, g, 1.0), NP=NP))
        eps = mul(N * WINDOW_MARGIN, inv_g)  # in source steps; far above the fp32 error of the estimates
        w_est = mul(2.0, inv_g) + mul(2.0, eps)
        w_ceil = jnp.ceil(w_est) if interpret else _ptx("cvt.rpi.f32.f32 $0, $1;", f32, "=f,f", w_est, NP=NP)
        n_win = jnp.where(band, jnp.minimum(w_ceil, N * 1.0), jnp.where(live, N * 1.0, UNROLL * 1.0))
        t0 = mul(1.0 + jnp.where(band, c, 0.0), inv_g) + eps
        start = mul(kf, inv_g) - t0  # j0 = ceil((k - 1 - c) / g - eps) as k / g - ((1 + c) / g + eps)
        if interpret:
            j0 = jnp.minimum(jnp.maximum(jnp.ceil(start), 0.0), N - n_win).astype(jnp.int32)
            row_p = p_smem[...]

            def gather(idx):
                return row_p[idx]
        else:
            j0 = _ptx(_WINDOW_START_ASM, jnp.int32, "=r,f,f", start, N - n_win, NP=NP)

            def gather(idx):
                return _gather(p_smem, idx, NP)
        jf0 = j0.astype(f32)

        def step(w, acc):
            wi = _vec(jnp.asarray(w, jnp.int32), NP, interpret)
            jf = jf0 + wi.astype(f32)  # exact: small integers
            return fma(gather(j0 + wi), hat(cs + mul(gl, jf)), acc)

        for w in range(UNROLL):
            acc = step(w, acc)
        n_w = jnp.max(n_win).astype(jnp.int32)  # the row's W (an integer: >= UNROLL)
        acc = jax.lax.fori_loop(UNROLL, n_w, step, acc)

    # 4. Edges, the two-hot of g == 0 rows (mass e_lo at b* = clamp(c)), NaN rows through the multiplier e_d.
    done = ~live | bad
    e_d = jnp.where(bad, jnp.nan, jnp.where(done, e_lo, 0.0))
    b_star = jnp.minimum(jnp.maximum(c, 0.0), N - 1.0)
    lo = jnp.where(done, e_d * clamp01(1.0 - b_star), e_lo)
    hi = jnp.where(done, e_d * clamp01(b_star - (N - 2.0)), e_hi)
    acc = fma_nan(e_d, hat(b_star), acc)
    acc = jnp.where(k_i == 0, lo, acc)
    acc = jnp.where(k_i == N - 1, hi, acc)
    if interpret:
        out_ref[pl.ds(row * N, N)] = acc[:N]
    else:
        _store_lanes(out_ref, row * N + k_i, acc, k_i, N, NP)


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
    rows_max = max(1, MAX_FLAT // (E * N))
    if R > rows_max:  # int32 flat offsets would overflow: independent row chunks (rows never interact)
        o = row_offset
        parts = [_mosaic_forward(q[:, o + i:o + min(i + rows_max, B)], lp[:, o + i:o + min(i + rows_max, B)],
                                 r[i:i + rows_max], d[i:i + rows_max], s[i:i + rows_max], gamma, min_v, max_v,
                                 interpret, 0) for i in range(0, B, rows_max)]
        return jnp.concatenate(parts, axis=0)
    sup = CategoricalSupport(N, float(min_v), float(max_v))
    kernel = functools.partial(
        _td_kernel, B=B, R=R, E=E, N=N, NP=NP, BLOCK_N=kernel_config(1, N, True)["BLOCK_N"], row_offset=row_offset,
        min_v=float(np.float32(sup.min_v)), inv_delta=float(np.float32(sup.inv_bin_width)), interpret=bool(interpret))
    out = plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct((B * N,), jnp.float32),
        grid=(B,),
        grid_names=("row",),
        scratch_types=[plgpu.SMEM((NP,), jnp.float32)],
        compiler_params=plgpu.CompilerParams(lowering_semantics=LOWERING_SEMANTICS),
        interpret=(interpret_params() if interpret is True else interpret) or None,
        kernel_name=KERNEL_NAME,
    )(gamma.reshape(1), q.reshape(E * R), lp.reshape(E * R * N), r, d, s)
    return out.reshape(B, N)


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
