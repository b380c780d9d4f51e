"""Warm-up + cosine-decay learning-rate schedule (docs/flashsac.md), optax-style, as a plain function."""

from __future__ import annotations

import math

__all__ = ["warmup_cosine_decay"]


def warmup_cosine_decay(
    step: int, init_value: float, peak_value: float, end_value: float, warmup_steps: int, decay_steps: int
) -> float:
    """Learning rate after ``step`` optimizer steps of one network.

    lr = init + (peak − init)·t/W for t < W; end + (peak − end)·½(1 + cos(π(t − W)/(D − W))) for W ≤ t < D;
    end for t ≥ D.

    Args:
        step: t, the network's own optimizer-step count.
        init_value: LR at t = 0.
        peak_value: LR at the end of warm-up.
        end_value: final LR.
        warmup_steps: W = int(warmup_rate·N_int·UTD).
        decay_steps: D = int(decay_rate·N_int·UTD) (total steps, including warm-up).

    Returns:
        The learning rate as a Python float.
    """
    if step < warmup_steps:
        return init_value + (peak_value - init_value) * step / warmup_steps
    if step >= decay_steps or decay_steps <= warmup_steps:
        return end_value
    progress = (step - warmup_steps) / (decay_steps - warmup_steps)
    return end_value + (peak_value - end_value) * 0.5 * (1.0 + math.cos(math.pi * progress))
