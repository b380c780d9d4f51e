"""GPU re-check of the kernels' contracts and the eager host time of the torch op, in one process.

    python3 -m bench.gpu_checks --out <dir>

Sections (each guarded: one failure still reports the rest; exits 1 if any check fails):
- eager_host_time: host microseconds per eager call at B = 512 (E = 2, N = 101, fp32), next to what it is made of:
  `torch_impl.categorical_td_target` (auto, auto under torch.no_grad() as the agent calls it, and strict triton),
  the dispatch alone (the kernel replaced by a no-op), a bare launch of the same Triton kernel
  (`triton_kernels.launch`, its fast path and through JITFunction.run), the registered custom op
  `torch.ops.flashsac.categorical_td_target`, an empty custom op with the same arguments, and `torch.empty` of the
  output (a size tuple, and sizes as arguments); on CUDA also the launch's parts: the current-stream lookup three
  ways, the compiled kernel's launcher with prebuilt arguments (and the C launch behind it) and the fast launcher
  alone. "breakdown" lists them in order. Each timed call is bracketed by `perf_counter_ns` (the launch is
  asynchronous: this is host time); the device is synchronised between blocks of 500 calls, outside the clock (the
  launch queue never fills); "loop_mean" is the median over blocks of the block's wall time / calls. A cProfile of
  the op lists where its time goes.
- triton: bitwise determinism (100 repeats, plus row-permutation equivariance), torch.compile(fullgraph=True) in
  the default and reduce-overhead modes (bitwise equal to eager, no graph break), CUDA-graph capture and replay with
  new inputs copied in, torch.library.opcheck, autocast (`bench.gpu_triton`'s checks).
- pallas_determinism: 100 repeats of the Pallas kernel (`bench.gpu_pallas`'s check).
- nan_policy: both kernels on rows with NaN / inf inputs: invalid rows all-NaN exactly where the float64 spec has
  them, no NaN elsewhere, valid rows independent of the invalid rows' values.
- strict: strict=True runs the kernel where it can and raises BackendUnavailable where it cannot (N = 5000), in
  both frameworks; strict=False falls back to the reference with the same reason.
- pallas_vjp: the Pallas op's custom_vjp: gradients through it are zero (a stop-gradient target) under jit and
  jax.vjp, and the primal of jax.vjp is bitwise the forward output.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

GAMMA = 0.99
NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
HOST_TARGET_US = 20.0  # the eager host-time target at B = 512


def host_times(fn: Callable[[], object], calls: int, blocks: int, sync: Callable[[], None],
               loop_means: list[float] | None = None) -> list[float]:
    """Host microseconds of each of `blocks` x `calls` calls of `fn`, synchronising between blocks (unclocked).
    With `loop_means`, each block's wall time / calls (the per-call clock reads included) is appended to it."""
    out = []
    for _ in range(blocks):
        sync()
        start = time.perf_counter_ns()
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t0) / 1e3)
        if loop_means is not None:
            loop_means.append((time.perf_counter_ns() - start) / calls / 1e3)
    sync()
    return out


_EMPTY_OP: list = []


def _empty_custom_op() -> Callable[..., None]:
    """A torch custom op with the op's arguments that does nothing (registered once per process)."""
    import torch

    if not _EMPTY_OP:
        schema = ("(Tensor next_qs, Tensor next_log_probs, Tensor reward, Tensor terminated, "
                  "Tensor next_alpha_log_pi, float gamma, float min_v, float inv_delta) -> ()")
        _EMPTY_OP.append(torch.library.custom_op("flashsac_bench::empty", lambda *a: None, mutates_args=(),
                                                 schema=schema))
    return _EMPTY_OP[0]


