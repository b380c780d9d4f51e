"""Speed of every kernel backend against the jnp reference and the memory floor, in-program and like for like.

Two figures per implementation and B, microseconds per call:

- `us`, in-program: each JAX backend (`jax` reference, `triton`, `pallas`, `mosaic`) inside one jitted program, a
  `lax.scan` of K dependent calls (gamma_{i+1} = gamma_i + 1e-30 * sum(out_i), an fp32 no-op XLA cannot remove, so
  no call is hoisted or merged and every output is consumed), timed by wall clock around the whole program; per call
  = that time / K (median of --reps runs). A scan step includes the (B, N) sum of the output and the loop's own cost:
  `scan_step_us` is the same scan with a trivial (B, 1) body, `scan_sum_us` one whose body sums a (B, N) fp32 input
  (what the sum of the kernel's output costs at large B). The torch Triton kernel: 20 calls captured in one CUDA
  graph, median replay time / 20.
- `device_us`, like for like: the kernel's own GPU time per launch, the same way in both frameworks: the CUPTI kernel
  records of each framework's profiler (torch.profiler; jax.profiler's trace, whose GPU kernel events are read from
  its Chrome-trace file) around `calls` back-to-back launches of the op alone, each on its own copy of the inputs in
  rotation (each input set is reused only after `ROTATE_BYTES` of other sets, so L2 never holds a launch's inputs);
  the median duration of the launches' kernel (name containing `categorical_td_target`; for the jnp reference, which
  has several fusions, the sum of all kernels of a call: `device_program_us`, reported for every implementation, is
  all kernels of one call, e.g. Mosaic's pad and slice copies). On the CPU (--tiny) there are no GPU kernel events
  and the device figures are None.

The floor of a call is the bytes it must move (the selected critic's log-probs read once in their dtype, the (B, N)
fp32 output written once, the critic means and the three per-row scalars) over the copy bandwidth: a 1 GiB fp32
device-to-device copy on the default stream, bytes read + written, timed with CUDA events around 10 back-to-back
copies (median of --reps), as `b.copy_(a)` (cudaMemcpyAsync) and as an elementwise kernel (`torch.add(a, 0, out=b)`);
the faster is the floor. The same memcpy captured 20 times in one CUDA graph is reported beside them
(`bandwidth.measured.graph_memcpy`): graph memcpy nodes ran at about 2,434 GB/s on an H100, below the stream copies.

Each implementation runs in its own subprocess (`--isolate`, the default on a GPU: the two profilers both use CUPTI,
and one backend's crash or missing runtime does not stop the others; a backend that cannot run is listed with its
reason): torch first (floor, timings, the reference outputs of the bitwise check), then each JAX backend. With
--bitwise, each JAX kernel's output is compared bit for bit (NaN positions as one pattern) with the torch kernel's
on the timed sizes (the timed inputs, and adversarial "mixed" rows up to B = 65,536) and a few adversarial shapes
(B = 1, odd B, N = 2 and 33, E = 1 and 3, bf16, the row-offset form against a strided torch view); the torch
kernel's outputs are checked against the float64 spec on their first rows. Checks past --budget-s are skipped and
listed, and a part still running 45 s later is stopped (what it measured by then is kept).

results.json (`res`), per (implementation, B): `res["sizes"][str(B)]` holds "K" (scan length), "floor_us", "us"
{name: in-program µs}, "device_us" {name: kernel µs}, "device_program_us" {name: all kernels of a call, µs},
"vs_jax" {JAX name: us / jnp's us}, "vs_floor" {name: us / floor}, "device_vs_torch" {name: device_us / the torch
kernel's}, "device_vs_floor", "device_kernels" {name: {kernel name: launches per call}}, "command_buffers" {JAX
name: occurrences of "command_buffer" in the compiled scan program's HLO: > 0 when XLA's HLO pass made command
buffers (an XLA that converts thunks after compilation shows 0 either way)}, "step_device_us" / "step_program_us" /
"step_kernels" {JAX name: the kernel's / all kernels' device µs and the kernels of one scan step, from a profile of
one run of the scan (XLA runs command buffers as their plain thunks while a profiler is active: the same kernels)},
"scan_step_us", "scan_sum_us". Names are
"torch/triton" and "jax/<backend>". Also "bandwidth" {"bytes_per_s" (the floor's), "buffer_bytes", "method",
"measured" {method: bytes/s}}, "bitwise" {JAX name: {"equal", "compared", "skipped", "rows"}}, "unavailable" {name:
reason}, "checks", "part_seconds", "env".

GPU (jax-triton is not needed: the JAX "triton" backend calls jaxlib's Triton kernel-call handler itself):

    python -m bench kernel-speed --out bench/results/kernel-speed --sizes 512,2048,65536,1048576 --bitwise

On the CPU, `--tiny` runs the interpreted kernels at B = 8 (K = 2) to check the job end to end; its times mean
nothing.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

__all__ = ["JAX_BACKENDS", "PARTS", "bitwise_cases", "derive_auto_order", "floor_bytes", "jax_kernel_events",
           "main", "record_auto_order", "run", "summarize_kernels", "torch_kernel_events"]

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX initialises: torch shares the GPU

JAX_BACKENDS = ("triton", "mosaic", "pallas", "jax")  # the order the parts run in (after torch) by default
PARTS = ("torch", *JAX_BACKENDS)  # one subprocess each, torch first
SIZES = (512, 2048, 65536, 262_144, 1_048_576)
GAMMA = 0.99
GRAPH_CALLS = 20
KERNEL_PATTERN = "categorical_td_target"  # in every kernel's device name (torch, Pallas, Triton call, Mosaic)
ROTATE_BYTES = 256 << 20  # bytes of other input sets between two uses of one (H100 / H200 L2: 50 MB)
PROFILE_CALLS = (50, 400)  # launches per profile: at least, at most
COPY_BYTES = 1 << 30
COPY_LAUNCHES = 10
SPEC_ROWS = 2048
SUBNORMAL_SCALE = 2.0**-125  # on a CPU the interpreted kernels may differ below this (XLA:CPU flushes subnormals)
INPUT_NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")


def floor_bytes(B: int, N: int, E: int, lp_itemsize: int) -> int:
    """Bytes one call must move: the selected critic's (B, N) log-probs, the (B, N) fp32 output, the (E, B) critic
    means and the reward, terminated and alpha log pi rows (fp32)."""
    return B * N * lp_itemsize + B * N * 4 + E * B * 4 + 3 * B * 4


# ------------------------------------------------------------------------------------------------ trace parsing


def load_trace(path: str) -> list[dict]:
    """The events of a Chrome-trace JSON file (gzipped or not)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def jax_kernel_events(events: list[dict]) -> list[tuple[str, float]]:
    """(name, µs) of the GPU kernels in a jax.profiler trace: complete events of a process named /device:GPU:<i> on a
    thread named "Stream ..." (the CUPTI kernel records; the same process's other lines, such as "XLA Ops", repeat
    them). Without those names (another exporter): pid < 100 and tid < 100, the convention of XLA's exporter."""
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    out = []
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        pid, tid = e.get("pid"), e.get("tid")
        if pid in procs:
            if not str(procs[pid]).startswith("/device:GPU"):
                continue
            if (pid, tid) in threads and not str(threads[(pid, tid)]).startswith("Stream"):
                continue
        elif not (isinstance(pid, int) and pid < 100 and isinstance(tid, int) and tid < 100):
            continue
        if str(e.get("name", "")).lower().startswith(("memcpy", "memset")):
            continue
        out.append((str(e["name"]), float(e["dur"])))
    return out


