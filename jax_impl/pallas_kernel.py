"""Fused, deterministic Pallas kernel (lowered through Triton) for FlashSAC's categorical TD target: the kernel and
its `pallas_call` only (gate, self-test and registration: jax_impl/ops.py).

The algorithm (SPEC.md section 8: min-Q scan, positions and pile sizes, the window scan of interior sources checked
on the exact fp32 b, the full-row pass with the written row-sum tree, piles and two-hot last), the fp32 operation
order (section 3) and the NaN policy (section 6) are those of the Triton kernel
`triton_kernels/categorical_td_target.py`, statement for statement, with the same pinned launch configuration
(`shared_spec.launch_config.kernel_config`) and
runtime row strides. Every float row sum is the fixed tree of `_row_sum`, no product is contracted into an FMA (R, and
`mul.rn.f32` for g * j on the GPU), and exp is the same inline PTX in both kernels: `exp_mode="ex2"`
(default) emits `ex2.approx.ftz.f32(x * fp32(log2 e))`; `exp_mode="libdevice"` uses `jnp.exp` (not bitwise with the
Triton kernel). So the two kernels agree bit for bit on the same GPU (H200: every configuration of
`bench/gpu_bitwise.py`), and no result depends on the tile shape.

Everything Pallas-Triton specific lives behind `_pallas_forward` (one function), so another lowering (Mosaic GPU,
jax-triton) can be added later without touching callers.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

from shared_spec.launch_config import kernel_config
from shared_spec.reference import check_shapes
from shared_spec.support import BAND_MIN_DISCOUNT, CategoricalSupport

__all__ = ["DEFAULT_EXP_MODE", "EXP_MODES", "G_BAND_MIN", "launch", "trace_count"]

# Rows with 0 < g < G_BAND_MIN use the full source range (W = N) instead of the band estimate (SPEC.md 8).
G_BAND_MIN = BAND_MIN_DISCOUNT
# Window margin in units of N / g source steps (the Triton kernel's WINDOW_MARGIN; SPEC.md 8).
WINDOW_MARGIN = 2.0**-18
EXP_MODES = ("ex2", "libdevice")
DEFAULT_EXP_MODE = "ex2"
# Flat int32 offsets: E * B * N (+ the one-past-the-end sentinel) must fit; larger inputs are split over rows.
MAX_FLAT = 2**31 - 2
_LOG2E = 1.4426950408889634  # Triton's constant, rounded to fp32 exactly as Triton does
_trace_count = [0]


def trace_count() -> int:
    """How many times the kernel wrapper has been traced (one per new shape/dtype/static configuration)."""
    return _trace_count[0]


def _round(x: jax.Array) -> jax.Array:
    """Identity on non-NaN values; stops FMA contraction of the product `x` into a following add (SPEC.md 3)."""
    return jnp.where(x != x, 0.0, x)


def _line(c: jax.Array, g: jax.Array, j: jax.Array, interpret: bool) -> jax.Array:
    """c + R(g * j) in fp32 (SPEC.md 3); on the GPU the product is the Triton kernel's mul.rn.f32 (an explicit
    rounding modifier is never contracted into an FMA), in interpret mode R (XLA on CPU contracts too)."""
    jf = j.astype(jnp.float32)
    if interpret:
        return c + _round(g * jf)
    (y,) = plt.elementwise_inline_asm("mul.rn.f32 $0, $1, $2;", args=[jnp.broadcast_to(g, jf.shape), jf],
                                      constraints="=f,f,f", pack=1,
                                      result_shape_dtypes=[jax.ShapeDtypeStruct(jf.shape, jnp.float32)])
    return c + y


def _positions(c: jax.Array, g: jax.Array, j: jax.Array, N: int, interpret: bool) -> jax.Array:
    """b_j = min(max(c + R(g * j), 0), N - 1) in fp32, the one formula every implementation uses."""
    return jnp.minimum(jnp.maximum(_line(c, g, j, interpret), 0.0), N * 1.0 - 1.0)


def _exp(x: jax.Array, exp_mode: str, interpret: bool) -> jax.Array:
    """fp32 exp. "ex2": ex2.approx.ftz.f32(x * fp32(log2 e)), the Triton kernel's two instructions, as inline PTX;
    in interpret mode numpy's float32 exp, the function the Triton interpreter uses, so the two interpreted kernels
    share it. "libdevice": jnp.exp (__nv_expf on the GPU)."""
    if exp_mode == "libdevice":
        return jnp.exp(x)
    if interpret:
        return jax.pure_callback(np.exp, jax.ShapeDtypeStruct(x.shape, jnp.float32), x)
    y = x * np.float32(_LOG2E)
    (out,) = plt.elementwise_inline_asm("ex2.approx.ftz.f32 $0, $1;", args=[y], constraints="=f,f", pack=1,
                                        result_shape_dtypes=[jax.ShapeDtypeStruct(y.shape, jnp.float32)])
    return out


def _row_sum(x: jax.Array, BR: int, BLOCK_N: int) -> jax.Array:
    """Row sums in the Triton kernel's fixed tree: each level adds the second half of the lanes to the first, lane by
    lane (x[i] + x[i + H]); jnp.split of a power-of-2 axis lowers to Triton's reshape + split, as tl.split does."""
    width = BLOCK_N
    while width > 1:
        width //= 2
        first, second = jnp.split(x, 2, axis=1)
        x = first + second
    return x  # (BR, 1)


