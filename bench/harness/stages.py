"""Stages 1-5 for one implementation x case: compile, correctness, determinism, integration, performance. Each returns
a stage record (``stage_record``): status, reasons, and the stage's measurements."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

import numpy as np

from bench.common import F64_ROWS, INPUT_NAMES, block_seconds, capture_cuda_graph
from bench.harness.cases import HarnessCase, derive_seed
from bench.harness.frameworks import (
    JAX_IMPORT_ERROR,
    TORCH_DTYPES,
    bits,
    jax,
    jax_dispatch,
    jnp,
    out_dtype,
    sync,
    to_numpy,
    torch,
    torch_device,
    torch_dispatch,
    torch_impl,
)
from bench.harness.guards import (
    Snapshot,
    count_kernel_calls,
    exc_text,
    fallback_count,
    kernel_name_seen,
    poisoned_allocations,
)
from bench.harness.implementations import IMPLEMENTATIONS, Impl
from bench.harness.inputs import host_inputs, to_jax, to_torch
from bench.harness.metrics import correctness_metrics
from bench.harness.timing import cudagraph_bench, jax_device_time, quantiles_us
from shared_spec.tolerances import ATOL_BETWEEN, max_abs_error

__all__ = ["stage_compile", "stage_correctness", "stage_determinism", "stage_integration", "stage_performance",
           "stage_record"]


def stage_record(status: str, reasons: list[str] | None = None, **data) -> dict:
    """One stage's record: ``status`` ("passed", "failed", "skipped", "blocked", "not_run", "flagged"), the reasons
    (why it did not pass; for flags, what to review) and the stage's data."""
    return {"status": status, "reasons": list(reasons or []), **data}


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
    out = sync(impl.call(inputs, gamma))
    return out, time.perf_counter() - t0


def stage_compile(impl: Impl, case: HarnessCase, seed: int) -> dict:
    """Stage 1: availability gate (strict), then the first call (compile + run) and a second call, timed apart."""
    status, reason = _availability(impl, case)
    if status != "ok":
        return stage_record("skipped" if status == "skip" else "failed", [reason], expected_skip=status == "skip")
    x = host_inputs(case, derive_seed(seed, case, -1))
    try:
        inputs = _inputs(impl, x, case)
        _, first = _timed_call(impl, inputs, case.gamma)
        _, second = _timed_call(impl, inputs, case.gamma)
    except Exception as exc:  # noqa: BLE001  a compile/launch error is this stage's result
        return stage_record("failed", [f"first call raised {exc_text(exc)}"], gate=reason,
                            traceback=traceback.format_exc()[-2000:])
    return stage_record("passed", gate=reason, first_call_s=first, second_call_s=second,
                        note="first_call_s includes compilation (and recompilation for a new shape/layout); it is "
                             "never part of the performance numbers")


def _fp32_reference(impl: Impl, x: dict[str, np.ndarray], case: HarnessCase) -> np.ndarray | None:
    """The framework's fp32 reference on all rows (only needed when B exceeds the float64 prefix)."""
    if case.B <= F64_ROWS:
        return None
    ref = IMPLEMENTATIONS["torch" if impl.framework == "torch" else "jax"]
    return to_numpy(sync(ref.call(_inputs(ref, x, case), case.gamma)))