def _launch_parts(args: tuple, mv: float, inv_delta: float) -> tuple[dict, dict]:
    """The pieces of one eager launch on CUDA, each a zero-argument callable: the three ways to look up the current
    stream (Triton's driver as JITFunction.run does it, torch's Stream object, torch's C call the fast launcher
    makes), the compiled kernel's launcher with prebuilt arguments (Triton's Python CudaLauncher, and the C launch
    behind it, which the fast launcher calls where the kernel needs no scratch), and the fast launcher alone (no
    `launch` around it). Returns (variants, checks): the checks say the stream handles agree and a prebuilt launch
    writes what a bare launch writes. CUDA tensors only (on CPU there is no stream, and the interpreter has no
    compiled launcher)."""
    import torch
    from triton.runtime.driver import driver

    from shared_spec.launch_config import kernel_config
    from triton_kernels import categorical_td_target_kernel, launch
    from triton_kernels.launch import fast_launcher, kernel_constexprs, kernel_grid

    variants: dict[str, Callable[[], object]] = {}
    raw_stream, current = torch._C._cuda_getCurrentRawStream, torch._C._cuda_getDevice
    variants["stream_triton_driver"] = lambda: driver.active.get_current_stream(driver.active.get_current_device())
    variants["stream_torch_current_stream"] = lambda: torch.cuda.current_stream().cuda_stream
    variants["stream_raw_c"] = lambda: raw_stream(current())
    handles = {name: fn() for name, fn in variants.items()}
    checks = {"stream_handles_agree": len(set(handles.values())) == 1}

    q, lp, r, d, s = args
    E, B, N = lp.shape
    cfg = kernel_config(B, N, False)
    constexprs = kernel_constexprs(categorical_td_target_kernel, cfg, E, N)  # E, N, BLOCK_N, BR, RPP, Q: launch's
    grid = kernel_grid(B, constexprs)
    out = torch.empty((B, N), dtype=torch.float32, device=lp.device)
    bound = (q, *q.stride(), lp, *lp.stride(), r, r.stride(0), d, d.stride(0), s, s.stride(0), out, out.stride(0), B,
             GAMMA, mv, inv_delta, *constexprs)
    # Every parameter positionally, the constexprs too (JITFunction.run binds them by the kernel's signature).
    compiled = categorical_td_target_kernel[grid](*bound, num_warps=cfg["num_warps"])
    run, function, packed, stream, g0 = compiled.run, compiled.function, compiled.packed_metadata, raw_stream(
        current()), grid[0]
    variants["compiled_run_prebuilt"] = lambda: run(g0, 1, 1, stream, function, packed, None, None, None, *bound)
    if getattr(run, "global_scratch_size", 1) == 0 and getattr(run, "profile_scratch_size", 1) == 0:
        c_launch, coop, pdl = run.launch, run.launch_cooperative_grid, run.launch_pdl
        variants["c_launch_prebuilt"] = lambda: c_launch(g0, 1, 1, stream, function, coop, pdl, None, None, packed,
                                                         None, None, None, *bound)
    ref = launch(categorical_td_target_kernel, *args, GAMMA, mv, inv_delta)
    fast = fast_launcher(categorical_td_target_kernel, *args)
    checks["fast_launcher_cached"] = fast is not None
    if fast is not None:
        variants["fast_launcher_direct"] = lambda: fast(q, lp, r, d, s, GAMMA, mv, inv_delta)
    for name in ("compiled_run_prebuilt", "c_launch_prebuilt"):
        if name in variants:
            out.fill_(0.5)
            variants[name]()
            checks[f"{name}_equals_bare_launch"] = bool(torch.equal(out.nan_to_num(-1.0), ref.nan_to_num(-1.0)))
    return variants, checks