# Runtime strides (an int32 input) instead of compile-time constants: the Triton kernel receives its row strides as
# unspecialised runtime integers, so Triton's axis analysis sees the same (unknown) divisibility and contiguity of
# every pointer in both kernels, hence the same coalescing, register layouts and reduction trees. The last two are
# the flat offsets of the first target row in q and lp (the row-offset form; a torch view's storage offset is the
# same thing, folded into the Triton kernel's base pointers).
STRIDE_NAMES = ("q_e", "q_b", "lp_e", "lp_b", "row", "out_b", "q_0", "lp_0")


def _strides(E: int, R: int, N: int, row_offset: int) -> np.ndarray:
    """(8,) int32 row-major strides of the flat inputs q (E, R), lp (E, R, N), per-row (B,), out (B, N), then the
    flat offsets of row `row_offset` in q and lp."""
    return np.array([R, 1, R * N, N, 1, N, row_offset, row_offset * N], np.int32)


def _td_kernel(gamma_ref, stride_ref, q_ref, lp_ref, r_ref, d_ref, s_ref, out_ref, *, B: int, R: int, E: int, N: int,
               BLOCK_N: int, BR: int, min_v: float, inv_delta: float, exp_mode: str, interpret: bool):
    """One program: BR rows x BLOCK_N lanes (destination atoms k); the statements of the Triton kernel, in order.

    Refs are whole flat arrays (no BlockSpec): gamma (1,) f32; strides (8,) int32 (STRIDE_NAMES); q (E*R,) f32;
    lp (E*R*N,) f32/bf16/f16; r, d, s (B,) f32; out (B*N,) f32. Target row i of critic e reads q[q_0 + e * q_e +
    i * q_b] and lp[lp_0 + e * lp_e + i * lp_b + j] (R = B and q_0 = lp_0 = 0 unless the caller passed a row
    offset). Only these integer offsets see R and the offset: the float arithmetic is the same for all of them.
    Per-row quantities are (BR, 1) tensors in the layout of the (BR, BLOCK_N) tiles, as in the Triton kernel.
    In interpret mode masked lanes and rows address a one-past-the-end sentinel, which the interpret-mode scatter
    drops (a masked store is a read-modify-write scatter there: an in-bounds masked lane, e.g. column 101..127 of
    row r = column 0..26 of row r + 1, would write stale data). On the GPU masked lanes are never dereferenced, so
    the raw offsets are kept.
    """

    def addr(off, mask, sentinel):
        return jnp.where(mask, off, sentinel) if interpret else off

    f32 = jnp.float32
    inf = float("inf")
    q_e, q_b, lp_e, lp_b, row_stride, out_b, q_0, lp_0 = (stride_ref[i] for i in range(8))
    gamma = gamma_ref[0]
    pid = pl.program_id(0)
    rows = pid * BR + jnp.arange(BR, dtype=jnp.int32)[:, None]  # (BR, 1)
    row_ok = rows < B
    k = jnp.arange(BLOCK_N, dtype=jnp.int32)[None, :]  # (1, BLOCK_N) destination atom (= source of the full pass)
    lane_ok = k < N
    kf = k.astype(f32)

    # 1. Min-mean critic (strict < scan: ties -> the first critic) and the row scalars.
    best = plt.load(q_ref.at[addr(q_0 + rows * q_b, row_ok, E * R)], mask=row_ok, other=0.0)  # (BR, 1)
    sel = jnp.zeros((BR, 1), jnp.int32)
    bad = best != best
    for e in range(1, E):
        qe = plt.load(q_ref.at[addr(q_0 + e * q_e + rows * q_b, row_ok, E * R)], mask=row_ok, other=0.0)
        bad = bad | (qe != qe)
        take = qe < best
        best = jnp.where(take, qe, best)
        sel = jnp.where(take, e, sel)
    row_off = addr(rows * row_stride, row_ok, B)
    r = plt.load(r_ref.at[row_off], mask=row_ok, other=0.0)
    d = plt.load(d_ref.at[row_off], mask=row_ok, other=0.0)
    s = plt.load(s_ref.at[row_off], mask=row_ok, other=0.0)
    g = gamma * (1.0 - d)
    h_raw = g * (min_v - s)
    c_raw = ((r - min_v) + h_raw) * inv_delta
    c = _round(((r - min_v) + _round(h_raw)) * inv_delta)  # (BR, 1)
    bad = bad | (r != r) | (s != s) | (c_raw != c_raw) | ~((d >= 0.0) & (d <= 1.0))
    bad = bad | ~((g >= 0.0) & (g < inf))
    row_base = lp_0 + sel * lp_e + rows * lp_b  # (BR, 1) flat offset of the selected critic's row
    sentinel = E * R * N

    # 2. Positions of the sources (lane = source j) and the sizes of the two clamped piles.
    m2 = row_ok & lane_ok  # (BR, BLOCK_N)
    b = _positions(c, g, k, N, interpret)
    lp = plt.load(lp_ref.at[addr(row_base + k, m2, sentinel)], mask=m2, other=-inf)  # issued early, used in step 4
    done = g == 0.0  # (BR, 1) every b_j equals clamp(c): a two-hot of the total mass
    at_lo = (b == 0.0) & lane_ok  # the low pile
    at_hi = (b == N - 1.0) & lane_ok  # the high pile
    # Integer counts are exact in any order (the float sums are taken in step 4).
    n_lo = jnp.sum(at_lo.astype(jnp.int32), axis=1, keepdims=True)  # (BR, 1) the interior is [n_lo, N - n_hi)
    n_hi = jnp.sum(at_hi.astype(jnp.int32), axis=1, keepdims=True)

    # 3. Interior sources feeding atom k: t_lo < b_j < t_hi, t_lo = max(k - 1, 0), t_hi = min(k + 1, N - 1), scanned
    #    over the window [j0, j1) in ascending j, keeping exactly the sources that pass the test on the exact b_j.
    g_ok = ~bad & row_ok & (g > 0.0)
    band = g_ok & (g >= G_BAND_MIN)
    inv_g = 1.0 / jnp.where(band, g, 1.0)  # only used for the window
    cb = jnp.where(band, c, 0.0)
    t_lo = jnp.maximum(kf - 1.0, 0.0)  # (1, BLOCK_N)
    t_hi = jnp.minimum(kf + 1.0, N - 1.0)
    eps = (N * WINDOW_MARGIN) * inv_g  # (BR, 1) in source steps; far above the fp32 error of the estimates
    j0 = jnp.minimum(jnp.maximum(jnp.floor((t_lo - cb) * inv_g - eps) + 1.0, 0.0), N * 1.0).astype(jnp.int32)
    j1 = jnp.minimum(jnp.maximum(jnp.ceil((t_hi - cb) * inv_g + eps), 0.0), N * 1.0).astype(jnp.int32)
    dense = g_ok & ~band
    j0 = jnp.where(band, jnp.maximum(j0, n_lo), jnp.where(dense, n_lo, 0))
    j1 = jnp.where(band, jnp.minimum(j1, N - n_hi), jnp.where(dense, N - n_hi, 0))
    j1 = jnp.where(lane_ok, j1, j0)  # lanes past N: empty windows
    n_w = jnp.max(jnp.max(j1 - j0, axis=1), axis=0)
    km1 = kf - 1.0

    def run_step(w, acc):
        j = j0 + w  # (BR, BLOCK_N) source index
        ok = j < j1
        lpj = plt.load(lp_ref.at[addr(row_base + j, ok, sentinel)], mask=ok, other=-inf)
        pj = _exp(lpj.astype(f32), exp_mode, interpret)
        # Unclamped b: outside [0, N - 1] it fails the test below exactly as the clamped value (a pile) does.
        bj = _line(c, g, j, interpret)
        keep = ok & (bj > t_lo) & (bj < t_hi)
        # l_j = k: weight 1 - f_j = 1 - (b_j - k); l_j = k - 1: weight f_j = b_j - (k - 1) (both subtractions exact)
        wt = jnp.where(bj >= kf, 1.0 - (bj - kf), bj - km1)
        # The select between the product and 0 keeps the product rounded (no FMA into acc), as in the Triton kernel.
        return acc + jnp.where(keep, pj * wt, 0.0)

    acc = jax.lax.fori_loop(0, n_w, run_step, jnp.zeros((BR, BLOCK_N), f32))  # traced bound: scf.for on the GPU

    # 4. The full-row pass (lane = source j; after the loop so that p is not live through it): one exp per element
    #    of the row loaded in step 2. Pile sums and total mass in the fixed tree; piles, the two-hot of g == 0 rows,
    #    NaN rows; store.
    if lp.dtype == f32:
        p = _exp(lp, exp_mode, interpret)  # (BR, BLOCK_N), 0 on masked lanes
    else:  # as in the Triton kernel: lp + 0 only turns -0 into +0 (same exp); keeps 16-bit rows in the lane layout
        lp = lp.astype(f32)
        p = _exp(jnp.where(acc == acc, lp, lp + 0.0), exp_mode, interpret)
    p_lo = jnp.where(done, 0.0, _row_sum(jnp.where(at_lo, p, 0.0), BR, BLOCK_N))
    p_hi = jnp.where(done, 0.0, _row_sum(jnp.where(at_hi, p, 0.0), BR, BLOCK_N))
    p_all = _row_sum(p, BR, BLOCK_N)
    bad = bad | ~(p_all < inf)  # a NaN or +inf log-prob makes the total NaN or +inf
    b_star = jnp.minimum(jnp.maximum(c, 0.0), N - 1.0)  # (BR, 1)
    l_star = jnp.floor(b_star)
    f_star = b_star - l_star
    w_star = jnp.where(kf == l_star, 1.0 - f_star, jnp.where(kf == l_star + 1.0, f_star, 0.0))
    acc = acc + jnp.where(k == 0, p_lo, 0.0)
    acc = acc + jnp.where(k == N - 1, p_hi, 0.0)
    acc = acc + jnp.where(done & ~bad, p_all * w_star, 0.0)
    acc = jnp.where(bad, jnp.nan, acc)
    plt.store(out_ref.at[addr(rows * out_b + k, m2, B * N)], acc, mask=m2)