def torch_kernel_events(events: list[dict]) -> list[tuple[str, float]]:
    """(name, µs) of the GPU kernels in a torch.profiler Chrome trace (category "kernel": the CUPTI records)."""
    return [(str(e["name"]), float(e["dur"])) for e in events if e.get("cat") == "kernel" and "dur" in e]


def summarize_kernels(kernels: list[tuple[str, float]], calls: int, pattern: str = KERNEL_PATTERN) -> dict:
    """Device time per call from the kernels of `calls` launches of one op: "device_us" (the median duration of the
    kernels whose name contains `pattern`, one per call; the per-call sum if several; all kernels of a call if none
    matches), "program_us" (all kernels / calls), "kernels" {name: launches per call}; None values without kernels."""
    if not kernels:
        return {"device_us": None, "program_us": None, "kernels": {}, "note": "no GPU kernel events in the trace"}
    names: dict[str, int] = {}
    for name, _ in kernels:
        names[name] = names.get(name, 0) + 1
    program = sum(d for _, d in kernels) / calls
    matched = [d for name, d in kernels if pattern in name]
    if len(matched) == calls:
        device = statistics.median(matched)
    elif matched:
        device = sum(matched) / calls
    else:
        device = program
    return {"device_us": device, "program_us": program, "kernels": {k: v / calls for k, v in sorted(names.items())}}


# ------------------------------------------------------------------------------------------------- memory floor