NO_GRAD_VARIANTS = ("op_auto_no_grad",)  # timed under torch.no_grad(): no requires_grad reads
# The itemised host time of one eager call: (label, variant). Absent variants (CPU) are left out.
BREAKDOWN = (("a torch.empty((512, 101), device) of the output", "torch_empty_output"),
             ("a' torch.empty(512, 101, ...): sizes as arguments (what the fast launcher does)",
              "torch_empty_sizes_as_args"),
             ("b stream lookup: Triton's driver (JITFunction.run, the old fast path)", "stream_triton_driver"),
             ("b stream lookup: torch.cuda.current_stream().cuda_stream", "stream_torch_current_stream"),
             ("b stream lookup: torch._C._cuda_getCurrentRawStream(_cuda_getDevice()) (the fast launcher)",
              "stream_raw_c"),
             ("c compiled.run with prebuilt arguments (Triton's CudaLauncher)", "compiled_run_prebuilt"),
             ("c' compiled.run.launch with prebuilt arguments (the C launch alone)", "c_launch_prebuilt"),
             ("d launch(...): the fast path", "bare_launch"),
             ("d' the fast launcher alone (no launch() around it)", "fast_launcher_direct"),
             ("e the whole op (backend auto)", "op_auto"),
             ("e the whole op under torch.no_grad() (as the agent calls it)", "op_auto_no_grad"),
             ("e the whole op with the kernel replaced by a no-op (the dispatch alone)", "dispatch_only"),
             ("f an empty torch custom op with the op's arguments", "empty_custom_op"),
             ("g launch(..., fast=False): JITFunction.run", "bare_launch_jit_run"))


def eager_host_time(device: str = "cuda", B: int = 512, calls: int = 500, blocks: int = 6, warmup: int = 20) -> dict:
    """Host time per eager call of the op and of its parts (see the module docstring), itemised in "breakdown".
    Variants are interleaved block by block, so they see the same machine state."""
    import torch

    import torch_impl
    from shared_spec import make_inputs
    from torch_impl import dispatch
    from torch_impl.reference import support_constants
    from triton_kernels import categorical_td_target_kernel, launch

    x = make_inputs(B, 101, 2, seed=0)
    t = {k: torch.from_numpy(v).to(device) for k, v in x.items()}
    args = tuple(t[k] for k in NAMES)
    mv, inv_delta = support_constants(101, -5.0, 5.0)

    empty_op = _empty_custom_op()
    real = dispatch.IMPLEMENTATIONS["triton"]
    noop = lambda *a: None  # one object: the op's eager plan for it is reused (a new lambda would be a new entry)

    def dispatch_only() -> object:
        dispatch.IMPLEMENTATIONS["triton"] = noop
        try:
            return torch_impl.categorical_td_target(**t, gamma=GAMMA)
        finally:
            dispatch.IMPLEMENTATIONS["triton"] = real

    variants: dict[str, Callable[[], object]] = {
        "op_auto": lambda: torch_impl.categorical_td_target(**t, gamma=GAMMA),
        "op_auto_no_grad": lambda: torch_impl.categorical_td_target(**t, gamma=GAMMA),  # timed under no_grad
        "op_triton_strict": lambda: torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton",
                                                                     strict=True),
        "bare_launch": lambda: launch(categorical_td_target_kernel, *args, GAMMA, mv, inv_delta),
        "bare_launch_jit_run": lambda: launch(categorical_td_target_kernel, *args, GAMMA, mv, inv_delta, fast=False),
        "registered_custom_op": lambda: torch.ops.flashsac.categorical_td_target(*args, GAMMA, mv, inv_delta),
        "empty_custom_op": lambda: empty_op(*args, GAMMA, mv, inv_delta),
        "torch_empty_output": lambda: torch.empty((B, 101), dtype=torch.float32, device=device),
        "torch_empty_sizes_as_args": lambda: torch.empty(B, 101, dtype=torch.float32, device=device),
        "dispatch_only": dispatch_only,
    }
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    ref = variants["bare_launch"]()
    for name in ("op_auto", "op_triton_strict", "registered_custom_op"):
        got = variants[name]()
        if not torch.equal(torch.nan_to_num(got, nan=-1.0), torch.nan_to_num(ref, nan=-1.0)):
            raise AssertionError(f"{name} differs from the bare launch")
    parts, checks = _launch_parts(args, mv, inv_delta) if device == "cuda" else ({}, {})
    variants.update(parts)
    for fn in variants.values():  # warm-up: compilation, caches
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    loops: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(blocks):
        for name, fn in variants.items():
            with torch.no_grad() if name in NO_GRAD_VARIANTS else contextlib.nullcontext():
                samples[name] += host_times(fn, calls, 1, sync, loops[name])
    res: dict = {"B": B, "device": device, "calls_per_variant": calls * blocks, "target_us": HOST_TARGET_US,
                 "us": {name: {"median": statistics.median(v), "p10": float(np.percentile(v, 10)),
                               "p90": float(np.percentile(v, 90)), "mean": statistics.fmean(v),
                               "loop_mean": statistics.median(loops[name])}
                        for name, v in samples.items()}}
    res["op_auto_meets_target"] = res["us"]["op_auto"]["median"] <= HOST_TARGET_US
    res["launch_parts"] = checks
    us = res["us"]
    res["breakdown"] = [{"part": label, "variant": name, "median_us": us[name]["median"],
                         "loop_mean_us": us[name]["loop_mean"]} for label, name in BREAKDOWN if name in us]
    derived = {"op_minus_fast_path_launch": ("op_auto", "bare_launch"),
               "op_minus_fast_launcher": ("op_auto", "fast_launcher_direct"),
               "fast_launcher_minus_c_launch": ("fast_launcher_direct", "c_launch_prebuilt"),
               "cuda_launcher_python": ("compiled_run_prebuilt", "c_launch_prebuilt"),
               "op_minus_empty_custom_op": ("op_auto", "empty_custom_op")}
    res["derived_us"] = {k: us[a]["median"] - us[b]["median"] for k, (a, b) in derived.items() if a in us and b in us}
    # Where the op's host time goes (cProfile adds its own overhead per Python call; the shares are what matter).
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        variants["op_auto"]()
    prof.disable()
    sync()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(20)
    res["cprofile_op_auto"] = buf.getvalue()[:6000]
    return res