def stage_correctness(impl: Impl, case: HarnessCase, seed: int, trials: int) -> dict:
    """Stage 2: `trials` fresh-input trials vs the float64 spec, poisoned outputs, input snapshots, kernel proof."""
    per_trial, reasons = [], []
    for trial in range(trials):
        x = host_inputs(case, derive_seed(seed, case, trial))
        inputs = _inputs(impl, x, case)
        snap = Snapshot(inputs)
        fb_before = fallback_count(impl)
        try:
            poison = impl.framework == "torch" and impl.poison_output
            with poisoned_allocations(poison) as poisoned, count_kernel_calls(impl.kernel_registry) as cnt:
                out = sync(impl.call(inputs, case.gamma))
        except Exception as exc:  # noqa: BLE001
            reasons.append(f"trial {trial}: call raised {exc_text(exc)}")
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
        fallbacks = fallback_count(impl) - fb_before
        if fallbacks:
            t_reasons.append(f"{fallbacks} backend fallback(s) were counted during the call")
        shape = tuple(out.shape)
        if out_dtype(out) != "float32" or shape != (case.B, case.N):
            t_reasons.append(f"output {out_dtype(out)}{shape}, expected float32{(case.B, case.N)}")
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
    proof = kernel_name_seen(impl, inputs, case.gamma) if impl.kernel_registry and not reasons else None
    if proof and proof.get("checked") and not proof.get("seen"):
        reasons.append(f"the kernel name / Triton custom call was not found on the device: {proof}")
    agg = {k: max((t[k] for t in per_trial if isinstance(t.get(k), int | float)), default=None)
           for k in ("max_abs_error_finite_rows", "max_mass_error", "critic_mismatch_fraction")}
    poison_note = (None if impl.framework == "torch" and impl.poison_output else
                   "not poisoned: JAX's pallas_call allocates its own output (no out= in the public API)"
                   if impl.framework == "jax" else "not poisoned: see Impl.poison_output")
    return stage_record("failed" if reasons else "passed", reasons, trials=per_trial, kernel_device_proof=proof,
                        **agg, poisoned_output=bool(per_trial and per_trial[0]["output_poisoned"]),
                        poison_note=poison_note)


def _cuda_graph_replay(impl: Impl, case: HarnessCase, seed: int) -> dict:
    """Capture the call on static inputs, copy NEW data into them, replay, compare bitwise with the eager call."""
    static = to_torch(host_inputs(case, derive_seed(seed, case, 1000)), case)
    # thread-local: JAX's runtime threads in this process must not invalidate the capture (timing.thread_local_capture)
    graph, static_out = capture_cuda_graph(lambda: impl.call(static, case.gamma), thread_local=True)
    equal = True
    for k in range(2):
        fresh = to_torch(host_inputs(case, derive_seed(seed, case, 1001 + k)), case)
        for name in INPUT_NAMES:
            static[name].copy_(fresh[name])
        graph.replay()
        torch.cuda.synchronize()
        equal &= bool(np.array_equal(bits(to_numpy(static_out)), bits(to_numpy(sync(impl.call(fresh,
                                                                                                 case.gamma))))))
    return {"bitwise_equal_eager": equal}


def stage_determinism(impl: Impl, case: HarnessCase, seed: int, repeats: int) -> dict:
    """Stage 3: bitwise-identical repeats on fresh inputs; CUDA-graph replay == eager (torch on CUDA)."""
    dev = torch_device().type if impl.framework == "torch" else jax.default_backend()
    required = impl.deterministic(torch_device().type if impl.framework == "torch" else "cpu")
    x = host_inputs(case, derive_seed(seed, case, 100))
    inputs = _inputs(impl, x, case)
    first = to_numpy(sync(impl.call(inputs, case.gamma)))
    same = sum(np.array_equal(bits(first), bits(to_numpy(sync(impl.call(inputs, case.gamma)))))
               for _ in range(repeats))
    checks = {"bitwise_repeats": {"ok": same == repeats, "required": required, "identical": same,
                                  "repeats": repeats}}
    if impl.framework == "torch" and torch.cuda.is_available():
        try:
            res = _cuda_graph_replay(impl, case, seed)
            checks["cuda_graph_replay"] = {"ok": res["bitwise_equal_eager"], "required": impl.role == "kernel", **res}
        except Exception as exc:  # noqa: BLE001  e.g. upstream's linspace under capture
            checks["cuda_graph_replay"] = {"ok": False, "required": impl.role == "kernel", "error": exc_text(exc)}
    else:
        checks["cuda_graph_replay"] = {"ok": None, "required": False, "why": f"not applicable ({impl.framework} on "
                                                                              f"{dev})"}
    reasons = [f"{name}: {c}" for name, c in checks.items() if c["required"] and not c["ok"]]
    return stage_record("failed" if reasons else "passed", reasons, checks=checks)


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
        checks["graph_breaks"] = {"ok": False, "required": required, "error": exc_text(exc)}
    try:
        key = (impl.name, gamma)
        if key not in _COMPILED:
            _COMPILED[key] = torch.compile(fn, fullgraph=True)
        got = to_numpy(sync(_COMPILED[key](**inputs)))
        err = max_abs_error(got, eager_out)
        checks["compile_fullgraph"] = {"ok": err <= ATOL_BETWEEN, "required": required, "max_abs_vs_eager": err,
                                       "bitwise_equal_eager": bool(np.array_equal(bits(got), bits(eager_out)))}
    except Exception as exc:  # noqa: BLE001
        checks["compile_fullgraph"] = {"ok": False, "required": required, "error": exc_text(exc)}
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
        got = to_numpy(sync(_JITTED[impl.name](inputs, gamma)))
        err = max_abs_error(got, eager_out)
        check = {"max_abs_vs_eager": err, "bitwise_equal_eager": bool(np.array_equal(bits(got), bits(eager_out)))}
        reasons = [] if err <= ATOL_BETWEEN else [f"jit vs eager max abs error {err:.3g} > {ATOL_BETWEEN}"]
        if impl.kernel_registry is not None:
            check.update(kernel_traced=cnt["calls"], pallas_call_in_jaxpr="pallas_call" in jaxpr)
            if cnt["calls"] < 1 or "pallas_call" not in jaxpr:
                reasons.append("the kernel is not in the traced program (no pallas_call / the wrapper did not fire)")
        return {"jax_jit": {"ok": not reasons, "required": True, "why": reasons, **check}}
    except Exception as exc:  # noqa: BLE001
        return {"jax_jit": {"ok": False, "required": True, "error": exc_text(exc)}}


