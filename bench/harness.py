"""Cascaded kernel evaluation harness (TESTING.md section 4): compile -> correctness -> determinism -> integration ->
performance -> flags -> report, for every implementation of the categorical TD target over a case matrix.

    python -m bench.harness --smoke --out /tmp/harness_smoke   # CPU: interpreters, tiny sizes, < 60 s on 2 cores
    python -m bench.harness --out bench/results/harness         # GPU: the full matrix (H200)

Implementations (`IMPLEMENTATIONS` below): the torch eager reference (torch_impl backend "torch"), upstream FlashSAC's
path eager and under default-mode `torch.compile` (bench/upstream.py; the compiled one is the fast_p baseline), the
Triton kernel (backend "triton", strict), the jitted jnp reference (jax_impl backend "jax") and the Pallas kernel
(backend "pallas", strict). Unit of evaluation: one implementation x one case (`HarnessCase`: B, N, E, log-prob dtype,
layout, reward shape, value kind from shared_spec.KINDS, gamma).

Stages; each writes one JSON record per implementation x case (appended to `stages.jsonl` as it completes) and runs
only if the stages before it passed for that pair (otherwise it is recorded as "blocked"):
  0 environment  versions, device, git SHA, TF32 / determinism flags, interpreter flags (one record per run);
  1 compile      availability gate (strict mode; an environmental "cannot run here" is a skip, a result, not a crash),
                 then the first call (compile) and a second call timed separately;
  2 correctness  K trials with FRESH inputs each (seeds derived from --seed, the case and the trial), each against the
                 float64 spec (shared_spec.reference: oracle #1, the scatter form, and oracle #2, the hat form, on the
                 first F64_ROWS rows; all rows vs the framework's fp32 reference beyond that): max abs error, max
                 row-mass error, negative values, NaN placement, the fraction of rows whose selected critic differs;
                 bf16/fp16 log-probs by the 2x rule (shared_spec.tolerances). Anti-cheat: torch outputs are allocated
                 from NaN-poisoned memory (torch.use_deterministic_algorithms +
                 torch.utils.deterministic.fill_uninitialized_memory, so every `torch.empty` is NaN-filled: a kernel
                 that skips rows leaves NaN); inputs are snapshotted and hashed before and compared after every call;
                 kernels run with strict=True and a counting wrapper around
                 torch_impl.dispatch.IMPLEMENTATIONS["triton"] / jax_impl.dispatch.IMPLEMENTATIONS["pallas"] must fire
                 on every trial (on the GPU also: the Triton kernel name in the profiler / a Triton custom call in the
                 compiled HLO);
  3 determinism  bitwise-identical repeats; on the GPU, CUDA-graph replay with new data == the eager call (required
                 for implementations that claim bitwise determinism; informational for scatter-based references);
  4 integration  torch: torch._dynamo.explain graph-break count (0 required for the kernel) and
                 torch.compile(fullgraph=True) == eager (GPU); JAX: jax.jit(dispatcher) == the eager call;
  5 performance  only if 1-4 passed: warm-up excluded; GPU torch: triton.testing.do_bench median + 20/80 quantiles and
                 do_bench_cudagraph's method with a thread-local capture (JAX shares the process); GPU JAX: time per
                 iteration of a jitted loop of dependent calls (bench/gpu_pallas.py's loop); CPU: wall-clock
                 medians of interpreter runs, labelled as such (they are NOT kernel performance);
  6 flags        speedup > 10x over the compiled upstream reference -> flagged for review;
  7 report       results.json, results.csv (one row per implementation x case), results.md, speedup.png and the fast_p
                 summary (share of cases correct AND faster than the compiled upstream reference by p, p in
                 {0, 1, 1.2, 2}; geometric-mean speedup over correct cases); eager-baseline numbers separately.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

if "--smoke" in sys.argv:  # before any kernel module is imported: the interpreters read these at import/decoration
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("FLASHSAC_PALLAS_INTERPRET", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU

import numpy as np  # noqa: E402
import torch  # noqa: E402  (imported before jax: the order used on the H200)

import torch_impl  # noqa: E402
import torch_impl.dispatch as torch_dispatch  # noqa: E402
from shared_spec import KINDS, make_inputs  # noqa: E402
from shared_spec import reference as R  # noqa: E402
from shared_spec.tolerances import (  # noqa: E402
    ATOL_BETWEEN,
    ATOL_FLOAT64,
    ATOL_MASS,
    LOW_PRECISION_FACTOR,
    max_abs_error,
    max_mass_error,
)

try:
    import jax
    import jax.numpy as jnp

    import jax_impl
    import jax_impl.dispatch as jax_dispatch

    JAX_IMPORT_ERROR: str | None = None
except Exception as _exc:  # noqa: BLE001  JAX missing or broken: its implementations are skipped with this reason
    jax = jnp = jax_impl = jax_dispatch = None  # type: ignore[assignment]
    JAX_IMPORT_ERROR = f"{type(_exc).__name__}: {_exc}"

__all__ = ["FAST_P", "IMPLEMENTATIONS", "SMOKE_CASES", "STAGES", "HarnessCase", "Impl", "case_matrix",
           "count_kernel_calls", "derive_seed", "fast_p_summary", "main", "run_harness"]

STAGES = ("1_compile", "2_correctness", "3_determinism", "4_integration", "5_performance", "6_flags")
FAST_P = (0.0, 1.0, 1.2, 2.0)
SPEEDUP_FLAG = 10.0  # KernelBench's default "be paranoid" threshold
BASELINE = "upstream_compiled"
EAGER_BASELINE = "upstream_eager"
F64_ROWS = 4096  # rows checked against the float64 spec (numpy add.at is slow); all rows vs the fp32 reference
GEN_ROWS = 16384  # above this, bench.gpu_pallas.host_inputs repeats generated rows (generation is slow on the host)
NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
ROW_ARGS = ("reward", "terminated", "next_alpha_log_pi")
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LAYOUTS = ("contiguous", "chunk", "transposed", "offset")
VERBOSE = True  # progress lines on stdout (tests turn them off)


def log(msg: str) -> None:
    """Progress line on stdout when VERBOSE."""
    if VERBOSE:
        print(msg, flush=True)


# ------------------------------------------------------------------------------------------------------------ cases


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
        if self.dtype not in TORCH_DTYPES:
            raise ValueError(f"dtype must be one of {tuple(TORCH_DTYPES)}, got {self.dtype!r}")
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


def host_inputs(case: HarnessCase, seed: int) -> dict[str, np.ndarray]:
    """float32 numpy inputs from shared_spec.make_inputs (above GEN_ROWS rows: bench.gpu_pallas.host_inputs, which
    repeats a generated block). Per-row inputs are (B,) here; `reward_shape` is applied per framework."""
    if case.B <= GEN_ROWS:
        return make_inputs(case.B, case.N, case.E, seed=seed, kind=case.kind)
    from bench.gpu_pallas import host_inputs as tiled

    return tiled(case.B, case.kind, case.N, case.E, seed=seed)


def round_log_probs(x: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The inputs with log-probs rounded to `dtype` (and back to float32): what a low-precision run actually reads."""
    if dtype == "float32":
        return x
    lp = torch.from_numpy(np.ascontiguousarray(x["next_log_probs"])).to(TORCH_DTYPES[dtype]).float().numpy()
    return dict(x, next_log_probs=lp)


# ---------------------------------------------------------------------------------------------- framework inputs


def torch_device() -> torch.device:
    """CUDA if present, else CPU (the Triton interpreter runs CPU tensors)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _nan_filled(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=torch.float32, device=device)


def _torch_view(name: str, a: np.ndarray, case: HarnessCase, device: torch.device) -> torch.Tensor:
    """One input in the case's layout (float32; log-probs cast to the case dtype afterwards)."""
    src = torch.from_numpy(np.ascontiguousarray(a)).to(device)  # a copy on CUDA; cloned below on CPU
    B = case.B
    per_row = name in ROW_ARGS
    if per_row and case.reward_shape == "B1":
        src = src.reshape(B, 1)
    if case.layout == "contiguous":
        return src.clone()
    if case.layout == "chunk":  # upstream: x.chunk(2, dim=1)[1] of (E, 2B[, N]); per-row rows B..2B of (2B[, 1])
        dim = 0 if per_row else 1
        big = torch.cat([_nan_filled(tuple(src.shape), device), src], dim=dim)
        return big.chunk(2, dim=dim)[1]
    if case.layout == "transposed":
        if name == "next_log_probs":  # stored (N, E, B): strides (B, 1, E * B) after the permute
            return src.permute(2, 0, 1).contiguous().permute(1, 2, 0)
        if name == "next_qs":  # stored (B, E)
            return src.t().contiguous().t()
        wide = _nan_filled((B, 3), device)  # a column of a (B, 3) buffer: stride 3
        wide[:, 1] = src.reshape(B)
        return wide[:, 1:2] if case.reward_shape == "B1" else wide[:, 1]
    flat = _nan_filled((src.numel() + 5,), device)  # "offset"
    flat[5:] = src.reshape(-1)
    return flat[5:].view(tuple(src.shape))