def fast_launch(device: str = "cuda", cases: list[dict] | None = None) -> dict:
    """The eager fast path of `triton_kernels.launch` (compiled launcher called directly) gives the same bits as
    JITFunction.run on launch signatures that differ in what Triton specialises on: B (1, odd, multiple of 16),
    16-byte aligned and misaligned log-prob rows, chunk views, transposed log-probs, E, N, 16-bit log-probs; and so
    does the op (`torch_impl.categorical_td_target`, whose repeat calls go through its eager plan)."""
    import torch

    import torch_impl
    from shared_spec import make_inputs
    from torch_impl.reference import support_constants
    from triton_kernels import categorical_td_target_kernel, launch

    def views(B, N=101, E=2, kind="mixed"):
        x = {k: torch.from_numpy(v).to(device) for k, v in make_inputs(B + 1, N, E, seed=B + N + E, kind=kind).items()}
        yield "contiguous", {k: (v[:, :B].contiguous() if v.dim() > 1 else v[:B].contiguous()) for k, v in x.items()}
        # rows 1..B: every log-prob row starts N * 4 bytes further (misaligned for odd N)
        yield "offset_rows", {k: (v[:, 1:] if v.dim() > 1 else v[1:]) for k, v in x.items()}
        yield "transposed_lp", dict({k: (v[:, :B] if v.dim() > 1 else v[:B]) for k, v in x.items()},
                                    next_log_probs=x["next_log_probs"][:, :B].transpose(1, 2).contiguous()
                                    .transpose(1, 2))
        yield "bf16", dict({k: (v[:, :B] if v.dim() > 1 else v[:B]) for k, v in x.items()},
                           next_log_probs=x["next_log_probs"][:, :B].to(torch.bfloat16))

    out, ok = {}, True
    cases = cases or [dict(B=1), dict(B=17), dict(B=512), dict(B=4096), dict(B=64, N=51), dict(B=64, N=256),
                      dict(B=64, E=1), dict(B=64, E=5)]
    for case in cases:
        for name, t in views(**case):
            args = tuple(t[k] for k in NAMES)
            mv, inv_delta = support_constants(args[1].shape[2], -5.0, 5.0)
            slow = launch(categorical_td_target_kernel, *args, GAMMA, mv, inv_delta, fast=False)
            fast = [launch(categorical_td_target_kernel, *args, GAMMA, mv, inv_delta) for _ in range(3)]
            # the op's eager plans: its first call launches through `launch`, the next ones call the fast launcher
            fast += [torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton", strict=True)
                     for _ in range(3)]
            same = all(torch.equal(torch.nan_to_num(f, nan=-1.0), torch.nan_to_num(slow, nan=-1.0)) for f in fast)
            out[f"{json.dumps(case)} {name}"] = same
            ok &= same
    out["all_bitwise_equal"] = ok
    return out


