"""Cascaded kernel evaluation harness: compile -> correctness -> determinism -> integration -> performance -> flags ->
report, for every implementation of the categorical TD target over a case matrix.

    python -m bench harness --tiny --out /tmp/harness       # CPU: interpreters, tiny sizes, < 60 s on 2 cores
    python -m bench harness --out bench/results/harness      # GPU: the full matrix

Implementations (`implementations.IMPLEMENTATIONS`): the torch eager reference (torch_impl backend "torch"),
upstream FlashSAC's path eager and under default-mode `torch.compile` (bench/upstream.py; the compiled one is the
fast_p baseline), the Triton kernel (backend "triton", strict), the jitted jnp reference (jax_impl backend "jax") and
the Pallas kernel (backend "pallas", strict). Unit of evaluation: one implementation x one case (`HarnessCase`: B, N,
E, log-prob dtype, layout, reward shape, value kind from shared_spec.KINDS, gamma).

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
                 iteration of a jitted loop of dependent calls (bench.common.jit_loop); CPU: wall-clock
                 medians of interpreter runs, labelled as such (they are NOT kernel performance);
  6 flags        speedup > 10x over the compiled upstream reference -> flagged for review;
  7 report       results.json, results.csv (one row per implementation x case), results.md, speedup.png and the fast_p

Modules, one job each: ``cases`` (the case matrix, per-trial seeds), ``frameworks`` (torch and the optional JAX,
devices, syncs), ``inputs`` (host inputs and their framework layouts), ``implementations`` (what is evaluated),
``guards`` (the anti-cheat measures), ``metrics`` (correctness against the spec), ``timing`` (device timers),
``stages`` (stages 1-5), ``environment`` (stage 0), ``scoring`` (stage 6 and fast_p), ``runner`` (the run),
``report`` (stage 7), ``cli`` (``python -m bench harness``).
"""

from __future__ import annotations

import os
import sys

if "--tiny" in sys.argv or "--smoke" in sys.argv:  # before any kernel module is imported (read at import)
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("FLASHSAC_PALLAS_INTERPRET", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU

from bench.harness.cases import SMOKE_CASES, HarnessCase, case_matrix, derive_seed  # noqa: E402
from bench.harness.cli import main  # noqa: E402
from bench.harness.guards import count_kernel_calls  # noqa: E402
from bench.harness.implementations import IMPLEMENTATIONS, Impl  # noqa: E402
from bench.harness.report import CSV_FIELDS, fast_p_table  # noqa: E402
from bench.harness.runner import STAGES, RunConfig, run_harness  # noqa: E402
from bench.harness.scoring import BASELINE, EAGER_BASELINE, FAST_P, apply_flags, fast_p_summary  # noqa: E402

__all__ = ["BASELINE", "CSV_FIELDS", "EAGER_BASELINE", "FAST_P", "IMPLEMENTATIONS", "SMOKE_CASES", "STAGES",
           "HarnessCase", "Impl", "RunConfig", "apply_flags", "case_matrix", "count_kernel_calls", "derive_seed",
           "fast_p_summary", "fast_p_table", "main", "run_harness"]
