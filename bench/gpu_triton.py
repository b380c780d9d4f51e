"""H200 validation and benchmark of the fused Triton kernel: one call, JSON + markdown + PNG under --out.

    python -m bench.gpu_triton --out $OUT/triton

Sections (each guarded, so one failure still reports the rest): environment, correctness matrix vs the float64 spec
and the torch fp32 path, bitwise determinism (100 repeats), torch.compile(fullgraph=True) graph breaks, CUDA-graph
replay vs eager, torch.library.opcheck, AMP, and timing of upstream's path (eager and compiled) vs ours, direct and
under CUDA-graph replay, with the measured copy bandwidth and the bytes-moved floor.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

import torch_impl
from bench import upstream
from bench.common import (
    F64_ROWS,
    capture_cuda_graph,
    environment,
    first_rows,
    json_block,
    repeated_inputs,
    run_sections,
    speedup_plot,
    write_results,
)
from shared_spec import reference as R
from shared_spec.tolerances import max_abs_error, max_mass_error
from triton_kernels import categorical_td_target_kernel, launch

GAMMA = 0.99
KINDS = ("random", "strided", "clamp_high", "clamp_low", "terminated", "peaked", "nonfinite", "mixed")


def env_info() -> dict:
    """``bench.common.environment`` with the GPU as torch sees it (name, compute capability)."""
    info = environment()
    info.update(gpu=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)))
    return info


def tiled_inputs(B: int, kind: str, seed: int) -> dict:
    """make_inputs for B rows; above 32768 rows a 32768-row block is repeated (generation in numpy is slow)."""
    return repeated_inputs(B, kind, seed=seed, block=32768)


def gpu_inputs(B: int, kind: str, seed: int = 0) -> tuple[dict, dict]:
    """(numpy float32 inputs, torch CUDA inputs); kind 'strided' builds upstream's chunk views of (E, 2B[, N])."""
    if kind == "strided":
        big = tiled_inputs(2 * B, "mixed", seed)
        t = {k: torch.from_numpy(v).cuda() for k, v in big.items()}
        t["next_qs"] = t["next_qs"].chunk(2, dim=1)[1]
        t["next_log_probs"] = t["next_log_probs"].chunk(2, dim=1)[1]
        for k in ("reward", "terminated", "next_alpha_log_pi"):
            t[k] = t[k][B:]
        x = {k: v.cpu().numpy() for k, v in t.items()}
        return x, t
    x = tiled_inputs(B, kind, seed)
    return x, {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in x.items()}


def ours(t: dict, backend: str = "triton") -> torch.Tensor:
    return torch_impl.categorical_td_target(**t, gamma=GAMMA, backend=backend, strict=True)


def correctness(sizes) -> list[dict]:
    rows = []
    for B in sizes:
        for kind in KINDS:
            x, t = gpu_inputs(B, kind, seed=B)
            got = ours(t).cpu().numpy()
            ref32 = ours(t, "torch").cpu().numpy()
            n = min(B, F64_ROWS)  # the float64 oracle on a prefix for the largest sizes
            xs = first_rows(x, n)
            want = R.categorical_td_target(**xs, gamma=GAMMA)
            _, lp = R.select_min_q(xs["next_qs"].astype(np.float64), xs["next_log_probs"].astype(np.float64))
            rows.append({"B": B, "kind": kind, "rows_checked_vs_float64": n,
                         "max_abs_vs_float64": max_abs_error(got[:n], want),
                         "max_abs_vs_torch_fp32": max_abs_error(got, ref32),
                         "bitwise_equal_torch_fp32": bool(np.array_equal(got, ref32, equal_nan=True)),
                         "max_mass_error": max_mass_error(got[:n], lp),
                         "min_value": float(np.nanmin(got)) if not np.isnan(got).all() else None,
                         "nan_rows": int(np.isnan(got).any(axis=1).sum())})
            print(f"  correctness B={B:>8} {kind:<11} vs f64 {rows[-1]['max_abs_vs_float64']:.2e} "
                  f"vs torch {rows[-1]['max_abs_vs_torch_fp32']:.2e} mass {rows[-1]['max_mass_error']:.2e}",
                  flush=True)
    return rows