def to_torch(x: dict[str, np.ndarray], case: HarnessCase, device: torch.device | None = None) -> dict:
    """Fresh torch tensors (never sharing memory with `x`) in the case's layout and log-prob dtype."""
    device = torch_device() if device is None else device
    out = {k: _torch_view(k, v, case, device) for k, v in x.items()}
    if case.dtype != "float32":
        lp = out["next_log_probs"]
        big = lp._base if lp._base is not None else lp
        # Keep the layout: cast the whole backing tensor, then take the same view of it.
        cast = big.to(TORCH_DTYPES[case.dtype])
        out["next_log_probs"] = cast.as_strided(lp.shape, lp.stride(), lp.storage_offset())
    return out


def to_jax(x: dict[str, np.ndarray], case: HarnessCase) -> dict:
    """Device arrays for JAX: the same values and shapes; non-contiguous layouts realised by jnp slicing/transposes."""
    dev = jax.devices()[0]
    out = {}
    for k, v in x.items():
        a = jax.device_put(np.ascontiguousarray(v), dev)
        if case.layout == "chunk":
            a = jnp.concatenate([jnp.full_like(a, jnp.nan), a], axis=0 if k in ROW_ARGS else 1)
            a = a[case.B:] if k in ROW_ARGS else a[:, case.B:]
        elif case.layout == "transposed" and a.ndim >= 2:
            axes = (1, 2, 0) if a.ndim == 3 else (1, 0)
            back = (2, 0, 1) if a.ndim == 3 else (1, 0)
            a = jnp.transpose(jnp.transpose(a, back), axes)
        if k in ROW_ARGS and case.reward_shape == "B1":
            a = a.reshape(case.B, 1)
        out[k] = a
    out["next_log_probs"] = out["next_log_probs"].astype(jnp.dtype(case.dtype))
    return out


# ------------------------------------------------------------------------------------------------- implementations


@dataclass
class Impl:
    """One implementation under evaluation.

    call(inputs, gamma) runs it on framework inputs (a dict of the five arrays) and returns the (B, N) output.
    kernel_registry: (framework, name) of the dispatch registry entry whose calls prove that the kernel ran.
    deterministic: predicate on the torch device type: whether bitwise repeats are *required* (scatter-based torch
    references on CUDA use atomics, as upstream: recorded, not required).
    poison_output: NaN-poison uninitialised torch allocations during correctness calls. Off for the compiled
    upstream path: dynamo guards on the deterministic-algorithms flag, so toggling it recompiles the baseline (and
    upstream allocates its output with zeros_like anyway).
    """

    name: str
    framework: str
    role: str  # "reference" | "baseline" | "kernel"
    description: str
    call: Callable[[dict, float], object]
    backend: str | None = None  # the dispatcher backend name (torch_impl / jax_impl), None for upstream
    kernel_registry: tuple[str, str] | None = None
    nan_policy: bool = True
    deterministic: Callable[[str], bool] = field(default=lambda device_type: True)
    poison_output: bool = True


def _torch_call(backend: str) -> Callable[[dict, float], torch.Tensor]:
    def call(t: dict, gamma: float) -> torch.Tensor:
        return torch_dispatch.categorical_td_target(**t, gamma=gamma, backend=backend, strict=True)
    return call


def _jax_call(backend: str) -> Callable[[dict, float], object]:
    def call(t: dict, gamma: float):
        return jax_dispatch.categorical_td_target(**t, gamma=gamma, backend=backend, strict=True)
    return call


_UPSTREAM: dict[str, tuple] = {}


def _upstream_call(compiled: bool) -> Callable[[dict, float], torch.Tensor]:
    """Upstream's select + compute pair (bench/upstream.py). bf16/fp16 log-probs are upcast to fp32 first: upstream
    computes the target in the log-prob dtype, which is not a like-for-like baseline (the cast is timed with it)."""
    key = "compiled" if compiled else "eager"

    def call(t: dict, gamma: float) -> torch.Tensor:
        from bench import upstream

        if key not in _UPSTREAM:
            _UPSTREAM[key] = upstream.compiled() if compiled else upstream.eager()
        lp = t["next_log_probs"]
        lp = lp if lp.dtype == torch.float32 else lp.float()
        return upstream.upstream_target(*_UPSTREAM[key], t["next_qs"], lp, t["reward"], t["terminated"],
                                        t["next_alpha_log_pi"], gamma)
    return call


def _cpu_only(device_type: str) -> bool:
    return device_type == "cpu"


IMPLEMENTATIONS: dict[str, Impl] = {
    "torch": Impl("torch", "torch", "reference", "torch eager reference (torch_impl backend 'torch')",
                  _torch_call("torch"), backend="torch", deterministic=_cpu_only),
    "upstream_eager": Impl("upstream_eager", "torch", "baseline", "upstream FlashSAC path, eager (bench.upstream)",
                           _upstream_call(False), nan_policy=False, deterministic=_cpu_only),
    "upstream_compiled": Impl("upstream_compiled", "torch", "baseline",
                              "upstream FlashSAC path under default-mode torch.compile (the fast_p baseline)",
                              _upstream_call(True), nan_policy=False, deterministic=_cpu_only, poison_output=False),
    "triton": Impl("triton", "torch", "kernel", "fused Triton kernel (torch_impl backend 'triton', strict)",
                   _torch_call("triton"), backend="triton", kernel_registry=("torch", "triton")),
    "jax": Impl("jax", "jax", "reference", "jitted jnp reference (jax_impl backend 'jax')", _jax_call("jax"),
                backend="jax"),
    "pallas": Impl("pallas", "jax", "kernel", "fused Pallas kernel (jax_impl backend 'pallas', strict)",
                   _jax_call("pallas"), backend="pallas", kernel_registry=("jax", "pallas")),
}


def _registry(framework: str) -> dict:
    return torch_dispatch.IMPLEMENTATIONS if framework == "torch" else jax_dispatch.IMPLEMENTATIONS


@contextlib.contextmanager
def count_kernel_calls(registry: tuple[str, str] | None) -> Iterator[dict]:
    """Wrap the dispatch registry entry (e.g. torch_impl.dispatch.IMPLEMENTATIONS["triton"]) with a call counter for
    the duration of the block; yields {"calls": int, "registered": bool}. Restores the entry afterwards."""
    counter = {"calls": 0, "registered": False}
    if registry is None:
        yield counter
        return
    reg, name = _registry(registry[0]), registry[1]
    original = reg.get(name)
    if original is None:
        yield counter
        return
    counter["registered"] = True

    def counting(*args, **kwargs):
        counter["calls"] += 1
        return original(*args, **kwargs)

    reg[name] = counting
    try:
        yield counter
    finally:
        reg[name] = original


@contextlib.contextmanager
def poisoned_allocations(active: bool) -> Iterator[bool]:
    """NaN-poison every uninitialised torch allocation in the block (torch.empty & co. are NaN-filled while
    deterministic algorithms are on), so a kernel that leaves output rows unwritten produces NaN rows.
    Yields whether poisoning is active (pass False for JAX: pallas_call allocates its own output, there is no out=
    to poison)."""
    if not active:
        yield False
        return
    prev_det = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield True
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = prev_fill
        torch.use_deterministic_algorithms(prev_det, warn_only=prev_warn)


def _sync(out: object) -> object:
    if isinstance(out, torch.Tensor):
        if out.is_cuda:
            torch.cuda.synchronize()
    elif hasattr(out, "block_until_ready"):
        out.block_until_ready()
    return out


def to_numpy(out: object) -> np.ndarray:
    """The output as a host numpy array, dtype preserved (bf16 -> float32 for inspection only)."""
    if isinstance(out, torch.Tensor):
        t = out.detach()
        return (t.float() if t.dtype == torch.bfloat16 else t).cpu().numpy()
    return np.asarray(out)


