"""The pinned launch configuration shared by the Triton and the Pallas kernel (pure Python: no triton, no jax)."""

from __future__ import annotations

__all__ = ["MAX_E", "MAX_N", "kernel_config", "next_power_of_2"]

# The kernels' supported sizes (both gates refuse anything else with a reason).
MAX_N, MAX_E = 4096, 16


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def kernel_config(B: int, N: int, interpret: bool) -> dict[str, int]:
    """Pinned launch configuration (no autotuning: the reduction order must not depend on timing).

    Both kernels launch with exactly this configuration, so on the GPU they see the same tiles and warps.

    Args:
        B: rows. N: atoms. interpret: the kernel runs interpreted on the CPU (TRITON_INTERPRET=1 / Pallas
            interpret mode), where the grid is a sequential loop: few, large programs.

    Returns:
        {"BLOCK_N": next power of 2 >= N (>= 2) lanes, "BR": rows per program (a power of 2), "num_warps"}.
    """
    block_n = max(next_power_of_2(N), 2)
    if interpret:
        return {"BLOCK_N": block_n, "BR": min(64, next_power_of_2(B)), "num_warps": 4}
    # One row per program and one warp per 128 lanes: row reductions stay inside a warp (shuffles, no shared memory
    # or barriers) and every tensor shares one layout (H200 sweep in bench/results/).
    return {"BLOCK_N": block_n, "BR": 1, "num_warps": max(1, min(16, block_n // 128))}
