"""Fused, deterministic Pallas kernel (lowered through Triton) for FlashSAC's categorical TD target: the kernel and
its `pallas_call` only (gate, self-test and registration: jax_impl/ops.py).

The algorithm (SPEC.md section 8: min-Q scan and row scalars, the full-row pass with the probabilities staged in the
output row and the edge atoms' exact fixed-point sums, the unrolled window scan of interior atoms with hat weights on
the exact fp32 b, two-hot of g == 0 rows and NaN rows last; RPP tiles per program, the next tile's loads issued while
the current one is computed), the fp32 operation order (section 3) and the NaN policy (section 6) are those of the
Triton kernel `triton_kernels/categorical_td_target.py`, statement for statement, with the same pinned launch
configuration (`shared_spec.launch_config.kernel_config`); its strides are constants. The row sums
are integer sums (exact in any order), products are never left to a compiler's contraction (R, `mul.rn.f32` and
`fma.rn.f32`), and exp is the same inline PTX in both kernels: `exp_mode="ex2"` (default) emits
`ex2.approx.ftz.f32(x * fp32(log2 e))`; `exp_mode="libdevice"` uses `jnp.exp` (not bitwise with the Triton kernel).
So the two kernels agree bit for bit on the same GPU (`python -m bench kernel-validate`), and no result depends
on the tile shape or on how a compiler lays tensors out in registers.

Everything Pallas-Triton specific lives behind `_pallas_forward` (one function), so another lowering (Mosaic GPU,
a Triton kernel call) can be added later without touching callers.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

from shared_spec.launch_config import kernel_config, slot_lanes
from shared_spec.reference import check_shapes
from shared_spec.support import BAND_MIN_DISCOUNT, CategoricalSupport

__all__ = ["DEFAULT_EXP_MODE", "EXP_MODES", "G_BAND_MIN", "launch", "trace_count"]

# Rows with 0 < g < G_BAND_MIN scan the whole row instead of the estimated window (SPEC.md 8).
G_BAND_MIN = BAND_MIN_DISCOUNT
# Window margin in units of N / g source steps (the Triton kernel's WINDOW_MARGIN; SPEC.md 8).
WINDOW_MARGIN = 2.0**-18
# Window steps every row takes, unrolled (the Triton kernel's UNROLL).
UNROLL = 3
# The exact sums' split and join (the Triton kernel's HALF and inline PTX).
HALF = 19


def _sum_asm(n: int, part: str) -> str:
    """The Triton kernel's PTX for the low HALF bits (part "lo") or the rest ("hi") of the sum of n fp32 terms
    truncated to int64 (one slot-tile position's terms, added one after the other)."""
    text = "{ .reg .b64 a, b; cvt.rzi.s64.f32 a, $1; "
    text += "".join(f"cvt.rzi.s64.f32 b, ${t}; add.s64 a, a, b; " for t in range(2, n + 1))
    if part == "lo":
        return text + "cvt.u32.u64 $0, a; and.b32 $0, $0, 524287; }"
    return text + "shr.u64 a, a, 19; cvt.u32.u64 $0, a; }"


_JOIN_ASM = ("{ .reg .b64 a, b; cvt.u64.u32 a, $1; shl.b64 a, a, 19; cvt.u64.u32 b, $2; add.s64 a, a, b; "
             "cvt.rn.f32.s64 $0, a; }")
# clamp(ceil(x), 0, hi) as an int32 (the window start; the Triton kernel's min.f32 and saturating conversion).
_WINDOW_START_ASM = "{ .reg .f32 t; min.f32 t, $1, $2; cvt.rpi.u32.f32 $0, t; }"
FLT_MAX = 3.4028234663852886e38
EXP_MODES = ("ex2", "libdevice")
DEFAULT_EXP_MODE = "ex2"
# Flat int32 offsets: E * R * N (+ the one-past-the-end sentinel) must fit below OFF_MASK; larger inputs are split
# over rows (`_pallas_forward`). The kernel ANDs its row base offsets (lp, out) and window base offsets with OFF_MASK.
# Why the AND is an identity: every such offset is taken of a row clamped to B - 1 (a window base adds a source
# index in [0, N - W]), so it lies in [0, E * R * N), and E * R * N <= MAX_FLAT <= OFF_MASK = 2**30 - 1; x & OFF_MASK
# == x for every x in [0, 2**30). It changes no address and no output bit. What it gives the compiler: the offset
# is provably in [0, 2**30), so offset + lane (or + window step, both < 2**30) cannot overflow int32, and the
# sign-extension of the i32 sum to a 64-bit address splits into one 64-bit row base plus a small constant that ptxas
# folds into the load's immediate. Without it every lane and every window step got its own 64-bit address
# computation (LEA + LEA.HI.X). Cost: inputs with E * R * N in [2**30, 2**31) are 2 chunks (1 at the former
# MAX_FLAT = 2**31 - 2).
OFF_MASK = 2**30 - 1
MAX_FLAT = OFF_MASK
_LOG2E = 1.4426950408889634  # Triton's constant, rounded to fp32 exactly as Triton does
# The pallas_call's name: the kernel's name on the device (profiles and CUPTI records).
KERNEL_NAME = "categorical_td_target"
_trace_count = [0]


def trace_count() -> int:
    """How many times the kernel wrapper has been traced (one per new shape/dtype/static configuration)."""
    return _trace_count[0]


def _asm(text: str, args: list, constraints: str) -> jax.Array:
    """One fp32 PTX instruction per element (the Triton kernel's `tl.inline_asm_elementwise`, pack=1)."""
    shape = jnp.broadcast_shapes(*(x.shape for x in args))
    (y,) = plt.elementwise_inline_asm(text, args=[jnp.broadcast_to(x, shape) for x in args], constraints=constraints,
                                      pack=1, result_shape_dtypes=[jax.ShapeDtypeStruct(shape, jnp.float32)])
    return y


def _round(x: jax.Array) -> jax.Array:
    """Identity on non-NaN values; stops FMA contraction of the product `x` into a following add (SPEC.md 3)."""
    return jnp.where(x != x, 0.0, x)


def _line(c: jax.Array, g: jax.Array, jf: jax.Array, interpret: bool) -> jax.Array:
    """c + R(g * j) in fp32 for a float source index jf (SPEC.md 3); on the GPU the product is the Triton kernel's
    mul.rn.f32 (an explicit rounding modifier is never contracted into an FMA), in interpret mode R (XLA on CPU
    contracts too)."""
    if interpret:
        return c + _round(g * jf)
    return c + _asm("mul.rn.f32 $0, $1, $2;", [g, jf], "=f,f,f")


def _mul(a: jax.Array, b, interpret: bool) -> jax.Array:
    """R(a * b) for a product that meets an addition: mul.rn.f32 on the GPU (the Triton kernel's; NaN kept)."""
    if interpret:
        return _round(a * b)
    return _asm("mul.rn.f32 $0, $1, $2;", [jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)], "=f,f,f")


