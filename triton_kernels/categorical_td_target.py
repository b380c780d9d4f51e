"""Fused, deterministic Triton kernel for FlashSAC's categorical TD target (SPEC.md sections 3 and 8).

Its launch configuration is `shared_spec.launch_config.kernel_config` (shared with the Pallas kernel); the host-side
launch is `triton_kernels.launch`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from shared_spec.support import BAND_MIN_DISCOUNT

__all__ = ["G_BAND_MIN", "categorical_td_target_kernel"]

# Rows with 0 < g < G_BAND_MIN take every source between the piles instead of the estimated run (SPEC.md 8).
G_BAND_MIN = tl.constexpr(BAND_MIN_DISCOUNT)


@triton.jit
def _round(x):
    # Identity on non-NaN values; stops FMA contraction of the product x into a following add (SPEC.md 3).
    return tl.where(x != x, 0.0, x)


@triton.jit
def _positions(c, g, j, NM1: tl.constexpr):
    # b_j = min(max(c + R(g * j), 0), N - 1) in fp32, the one formula every implementation uses.
    b = c + _round(g * j.to(tl.float32))
    return tl.minimum(tl.maximum(b, 0.0), NM1 * 1.0)


# Row strides are not specialised on the value 1: a provably contiguous (BR, 1) load would make Triton's coalescing
# pass pick a column-major layout for the row scalars, and every mix with the row-major (BR, BLOCK_N) tiles would then
# be a layout conversion through shared memory (with barriers inside the band loop).
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
    # Every per-row quantity is a (BR, 1) tensor in the same 2-D layout as the (BR, BLOCK_N) tiles, so broadcasts
    # and row reductions need no layout conversion through shared memory.
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

    # 2. Full-row pass: j = k lanes. Pile sums at both clamped ends, total mass, NaN/+inf log-probs.
    m2 = row_ok & lane_ok  # (BR, BLOCK_N)
    lp = tl.load(row_base + k * lp_stride_n, mask=m2, other=float("-inf")).to(tl.float32)
    p = tl.exp(lp)  # (BR, BLOCK_N), 0 on masked lanes
    b = _positions(c, g, k, N - 1)
    done = g == 0.0  # (BR, 1) every b_j equals clamp(c): a two-hot of the total mass
    at_lo = (b == 0.0) & lane_ok  # (BR, BLOCK_N) the low pile
    at_hi = (b == N - 1.0) & lane_ok  # the high pile
    p_lo = tl.sum(tl.where(at_lo, p, 0.0), axis=1, keep_dims=True)
    p_hi = tl.sum(tl.where(at_hi, p, 0.0), axis=1, keep_dims=True)
    p_all = tl.sum(p, axis=1, keep_dims=True)
    bad = bad | ~(p_all < float("inf"))  # a NaN or +inf log-prob makes the total NaN or +inf
    p_lo = tl.where(done, 0.0, p_lo)
    p_hi = tl.where(done, 0.0, p_hi)

    # 3. The run of interior sources feeding atom k: t_lo < b_j < t_hi with t_lo = max(k - 1, 0) and
    #    t_hi = min(k + 1, N - 1) (pile sources are in the pile sums). b is monotone in j, so the run is
    #    [lo, hi) with lo = #{j: b_j <= t_lo}, hi = #{j: b_j < t_hi}. Both counts are estimated from the line
    #    c + g j and then corrected by one step each way with the exact fp32 b (SPEC.md 8).
    g_ok = ~bad & row_ok & (g > 0.0)
    band = g_ok & (g >= G_BAND_MIN)
    inv_g = 1.0 / tl.where(band, g, 1.0)  # only used for the estimates
    cb = tl.where(band, c, 0.0)
    t_lo = tl.maximum(kf - 1.0, 0.0)  # (1, BLOCK_N)
    t_hi = tl.minimum(kf + 1.0, N - 1.0)
    lo = tl.minimum(tl.maximum(tl.floor((t_lo - cb) * inv_g) + 1.0, 0.0), N * 1.0).to(tl.int32)  # (BR, BLOCK_N)
    hi = tl.minimum(tl.maximum(tl.ceil((t_hi - cb) * inv_g), 0.0), N * 1.0).to(tl.int32)
    lo = tl.where((lo > 0) & (_positions(c, g, lo - 1, N - 1) > t_lo), lo - 1, lo)
    lo = tl.where((lo < N) & (_positions(c, g, lo, N - 1) <= t_lo), lo + 1, lo)
    hi = tl.where((hi > 0) & (_positions(c, g, hi - 1, N - 1) >= t_hi), hi - 1, hi)
    hi = tl.where((hi < N) & (_positions(c, g, hi, N - 1) < t_hi), hi + 1, hi)
    # 0 < g < 1/16: the run is every source between the two piles (b is monotone, so the piles are its ends).
    dense = g_ok & ~band
    n_lo = tl.sum(at_lo.to(tl.int32), axis=1, keep_dims=True)
    n_hi = tl.sum(at_hi.to(tl.int32), axis=1, keep_dims=True)
    lo = tl.where(band, lo, tl.where(dense, n_lo, 0))
    hi = tl.where(band, hi, tl.where(dense, N - n_hi, 0))
    n_w = tl.max(tl.max(hi - lo, axis=1), axis=0)
    acc = tl.zeros([BR, BLOCK_N], dtype=tl.float32)
    w = 0
    while w < n_w:  # a while loop: the interpreter cannot use a reduced tensor as a range() bound
        j = lo + w  # (BR, BLOCK_N) source index
        ok = j < hi  # empty runs (lo == hi) for invalid rows, rows past B and lanes past N
        lpj = tl.load(row_base + j.to(tl.int64) * lp_stride_n, mask=ok, other=float("-inf"))
        pj = tl.exp(lpj.to(tl.float32))
        bj = _positions(c, g, j, N - 1)
        lj = tl.floor(bj)
        fj = bj - lj
        wt = tl.where(kf == lj, 1.0 - fj, tl.where(kf == lj + 1.0, fj, 0.0))
        # The select between the product and 0 already keeps the product rounded (no FMA into acc).
        acc = acc + tl.where(ok, pj * wt, 0.0)
        w += 1

    # 4. Piles, the two-hot of terminated rows, NaN rows; store.
    b_star = tl.minimum(tl.maximum(c, 0.0), N - 1.0)  # (BR, 1)
    l_star = tl.floor(b_star)
    f_star = b_star - l_star
    w_star = tl.where(kf == l_star, 1.0 - f_star, tl.where(kf == l_star + 1.0, f_star, 0.0))
    acc = acc + tl.where(k == 0, p_lo, 0.0)
    acc = acc + tl.where(k == N - 1, p_hi, 0.0)
    acc = acc + tl.where(done & ~bad, p_all * w_star, 0.0)
    acc = tl.where(bad, float("nan"), acc)
    tl.store(out_ptr + rows64 * out_stride_b + k, acc, mask=m2)