def copy_floor(gpu: bool, reps: int) -> dict[str, Any]:
    """The copy bandwidth of the floor (bytes read + written per second; see the module docstring); on the CPU a
    64 MiB numpy copy (a placeholder for the --tiny run)."""
    if not gpu:
        n = 1 << 24
        a, b = np.ones(n, np.float32), np.empty(n, np.float32)
        times = []
        for _ in range(max(reps, 3)):
            t0 = time.perf_counter()
            np.copyto(b, a)
            times.append(time.perf_counter() - t0)
        bw = 2 * 4 * n / statistics.median(times)
        return {"bytes_per_s": bw, "buffer_bytes": 4 * n, "method": "host numpy copy (no device: not a floor)",
                "measured": {"host_copy": bw}}
    import torch

    n = COPY_BYTES // 4

    def measure() -> dict[str, float]:
        a = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
        b = torch.empty_like(a)
        copies = {"memcpy": lambda: b.copy_(a), "kernel": lambda: torch.add(a, 0.0, out=b)}
        measured = {}
        for name, fn in copies.items():
            fn()
            times = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(COPY_LAUNCHES):
                    fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3 / COPY_LAUNCHES)
            measured[name] = 2 * 4 * n / statistics.median(times)
        measured["graph_memcpy"] = 2 * 4 * n / (_graph_us(copies["memcpy"], reps) * 1e-6)
        return measured

    measured = measure()
    torch.cuda.empty_cache()
    best = max(("memcpy", "kernel"), key=measured.get)
    return {"bytes_per_s": measured[best], "buffer_bytes": 4 * n, "measured": measured,
            "method": f"1 GiB fp32 device-to-device copy ({best}), bytes read + written, CUDA events around "
                      f"{COPY_LAUNCHES} back-to-back copies, median of {reps}"}


# ------------------------------------------------------------------------------------------------- in-program


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


def _compiled_scan(op, K: int, args: tuple) -> tuple[Any, int]:
    """(the compiled scan program of `op`, how often "command_buffer" occurs in its optimised HLO: > 0 when XLA put
    some of its thunks into command buffers, CUDA graphs)."""
    compiled = _scan_program(op, K).lower(*args).compile()
    try:
        text = compiled.as_text() or ""
    except Exception:  # some backends do not print their executables
        text = ""
    return compiled, text.count("command_buffer")


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


# ------------------------------------------------------------------------------------------ inputs and checks


def _profile_plan(B: int, N: int, E: int, itemsize: int) -> tuple[int, int]:
    """(input sets, launches) of a device-time profile: enough sets that ROTATE_BYTES of other sets pass between
    two uses of one, at least PROFILE_CALLS[0] launches."""
    set_bytes = E * B * N * itemsize + B * N * 4 + (E + 3) * B * 4
    sets = max(2, math.ceil(ROTATE_BYTES / set_bytes) + 1)
    calls = min(max(PROFILE_CALLS[0], sets), PROFILE_CALLS[1])
    return min(sets, calls), calls


TIMED_SEED = 5
CASE_SEED = 11
MIXED_MAX_B = 65536  # adversarial "mixed" rows at the timed sizes up to this B (make_inputs' mixed kind is slow)


def bitwise_cases(sizes: tuple[int, ...], N: int, E: int, dtype: str, tiny: bool) -> list[dict]:
    """The bitwise check's cases, timed shapes first: {"B", "N", "E", "dtype", "kind", "seed", "offset"} (offset: the
    row-offset form, a strided view in torch). At every timed size the timed inputs themselves, and up to
    MIXED_MAX_B rows adversarial "mixed" rows."""
    base = dict(N=N, E=E, dtype=dtype, offset=False)
    if tiny:  # the interpreters: the timed shape's mixed rows and its row-offset form
        return [dict(base, B=sizes[0], kind="mixed", seed=CASE_SEED),
                dict(base, B=sizes[0], kind="nonfinite", seed=CASE_SEED, offset=True)]
    out = [dict(base, B=B, kind="random", seed=TIMED_SEED) for B in sizes]
    out += [dict(base, B=B, kind="mixed", seed=CASE_SEED) for B in sizes if B <= MIXED_MAX_B]
    extra = [dict(B=1, N=101, E=2, kind="nonfinite"), dict(B=7, N=2, E=3, kind="mixed"),
             dict(B=5, N=33, E=1, dtype="bfloat16", kind="nonfinite"),
             dict(B=300, N=101, E=2, kind="mixed", offset=True)]
    return out + [dict(base, seed=CASE_SEED, **c) for c in extra]


def _case_name(c: dict) -> str:
    return (f"B={c['B']} N={c['N']} E={c['E']} {c['dtype']} {c['kind']}" + (" offset" if c["offset"] else ""))


def _inputs(cfg: dict, B: int, N: int, E: int, kind: str, seed: int) -> dict[str, np.ndarray]:
    """`shared_spec.make_inputs(B, N, E, seed=seed, kind=kind)`, made once per job: the first part to ask saves it in
    cfg["refs"] (shared by the parts' processes), the others load it (at 1M rows, making it takes tens of seconds)."""
    path = os.path.join(cfg["refs"], f"inputs_{B}_{N}_{E}_{kind}_{seed}.npz")
    if os.path.exists(path):
        with np.load(path) as z:
            return {k: z[k] for k in INPUT_NAMES}
    from shared_spec import make_inputs

    x = make_inputs(B, N, E, seed=seed, kind=kind)
    np.savez(path + ".tmp.npz", **x)
    os.replace(path + ".tmp.npz", path)
    return x


