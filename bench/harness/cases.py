"""The case matrix (one case: sizes, log-prob dtype, memory layout, reward shape, value kind, discount) and the
per-trial seeds."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from shared_spec import KINDS

DTYPES = ("float32", "bfloat16", "float16")
LAYOUTS = ("contiguous", "chunk", "transposed", "offset")


@dataclass(frozen=True)
class HarnessCase:
    """One case of the matrix: sizes, log-prob dtype, memory layout, reward shape, value kind and discount.

    layout: "contiguous"; "chunk" (upstream's `x.chunk(2, dim=1)[1]` views of (E, 2B[, N]) and `y[B:]` of (2B,):
    storage offset, the other half NaN-filled so reading it poisons the result); "transposed" (log-probs stored
    (N, E, B) and permuted, next_qs stored (B, E) and transposed, per-row inputs a strided column of (B, 3));
    "offset" (every input at a storage offset of 5 elements, NaN in front). JAX arrays have no user-visible strides:
    there the same views are taken with jnp slicing / transposes on the device (materialised by XLA).
    reward_shape: "B" for (B,) per-row inputs, "B1" for (B, 1).
    """

    B: int
    N: int = 101
    E: int = 2
    dtype: str = "float32"
    layout: str = "contiguous"
    reward_shape: str = "B"
    kind: str = "random"
    gamma: float = 0.99

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.reward_shape not in ("B", "B1"):
            raise ValueError(f"reward_shape must be 'B' or 'B1', got {self.reward_shape!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def id(self) -> str:
        return (f"B{self.B}-N{self.N}-E{self.E}-{self.dtype}-{self.layout}-r{self.reward_shape}-{self.kind}"
                f"-g{self.gamma}")


SMOKE_CASES: tuple[HarnessCase, ...] = (
    HarnessCase(3, kind="random"),
    HarnessCase(33, layout="chunk", kind="mixed"),
    HarnessCase(33, layout="transposed", reward_shape="B1", kind="mixed"),
    HarnessCase(33, layout="offset", kind="integral", gamma=1.0),
    HarnessCase(33, dtype="bfloat16", kind="mixed"),
    HarnessCase(33, dtype="float16", kind="peaked"),
    HarnessCase(33, kind="nonfinite"),
)
FULL_SIZES = (1, 3, 127, 128, 129, 512, 2048, 4096, 32768, 65536, 1048576)


def case_matrix(smoke: bool, sizes: tuple[int, ...] | None = None) -> list[HarnessCase]:
    """The case matrix. Smoke: `SMOKE_CASES`. Full: upstream's chunk views (kind "mixed") and contiguous random
    inputs at every B in `sizes`; at B = 129 and 2048 every value kind, bf16/fp16, transposed / offset layouts and
    (B, 1) per-row inputs. 512 and 2048 are FlashSAC's batch sizes; odd sizes are never used for tuning."""
    if smoke:
        return list(SMOKE_CASES)
    sizes = FULL_SIZES if sizes is None else tuple(sizes)
    cases = []
    for B in sizes:
        cases += [HarnessCase(B, layout="chunk", kind="mixed"), HarnessCase(B, kind="random")]
    for B in (b for b in (129, 2048) if b in sizes):
        cases += [HarnessCase(B, kind=k) for k in KINDS if k not in ("random", "mixed")]
        cases += [HarnessCase(B, dtype=d, layout="chunk", kind="mixed") for d in ("bfloat16", "float16")]
        cases += [HarnessCase(B, layout=lay, kind="mixed") for lay in ("transposed", "offset")]
        cases += [HarnessCase(B, layout="chunk", reward_shape="B1", kind="mixed"),
                  HarnessCase(B, kind="mixed", gamma=0.0)]
    return cases


def derive_seed(base_seed: int, case: HarnessCase, trial: int) -> int:
    """Deterministic per-(case, trial) seed: every trial of every stage gets fresh inputs (anti-cheat rule 1);
    every implementation sees the same inputs for the same (case, trial)."""
    digest = hashlib.sha256(f"{base_seed}:{case.id}:{trial}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF

