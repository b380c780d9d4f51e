"""The pinned launch configuration shared by the Triton and the Pallas kernel (pure Python: no triton, no jax)."""

from __future__ import annotations

__all__ = ["GPU_MAX_RPP", "GPU_MIN_PROGRAMS", "GPU_PAIR_BLOCK_N", "GPU_PAIR_MAX_RPP", "GPU_PAIR_MIN_B",
           "GPU_PAIR_MIN_PROGRAMS", "GPU_RPP_MAX_BLOCK_N", "MAX_E", "MAX_N", "gpu_rows_per_program", "kernel_config",
           "next_power_of_2", "slot_lanes", "with_overrides"]

# The kernels' supported sizes (both gates refuse anything else with a reason).
MAX_N, MAX_E = 4096, 16

# Tiles per program on the GPU (SPEC.md 8): a program loops over RPP tiles of BR rows and prefetches the next tile's
# inputs while it computes the current one. RPP grows with B so that the grid keeps at least GPU_MIN_PROGRAMS
# programs (small B keeps one tile per program: it needs every program it can get), up to GPU_MAX_RPP, for rows of at
# most GPU_RPP_MAX_BLOCK_N lanes (one warp; wider rows use many more registers with RPP > 1 and keep one tile per
# program). These are the knobs set from H200 timings of the launch configurations (GPU_MAX_RPP = 1
# gives the one-tile kernel everywhere). On the H200 (bench/results/h200-2026-12-01-kernel-rpp), Triton, median of 5
# rounds: B = 512 RPP 1/2/4: 2.3/2.6/3.4 us (more tiles per program starve small grids, hence GPU_MIN_PROGRAMS);
# B = 65,536 RPP 1/2/4/8: 42.4/38.6/37.5/38.0 us (this rule picks 4); B = 1,048,576 RPP 1/2/4/8/16:
# 635.6/566.3/536.1/523.2/519.5 us (it picks 16). The bits never depend on RPP.
GPU_MIN_PROGRAMS = 16384
GPU_MAX_RPP = 16
GPU_RPP_MAX_BLOCK_N = 128
# Row pairs (SPEC.md 8): rows of GPU_PAIR_BLOCK_N lanes (65 <= N <= 128) run two to a warp (BR = 2, one warp, 16
# threads and Q = 16 lanes per slot tile a row) from GPU_PAIR_MIN_B rows on, with the tiles-per-program rule above
# at GPU_PAIR_MIN_PROGRAMS and GPU_PAIR_MAX_RPP. A per-row value is then one register of the 16 threads of its row, so
# a warp instruction on row scalars serves two rows, and a row of 101 atoms takes 7 slot tiles of 16 lanes (112)
# instead of 4 of 32 (128). On the H200 (bench/results/h200-2026-12-02-rowpair), Triton, median of 5 rounds, one
# row a warp (pinned before) against pairs with RPP 1/2/4/8: B = 512 2.25 against 2.39 (RPP 1: hence
# GPU_PAIR_MIN_B); 2048 3.22 against 2.96; 65,536 32.57 against 29.63/29.23/28.67/30.04; 1,048,576 439.66 against
# 426.94/425.52/405.54/406.30 (this rule picks RPP 1, 1, 4 and 4).
GPU_PAIR_BLOCK_N = 128
GPU_PAIR_MIN_B = 2048
GPU_PAIR_MIN_PROGRAMS = 8192
GPU_PAIR_MAX_RPP = 4


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def gpu_rows_per_program(B: int, BR: int = 1, min_programs: int | None = None, max_rpp: int | None = None) -> int:
    """Tiles per program on the GPU: the largest power of 2 RPP <= max_rpp (default GPU_MAX_RPP) with
    B / (BR RPP) >= min_programs (default GPU_MIN_PROGRAMS); 1 when B < 2 BR min_programs."""
    min_programs = GPU_MIN_PROGRAMS if min_programs is None else min_programs
    max_rpp = GPU_MAX_RPP if max_rpp is None else max_rpp
    rpp = 1
    while 2 * rpp <= max_rpp and B >= 2 * rpp * BR * min_programs:
        rpp *= 2
    return rpp


def slot_lanes(block_n: int, br: int, num_warps: int, interpret: bool) -> int:
    """Q, the lanes of one slot tile (SPEC.md 8): a row's BLOCK_N lanes are ceil(N / Q) slot tiles of Q lanes, each a
    (BR, Q) tensor. On the GPU, when the BR rows of a tile share the warps (32 num_warps / BR threads a row, fewer than
    a warp), Q is one lane per thread of a row: every thread then holds one lane of one row in each slot tile, so a
    per-row value is one register of each of its row's threads. Otherwise (a row per warp or more, and interpret mode):
    four slot tiles from 128 lanes on, two at 64, one below."""
    threads = 32 * num_warps // br
    if not interpret and 2 <= threads < 32 and threads < block_n:
        return threads
    return block_n // (4 if block_n >= 128 else (2 if block_n == 64 else 1))


def kernel_config(B: int, N: int, interpret: bool) -> dict[str, int]:
    """Pinned launch configuration (no autotuning: the reduction order must not depend on timing).

    Both kernels launch with exactly this configuration, so on the GPU they see the same tiles and warps.

    Args:
        B: rows. N: atoms. interpret: the kernel runs interpreted on the CPU (TRITON_INTERPRET=1 / Pallas
            interpret mode), where the grid is a sequential loop: few, large programs.

    Returns:
        {"BLOCK_N": next power of 2 >= N (>= 2) lanes, "BR": rows per tile (a power of 2), "num_warps",
        "RPP": tiles per program (the grid is ceil(B / (BR * RPP)) programs), "Q": lanes per slot tile
        (`slot_lanes`)}.
    """
    block_n = max(next_power_of_2(N), 2)
    if interpret:
        return {"BLOCK_N": block_n, "BR": min(64, next_power_of_2(B)), "num_warps": 4, "RPP": 1,
                "Q": slot_lanes(block_n, 1, 1, True)}
    # Rows of up to 128 lanes: two rows to a warp from GPU_PAIR_MIN_B rows on (row pairs, above), else one row per
    # tile and one warp per 128 lanes. Row reductions stay inside a warp (warp reduction instructions, no shared
    # memory or barriers across warps) (H200 sweeps in bench/results/).
    if block_n == GPU_PAIR_BLOCK_N and B >= GPU_PAIR_MIN_B:
        return {"BLOCK_N": block_n, "BR": 2, "num_warps": 1,
                "RPP": gpu_rows_per_program(B, 2, GPU_PAIR_MIN_PROGRAMS, GPU_PAIR_MAX_RPP),
                "Q": slot_lanes(block_n, 2, 1, False)}
    num_warps = max(1, min(16, block_n // 128))
    return {"BLOCK_N": block_n, "BR": 1, "num_warps": num_warps,
            "RPP": gpu_rows_per_program(B, 1) if block_n <= GPU_RPP_MAX_BLOCK_N else 1,
            "Q": slot_lanes(block_n, 1, num_warps, False)}


def with_overrides(cfg: dict[str, int], overrides: dict | None, interpret: bool) -> dict[str, int]:
    """`kernel_config`'s cfg with a benchmark sweep's overrides of BR, num_warps and RPP (and Q, else re-derived)."""
    if not overrides:
        return cfg
    out = dict(cfg, **overrides)
    if "Q" not in overrides:
        out["Q"] = slot_lanes(out["BLOCK_N"], out["BR"], out["num_warps"], interpret)
    return out