def _bits(a: np.ndarray) -> np.ndarray:
    """The output's bits with every NaN as one pattern (NaN rows compared by position)."""
    return np.where(np.isnan(a), np.int32(-1), a.view(np.int32))


def _spec_ok(x: dict, out: np.ndarray, dtype: str) -> bool:
    """The first SPEC_ROWS rows against the float64 spec (NaN rows in place, the rest within atol_vs_float64)."""
    import ml_dtypes

    from shared_spec import reference as R
    from shared_spec.tolerances import atol_vs_float64

    m = min(out.shape[0], SPEC_ROWS)
    xs = {k: (v[:, :m] if k in ("next_qs", "next_log_probs") else v[:m]) for k, v in x.items()}
    if dtype != "float32":
        low = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
        xs["next_log_probs"] = xs["next_log_probs"].astype(low).astype(np.float32)
    ref = R.categorical_td_target(**xs, gamma=GAMMA)
    ok = ~np.isnan(ref)
    same_nan = bool(np.array_equal(np.isnan(ref), np.isnan(out[:m])))
    return same_nan and (not ok.any() or float(np.abs(out[:m][ok] - ref[ok]).max()) <= atol_vs_float64(out.shape[1]))


def _fail(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"


# ------------------------------------------------------------------------------------------------------ torch


def run_torch_part(cfg: dict, log=print) -> dict[str, Any]:
    """The torch Triton kernel: the floor, the in-program (CUDA graph) and device (profiler) times per B, and, with
    cfg["bitwise"], its outputs of the bitwise cases saved in cfg["refs"] (with their float64 spec check)."""
    import torch

    import torch_impl

    gpu = torch.cuda.is_available() and not cfg["tiny"]
    dev = "cuda" if gpu else "cpu"
    part: dict[str, Any] = {"sizes": {}, "unavailable": {}, "env": {"device": torch.cuda.get_device_name(0) if gpu
                                                                    else None}}
    part["bandwidth"] = copy_floor(gpu, cfg["reps"])
    lp_dtype = getattr(torch, cfg["dtype"])

    def tensors(x: dict) -> dict:
        t = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in x.items()}
        t["next_log_probs"] = t["next_log_probs"].to(lp_dtype)
        return t

    def call(t: dict):
        return torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton", strict=True)

    N, E = cfg["N"], cfg["E"]
    for B in cfg["sizes"]:
        t = tensors(_inputs(cfg, B, N, E, "random", TIMED_SEED))
        try:
            call(t)
        except Exception as exc:
            part["unavailable"]["torch/triton"] = _fail(exc)
            log(f"unavailable torch/triton: {part['unavailable']['torch/triton']}")
            return part
        row: dict[str, Any] = {}
        if gpu:
            row["us"] = _graph_us(lambda t=t: call(t), cfg["reps"])
            sets, calls = _profile_plan(B, N, E, torch.tensor([], dtype=lp_dtype).element_size())
            ts = [t] + [{k: v.clone() for k, v in t.items()} for _ in range(sets - 1)]
            try:
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for i in range(calls):
                        call(ts[i % sets])
                    torch.cuda.synchronize()
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, "trace.json")
                    prof.export_chrome_trace(path)
                    row["device"] = summarize_kernels(torch_kernel_events(load_trace(path)), calls)
            except Exception as exc:  # the profiler, not the kernel: keep the in-program figure
                row["device"] = summarize_kernels([], 1) | {"note": f"profile failed: {_fail(exc)}"}
            del ts
        else:
            t0 = time.perf_counter()
            call(t)
            row["us"] = (time.perf_counter() - t0) * 1e6
            row["device"] = summarize_kernels([], 1) | {"note": "interpreted on the CPU: no GPU kernels"}
        part["sizes"][B] = row
        cfg["save"](part)
        log(f"torch/triton B={B}: {row['us']:.2f} us in-program, device {row['device']['device_us']}")
    if cfg["bitwise"]:
        part["reference_spec_ok"] = {}
        for c in bitwise_cases(cfg["sizes"], N, E, cfg["dtype"], cfg["tiny"]):
            if time.time() > cfg["deadline"]:
                break
            x = _inputs(cfg, c["B"], c["N"], c["E"], c["kind"], c["seed"])
            t = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in x.items()}
            if c["offset"]:  # upstream's x.chunk(2, dim=1)[1]: views into (E, 2B[, N]) with a decoy first half
                for k in ("next_qs", "next_log_probs"):
                    t[k] = torch.cat([torch.flip(t[k], (1,)), t[k]], dim=1).chunk(2, dim=1)[1]
            t["next_log_probs"] = t["next_log_probs"].to(getattr(torch, c["dtype"]))
            out = call(t).cpu().numpy()
            np.save(os.path.join(cfg["refs"], _case_name(c).replace(" ", "_") + ".npy"), out)
            part["reference_spec_ok"][_case_name(c)] = _spec_ok(x, out, c["dtype"])
            cfg["save"](part)
    return part


