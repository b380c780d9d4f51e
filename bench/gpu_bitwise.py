"""GPU check that the Triton and Pallas kernels give bitwise-identical targets, and interleaved kernel timings.

    python3 -m bench.gpu_bitwise --out <dir> [--skip-timing] [--rounds 5] [--baseline-kernel <path to a kernel .py>]
    python3 -m bench.gpu_bitwise --out <dir> --skip-timing --strided-only     # the row-offset cases only
    python3 -m bench.gpu_bitwise --out <dir> --skip-bitwise --sweep 1:1:1,1:1:4,1:1:16 \
        --baseline-kernel bench/baselines/categorical_td_target_v2.py            # launch configurations BR:warps:RPP

Bitwise part (exits 1 if any configuration differs): the case matrix over input kinds (shared_spec.make_inputs),
B in {1, 127, 512, 2048, 65536, 1048576}, N in {2, 51, 101, 256, 1024}, E in {1, 2, 5}, discounts 0, just below and
above the band threshold, 0.5, 0.99, 1, fp32/bf16/fp16 log-probs, and strided inputs: the B rows as the second half
of (E, 2B[, N]) buffers, torch chunk views (upstream's ``x.chunk(2, dim=1)[1]``) against the whole JAX arrays with
``row_offset=B`` (read in place by the Pallas kernel). Every configuration runs through both public ops with strict
backends on the same numpy inputs and compares the output bits (NaN rows by position), the NaN rows against the
float64 spec, and the first 4096 rows against the float64 spec.

Timing part (CUDA-graph replay of 20 calls for torch; for Pallas the device time per call, a jitted fori_loop of
dependent calls minus the same loop without the kernel), in `--rounds` interleaved rounds in one process: upstream's
compiled path (bench/upstream.py), an optional baseline kernel file (a previous kernel with the same signature, RPP
optional: one without it runs one tile per program), the kernel under each launch configuration of a small sweep
(`--sweep BR:num_warps[:RPP],...`: rows per tile, warps, tiles per program, RPP 1 if left out), and the Pallas kernel
pinned and under the same configurations; plus the copy bandwidth measured in the same process and the bytes floor
(one read of the selected critic's log-probs + one write of the output); and, in every round, both pinned kernels'
device durations from one CUPTI session (torch.profiler's kernel records, `_kernel_durations`), each call followed by
a sum of its output (the Pallas loop, and a CUDA graph of the Triton kernel with the same sum): the same tool and the
same pattern for both, hence the Pallas / Triton kernel ratio (the per-call times above use different methods for
the two frameworks). The Pallas variants run in a rotated order each round. Every Triton variant must give the pinned
Triton kernel's bits, every Pallas variant the pinned Pallas kernel's, and the two pinned kernels the same bits
(a failure is counted, and the exit status is 1). Writes results.json and prints a table.
"""

from __future__ import annotations

# ruff: noqa: B023  (the timed closures run inside the iteration that defines them)
import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

GAMMA = 0.99
NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")


def _cases(quick: bool, strided_only: bool = False) -> list[dict]:
    from shared_spec import KINDS

    cases = []
    kinds = list(KINDS)
    for B in (1, 127, 512, 2048):
        cases += [dict(B=B, kind=k) for k in kinds]
    cases += [dict(B=65536, kind=k) for k in ("random", "peaked", "mixed", "nonfinite")]
    cases += [dict(B=1_048_576, kind=k) for k in ("random", "peaked")]
    # B not a multiple of the pinned tiles per program (RPP 4 and 16): the last program runs fewer tiles
    cases += [dict(B=65536 + 37, kind="nonfinite"), dict(B=262_144 + 5, kind="mixed")]
    cases += [dict(B=2048, N=n, kind=k) for n in (2, 51, 256, 1024) for k in ("mixed", "nonfinite")]
    cases += [dict(B=2048, E=e, kind=k) for e in (1, 5) for k in ("mixed", "nonfinite")]
    cases += [dict(B=2048, gamma=g, kind="mixed") for g in (0.0, 0.0625 - 1e-6, 0.0625, 0.0625 + 1e-6, 0.5, 1.0)]
    cases += [dict(B=2048, dtype=dt, kind=k) for dt in ("bfloat16", "float16") for k in ("mixed", "nonfinite")]
    cases += [dict(B=2048, strided=True, kind=k) for k in ("mixed", "nonfinite")]
    cases += [dict(B=65536, strided=True, kind="random"), dict(B=100_003, strided=True, kind="nonfinite")]
    cases += [dict(B=B, strided=True, kind="mixed") for B in (1, 127, 512)]
    cases += [dict(B=512, strided=True, N=n, kind="nonfinite") for n in (2, 51, 1024)]
    cases += [dict(B=512, strided=True, E=e, kind="mixed") for e in (1, 5)]
    cases += [dict(B=512, strided=True, dtype=dt, kind="mixed") for dt in ("bfloat16", "float16")]
    if strided_only:
        cases = [c for c in cases if c.get("strided")]
    if quick:
        cases = [c for c in cases if c["B"] <= 2048][:12]
    return cases


