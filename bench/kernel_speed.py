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

__all__ = ["JAX_BACKENDS", "floor_bytes", "main", "run"]

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
    args = p.parse_args(argv)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