# -------------------------------------------------------------------------------------------------------- JAX


def _triton_proto_check(args: tuple) -> str:
    """Whether triton_kernels.xla_call's serialised kernel call equals jaxlib's own (`TritonKernelCall.to_proto`)
    for the first timed shape: "equal", "DIFFERENT", or why it was not compared."""
    from jax._src.lib import gpu_triton

    from jax_impl import triton_backend as tb
    from triton_kernels import xla_call

    lib = getattr(gpu_triton, "_cuda_triton", None)
    if lib is None:
        return "not compared: no CUDA plugin"
    from shared_spec.support import CategoricalSupport

    E, B, N = args[1].shape
    p = tb.launch_params(E, B, N, 0, str(args[1].dtype))
    sup = CategoricalSupport(N, -5.0, 5.0)
    mv, inv = np.float32(sup.min_v), np.float32(sup.inv_bin_width)
    k = xla_call.compile_kernel(tb.compute_capability(), p["lp_dtype"], p["num_warps"], p["scalars"], p["constexprs"])
    params = xla_call.kernel_parameters(p["scalars"], float(mv), float(inv))
    theirs = [lib.create_array_parameter(0, v) if kind == "array" else lib.create_scalar_parameter(v, kind)
              for kind, v in params]
    kernel = lib.TritonKernel(k.name, k.num_warps, 1, k.shared, k.ptx, "", k.cc)
    jaxlib_bytes = lib.TritonKernelCall(kernel, p["grid"][0], 1, 1, theirs).to_proto(tb.CALL_NAME, b"")
    mine = xla_call.serialize_kernel_call(k, p["grid"], params, tb.CALL_NAME)
    return "equal" if bytes(jaxlib_bytes) == mine else "DIFFERENT"


def _jax_profile(launch, runs: int, per: int | None = None) -> dict:
    """`summarize_kernels` of `runs` calls of launch(i) under jax.profiler (per call, or per `per` units of the
    runs together: the steps of a scan); a failed profile is a note, not an error (the timings stand)."""
    import jax

    try:
        with tempfile.TemporaryDirectory() as tmp:
            with jax.profiler.trace(tmp):
                out = None
                for i in range(runs):
                    out = launch(i)
                jax.block_until_ready(out)
            del out
            traces = glob.glob(os.path.join(tmp, "**", "*.trace.json.gz"), recursive=True)
            events = jax_kernel_events(load_trace(traces[0])) if traces else []
        return summarize_kernels(events, per or runs)
    except Exception as exc:  # the profiler, not the kernel
        return summarize_kernels([], 1) | {"note": f"profile failed: {_fail(exc)}"}


def run_jax_part(backend: str, cfg: dict, log=print) -> dict[str, Any]:
    """One JAX backend: in-program and device times per B (for "jax" also the scan baselines), and with
    cfg["bitwise"] its outputs on the bitwise cases against the torch kernel's saved ones."""
    import jax
    import jax.numpy as jnp

    import jax_impl

    name = f"jax/{backend}"
    gpu = jax.default_backend() == "gpu"
    part: dict[str, Any] = {"sizes": {}, "unavailable": {}, "checks": {}}
    N, E = cfg["N"], cfg["E"]
    itemsize = jnp.dtype(cfg["dtype"]).itemsize

    def op(q, lp, r, d, s, g, row_offset=None):
        return jax_impl.categorical_td_target(q, lp, r, d, s, gamma=g, backend=backend, strict=True,
                                              row_offset=row_offset)

    single = jax.jit(op, static_argnames=("row_offset",))
    for B in cfg["sizes"]:
        K = cfg["K_for"](B)
        x = _inputs(cfg, B, N, E, "random", TIMED_SEED)
        args = [jnp.asarray(x[k]) for k in INPUT_NAMES]
        args[1] = args[1].astype(jnp.dtype(cfg["dtype"]))
        gamma = jnp.float32(GAMMA)
        row: dict[str, Any] = {"K": K}
        try:
            compiled, row["command_buffers"] = _compiled_scan(op, K, (*args, gamma))
            row["us"] = _wall(compiled, (*args, gamma), cfg["reps"]) / K * 1e6
        except Exception as exc:  # BackendUnavailable, or the kernel's own failure
            part["unavailable"][name] = _fail(exc)
            log(f"unavailable {name}: {part['unavailable'][name]}")
            return part
        if backend == "jax":  # the scan's own cost per step: a trivial body, and one summing a (B, N) input
            empty, _ = _compiled_scan(lambda q, lp, r, d, s, g: r[:, None] * g, K, (*args, gamma))
            row["scan_step_us"] = _wall(empty, (*args, gamma), cfg["reps"]) / K * 1e6
            summed, _ = _compiled_scan(lambda q, lp, r, d, s, g: lp[0].astype(jnp.float32) * g, K, (*args, gamma))
            row["scan_sum_us"] = _wall(summed, (*args, gamma), cfg["reps"]) / K * 1e6
        sets, calls = _profile_plan(B, N, E, itemsize) if gpu else (1, 1)  # CPU: no device time to measure
        copies = [args] + [[jnp.array(a, copy=True) for a in args] for _ in range(sets - 1)]
        if gpu:
            jax.block_until_ready(single(*args, gamma))  # compiled before the profile
        row["device"] = _jax_profile(lambda i, c=copies, n=sets, g=gamma: single(*c[i % n], g), calls)
        del copies
        # The in-program step's own kernels (one run of the scan): the kernel's device time inside the program,
        # and what else a step runs (the output's sum, the loop's bookkeeping).
        row["step"] = _jax_profile(lambda i, f=compiled, a=(*args, gamma): f(*a), 1, per=K)
        part["sizes"][B] = row
        cfg["save"](part)
        log(f"{name} B={B}: {row['us']:.2f} us in-program, device {row['device']['device_us']}, command buffers "
            f"{row['command_buffers']}")
    if backend == "triton" and gpu:
        try:
            part["checks"]["triton_proto_equals_jaxlib"] = _triton_proto_check(args)
        except Exception as exc:
            part["checks"]["triton_proto_equals_jaxlib"] = f"not compared: {_fail(exc)}"
    if cfg["bitwise"] and backend != "jax":
        part["bitwise"] = _bitwise(single, cfg, log)
    return part