def _fma(a: jax.Array, b: jax.Array, acc: jax.Array, interpret: bool) -> jax.Array:
    """acc + a * b: fma.rn.f32 on the GPU (the Triton kernel's instruction); in interpret mode the product is rounded
    first, as in the Triton interpreter."""
    if interpret:
        return acc + _round(a * b)
    return _asm("fma.rn.f32 $0, $1, $2, $3;", [a, b, acc], "=f,f,f,f")


def _fma_nan(a: jax.Array, b: jax.Array, acc: jax.Array, interpret: bool) -> jax.Array:
    """acc + a * b as _fma, for the epilogue, where a NaN a must reach the result (the Triton kernel's _fma_nan): in
    interpret mode without R; the product is rounded once either way there, as acc is +0 or a is 0."""
    if interpret:
        return acc + a * b
    return _asm("fma.rn.f32 $0, $1, $2, $3;", [a, b, acc], "=f,f,f,f")


def _exp(x: jax.Array, exp_mode: str, interpret: bool) -> jax.Array:
    """fp32 exp. "ex2": ex2.approx.ftz.f32(x * fp32(log2 e)), the Triton kernel's two instructions, as inline PTX;
    in interpret mode numpy's float32 exp, the function the Triton interpreter uses, so the two interpreted kernels
    share it. "libdevice": jnp.exp (__nv_expf on the GPU)."""
    if exp_mode == "libdevice":
        return jnp.exp(x)
    if interpret:
        return jax.pure_callback(np.exp, jax.ShapeDtypeStruct(x.shape, jnp.float32), x)
    return _asm("ex2.approx.ftz.f32 $0, $1;", [x * np.float32(_LOG2E)], "=f,f")


def _rcp(x: jax.Array, interpret: bool) -> jax.Array:
    """1 / x for the window estimates only: rcp.approx.ftz.f32 on the GPU, as in the Triton kernel."""
    if interpret:
        return 1.0 / x
    return _asm("rcp.approx.ftz.f32 $0, $1;", [x], "=f,f")


def _pow2(e: jax.Array) -> jax.Array:
    """2**e as fp32 for an int32 array e in [-126, 127], exactly (the exponent field written directly)."""
    return jax.lax.bitcast_convert_type((e + 127) << 23, jnp.float32)


def _split_np(*xs) -> tuple[np.ndarray, np.ndarray]:
    q = sum(np.asarray(x).astype(np.int64) for x in xs)
    return (q & ((1 << HALF) - 1)).astype(np.int32), (q >> HALF).astype(np.int32)


