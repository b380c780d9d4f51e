"""Speed of every kernel backend against the jnp reference and against the memory floor.

Each JAX backend (`jax` reference, `triton` via jax-triton, `pallas`, `mosaic`) runs inside one jitted program: a
`lax.scan` of K dependent calls (gamma_{i+1} = gamma_i + 1e-30 * sum(out_i), an fp32 no-op XLA cannot remove, so no
call is hoisted or merged and every output is consumed), timed by wall clock around the whole program; per call =
that time / K (median of --reps runs), the scan's own step included (the same scan with a trivial body is reported
as `scan_step_us`; subtracting it can reach zero where XLA's loop overhead dominates). The torch Triton kernel is
timed as 20 calls captured in one CUDA graph (median replay time / 20). The memory floor of a call is the bytes it
must move (the selected critic's log-probs read once in their dtype, the (B, N) fp32 output written once, plus the
critic means and the three per-row scalars) divided by the bandwidth of a 1 GiB device-to-device copy (bytes read +
written, measured in the same process). B = 512, 2048, 65,536, 262,144 and 1,048,576 rows, N = 101, E = 2, fp32
log-probs (--sizes, --N, --dtype to change). A backend that cannot run here is listed with its reason.

GPU (the H200 run, after `python -m bench kernel-validate`; jax-triton installed from its wheel as there):

    python -m bench kernel-speed --out bench/results/h200-<date>-kernel-backends/speed

On the CPU, `--tiny` runs the interpreted kernels at B = 8 (K = 2) to check the job end to end; its times mean
nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

__all__ = ["JAX_BACKENDS", "derive_auto_order", "floor_bytes", "main", "record_auto_order", "run"]

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX initialises: torch shares the GPU

JAX_BACKENDS = ("jax", "triton", "pallas", "mosaic")
SIZES = (512, 2048, 65536, 262_144, 1_048_576)
GAMMA = 0.99
GRAPH_CALLS = 20


def floor_bytes(B: int, N: int, E: int, lp_itemsize: int) -> int:
    """Bytes one call must move: the selected critic's (B, N) log-probs, the (B, N) fp32 output, the (E, B) critic
    means and the reward, terminated and alpha log pi rows (fp32)."""
    return B * N * lp_itemsize + B * N * 4 + E * B * 4 + 3 * B * 4


def _scan_program(op, K: int):
    """jit of a lax.scan of K dependent calls of op(q, lp, r, d, s, gamma) -> (B, N)."""
    import jax
    import jax.numpy as jnp

    def program(q, lp, r, d, s, gamma):
        def step(carry, _):
            g, acc = carry
            tot = jnp.sum(op(q, lp, r, d, s, g))
            return (g + 1e-30 * tot, acc + tot), None

        return jax.lax.scan(step, (gamma, jnp.float32(0.0)), None, length=K)[0][1]

    return jax.jit(program)


def _wall(fn, args, reps: int) -> float:
    """Median seconds of `fn(*args)` to completion over `reps` runs (after one warm-up run)."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _graph_us(fn, reps: int) -> float:
    """Median microseconds per call of `fn` captured GRAPH_CALLS times in one CUDA graph."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode="thread_local"):
        for _ in range(GRAPH_CALLS):
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
        times.append(a.elapsed_time(b) * 1e3 / GRAPH_CALLS)
    return statistics.median(times)


def copy_bandwidth(gpu: bool, reps: int) -> dict[str, float]:
    """{"bytes_per_s", "buffer_bytes"}: a device-to-device copy of a 1 GiB fp32 buffer (bytes read + written), in a
    CUDA graph; on the CPU a 64 MiB numpy copy (no device: a placeholder for the --tiny run)."""
    if gpu:
        import torch

        n = 1 << 28
        a = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
        b = torch.empty_like(a)
        us = _graph_us(lambda: b.copy_(a), reps)
        del a, b
        torch.cuda.empty_cache()
        return {"bytes_per_s": 2 * 4 * n / (us * 1e-6), "buffer_bytes": 4 * n}
    n = 1 << 24
    a = np.ones(n, np.float32)
    b = np.empty_like(a)
    times = []
    for _ in range(max(reps, 3)):
        t0 = time.perf_counter()
        np.copyto(b, a)
        times.append(time.perf_counter() - t0)
    return {"bytes_per_s": 2 * 4 * n / statistics.median(times), "buffer_bytes": 4 * n}


def run(sizes: tuple[int, ...], N: int, E: int, dtype: str, backends: tuple[str, ...], K_for, reps: int,
        gpu: bool, log=print) -> dict[str, Any]:
    """Times every backend at every size; returns {"bandwidth", "sizes": {B: {...}}, "unavailable"}."""
    import jax.numpy as jnp

    import jax_impl
    from shared_spec import make_inputs

    bw = copy_bandwidth(gpu, reps)
    itemsize = jnp.dtype(dtype).itemsize
    res: dict[str, Any] = {"bandwidth": bw, "sizes": {}, "unavailable": {}}
    for B in sizes:
        K = K_for(B)
        x = make_inputs(B, N, E, seed=5, kind="random")
        args = [jnp.asarray(x[k]) for k in ("next_qs", "next_log_probs", "reward", "terminated",
                                            "next_alpha_log_pi")]
        args[1] = args[1].astype(jnp.dtype(dtype))
        gamma = jnp.float32(GAMMA)
        floor_us = floor_bytes(B, N, E, itemsize) / bw["bytes_per_s"] * 1e6
        row: dict[str, Any] = {"K": K, "floor_us": floor_us, "us": {}, "vs_floor": {}, "vs_jax": {}}
        empty = _scan_program(lambda q, lp, r, d, s, g: r[:, None] * g, K)
        t_empty = _wall(empty, (*args, gamma), reps)
        row["scan_step_us"] = t_empty / K * 1e6  # a scan step with a trivial body: part of every jax/* figure
        for b in backends:
            if b in res["unavailable"]:
                continue

            def op(q, lp, r, d, s, g, b=b):
                return jax_impl.categorical_td_target(q, lp, r, d, s, gamma=g, backend=b, strict=True)

            try:
                t = _wall(_scan_program(op, K), (*args, gamma), reps)
            except Exception as exc:  # BackendUnavailable, or the kernel's own failure
                res["unavailable"][b] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
                log(f"unavailable {b}: {res['unavailable'][b]}")
                continue
            row["us"][f"jax/{b}"] = t / K * 1e6  # the whole scan step: subtracting t_empty could go to zero
        if "torch/triton" not in res["unavailable"]:
            row["us"]["torch/triton"] = _torch_us(x, dtype, reps, gpu, res["unavailable"], log)
        ref = row["us"].get("jax/jax")
        for name, us in list(row["us"].items()):
            if us is None:
                del row["us"][name]
                continue
            row["vs_floor"][name] = us / floor_us if floor_us > 0 else None
            if ref and name.startswith("jax/"):
                row["vs_jax"][name] = us / ref
        res["sizes"][B] = row
        log(f"B={B} K={K} floor={floor_us:.2f}us " + " ".join(f"{k}={v:.2f}us" for k, v in row["us"].items()))
    return res


def _torch_us(x: dict, dtype: str, reps: int, gpu: bool, unavailable: dict, log) -> float | None:
    """The torch Triton kernel's microseconds per call (a CUDA graph of GRAPH_CALLS calls; on the CPU one
    interpreted call's wall time), or None if it cannot run."""
    import torch

    import torch_impl

    dev = "cuda" if gpu else "cpu"
    t = {k: torch.from_numpy(v).to(dev) for k, v in x.items()}
    t["next_log_probs"] = t["next_log_probs"].to(getattr(torch, dtype))
    try:
        torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton", strict=True)
    except Exception as exc:
        unavailable["torch/triton"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
        log(f"unavailable torch/triton: {unavailable['torch/triton']}")
        return None
    if gpu:
        return _graph_us(lambda: torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton", strict=True),
                         reps)
    t0 = time.perf_counter()
    torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton", strict=True)
    return (time.perf_counter() - t0) * 1e6


def _markdown(res: dict, env: dict) -> str:
    names = sorted({n for row in res["sizes"].values() for n in row["us"]})
    lines = [f"# Kernel speed ({env['device']}, {env['date']})", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()), "",
             f"Copy bandwidth {res['bandwidth']['bytes_per_s'] / 1e9:.1f} GB/s ({res['bandwidth']['buffer_bytes']} "
             f"byte buffer). Microseconds per call; (x floor); [x jnp reference].", "",
             "| B | floor µs | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for B, row in res["sizes"].items():
        cells = []
        for n in names:
            us = row["us"].get(n)
            if us is None:
                cells.append("—")
                continue
            cell = f"{us:.2f} ({row['vs_floor'][n]:.2f}x)"
            if n in row["vs_jax"]:
                cell += f" [{row['vs_jax'][n]:.2f}x]"
            cells.append(cell)
        lines.append(f"| {B} | {row['floor_us']:.2f} | " + " | ".join(cells) + " |")
    if res["unavailable"]:
        lines += ["", "Not run:", ""] + [f"- {k}: {v}" for k, v in res["unavailable"].items()]
    return "\n".join(lines) + "\n"


def derive_auto_order(res: dict, source: str, metric: str = "us") -> dict[str, Any]:
    """auto's order per size band (shared_spec/dispatch.py's auto-order file) from a kernel-speed `res`.

    Per framework (JAX: its kernels against each other and against the jnp reference, all timed in the same jitted
    `lax.scan`; torch: its one kernel): at each measured B, the kernels that ran, fastest first by `metric` (ties: the
    dispatcher's fixed order), leaving out a kernel slower than the framework's reference where the reference was
    timed there (jax/jax; the torch reference is not timed) and a kernel not timed at that B. Consecutive Bs with the
    same order form one band; a band ends at its largest measured B (the last band holds every larger B, the first
    every smaller one).

    Args:
        res: the job's results.json content ({"sizes": {B: {metric: {"jax/pallas": us, ...}}}, "unavailable",
            "env": {"device", "date", ...}}).
        source: the results file's path as recorded in each band.
        metric: the per-call time to order by ("us": microseconds per call in the job's harness).

    Returns:
        {"format", "about", "frameworks": {framework: {"reference", "metric", "bands": [{"max_B", "order",
        "excluded": {kernel: why}, "us": {B: {kernel or reference: us}}, "source", "gpu", "date"}, ...]}}}.
    """
    from shared_spec.dispatch import AUTO_ORDER_FORMAT, KERNEL_BACKENDS, REFERENCE_BACKENDS

    gpu, date = res["env"]["device"], res["env"]["date"][:10]
    sizes = sorted((int(B), row) for B, row in res["sizes"].items())
    out: dict[str, Any] = {}
    for framework, kernels in KERNEL_BACKENDS.items():
        ref = REFERENCE_BACKENDS[framework]
        points = []
        for B, row in sizes:
            us = row.get(metric) or {}
            ref_us = us.get(f"{framework}/{ref}")
            timed = {k: float(us[f"{framework}/{k}"]) for k in kernels if us.get(f"{framework}/{k}") is not None}
            if not timed:
                continue
            order = sorted((k for k in timed if ref_us is None or timed[k] < ref_us),
                           key=lambda k: (timed[k], kernels.index(k)))
            excluded = {k: f"slower than the {ref} reference at B = {B} ({timed[k]:.1f} vs {ref_us:.1f} us)"
                        for k in timed if k not in order}
            for k in kernels:
                if k not in timed:
                    why = res.get("unavailable", {}).get(k if framework == "jax" else f"{framework}/{k}")
                    excluded[k] = "not timed" + (f" ({' '.join(why.split())[:160]})" if why else "")
            times = {k: round(v, 3) for k, v in timed.items()} | ({} if ref_us is None else {ref: round(ref_us, 3)})
            points.append((B, order, excluded, times))
        bands: list[dict[str, Any]] = []
        for B, order, excluded, timed in points:
            if bands and bands[-1]["order"] == order and set(bands[-1]["excluded"]) == set(excluded):
                band = bands[-1]
                band["max_B"] = B
                for k, why in excluded.items():
                    if why not in band["excluded"][k]:
                        band["excluded"][k] += f"; {why}"
            else:
                band = {"max_B": B, "order": order, "excluded": dict(excluded), "us": {}, "source": source,
                        "gpu": gpu, "date": date}
                bands.append(band)
            band["us"][str(B)] = timed
        if bands:
            bands[-1]["max_B"] = None
            out[framework] = {"reference": ref, "metric": metric, "bands": bands}
    if not out:
        raise ValueError(f"{source}: no kernel has a '{metric}' time at any B: not a kernel-speed results.json of "
                         f"this format (`metric` names a column it lacks)")
    return {"format": AUTO_ORDER_FORMAT,
            "about": "backend='auto''s order among validated kernels per size band of B, fastest first, from a "
                     "kernel-speed run (shared_spec/dispatch.py reads it; `python -m bench kernel-speed --out DIR "
                     "--record-order` writes it). Measured at the run's N, E and dtype; applied to every "
                     "configuration.",
            "frameworks": out}


def record_auto_order(results_path: str | os.PathLike, target: str | os.PathLike | None = None,
                      metric: str = "us") -> dict[str, Any]:
    """Derive auto's bands from the kernel-speed results.json at `results_path` (`derive_auto_order`) and write them
    to `target` (default: the packaged shared_spec/data/kernel_auto_order.json), atomically; returns them."""
    from shared_spec.dispatch import AUTO_ORDER_FILE, write_json_atomic

    path = os.path.abspath(results_path)
    with open(path) as f:
        res = json.load(f)
    cwd = os.getcwd()
    source = os.path.relpath(path, cwd) if path.startswith(cwd + os.sep) else path
    data = derive_auto_order(res, source, metric)
    write_json_atomic(target or AUTO_ORDER_FILE, data)
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench kernel-speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for results.json and results.md")
    p.add_argument("--tiny", action="store_true", help="the interpreted kernels at B = 8 on the CPU (times mean "
                                                       "nothing: an end-to-end check)")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated B values")
    p.add_argument("--N", type=int, default=101)
    p.add_argument("--E", type=int, default=2)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--backends", default=",".join(JAX_BACKENDS), help=f"JAX backends, a subset of {JAX_BACKENDS}")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--record-order", action="store_true", help="derive backend='auto''s order per size band from "
                   "this run's results.json and write it (shared_spec/data/kernel_auto_order.json; --order-to PATH)")
    p.add_argument("--order-only", action="store_true", help="run nothing: derive the order from the results.json "
                   "already in --out (implies --record-order)")
    p.add_argument("--order-to", default=None, metavar="PATH", help="the auto-order file --record-order writes")
    args = p.parse_args(argv)
    if args.order_only:
        return _record_order(os.path.join(args.out, "results.json"), args.order_to)
    backends = tuple(b for b in args.backends.split(",") if b)
    if not backends or any(b not in JAX_BACKENDS for b in backends):
        p.error(f"--backends must name backends of {JAX_BACKENDS}, got {args.backends!r}")
    try:
        sizes = tuple(int(v) for v in args.sizes.split(","))
    except ValueError:
        p.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    if any(B < 1 for B in sizes):
        p.error(f"--sizes must be >= 1, got {sizes}")
    if args.tiny:  # before the kernels' modules are imported: the interpreters read these at import
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("FLASHSAC_PALLAS_INTERPRET", "1")
        sizes, N, reps = (8,), 11, 1
    else:
        N, reps = args.N, args.reps
    from bench.kernel_validate import gpu_name, versions

    gpu = gpu_name()
    if not args.tiny and gpu is None:
        p.error("no CUDA GPU here: run with --tiny on the CPU")
    os.makedirs(args.out, exist_ok=True)

    def K_for(B: int) -> int:
        return 2 if args.tiny else (1000 if B <= 8192 else 200 if B <= 65536 else 20)

    res = run(sizes, N, args.E, args.dtype, backends, K_for, reps, gpu is not None)
    env = {"device": gpu or "cpu (interpreters)", "versions": versions(), "argv": sys.argv, "N": N, "E": args.E,
           "dtype": args.dtype, "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")}
    res["env"] = env
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    text = _markdown(res, env)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text)
    print(text)
    if args.record_order:
        return _record_order(os.path.join(args.out, "results.json"), args.order_to)
    return 0


def _record_order(results_path: str, target: str | None) -> int:
    """`record_auto_order` for the command line: prints each framework's bands."""
    from shared_spec.dispatch import AUTO_ORDER_FILE, band_label

    if not os.path.exists(results_path):
        print(f"no kernel-speed results at {results_path}: run `python -m bench kernel-speed --out DIR` first")
        return 2
    try:
        data = record_auto_order(results_path, target)
    except ValueError as exc:
        print(f"auto order not written: {exc}")
        return 2
    for framework, spec in data["frameworks"].items():
        low = None
        for band in spec["bands"]:
            print(f"{framework} {band_label(low, band['max_B']):>16}: {', '.join(band['order']) or 'the reference'}"
                  + "".join(f"; {k} left out: {why}" for k, why in band["excluded"].items()))
            low = band["max_B"]
    print(f"auto order written to {target or AUTO_ORDER_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