def _bitwise(single, cfg: dict, log) -> dict[str, Any]:
    """The JAX kernel `single` against the torch kernel's saved outputs, case by case, until cfg["deadline"]. On
    the CPU (interpreters) differences below 2**-125 do not count (XLA:CPU flushes subnormal numbers in the Pallas
    interpreters, numpy does not); "differing_bits" counts every differing element."""
    import jax
    import jax.numpy as jnp

    cpu = jax.default_backend() == "cpu"
    rows, skipped = [], []
    for c in bitwise_cases(cfg["sizes"], cfg["N"], cfg["E"], cfg["dtype"], cfg["tiny"]):
        ref_path = os.path.join(cfg["refs"], _case_name(c).replace(" ", "_") + ".npy")
        if time.time() > cfg["deadline"] or not os.path.exists(ref_path):
            skipped.append(_case_name(c))
            continue
        x = _inputs(cfg, c["B"], c["N"], c["E"], c["kind"], c["seed"])
        a = [jnp.asarray(x[k]) for k in INPUT_NAMES]
        kw = {}
        if c["offset"]:  # the whole (E, 2B[, N]) arrays, their second half read in place
            for i, k in ((0, "next_qs"), (1, "next_log_probs")):
                a[i] = jnp.asarray(np.ascontiguousarray(np.concatenate([np.flip(x[k], 1), x[k]], axis=1)))
            kw = {"row_offset": c["B"]}
        a[1] = a[1].astype(jnp.dtype(c["dtype"]))
        try:
            out = np.asarray(single(*a, jnp.float32(GAMMA), **kw))
        except Exception as exc:
            rows.append({"case": _case_name(c), "equal": False, "error": _fail(exc)})
            continue
        ref = np.load(ref_path)
        if out.shape != ref.shape:
            rows.append({"case": _case_name(c), "equal": False, "error": f"shape {out.shape} != {ref.shape}"})
            continue
        differ = _bits(out) != _bits(ref)
        bits = int(differ.sum())
        if cpu:
            with np.errstate(invalid="ignore"):
                differ &= ~(np.abs(out - ref) < SUBNORMAL_SCALE)
        diff = int(differ.sum())
        rows.append({"case": _case_name(c), "equal": diff == 0, "differing": diff, "differing_bits": bits})
        if diff:
            log(f"MISMATCH {_case_name(c)}: {diff} elements differ")
    return {"equal": sum(r["equal"] for r in rows), "compared": len(rows), "skipped": skipped, "rows": rows}


# ------------------------------------------------------------------------------------------------ orchestration


def _run_part(part: str, cfg: dict, log) -> dict:
    return run_torch_part(cfg, log) if part == "torch" else run_jax_part(part, cfg, log)


def _spawn(part: str, argv: list[str], cfg: dict, log) -> dict:
    """`part` in a subprocess (`--worker`): its JSON result (what it saved, if it stopped early, with the reason)."""
    name = "torch/triton" if part == "torch" else f"jax/{part}"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "part.json")
        cmd = [sys.executable, "-m", "bench", "kernel-speed", *argv, "--worker", part, "--worker-out", out,
               "--refs", cfg["refs"], "--deadline", str(cfg["deadline"])]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True,
                                  timeout=max(20.0, cfg["hard_deadline"] - time.time()))
            stdout, why = proc.stdout, (None if proc.returncode == 0 else
                                        f"worker exited {proc.returncode}: {' '.join(proc.stderr.split())[-600:]}")
        except subprocess.TimeoutExpired as exc:
            stdout, why = exc.stdout or "", f"worker timed out after {exc.timeout:.0f} s"
        for line in (stdout if isinstance(stdout, str) else stdout.decode(errors="replace")).splitlines():
            log(f"  [{part}] {line}")
        res = {"sizes": {}, "unavailable": {}}
        if os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
        if why is not None:
            res.setdefault("unavailable", {}).setdefault(name, why)
        return res