def _pallas_forward(q, lp, r, d, s, gamma, min_v: float, max_v: float, interpret: bool, block_rows: int | None,
                    num_warps: int | None, exp_mode: str, row_offset: int = 0) -> jax.Array:
    """The one entry point of the Pallas-Triton lowering (swap this function to add another lowering).

    Args:
        q: (E, R) f32. lp: (E, R, N) f32/bf16/f16. r, d, s: (B,) f32, R >= row_offset + B. gamma: () f32 (a runtime
        input). min_v, max_v: static support bounds. interpret: Pallas interpret mode. block_rows, num_warps:
        overrides of `kernel_config` (None: pinned defaults). exp_mode: "ex2" or "libdevice". row_offset: the
        first of the B rows of q and lp the target reads (static); they are read in place, through the kernel's
        flat offsets, so no slice of q or lp is made before the custom call.

    Returns:
        (B, N) float32.
    """
    _trace_count[0] += 1
    E, R, N = lp.shape
    B = r.shape[0]
    rows_max = max(1, MAX_FLAT // (E * N))
    if R > rows_max:  # int32 flat offsets would overflow: independent row chunks (rows never interact)
        o = row_offset
        parts = [_pallas_forward(q[:, o + i:o + min(i + rows_max, B)], lp[:, o + i:o + min(i + rows_max, B)],
                                 r[i:i + rows_max], d[i:i + rows_max], s[i:i + rows_max], gamma, min_v, max_v,
                                 interpret, block_rows, num_warps, exp_mode)
                 for i in range(0, B, rows_max)]
        return jnp.concatenate(parts, axis=0)
    sup = CategoricalSupport(N, float(min_v), float(max_v))
    cfg = kernel_config(B, N, interpret)
    br = int(block_rows) if block_rows is not None else cfg["BR"]
    if br < 1 or br & (br - 1):
        raise ValueError(f"block_rows must be a power of 2, got {br}")
    nw = int(num_warps) if num_warps is not None else cfg["num_warps"]
    kernel = functools.partial(
        _td_kernel, B=B, R=R, E=E, N=N, BLOCK_N=cfg["BLOCK_N"], BR=br, min_v=float(np.float32(sup.min_v)),
        inv_delta=float(np.float32(sup.inv_bin_width)), exp_mode=exp_mode, interpret=interpret)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((B * N,), jnp.float32),
        grid=((B + br - 1) // br,),
        compiler_params=plt.CompilerParams(num_warps=nw, num_stages=1),
        interpret=interpret,
        name="categorical_td_target",
    )(gamma.reshape(1), jnp.asarray(_strides(E, R, N, row_offset)), q.reshape(E * R), lp.reshape(E * R * N), r, d, s)
    return out.reshape(B, N)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8))
