"""The previous Triton kernel (window scan with pile counts and row sums in a written float tree), kept unchanged as
the baseline of the interleaved GPU timings: ``python3 -m bench.gpu_bitwise --baseline-kernel
bench/baselines/categorical_td_target_prev.py`` (same signature and launch as `triton_kernels`' kernel). Not used by
the package.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from shared_spec.support import BAND_MIN_DISCOUNT

__all__ = ["G_BAND_MIN", "categorical_td_target_kernel"]

# Rows with 0 < g < G_BAND_MIN scan the whole interior instead of the estimated window (SPEC.md 8).
G_BAND_MIN = tl.constexpr(BAND_MIN_DISCOUNT)
# The window margin, in units of N / g source steps: 2**-18, four times the bound 2**-20 N / g on the fp32 error of
# the window estimates (SPEC.md 8).
WINDOW_MARGIN = tl.constexpr(2.0**-18)
LOG2E = tl.constexpr(1.4426950408889634)  # rounded to fp32 (0x3FB8AA3B) where it multiplies an fp32 tensor
LOG2_MAX_BLOCK_N = tl.constexpr(12)  # BLOCK_N <= 4096
_INTERPRET = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")  # read at import, as triton.jit does


@triton.jit
def _round(x):
    # Identity on non-NaN values; stops FMA contraction of the product x into a following add (SPEC.md 3).
    return tl.where(x != x, 0.0, x)


@triton.jit
def _line(c, g, j):
    # c + R(g * j) in fp32 (SPEC.md 3). On the GPU the product is mul.rn.f32: an explicit rounding modifier keeps
    # ptxas from contracting it into an FMA, which is what R guarantees, in one instruction instead of three.
    jf = j.to(tl.float32)
    if _INTERPRET:
        return c + _round(g * jf)
    else:
        return c + tl.inline_asm_elementwise("mul.rn.f32 $0, $1, $2;", "=f,f,f", [tl.broadcast_to(g, jf.shape), jf],
                                             dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _positions(c, g, j, NM1: tl.constexpr):
    # b_j = min(max(c + R(g * j), 0), N - 1) in fp32, the one formula every implementation uses.
    return tl.minimum(tl.maximum(_line(c, g, j), 0.0), NM1 * 1.0)


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
def _row_sum(x, BR: tl.constexpr, BLOCK_N: tl.constexpr):
    # Row sums in a fixed tree written out here (SPEC.md 8): each level splits the lanes into a first and a second
    # half and adds them lane by lane (x[i] + x[i + H]), so every sum is a plain elementwise IEEE addition. tl.sum is
    # not used for floats: its tree follows the register layout, which differs between compilers, and a reshape
    # followed by a reduction may be folded by the compiler into one reduction with its own order.
    for lvl in tl.static_range(LOG2_MAX_BLOCK_N):
        if (BLOCK_N >> lvl) > 1:
            halves = tl.permute(tl.reshape(x, [BR, 2, BLOCK_N >> (lvl + 1)]), [0, 2, 1])
            first, second = tl.split(halves)
            x = first + second
    return x  # (BR, 1)


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
    # Every per-row quantity is a (BR, 1) tensor in the same 2-D layout as the (BR, BLOCK_N) tiles.
    rows = pid * BR + tl.arange(0, BR)[:, None]  # (BR, 1)
    row_ok = rows < B
    rows64 = rows.to(tl.int64)
    k = tl.arange(0, BLOCK_N)[None, :]  # (1, BLOCK_N) destination atom (also the source index of the full-row pass)
    lane_ok = k < N
    kf = k.to(tl.float32)

    # 1. Min-mean critic (strict < scan: ties -> the first critic) and the row scalars.
    best = tl.load(q_ptr + rows64 * q_stride_b, mask=row_ok, other=0.0).to(tl.float32)  # (BR, 1)
    sel = tl.zeros([BR, 1], dtype=tl.int64)
    bad = best != best
    for e in tl.static_range(1, E):
        qe = tl.load(q_ptr + e * q_stride_e + rows64 * q_stride_b, mask=row_ok, other=0.0).to(tl.float32)
        bad = bad | (qe != qe)
        take = qe < best
        best = tl.where(take, qe, best)
        sel = tl.where(take, e, sel)
    r = tl.load(r_ptr + rows64 * r_stride, mask=row_ok, other=0.0).to(tl.float32)
    d = tl.load(d_ptr + rows64 * d_stride, mask=row_ok, other=0.0).to(tl.float32)
    s = tl.load(s_ptr + rows64 * s_stride, mask=row_ok, other=0.0).to(tl.float32)
    g = gamma * (1.0 - d)
    h_raw = g * (min_v - s)
    c_raw = ((r - min_v) + h_raw) * inv_delta
    c = _round(((r - min_v) + _round(h_raw)) * inv_delta)  # (BR, 1)
    bad = bad | (r != r) | (s != s) | (c_raw != c_raw) | ~((d >= 0.0) & (d <= 1.0))
    bad = bad | ~((g >= 0.0) & (g < float("inf")))
    row_base = lp_ptr + sel * lp_stride_e + rows64 * lp_stride_b  # (BR, 1) pointer to the selected row

    # 2. Positions of the sources (lane = source j) and the sizes of the two clamped piles. The selected row of
    #    log-probs is loaded here, once (issued early for latency; its exp is taken in step 4).
    m2 = row_ok & lane_ok  # (BR, BLOCK_N)
    b = _positions(c, g, k, N - 1)
    lp = tl.load(row_base + k * lp_stride_n, mask=m2, other=float("-inf")).to(tl.float32)
    done = g == 0.0  # (BR, 1) every b_j equals clamp(c): a two-hot of the total mass
    at_lo = (b == 0.0) & lane_ok  # (BR, BLOCK_N) the low pile
    at_hi = (b == N - 1.0) & lane_ok  # the high pile
    # Integer counts are exact in any order (the float sums are taken in step 4).
    n_lo = tl.sum(at_lo.to(tl.int32), axis=1, keep_dims=True)  # (BR, 1) the interior is [n_lo, N - n_hi)
    n_hi = tl.sum(at_hi.to(tl.int32), axis=1, keep_dims=True)

    # 3. Interior sources feeding atom k (rows whose total mass is non-finite are overwritten in step 4):
    #    t_lo < b_j < t_hi with t_lo = max(k - 1, 0), t_hi = min(k + 1, N - 1)
    #    (pile sources are in the pile sums). b is monotone in j, so they form a run; the lane scans a window
    #    [j0, j1) that contains it and keeps exactly the sources that pass the test on the exact fp32 b_j, adding
    #    them in ascending j (the window's other sources add +0). Band rows (g >= 1/16): the window comes from the
    #    line c + g j, widened by a margin above its fp32 error (SPEC.md 8). 0 < g < 1/16: the whole interior.
    g_ok = ~bad & row_ok & (g > 0.0)
    band = g_ok & (g >= G_BAND_MIN)
    inv_g = 1.0 / tl.where(band, g, 1.0)  # only used for the window
    cb = tl.where(band, c, 0.0)
    t_lo = tl.maximum(kf - 1.0, 0.0)  # (1, BLOCK_N)
    t_hi = tl.minimum(kf + 1.0, N - 1.0)
    eps = (N * WINDOW_MARGIN) * inv_g  # (BR, 1) in source steps; far above the fp32 error of the estimates
    j0 = tl.minimum(tl.maximum(tl.floor((t_lo - cb) * inv_g - eps) + 1.0, 0.0), N * 1.0).to(tl.int32)
    j1 = tl.minimum(tl.maximum(tl.ceil((t_hi - cb) * inv_g + eps), 0.0), N * 1.0).to(tl.int32)
    dense = g_ok & ~band
    j0 = tl.where(band, tl.maximum(j0, n_lo), tl.where(dense, n_lo, 0))
    j1 = tl.where(band, tl.minimum(j1, N - n_hi), tl.where(dense, N - n_hi, 0))
    j1 = tl.where(lane_ok, j1, j0)  # lanes past N: empty windows
    n_w = tl.max(tl.max(j1 - j0, axis=1), axis=0)
    acc = tl.zeros([BR, BLOCK_N], dtype=tl.float32)
    km1 = kf - 1.0
    w = 0
    while w < n_w:  # a while loop: the interpreter cannot use a reduced tensor as a range() bound
        j = j0 + w  # (BR, BLOCK_N) source index
        ok = j < j1
        lpj = tl.load(row_base + j * lp_stride_n, mask=ok, other=float("-inf"))  # int32 offset into the row
        pj = _exp(lpj.to(tl.float32))
        # Unclamped b: outside [0, N - 1] it fails the test below exactly as the clamped value (a pile) does.
        bj = _line(c, g, j)
        keep = ok & (bj > t_lo) & (bj < t_hi)
        # l_j = k: weight 1 - f_j = 1 - (b_j - k); l_j = k - 1: weight f_j = b_j - (k - 1) (both subtractions exact)
        wt = tl.where(bj >= kf, 1.0 - (bj - kf), bj - km1)
        # The select between the product and 0 keeps the product rounded (no FMA into acc).
        acc = acc + tl.where(keep, pj * wt, 0.0)
        w += 1

    # 4. The full-row pass (lane = source j): one exp per element of the row loaded in step 2. Pile sums and total
    #    mass in the fixed tree; piles, the two-hot of g == 0 rows, NaN rows; store. It comes after the window loop,
    #    so that p is not live through it and the layouts of the tree's narrow levels do not spread into the
    #    lane-wide work.
    if lp_ptr.dtype.element_ty == tl.float32:
        p = _exp(lp)  # (BR, BLOCK_N), 0 on masked lanes
    else:
        # lp + 0.0 only turns -0 into +0 (same exp). Tying p to acc keeps 16-bit log-probs in the lane layout: without
        # it Triton moves the narrow 16-bit row into the tree's replicated layout and computes every exp there.
        p = _exp(tl.where(acc == acc, lp, lp + 0.0))
    p_lo = tl.where(done, 0.0, _row_sum(tl.where(at_lo, p, 0.0), BR, BLOCK_N))
    p_hi = tl.where(done, 0.0, _row_sum(tl.where(at_hi, p, 0.0), BR, BLOCK_N))
    p_all = _row_sum(p, BR, BLOCK_N)
    bad = bad | ~(p_all < float("inf"))  # a NaN or +inf log-prob makes the total NaN or +inf
    b_star = tl.minimum(tl.maximum(c, 0.0), N - 1.0)  # (BR, 1)
    l_star = tl.floor(b_star)
    f_star = b_star - l_star
    w_star = tl.where(kf == l_star, 1.0 - f_star, tl.where(kf == l_star + 1.0, f_star, 0.0))
    acc = acc + tl.where(k == 0, p_lo, 0.0)
    acc = acc + tl.where(k == N - 1, p_hi, 0.0)
    acc = acc + tl.where(done & ~bad, p_all * w_star, 0.0)
    acc = tl.where(bad, float("nan"), acc)
    tl.store(out_ptr + rows64 * out_stride_b + k, acc, mask=m2)