def run_bitwise(quick: bool, strided_only: bool = False) -> dict:
    import jax
    import jax.numpy as jnp
    import torch

    import jax_impl
    import torch_impl
    from shared_spec import make_inputs
    from shared_spec import reference as R

    rows, failures = [], 0
    for case in _cases(quick, strided_only):
        B, N, E = case["B"], case.get("N", 101), case.get("E", 2)
        gamma, dtype, kind = case.get("gamma", GAMMA), case.get("dtype", "float32"), case["kind"]
        t0 = time.time()
        x = make_inputs(B, N, E, seed=7, kind=kind)
        tdt = getattr(torch, dtype)
        jx = {k: jnp.asarray(v) for k, v in x.items()}
        offset = {}
        if case.get("strided"):  # upstream's x.chunk(2, dim=1)[1]: views with an offset into (E, 2B[, N]) buffers
            t = {}
            for k, v in x.items():
                axis = 1 if v.ndim >= 2 else 0
                full = np.ascontiguousarray(np.concatenate([np.flip(v, axis), v], axis=axis))  # decoy half first
                t[k] = torch.from_numpy(full).cuda().chunk(2, dim=axis)[1]
                if axis == 1:  # JAX: the whole (E, 2B[, N]) array, its second half read in place (row_offset=B)
                    jx[k] = jnp.asarray(full)
            offset = {"row_offset": B}
        else:
            t = {k: torch.from_numpy(v).cuda() for k, v in x.items()}
        t["next_log_probs"] = t["next_log_probs"].to(tdt) if dtype != "float32" else t["next_log_probs"]
        tri = torch_impl.categorical_td_target(**t, gamma=gamma, backend="triton", strict=True)
        jx["next_log_probs"] = jx["next_log_probs"].astype(getattr(jnp, dtype))
        pal = jax_impl.categorical_td_target(**jx, gamma=gamma, backend="pallas", strict=True, **offset)
        a = tri.cpu().numpy()
        b = np.asarray(jax.device_get(pal))
        same_nan = bool(np.array_equal(np.isnan(a), np.isnan(b)))
        ok = ~np.isnan(a)
        bitwise = same_nan and bool(np.array_equal(a.view(np.int32)[ok], b.view(np.int32)[ok]))
        n_diff = int((a.view(np.int32) != b.view(np.int32))[ok].sum()) if same_nan else -1
        max_diff = float(np.abs(a[ok] - b[ok]).max()) if same_nan and ok.any() else 0.0
        # float64 spec on (the first 4096 rows of) the inputs the kernels saw (log-probs rounded to their dtype).
        m = min(B, 4096)
        xs = {k: (v[:, :m] if k in ("next_qs", "next_log_probs") else v[:m]) for k, v in x.items()}
        if dtype != "float32":
            xs["next_log_probs"] = torch.from_numpy(xs["next_log_probs"]).to(tdt).float().numpy()
        ref = R.categorical_td_target(**xs, gamma=gamma)
        nan_ok = bool(np.array_equal(np.isnan(ref), np.isnan(a[:m])))
        okr = ~np.isnan(ref)
        err64 = float(np.abs(a[:m][okr] - ref[okr]).max()) if okr.any() else 0.0
        row = dict(case, N=N, E=E, gamma=gamma, dtype=dtype, bitwise=bitwise, nan_rows_equal=same_nan,
                   differing_elements=n_diff, max_abs_diff=max_diff, nan_rows_match_spec=nan_ok,
                   max_err_vs_float64=err64, seconds=round(time.time() - t0, 2))
        rows.append(row)
        failures += (not bitwise) or (not nan_ok)
        print(f"bitwise {bitwise!s:5} nan_spec {nan_ok!s:5} diff {n_diff:6d} ({max_diff:.2e}) err64 {err64:.2e} "
              f"{json.dumps(case)}", flush=True)
    # Determinism: 50 repeats of each kernel at B = 65536 (mixed) are bitwise identical.
    x = make_inputs(65536, 101, 2, seed=11, kind="mixed")
    t = {k: torch.from_numpy(v).cuda() for k, v in x.items()}
    first = torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton", strict=True)
    det_t = all(torch.equal(torch.nan_to_num(first, nan=-1.0), torch.nan_to_num(
        torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton", strict=True), nan=-1.0))
        for _ in range(50))
    jx = {k: jnp.asarray(v) for k, v in x.items()}
    p0 = np.asarray(jax_impl.categorical_td_target(**jx, gamma=GAMMA, backend="pallas", strict=True))
    det_p = all(np.array_equal(np.nan_to_num(p0, nan=-1.0), np.nan_to_num(np.asarray(
        jax_impl.categorical_td_target(**jx, gamma=GAMMA, backend="pallas", strict=True)), nan=-1.0))
        for _ in range(50))
    failures += (not det_t) + (not det_p)
    return dict(rows=rows, bitwise_all=all(r["bitwise"] for r in rows), configurations=len(rows),
                bitwise_count=sum(r["bitwise"] for r in rows), deterministic_triton_50=det_t,
                deterministic_pallas_50=det_p, failures=int(failures))


def _graph_time(fn, iters: int = 20, reps: int = 7) -> float:
    """Median microseconds per call of `fn` captured `iters` times in one CUDA graph."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    # thread_local: JAX's runtime threads in the same process must not invalidate the capture
    with torch.cuda.graph(g, capture_error_mode="thread_local"):
        for _ in range(iters):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / iters)
    return statistics.median(times)


def _copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + bytes written), 2 GiB buffers."""
    import torch

    n = 1 << 29
    a = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
    b = torch.empty_like(a)
    t = _graph_time(lambda: b.copy_(a), iters=5, reps=5)
    return 2 * 4 * n / (t * 1e-6)


KERNEL_GRAPH_CALLS = 20  # Triton calls in the graph of the kernel-time rounds

# The kernels' names on the device: the Triton JIT function's and the pallas_call's.
KERNEL_NAMES = {"triton": "categorical_td_target_kernel", "pallas": "categorical_td_target"}


def _kernel_durations(run) -> dict[str, list[float]]:
    """Device duration (µs) of every launch of the two kernels during `run()`, from the CUPTI kernel records of one
    torch.profiler session (CUPTI records every kernel of the process, XLA's included), by kernel name
    (KERNEL_NAMES). Both kernels are thus timed by one tool in one session, independent of how they were launched
    (a CUDA graph, XLA's loop); what differs between the launch methods (gaps, host work) is not in it."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    return kernel_records(events)


def kernel_records(events: list[dict]) -> dict[str, list[float]]:
    """The durations (µs) of the kernel records ("X" events of category "kernel") of a chrome trace whose name is
    exactly one of KERNEL_NAMES, by key ("triton", "pallas"), in trace order."""
    out: dict[str, list[float]] = {k: [] for k in KERNEL_NAMES}
    by_name = {v: k for k, v in KERNEL_NAMES.items()}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e.get("name") in by_name:
            out[by_name[e["name"]]].append(float(e["dur"]))
    return out


def _bits(a: np.ndarray) -> np.ndarray:
    """The fp32 bit patterns, NaN as -1 (NaN rows compared by position)."""
    return np.where(np.isnan(a), -1, a.view(np.int32))


def parse_sweep(text: str) -> list[tuple[int, int, int]]:
    """"BR:num_warps[:RPP],..." -> [(BR, num_warps, RPP)] (RPP 1 when left out: one tile per program)."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        vals = [int(v) for v in item.split(":")]
        if len(vals) not in (2, 3) or min(vals) < 1:
            raise ValueError(f"sweep entry {item!r}: expected BR:num_warps or BR:num_warps:RPP, positive integers")
        out.append((vals[0], vals[1], vals[2] if len(vals) == 3 else 1))
    return out


def _load_kernel_file(path: str):
    spec = importlib.util.spec_from_file_location("baseline_kernel_module", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.categorical_td_target_kernel


def run_timing(rounds: int, baseline_kernel: str | None, sizes: list[int], sweep: list[tuple[int, int, int]],
               dtype: str = "float32", sweep_pallas: bool = True) -> dict:
    import jax
    import jax.numpy as jnp
    import torch

    from bench import upstream
    from bench.common import capture_cuda_graph, jit_loop
    from jax_impl import ops as pallas_ops
    from shared_spec import make_inputs
    from shared_spec.launch_config import gpu_rows_per_program
    from torch_impl import ops
    from torch_impl.reference import support_constants
    from triton_kernels import categorical_td_target_kernel, kernel_config

    bw = _copy_bandwidth()
    sel, comp = upstream.compiled()
    base = _load_kernel_file(baseline_kernel) if baseline_kernel else None
    mv, inv_delta = support_constants(101, -5.0, 5.0)
    out = dict(copy_bandwidth_bytes_per_s=bw, sizes={}, log_prob_dtype=dtype, sweep=[list(s) for s in sweep])
    bws = [bw]
    failures = 0
    for B in sizes:
        x = make_inputs(B, 101, 2, seed=3, kind="random")
        t = {k: torch.from_numpy(v).cuda() for k, v in x.items()}
        t["next_log_probs"] = t["next_log_probs"].to(getattr(torch, dtype))
        args = tuple(t[k] for k in NAMES)
        variants = {"upstream_compiled": lambda: upstream.upstream_target(sel, comp, *args, GAMMA)}
        if base is not None:  # a kernel with Q: the pinned configuration; else one row a warp, with the tiles per
            # program of that launch rule (RPP if it has one)
            base_cfg = None if "Q" in base.arg_names else {
                "BR": 1, "num_warps": 1, "RPP": gpu_rows_per_program(B) if "RPP" in base.arg_names else 1}
            variants["baseline_kernel"] = lambda: ops.launch(base, *args, GAMMA, mv, inv_delta, config=base_cfg)
        pinned = kernel_config(B, 101, False)
        pin = (pinned["BR"], pinned["num_warps"], pinned["RPP"])
        variants[f"triton_pinned_BR{pin[0]}_w{pin[1]}_rpp{pin[2]}"] = lambda: ops.launch(
            categorical_td_target_kernel, *args, GAMMA, mv, inv_delta)
        for br, nw, rpp in sweep:
            if (br, nw, rpp) != pin:
                variants[f"triton_BR{br}_w{nw}_rpp{rpp}"] = (lambda br=br, nw=nw, rpp=rpp: ops.launch(
                    categorical_td_target_kernel, *args, GAMMA, mv, inv_delta,
                    config={"BR": br, "num_warps": nw, "RPP": rpp}))
        ref = _bits(ops.launch(categorical_td_target_kernel, *args, GAMMA, mv, inv_delta).cpu().numpy())
        same = {}  # every variant computes the same bits (tile-independent order), the baseline kernel too
        for name, fn in variants.items():
            if name.startswith(("triton_", "baseline_")):
                same[name] = bool(np.array_equal(_bits(fn().cpu().numpy()), ref))
        jx = [jnp.asarray(x[k]) for k in NAMES]
        jx[1] = jx[1].astype(getattr(jnp, dtype))
        # Pallas device time per call: a jitted fori_loop of K dependent calls minus the same loop without the
        # kernel (bench.common.jit_loop), so neither the dispatch nor the loop's own cost is counted.
        K = 1000 if B <= 8192 else (200 if B <= 65536 else 20)
        base_arr = jnp.ones((B, 101), jnp.float32)
        loop_args = (*jx, jnp.float32(GAMMA), base_arr)

        def pallas_op(br, nw, rpp):
            return lambda q, lp, r, d, s, g, base: pallas_ops.categorical_td_target_pallas(
                q, lp, r, d, s, g, block_rows=br, num_warps=nw, rows_per_program=rpp)

        pallas_sweep = sweep if sweep_pallas else []
        pallas_loops = {"pallas_pinned": jit_loop(pallas_op(None, None, None), K)}
        for br, nw, rpp in pallas_sweep:
            pallas_loops[f"pallas_BR{br}_w{nw}_rpp{rpp}"] = jit_loop(pallas_op(br, nw, rpp), K)
        # One call of each Pallas configuration: the pinned Pallas kernel gives the pinned Triton kernel's bits, and
        # every configuration the pinned one's.
        pal_ref = np.asarray(pallas_ops.categorical_td_target_pallas(*jx, GAMMA))
        same["pallas_pinned_vs_triton_pinned"] = bool(np.array_equal(_bits(pal_ref), ref))
        for br, nw, rpp in pallas_sweep:
            got = np.asarray(pallas_ops.categorical_td_target_pallas(*jx, GAMMA, block_rows=br, num_warps=nw,
                                                                      rows_per_program=rpp))
            same[f"pallas_BR{br}_w{nw}_rpp{rpp}"] = bool(np.array_equal(_bits(got), _bits(pal_ref)))
        failures += sum(not v for v in same.values())
        if not all(same.values()):
            print(f"B={B} BITS DIFFER: {[k for k, v in same.items() if not v]}", flush=True)
        empty_loop = jit_loop(lambda q, lp, r, d, s, g, base: base * g, K)
        for f in (*pallas_loops.values(), empty_loop):
            jax.block_until_ready(f(*loop_args))

        def loop_seconds(f):
            best = float("inf")
            for _ in range(7):
                t0 = time.perf_counter()
                jax.block_until_ready(f(*loop_args))
                best = min(best, time.perf_counter() - t0)
            return best

        pallas_variants = {name: (lambda f=f: (loop_seconds(f) - loop_seconds(empty_loop)) / K * 1e6)
                           for name, f in pallas_loops.items()}

        # Same-method kernel time: both pinned kernels in one CUPTI session per round, in the same pattern (each call
        # followed by a sum of its output that the next call waits for: the Pallas loop above, and a CUDA graph of
        # the Triton kernel with the same sum), so the launch method and the cache state between calls match.
        tri_fn = variants[f"triton_pinned_BR{pin[0]}_w{pin[1]}_rpp{pin[2]}"]
        acc = torch.zeros((), device="cuda")
        tri_graph, _ = capture_cuda_graph(lambda: [acc.add_(tri_fn().sum()) for _ in range(KERNEL_GRAPH_CALLS)],
                                          thread_local=True)
        pallas_loop = pallas_loops["pallas_pinned"]

        def kernels_round():
            tri_graph.replay()
            jax.block_until_ready(pallas_loop(*loop_args))

        res = {name: [] for name in list(variants) + list(pallas_variants) + ["kernel/triton", "kernel/pallas"]}
        kernel_counts = []
        pallas_names = list(pallas_variants)
        for rnd in range(rounds):
            for name, fn in variants.items():
                res[name].append(_graph_time(fn))
            # rotated each round, so no Pallas variant always runs first after the torch side
            for name in pallas_names[rnd % len(pallas_names):] + pallas_names[:rnd % len(pallas_names)]:
                res[name].append(pallas_variants[name]())
            durs = _kernel_durations(kernels_round)
            kernel_counts.append({k: len(v) for k, v in durs.items()})
            for k, v in durs.items():
                res[f"kernel/{k}"].append(statistics.median(v) if v else float("nan"))
            if not all(durs.values()):
                failures += 1
                print(f"B={B} KERNEL RECORDS MISSING: {kernel_counts[-1]}", flush=True)
        bws.append(_copy_bandwidth())  # re-measured beside every size; the floor uses the largest reading
        floor_us = (B * 101 * (t["next_log_probs"].element_size() + 4)) / max(bws) * 1e6
        out["sizes"][B] = dict(floor_us=floor_us, pinned=pinned, pallas_loop_K=K, same_bits=same,
                               kernel_records=kernel_counts, times={
            name: dict(median=statistics.median(v), min=min(v), max=max(v), all=v) for name, v in res.items()})
        line = " ".join(f"{n}={statistics.median(v):.1f}" for n, v in res.items())
        print(f"B={B} floor={floor_us:.1f}us {line}", flush=True)
    out["copy_bandwidth_readings_bytes_per_s"] = bws
    out["copy_bandwidth_bytes_per_s"] = max(bws)
    out["failures"] = failures
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--strided-only", action="store_true",
                    help="only the strided cases (torch chunk views against JAX's row_offset form)")
    ap.add_argument("--skip-bitwise", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline-kernel", default=None)
    ap.add_argument("--sizes", default="512,2048,65536,1048576")
    ap.add_argument("--sweep", default="1:1:1,1:1:2,1:1:4,1:1:16,2:2:1",
                    help="launch configurations BR:num_warps[:RPP] timed beside the pinned one ('' for none)")
    ap.add_argument("--timing-dtype", default="float32", help="log-prob dtype of the timed inputs")
    ap.add_argument("--sweep-kernels", choices=("both", "triton"), default="both",
                    help="kernels timed under the --sweep configurations (the pinned Pallas kernel is always timed)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import jax
    import torch
    import triton

    res = dict(env=dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                        jax=jax.__version__, python=platform.python_version(), argv=sys.argv,
                        date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())))
    failures = 0
    if not a.skip_bitwise:
        res["bitwise"] = run_bitwise(a.quick, a.strided_only)
        failures += res["bitwise"]["failures"]
        print(f"bitwise: {res['bitwise']['bitwise_count']}/{res['bitwise']['configurations']} configurations; "
              f"deterministic triton {res['bitwise']['deterministic_triton_50']} pallas "
              f"{res['bitwise']['deterministic_pallas_50']}", flush=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    if not a.skip_timing:
        res["timing"] = run_timing(a.rounds, a.baseline_kernel, [int(s) for s in a.sizes.split(",")],
                                   parse_sweep(a.sweep), a.timing_dtype,
                                   sweep_pallas=a.sweep_kernels == "both")
        failures += res["timing"]["failures"]
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    print("FAILED" if failures else "OK: bitwise identical everywhere", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
