"""What the training driver knows about data-parallel replicas (framework-free; docs/flashsac.md, "Several GPUs").

One replica is one training process with its own environments, replay buffer and copy of the networks; the
framework keeps the networks equal (torch: gradients averaged across processes, ``agent_torch.distributed``). The
driver uses a ``Replicas`` to run the data-parallel schedule as upstream's ``train.py`` does:

- seeds: replica r seeds its training environments, replay sampling, exploration noise and warm-up actions with
  ``seed + r`` (the networks start from the same weights on every replica; the evaluation env keeps ``seed``);
- steps: one interaction step of the run advances ``num_train_envs x world_size`` env steps, so ``num_env_steps``
  stays the run's total and each replica steps ``num_env_steps // (num_train_envs x world_size)`` times;
- intervals: evaluation, logging and checkpoint intervals (in interaction steps of the single-process run) are
  divided by ``world_size`` (rounded up), so they fall on the same global env steps;
- replica 0 alone evaluates, logs and commits checkpoints; every replica writes its own loop state (environments,
  replay buffer, RNGs) into the checkpoint, under ``ranks/rank<r>/``, so a resume with the same world size is exact.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["SINGLE", "NullLogger", "Replicas"]

RANKS_DIR = "ranks"


def _nothing() -> None:
    return None


def _max_single(value: int) -> int:
    return value


@dataclass(frozen=True)
class Replicas:
    """This process's place among the data-parallel replicas, and the two collectives the loop needs.

    Attributes:
        rank: this replica's index (0 evaluates, logs and commits checkpoints).
        world_size: number of replicas.
        barrier: blocks until every replica has called it (a no-op for one replica).
        max_on_all: ``max_on_all(v)``: the largest of the integers every replica passed (a collective).
    """

    rank: int = 0
    world_size: int = 1
    barrier: Callable[[], None] = field(default=_nothing, compare=False)
    max_on_all: Callable[[int], int] = field(default=_max_single, compare=False)

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"replicas: rank must be in [0, world_size), got rank={self.rank} "
                             f"world_size={self.world_size}")

    @property
    def is_main(self) -> bool:
        """Whether this replica evaluates, logs and commits checkpoints."""
        return self.rank == 0

    def same_on_all(self, value: int) -> bool:
        """Whether every replica passed the same integer (two collectives; True for one replica)."""
        return self.max_on_all(value) == -self.max_on_all(-value)

    def any_on_all(self, flag: bool) -> bool:
        """Whether any replica passed True (one collective), so that all replicas stop at the same step."""
        return self.max_on_all(int(flag)) > 0

    def seed(self, seed: int) -> int:
        """The seed of this replica's training environments and host RNG streams."""
        return seed + self.rank

    def interval(self, interval: int | None, default: int) -> int:
        """A per-replica interval from a single-process one: divided by ``world_size``, rounded up (at least 1);
        ``default`` (already per replica) when null."""
        if not interval:
            return default
        return max(1, -(-interval // self.world_size))

    def state_dir(self, checkpoint: str) -> str:
        """Where this replica's loop state lives inside a checkpoint (replica 0: the checkpoint itself)."""
        return checkpoint if self.is_main else os.path.join(checkpoint, RANKS_DIR, f"rank{self.rank}")


SINGLE = Replicas()
"""One process, no data parallelism: the driver's default."""


class NullLogger:
    """The logger of a replica other than 0: same methods as ``RunLogger``, writes nothing."""

    first_step = 0

    def log_scalars(self, metrics: dict[str, float], step: int) -> None:
        return None

    def log_text(self, tag: str, text: str, step: int, only_if_changed: bool = False) -> None:
        return None

    def log_eval(self, metrics: dict[str, float], env_step: int) -> None:
        return None

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None