def run(cfg: dict, parts: tuple[str, ...], argv: list[str], isolate: bool, log=print) -> dict[str, Any]:
    """Every part (torch first), merged: see the module docstring for the result's keys."""
    res: dict[str, Any] = {"sizes": {}, "unavailable": {}, "bitwise": {}, "checks": {}, "part_seconds": {}}
    results = {}
    for part in parts:
        t0 = time.time()
        results[part] = _spawn(part, argv, cfg, log) if isolate else _run_part(part, cfg, log)
        res["part_seconds"][part] = round(time.time() - t0, 1)
        res["unavailable"].update(results[part].get("unavailable", {}))
        res["checks"].update(results[part].get("checks", {}))
        if "bitwise" in results[part]:
            res["bitwise"][f"jax/{part}"] = results[part]["bitwise"]
    torch_part = results.get("torch", {})
    res["bandwidth"] = torch_part.get("bandwidth")
    res["reference_spec_ok"] = torch_part.get("reference_spec_ok", {})
    res["device"] = torch_part.get("env", {}).get("device")
    itemsize = np.dtype(np.float32 if cfg["dtype"] == "float32" else np.float16).itemsize
    for B in cfg["sizes"]:
        floor_us = (floor_bytes(B, cfg["N"], cfg["E"], itemsize) / res["bandwidth"]["bytes_per_s"] * 1e6
                    if res["bandwidth"] else None)
        row: dict[str, Any] = {"K": cfg["K_for"](B), "floor_us": floor_us, "us": {}, "device_us": {},
                               "device_program_us": {}, "device_kernels": {}, "command_buffers": {},
                               "step_device_us": {}, "step_program_us": {}, "step_kernels": {}}
        for part, pres in results.items():
            got = pres.get("sizes", {}).get(str(B)) or pres.get("sizes", {}).get(B)
            if not got:
                continue
            name = "torch/triton" if part == "torch" else f"jax/{part}"
            row["us"][name] = got["us"]
            row["device_us"][name] = got["device"]["device_us"]
            row["device_program_us"][name] = got["device"]["program_us"]
            row["device_kernels"][name] = got["device"]["kernels"]
            if "command_buffers" in got:
                row["command_buffers"][name] = got["command_buffers"]
            if "step" in got:  # the in-program step's kernels (device µs of the kernel, of all kernels, names)
                row["step_device_us"][name] = got["step"]["device_us"]
                row["step_program_us"][name] = got["step"]["program_us"]
                row["step_kernels"][name] = got["step"]["kernels"]
            for k in ("scan_step_us", "scan_sum_us"):
                if k in got:
                    row[k] = got[k]
        ref, torch_dev = row["us"].get("jax/jax"), row["device_us"].get("torch/triton")
        row["vs_floor"] = {n: us / floor_us for n, us in row["us"].items() if floor_us}
        row["vs_jax"] = {n: us / ref for n, us in row["us"].items() if ref and n.startswith("jax/")}
        row["device_vs_torch"] = {n: us / torch_dev for n, us in row["device_us"].items() if us and torch_dev}
        row["device_vs_floor"] = {n: us / floor_us for n, us in row["device_us"].items() if us and floor_us}
        res["sizes"][B] = row
    return res