def nan_policy(device: str = "cuda", B: int = 2048) -> dict:
    """Both kernels on nonfinite and mixed inputs against the float64 spec's NaN rows."""
    import jax.numpy as jnp
    import torch

    import jax_impl
    import torch_impl
    from shared_spec import make_inputs
    from shared_spec import reference as R

    out = {}
    for kind in ("nonfinite", "mixed"):
        x = make_inputs(B, 101, 2, seed=5, kind=kind)
        want_bad = np.isnan(R.categorical_td_target(**x, gamma=GAMMA)).any(axis=1)
        clean = {k: np.array(v) for k, v in x.items()}
        for k in ("reward", "terminated", "next_alpha_log_pi"):
            clean[k][want_bad] = 0.0
        clean["next_qs"][:, want_bad] = 0.0
        clean["next_log_probs"][:, want_bad] = -np.log(101.0)

        def tri(inp):
            t = {k: torch.from_numpy(v).to(device) for k, v in inp.items()}
            return torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton", strict=True).cpu().numpy()

        def pal(inp):
            j = {k: jnp.asarray(v) for k, v in inp.items()}
            return np.asarray(jax_impl.categorical_td_target(**j, gamma=GAMMA, backend="pallas", strict=True))

        for name, fn in (("triton", tri), ("pallas", pal)):
            got = fn(x)
            out[f"{name}_{kind}"] = {
                "invalid_rows": int(want_bad.sum()),
                "invalid_rows_all_nan": bool(np.isnan(got[want_bad]).all()),
                "no_nan_in_valid_rows": bool(not np.isnan(got[~want_bad]).any()),
                "valid_rows_independent_of_invalid_ones": bool(np.array_equal(fn(clean)[~want_bad],
                                                                              got[~want_bad])),
            }
    return out


def strict_mode(device: str = "cuda") -> dict:
    """strict=True: the kernel where it can run, BackendUnavailable where it cannot; strict=False: the fallback."""
    import jax.numpy as jnp
    import torch

    import jax_impl
    import torch_impl
    from shared_spec import make_inputs

    out = {}
    ok = make_inputs(64, 101, 2, seed=1)
    big = make_inputs(4, 5000, 2, seed=1)  # N = 5000 > MAX_N: the kernels' gates refuse it
    for fw, mod, kernel, conv in (("torch", torch_impl, "triton", lambda v: torch.from_numpy(v).to(device)),
                                  ("jax", jax_impl, "pallas", jnp.asarray)):
        res = {}
        for backend in (kernel, "auto"):
            d = mod.resolve_backend(backend, True, num_bins=101, num_critics=2,
                                    **({"device": device} if fw == "torch" else {}))
            res[f"strict_{backend}_runs_kernel"] = d.backend == kernel
            mod.categorical_td_target(**{k: conv(v) for k, v in ok.items()}, gamma=GAMMA, backend=backend,
                                      strict=True)
            try:
                mod.categorical_td_target(**{k: conv(v) for k, v in big.items()}, gamma=GAMMA, backend=backend,
                                          strict=True)
                res[f"strict_{backend}_N5000_raises"] = False
            except mod.BackendUnavailable as exc:
                res[f"strict_{backend}_N5000_raises"] = "N = 5000" in str(exc)
        got = mod.categorical_td_target(**{k: conv(v) for k, v in big.items()}, gamma=GAMMA, backend=kernel)
        res["non_strict_N5000_falls_back"] = bool(np.isfinite(np.asarray(
            got.cpu() if fw == "torch" else got)).all())
        out[fw] = res
    return out