def stage_integration(impl: Impl, case: HarnessCase, seed: int) -> dict:
    """Stage 4: torch.compile(fullgraph=True) + graph-break count (CUDA) / jax.jit(dispatcher) vs the eager call."""
    inputs = _inputs(impl, host_inputs(case, derive_seed(seed, case, 200)), case)
    eager_out = to_numpy(sync(impl.call(inputs, case.gamma)))
    checks = (_torch_integration if impl.framework == "torch" else _jax_integration)(impl, case, inputs, eager_out)
    reasons = [f"{name}: {c}" for name, c in checks.items() if c["required"] and not c["ok"]]
    return stage_record("failed" if reasons else "passed", reasons, checks=checks)


def stage_performance(impl: Impl, case: HarnessCase, seed: int, reps: int) -> dict:
    """Stage 5 (only after 1-4 passed): warm-up excluded; GPU: do_bench (+ quantiles) and ``cudagraph_bench`` for
    torch, a jitted loop for JAX; CPU: wall-clock medians of the interpreters (not kernel performance)."""
    inputs = _inputs(impl, host_inputs(case, derive_seed(seed, case, 300)), case)
    fn = lambda: impl.call(inputs, case.gamma)  # noqa: E731
    for _ in range(2):
        sync(fn())  # warm-up (and any compilation), excluded
    on_gpu = torch.cuda.is_available() if impl.framework == "torch" else jax.default_backend() != "cpu"
    if on_gpu and impl.framework == "torch":
        from triton.testing import do_bench

        med, q20, q80 = do_bench(fn, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
        rec = {"timer": "triton.testing.do_bench (L2 flushed between reps)", "median_us": med * 1e3,
               "q20_us": q20 * 1e3, "q80_us": q80 * 1e3}
        try:
            rec.update(cudagraph_bench(fn))
        except Exception as exc:  # noqa: BLE001  e.g. upstream eager's linspace under capture
            rec["cudagraph_error"] = exc_text(exc)
        return stage_record("passed", **rec)
    if on_gpu:
        return stage_record("passed", **jax_device_time(impl, inputs, case, max(reps, 7)))
    times = [block_seconds(lambda i: fn(), 1, sync) * 1e6 for _ in range(reps)]
    return stage_record("passed", timer="cpu_wallclock", **quantiles_us(times),
                        note="CPU wall-clock of interpreter / CPU runs (Triton interpreter, Pallas interpret mode): "
                             "NOT kernel performance")