def _join_np(hi, lo) -> np.ndarray:
    return ((np.asarray(hi).astype(np.int64) << HALF) + np.asarray(lo).astype(np.int64)).astype(np.float32)


def _row_reduce(x: jax.Array, is_max: bool, interpret: bool) -> jax.Array:
    """The (BR, 1) row sums (or maxima) of a (BR, Q) int32 array x >= 0 (the Triton kernel's _row_reduce): along the
    lanes for one row (and in interpret mode); for BR > 1 rows sharing a warp on the GPU, one whole-tile reduction per
    row with the other rows' lanes set to 0 (warp reduction instructions, not a butterfly of shuffles)."""
    red = jnp.max if is_max else functools.partial(jnp.sum, dtype=jnp.int32)
    BR = x.shape[0]
    if BR == 1 or interpret:
        return red(x, axis=1, keepdims=True)
    ar = jnp.arange(BR, dtype=jnp.int32)[:, None]
    out = jnp.zeros((BR, 1), x.dtype)
    for r in range(BR):
        # flattened first: Pallas lowers a reduction over both axes as two (the lanes, then the rows: shuffles)
        out = jnp.where(ar == r, red(jnp.where(ar == r, x, 0).reshape(-1)), out)
    return out


def _fixed_sum(xs: list, inv_scale: jax.Array, interpret: bool) -> jax.Array:
    """The Triton kernel's exact row sum over the slot tiles xs of a row: sum_j trunc(x_j) * inv_scale for terms
    0 <= x_j < 2**(31 - log2 BLOCK_N + HALF); a tile position's terms are truncated to int64 and added, the group sum
    is split into its low HALF bits and the rest, each part is summed in int32, and the total is rounded once to
    fp32. The truncations, the group sum, the split and the join are the Triton kernel's inline PTX on the GPU (a jnp
    cast would clamp first) and the same int64 numpy arithmetic in interpret mode (through host callbacks: JAX has no
    int64 without x64)."""
    i32 = jax.ShapeDtypeStruct(xs[0].shape, jnp.int32)
    if interpret:
        lo, hi = jax.pure_callback(_split_np, (i32, i32), *xs)
    else:
        lo, hi = (plt.elementwise_inline_asm(_sum_asm(len(xs), part), args=list(xs), constraints="=r" + ",f" * len(xs),
                                             pack=1, result_shape_dtypes=[i32])[0] for part in ("lo", "hi"))
    lo = _row_reduce(lo, False, interpret)
    hi = _row_reduce(hi, False, interpret)
    if interpret:
        total = jax.pure_callback(_join_np, jax.ShapeDtypeStruct(hi.shape, jnp.float32), hi, lo)
    else:
        total = _asm(_JOIN_ASM, [hi, lo], "=f,r,r")
    return total * inv_scale


def _window_start(x: jax.Array, hi: jax.Array, interpret: bool) -> jax.Array:
    """clamp(ceil(x), 0, hi) as int32 for a float hi >= 0 holding an integer: the Triton kernel's min.f32 and
    saturating cvt.rpi.u32.f32 on the GPU (a jnp cast would clamp first)."""
    if interpret:
        return jnp.minimum(jnp.maximum(jnp.ceil(x), 0.0), hi).astype(jnp.int32)
    shape = jnp.broadcast_shapes(x.shape, hi.shape)
    (y,) = plt.elementwise_inline_asm(_WINDOW_START_ASM, args=[jnp.broadcast_to(x, shape), jnp.broadcast_to(hi, shape)],
                                      constraints="=r,f,f", pack=1,
                                      result_shape_dtypes=[jax.ShapeDtypeStruct(shape, jnp.int32)])
    return y


def _bits(p: jax.Array) -> jax.Array:
    """The bit pattern of |p| as an int32."""
    return jax.lax.bitcast_convert_type(p, jnp.int32) & 0x7FFFFFFF


def _abs(x: jax.Array, interpret: bool) -> jax.Array:
    """|x|: abs.f32 on the GPU, the instruction of the Triton kernel's tl.abs (ptxas folds it into the next add as an
    operand modifier). jnp.abs is libdevice's __nv_fabsf there, abs.ftz.f32, which ptxas keeps as an instruction of
    its own (FADD.FTZ |x|, -0)."""
    return jnp.abs(x) if interpret else _asm("abs.f32 $0, $1;", [x], "=f,f")


def _to_int(x: jax.Array, interpret: bool) -> jax.Array:
    """float -> int32 by truncation for in-range values: cvt.rzi.s32.f32 on the GPU (the Triton kernel's .to(int32);
    a jnp cast clamps first: three more instructions)."""
    if interpret:
        return x.astype(jnp.int32)
    (y,) = plt.elementwise_inline_asm("cvt.rzi.s32.f32 $0, $1;", args=[x], constraints="=r,f", pack=1,
                                      result_shape_dtypes=[jax.ShapeDtypeStruct(x.shape, jnp.int32)])
    return y


