"""Fused, deterministic Triton kernel for FlashSAC's categorical TD target (SPEC.md sections 3 and 8).

Its launch configuration is `shared_spec.launch_config.kernel_config` (shared with the Pallas kernel); the host-side
launch is `triton_kernels.launch`.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from shared_spec.support import BAND_MIN_DISCOUNT

__all__ = ["G_BAND_MIN", "categorical_td_target_kernel", "categorical_td_target_kernel_jax"]

# Rows with 0 < g < G_BAND_MIN scan the whole row instead of the estimated window (SPEC.md 8).
G_BAND_MIN = tl.constexpr(BAND_MIN_DISCOUNT)
# The window margin, in units of N / g source steps: 2**-18, above 2.5 times the bound 1.5 2**-20 N / g on the fp32
# error of the window estimates (SPEC.md 8).
WINDOW_MARGIN = tl.constexpr(2.0**-18)
# Window steps every row takes, unrolled (a band row's window is ceil(2 / g + 2 eps) >= 3 sources long: 3 at
# gamma = 0.99); longer windows continue in a loop.
UNROLL = tl.constexpr(3)
# The exact sums' split: the low HALF bits of each group sum of fixed-point terms, and the rest (SPEC.md 8). With
# BLOCK_N <= 4096 lanes the low parts sum below 2**31; the terms are scaled below 2**(31 - log2 BLOCK_N + HALF), so all
# of them together stay below 2**(31 + HALF) and the high parts sum below 2**31 too.
HALF = tl.constexpr(19)
HALF_MASK = tl.constexpr((1 << 19) - 1)


@triton.constexpr_function
def _sum_asm(n, part):
    """PTX for the low HALF bits (part "lo") or the rest ("hi") of the sum q of n fp32 terms truncated to int64: the
    first exact level of the edge sums (n terms of one slot-tile position). The terms are added one after the other
    (fewer 64-bit temporaries live at once than a tree: at RPP 16, 63 registers instead of 66-71). The same PTX in both
    kernels (two instruction blocks per part pair: ptxas computes the shared truncations and sum once)."""
    n = int(n)
    text = "{ .reg .b64 a, b; cvt.rzi.s64.f32 a, $1; "
    text += "".join(f"cvt.rzi.s64.f32 b, ${t}; add.s64 a, a, b; " for t in range(2, n + 1))
    if str(part) == "lo":
        return text + "cvt.u32.u64 $0, a; and.b32 $0, $0, 524287; }"
    return text + "shr.u64 a, a, 19; cvt.u32.u64 $0, a; }"


@triton.constexpr_function
def _sum_constraints(n):
    return "=r" + ",f" * int(n)


_JOIN_ASM = tl.constexpr("{ .reg .b64 a, b; cvt.u64.u32 a, $1; shl.b64 a, a, 19; cvt.u64.u32 b, $2; add.s64 a, a, b; "
                         "cvt.rn.f32.s64 $0, a; }")  # fp32(hi * 2**19 + lo), rounded once
# clamp(ceil(x), 0, hi) as an int32 (the window start): min.f32, then a conversion that saturates below at 0.
_WINDOW_START_ASM = tl.constexpr("{ .reg .f32 t; min.f32 t, $1, $2; cvt.rpi.u32.f32 $0, t; }")
FLT_MAX = tl.constexpr(3.4028234663852886e38)
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
        g, jf = tl.broadcast(g, jf)  # (BR, 1) and (1, Q) in the full-row pass: both to (BR, Q)
        return c + tl.inline_asm_elementwise("mul.rn.f32 $0, $1, $2;", "=f,f,f", [g, jf], dtype=tl.float32,
                                             is_pure=True, pack=1)


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
def _mul(a, b):
    # R(a * b) for a product that meets an addition: mul.rn.f32 on the GPU (never contracted, NaN kept).
    if _INTERPRET:
        return _round(a * b)
    else:
        return tl.inline_asm_elementwise("mul.rn.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32, is_pure=True,
                                         pack=1)


@triton.jit
def _fma_nan(a, b, acc):
    # acc + a * b as _fma, for the epilogue, where a NaN a must reach the result: in interpret mode without R (which
    # would turn a NaN product into 0); the product is rounded once either way there, as acc is +0 or a is 0.
    if _INTERPRET:
        return acc + a * b
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
def _row_reduce(x, IS_MAX: tl.constexpr):
    # The (BR, 1) row sums (or maxima) of a (BR, Q) int32 tile x with x >= 0. One row: a warp reduction along the
    # lanes. Several rows in one warp (BR > 1 on the GPU): one whole-warp reduction per row of the tile with the other
    # rows' lanes set to 0 (REDUX instructions: a reduction along part of the warp would be a butterfly of shuffles).
    BR: tl.constexpr = x.shape[0]
    if BR == 1 or _INTERPRET:  # (the interpreter: one numpy reduction, the same integers)
        if IS_MAX:
            return tl.max(x, axis=1, keep_dims=True)
        else:
            return tl.sum(x, axis=1, keep_dims=True)
    else:
        ar = tl.arange(0, BR)[:, None]
        out = tl.zeros([BR, 1], dtype=x.dtype)
        for r in tl.static_range(BR):
            if IS_MAX:
                v = tl.max(tl.where(ar == r, x, 0))
            else:
                v = tl.sum(tl.where(ar == r, x, 0))
            out = tl.where(ar == r, v, out)
        return out


@triton.jit
def _fixed_sum(xs, inv_scale, SLOTS: tl.constexpr):
    # sum_j trunc(x_j) * inv_scale over the SLOTS slot tiles xs of a row (terms 0 <= x_j < 2**(31 - log2 BLOCK_N +
    # HALF)), exact, in two levels: the SLOTS terms of one tile position (the same thread's registers: the tiles have
    # the same shape, hence the same layout) are truncated to int64 and added, the group sum is split into its low HALF
    # bits and the rest, and each part is summed over the tile in int32 (below 2**31: one warp reduction instruction on
    # the GPU). Integer sums are exact, hence the same in every order and layout; the total is rounded once to fp32
    # and scaled by a power of 2. On the GPU the truncations, the group sum, the split and the join are inline PTX,
    # the same instructions as in the Pallas kernel (whose float -> int casts would add clamps).
    if _INTERPRET:
        q = xs[0].to(tl.int64)
        for t in tl.static_range(1, SLOTS):
            q = q + xs[t].to(tl.int64)
        lo = (q & HALF_MASK).to(tl.int32)
        hi = (q >> HALF).to(tl.int32)
    else:
        lo = tl.inline_asm_elementwise(_sum_asm(SLOTS, "lo"), _sum_constraints(SLOTS), xs, dtype=tl.int32,
                                       is_pure=True, pack=1)
        hi = tl.inline_asm_elementwise(_sum_asm(SLOTS, "hi"), _sum_constraints(SLOTS), xs, dtype=tl.int32,
                                       is_pure=True, pack=1)
    lo = _row_reduce(lo, False)
    hi = _row_reduce(hi, False)
    if _INTERPRET:
        total = ((hi.to(tl.int64) << HALF) + lo).to(tl.float32)
    else:
        total = tl.inline_asm_elementwise(_JOIN_ASM, "=f,r,r", [hi, lo], dtype=tl.float32, is_pure=True, pack=1)
    return total * inv_scale


@triton.jit
def _window_start(x, hi):
    # clamp(ceil(x), 0, hi) as an int32 for a float hi >= 0 holding an integer: on the GPU min.f32 and one saturating
    # conversion (cvt.rpi.u32.f32 clamps below at 0), as in the Pallas kernel.
    if _INTERPRET:
        return tl.minimum(tl.maximum(tl.ceil(x), 0.0), hi).to(tl.int32)
    else:
        x, hi = tl.broadcast(x, hi)
        return tl.inline_asm_elementwise(_WINDOW_START_ASM, "=r,f,f", [x, hi], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _bits(p):
    # The bit pattern of |p| as an int32 (ordered as |p| for non-NaN values).
    return p.to(tl.int32, bitcast=True) & 0x7FFFFFFF


@triton.jit
def _hat(b, kf, FIRST: tl.constexpr):
    # The hat weight of a position b at atom k (SPEC.md 8), 0 for every b outside (k - 1, k + 1), and inside the
    # section-3 weight bit for bit: fl(1 - f) for b in [k, k + 1) (l = k), f for b in (k - 1, k) (l = k - 1).
    # FIRST (the slot tile of atoms 0 .. Q - 1, atom 1 among them): min(clamp((k + 1) - b), clamp(b - (k - 1))), three
    # instructions, exact for every k. The other tiles (k >= Q >= 2): clamp(1 - |b - k|), two instructions (b - k and
    # a saturating 1 - |v|): for k >= 2 and b in (k - 1, k + 1), b >= 1, so b - k is exact (an integer below b is a
    # multiple of ulp(b)), and so is 1 - (k - b) = f. (At k = 1 a source with 0 < b < 1/2 would get 1 - fl(1 - b), not
    # b: hence the first tile's form.)
    if FIRST:
        return tl.minimum(tl.minimum(tl.maximum((kf + 1.0) - b, 0.0), 1.0),
                          tl.minimum(tl.maximum(b - (kf - 1.0), 0.0), 1.0))
    else:
        return tl.minimum(tl.maximum(1.0 - tl.abs(b - kf), 0.0), 1.0)


@triton.jit
def _interior_step(acc, pj, jf, cs, g, kf, FIRST: tl.constexpr):
    # One window step of lane k: source jf's probability times its hat weight at atom k, accumulated (SPEC.md 8).
    # Unclamped b: a pile source (b <= 0 or b >= N - 1) gets weight 0 at every interior atom, as it should.
    return _fma(pj, _hat(_line(cs, g, jf), kf, FIRST), acc)


@triton.jit
def _off(rows, stride):
    # rows * stride in int64 for int32 rows in [0, B) and a stride >= 0 (tensor strides are): one 32 x 32 -> 64-bit
    # multiply (mul.wide.u32) when the stride is a 32-bit argument, instead of a 64 x 64-bit product.
    stride = stride + tl.zeros([], dtype=tl.int32)  # a tensor (a stride specialised to the value 1 is a constexpr)
    if stride.dtype == tl.int32:
        return rows.to(tl.uint32).to(tl.int64) * stride.to(tl.uint32).to(tl.int64)
    else:
        return rows.to(tl.int64) * stride


@triton.jit
def _load_means(q_ptr, q_stride_e, q_stride_b, rows, E: tl.constexpr):
    # The E critic means of the rows (a tuple of (BR, 1) tensors): loads only, so a prefetch does not wait for them.
    # rows: int64 (the one-tile kernel) or int32 (clamped: offsets through _off).
    if rows.dtype == tl.int64:
        off = rows * q_stride_b
    else:
        off = _off(rows, q_stride_b)
    qs = (tl.load(q_ptr + off).to(tl.float32),)
    for e in tl.static_range(1, E):
        qs = qs + (tl.load(q_ptr + e * q_stride_e + off).to(tl.float32),)
    return qs


@triton.jit
def _load_row(row_base, lp_stride_n, i, ok, N: tl.constexpr, SLOTS: tl.constexpr, Q: tl.constexpr):
    # The selected log-prob row as SLOTS slot tiles of Q lanes (a tuple of (BR, Q) fp32 tensors; source t Q + i at
    # position i of tile t), -inf on masked lanes; ok: None, or a scalar that masks the whole row off (a prefetch past
    # the program's last tile). Loads only, so a prefetch does not wait for them.
    lps = ()
    for t in tl.static_range(SLOTS):
        if (t + 1) * Q <= N:  # every lane of the tile is a source
            if ok is None:
                x = tl.load(row_base + (i + t * Q) * lp_stride_n)
            else:
                x = tl.load(row_base + (i + t * Q) * lp_stride_n, mask=ok, other=float("-inf"))
        else:
            m = i + t * Q < N
            if ok is not None:
                m = m & ok
            x = tl.load(row_base + (i + t * Q) * lp_stride_n, mask=m, other=float("-inf"))
        lps = lps + (x.to(tl.float32),)
    return lps


@triton.jit
def _select(qs, E: tl.constexpr, BR: tl.constexpr):
    # Min-mean critic (strict < scan: ties -> the first critic) and the rows' NaN-mean flag.
    best = qs[0]
    sel = tl.zeros([BR, 1], dtype=tl.int64)
    bad = best != best
    for e in tl.static_range(1, E):
        qe = qs[e]
        bad = bad | (qe != qe)
        take = qe < best
        best = tl.where(take, qe, best)
        sel = tl.where(take, e, sel)
    return sel, bad


@triton.jit
def _store_row(out_row, xs, i, N: tl.constexpr, SLOTS: tl.constexpr, Q: tl.constexpr):
    # Stores the slot tiles xs (lanes t Q + i < N) to out_row (every row of the tile: see _tile on rows past B).
    for t in tl.static_range(SLOTS):
        if (t + 1) * Q <= N:
            tl.store(out_row + i + t * Q, xs[t])
        else:
            tl.store(out_row + i + t * Q, xs[t], mask=i + t * Q < N)


@triton.jit
def _tile(lps, sel, bad, r, d, s, rows, lp_ptr, lp_stride_e, lp_stride_b, lp_stride_n, out_ptr, out_stride_b, B,
          gamma, min_v, inv_delta, i, N: tl.constexpr, BLOCK_N: tl.constexpr, BR: tl.constexpr, SLOTS: tl.constexpr,
          Q: tl.constexpr):
    # Steps 1 (after the loads) to 4 for one tile of BR rows: the row scalars r, d, s, the selected critic `sel` and
    # the NaN-mean flag `bad` are given; `lps` is the selected log-prob row as slot tiles (_load_row), or None: then it
    # is loaded here (the one-tile kernel, RPP = 1). Stores the tile's output rows.
    # Rows past B (only in the grid's last tile, when BR does not divide B) are row B - 1 again: they read its inputs,
    # stage the same probabilities into its output row and store the same result there, in the same instructions as
    # row B - 1 itself (one tile), so no store needs a row mask (a (BR, 1) mask gave the stores a layout of their own
    # and a shuffle per slot tile).
    # Every lane-indexed quantity is a tuple of SLOTS slot tiles of Q lanes, (BR, Q) tensors with lane t Q + i at
    # position i of tile t: atom t Q + i in steps 3-4, source t Q + i in step 2. The tiles share one layout, so a
    # tile position's SLOTS values are one thread's registers.
    rows_c = tl.minimum(rows, B - 1)  # int32
    rows64 = rows_c.to(tl.int64)
    g = gamma * (1.0 - d)
    c = _mul((r - min_v) + _mul(g, min_v - s), inv_delta)  # (BR, 1)
    # A NaN reward or shift makes the raw c NaN (g * NaN is NaN for every g), so its test covers them (SPEC.md 6). On
    # the GPU c is the raw c (mul.rn keeps NaN); in interpret mode R turns a NaN product into 0, so it is separate.
    c_raw = ((r - min_v) + g * (min_v - s)) * inv_delta if _INTERPRET else c
    # d outside [0, 1] (or NaN) is clamp(d) != d: written with one comparison, because LLVM turns the four range
    # comparisons of d and g into a bit-packed vector reduction (eight instructions instead of three).
    bad = bad | (c_raw != c_raw) | (tl.minimum(tl.maximum(d, 0.0), 1.0) != d)
    bad = bad | ~((g >= 0.0) & (g <= FLT_MAX))  # g in [0, inf): one comparison each
    # Rows with g == 0 (and invalid rows, overwritten in step 4) place every source at b = -1, the low edge: their
    # low edge sum is the total mass, spread as a two-hot in step 4, and no source is interior.
    live = ~bad & (g > 0.0)
    gl = tl.where(live, g, 0.0)
    cs = tl.where(live, c, -1.0)
    kfs = ()
    for t in tl.static_range(SLOTS):
        kfs = kfs + ((i + t * Q).to(tl.float32),)  # lane t Q + i as a float

    # 2. The full-row pass (lane = source j): one load and one exp per element. The edge atoms' sums, exact: atom 0
    #    collects p_j * clamp(1 - b_j, 0, 1) (the low pile and the sources in (0, 1)), atom N - 1 collects
    #    p_j * clamp(b_j - (N - 2), 0, 1), each term scaled by 2**shift (from the row maximum), truncated to an
    #    integer and summed exactly (a tile position's terms in int64, then two int32 part sums), so the result is the
    #    same in every order and layout.
    if lps is None:
        row_base = lp_ptr + sel * lp_stride_e + rows64 * lp_stride_b  # (BR, 1) pointer to the selected row
        lps = _load_row(row_base, lp_stride_n, i, None, N, SLOTS, Q)
    ps = ()
    for t in tl.static_range(SLOTS):
        ps = ps + (_exp(lps[t]),)  # (BR, Q), 0 on masked lanes
    # The probabilities are staged in the output row, where the window steps gather them after the barrier (one exp
    # per element instead of one per window step; the row is overwritten with the result in step 4).
    out_row = out_ptr + _off(rows_c, out_stride_b)  # (BR, 1)
    _store_row(out_row, ps, i, N, SLOTS, Q)  # all loads before the stores (none waits for a store)
    tl.debug_barrier()
    m_bits = _bits(ps[0])
    for t in tl.static_range(1, SLOTS):
        m_bits = tl.maximum(m_bits, _bits(ps[t]))
    m_bits = _row_reduce(m_bits, True)  # (BR, 1) bits of each row's max p
    bad = bad | (m_bits >= 0x7F800000)  # a NaN or +inf probability (a NaN or +inf log-prob, or exp overflowed)
    # Fixed point: the row's largest probability M scales to [2**(FIX - 1), 2**FIX), FIX = 31 - log2(BLOCK_N) + HALF
    # (43 bits at N = 101), so that both part sums fit in int32.
    FIX: tl.constexpr = 32 - BLOCK_N.bit_length() + HALF
    shift = tl.minimum(FIX - 1 - ((m_bits >> 23) - 127), 126)
    scale = _pow2(shift)
    inv_scale = _pow2(-shift)
    t_lo = ()
    t_hi = ()
    t_all = ()
    for t in tl.static_range(SLOTS):
        b = _line(cs, gl, kfs[t])  # unclamped positions
        pst = ps[t] * scale  # exact
        if _INTERPRET:
            pst = tl.where(pst < float("inf"), pst, 0.0)  # numpy warns on NaN -> int casts (the row is NaN anyway)
        t_lo = t_lo + (pst * tl.minimum(tl.maximum(1.0 - b, 0.0), 1.0),)
        t_hi = t_hi + (pst * tl.minimum(tl.maximum(b - (N - 2.0), 0.0), 1.0),)
        t_all = t_all + (pst,)
    e_lo = _fixed_sum(t_lo, inv_scale, SLOTS)  # (BR, 1)
    e_hi = _fixed_sum(t_hi, inv_scale, SLOTS)
    # The total mass can overflow fp32 only if max p >= 2**(127 - log2 BLOCK_N); only then is it summed (the same way).
    # (e.g. log-probs near 88, in any row of the tile)
    if (tl.max(tl.max(m_bits, axis=1), axis=0) >> 23) >= 254 - BLOCK_N.bit_length():
        bad = bad | ~(_fixed_sum(t_all, inv_scale, SLOTS) < float("inf"))  # a branch: a loop would have it hoisted

    # 3. Interior atoms 1 <= k <= N - 2 (lane = destination atom k): the sources with k - 1 < b_j < k + 1 form a run
    #    (b is non-decreasing in j). The lane scans a window of W sources [j0, j0 + W) that contains the run, adding
    #    p_j * w in ascending j; every other source of the window adds +0, so the sum does not depend on the window.
    #    Band rows (g >= 1/16): j0 from the line c + g j widened by a margin above its fp32 error, W = ceil(2/g + 2 eps)
    #    per row (>= UNROLL); 0 < g < 1/16 or g > 1: the whole row. j0 is clamped into [0, N - W], so every load is in
    #    bounds and unmasked. The first UNROLL steps are unrolled (every row takes them), the rest loop, up to the
    #    tile's largest W (a row's loads past its own W are masked).
    accs = ()
    for _t in tl.static_range(SLOTS):
        accs = accs + (tl.zeros([BR, Q], dtype=tl.float32),)
    if N > 2:
        band = live & (g >= G_BAND_MIN) & (g <= 1.0)  # g > 1 (a gamma above 1): the whole row
        inv_g = _rcp(tl.where(band, g, 1.0))  # only used for the window
        eps = (N * WINDOW_MARGIN) * inv_g  # (BR, 1) in source steps; far above the fp32 error of the estimates
        n_win = tl.where(band, tl.minimum(tl.ceil(2.0 * inv_g + 2.0 * eps), N * 1.0),
                         tl.where(live, N * 1.0, UNROLL * 1.0))  # (BR, 1) W >= UNROLL
        # j0 = ceil((k - 1 - c) / g - eps) as k / g - ((1 + c) / g + eps): one fused multiply-add a lane (an
        # estimate: its rounding only moves the window, which the margin covers, never the result).
        t0 = (1.0 + tl.where(band, c, 0.0)) * inv_g + eps  # (BR, 1)
        jf0s = ()
        ptrs = ()
        for t in tl.static_range(SLOTS):
            j0 = _window_start(kfs[t] * inv_g - t0, N - n_win)  # (BR, Q) first source of the window; dense rows: 0
            jf0s = jf0s + (j0.to(tl.float32),)
            ptrs = ptrs + (out_row + j0.to(tl.uint32, bitcast=True).to(tl.int64),)  # j0 >= 0: zero-extended
        for w in tl.static_range(UNROLL):
            new = ()
            for t in tl.static_range(SLOTS):
                jf = jf0s[t] + w if w > 0 else jf0s[t]
                new = new + (_interior_step(accs[t], tl.load(ptrs[t] + w), jf, cs, gl, kfs[t], t == 0),)
            accs = new
        n_w = tl.max(tl.max(n_win, axis=1), axis=0).to(tl.int32)  # the tile's largest W
        w = UNROLL
        while w < n_w:  # a while loop: the interpreter cannot use a reduced tensor as a range() bound
            new = ()
            for t in tl.static_range(SLOTS):
                pj = tl.load(ptrs[t] + w, mask=w < n_win, other=0.0)
                new = new + (_interior_step(accs[t], pj, jf0s[t] + w, cs, gl, kfs[t], t == 0),)
            accs = new
            w += 1

    # 4. Edges, the two-hot of g == 0 rows, NaN rows; store. A g == 0 row's total mass e_lo sits at
    #    b* = clamp(c, 0, N - 1): interior atoms take e_lo * hat(b*) (the window's weight formula), the edges
    #    e_lo * clamp(1 - b*) and e_lo * clamp(b* - (N - 2)).
    # The row's NaN flag rides on e_d, the epilogue's multiplier: NaN in invalid rows (NaN * anything is NaN, so every
    # lane becomes NaN), e_lo in rows with g == 0 (whose window sum is +0), 0 in the others (acc + 0 * w = acc).
    # (bad is also set after live, by a NaN or +inf probability: done covers those rows too.)
    done = ~live | bad
    e_d = tl.where(bad, float("nan"), tl.where(done, e_lo, 0.0))  # (BR, 1)
    b_star = tl.minimum(tl.maximum(c, 0.0), N - 1.0)  # (BR, 1)
    lo = tl.where(done, e_d * tl.minimum(tl.maximum(1.0 - b_star, 0.0), 1.0), e_lo)  # (BR, 1)
    hi = tl.where(done, e_d * tl.minimum(tl.maximum(b_star - (N - 2.0), 0.0), 1.0), e_hi)
    outs = ()
    for t in tl.static_range(SLOTS):
        acc = _fma_nan(e_d, _hat(b_star, kfs[t], t == 0), accs[t])
        if t == 0:
            acc = tl.where(i == 0, lo, acc)
        if t * Q <= N - 1 and N - 1 < (t + 1) * Q:
            acc = tl.where(i == N - 1 - t * Q, hi, acc)
        outs = outs + (acc,)
    tl.debug_barrier()  # every window gather is done before the row is overwritten
    _store_row(out_row, outs, i, N, SLOTS, Q)


@triton.jit
def _step(i_t, t0, n_tiles, qs_next, lps, bad, r, d, s, ar, q_ptr, q_stride_e, q_stride_b, lp_ptr, lp_stride_e,
          lp_stride_b, lp_stride_n, r_ptr, r_stride, d_ptr, d_stride, s_ptr, s_stride, out_ptr, out_stride_b, B, gamma,
          min_v, inv_delta, i, E: tl.constexpr, N: tl.constexpr, BLOCK_N: tl.constexpr, BR: tl.constexpr,
          SLOTS: tl.constexpr, Q: tl.constexpr):
    # Tile t0 + i_t of a pipelined program: lps, bad, r, d, s are its loaded inputs, qs_next the critic means of tile
    # t0 + i_t + 1. Issues the loads of tile t0 + i_t + 1 (its row masked off past the program's last tile) and the
    # means of tile t0 + i_t + 2, computes and stores tile t0 + i_t, and returns the next step's inputs.
    # Tile i_t + 1: its critic (its means arrived during tile i_t - 1), its row and scalars.
    rows1 = tl.minimum((t0 + i_t + 1) * BR + ar, B - 1)
    sel1, bad1 = _select(qs_next, E, BR)
    lps1 = _load_row(lp_ptr + _off(sel1.to(tl.int32), lp_stride_e) + _off(rows1, lp_stride_b), lp_stride_n, i,
                     i_t + 1 < n_tiles, N, SLOTS, Q)
    r1 = tl.load(r_ptr + _off(rows1, r_stride)).to(tl.float32)
    d1 = tl.load(d_ptr + _off(rows1, d_stride)).to(tl.float32)
    s1 = tl.load(s_ptr + _off(rows1, s_stride)).to(tl.float32)
    # Tile i_t + 2: its critic means.
    qs_next = _load_means(q_ptr, q_stride_e, q_stride_b, tl.minimum((t0 + i_t + 2) * BR + ar, B - 1), E)
    _tile(lps, None, bad, r, d, s, (t0 + i_t) * BR + ar, lp_ptr, lp_stride_e, lp_stride_b, lp_stride_n, out_ptr,
          out_stride_b, B, gamma, min_v, inv_delta, i, N, BLOCK_N, BR, SLOTS, Q)
    return qs_next, lps1, bad1, r1, d1, s1


@triton.jit
def _kernel_body(q_ptr, q_stride_e, q_stride_b, lp_ptr, lp_stride_e, lp_stride_b, lp_stride_n, r_ptr, r_stride, d_ptr,
                 d_stride, s_ptr, s_stride, out_ptr, out_stride_b, B, gamma, min_v, inv_delta, E: tl.constexpr,
                 N: tl.constexpr, BLOCK_N: tl.constexpr, BR: tl.constexpr, RPP: tl.constexpr, Q: tl.constexpr):
    # The whole kernel, shared by its two entry points (inlined into each): `categorical_td_target_kernel` (torch)
    # and `categorical_td_target_kernel_jax` (JAX, through jaxlib's Triton kernel call: triton_kernels/xla_call.py).
    gamma = tl.cast(gamma, tl.float32)  # scalars arrive as fp32 from eager launches, fp64 from Inductor
    min_v = tl.cast(min_v, tl.float32)
    inv_delta = tl.cast(inv_delta, tl.float32)
    pid = tl.program_id(0)
    # A row's lanes are SLOTS slot tiles of Q lanes (SPEC.md 8; Q from shared_spec.launch_config.slot_lanes), only
    # as many as hold a lane below N. Every slot tile has one shape, hence one layout.
    SLOTS: tl.constexpr = (N + Q - 1) // Q
    i = tl.arange(0, Q)[None, :]  # (1, Q) position in a slot tile
    # Every per-row quantity is a (BR, 1) tensor in the same 2-D layout as the (BR, Q) tiles. Rows past B (the last
    # tile) read row B - 1 and are never stored, so no scalar load needs a row mask.
    if RPP == 1:  # the one-tile kernel
        rows = pid * BR + tl.arange(0, BR)[:, None]  # (BR, 1)
        rows64 = tl.minimum(rows, B - 1).to(tl.int64)
        # 1. Min-mean critic and the row scalars.
        sel, bad = _select(_load_means(q_ptr, q_stride_e, q_stride_b, rows64, E), E, BR)
        r = tl.load(r_ptr + rows64 * r_stride).to(tl.float32)
        d = tl.load(d_ptr + rows64 * d_stride).to(tl.float32)
        s = tl.load(s_ptr + rows64 * s_stride).to(tl.float32)
        _tile(None, sel, bad, r, d, s, rows, lp_ptr, lp_stride_e, lp_stride_b, lp_stride_n, out_ptr, out_stride_b, B,
              gamma, min_v, inv_delta, i, N, BLOCK_N, BR, SLOTS, Q)
    else:
        # RPP tiles one after another (SPEC.md 8), software-pipelined: while tile i_t is computed, the selected
        # log-prob row and the scalars r, d, s of tile i_t + 1 and the critic means of tile i_t + 2 are in flight (a
        # load waits only at its first use: the next iteration). Tiles past the grid's last one are never computed;
        # prefetches past it read clamped rows (the row load is masked off), and nothing they read is stored.
        ar = tl.arange(0, BR)[:, None]
        t0 = pid * RPP
        n_tiles = tl.minimum((B + BR - 1) // BR - t0, RPP)  # >= 1
        rows0 = tl.minimum(t0 * BR + ar, B - 1)
        qs = _load_means(q_ptr, q_stride_e, q_stride_b, rows0, E)
        r = tl.load(r_ptr + _off(rows0, r_stride)).to(tl.float32)
        d = tl.load(d_ptr + _off(rows0, d_stride)).to(tl.float32)
        s = tl.load(s_ptr + _off(rows0, s_stride)).to(tl.float32)
        qs_next = _load_means(q_ptr, q_stride_e, q_stride_b, tl.minimum((t0 + 1) * BR + ar, B - 1), E)
        sel, bad = _select(qs, E, BR)
        lps = _load_row(lp_ptr + _off(sel.to(tl.int32), lp_stride_e) + _off(rows0, lp_stride_b), lp_stride_n, i,
                        None, N, SLOTS, Q)
        i_t = 0
        while i_t < n_tiles:  # a while loop: the interpreter cannot use a tensor as a range() bound (as the window)
            qs_next, lps, bad, r, d, s = _step(
                i_t, t0, n_tiles, qs_next, lps, bad, r, d, s, ar, q_ptr, q_stride_e, q_stride_b, lp_ptr, lp_stride_e,
                lp_stride_b, lp_stride_n, r_ptr, r_stride, d_ptr, d_stride, s_ptr, s_stride, out_ptr, out_stride_b,
                B, gamma, min_v, inv_delta, i, E, N, BLOCK_N, BR, SLOTS, Q)
            i_t += 1


# Row strides are not specialised on the value 1: a provably contiguous (BR, 1) load would make Triton's coalescing
# pass pick a column-major layout for the row scalars, and every mix with the row-major (BR, Q) tiles would then be a
# layout conversion through shared memory.
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
    BR: tl.constexpr,  # rows per tile (power of 2)
    RPP: tl.constexpr,  # tiles per program (the grid is ceil(B / (BR * RPP)))
    Q: tl.constexpr,  # lanes per slot tile (shared_spec.launch_config.slot_lanes)
):
    _kernel_body(q_ptr, q_stride_e, q_stride_b, lp_ptr, lp_stride_e, lp_stride_b, lp_stride_n, r_ptr, r_stride, d_ptr,
                 d_stride, s_ptr, s_stride, out_ptr, out_stride_b, B, gamma, min_v, inv_delta, E, N, BLOCK_N, BR, RPP,
                 Q)


@triton.jit
def categorical_td_target_kernel_jax(
    q_ptr, q_stride_e, q_stride_b,  # next_qs (E, R): critic means
    lp_ptr, lp_stride_e, lp_stride_b, lp_stride_n,  # next_log_probs (E, R, N)
    r_ptr, r_stride,  # reward (B,)
    d_ptr, d_stride,  # terminated (B,)
    s_ptr, s_stride,  # next_alpha_log_pi (B,)
    gamma_ptr,  # (1,) fp32 gamma ** n_step (an operand: a traced gamma never recompiles)
    B,  # number of rows
    min_v,  # fp32 min_v
    inv_delta,  # fp32 (N - 1) / (max_v - min_v)
    out_stride_b,  # N
    out_ptr,  # output (B, N) fp32 (XLA passes the outputs after the inputs)
    ROW_OFFSET: tl.constexpr,  # the target reads rows [ROW_OFFSET, ROW_OFFSET + B) of next_qs and next_log_probs
    E: tl.constexpr, N: tl.constexpr, BLOCK_N: tl.constexpr, BR: tl.constexpr, RPP: tl.constexpr, Q: tl.constexpr,
):
    # The entry point for JAX (triton_kernels/xla_call.py compiles it for jaxlib's Triton kernel call): the same
    # kernel body as `categorical_td_target_kernel`, with gamma read from a device scalar and the row offset applied
    # to the base pointers. Its integer arguments are compiled as runtime values (the row strides too, as
    # `categorical_td_target_kernel` keeps them: its do_not_specialize list), except the unit stride along N.
    gamma = tl.load(gamma_ptr)
    q_base = q_ptr + _off(tl.full([], ROW_OFFSET, tl.int32), q_stride_b)
    lp_base = lp_ptr + _off(tl.full([], ROW_OFFSET, tl.int32), lp_stride_b)
    _kernel_body(q_base, q_stride_e, q_stride_b, lp_base, lp_stride_e, lp_stride_b, lp_stride_n, r_ptr, r_stride,
                 d_ptr, d_stride, s_ptr, s_stride, out_ptr, out_stride_b, B, gamma, min_v, inv_delta, E, N, BLOCK_N,
                 BR, RPP, Q)