def determinism() -> dict:
    out = {}
    for B, kind in ((65536, "mixed"), (2048, "nonfinite"), (1048576, "random")):
        _, t = gpu_inputs(B, kind, seed=1)
        first = ours(t)
        same = all(torch.equal(torch.nan_to_num(first, nan=-1.0), torch.nan_to_num(ours(t), nan=-1.0))
                   for _ in range(100))
        perm = torch.randperm(B, device="cuda")
        tp = dict(t, next_qs=t["next_qs"][:, perm], next_log_probs=t["next_log_probs"][:, perm],
                  reward=t["reward"][perm], terminated=t["terminated"][perm],
                  next_alpha_log_pi=t["next_alpha_log_pi"][perm])
        perm_equal = torch.equal(torch.nan_to_num(ours(tp), nan=-1.0), torch.nan_to_num(first[perm], nan=-1.0))
        out[f"{kind}_B{B}"] = {"bitwise_100_repeats": bool(same), "row_permutation_equivariant": bool(perm_equal)}
    return out


def compile_checks() -> dict:
    import torch._dynamo

    res = {}
    _, t = gpu_inputs(2048, "strided", seed=2)
    eager_out = ours(t)

    def fn(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi):
        return torch_impl.categorical_td_target(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi,
                                                gamma=GAMMA, backend="triton", strict=True)

    torch._dynamo.reset()
    explain = torch._dynamo.explain(fn)(**t)
    res["graph_break_count"] = explain.graph_break_count
    res["graph_count"] = explain.graph_count
    for mode in ("default", "reduce-overhead"):
        torch._dynamo.reset()
        try:
            cf = torch.compile(fn, fullgraph=True, mode=mode)
            for _ in range(3):
                torch.compiler.cudagraph_mark_step_begin()
                out = cf(**t).clone()
            res[f"fullgraph_{mode}_bitwise_eq_eager"] = bool(torch.equal(torch.nan_to_num(out, nan=-1.0),
                                                                          torch.nan_to_num(eager_out, nan=-1.0)))
        except Exception as exc:  # noqa: BLE001  record and go on
            res[f"fullgraph_{mode}"] = f"FAILED: {type(exc).__name__}: {exc}"[:500]
    # CUDA graph: capture with static inputs, then copy NEW data in and replay.
    static = {k: v.clone() for k, v in gpu_inputs(4096, "mixed", seed=3)[1].items()}
    g, static_out = capture_cuda_graph(lambda: ours(static))
    ok = True
    for seed in (4, 5, 6):
        fresh = gpu_inputs(4096, "mixed", seed=seed)[1]
        for k in static:
            static[k].copy_(fresh[k])
        g.replay()
        torch.cuda.synchronize()
        ok &= torch.equal(torch.nan_to_num(static_out, nan=-1.0), torch.nan_to_num(ours(fresh), nan=-1.0))
    res["cuda_graph_replay_bitwise_eq_eager"] = bool(ok)
    # opcheck on contiguous, strided (chunk view) and permuted layouts.
    op = torch.ops.flashsac.categorical_td_target.default
    for name, (_, tt) in (("contiguous", gpu_inputs(64, "mixed")), ("strided", gpu_inputs(64, "strided"))):
        args = (tt["next_qs"], tt["next_log_probs"], tt["reward"], tt["terminated"], tt["next_alpha_log_pi"],
                GAMMA, -5.0, 10.0)
        try:
            torch.library.opcheck(op, args)
            res[f"opcheck_{name}"] = "passed"
        except Exception as exc:  # noqa: BLE001
            res[f"opcheck_{name}"] = f"FAILED: {type(exc).__name__}: {exc}"[:500]
    # AMP: inside autocast(float16) the target path stays fp32 and equals the fp32 path.
    with torch.autocast("cuda", dtype=torch.float16):
        amp_out = ours(t)
    res["amp_output_dtype"] = str(amp_out.dtype)
    res["amp_bitwise_eq_fp32"] = bool(torch.equal(torch.nan_to_num(amp_out, nan=-1.0),
                                                  torch.nan_to_num(eager_out, nan=-1.0)))
    # fp16/bf16 log-probs: the 2x rule vs the same-dtype torch reference.
    for dt in (torch.bfloat16, torch.float16):
        tl_ = dict(t, next_log_probs=t["next_log_probs"].to(dt))
        k_err = (ours(tl_) - eager_out).abs().nan_to_num().max().item()
        r_err = (ours(tl_, "torch") - ours(t, "torch")).abs().nan_to_num().max().item()
        res[f"{dt}_kernel_err_vs_fp32"] = k_err
        res[f"{dt}_torch_ref_err_vs_fp32"] = r_err
        res[f"{dt}_within_2x_rule"] = bool(k_err <= 2 * r_err + 3e-5)
    return res