def _fmt(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _markdown(res: dict, env: dict) -> str:
    names = [n for n in ("jax/jax", "jax/pallas", "jax/triton", "jax/mosaic", "torch/triton")
             if any(n in row["us"] for row in res["sizes"].values())]
    bw = res["bandwidth"] or {}
    measured = ", ".join(f"{k} {v / 1e9:.0f} GB/s" for k, v in bw.get("measured", {}).items())
    lines = [f"# Kernel speed ({env['device']}, {env['date']})", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()), "",
             f"Floor bandwidth {bw.get('bytes_per_s', 0) / 1e9:.1f} GB/s: {bw.get('method', '—')} ({measured}).", "",
             "## Kernel device time (like for like: each framework's profiler, CUPTI kernel records)", "",
             "Microseconds per launch of the kernel alone, inputs rotated out of L2; (x the torch kernel) "
             "[x floor].", "", "| B | floor µs | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for B, row in res["sizes"].items():
        cells = []
        for n in names:
            us = row["device_us"].get(n)
            cells.append("—" if us is None else f"{us:.2f} ({_fmt(row['device_vs_torch'].get(n))}x) "
                                                f"[{_fmt(row['device_vs_floor'].get(n))}x]")
        lines.append(f"| {B} | {_fmt(row['floor_us'])} | " + " | ".join(cells) + " |")
    lines += ["", "## In-program (JAX: a jitted lax.scan step, its (B, N) output sum included; torch: CUDA-graph "
              "replay)", "", "Microseconds per call; [x jnp reference]; (kernel: its device time inside the step, from "
              "a profile of one run of the scan); scan step: trivial body / (B, N) sum only; "
              "cb: \"command_buffer\" in the compiled scan program's HLO (> 0: XLA's HLO pass made command "
              "buffers).", "",
              "| B | " + " | ".join(names) + " | scan step µs | cb |", "|---" * (len(names) + 3) + "|"]
    for B, row in res["sizes"].items():
        cells = []
        for n in names:
            us = row["us"].get(n)
            step = row["step_device_us"].get(n)
            cells.append("—" if us is None else f"{us:.2f}" + (f" [{row['vs_jax'][n]:.2f}x]" if n in row["vs_jax"]
                                                                else "") + (f" (kernel {step:.2f})" if step else ""))
        cb = " ".join(f"{n.split('/')[1]}:{v}" for n, v in row["command_buffers"].items())
        lines.append(f"| {B} | " + " | ".join(cells) + f" | {_fmt(row.get('scan_step_us'))} / "
                     f"{_fmt(row.get('scan_sum_us'))} | {cb} |")
    if res["bitwise"]:
        lines += ["", "## Bitwise against the torch Triton kernel", ""]
        for n, b in res["bitwise"].items():
            bad = [r["case"] for r in b["rows"] if not r["equal"]]
            lines.append(f"- {n}: {b['equal']}/{b['compared']} cases bitwise equal" + (f"; DIFFERENT: {bad}" if bad
                                                                                      else "")
                         + (f"; skipped (time budget): {len(b['skipped'])}" if b["skipped"] else ""))
        spec = res.get("reference_spec_ok", {})
        lines.append(f"- torch/triton within the float64 spec on its first {SPEC_ROWS} rows: "
                     f"{sum(spec.values())}/{len(spec)} cases")
    if res["checks"]:
        lines += ["", "Checks: " + ", ".join(f"{k}: {v}" for k, v in res["checks"].items())]
    if res["unavailable"]:
        lines += ["", "Not run:", ""] + [f"- {k}: {v}" for k, v in res["unavailable"].items()]
    lines += ["", "Seconds per part: " + ", ".join(f"{k} {v}" for k, v in res["part_seconds"].items())]
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
    argv = list(sys.argv[1:] if argv is None else argv)
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
    p.add_argument("--bitwise", action="store_true", help="compare each JAX kernel's bits with the torch kernel's")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="one subprocess per implementation (default: on a GPU, not with --tiny)")
    p.add_argument("--budget-s", type=float, default=180.0,
                   help="start no bitwise case after this many seconds; stop a part still running 45 s later")
    p.add_argument("--worker", choices=PARTS, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    p.add_argument("--refs", help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
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

    def K_for(B: int) -> int:
        return 2 if args.tiny else (1000 if B <= 8192 else 200 if B <= 65536 else 20)

    start = time.time()
    cfg = {"sizes": sizes, "N": N, "E": args.E, "dtype": args.dtype, "reps": reps, "K_for": K_for,
           "tiny": args.tiny, "bitwise": args.bitwise, "refs": args.refs,
           "deadline": args.deadline or start + args.budget_s, "hard_deadline": start + args.budget_s + 45}
    if args.worker:  # one part, in this process; its result as JSON, saved after every size and check

        def save(part: dict) -> None:
            with open(args.worker_out + ".tmp", "w") as f:
                json.dump(part, f, default=str)
            os.replace(args.worker_out + ".tmp", args.worker_out)

        cfg["save"] = save
        save(_run_part(args.worker, cfg, log=lambda s: print(s, flush=True)))
        return 0
    from bench.kernel_validate import versions

    if not args.tiny:
        import torch

        if not torch.cuda.is_available():
            p.error("no CUDA GPU here: run with --tiny on the CPU")
    isolate = (not args.tiny) if args.isolate is None else args.isolate
    cfg["save"] = lambda part: None
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as refs:
        cfg["refs"] = refs
        res = run(cfg, ("torch", *backends), argv, isolate)
    device = res.pop("device") or ("cpu (interpreters)" if args.tiny else "GPU (the torch part reported no name)")
    env = {"device": device, "versions": versions(), "argv": sys.argv, "N": N,
           "E": args.E, "dtype": args.dtype,
           "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
           "seconds": round(time.time() - start, 1)}
    res["env"] = env
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    text = _markdown(res, env)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text)
    print(text)
    bad = [n for n, b in res["bitwise"].items() if b["equal"] != b["compared"]]
    if args.record_order:
        rc = _record_order(os.path.join(args.out, "results.json"), args.order_to)
        return 1 if bad else rc
    return 1 if bad else 0


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