def _out_dtype(out: object) -> str:
    return str(out.dtype).replace("torch.", "")


class _Snapshot:
    """Exact copies (and short sha256 digests) of every input's whole backing storage, to prove inputs unchanged.

    torch: the whole untyped storage (a view's neighbours included) is copied on its device and compared bytewise.
    JAX arrays are immutable: small ones are still copied to the host and compared, large ones (> 64 MB) are only
    checked for deletion (donation)."""

    LIMIT = 64 * 2**20

    def __init__(self, inputs: dict) -> None:
        self.copies = {k: self._bytes(v) for k, v in inputs.items()}
        self.digests = {k: self._digest(v) for k, v in self.copies.items()}

    @classmethod
    def _bytes(cls, x):
        if isinstance(x, torch.Tensor):
            storage = x.untyped_storage()
            return torch.empty(0, dtype=torch.uint8, device=x.device).set_(storage).clone()
        if getattr(x, "is_deleted", lambda: False)():
            return None
        if x.size * x.dtype.itemsize > cls.LIMIT:
            return "immutable"  # a live JAX array cannot have been written
        return np.asarray(x).copy()

    @classmethod
    def _digest(cls, b) -> str | None:
        if b is None or isinstance(b, str):
            return None
        if isinstance(b, torch.Tensor):
            if b.numel() > cls.LIMIT:
                return None  # compared exactly on the device; hashing GBs on the host is slow
            b = b.cpu().numpy()
        return hashlib.sha256(np.ascontiguousarray(b).view(np.uint8).tobytes()).hexdigest()[:16]

    def changed(self, inputs: dict) -> list[str]:
        """Names of inputs whose storage differs from the snapshot (or that were deleted / donated)."""
        bad = []
        for k, v in inputs.items():
            now, before = self._bytes(v), self.copies[k]
            if now is None or before is None:
                bad.append(k)
            elif isinstance(now, str):
                continue
            elif isinstance(now, torch.Tensor):
                if not torch.equal(now, before):
                    bad.append(k)
            elif not np.array_equal(np.ascontiguousarray(now).view(np.uint8),
                                    np.ascontiguousarray(before).view(np.uint8)):
                bad.append(k)
        return bad


# ------------------------------------------------------------------------------------------------------- metrics


def atol_for(N: int) -> float:
    """fp32 vs float64 tolerance: ATOL_FLOAT64 for N <= 101, scaled with ulp(N - 1) for larger supports (SPEC.md 7)."""
    return ATOL_FLOAT64 * max(1.0, (N - 1) / 100)


def _prefix(x: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    return {k: (v[:, :n] if k in ("next_qs", "next_log_probs") else v[:n]) for k, v in x.items()}


def critic_mismatch_fraction(got: np.ndarray, x: dict[str, np.ndarray], gamma: float, tol: float) -> float:
    """Fraction of finite rows that match (within `tol`) another critic's projection but not the spec's choice
    (argmin, ties -> first). Rows where the candidates coincide within `tol` cannot disagree observably; rows that
    match no candidate are wrong values, counted by the max-abs check instead."""
    E = x["next_qs"].shape[0]
    if E == 1:
        return 0.0
    idx, _ = R.select_min_q(x["next_qs"].astype(np.float64), x["next_log_probs"].astype(np.float64))
    cands = np.stack([R.categorical_td_target(**dict(x, next_qs=np.zeros_like(x["next_qs"][i:i + 1]),
                                                     next_log_probs=x["next_log_probs"][i:i + 1]), gamma=gamma)
                      for i in range(E)])  # (E, B, N): the target if critic i were selected
    diff = np.abs(cands - got.astype(np.float64)[None])
    dist = np.where(np.isnan(diff).any(axis=2), np.inf, np.where(np.isnan(diff), 0.0, diff).max(axis=2))  # (E, B)
    ok = ~np.isnan(got).any(axis=1)
    if not ok.any():
        return 0.0
    chosen = dist[idx, np.arange(got.shape[0])]
    differs = (chosen > tol) & (dist.min(axis=0) <= tol)
    return float(differs[ok].mean())


def _nan_rows(a: np.ndarray) -> np.ndarray:
    return np.isnan(a).any(axis=1)


def correctness_metrics(got: np.ndarray, x: dict[str, np.ndarray], case: HarnessCase,
                        ref_fp32_full: np.ndarray | None) -> tuple[dict, list[str]]:
    """Compare one output with the float64 spec; returns (metrics, failure reasons)."""
    reasons: list[str] = []
    B, N = case.B, case.N
    n = min(B, F64_ROWS)
    xr = _prefix(round_log_probs(x, case.dtype), n)
    want = R.categorical_td_target(**xr, gamma=case.gamma)
    g = got[:n].astype(np.float64)
    tol = atol_for(N)
    unwritten = int((_nan_rows(g) & ~_nan_rows(want)).sum())
    spurious = int((~np.isnan(g).all(axis=1) & _nan_rows(want)).sum())
    m = {"rows_vs_float64": n, "tolerance": tol, "max_abs_error": max_abs_error(g, want),
         "max_abs_error_vs_hat_oracle": max_abs_error(g, R.categorical_td_target_hat(**xr, gamma=case.gamma)),
         "rows_nan_where_spec_finite": unwritten, "rows_finite_where_spec_nan": spurious}
    both = ~_nan_rows(g) & ~_nan_rows(want)
    m["max_abs_error_finite_rows"] = float(np.abs(g[both] - want[both]).max()) if both.any() else 0.0
    _, lp_sel = R.select_min_q(xr["next_qs"].astype(np.float64), xr["next_log_probs"].astype(np.float64))
    m["max_mass_error"] = max_mass_error(g, lp_sel)
    m["min_value"] = float(np.nanmin(g)) if not np.isnan(g).all() else None
    m["critic_mismatch_fraction"] = critic_mismatch_fraction(g, xr, case.gamma, tol)
    if unwritten:
        reasons.append(f"{unwritten}/{n} rows hold NaN where the spec is finite: rows left unwritten (the output "
                       "buffer was NaN-poisoned) or NaN leaking into valid rows")
    if spurious:
        reasons.append(f"{spurious}/{n} rows are not all-NaN where the NaN policy (SPEC.md 6) requires NaN")
    if not m["max_abs_error_finite_rows"] <= tol:
        reasons.append(f"max abs error {m['max_abs_error_finite_rows']:.3g} vs the float64 spec exceeds {tol:.3g}")
    if not unwritten and not spurious and not m["max_abs_error_vs_hat_oracle"] <= tol:
        reasons.append(f"max abs error {m['max_abs_error_vs_hat_oracle']:.3g} vs the float64 hat-form oracle (#2) "
                       f"exceeds {tol:.3g}")
    if not m["max_mass_error"] <= ATOL_MASS:
        reasons.append(f"max row-mass error {m['max_mass_error']:.3g} exceeds {ATOL_MASS:.3g}")
    if m["min_value"] is not None and m["min_value"] < 0:
        reasons.append(f"negative probability {m['min_value']:.3g}")
    if m["critic_mismatch_fraction"] > 0:
        reasons.append(f"{m['critic_mismatch_fraction']:.3f} of rows use the wrong critic (argmin, ties -> first)")
    if case.dtype != "float32":  # the 2x rule vs the fp32 truth
        xf = _prefix(x, n)
        want32 = R.categorical_td_target(**xf, gamma=case.gamma)
        t_low = to_torch(xr, dataclasses.replace(case, B=n, layout="contiguous", reward_shape="B"),
                         torch.device("cpu"))
        ref_low = to_numpy(torch_impl.categorical_td_target(**t_low, gamma=case.gamma, backend="torch"))
        m["err_vs_fp32_truth"] = max_abs_error(g, want32)
        m["torch_ref_same_dtype_err_vs_fp32_truth"] = max_abs_error(ref_low, want32)
        bound = LOW_PRECISION_FACTOR * m["torch_ref_same_dtype_err_vs_fp32_truth"] + ATOL_FLOAT64
        m["low_precision_bound"] = bound
        if not m["err_vs_fp32_truth"] <= bound:
            reasons.append(f"{case.dtype}: error {m['err_vs_fp32_truth']:.3g} vs the fp32 truth exceeds 2x the "
                           f"same-dtype torch reference's + atol = {bound:.3g}")
    if ref_fp32_full is not None and B > n:  # rows beyond the float64 prefix: vs the framework's fp32 reference
        m["max_abs_vs_fp32_reference_all_rows"] = max_abs_error(got, ref_fp32_full)
        if not m["max_abs_vs_fp32_reference_all_rows"] <= ATOL_BETWEEN * max(1.0, (N - 1) / 100):
            reasons.append(f"all {B} rows vs the fp32 reference: max abs error "
                           f"{m['max_abs_vs_fp32_reference_all_rows']:.3g} (or NaN placement) exceeds {ATOL_BETWEEN}")
    return m, reasons


# -------------------------------------------------------------------------------------------------------- stages


def _stage(status: str, reasons: list[str] | None = None, **data) -> dict:
    return {"status": status, "reasons": list(reasons or []), **data}


def _exc_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()[:600]}"