def _hat(b: jax.Array, kf: jax.Array, first: bool, interpret: bool) -> jax.Array:
    """The hat weight of position b at atom k, the Triton kernel's formulas (SPEC.md 8): the section-3 weight bit for
    bit inside (k - 1, k + 1), 0 outside. first (the slot tile of atoms 0 .. Q - 1): min(clamp((k + 1) - b),
    clamp(b - (k - 1))); the other tiles (k >= 2): clamp(1 - |b - k|)."""
    if first:
        return jnp.minimum(jnp.minimum(jnp.maximum((kf + 1.0) - b, 0.0), 1.0),
                           jnp.minimum(jnp.maximum(b - (kf - 1.0), 0.0), 1.0))
    return jnp.minimum(jnp.maximum(1.0 - _abs(b - kf, interpret), 0.0), 1.0)


# The strides and row offsets are compile-time constants of the Pallas kernel (the Triton kernel takes its row
# strides as unspecialised runtime integers: a torch tensor's strides are runtime values, a JAX array's follow from
# its static shape). Neither the bits nor the launch depend on it: every row sum is exact (integer), so no output
# depends on the register layouts that pointer divisibility steers. Until 2026-12-03 the Pallas kernel read them from
# an (8,) int32 input, so that both compilers saw the same unknown divisibility; under XLA's Triton those eight loaded
# values and the address arithmetic on them lived in per-thread registers (96 a thread against the Triton kernel's
# 80 at the row pairs' configuration, bench/results/h200-2026-12-03-xla-ptx). The last two are the flat offsets of
# the first target row in q and lp (the row-offset form; a torch view's storage offset is the same thing, folded
# into the Triton kernel's base pointers).
STRIDE_NAMES = ("q_e", "q_b", "lp_e", "lp_b", "row", "out_b", "q_0", "lp_0")


def _strides(E: int, R: int, N: int, row_offset: int) -> tuple[int, ...]:
    """Row-major strides of the flat inputs q (E, R), lp (E, R, N), per-row (B,), out (B, N), then the flat offsets
    of row `row_offset` in q and lp (STRIDE_NAMES)."""
    return (R, 1, R * N, N, 1, N, row_offset, row_offset * N)


