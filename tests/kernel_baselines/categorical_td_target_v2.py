"""The one-tile Triton kernel of main at 2a572d0 (exact integer edge sums, staged probabilities, one row per program:
SPEC.md section 8 before the tile loop), kept unchanged as the baseline of the interleaved GPU timings:
``python3 -m bench.gpu_bitwise --baseline-kernel bench/baselines/categorical_td_target_v2.py`` (the signature of
`triton_kernels`' kernel without RPP: `triton_kernels.launch` runs it with one tile per program, BR = 1 only). Not
used by the package; tests/test_kernel_bitwise.py checks that it computes the package kernel's bits.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from shared_spec.support import BAND_MIN_DISCOUNT

__all__ = ["G_BAND_MIN", "categorical_td_target_kernel"]

# Rows with 0 < g < G_BAND_MIN scan the whole row instead of the estimated window (SPEC.md 8).
G_BAND_MIN = tl.constexpr(BAND_MIN_DISCOUNT)
# The window margin, in units of N / g source steps: 2**-18, four times the bound 2**-20 N / g on the fp32 error of
# the window estimates (SPEC.md 8).
WINDOW_MARGIN = tl.constexpr(2.0**-18)
# Window steps every row takes, unrolled (a band row's window is ceil(2 / g + 2 eps) >= 3 sources long: 3 at
# gamma = 0.99); longer windows continue in a loop.
UNROLL = tl.constexpr(3)
# The exact sums' split: the low HALF bits of each fixed-point term, and the rest (SPEC.md 8). With BLOCK_N <= 4096
# lanes the low parts sum below 2**31; the terms are scaled below 2**(31 - log2 BLOCK_N + HALF), so the high parts do
# too.
HALF = tl.constexpr(19)
HALF_MASK = tl.constexpr((1 << 19) - 1)
# q = trunc(x) in int64; lo = q & (2**19 - 1), hi = q >> 19 (two instructions blocks, the conversion shared by ptxas)
_LO_ASM = tl.constexpr("{ .reg .b64 q; cvt.rzi.s64.f32 q, $1; cvt.u32.u64 $0, q; and.b32 $0, $0, 524287; }")
_HI_ASM = tl.constexpr("{ .reg .b64 q; cvt.rzi.s64.f32 q, $1; shr.u64 q, q, 19; cvt.u32.u64 $0, q; }")
_JOIN_ASM = tl.constexpr("{ .reg .b64 a, b; cvt.u64.u32 a, $1; shl.b64 a, a, 19; cvt.u64.u32 b, $2; add.s64 a, a, b; "
                         "cvt.rn.f32.s64 $0, a; }")  # fp32(hi * 2**19 + lo), rounded once
LOG2E = tl.constexpr(1.4426950408889634)  # rounded to fp32 (0x3FB8AA3B) where it multiplies an fp32 tensor
_INTERPRET = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")  # read at import, as triton.jit does


@triton.jit
def _round(x):
    # Identity on non-NaN values; stops FMA contraction of the product x into a following add (SPEC.md 3).
    return tl.where(x != x, 0.0, x)


@triton.jit
def _line(c, g, jf):
    # c + R(g * j) in fp32 for a float source index jf (SPEC.md 3). On the GPU the product is mul.rn.f32: an explicit
    # rounding modifier keeps ptxas from contracting it into an FMA, which is what R guarantees, in one instruction.
    if _INTERPRET:
        return c + _round(g * jf)
    else:
        return c + tl.inline_asm_elementwise("mul.rn.f32 $0, $1, $2;", "=f,f,f", [tl.broadcast_to(g, jf.shape), jf],
                                             dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _fma(a, b, acc):
    # acc + a * b: one fused multiply-add (fma.rn.f32) on the GPU, so no compiler decides the rounding; in interpret
    # mode the product is rounded first (the Pallas kernel's interpret mode does the same).
    if _INTERPRET:
        return acc + _round(a * b)
    else:
        return tl.inline_asm_elementwise("fma.rn.f32 $0, $1, $2, $3;", "=f,f,f,f", [a, b, acc], dtype=tl.float32,
                                         is_pure=True, pack=1)


@triton.jit
def _exp(x):
    # fp32 exp as ex2.approx.ftz.f32(x * fp32(log2 e)) on the GPU; the Pallas kernel emits the same two
    # instructions. ftz flushes results below 2**-126 to 0 (probabilities of no consequence) and saves the
    # subnormal range fix-up that ptxas wraps around ex2.approx.f32. Under TRITON_INTERPRET=1: numpy's float32 exp
    # (the Pallas kernel's interpret mode calls the same function).
    if _INTERPRET:
        return tl.exp(x)
    else:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * LOG2E], dtype=tl.float32,
                                         is_pure=True, pack=1)


@triton.jit
def _rcp(x):
    # 1 / x for the window estimates only (their margin covers an approximate reciprocal): rcp.approx.ftz.f32 on the
    # GPU, one instruction instead of the IEEE division's range checks.
    if _INTERPRET:
        return 1.0 / x
    else:
        return tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True,
                                         pack=1)


@triton.jit
def _pow2(e):
    # 2**e as fp32 for an int32 tensor e in [-126, 127], exactly (the exponent field written directly).
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _fixed_sum(x, inv_scale):
    # sum_j trunc(x_j) * inv_scale for a row of terms 0 <= x_j < 2**(31 - log2 BLOCK_N + HALF): each integer is split
    # into its low HALF bits and the rest, and each part is summed in int32 (below 2**31: one warp reduction
    # instruction on the GPU). The integer sums are exact, hence the same in every order and layout; the total is
    # rounded once to fp32 and scaled by a power of 2. On the GPU the split and the join are inline PTX, the same
    # instructions as in the Pallas kernel (whose float -> int casts would add clamps).
    if _INTERPRET:
        q = x.to(tl.int64)
        lo = (q & HALF_MASK).to(tl.int32)
        hi = (q >> HALF).to(tl.int32)
    else:
        lo = tl.inline_asm_elementwise(_LO_ASM, "=r,f", [x], dtype=tl.int32, is_pure=True, pack=1)
        hi = tl.inline_asm_elementwise(_HI_ASM, "=r,f", [x], dtype=tl.int32, is_pure=True, pack=1)
    lo = tl.sum(lo, axis=1, keep_dims=True)
    hi = tl.sum(hi, axis=1, keep_dims=True)
    if _INTERPRET:
        total = ((hi.to(tl.int64) << HALF) + lo).to(tl.float32)
    else:
        total = tl.inline_asm_elementwise(_JOIN_ASM, "=f,r,r", [hi, lo], dtype=tl.float32, is_pure=True, pack=1)
    return total * inv_scale


@triton.jit
def _to_int(x):
    # float -> int32 by truncation (cvt.rzi.s32.f32 on the GPU, as in the Pallas kernel) for in-range values.
    if _INTERPRET:
        return x.to(tl.int32)
    else:
        return tl.inline_asm_elementwise("cvt.rzi.s32.f32 $0, $1;", "=r,f", [x], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _hat(b, kp1, km1):
    # The hat weight of a position b at atom k: min(clamp((k + 1) - b), clamp(b - (k - 1))) with clamp to [0, 1]. For
    # b in [k, k + 1) it is (k + 1) - b = 1 - f (l = k), for b in (k - 1, k) it is b - (k - 1) = f (l = k - 1), bit
    # for bit (SPEC.md 8), and 0 for every b outside (k - 1, k + 1).
    return tl.minimum(tl.minimum(tl.maximum(kp1 - b, 0.0), 1.0), tl.minimum(tl.maximum(b - km1, 0.0), 1.0))


@triton.jit
def _interior_step(acc, pj, jf, cs, g, kp1, km1):
    # One window step of lane k: source jf's probability times its hat weight at atom k, accumulated (SPEC.md 8).
    # Unclamped b: a pile source (b <= 0 or b >= N - 1) gets weight 0 at every interior atom, as it should.
    return _fma(pj, _hat(_line(cs, g, jf), kp1, km1), acc)


# Row strides are not specialised on the value 1: a provably contiguous (BR, 1) load would make Triton's coalescing
# pass pick a column-major layout for the row scalars, and every mix with the row-major (BR, BLOCK_N) tiles would then
# be a layout conversion through shared memory.
@triton.jit(do_not_specialize=["q_stride_b", "r_stride", "d_stride", "s_stride", "out_stride_b", "lp_stride_b"])
def categorical_td_target_kernel(
    q_ptr, q_stride_e, q_stride_b,  # next_qs (E, B): critic means
    lp_ptr, lp_stride_e, lp_stride_b, lp_stride_n,  # next_log_probs (E, B, N): any float dtype, any strides
    r_ptr, r_stride,  # reward (B,)
    d_ptr, d_stride,  # terminated (B,)
    s_ptr, s_stride,  # next_alpha_log_pi (B,)
    out_ptr, out_stride_b,  # output (B, N) fp32, unit stride along N
    B,  # number of rows
    gamma,  # fp32 gamma ** n_step (a runtime value: changing it never recompiles)
    min_v,  # fp32 min_v
    inv_delta,  # fp32 (N - 1) / (max_v - min_v)
    E: tl.constexpr,  # number of critics
    N: tl.constexpr,  # number of atoms
    BLOCK_N: tl.constexpr,  # next power of 2 >= N (lanes)
    BR: tl.constexpr,  # rows per program (power of 2)
):
    gamma = tl.cast(gamma, tl.float32)  # scalars arrive as fp32 from eager launches, fp64 from Inductor
    min_v = tl.cast(min_v, tl.float32)
    inv_delta = tl.cast(inv_delta, tl.float32)
    pid = tl.program_id(0)
    # Every per-row quantity is a (BR, 1) tensor in the same 2-D layout as the (BR, BLOCK_N) tiles. Rows past B (the
    # last program of a multi-row tile) read row B - 1 and are never stored, so no load needs a row mask.
    rows = pid * BR + tl.arange(0, BR)[:, None]  # (BR, 1)
    row_ok = rows < B
    rows64 = tl.minimum(rows, B - 1).to(tl.int64)
    k = tl.arange(0, BLOCK_N)[None, :]  # (1, BLOCK_N) destination atom (also the source index of the full-row pass)
    lane_ok = k < N
    kf = k.to(tl.float32)
    km1 = kf - 1.0
    kp1 = kf + 1.0

    # 1. Min-mean critic (strict < scan: ties -> the first critic) and the row scalars.
    best = tl.load(q_ptr + rows64 * q_stride_b).to(tl.float32)  # (BR, 1)
    sel = tl.zeros([BR, 1], dtype=tl.int64)
    bad = best != best
    for e in tl.static_range(1, E):
        qe = tl.load(q_ptr + e * q_stride_e + rows64 * q_stride_b).to(tl.float32)
        bad = bad | (qe != qe)
        take = qe < best
        best = tl.where(take, qe, best)
        sel = tl.where(take, e, sel)
    r = tl.load(r_ptr + rows64 * r_stride).to(tl.float32)
    d = tl.load(d_ptr + rows64 * d_stride).to(tl.float32)
    s = tl.load(s_ptr + rows64 * s_stride).to(tl.float32)
    g = gamma * (1.0 - d)
    h_raw = g * (min_v - s)
    c_raw = ((r - min_v) + h_raw) * inv_delta
    c = _round(((r - min_v) + _round(h_raw)) * inv_delta)  # (BR, 1)
    # A NaN reward or shift makes c_raw NaN (g * NaN is NaN for every g), so c_raw's test covers them (SPEC.md 6).
    bad = bad | (c_raw != c_raw) | ~((d >= 0.0) & (d <= 1.0))
    bad = bad | ~((g >= 0.0) & (g < float("inf")))
    row_base = lp_ptr + sel * lp_stride_e + rows64 * lp_stride_b  # (BR, 1) pointer to the selected row
    # Rows with g == 0 (and invalid rows, overwritten in step 4) place every source at b = -1, the low edge: their
    # low edge sum is the total mass, spread as a two-hot in step 4, and no source is interior.
    live = ~bad & (g > 0.0)
    gl = tl.where(live, g, 0.0)
    cs = tl.where(live, c, -1.0)

    # 2. The full-row pass (lane = source j): one load and one exp per element. The edge atoms' sums, exact: atom 0
    #    collects p_j * clamp(1 - b_j, 0, 1) (the low pile and the sources in (0, 1)), atom N - 1 collects
    #    p_j * clamp(b_j - (N - 2), 0, 1), each term scaled by 2**shift (from the row maximum), truncated to an
    #    integer and summed exactly (two int32 part sums), so the result is the same in every order and layout.
    lp = tl.load(row_base + k * lp_stride_n, mask=lane_ok, other=float("-inf")).to(tl.float32)
    p = _exp(lp)  # (BR, BLOCK_N), 0 on masked lanes
    # The probabilities are staged in the output row, where the window steps gather them after the barrier (one exp
    # per element instead of one per window step; the row is overwritten with the result in step 4).
    out_row = out_ptr + rows64 * out_stride_b  # (BR, 1)
    tl.store(out_row + k, p, mask=lane_ok)
    tl.debug_barrier()
    b = _line(cs, gl, kf)  # unclamped positions
    w_lo = tl.minimum(tl.maximum(1.0 - b, 0.0), 1.0)
    w_hi = tl.minimum(tl.maximum(b - (N - 2.0), 0.0), 1.0)
    m_bits1 = tl.max(p.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=1)  # (BR,) bits of each row's max p
    m_bits = m_bits1[:, None]
    bad = bad | (m_bits >= 0x7F800000)  # a NaN or +inf probability (a NaN or +inf log-prob, or exp overflowed)
    # Fixed point: the row's largest probability M scales to [2**(FIX - 1), 2**FIX), FIX = 31 - log2(BLOCK_N) + HALF
    # (43 bits at N = 101), so that both part sums fit in int32.
    FIX: tl.constexpr = 32 - BLOCK_N.bit_length() + HALF
    shift = tl.minimum(FIX - 1 - ((m_bits >> 23) - 127), 126)
    scale = _pow2(shift)
    inv_scale = _pow2(-shift)
    ps = p * scale  # exact
    if _INTERPRET:
        ps = tl.where(ps < float("inf"), ps, 0.0)  # numpy warns on NaN -> int casts (the row is NaN anyway)
    e_lo = _fixed_sum(ps * w_lo, inv_scale)  # (BR, 1)
    e_hi = _fixed_sum(ps * w_hi, inv_scale)
    # The total mass can overflow fp32 only if max p >= 2**(127 - log2 BLOCK_N); only then is it summed (the same way).
    if (tl.max(m_bits1, axis=0) >> 23) >= 254 - BLOCK_N.bit_length():  # e.g. log-probs near 88 (in any row)
        bad = bad | ~(_fixed_sum(ps, inv_scale) < float("inf"))  # a branch: a loop would have the sum hoisted

    # 3. Interior atoms 1 <= k <= N - 2 (lane = destination atom k): the sources with k - 1 < b_j < k + 1 form a run
    #    (b is non-decreasing in j). The lane scans a window of W sources [j0, j0 + W) that contains the run, adding
    #    p_j * w in ascending j; every other source of the window adds +0, so the sum does not depend on the window.
    #    Band rows (g >= 1/16): j0 from the line c + g j widened by a margin above its fp32 error, W = ceil(2/g + 2 eps)
    #    per row (>= UNROLL); 0 < g < 1/16 or g > 1: the whole row. j0 is clamped into [0, N - W], so every load is in
    #    bounds and unmasked. The first UNROLL steps are unrolled (every row takes them), the rest loop.
    acc = tl.zeros([BR, BLOCK_N], dtype=tl.float32)
    if N > 2:
        band = live & (g >= G_BAND_MIN) & (g <= 1.0)  # g > 1 (a gamma above 1): the whole row
        inv_g = _rcp(tl.where(band, g, 1.0))  # only used for the window
        eps = (N * WINDOW_MARGIN) * inv_g  # (BR, 1) in source steps; far above the fp32 error of the estimates
        n_win = tl.where(band, tl.minimum(tl.ceil(2.0 * inv_g + 2.0 * eps), N * 1.0),
                         tl.where(live, N * 1.0, UNROLL * 1.0))  # (BR, 1) W >= UNROLL
        cb = tl.where(band, c, 0.0)
        jf0 = tl.ceil((km1 - cb) * inv_g - eps)  # (BR, BLOCK_N) first source of the window
        jf0 = tl.minimum(tl.maximum(jf0, 0.0), N - n_win)  # dense rows: 0
        ptr = out_row + _to_int(jf0)
        for w in tl.static_range(UNROLL):
            acc = _interior_step(acc, tl.load(ptr + w), jf0 + w, cs, gl, kp1, km1)
        # The remaining steps' bound from g alone (every row's W or more; a row's loads past its W are masked).
        gw = gamma * (1.0 - tl.load(d_ptr + rows64 * d_stride).to(tl.float32))
        gb = (gw >= G_BAND_MIN) & (gw <= 1.0)  # as band
        inv_gw = _rcp(tl.where(gb, gw, 1.0))
        n_wb = tl.where(gb, tl.ceil(2.0 * inv_gw + (2 * N * WINDOW_MARGIN) * inv_gw),
                        tl.where(gw > 0.0, N * 1.0, UNROLL * 1.0))
        n_w = tl.max(tl.max(tl.minimum(n_wb, N * 1.0), axis=1), axis=0).to(tl.int32)
        w = UNROLL
        while w < n_w:  # a while loop: the interpreter cannot use a reduced tensor as a range() bound
            acc = _interior_step(acc, tl.load(ptr + w, mask=w < n_win, other=0.0), jf0 + w, cs, gl, kp1, km1)
            w += 1

    # 4. Edges, the two-hot of g == 0 rows, NaN rows; store. A g == 0 row's total mass e_lo sits at
    #    b* = clamp(c, 0, N - 1): interior atoms take e_lo * hat(b*) (the window's weight formula), the edges
    #    e_lo * clamp(1 - b*) and e_lo * clamp(b* - (N - 2)).
    done = ~live
    b_star = tl.minimum(tl.maximum(c, 0.0), N - 1.0)  # (BR, 1)
    acc = tl.where(done, e_lo * _hat(b_star, kp1, km1), acc)
    lo = tl.where(done, e_lo * tl.minimum(tl.maximum(1.0 - b_star, 0.0), 1.0), e_lo)  # (BR, 1)
    hi = tl.where(done, e_lo * tl.minimum(tl.maximum(b_star - (N - 2.0), 0.0), 1.0), e_hi)
    acc = tl.where(k == 0, lo, tl.where(k == N - 1, hi, acc))
    acc = tl.where(bad, float("nan"), acc)
    tl.debug_barrier()  # every window gather is done before the row is overwritten
    tl.store(out_row + k, acc, mask=row_ok & lane_ok)