_JaxUnavailable = jax_dispatch.BackendUnavailable if jax_dispatch is not None else torch_dispatch.BackendUnavailable


def _availability(impl: Impl, case: HarnessCase) -> tuple[str, str]:
    """("ok" | "skip" | "fail", reason). Environmental inability to run is a skip (a result); a kernel that fails
    its own construction-time self-test is a failure."""
    if impl.framework == "jax" and JAX_IMPORT_ERROR is not None:
        return "skip", f"jax failed to import: {JAX_IMPORT_ERROR}"
    if not impl.nan_policy and case.kind == "nonfinite":
        return "skip", ("upstream has no NaN policy: floor(NaN).long() is an out-of-range scatter index (a device-side "
                        "assert that poisons the CUDA context)")
    if impl.backend is None:
        return "ok", "no gate (upstream code)"
    try:
        if impl.framework == "torch":
            d = torch_dispatch.resolve_backend(impl.backend, True, device=torch_device(),
                                               dtype=TORCH_DTYPES[case.dtype], num_bins=case.N, num_critics=case.E)
            return "ok", f"decision: {d.backend} ({d.reason})"
        d = jax_dispatch.resolve_backend(impl.backend, True, num_bins=case.N, num_critics=case.E,
                                         dtype=jnp.dtype(case.dtype))
        return "ok", f"decision: {d.backend} ({d.reason})"
    except (torch_dispatch.BackendUnavailable, _JaxUnavailable) as exc:
        reason = str(exc)
        return ("fail" if "self-test" in reason else "skip"), reason


def _inputs(impl: Impl, x: dict[str, np.ndarray], case: HarnessCase) -> dict:
    return to_torch(x, case) if impl.framework == "torch" else to_jax(x, case)


def _timed_call(impl: Impl, inputs: dict, gamma: float) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = _sync(impl.call(inputs, gamma))
    return out, time.perf_counter() - t0


def stage_compile(impl: Impl, case: HarnessCase, seed: int) -> dict:
    """Stage 1: availability gate (strict), then the first call (compile + run) and a second call, timed apart."""
    status, reason = _availability(impl, case)
    if status != "ok":
        return _stage("skipped" if status == "skip" else "failed", [reason], expected_skip=status == "skip")
    x = host_inputs(case, derive_seed(seed, case, -1))
    try:
        inputs = _inputs(impl, x, case)
        _, first = _timed_call(impl, inputs, case.gamma)
        _, second = _timed_call(impl, inputs, case.gamma)
    except Exception as exc:  # noqa: BLE001  a compile/launch error is this stage's result
        return _stage("failed", [f"first call raised {_exc_text(exc)}"], gate=reason,
                      traceback=traceback.format_exc()[-2000:])
    return _stage("passed", gate=reason, first_call_s=first, second_call_s=second,
                  note="first_call_s includes compilation (and recompilation for a new shape/layout); it is never "
                       "part of the performance numbers")


def _fp32_reference(impl: Impl, x: dict[str, np.ndarray], case: HarnessCase) -> np.ndarray | None:
    """The framework's fp32 reference on all rows (only needed when B exceeds the float64 prefix)."""
    if case.B <= F64_ROWS:
        return None
    ref = IMPLEMENTATIONS["torch" if impl.framework == "torch" else "jax"]
    return to_numpy(_sync(ref.call(_inputs(ref, x, case), case.gamma)))


def _kernel_name_seen(impl: Impl, inputs: dict, gamma: float) -> dict:
    """GPU-only extra proof that the kernel ran: the Triton kernel in the CUDA profiler (torch), or a Triton custom
    call in the compiled HLO (JAX). Interpreters have neither."""
    try:
        if impl.framework == "torch":
            if not torch.cuda.is_available():
                return {"checked": False, "why": "no CUDA: the Triton interpreter has no profiler kernel names"}
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                _sync(impl.call(inputs, gamma))
            names = sorted({e.key for e in prof.key_averages()})
            return {"checked": True, "seen": any("categorical_td_target_kernel" in n for n in names),
                    "kernels": names[:20]}
        if jax.default_backend() == "cpu":
            return {"checked": False, "why": "CPU: Pallas interpret mode lowers to plain HLO (no Triton custom call)"}
        text = jax.jit(lambda a: impl.call(a, gamma)).lower(inputs).as_text()
        return {"checked": True, "seen": "triton" in text.lower() and "custom_call" in text}
    except Exception as exc:  # noqa: BLE001
        return {"checked": False, "why": _exc_text(exc)}


def stage_correctness(impl: Impl, case: HarnessCase, seed: int, trials: int) -> dict:
    """Stage 2: `trials` fresh-input trials vs the float64 spec, poisoned outputs, input snapshots, kernel proof."""
    per_trial, reasons = [], []
    for trial in range(trials):
        x = host_inputs(case, derive_seed(seed, case, trial))
        inputs = _inputs(impl, x, case)
        snap = _Snapshot(inputs)
        fb_before = _fallbacks(impl)
        try:
            poison = impl.framework == "torch" and impl.poison_output
            with poisoned_allocations(poison) as poisoned, count_kernel_calls(impl.kernel_registry) as cnt:
                out = _sync(impl.call(inputs, case.gamma))
        except Exception as exc:  # noqa: BLE001
            reasons.append(f"trial {trial}: call raised {_exc_text(exc)}")
            break
        t_reasons = []
        changed = snap.changed(inputs)
        if changed:
            t_reasons.append(f"the implementation modified its inputs: {', '.join(changed)} (storage differs after "
                             "the call)")
        if impl.kernel_registry is not None and cnt["calls"] < 1:
            t_reasons.append(f"the kernel never ran: the counting wrapper around {impl.kernel_registry[0]}_impl."
                             f"dispatch.IMPLEMENTATIONS[{impl.kernel_registry[1]!r}] did not fire (silent fallback "
                             "to a reference?)")
        fallbacks = _fallbacks(impl) - fb_before
        if fallbacks:
            t_reasons.append(f"{fallbacks} backend fallback(s) were counted during the call")
        shape = tuple(out.shape)
        if _out_dtype(out) != "float32" or shape != (case.B, case.N):
            t_reasons.append(f"output {_out_dtype(out)}{shape}, expected float32{(case.B, case.N)}")
            m = {}
        else:
            got = to_numpy(out)
            m, bad = correctness_metrics(got, x, case, _fp32_reference(impl, x, case))
            t_reasons += bad
        rec = {"trial": trial, "seed": derive_seed(seed, case, trial), "output_poisoned": poisoned,
               "kernel_calls": cnt["calls"] if impl.kernel_registry else None, "inputs_changed": changed,
               "input_sha256_before": snap.digests, **m}
        if isinstance(out, torch.Tensor):
            rec["output_contiguous"] = bool(out.is_contiguous())
            if impl.role == "kernel" and not rec["output_contiguous"]:
                reasons.append(f"trial {trial}: the output is not contiguous (SPEC.md 1: (B, N) float32, contiguous)")
        per_trial.append(rec)
        reasons += [f"trial {trial}: {r}" for r in t_reasons]
    proof = _kernel_name_seen(impl, inputs, case.gamma) if impl.kernel_registry and not reasons else None
    if proof and proof.get("checked") and not proof.get("seen"):
        reasons.append(f"the kernel name / Triton custom call was not found on the device: {proof}")
    agg = {k: max((t[k] for t in per_trial if isinstance(t.get(k), int | float)), default=None)
           for k in ("max_abs_error_finite_rows", "max_mass_error", "critic_mismatch_fraction")}
    return _stage("failed" if reasons else "passed", reasons, trials=per_trial, kernel_device_proof=proof, **agg,
                  poisoned_output=bool(per_trial and per_trial[0]["output_poisoned"]),
                  poison_note=None if impl.framework == "torch" and impl.poison_output else
                  "not poisoned: JAX's pallas_call allocates its own output (no out= in the public API)"
                  if impl.framework == "jax" else "not poisoned: see Impl.poison_output")


