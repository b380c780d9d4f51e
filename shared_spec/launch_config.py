"""The pinned launch configuration shared by the Triton and the Pallas kernel (pure Python: no triton, no jax)."""

from __future__ import annotations

__all__ = ["GPU_MAX_RPP", "GPU_MIN_PROGRAMS", "GPU_RPP_MAX_BLOCK_N", "MAX_E", "MAX_N", "gpu_rows_per_program",
           "kernel_config", "next_power_of_2"]

# The kernels' supported sizes (both gates refuse anything else with a reason).
MAX_N, MAX_E = 4096, 16

# Tiles per program on the GPU (SPEC.md 8): a program loops over RPP tiles of BR rows and prefetches the next tile's
# inputs while it computes the current one. RPP grows with B so that the grid keeps at least GPU_MIN_PROGRAMS
# programs (small B keeps one tile per program: it needs every program it can get), up to GPU_MAX_RPP, for rows of at
# most GPU_RPP_MAX_BLOCK_N lanes (one warp; wider rows use many more registers with RPP > 1 and keep one tile per
# program). These are the knobs set from the timings of `bench/gpu_bitwise.py --sweep BR:warps:RPP` (GPU_MAX_RPP = 1
# gives the one-tile kernel everywhere). On the H200 (bench/results/h200-2026-12-01-kernel-rpp), Triton, median of 5
# rounds: B = 512 RPP 1/2/4: 2.3/2.6/3.4 us (more tiles per program starve small grids, hence GPU_MIN_PROGRAMS);
# B = 65,536 RPP 1/2/4/8: 42.4/38.6/37.5/38.0 us (this rule picks 4); B = 1,048,576 RPP 1/2/4/8/16:
# 635.6/566.3/536.1/523.2/519.5 us (it picks 16). The bits never depend on RPP.
GPU_MIN_PROGRAMS = 16384
GPU_MAX_RPP = 16
GPU_RPP_MAX_BLOCK_N = 128


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def gpu_rows_per_program(B: int, BR: int = 1) -> int:
    """Tiles per program on the GPU: the largest power of 2 RPP <= GPU_MAX_RPP with B / (BR RPP) >= GPU_MIN_PROGRAMS
    (1 when B < 2 BR GPU_MIN_PROGRAMS)."""
    rpp = 1
    while 2 * rpp <= GPU_MAX_RPP and B >= 2 * rpp * BR * GPU_MIN_PROGRAMS:
        rpp *= 2
    return rpp


def kernel_config(B: int, N: int, interpret: bool) -> dict[str, int]:
    """Pinned launch configuration (no autotuning: the reduction order must not depend on timing).

    Both kernels launch with exactly this configuration, so on the GPU they see the same tiles and warps.

    Args:
        B: rows. N: atoms. interpret: the kernel runs interpreted on the CPU (TRITON_INTERPRET=1 / Pallas
            interpret mode), where the grid is a sequential loop: few, large programs.

    Returns:
        {"BLOCK_N": next power of 2 >= N (>= 2) lanes, "BR": rows per tile (a power of 2), "num_warps",
        "RPP": tiles per program (the grid is ceil(B / (BR * RPP)) programs)}.
    """
    block_n = max(next_power_of_2(N), 2)
    if interpret:
        return {"BLOCK_N": block_n, "BR": min(64, next_power_of_2(B)), "num_warps": 4, "RPP": 1}
    # One row per tile and one warp per 128 lanes: row reductions stay inside a warp (shuffles, no shared memory
    # or barriers) and every tensor shares one layout (H200 sweep in bench/results/).
    return {"BLOCK_N": block_n, "BR": 1, "num_warps": max(1, min(16, block_n // 128)),
            "RPP": gpu_rows_per_program(B, 1) if block_n <= GPU_RPP_MAX_BLOCK_N else 1}