def _td_kernel(gamma_ref, q_ref, lp_ref, r_ref, d_ref, s_ref, out_ref, *, B: int, R: int, E: int, N: int,
               BLOCK_N: int, BR: int, RPP: int, Q: int, strides: tuple[int, ...], min_v: float, inv_delta: float,
               exp_mode: str, interpret: bool):
    """One program: RPP tiles of BR rows x BLOCK_N lanes (destination atoms k), the lanes as SLOTS slot tiles of Q;
    the statements of the Triton kernel, in order.

    Refs are whole flat arrays (no BlockSpec): gamma (1,) f32; q (E*R,) f32;
    lp (E*R*N,) f32/bf16/f16; r, d, s (B,) f32; out (B*N,) f32 (also the staging row of the probabilities). Target
    row i of critic e reads q[q_0 + e * q_e + i * q_b] and lp[lp_0 + e * lp_e + i * lp_b + j] (R = B and
    q_0 = lp_0 = 0 unless the caller passed a row offset). Only these integer offsets see R and the offset: the float
    arithmetic is the same for all of them. Per-row quantities are (BR, 1) tensors in the layout of the (BR, Q)
    tiles, as in the Triton kernel; rows past B read row B - 1 and are never stored. In interpret mode masked lanes
    address a one-past-the-end sentinel, which the interpret-mode scatter drops (a masked store is a read-modify-write
    scatter there: an in-bounds masked lane, e.g. column 101..127 of row r = column 0..26 of row r + 1, would write
    stale data). On the GPU masked lanes are never dereferenced, so the raw offsets are kept. Every flat offset is
    taken of a row clamped to B - 1, so it stays below E * R * N (< 2**30, `_pallas_forward` splits larger inputs;
    the ANDs with OFF_MASK are identities, see OFF_MASK).
    """

    def addr(off, mask, sentinel):
        return jnp.where(mask, off, sentinel) if interpret else off

    f32 = jnp.float32
    inf = float("inf")
    q_e, q_b, lp_e, lp_b, row_stride, out_b, q_0, lp_0 = strides  # Python ints (STRIDE_NAMES)
    gamma = gamma_ref[0]
    pid = pl.program_id(0)
    # A row's lanes are SLOTS slot tiles of Q lanes (shared_spec.launch_config.slot_lanes), lane t Q + i at position
    # i of tile t (the Triton kernel's), only as many as hold a lane below N.
    SLOTS = -(-N // Q)
    i = jnp.arange(Q, dtype=jnp.int32)[None, :]  # (1, Q) position in a slot tile
    kks = [i + t * Q for t in range(SLOTS)]  # lane t Q + i: source (step 2) or destination atom (steps 3-4)

    def load_means(rows):
        # The E critic means of the (clamped) rows: loads only, so a prefetch does not wait for them.
        qs = (plt.load(q_ref.at[q_0 + rows * q_b]),)
        for e in range(1, E):
            qs = qs + (plt.load(q_ref.at[q_0 + e * q_e + rows * q_b]),)
        return qs

    def load_row(base, ok):
        # The log-prob row at flat offset base (BR, 1) as slot tiles (BR, Q), -inf on masked lanes; ok: None, or a
        # scalar that masks the whole row off (a prefetch past the program's last tile). Loads only.
        lps = ()
        for t, kk in enumerate(kks):
            if (t + 1) * Q <= N and ok is None:  # every lane of the tile is a source
                x = plt.load(lp_ref.at[base + kk])
            else:
                m = jnp.broadcast_to(ok, (BR, Q)) if (t + 1) * Q <= N else (kk < N if ok is None else (kk < N) & ok)
                x = plt.load(lp_ref.at[addr(base + kk, m, E * R * N)], mask=m, other=-inf)
            lps = lps + (x.astype(f32),)
        return lps

    def store_row(out_row, xs):
        # Stores the slot tiles xs (lanes < N) of every row of the tile (rows past B: see tile()).
        for t, (kk, x) in enumerate(zip(kks, xs, strict=True)):
            if (t + 1) * Q <= N:
                plt.store(out_ref.at[out_row + kk], x)
            else:
                m = kk < N
                plt.store(out_ref.at[addr(out_row + kk, m, B * N)], x, mask=m)

    def select(qs):
        # Min-mean critic (strict < scan: ties -> the first critic) and the rows' NaN-mean flag.
        best = qs[0]
        sel = jnp.zeros((BR, 1), jnp.int32)
        bad = best != best
        for e in range(1, E):
            qe = qs[e]
            bad = bad | (qe != qe)
            take = qe < best
            best = jnp.where(take, qe, best)
            sel = jnp.where(take, e, sel)
        return sel, bad

    def tile(lps, sel, bad, r, d, s, rows):
        """Steps 1 (after the loads) to 4 for one tile (the Triton kernel's _tile): lps is the selected log-prob row
        as slot tiles, or None (loaded here: the one-tile kernel, RPP = 1); stores the tile's rows. Rows past B (the
        grid's last tile, when BR does not divide B) are row B - 1 again: the same inputs, staged probabilities and
        result, stored to its row in the same instructions, so no store needs a row mask (the Triton kernel's)."""
        rows = jnp.minimum(rows, B - 1)
        g = gamma * (1.0 - d)
        c = _mul((r - min_v) + _mul(g, min_v - s, interpret), inv_delta, interpret)  # (BR, 1)
        # A NaN reward or shift makes the raw c NaN (g * NaN is NaN for every g), so its test covers them (SPEC.md 6).
        # On the GPU c is the raw c (mul.rn keeps NaN); in interpret mode R turns a NaN product into 0.
        c_raw = ((r - min_v) + g * (min_v - s)) * inv_delta if interpret else c
        # d outside [0, 1] (or NaN) is clamp(d) != d (the Triton kernel's form: one comparison).
        bad = bad | (c_raw != c_raw) | (jnp.minimum(jnp.maximum(d, 0.0), 1.0) != d)
        bad = bad | ~((g >= 0.0) & (g <= FLT_MAX))  # g in [0, inf): one comparison each
        # Rows with g == 0 (and invalid rows, overwritten in step 4) place every source at b = -1, the low edge.
        live = ~bad & (g > 0.0)
        gl = jnp.where(live, g, 0.0)
        cs = jnp.where(live, c, -1.0)
        kfs = [kk.astype(f32) for kk in kks]

        # 2. The full-row pass (lane = source j): one load and one exp per element, staged in the output row (gathered
        #    by the window steps after the barrier); the edge atoms' exact sums (fixed point from the row maximum, a
        #    tile position's terms in int64, then two int32 part sums).
        if lps is None:
            lps = load_row((lp_0 + sel * lp_e + rows * lp_b) & OFF_MASK, None)  # the selected row; AND: OFF_MASK
        ps = [_exp(lp, exp_mode, interpret) for lp in lps]  # (BR, Q), 0 on masked lanes
        out_row = (rows * out_b) & OFF_MASK  # (BR, 1); the AND: see OFF_MASK
        store_row(out_row, ps)  # all loads before the stores
        if not interpret:  # interpret mode runs the program's statements in order: nothing to wait for
            plt.debug_barrier()
        m_bits = _bits(ps[0])
        for p in ps[1:]:
            m_bits = jnp.maximum(m_bits, _bits(p))
        m_bits = _row_reduce(m_bits, True, interpret)  # (BR, 1) bits of each row's max p
        bad = bad | (m_bits >= 0x7F800000)  # a NaN or +inf probability
        FIX = 32 - BLOCK_N.bit_length() + HALF  # max p scales to [2**(FIX - 1), 2**FIX): 43 bits at N = 101
        shift = jnp.minimum(FIX - 1 - ((m_bits >> 23) - 127), 126)
        scale = _pow2(shift)
        inv_scale = _pow2(-shift)
        t_lo, t_hi, t_all = [], [], []
        for p, kf in zip(ps, kfs, strict=True):
            b = _line(cs, gl, kf, interpret)  # unclamped positions
            pst = p * scale  # exact
            if interpret:
                pst = jnp.where(pst < inf, pst, 0.0)  # as in the Triton kernel's interpret mode (the row is NaN anyway)
            t_lo.append(pst * jnp.minimum(jnp.maximum(1.0 - b, 0.0), 1.0))
            t_hi.append(pst * jnp.minimum(jnp.maximum(b - (N - 2.0), 0.0), 1.0))
            t_all.append(pst)
        e_lo = _fixed_sum(t_lo, inv_scale, interpret)  # (BR, 1)
        e_hi = _fixed_sum(t_hi, inv_scale, interpret)
        # The total mass can overflow fp32 only if max p >= 2**(127 - log2 BLOCK_N); only then is it summed (lax.cond:
        # the Triton kernel's branch).
        bad = jax.lax.cond((jnp.max(m_bits) >> 23) >= 254 - BLOCK_N.bit_length(),
                           lambda bad: bad | ~(_fixed_sum(t_all, inv_scale, interpret) < inf), lambda bad: bad, bad)

        # 3. Interior atoms 1 <= k <= N - 2: the window [j0, j0 + W) of sources, gathered from the staged row in
        #    ascending j, each adding p_j times its hat weight (the window's other sources add +0).
        accs = [jnp.zeros((BR, Q), f32) for _ in range(SLOTS)]
        if N > 2:
            band = live & (g >= G_BAND_MIN) & (g <= 1.0)  # g > 1 (a gamma above 1): the whole row
            inv_g = _rcp(jnp.where(band, g, 1.0), interpret)  # only used for the window
            eps = (N * WINDOW_MARGIN) * inv_g  # (BR, 1) in source steps; far above the fp32 error of the estimates
            n_win = jnp.where(band, jnp.minimum(jnp.ceil(2.0 * inv_g + 2.0 * eps), N * 1.0),
                              jnp.where(live, N * 1.0, UNROLL * 1.0))  # (BR, 1) W >= UNROLL
            # j0 = ceil((k - 1 - c) / g - eps) as k / g - ((1 + c) / g + eps) (an estimate: the margin covers it)
            t0 = (1.0 + jnp.where(band, c, 0.0)) * inv_g + eps  # (BR, 1)
            j0s = [_window_start(kf * inv_g - t0, N - n_win, interpret) for kf in kfs]  # (BR, Q); dense rows: 0
            jf0s = [j0.astype(f32) for j0 in j0s]
            ptrs = [(out_row + j0) & OFF_MASK for j0 in j0s]  # j0 in [0, N - W]: ptr + w < B * N

            def step(t, jf, acc, pj):
                # Unclamped b: a pile source gets weight 0 at every interior atom.
                return _fma(pj, _hat(_line(cs, gl, jf, interpret), kfs[t], t == 0, interpret), acc, interpret)

            for w in range(UNROLL):
                accs = [step(t, jf0s[t] + w if w > 0 else jf0s[t], accs[t], plt.load(out_ref.at[ptrs[t] + w]))
                        for t in range(SLOTS)]
            n_w = jnp.max(_to_int(n_win, interpret))  # the tile's largest W (integers: the order is free)

            def more(w, accs):
                ok = w < n_win
                return tuple(step(t, jf0s[t] + w.astype(f32), accs[t],
                                  plt.load(out_ref.at[addr(ptrs[t] + w, ok, B * N)], mask=ok, other=0.0))
                             for t in range(SLOTS))

            accs = list(jax.lax.fori_loop(UNROLL, n_w, more, tuple(accs)))  # traced bound: scf.for on the GPU

        # 4. Edges, the two-hot of g == 0 rows (total mass e_lo at b* = clamp(c)), NaN rows; store. The NaN flag rides
        #    on e_d, the epilogue's multiplier (the Triton kernel's): NaN in invalid rows, e_lo in rows with g == 0
        #    (window sum +0), 0 in the others.
        done = ~live | bad
        e_d = jnp.where(bad, jnp.nan, jnp.where(done, e_lo, 0.0))  # (BR, 1)
        b_star = jnp.minimum(jnp.maximum(c, 0.0), N - 1.0)  # (BR, 1)
        lo = jnp.where(done, e_d * jnp.minimum(jnp.maximum(1.0 - b_star, 0.0), 1.0), e_lo)  # (BR, 1)
        hi = jnp.where(done, e_d * jnp.minimum(jnp.maximum(b_star - (N - 2.0), 0.0), 1.0), e_hi)
        outs = []
        for t in range(SLOTS):
            acc = _fma_nan(e_d, _hat(b_star, kfs[t], t == 0, interpret), accs[t], interpret)
            if t == 0:
                acc = jnp.where(i == 0, lo, acc)
            if t * Q <= N - 1 < (t + 1) * Q:
                acc = jnp.where(i == N - 1 - t * Q, hi, acc)
            outs.append(acc)
        if not interpret:
            plt.debug_barrier()  # every window gather is done before the row is overwritten
        store_row(out_row, outs)

    ar = jnp.arange(BR, dtype=jnp.int32)[:, None]

    def scalars(rows):
        row_off = rows * row_stride
        return plt.load(r_ref.at[row_off]), plt.load(d_ref.at[row_off]), plt.load(s_ref.at[row_off])

    if RPP == 1:
        # 1. Min-mean critic and the row scalars.
        rows = pid * BR + ar  # (BR, 1)
        rows_c = jnp.minimum(rows, B - 1)
        sel, bad = select(load_means(rows_c))
        tile(None, sel, bad, *scalars(rows_c), rows)
        return

    # RPP tiles one after another (SPEC.md 8), software-pipelined as in the Triton kernel: while tile i is computed,
    # the selected log-prob row and r, d, s of tile i + 1 and the critic means of tile i + 2 are in flight. Tiles
    # past the grid's last one are never computed; prefetches past it read clamped rows (the row load is masked off).
    t0 = pid * RPP
    n_tiles = jnp.minimum((B + BR - 1) // BR - t0, RPP)  # >= 1

    def clamped(t):
        return jnp.minimum(t * BR + ar, B - 1)

    rows0 = clamped(t0)
    qs = load_means(rows0)
    r, d, s = scalars(rows0)
    qs_next = load_means(clamped(t0 + 1))
    sel, bad = select(qs)
    lps = load_row((lp_0 + sel * lp_e + rows0 * lp_b) & OFF_MASK, None)

    def step(carry):
        i_t, qs_next, lps, bad, r, d, s = carry
        # Tile i_t + 1: its critic (its means arrived during tile i_t - 1), its row and scalars.
        rows1 = clamped(t0 + i_t + 1)
        sel1, bad1 = select(qs_next)
        lps1 = load_row((lp_0 + sel1 * lp_e + rows1 * lp_b) & OFF_MASK, i_t + 1 < n_tiles)
        r1, d1, s1 = scalars(rows1)
        # Tile i_t + 2: its critic means.
        qs_next = load_means(clamped(t0 + i_t + 2))
        tile(lps, None, bad, r, d, s, (t0 + i_t) * BR + ar)
        return i_t + 1, qs_next, lps1, bad1, r1, d1, s1

    # A while loop (scf.while on the GPU), as in the Triton kernel. With fori_loop (scf.for) Triton's layout pass
    # carried six of the values in a second layout as well (13 carried instead of 7) and repeated part of the body
    # (the critic scan) for it: about 30 more instructions a row at RPP 16. Same arithmetic.
    jax.lax.while_loop(lambda c: c[0] < n_tiles, step, (jnp.int32(0), qs_next, lps, bad, r, d, s))


def _pallas_forward(q, lp, r, d, s, gamma, min_v: float, max_v: float, interpret: bool, block_rows: int | None,
                    num_warps: int | None, exp_mode: str, row_offset: int = 0,
                    rows_per_program: int | None = None, lanes_per_slot: int | None = None) -> jax.Array:
    """The one entry point of the Pallas-Triton lowering (swap this function to add another lowering).

    Args:
        q: (E, R) f32. lp: (E, R, N) f32/bf16/f16. r, d, s: (B,) f32, R >= row_offset + B. gamma: () f32 (a runtime
        input). min_v, max_v: static support bounds. interpret: Pallas interpret mode. block_rows, num_warps,
        rows_per_program, lanes_per_slot: overrides of `kernel_config`'s BR, num_warps, RPP and Q (None: pinned
        defaults; Q then follows BR and num_warps, `shared_spec.launch_config.slot_lanes`). exp_mode:
        "ex2" or "libdevice". row_offset: the first of the B rows of q and lp the target reads (static); they are read
        in place, through the kernel's flat offsets, so no slice of q or lp is made before the custom call.

    Returns:
        (B, N) float32.
    """
    _trace_count[0] += 1
    E, R, N = lp.shape
    B = r.shape[0]
    assert MAX_FLAT <= OFF_MASK, "the kernel's offset ANDs are an identity only below OFF_MASK"
    rows_max = max(1, MAX_FLAT // (E * N))
    if R > rows_max:  # int32 flat offsets would overflow: independent row chunks (rows never interact)
        o = row_offset
        parts = [_pallas_forward(q[:, o + i:o + min(i + rows_max, B)], lp[:, o + i:o + min(i + rows_max, B)],
                                 r[i:i + rows_max], d[i:i + rows_max], s[i:i + rows_max], gamma, min_v, max_v,
                                 interpret, block_rows, num_warps, exp_mode, 0, rows_per_program, lanes_per_slot)
                 for i in range(0, B, rows_max)]
        return jnp.concatenate(parts, axis=0)
    sup = CategoricalSupport(N, float(min_v), float(max_v))
    cfg = kernel_config(B, N, interpret)
    br = int(block_rows) if block_rows is not None else cfg["BR"]
    if br < 1 or br & (br - 1):
        raise ValueError(f"block_rows must be a power of 2, got {br}")
    nw = int(num_warps) if num_warps is not None else cfg["num_warps"]
    rpp = int(rows_per_program) if rows_per_program is not None else cfg["RPP"]
    if rpp < 1:
        raise ValueError(f"rows_per_program must be >= 1, got {rpp}")
    q_lanes = int(lanes_per_slot) if lanes_per_slot is not None else slot_lanes(cfg["BLOCK_N"], br, nw, interpret)
    if q_lanes < 2 or q_lanes & (q_lanes - 1) or q_lanes > cfg["BLOCK_N"]:
        raise ValueError(f"lanes_per_slot must be a power of 2 in [2, {cfg['BLOCK_N']}], got {q_lanes}")
    kernel = functools.partial(
        _td_kernel, B=B, R=R, E=E, N=N, BLOCK_N=cfg["BLOCK_N"], BR=br, RPP=rpp,
        Q=q_lanes, strides=_strides(E, R, N, row_offset), min_v=float(np.float32(sup.min_v)),
        inv_delta=float(np.float32(sup.inv_bin_width)), exp_mode=exp_mode, interpret=interpret)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((B * N,), jnp.float32),
        grid=((B + br * rpp - 1) // (br * rpp),),
        compiler_params=plt.CompilerParams(num_warps=nw, num_stages=1),
        interpret=interpret,
        name=KERNEL_NAME,
    )(gamma.reshape(1), q.reshape(E * R), lp.reshape(E * R * N), r, d, s)
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
                                             "row_offset", "rows_per_program", "lanes_per_slot"))
def _jitted(q, lp, r, d, s, gamma, *, min_v, max_v, interpret, block_rows, num_warps, exp_mode, row_offset,
            rows_per_program, lanes_per_slot):
    B = r.shape[0]
    f32 = jnp.float32
    return _td_target(q.astype(f32), lp, r.reshape(B).astype(f32), d.reshape(B).astype(f32),
                      s.reshape(B).astype(f32), jnp.asarray(gamma, f32).reshape(()), float(min_v), float(max_v),
                      (interpret, block_rows, num_warps, exp_mode, row_offset, rows_per_program, lanes_per_slot))


def launch(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v: float = -5.0,
           max_v: float = 5.0, *, interpret: bool, block_rows: int | None = None, num_warps: int | None = None,
           exp_mode: str = DEFAULT_EXP_MODE, row_offset: int | None = None,
           rows_per_program: int | None = None, lanes_per_slot: int | None = None) -> jax.Array:
    """Run the fused Pallas kernel (jit-compiled; usable inside `jax.jit`) on validated inputs.

    Args:
        next_qs: (E, B), or (E, R) with a row offset. next_log_probs: (E, B, N), or (E, R, N) with a row offset;
            float32/bfloat16/float16 (read in its dtype, upcast in-kernel).
        reward, terminated, next_alpha_log_pi: (B,) or (B, 1).
        gamma: gamma ** n_step, a Python float or a (traced) scalar; it is a runtime input of the kernel, so
            changing it never recompiles.
        min_v, max_v: static support bounds.
        interpret: Pallas interpret mode (any platform, slow) instead of the GPU compilation.
        block_rows, num_warps, rows_per_program, lanes_per_slot: launch overrides (power-of-2 rows per tile, Triton
            warps, tiles per program, lanes per slot tile: the Triton kernel's BR, num_warps, RPP and Q); None ->
            pinned config (Q: from BR and num_warps).
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
                   exp_mode=exp_mode, row_offset=0 if row_offset is None else int(row_offset),
                   rows_per_program=None if rows_per_program is None else int(rows_per_program),
                   lanes_per_slot=None if lanes_per_slot is None else int(lanes_per_slot))