def _td_target(q, lp, r, d, s, gamma, min_v, max_v, config):
    return _pallas_forward(q, lp, r, d, s, gamma, min_v, max_v, *config)


def _td_target_fwd(q, lp, r, d, s, gamma, min_v, max_v, config):
    return _pallas_forward(q, lp, r, d, s, gamma, min_v, max_v, *config), (q, lp, r, d, s, gamma)


def _td_target_bwd(min_v, max_v, config, res, ct):
    # The target is a stop-gradient quantity (the jnp reference wraps its output in stop_gradient): zero cotangents.
    del min_v, max_v, config, ct
    return tuple(jnp.zeros_like(x) for x in res)


_td_target.defvjp(_td_target_fwd, _td_target_bwd)


@functools.partial(jax.jit, static_argnames=("min_v", "max_v", "interpret", "block_rows", "num_warps", "exp_mode",
                                             "row_offset"))
def _jitted(q, lp, r, d, s, gamma, *, min_v, max_v, interpret, block_rows, num_warps, exp_mode, row_offset):
    B = r.shape[0]
    f32 = jnp.float32
    return _td_target(q.astype(f32), lp, r.reshape(B).astype(f32), d.reshape(B).astype(f32),
                      s.reshape(B).astype(f32), jnp.asarray(gamma, f32).reshape(()), float(min_v), float(max_v),
                      (interpret, block_rows, num_warps, exp_mode, row_offset))