def copy_bandwidth() -> float:
    x = torch.empty(2 * 1024**3 // 4, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    from triton.testing import do_bench

    ms = do_bench(lambda: y.copy_(x), warmup=5, rep=50)
    return 2 * x.numel() * 4 / (ms * 1e-3)  # bytes read + written per second


def timing(sizes, bandwidth: float) -> list[dict]:
    from triton.testing import do_bench, do_bench_cudagraph

    up_eager = upstream.eager()
    up_comp = upstream.compiled()
    rows = []
    for B in sizes:
        _, t = gpu_inputs(B, "strided", seed=7)  # upstream's chunk views
        args = (t["next_qs"], t["next_log_probs"], t["reward"], t["terminated"], t["next_alpha_log_pi"])
        variants = {
            "upstream_eager": lambda a=args: upstream.upstream_target(*up_eager, *a, GAMMA),
            "upstream_compiled": lambda a=args: upstream.upstream_target(*up_comp, *a, GAMMA),
            "ours_triton": lambda t=t: ours(t),
            "ours_registered_op": lambda a=args: torch.ops.flashsac.categorical_td_target(*a, GAMMA, -5.0, 10.0),
            "ours_kernel_launch_only": lambda a=args: launch(categorical_td_target_kernel, *a, GAMMA, -5.0, 10.0),
            "ours_torch_reference": lambda t=t: ours(t, "torch"),
        }
        row = {"B": B, "bytes_floor_us": 4 * (2 + 101 + 3 + 101) * B / bandwidth * 1e6}
        for name, fn in variants.items():
            for _ in range(3):
                fn()  # warm-up and compile, outside the timing
            torch.cuda.synchronize()
            row[f"{name}_direct_us"] = do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
            try:
                row[f"{name}_graph_us"] = do_bench_cudagraph(fn, rep=200, return_mode="median") * 1e3
            except Exception as exc:  # noqa: BLE001  e.g. upstream_eager's linspace under capture
                row[f"{name}_graph_us"] = None
                row[f"{name}_graph_error"] = f"{type(exc).__name__}: {exc}"[:300]
        base = row["upstream_compiled_direct_us"]
        row["speedup_direct_vs_upstream_compiled"] = base / row["ours_triton_direct_us"]
        if row.get("upstream_compiled_graph_us") and row.get("ours_triton_graph_us"):
            row["speedup_graph_vs_upstream_compiled_graph"] = row["upstream_compiled_graph_us"] / row[
                "ours_triton_graph_us"]
        row["ours_graph_over_floor"] = (row.get("ours_triton_graph_us") or row["ours_triton_direct_us"]) / row[
            "bytes_floor_us"]
        rows.append(row)
        print(f"  timing B={B:>8} upstream compiled {base:8.1f} us, ours {row['ours_triton_direct_us']:8.1f} us "
              f"({row['speedup_direct_vs_upstream_compiled']:.1f}x); graph {row.get('ours_triton_graph_us')}",
              flush=True)
    return rows


def config_sweep(sizes) -> list[dict]:
    """Each (BR, num_warps) alone, one tile per program: correct vs the torch path, then timed under CUDA-graph
    replay (tiles per program: `bench.gpu_bitwise --sweep BR:num_warps:RPP`)."""
    from triton.testing import do_bench_cudagraph

    rows = []
    for B in sizes:
        _, t = gpu_inputs(B, "strided", seed=8)
        args = (t["next_qs"], t["next_log_probs"], t["reward"], t["terminated"], t["next_alpha_log_pi"])
        ref = ours(t, "torch")
        for br, nw in ((1, 1), (2, 1), (1, 2), (2, 2), (4, 4), (8, 4)):
            cfg = {"BR": br, "num_warps": nw, "RPP": 1}
            out = launch(categorical_td_target_kernel, *args, GAMMA, -5.0, 10.0, config=cfg)
            err = (out - ref).abs().nan_to_num(nan=0.0).max().item()
            nan_ok = torch.equal(out.isnan(), ref.isnan())
            us = do_bench_cudagraph(lambda a=args, c=cfg: launch(categorical_td_target_kernel, *a, GAMMA, -5.0, 10.0,
                                                                 config=c), rep=100) * 1e3
            rows.append({"B": B, "BR": br, "num_warps": nw, "max_abs_vs_torch": err, "nan_rows_match": nan_ok,
                         "graph_us": us})
            print(f"  sweep B={B} BR={br} warps={nw}: {us:.1f} us, err {err:.1e}", flush=True)
    return rows


def write_report(out: str, res: dict) -> None:
    """results.json, results.md and (with timings) speedup.png under ``out``."""
    lines = [f"# Triton kernel on {res['env'].get('gpu')} ({res['env'].get('date_utc')})", "",
             f"torch {res['env'].get('torch')}, triton {res['env'].get('triton')}, python {res['env'].get('python')}; "
             f"command `{res['env'].get('command')}`", ""]
    if "timing" in res and isinstance(res["timing"], list):
        lines += [f"Copy bandwidth {res.get('copy_bandwidth_TBps', 0):.2f} TB/s (read + write).", "",
                  "| B | upstream eager | upstream compiled | ours (triton) | speedup | upstream compiled, graph | "
                  "ours, graph | speedup (graph) | bytes floor | ours / floor |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["timing"]:
            lines.append(
                f"| {r['B']} | {r['upstream_eager_direct_us']:.1f} | {r['upstream_compiled_direct_us']:.1f} | "
                f"{r['ours_triton_direct_us']:.1f} | {r['speedup_direct_vs_upstream_compiled']:.2f}x | "
                f"{r.get('upstream_compiled_graph_us') or float('nan'):.1f} | "
                f"{r.get('ours_triton_graph_us') or 0:.1f} | "
                f"{r.get('speedup_graph_vs_upstream_compiled_graph', float('nan')):.2f}x | {r['bytes_floor_us']:.1f} | "
                f"{r['ours_graph_over_floor']:.2f} |")
        lines.append("")
    if "correctness" in res and isinstance(res["correctness"], list):
        lines += ["| B | kind | max abs vs float64 | max abs vs torch fp32 | mass error | NaN rows |",
                  "|---|---|---|---|---|---|"]
        for r in res["correctness"]:
            lines.append(f"| {r['B']} | {r['kind']} | {r['max_abs_vs_float64']:.2e} | "
                         f"{r['max_abs_vs_torch_fp32']:.2e} | {r['max_mass_error']:.2e} | {r['nan_rows']} |")
        lines.append("")
    if isinstance(res.get("config_sweep"), list):
        lines += ["| B | BR | num_warps | graph us | max abs vs torch |", "|---|---|---|---|---|"]
        lines += [f"| {r['B']} | {r['BR']} | {r['num_warps']} | {r['graph_us']:.1f} | {r['max_abs_vs_torch']:.1e} |"
                  for r in res["config_sweep"]]
        lines.append("")
    for key in ("determinism", "compile"):
        if key in res:
            lines += json_block(key, res[key])
    write_results(out, res, "\n".join(lines))
    if isinstance(res.get("timing"), list):
        Bs = [r["B"] for r in res["timing"]]
        speedup_plot(os.path.join(out, "speedup.png"), {
            "direct call": (Bs, [r["speedup_direct_vs_upstream_compiled"] for r in res["timing"]]),
            "CUDA-graph replay": (Bs, [r.get("speedup_graph_vs_upstream_compiled_graph", float("nan"))
                                       for r in res["timing"]])}, f"fused Triton target, {res['env'].get('gpu')}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="small sizes only (smoke)")
    ap.add_argument("--sections", default="all", help="comma-separated subset of the sections to run")
    a = ap.parse_args()
    res: dict = {"env": env_info()}
    t0 = time.time()
    sizes = (1, 127, 512, 2048) if a.quick else (1, 127, 512, 2048, 65536, 1048576)
    bench_sizes = (512, 2048) if a.quick else (512, 2048, 8192, 65536, 1048576)
    sections = [("correctness", lambda: correctness(sizes)), ("determinism", determinism),
                ("compile", compile_checks), ("copy_bandwidth_TBps", lambda: copy_bandwidth() / 1e12),
                ("timing", lambda: timing(bench_sizes, res.get("copy_bandwidth_TBps", 4.3) * 1e12)),
                ("config_sweep", lambda: config_sweep((65536, 1048576) if not a.quick else (2048,)))]
    chosen = [(n, f) for n, f in sections
              if a.sections == "all" or n in a.sections.split(",") or n == "copy_bandwidth_TBps"]
    run_sections(chosen, res, lambda r: write_report(a.out, r))
    res["total_seconds"] = round(time.time() - t0, 1)
    write_report(a.out, res)
    print(open(os.path.join(a.out, "results.md")).read())


if __name__ == "__main__":
    main()
