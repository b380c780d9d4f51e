"""The torch agent's replay rows as device tensors (``agent.buffer_device_type=cuda``), sampled on the device.

``TensorRowStorage`` is an ``agent_common.buffer.RowStorage``: the loop's ``ReplayBuffer`` keeps the n-step window,
the ring index and the size on the host and writes each finished transition here, one (E, 2O + A + 3) row per env
(``ROW_KEYS`` columns). ``sample`` draws B indices with ``torch.randint`` from the storage's own device generator and
gathers the rows on the device, so the update (a CUDA-graph replay on CUDA) reads its batch without a host copy.
On a CPU agent the tensors are CPU tensors: the same code path, which the CPU tests run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agent_common.seeding import BUFFER_STREAM, stream_seed

__all__ = ["TensorRowStorage", "ring_segments", "sampler_seed"]



def sampler_seed(seed: int) -> int:
    """The seed of the storage's generator for the run seed ``seed``: the loop's replay sampler stream
    (``agent_common.seeding.stream_seed(seed, BUFFER_STREAM)``)."""
    return stream_seed(seed, BUFFER_STREAM)


def ring_segments(start: int, num_rows: int, capacity: int) -> list[tuple[int, int, int]]:
    """Where ``num_rows`` rows written at ring position ``start`` go: ``(ring position, first row, count)`` for each
    contiguous piece (one, or two when the write wraps around); ``num_rows <= capacity``."""
    segments = [(start, 0, min(num_rows, capacity - start))]
    if segments[0][2] < num_rows:
        segments.append((0, segments[0][2], num_rows - segments[0][2]))
    return segments


class TensorRowStorage:
    """Ring of ``capacity`` float32 rows of ``width`` columns on ``device``, sampled uniformly with replacement.

    Args:
        capacity: M rows.
        width: 2O + A + 3 columns (``ROW_KEYS``).
        observation_dim: O (locates the reward column, O + A).
        device: where the rows live (the agent's device).
        seed: the run seed (``sampler_seed``).
    """

    def __init__(self, capacity: int, width: int, observation_dim: int, device: torch.device, seed: int) -> None:
        self.capacity, self.width, self.device = int(capacity), int(width), device
        self.rows = torch.zeros((self.capacity, self.width), dtype=torch.float32, device=device)  # (M, W)
        self.reward_column = width - 3 - observation_dim  # O + A
        self.size = 0
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(sampler_seed(seed))

    def write(self, index: int, rows: np.ndarray) -> None:
        """Stores (E, W) rows at ring positions index, index + 1, ... (mod M)."""
        rows = np.asarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != self.width or rows.shape[0] > self.capacity:
            raise ValueError(f"rows must be (E <= {self.capacity}, {self.width}), got {rows.shape}")
        data = torch.from_numpy(rows).to(self.device, non_blocking=False)
        for position, first, count in ring_segments(int(index) % self.capacity, rows.shape[0], self.capacity):
            self.rows[position : position + count] = data[first : first + count]  # slice copies
        self.size = min(self.size + rows.shape[0], self.capacity)

    def sample(self, batch_size: int, reward_scale: float | torch.Tensor) -> torch.Tensor:
        """(B, 2O + A + 2) float32 device batch (``UPDATE_KEYS`` columns) of uniformly drawn rows, the rewards
        divided by ``reward_scale`` (as ``RewardNormalizer.normalize``; a float, or a () float32 tensor on the
        device: ``agent_torch.on_device.DeviceRewardNormalizer.scale``)."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        indices = torch.randint(0, self.size, (batch_size,), generator=self.generator, device=self.device)  # (B,)
        flat = self.rows.index_select(0, indices)[:, : self.width - 1]  # (B, 2O + A + 2), truncated dropped
        if not isinstance(reward_scale, torch.Tensor):
            reward_scale = torch.tensor(np.float32(reward_scale))  # a CPU scalar: no host -> device copy
        flat[:, self.reward_column] /= reward_scale
        return flat

    def read(self, size: int) -> np.ndarray:
        """The first ``size`` rows as numpy (checkpoints)."""
        return self.rows[:size].cpu().numpy().copy()

    def load(self, rows: np.ndarray, index: int) -> None:
        """Replaces the rows (positions 0 .. len(rows) - 1); the generator is restored by ``load_state_dict``."""
        rows = np.asarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != self.width or rows.shape[0] > self.capacity:
            raise ValueError(f"rows must be (<= {self.capacity}, {self.width}), got {rows.shape}")
        self.rows.zero_()
        self.rows[: rows.shape[0]] = torch.from_numpy(rows).to(self.device)
        self.size = rows.shape[0]

    def state_dict(self) -> dict[str, Any]:
        """The sampler generator's state (the rows are saved by the loop's replay buffer)."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
