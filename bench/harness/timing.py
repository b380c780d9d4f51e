"""Device timers of the performance stage: CUDA-graph replay for torch (with a capture that JAX's runtime threads
cannot invalidate) and a jitted loop of dependent calls for JAX."""

from __future__ import annotations

import numpy as np

from bench.common import INPUT_NAMES, block_seconds, interleaved_blocks, jit_loop
from bench.harness.cases import HarnessCase
from bench.harness.frameworks import jax, jax_dispatch, jnp, torch
from bench.harness.implementations import Impl

__all__ = ["cudagraph_bench", "jax_device_time", "quantiles_us", "thread_local_capture"]


def thread_local_capture(graph: torch.cuda.CUDAGraph) -> torch.cuda.graph:
    """``torch.cuda.graph`` in thread-local capture mode: this process also runs JAX, whose runtime threads make CUDA
    calls at any time; in the default global mode such a call during a capture invalidates the capture and can leave
    JAX's stream in an error state (H200 run of 2026-11-29: every JAX case after the first failed capture raised
    "Callback registry is closed")."""
    return torch.cuda.graph(graph, capture_error_mode="thread_local")


def cudagraph_bench(fn, rep_ms: float = 100.0, retries: int = 10) -> dict:
    """``triton.testing.do_bench_cudagraph``'s method (one graph of n unrolled calls, n from a 5-call estimate, timed
    over ``retries`` replays with CUDA events) with a thread-local capture (``thread_local_capture``); quantiles per
    call, us."""
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
        with thread_local_capture(graph):
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


def quantiles_us(values: list[float]) -> dict:
    """Median and 20 / 80 % quantiles of per-call times in microseconds, and the sample count."""
    v = np.asarray(values, dtype=np.float64)
    return {"median_us": float(np.median(v)), "q20_us": float(np.quantile(v, 0.2)),
            "q80_us": float(np.quantile(v, 0.8)), "samples": len(values)}


def jax_device_time(impl: Impl, inputs: dict, case: HarnessCase, reps: int) -> dict:
    """GPU JAX: per-call time of a jitted loop of K dependent calls (``bench.common.jit_loop``).

    ``median_us`` is the whole loop's time per iteration (the op plus the loop's own per-iteration cost), an upper
    bound comparable to a CUDA-graph replay time; ``net_median_us`` subtracts the same loop without the op, which
    for small B falls below the timer's resolution (it can come out <= 0, which is why it is not the headline).
    The two loops run in interleaved blocks.
    """
    backend = impl.backend
    op = lambda q, lp, r, d, s, g, base: jax_dispatch.categorical_td_target(  # noqa: E731
        q, lp, r, d, s, gamma=g, backend=backend, strict=True)
    K = 200 if case.B <= 8192 else (50 if case.B <= 65536 else 10)
    args = (*(inputs[k] for k in INPUT_NAMES), jnp.float32(case.gamma), jnp.ones((case.B, case.N), jnp.float32))
    loops = {"op": jit_loop(op, K), "empty": jit_loop(lambda q, lp, r, d, s, g, base: base * g, K)}
    blocks = {name: (lambda n, fn=fn: block_seconds(lambda i: fn(*args), n, jax.block_until_ready) / K * 1e6)
              for name, fn in loops.items()}
    raw = interleaved_blocks(blocks, repeats=reps, iters=1, warmup_iters=1)  # the warm-up compiles, excluded
    net = [op_us - empty_us for op_us, empty_us in zip(raw["op"], raw["empty"], strict=True)]
    return {"timer": "jax_loop_time_per_iteration", "K": K, **quantiles_us(raw["op"]),
            "empty_loop_median_us": float(np.median(raw["empty"])), "net_median_us": float(np.median(net))}