def _fallbacks(impl: Impl) -> int:
    if impl.backend is None:
        return 0
    mod = torch_dispatch if impl.framework == "torch" else jax_dispatch
    return int(mod.dispatch_stats()["fallback_count"])


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _capture(graph: torch.cuda.CUDAGraph) -> torch.cuda.graph:
    """``torch.cuda.graph`` in thread-local capture mode: this process also runs JAX, whose runtime threads make CUDA
    calls at any time; in the default global mode such a call during a capture invalidates the capture and can leave
    JAX's stream in an error state (H200 run of 2026-11-29: every JAX case after the first failed capture raised
    "Callback registry is closed")."""
    return torch.cuda.graph(graph, capture_error_mode="thread_local")


def cudagraph_bench(fn, rep_ms: float = 100.0, retries: int = 10) -> dict:
    """``triton.testing.do_bench_cudagraph``'s method (one graph of n unrolled calls, n from a 5-call estimate, timed
    over ``retries`` replays with CUDA events) with a thread-local capture (``_capture``); quantiles per call, us."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate_ms = start.elapsed_time(end) / 5
        n = 1000 if estimate_ms == 0 else max(1, int(rep_ms / estimate_ms))
        graph = torch.cuda.CUDAGraph()
        with _capture(graph):
            for _ in range(n):
                fn()
        torch.cuda.synchronize()
        per_call = []
        for _ in range(retries):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            per_call.append(start.elapsed_time(end) / n * 1e3)
    return {"cudagraph_median_us": float(np.median(per_call)), "cudagraph_q20_us": float(np.quantile(per_call, 0.2)),
            "cudagraph_q80_us": float(np.quantile(per_call, 0.8)), "cudagraph_calls_per_replay": n}


def _cuda_graph_replay(impl: Impl, case: HarnessCase, seed: int) -> dict:
    """Capture the call on static inputs, copy NEW data into them, replay, compare bitwise with the eager call."""
    static = to_torch(host_inputs(case, derive_seed(seed, case, 1000)), case)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            impl.call(static, case.gamma)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with _capture(graph):
        static_out = impl.call(static, case.gamma)
    equal = True
    for k in range(2):
        fresh = to_torch(host_inputs(case, derive_seed(seed, case, 1001 + k)), case)
        for name in NAMES:
            static[name].copy_(fresh[name])
        graph.replay()
        torch.cuda.synchronize()
        equal &= bool(np.array_equal(_bits(to_numpy(static_out)), _bits(to_numpy(_sync(impl.call(fresh,
                                                                                                 case.gamma))))))
    return {"bitwise_equal_eager": equal}


def stage_determinism(impl: Impl, case: HarnessCase, seed: int, repeats: int) -> dict:
    """Stage 3: bitwise-identical repeats on fresh inputs; CUDA-graph replay == eager (torch on CUDA)."""
    dev = torch_device().type if impl.framework == "torch" else jax.default_backend()
    required = impl.deterministic(torch_device().type if impl.framework == "torch" else "cpu")
    x = host_inputs(case, derive_seed(seed, case, 100))
    inputs = _inputs(impl, x, case)
    first = to_numpy(_sync(impl.call(inputs, case.gamma)))
    same = sum(np.array_equal(_bits(first), _bits(to_numpy(_sync(impl.call(inputs, case.gamma)))))
               for _ in range(repeats))
    checks = {"bitwise_repeats": {"ok": same == repeats, "required": required, "identical": same,
                                  "repeats": repeats}}
    if impl.framework == "torch" and torch.cuda.is_available():
        try:
            res = _cuda_graph_replay(impl, case, seed)
            checks["cuda_graph_replay"] = {"ok": res["bitwise_equal_eager"], "required": impl.role == "kernel", **res}
        except Exception as exc:  # noqa: BLE001  e.g. upstream's linspace under capture
            checks["cuda_graph_replay"] = {"ok": False, "required": impl.role == "kernel", "error": _exc_text(exc)}
    else:
        checks["cuda_graph_replay"] = {"ok": None, "required": False, "why": f"not applicable ({impl.framework} on "
                                                                              f"{dev})"}
    reasons = [f"{name}: {c}" for name, c in checks.items() if c["required"] and not c["ok"]]
    return _stage("failed" if reasons else "passed", reasons, checks=checks)


_COMPILED: dict[tuple, Callable] = {}


def _torch_integration(impl: Impl, case: HarnessCase, inputs: dict, eager_out: np.ndarray) -> dict:
    checks: dict[str, dict] = {}
    if impl.backend is None:
        return {"torch_compile": {"ok": None, "required": False, "why": "upstream's path: already the torch.compile "
                                                                        "baseline"}}
    if not torch.cuda.is_available():
        return {"torch_compile": {"ok": None, "required": False,
                                  "why": "needs CUDA: Inductor/fake-tensor tracing cannot run a user Triton kernel on "
                                         "CPU tensors"}}
    import torch._dynamo as dynamo

    backend, gamma = impl.backend, case.gamma

    def fn(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi):
        return torch_impl.categorical_td_target(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi,
                                                gamma=gamma, backend=backend, strict=True)

    required = impl.role == "kernel"
    try:
        explain = dynamo.explain(fn)(**inputs)
        checks["graph_breaks"] = {"ok": explain.graph_break_count == 0, "required": required,
                                  "graph_break_count": explain.graph_break_count, "graph_count": explain.graph_count,
                                  "break_reasons": [str(r.reason)[:300] for r in explain.break_reasons][:5]}
    except Exception as exc:  # noqa: BLE001
        checks["graph_breaks"] = {"ok": False, "required": required, "error": _exc_text(exc)}
    try:
        key = (impl.name, gamma)
        if key not in _COMPILED:
            _COMPILED[key] = torch.compile(fn, fullgraph=True)
        got = to_numpy(_sync(_COMPILED[key](**inputs)))
        err = max_abs_error(got, eager_out)
        checks["compile_fullgraph"] = {"ok": err <= ATOL_BETWEEN, "required": required, "max_abs_vs_eager": err,
                                       "bitwise_equal_eager": bool(np.array_equal(_bits(got), _bits(eager_out)))}
    except Exception as exc:  # noqa: BLE001
        checks["compile_fullgraph"] = {"ok": False, "required": required, "error": _exc_text(exc)}
    return checks


_JITTED: dict[str, Callable] = {}


def _jax_integration(impl: Impl, case: HarnessCase, inputs: dict, eager_out: np.ndarray) -> dict:
    """jax.jit of the dispatcher call (one jitted function per implementation, so compiled shapes are reused) vs
    the eager call; for a kernel, its traced jaxpr must contain a pallas_call and the counting wrapper must fire."""
    try:
        if impl.name not in _JITTED:
            _JITTED[impl.name] = jax.jit(lambda a, g: impl.call(a, g))
        gamma = jnp.float32(case.gamma)
        with count_kernel_calls(impl.kernel_registry) as cnt:
            jaxpr = str(jax.make_jaxpr(lambda a, g: impl.call(a, g))(inputs, gamma))
        got = to_numpy(_sync(_JITTED[impl.name](inputs, gamma)))
        err = max_abs_error(got, eager_out)
        check = {"max_abs_vs_eager": err, "bitwise_equal_eager": bool(np.array_equal(_bits(got), _bits(eager_out)))}
        reasons = [] if err <= ATOL_BETWEEN else [f"jit vs eager max abs error {err:.3g} > {ATOL_BETWEEN}"]
        if impl.kernel_registry is not None:
            check.update(kernel_traced=cnt["calls"], pallas_call_in_jaxpr="pallas_call" in jaxpr)
            if cnt["calls"] < 1 or "pallas_call" not in jaxpr:
                reasons.append("the kernel is not in the traced program (no pallas_call / the wrapper did not fire)")
        return {"jax_jit": {"ok": not reasons, "required": True, "why": reasons, **check}}
    except Exception as exc:  # noqa: BLE001
        return {"jax_jit": {"ok": False, "required": True, "error": _exc_text(exc)}}


def stage_integration(impl: Impl, case: HarnessCase, seed: int) -> dict:
    """Stage 4: torch.compile(fullgraph=True) + graph-break count (CUDA) / jax.jit(dispatcher) vs the eager call."""
    inputs = _inputs(impl, host_inputs(case, derive_seed(seed, case, 200)), case)
    eager_out = to_numpy(_sync(impl.call(inputs, case.gamma)))
    checks = (_torch_integration if impl.framework == "torch" else _jax_integration)(impl, case, inputs, eager_out)
    reasons = [f"{name}: {c}" for name, c in checks.items() if c["required"] and not c["ok"]]
    return _stage("failed" if reasons else "passed", reasons, checks=checks)


def _quantiles(values: list[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {"median_us": float(np.median(v)), "q20_us": float(np.quantile(v, 0.2)),
            "q80_us": float(np.quantile(v, 0.8)), "samples": len(values)}


def _jax_device_time(impl: Impl, inputs: dict, case: HarnessCase, reps: int) -> dict:
    """GPU JAX: per-call time of a jitted loop of K dependent calls (bench.gpu_pallas._loop).

    ``median_us`` is the whole loop's time per iteration (the op plus the loop's own per-iteration cost), an upper
    bound comparable to a CUDA-graph replay time; ``net_median_us`` subtracts the same loop without the op, which
    for small B falls below the timer's resolution (it can come out <= 0, which is why it is not the headline).
    """
    from bench.gpu_pallas import _loop

    backend = impl.backend
    op = lambda q, lp, r, d, s, g, base: jax_dispatch.categorical_td_target(  # noqa: E731
        q, lp, r, d, s, gamma=g, backend=backend, strict=True)
    K = 200 if case.B <= 8192 else (50 if case.B <= 65536 else 10)
    args = (*(inputs[k] for k in NAMES), jnp.float32(case.gamma), jnp.ones((case.B, case.N), jnp.float32))
    loops = {"op": _loop(op, K), "empty": _loop(lambda q, lp, r, d, s, g, base: base * g, K)}
    for fn in loops.values():
        jax.block_until_ready(fn(*args))  # compile + warm-up, excluded
    per_call, empty, net = [], [], []
    for _ in range(reps):
        t = {}
        for name, fn in loops.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            t[name] = (time.perf_counter() - t0) / K * 1e6
        per_call.append(t["op"])
        empty.append(t["empty"])
        net.append(t["op"] - t["empty"])
    return {"timer": "jax_loop_time_per_iteration", "K": K, **_quantiles(per_call),
            "empty_loop_median_us": float(np.median(empty)), "net_median_us": float(np.median(net))}


def stage_performance(impl: Impl, case: HarnessCase, seed: int, reps: int) -> dict:
    """Stage 5 (only after 1-4 passed): warm-up excluded; GPU: do_bench (+ quantiles) and ``cudagraph_bench`` for
    torch, a jitted loop for JAX; CPU: wall-clock medians of the interpreters (not kernel
    performance)."""
    inputs = _inputs(impl, host_inputs(case, derive_seed(seed, case, 300)), case)
    fn = lambda: impl.call(inputs, case.gamma)  # noqa: E731
    for _ in range(2):
        _sync(fn())  # warm-up (and any compilation), excluded
    on_gpu = torch.cuda.is_available() if impl.framework == "torch" else jax.default_backend() != "cpu"
    if on_gpu and impl.framework == "torch":
        from triton.testing import do_bench

        med, q20, q80 = do_bench(fn, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
        rec = {"timer": "triton.testing.do_bench (L2 flushed between reps)", "median_us": med * 1e3,
               "q20_us": q20 * 1e3, "q80_us": q80 * 1e3}
        try:
            rec.update(cudagraph_bench(fn))
        except Exception as exc:  # noqa: BLE001  e.g. upstream eager's linspace under capture
            rec["cudagraph_error"] = _exc_text(exc)
        return _stage("passed", **rec)
    if on_gpu:
        return _stage("passed", **_jax_device_time(impl, inputs, case, max(reps, 7)))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        _sync(fn())
        times.append((time.perf_counter() - t0) * 1e6)
    return _stage("passed", timer="cpu_wallclock", **_quantiles(times),
                  note="CPU wall-clock of interpreter / CPU runs (Triton interpreter, Pallas interpret mode): "
                       "NOT kernel performance")


# ------------------------------------------------------------------------------------------------------- stage 0


def _run(cmd: list[str]) -> str | None:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return res.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def env_info() -> dict:
    """Stage 0: versions, device, git SHA, clocks (if readable), TF32 / determinism / interpreter flags."""
    import triton

    info = {"date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "triton": triton.__version__, "numpy": np.__version__,
            "command": " ".join([sys.executable] + sys.argv), "git_sha": _run(["git", "rev-parse", "HEAD"]),
            "git_dirty": bool(_run(["git", "status", "--porcelain", "--untracked-files=no"])),
            "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
            "FLASHSAC_PALLAS_INTERPRET": os.environ.get("FLASHSAC_PALLAS_INTERPRET"),
            "torch_device": str(torch_device()),
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "torch_backends": torch_impl.backend_info()["backends"]}
    if torch.cuda.is_available():
        info.update(gpu=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)),
                    cuda=torch.version.cuda, driver=_run(["nvidia-smi", "--query-gpu=driver_version",
                                                          "--format=csv,noheader"]),
                    clocks=_run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem",
                                 "--format=csv,noheader"]))
    if JAX_IMPORT_ERROR is None:
        try:
            import jaxlib

            info.update(jax=jax.__version__, jaxlib=jaxlib.__version__, jax_backend=jax.default_backend(),
                        jax_devices=[str(d) for d in jax.devices()],
                        jax_backends=jax_impl.backend_info()["backends"])
        except Exception as exc:  # noqa: BLE001
            info["jax_error"] = _exc_text(exc)
    else:
        info["jax_error"] = JAX_IMPORT_ERROR
    return info


# -------------------------------------------------------------------------------------------------------- runner


@dataclass
class RunConfig:
    """Knobs of one harness run (CLI flags)."""

    seed: int = 0
    trials: int = 3
    repeats: int = 5
    perf_reps: int = 10
    budget_s: float | None = None
    smoke: bool = False


def evaluate_pair(impl: Impl, case: HarnessCase, cfg: RunConfig, emit: Callable[[dict], None]) -> dict:
    """Run stages 1-5 for one implementation x case; each stage's record is emitted as soon as it completes.
    A stage runs only if every stage before it passed; otherwise it is recorded as "blocked" (with the cause)."""
    rec = {"impl": impl.name, "framework": impl.framework, "role": impl.role, "case": case.id,
           "params": dataclasses.asdict(case), "stages": {}}
    plan = [("1_compile", lambda: stage_compile(impl, case, cfg.seed)),
            ("2_correctness", lambda: stage_correctness(impl, case, cfg.seed, cfg.trials)),
            ("3_determinism", lambda: stage_determinism(impl, case, cfg.seed, cfg.repeats)),
            ("4_integration", lambda: stage_integration(impl, case, cfg.seed)),
            ("5_performance", lambda: stage_performance(impl, case, cfg.seed, cfg.perf_reps))]
    stopped: tuple[str, dict] | None = None
    for name, fn in plan:
        if stopped is not None:
            r = _stage("blocked", [f"{stopped[0]} {stopped[1]['status']}: " + "; ".join(stopped[1]['reasons'])[:500]])
        else:
            t0 = time.perf_counter()
            try:
                r = fn()
            except Exception as exc:  # noqa: BLE001  a crash inside a stage is that stage's failure
                r = _stage("failed", [f"stage raised {_exc_text(exc)}"], traceback=traceback.format_exc()[-2000:])
            r["seconds"] = round(time.perf_counter() - t0, 4)
            if r["status"] != "passed":
                stopped = (name, r)
        rec["stages"][name] = r
        emit({"impl": impl.name, "case": case.id, "stage": name, **r})
    if stopped is None:
        rec.update(status="passed", failed_stage=None, reason=None)
    else:
        rec.update(status="skipped" if stopped[1]["status"] == "skipped" else "failed", failed_stage=stopped[0],
                   reason="; ".join(stopped[1]["reasons"])[:1000])
    return rec


def _median(rec: dict, key: str = "median_us") -> float | None:
    perf = rec["stages"].get("5_performance", {})
    return perf.get(key) if perf.get("status") == "passed" else None


def apply_flags(records: list[dict], emit: Callable[[dict], None]) -> None:
    """Stage 6: speedups vs the compiled and eager upstream paths on the same case; > 10x over the compiled
    reference is flagged for manual review (CPU-interpreter timings are flagged too, but mean nothing)."""
    by_case = {(r["impl"], r["case"]): r for r in records}
    for r in records:
        perf = r["stages"].get("5_performance", {})
        if perf.get("status") != "passed":
            r["stages"]["6_flags"] = _stage("blocked", ["5_performance did not pass"])
        else:
            data: dict = {"flags": []}
            # JAX timings are device time (a jitted loop of calls), so the torch baselines they are compared with
            # must be device time too: their CUDA-graph replay time, not their host-bound direct-call time.
            base_kind = "cudagraph_median_us" if r["framework"] == "jax" else "median_us"
            for base, key, kind in ((BASELINE, "speedup_vs_upstream_compiled", base_kind),
                                    (EAGER_BASELINE, "speedup_vs_upstream_eager", base_kind),
                                    ("torch" if r["framework"] == "torch" else "jax", "speedup_vs_framework_reference",
                                     "median_us")):
                b = by_case.get((base, r["case"]))
                t_b, t_i = (_median(b, kind) if b else None), _median(r)
                data[key] = t_b / t_i if t_b and t_i else None
            for kind in ("cudagraph_median_us",):
                b = by_case.get((BASELINE, r["case"]))
                t_b, t_i = (_median(b, kind) if b else None), _median(r, kind)
                data["speedup_vs_upstream_compiled_cudagraph"] = t_b / t_i if t_b and t_i else None
            s = data["speedup_vs_upstream_compiled"]
            if s is not None and s > SPEEDUP_FLAG and r["impl"] != BASELINE:
                data["flags"].append(f"speedup {s:.1f}x > {SPEEDUP_FLAG:.0f}x over the compiled upstream reference: "
                                     "review manually (KernelBench: be paranoid about suspiciously good results)")
            r["stages"]["6_flags"] = _stage("flagged" if data["flags"] else "passed", data["flags"], **data)
        r["speedup_vs_upstream_compiled"] = r["stages"]["6_flags"].get("speedup_vs_upstream_compiled")
        emit({"impl": r["impl"], "case": r["case"], "stage": "6_flags", **r["stages"]["6_flags"]})


def _correct(r: dict) -> bool:
    return all(r["stages"].get(s, {}).get("status") == "passed"
               for s in ("1_compile", "2_correctness", "3_determinism", "4_integration"))


def fast_p_summary(records: list[dict], baseline: str = BASELINE, device_time: bool = False) -> dict:
    """fast_p per implementation (KernelBench): share of its cases that are correct (stages 1-4 passed) AND faster
    than `baseline` on the same case by a factor > p; fast_0 is the correctness rate. The denominator is every case
    the implementation was evaluated on (expected skips and budget skips excluded, and counted). A correct case
    without a baseline time (the baseline was skipped or failed there) counts as not faster for p > 0.
    Also: the geometric-mean speedup over correct cases that have a baseline time.
    ``device_time`` (compiled baseline only): torch implementations are compared by CUDA-graph replay time on both
    sides, so host launch overhead drops out; JAX ones already are (their jitted-loop time vs the graph time)."""
    key = "speedup_vs_upstream_compiled" if baseline == BASELINE else "speedup_vs_upstream_eager"
    if device_time and baseline != BASELINE:
        raise ValueError(f"device_time compares with {BASELINE} only, got baseline {baseline!r}")
    out = {}
    for name in dict.fromkeys(r["impl"] for r in records):
        rs = [r for r in records if r["impl"] == name]
        evaluated = [r for r in rs if not r["stages"]["1_compile"].get("expected_skip")
                     and r["stages"]["1_compile"]["status"] != "not_run"]
        n = len(evaluated)
        correct = [r for r in evaluated if _correct(r)]
        speed = [r["stages"].get("6_flags", {}).get(
            "speedup_vs_upstream_compiled_cudagraph" if device_time and r.get("framework") == "torch" else key)
            for r in correct]
        with_base = [s for s in speed if s]
        row = {"cases_evaluated": n, "cases_skipped": len(rs) - n, "correct": len(correct),
               "cases_without_baseline_time": len(correct) - len(with_base),
               "geomean_speedup": float(np.exp(np.mean(np.log(with_base)))) if with_base else None}
        for p in FAST_P:
            hits = len(correct) if p == 0 else sum(1 for s in with_base if s > p)
            row[f"fast_{p:g}"] = hits / n if n else None
        out[name] = row
    return out


@contextlib.contextmanager
def dynamo_settings() -> Iterator[dict]:
    """Within the block, let the compiled paths recompile for every shape/layout of the matrix (recompile_limit 64,
    default 8) and make hitting the limit an error: by default dynamo would silently run the baseline eagerly from
    then on. Yields the settings in force; restores the previous ones afterwards."""
    import torch._dynamo.config as dynamo_config

    wanted = {"recompile_limit": 64, "accumulated_recompile_limit": 1024, "fail_on_recompile_limit_hit": True}
    wanted = {k: v for k, v in wanted.items() if hasattr(dynamo_config, k)}
    previous = {k: getattr(dynamo_config, k) for k in wanted}
    for name, value in wanted.items():
        setattr(dynamo_config, name, value)
    try:
        yield dict(wanted)
    finally:
        for name, value in previous.items():
            setattr(dynamo_config, name, value)


def run_harness(cases: list[HarnessCase], impl_names: list[str] | tuple[str, ...], out_dir: str,
                cfg: RunConfig | None = None) -> dict:
    """Evaluate every implementation x case through the stages and write the report under `out_dir`.

    Returns:
        {"env", "config", "cases", "records", "fast_p", "fast_p_device", "fast_p_eager_baseline", "flags", "seconds"}.
    """
    cfg = cfg or RunConfig()
    unknown = [n for n in impl_names if n not in IMPLEMENTATIONS]
    if unknown:
        raise ValueError(f"unknown implementations {unknown}; choose from {tuple(IMPLEMENTATIONS)}")
    os.makedirs(out_dir, exist_ok=True)
    t_start = time.perf_counter()
    stages_path = os.path.join(out_dir, "stages.jsonl")
    env = env_info()
    with open(stages_path, "w") as f:
        f.write(json.dumps({"stage": "0_environment", "status": "passed", **env}, default=str) + "\n")

    def emit(record: dict) -> None:
        with open(stages_path, "a") as fh:
            fh.write(json.dumps(record, default=str) + "\n")

    records = []
    with dynamo_settings() as dynamo_cfg:
        env["dynamo_config"] = dynamo_cfg
        for case in cases:
            for name in impl_names:
                impl = IMPLEMENTATIONS[name]
                if cfg.budget_s is not None and time.perf_counter() - t_start > cfg.budget_s:
                    r = {"impl": name, "framework": impl.framework, "role": impl.role, "case": case.id,
                         "params": dataclasses.asdict(case), "status": "not_run", "failed_stage": None,
                         "reason": f"time budget of {cfg.budget_s:.0f} s exhausted",
                         "stages": {"1_compile": _stage("not_run", ["time budget exhausted"])}}
                    emit({"impl": name, "case": case.id, "stage": "1_compile", **r["stages"]["1_compile"]})
                else:
                    r = evaluate_pair(impl, case, cfg, emit)
                records.append(r)
                perf = r["stages"].get("5_performance", {})
                log(f"  {name:<18} {case.id:<52} {r['status']:<8} "
                    + (f"{perf['median_us']:.1f} us ({perf['timer'][:24]})" if perf.get("status") == "passed"
                       else f"{r['failed_stage'] or ''} {str(r['reason'] or '')[:110]}"))
    apply_flags(records, emit)
    result = {"env": env, "config": dataclasses.asdict(cfg), "implementations": {
        n: {"framework": IMPLEMENTATIONS[n].framework, "role": IMPLEMENTATIONS[n].role,
            "description": IMPLEMENTATIONS[n].description} for n in impl_names},
        "cases": [c.id for c in cases], "records": records,
        "fast_p": fast_p_summary(records, BASELINE), "fast_p_device": fast_p_summary(records, device_time=True),
        "fast_p_eager_baseline": fast_p_summary(records, EAGER_BASELINE),
        "flags": [{"impl": r["impl"], "case": r["case"], "flags": r["stages"]["6_flags"]["reasons"]}
                  for r in records if r["stages"].get("6_flags", {}).get("status") == "flagged"],
        "seconds": round(time.perf_counter() - t_start, 2)}
    write_report(out_dir, result)
    return result


# -------------------------------------------------------------------------------------------------------- report

CSV_FIELDS = ("impl", "framework", "role", "case", "B", "N", "E", "dtype", "layout", "reward_shape", "kind", "gamma",
              "status", "failed_stage", "reason", "first_call_s", "max_abs_error", "max_mass_error",
              "critic_mismatch_fraction", "timer", "median_us", "q20_us", "q80_us", "cudagraph_median_us",
              "speedup_vs_upstream_compiled", "speedup_vs_upstream_compiled_cudagraph", "speedup_vs_upstream_eager",
              "speedup_vs_framework_reference", "flags")


def csv_row(r: dict) -> dict:
    """One CSV row per implementation x case."""
    st = r["stages"]
    c2, c5, c6 = st.get("2_correctness", {}), st.get("5_performance", {}), st.get("6_flags", {})
    return {"impl": r["impl"], "framework": r["framework"], "role": r["role"], "case": r["case"], **r["params"],
            "status": r["status"], "failed_stage": r["failed_stage"], "reason": r["reason"],
            "first_call_s": st.get("1_compile", {}).get("first_call_s"),
            "max_abs_error": c2.get("max_abs_error_finite_rows"), "max_mass_error": c2.get("max_mass_error"),
            "critic_mismatch_fraction": c2.get("critic_mismatch_fraction"), "timer": c5.get("timer"),
            "median_us": c5.get("median_us"), "q20_us": c5.get("q20_us"), "q80_us": c5.get("q80_us"),
            "cudagraph_median_us": c5.get("cudagraph_median_us"),
            "speedup_vs_upstream_compiled": c6.get("speedup_vs_upstream_compiled"),
            "speedup_vs_upstream_compiled_cudagraph": c6.get("speedup_vs_upstream_compiled_cudagraph"),
            "speedup_vs_upstream_eager": c6.get("speedup_vs_upstream_eager"),
            "speedup_vs_framework_reference": c6.get("speedup_vs_framework_reference"),
            "flags": " | ".join(c6.get("reasons", [])) if c6.get("status") == "flagged" else ""}


def _f(v, spec: str = ".3g") -> str:
    return "" if v is None else (format(v, spec) if isinstance(v, int | float) else str(v))


def _fast_p_table(summary: dict, title: str) -> list[str]:
    cols = [f"fast_{p:g}" for p in FAST_P]
    lines = [title, "", "| implementation | cases | correct | " + " | ".join(cols)
             + " | geomean speedup | correct cases without baseline time |",
             "|---|---|---|" + "---|" * len(cols) + "---|---|"]
    for name, s in summary.items():
        lines.append(f"| {name} | {s['cases_evaluated']} | {s['correct']} | "
                     + " | ".join(_f(s[c], ".2f") for c in cols)
                     + f" | {_f(s['geomean_speedup'], '.2f')} | {s['cases_without_baseline_time']} |")
    return lines + [""]


def write_report(out_dir: str, res: dict) -> None:
    """results.json, results.csv, results.md and speedup.png under `out_dir`."""
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    rows = [csv_row(r) for r in res["records"]]
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        w.writerows(rows)
    env = res["env"]
    cpu_timing = any(r.get("timer") == "cpu_wallclock" for r in rows)
    lines = [f"# Kernel evaluation harness ({env.get('gpu') or 'CPU'}, {env.get('date_utc')})", "",
             f"torch {env.get('torch')}, triton {env.get('triton')}, jax {env.get('jax')}, python {env.get('python')}, "
             f"git {str(env.get('git_sha'))[:12]}{' (dirty)' if env.get('git_dirty') else ''}; "
             f"TRITON_INTERPRET={env.get('TRITON_INTERPRET')}, "
             f"FLASHSAC_PALLAS_INTERPRET={env.get('FLASHSAC_PALLAS_INTERPRET')}; "
             f"{len(res['cases'])} cases, {res['seconds']} s; command `{env.get('command')}`", ""]
    if cpu_timing:
        lines += ["**Timings below are CPU wall-clock of the Triton interpreter / Pallas interpret mode / CPU "
                  "references: they test the harness, they are NOT kernel performance.**", ""]
    lines += _fast_p_table(res["fast_p"], "## fast_p vs the compiled upstream reference (headline)")
    lines += _fast_p_table(res["fast_p_device"], "## fast_p vs the compiled upstream reference on device time "
                           "(torch: CUDA-graph replay on both sides; JAX: jitted loop vs the graph)")
    lines += _fast_p_table(res["fast_p_eager_baseline"], "## fast_p vs the eager upstream path (for reference only)")
    if res["flags"]:
        lines += ["## Flags (manual review)", ""] + [f"- {f['impl']} {f['case']}: {'; '.join(f['flags'])}"
                                                     for f in res["flags"]] + [""]
    lines += ["## Implementation x case", "",
              "| impl | case | status | failed stage | max abs err | mass err | median us (q20-q80) | CUDA graph us | "
              "speedup vs compiled | reason |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        timing = (f"{_f(r['median_us'], '.1f')} ({_f(r['q20_us'], '.1f')}-{_f(r['q80_us'], '.1f')})"
                  if r["median_us"] is not None else "")
        lines.append(f"| {r['impl']} | {r['case']} | {r['status']} | {r['failed_stage'] or ''} | "
                     f"{_f(r['max_abs_error'], '.2e')} | {_f(r['max_mass_error'], '.2e')} | {timing} | "
                     f"{_f(r['cudagraph_median_us'], '.1f')} | {_f(r['speedup_vs_upstream_compiled'], '.2f')} | "
                     f"{str(r['reason'] or '')[:160].replace('|', '/')} |")
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    plot_speedup(rows, os.path.join(out_dir, "speedup.png"), env, cpu_timing)


def plot_speedup(rows: list[dict], path: str, env: dict, cpu_timing: bool) -> None:
    """Speedup over the compiled upstream reference vs B, per implementation (geometric mean over a B's cases)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in dict.fromkeys(r["impl"] for r in rows):
        if name == BASELINE:
            continue
        pts: dict[int, list[float]] = {}
        for r in rows:
            if r["impl"] == name and r["speedup_vs_upstream_compiled"]:
                pts.setdefault(r["B"], []).append(r["speedup_vs_upstream_compiled"])
        if pts:
            Bs = sorted(pts)
            ax.plot(Bs, [math.exp(np.mean(np.log(pts[b]))) for b in Bs], "o-", label=name)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(SPEEDUP_FLAG, color="red", lw=0.8, ls="--", label=f"{SPEEDUP_FLAG:.0f}x review flag")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch B")
    ax.set_ylabel("speedup vs upstream (torch.compile)")
    ax.set_title(f"{env.get('gpu') or 'CPU'}" + (" - CPU interpreter timings, not kernel performance"
                                                  if cpu_timing else ""), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns 0 when every evaluated kernel passed stages 1-4 on every case it ran, else 1."""
    ap = argparse.ArgumentParser(prog="python -m bench.harness", description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny CPU matrix, interpreters (< 60 s on 2 cores)")
    ap.add_argument("--out", default=None, help="output directory (default bench/results/harness[_smoke])")
    ap.add_argument("--impls", default=",".join(IMPLEMENTATIONS), help="comma-separated subset of implementations")
    ap.add_argument("--sizes", default=None, help="comma-separated B values for the full matrix")
    ap.add_argument("--seed", type=int, default=0, help="base seed; every trial derives its own")
    ap.add_argument("--trials", type=int, default=None, help="correctness trials per case (fresh inputs each)")
    ap.add_argument("--budget-s", type=float, default=None, help="stop starting new pairs after this many seconds")
    a = ap.parse_args(argv)
    if a.smoke and os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("--smoke needs TRITON_INTERPRET=1 before triton is imported: run `python -m bench.harness "
                         "--smoke` (it sets it) or export it")
    out = a.out or os.path.join("bench", "results", "harness_smoke" if a.smoke else "harness")
    cfg = (RunConfig(seed=a.seed, trials=a.trials or 2, repeats=2, perf_reps=5, budget_s=a.budget_s, smoke=True)
           if a.smoke else RunConfig(seed=a.seed, trials=a.trials or 3, budget_s=a.budget_s))
    sizes = tuple(int(s) for s in a.sizes.split(",")) if a.sizes else None
    res = run_harness(case_matrix(a.smoke, sizes), [n for n in a.impls.split(",") if n], out, cfg)
    print("\n".join(_fast_p_table(res["fast_p"], "fast_p vs the compiled upstream reference")))
    print(f"{res['seconds']} s; report: {os.path.join(out, 'results.md')}")
    bad = [r for r in res["records"] if r["role"] == "kernel" and r["status"] == "failed"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