def pallas_vjp(B: int = 512) -> dict:
    """The Pallas op's custom_vjp contract on the GPU."""
    import jax
    import jax.numpy as jnp

    import jax_impl
    from shared_spec import make_inputs

    x = {k: jnp.asarray(v) for k, v in make_inputs(B, 101, 2, seed=3, kind="random").items()}
    fwd = jax_impl.categorical_td_target(**x, gamma=GAMMA, backend="pallas", strict=True)
    w = jnp.linspace(-1.0, 1.0, 101, dtype=jnp.float32)

    def loss(lp, r):  # a loss of the target alone: its gradient must be zero (stop-gradient target)
        t = jax_impl.categorical_td_target(x["next_qs"], lp, r, x["terminated"], x["next_alpha_log_pi"],
                                           gamma=GAMMA, backend="pallas", strict=True)
        return jnp.sum(t * w)

    g_lp, g_r = jax.jit(jax.grad(loss, argnums=(0, 1)))(x["next_log_probs"], x["reward"])
    primal, pullback = jax.vjp(lambda lp: jax_impl.categorical_td_target(
        x["next_qs"], lp, x["reward"], x["terminated"], x["next_alpha_log_pi"], gamma=GAMMA, backend="pallas",
        strict=True), x["next_log_probs"])
    (ct,) = pullback(jnp.ones_like(primal))
    same = bool(np.array_equal(np.asarray(primal).view(np.int32), np.asarray(fwd).view(np.int32)))
    return {"grad_log_probs_zero_under_jit": bool(np.all(np.asarray(g_lp) == 0)),
            "grad_reward_zero_under_jit": bool(np.all(np.asarray(g_r) == 0)),
            "vjp_cotangent_zero": bool(np.all(np.asarray(ct) == 0)),
            "vjp_primal_bitwise_forward": same}


def failures(res: dict) -> list[str]:
    """Every check that did not pass: False leaves, FAILED strings, a failed section."""
    bad = []

    def walk(path: str, v: object) -> None:
        if isinstance(v, dict):
            for k, w in v.items():
                if k in ("us", "breakdown", "derived_us", "cprofile_op_auto", "section_seconds", "env"):
                    continue
                walk(f"{path}.{k}" if path else k, w)
        elif v is False or (isinstance(v, str) and v.startswith("FAILED")):
            bad.append(path)

    walk("", res)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sections", default="all", help="comma-separated subset of the sections")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    from bench.common import environment, run_sections

    res: dict = {"env": environment()}

    def triton_checks() -> dict:
        from bench import gpu_triton

        return {"determinism": gpu_triton.determinism(), **gpu_triton.compile_checks()}

    def pallas_determinism() -> dict:
        from bench import gpu_pallas

        return gpu_pallas.determinism(((2048, "nonfinite"), (65536, "mixed"), (1048576, "random")), 100)

    sections = [("eager_host_time", eager_host_time), ("fast_launch", fast_launch), ("triton", triton_checks),
                ("pallas_determinism", pallas_determinism), ("nan_policy", nan_policy), ("strict", strict_mode),
                ("pallas_vjp", pallas_vjp)]
    chosen = [(n, f) for n, f in sections if a.sections == "all" or n in a.sections.split(",")]

    def write(r: dict) -> None:
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(r, f, indent=1, default=str)

    run_sections(chosen, res, write)
    res["failures"] = failures({k: v for k, v in res.items() if k != "env"})
    write(res)
    eager = res.get("eager_host_time")
    if isinstance(eager, dict):
        for name, v in eager["us"].items():
            print(f"host us {name:<28} median {v['median']:7.2f}  p10 {v['p10']:7.2f}  p90 {v['p90']:7.2f}  "
                  f"loop mean {v['loop_mean']:7.2f}")
        print("breakdown (host us per call: median of per-call clocks | median over blocks of block time / calls):")
        for row in eager["breakdown"]:
            print(f"  {row['median_us']:7.2f} | {row['loop_mean_us']:7.2f}  {row['part']}")
        for name, v in eager["derived_us"].items():
            print(f"  {v:7.2f}  {name}")
        print(eager["cprofile_op_auto"][:3000])
    print("FAILED: " + ", ".join(res["failures"]) if res["failures"] else "OK: every check passed", flush=True)
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