def launch(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v: float = -5.0,
           max_v: float = 5.0, *, interpret: bool, block_rows: int | None = None, num_warps: int | None = None,
           exp_mode: str = DEFAULT_EXP_MODE, row_offset: int | None = None) -> jax.Array:
    """Run the fused Pallas kernel (jit-compiled; usable inside `jax.jit`) on validated inputs.

    Args:
        next_qs: (E, B), or (E, R) with a row offset. next_log_probs: (E, B, N), or (E, R, N) with a row offset;
            float32/bfloat16/float16 (read in its dtype, upcast in-kernel).
        reward, terminated, next_alpha_log_pi: (B,) or (B, 1).
        gamma: gamma ** n_step, a Python float or a (traced) scalar; it is a runtime input of the kernel, so
            changing it never recompiles.
        min_v, max_v: static support bounds.
        interpret: Pallas interpret mode (any platform, slow) instead of the GPU compilation.
        block_rows, num_warps: launch overrides (power-of-2 rows per program, Triton warps); None -> pinned config.
        exp_mode: "ex2" or "libdevice".
        row_offset: None, or a static int >= 0: the target reads rows [row_offset, row_offset + B) of next_qs and
            next_log_probs (R >= row_offset + B rows; B = the rows of reward) in place, without a slice before the
            custom call (validated here: `shared_spec.reference.check_shapes`).

    Returns:
        (B, N) float32; a stop-gradient quantity (custom_vjp with zero cotangents); invalid rows are NaN.
    """
    if exp_mode not in EXP_MODES:
        raise ValueError(f"exp_mode must be one of {EXP_MODES}, got {exp_mode!r}")
    if row_offset is not None:
        check_shapes(*(x.shape for x in (next_qs, next_log_probs, reward, terminated, next_alpha_log_pi)),
                     row_offset=row_offset)
    gamma = jnp.asarray(gamma, jnp.float32)  # one abstract signature for Python floats and (traced) arrays
    return _jitted(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v=float(min_v),
                   max_v=float(max_v), interpret=bool(interpret), block_rows=block_rows, num_warps=num_warps,
                   exp_mode=exp_mode, row_offset=0 if row_offset is None else int(row_offset))
