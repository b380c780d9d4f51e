"""H200 validation and benchmark of the fused Pallas kernel: one call, JSON + markdown under --out.

    python -m bench.gpu_pallas --out $OUT/pallas              # the H200 run (< 4 minutes; bench/gpu_kernels.sh)
    python -m bench.gpu_pallas --out /tmp/pallas_smoke --cpu  # CPU smoke: both kernels interpreted, tiny sizes

Sections, in this order (each guarded, so one failure still reports the rest; each stops starting new items at its
deadline in DEADLINES and reports them as skipped; results.md and results.json are rewritten after every section):
  env          versions, GPU, the dispatch decision and self-test of the "pallas" backend, exp mode;
  correctness  Pallas vs the float64 spec (on the first 4096 rows) and vs the jitted jnp reference (all rows), mass
               error, NaN placement, for B in {1, 127, 512, 2048, 65536, 1048576} x {random, peaked, clamp_high,
               clamp_low, terminated, mixed, nonfinite};
  determinism  bitwise identical outputs over 100 repeats, and under a row permutation;
  parity       the SAME device buffers (shared zero-copy through DLPack) through torch_impl's Triton kernel and the
               Pallas kernel: max abs difference and bitwise identity per input kind (both exp modes);
  timing       device time per call, B in {512, 2048, 8192, 65536, 1048576}: the Pallas kernel and the jnp reference
               inside jit, measured as a jitted lax.fori_loop of K dependent calls minus the same loop without the
               op (loop overhead + output consumer), divided by K; the Triton kernel from the same process by
               triton.testing.do_bench_cudagraph (and do_bench, direct launches);
  low_precision  bf16/fp16 log-probs: the 2x rule against the same-dtype jnp reference, and the float64 spec on the
               rounded log-probs.
Inputs come from shared_spec.make_inputs; rows beyond 16384 repeat 16384 generated rows (generating 1M rows of the
`mixed` kind takes minutes on the host).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX initialises: torch shares the GPU
if "--cpu" in sys.argv:  # CPU smoke run: both kernels in their interpreters
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("FLASHSAC_PALLAS_INTERPRET", "1")
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.common import (  # noqa: E402
    F64_ROWS,
    INPUT_NAMES,
    block_seconds,
    environment,
    first_rows,
    fmt,
    jit_loop,
    json_block,
    repeated_inputs,
    run_sections,
    write_results,
)

TORCH_VERSION = torch.__version__  # torch is imported before jax: the order used on the H200

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jax_impl  # noqa: E402
import torch_impl  # noqa: E402
from jax_impl import ops as pallas_ops  # noqa: E402
from jax_impl import pallas_kernel as pk  # noqa: E402
from jax_impl.reference import categorical_td_target_reference  # noqa: E402
from shared_spec import reference as R  # noqa: E402
from shared_spec.launch_config import kernel_config  # noqa: E402
from shared_spec.tolerances import ATOL_BETWEEN, ATOL_FLOAT64, ATOL_MASS, max_abs_error, max_mass_error  # noqa: E402

GAMMA = 0.99
KINDS = ("random", "peaked", "clamp_high", "clamp_low", "terminated", "mixed", "nonfinite")
JDTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
# The whole script must finish in < 4 minutes on an H200 (bench/gpu_kernels.sh gives it 230 s): each section stops
# starting new items at its deadline (seconds since start) and records the rest as skipped.
DEADLINES = {"correctness": 95.0, "determinism": 110.0, "parity": 150.0, "timing": 195.0, "low_precision": 205.0}
_T0 = time.time()
_deadline = [float("inf")]


def over_budget() -> bool:
    """True once the current section's deadline has passed (the remaining items are reported as skipped)."""
    return time.time() - _T0 > _deadline[0]


def device_inputs(x: dict, dtype: str = "float32") -> list[jax.Array]:
    """The five arrays on the default JAX device, log-probs cast to `dtype` on the device."""
    dev = jax.devices()[0]
    out = [jax.device_put(x[k], dev) for k in INPUT_NAMES]
    out[1] = out[1].astype(JDTYPES[dtype])
    return out


def pallas(args, gamma=GAMMA, exp_mode=None) -> jax.Array:
    """The Pallas kernel (jitted wrapper, interpret mode only if FLASHSAC_PALLAS_INTERPRET=1). (B, N) f32."""
    return pallas_ops.categorical_td_target_pallas(*args, jnp.float32(gamma), exp_mode=exp_mode)


_ref_jit = jax.jit(categorical_td_target_reference, static_argnums=(6, 7))


def jnp_ref(args, gamma=GAMMA) -> jax.Array:
    """The jitted jnp reference ("jax" backend). (B, N) f32."""
    return _ref_jit(*args, jnp.float32(gamma), -5.0, 5.0)


@jax.jit
def _compare(a: jax.Array, b: jax.Array):
    """(max |a - b| over rows finite in both, NaN placement equal, bitwise identical, number of differing words)."""
    na, nb = jnp.isnan(a), jnp.isnan(b)
    diff = jnp.where(na | nb, 0.0, jnp.abs(a - b))
    ba, bb = jax.lax.bitcast_convert_type(a, jnp.int32), jax.lax.bitcast_convert_type(b, jnp.int32)
    return jnp.max(diff), jnp.all(na == nb), jnp.all(ba == bb), jnp.sum(ba != bb)


def compare(a, b) -> dict:
    """Device-side comparison of two (B, N) fp32 outputs (NaN placement mismatch -> max_abs = inf)."""
    m, same_nan, bits, ndiff = (np.asarray(v) for v in _compare(a, b))
    return {"max_abs": float(m) if bool(same_nan) else float("inf"), "nan_placement_equal": bool(same_nan),
            "bitwise_identical": bool(bits), "differing_elements": int(ndiff)}


@jax.jit
def _mass_error_fp32(out, q, lp):
    idx = jnp.argmin(q, axis=0)
    sel = jnp.take_along_axis(lp, idx[None, :, None], axis=0)[0].astype(jnp.float32)
    ok = ~jnp.isnan(out).any(axis=1)
    return jnp.max(jnp.where(ok, jnp.abs(out.sum(axis=1) - jnp.exp(sel).sum(axis=1)), 0.0))


def float64_check(x: dict, got: np.ndarray, n: int, dtype: str = "float32") -> tuple[float, float]:
    """(max abs error vs the float64 spec, mass error) on the first n rows; low-precision log-probs are rounded
    first, so this checks the kernel's arithmetic, not the input rounding."""
    xs = first_rows(x, n)
    if dtype != "float32":
        xs["next_log_probs"] = np.asarray(jnp.asarray(xs["next_log_probs"]).astype(JDTYPES[dtype]).astype(jnp.float32))
    want = R.categorical_td_target(**xs, gamma=GAMMA)
    _, lp = R.select_min_q(xs["next_qs"].astype(np.float64), xs["next_log_probs"].astype(np.float64))
    return max_abs_error(got[:n], want), max_mass_error(got[:n], lp)


# -------------------------------------------------------------------------------------------------------- sections


def env_info() -> dict:
    """``bench.common.environment`` plus the JAX device, the Pallas interpret flag and the kernel's dispatch state:
    the "pallas" decision (and how long its self-test took), exp mode, self-tests, launch config, backend infos."""
    dev = jax.devices()[0]
    info = environment()
    info.update(jax_device=str(dev), jax_device_kind=dev.device_kind,
                compute_capability=getattr(dev, "compute_capability", None),
                torch_cuda=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                pallas_interpret=pallas_ops.interpret_mode(),
                XLA_PYTHON_CLIENT_PREALLOCATE=os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"))
    t = time.time()
    try:
        info["pallas_decision"] = jax_impl.resolve_backend("pallas", strict=True, num_bins=101, num_critics=2).as_dict()
    except Exception as exc:  # noqa: BLE001  recorded; the kernel is still measured directly below
        info["pallas_decision"] = f"FAILED: {type(exc).__name__}: {exc}"[:1000]
    info["self_test_seconds"] = round(time.time() - t, 2)
    info["jax_backend_info"] = jax_impl.backend_info()
    info["exp_mode"] = pallas_ops.exp_mode()
    info["self_tests"] = {str(k): v for k, v in pallas_ops.self_test_results().items()}
    info["self_test_errors"] = {str(k): v for k, v in pallas_ops.self_test_errors().items()}
    info["kernel_config_B2048_N101"] = kernel_config(2048, 101, pallas_ops.interpret_mode())
    try:
        info["torch_backend_info"] = torch_impl.backend_info()
    except Exception as exc:  # noqa: BLE001
        info["torch_backend_info"] = f"FAILED: {exc}"
    return info


def correctness(sizes) -> list[dict]:
    rows = []
    for B in sizes:
        for kind in KINDS:
            if over_budget():
                rows.append({"B": B, "kind": kind, "skipped": "time budget"})
                continue
            try:
                x = repeated_inputs(B, kind, seed=B % 1000)
                args = device_inputs(x)
                got, ref = pallas(args), jnp_ref(args)
                n = min(B, F64_ROWS)
                err64, mass = float64_check(x, np.asarray(got[:n]), n)
                vs_ref = compare(got, ref)
                got_np_nan = np.asarray(jnp.isnan(got).any(axis=1))
                row = {"B": B, "kind": kind, "dtype": "float32", "rows_vs_float64": n, "max_abs_vs_float64": err64,
                       "max_abs_vs_jnp_ref": vs_ref["max_abs"], "bitwise_eq_jnp_ref": vs_ref["bitwise_identical"],
                       "nan_placement_eq_jnp_ref": vs_ref["nan_placement_equal"], "max_mass_error": mass,
                       "max_mass_error_fp32_all_rows": float(_mass_error_fp32(got, args[0], args[1])),
                       "min_value": float(jnp.nanmin(got)) if not got_np_nan.all() else None,
                       "nan_rows": int(got_np_nan.sum())}
                row["ok"] = bool(err64 <= ATOL_FLOAT64 and vs_ref["max_abs"] <= ATOL_BETWEEN and mass <= ATOL_MASS
                                 and (row["min_value"] is None or row["min_value"] >= 0.0))
            except Exception as exc:  # noqa: BLE001  one failing configuration must not hide the others
                row = {"B": B, "kind": kind, "error": f"{type(exc).__name__}: {exc}"[:800]}
            rows.append(row)
            print(f"  correctness B={B:>8} {kind:<11} " + (
                f"vs f64 {row['max_abs_vs_float64']:.2e} vs jnp {row['max_abs_vs_jnp_ref']:.2e} "
                f"mass {row['max_mass_error']:.2e} ok={row['ok']}" if "ok" in row else str(row)[:200]), flush=True)
    return rows


def low_precision(B: int) -> list[dict]:
    """bf16/fp16 log-probs: kernel error vs its fp32 output <= 2x the same-dtype jnp reference's + ATOL_BETWEEN."""
    if over_budget():
        return [{"B": B, "skipped": "time budget"}]
    x = repeated_inputs(B, "mixed", seed=7)
    a32 = device_inputs(x)
    k32, r32 = pallas(a32), jnp_ref(a32)
    rows = []
    for dtype in ("bfloat16", "float16"):
        a = device_inputs(x, dtype)
        k, r = pallas(a), jnp_ref(a)
        k_err, r_err = compare(k, k32)["max_abs"], compare(r, r32)["max_abs"]
        n = min(B, F64_ROWS)
        err64, mass = float64_check(x, np.asarray(k[:n]), n, dtype)
        rows.append({"B": B, "dtype": dtype, "kernel_err_vs_fp32": k_err, "jnp_ref_err_vs_fp32": r_err,
                     "within_2x_rule": bool(k_err <= 2 * r_err + ATOL_BETWEEN),
                     "max_abs_vs_float64_of_rounded_inputs": err64, "max_mass_error": mass,
                     "max_abs_vs_jnp_ref_same_dtype": compare(k, r)["max_abs"]})
        print(f"  low precision {dtype}: kernel {k_err:.2e} vs ref {r_err:.2e}; vs f64 {err64:.2e}", flush=True)
    return rows


@jax.jit
def _same_bits(a, b):
    return jnp.all(jax.lax.bitcast_convert_type(a, jnp.int32) == jax.lax.bitcast_convert_type(b, jnp.int32))


def determinism(cases, repeats: int) -> dict:
    out = {}
    for B, kind in cases:
        if over_budget():
            out[f"{kind}_B{B}"] = "skipped: time budget"
            continue
        args = device_inputs(repeated_inputs(B, kind, seed=1))
        first = pallas(args)
        same = sum(bool(_same_bits(first, pallas(args))) for _ in range(repeats))
        perm = jnp.asarray(np.random.default_rng(0).permutation(B).astype(np.int32))
        pargs = [args[0][:, perm], args[1][:, perm], args[2][perm], args[3][perm], args[4][perm]]
        out[f"{kind}_B{B}"] = {"repeats": repeats, "bitwise_identical_repeats": same,
                               "row_permutation_bitwise_equivariant": bool(_same_bits(pallas(pargs), first[perm]))}
        print(f"  determinism {kind} B={B}: {out[f'{kind}_B{B}']}", flush=True)
    return out


def _to_torch(args) -> tuple[dict, bool]:
    """Share JAX device buffers with torch through DLPack; returns (tensors, whether every buffer is zero-copy)."""
    t = {k: torch.from_dlpack(a) for k, a in zip(INPUT_NAMES, args, strict=True)}
    zero_copy = all(t[k].data_ptr() == a.unsafe_buffer_pointer() for k, a in zip(INPUT_NAMES, args, strict=True))
    return t, zero_copy


def parity(cases) -> list[dict]:
    """The same inputs through the Triton kernel (torch) and the Pallas kernel (JAX), on one GPU."""
    rows = []
    for B, kind, dtype in cases:
        if over_budget():
            rows.append({"B": B, "kind": kind, "dtype": dtype, "skipped": "time budget"})
            continue
        try:
            x = repeated_inputs(B, kind, seed=11)
            args = device_inputs(x, dtype)
            t, zero_copy = _to_torch(args)
            out_t = torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton", strict=True)
            if out_t.is_cuda:
                torch.cuda.synchronize()
            tri = jax.dlpack.from_dlpack(out_t)  # torch -> JAX, zero copy
            row = {"B": B, "kind": kind, "dtype": dtype, "inputs_zero_copy": zero_copy}
            for mode in pk.EXP_MODES:
                try:
                    c = compare(pallas(args, exp_mode=mode), tri)
                except Exception as exc:  # noqa: BLE001  e.g. the inline-PTX exp failing to compile
                    c = {"max_abs": float("inf"), "bitwise_identical": False, "differing_elements": -1,
                         "nan_placement_equal": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
                row.update({f"{k}_{mode}": v for k, v in c.items()})
            n = min(B, F64_ROWS)
            row["triton_max_abs_vs_float64"] = float64_check(x, np.asarray(tri[:n]), n, dtype)[0]
            row["meets_bar_1e-6"] = bool(row[f"max_abs_{pallas_ops.exp_mode()}"] <= 1e-6)
        except Exception as exc:  # noqa: BLE001
            row = {"B": B, "kind": kind, "dtype": dtype, "error": f"{type(exc).__name__}: {exc}"[:800]}
        rows.append(row)
        print(f"  parity B={B:>8} {kind:<11} {dtype:<8} " + (
            "  ".join(f"{m}: max {row[f'max_abs_{m}']:.2e} bitwise {row[f'bitwise_identical_{m}']} "
                      f"ndiff {row[f'differing_elements_{m}']}" for m in pk.EXP_MODES)
            if "error" not in row and "skipped" not in row else str(row)[:300]), flush=True)
    return rows


def _time_loop(fn, args, reps: int = 5) -> float:
    """Best of ``reps`` timed calls of ``fn(*args)`` (seconds), after one untimed call (compile + warm up)."""
    jax.block_until_ready(fn(*args))
    return min(block_seconds(lambda i: fn(*args), 1, jax.block_until_ready) for _ in range(reps))


def timing(sizes) -> list[dict]:
    rows = []
    ops = {
        "pallas": lambda q, lp, r, d, s, g, base: pallas_ops.categorical_td_target_pallas(q, lp, r, d, s, g),
        "jnp_ref": lambda q, lp, r, d, s, g, base: categorical_td_target_reference(q, lp, r, d, s, g),
        "loop_baseline": lambda q, lp, r, d, s, g, base: base * g,  # the consumer + loop overhead alone
    }
    for B in sizes:
        if over_budget():
            rows.append({"B": B, "skipped": "time budget"})
            continue
        row = {"B": B}
        try:
            K = 200 if B <= 8192 else (50 if B <= 65536 else 10)
            args = device_inputs(repeated_inputs(B, "random", seed=5))
            base = jnp.ones((B, 101), jnp.float32)
            gamma = jnp.float32(GAMMA)
            row["K"] = K
            for name, op in ops.items():
                row[f"{name}_loop_s"] = _time_loop(jit_loop(op, K), (*args, gamma, base))
            for name in ("pallas", "jnp_ref"):
                row[f"{name}_us"] = (row[f"{name}_loop_s"] - row["loop_baseline_loop_s"]) / K * 1e6
            row["loop_baseline_us_per_iter"] = row["loop_baseline_loop_s"] / K * 1e6
            fn = jax.jit(ops["pallas"])  # host-timed back-to-back dispatches (for reference only)
            jax.block_until_ready(fn(*args, gamma, base))
            call = lambda i, fn=fn, a=(*args, gamma, base): fn(*a)  # noqa: E731
            row["pallas_host_dispatch_us"] = block_seconds(call, 50, jax.block_until_ready) * 1e6
            row["speedup_vs_jnp_ref"] = row["jnp_ref_us"] / row["pallas_us"]
        except Exception as exc:  # noqa: BLE001
            row["jax_error"] = f"{type(exc).__name__}: {exc}"[:800]
        try:
            from triton.testing import do_bench, do_bench_cudagraph

            shared = device_inputs(repeated_inputs(B, "random", seed=5))  # kept alive while torch uses the buffers
            t, _ = _to_torch(shared)
            fn = lambda t=t: torch_impl.categorical_td_target(**t, gamma=GAMMA, backend="triton", strict=True)  # noqa: E731
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            row["triton_direct_us"] = do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
            row["triton_graph_us"] = do_bench_cudagraph(fn, rep=100, return_mode="median") * 1e3
            if "pallas_us" in row:
                row["pallas_over_triton_graph"] = row["pallas_us"] / row["triton_graph_us"]
        except Exception as exc:  # noqa: BLE001  (e.g. no CUDA in the CPU smoke run)
            row["triton_error"] = f"{type(exc).__name__}: {exc}"[:800]
        rows.append(row)
        print("  timing " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                                      if not k.endswith("_loop_s")), flush=True)
    return rows


# ---------------------------------------------------------------------------------------------------------- report


def summary(res: dict) -> list[str]:
    """The kernel's targets with the measured values (markdown lines)."""
    lines = ["| target | measured | met |", "|---|---|---|"]
    corr = [r for r in res.get("correctness", []) if isinstance(r, dict) and "ok" in r]
    if corr:
        lines.append(f"| vs float64 <= 2e-5, vs jnp <= 3e-5, mass <= 1e-6 ({len(corr)} configs) | "
                     f"max {max(r['max_abs_vs_float64'] for r in corr):.2e} / "
                     f"{max(r['max_abs_vs_jnp_ref'] for r in corr):.2e} / "
                     f"{max(r['max_mass_error'] for r in corr):.2e} | {all(r['ok'] for r in corr)} |")
    det = res.get("determinism")
    if isinstance(det, dict):
        vals = [v for v in det.values() if isinstance(v, dict)]
        if vals:
            ok = all(v["bitwise_identical_repeats"] == v["repeats"] for v in vals)
            lines.append(f"| bitwise deterministic over 100 repeats | {[v['bitwise_identical_repeats'] for v in vals]} "
                         f"| {ok} |")
    par = [r for r in res.get("parity", []) if isinstance(r, dict) and "meets_bar_1e-6" in r]
    if par:
        mode = res.get("env", {}).get("exp_mode", pk.DEFAULT_EXP_MODE)
        lines.append(f"| Triton vs Pallas parity <= 1e-6 (goal bitwise), exp_mode={mode} | max "
                     f"{max(r[f'max_abs_{mode}'] for r in par):.2e}; bitwise in "
                     f"{sum(r[f'bitwise_identical_{mode}'] for r in par)}/{len(par)} | "
                     f"{all(r['meets_bar_1e-6'] for r in par)} |")
    for r in res.get("timing", []) if isinstance(res.get("timing"), list) else []:
        if "speedup_vs_jnp_ref" in r:
            tgt = r["B"] >= 2048
            lines.append(f"| B={r['B']}: >= 2x vs jitted jnp ref{'' if tgt else ' (not a target below 2048)'} | "
                         f"{r['speedup_vs_jnp_ref']:.2f}x ({r['pallas_us']:.1f} vs {r['jnp_ref_us']:.1f} us) | "
                         f"{r['speedup_vs_jnp_ref'] >= 2 if tgt else 'n/a'} |")
        if "pallas_over_triton_graph" in r:
            lines.append(f"| B={r['B']}: within 1.25x of Triton | {r['pallas_over_triton_graph']:.2f}x "
                         f"({r['pallas_us']:.1f} vs {r['triton_graph_us']:.1f} us) | "
                         f"{r['pallas_over_triton_graph'] <= 1.25} |")
    return lines


def write_report(out: str, res: dict) -> str:
    """results.json and results.md under ``out``; returns the markdown."""
    env = res.get("env", {}) if isinstance(res.get("env"), dict) else {}
    lines = [f"# Pallas kernel on {env.get('jax_device_kind')} ({env.get('date_utc')})", "",
             f"jax {env.get('jax')}, torch {env.get('torch')}, triton {env.get('triton')}, "
             f"python {env.get('python')}; exp_mode {env.get('exp_mode')}; decision {env.get('pallas_decision')}; "
             f"command `{env.get('command')}`", "", "## Targets", "", *summary(res), ""]
    if isinstance(res.get("correctness"), list):
        lines += ["## Correctness", "",
                  "| B | kind | vs float64 | vs jnp ref | bitwise = jnp | mass error | NaN rows |",
                  "|---|---|---|---|---|---|---|"]
        for r in res["correctness"]:
            if "ok" in r:
                lines.append(f"| {r['B']} | {r['kind']} | {r['max_abs_vs_float64']:.2e} | "
                             f"{r['max_abs_vs_jnp_ref']:.2e} | {r['bitwise_eq_jnp_ref']} | {r['max_mass_error']:.2e} | "
                             f"{r['nan_rows']} |")
            else:
                lines.append(f"| {r['B']} | {r['kind']} | {r.get('error') or r.get('skipped')} | | | | |")
        lines.append("")
    if isinstance(res.get("parity"), list):
        lines += ["## Cross-framework parity (Triton via torch vs Pallas via JAX, shared DLPack buffers)", "",
                  "| B | kind | dtype | max abs (ex2) | bitwise (ex2) | max abs (libdevice) | bitwise (libdevice) | "
                  "zero copy |", "|---|---|---|---|---|---|---|---|"]
        for r in res["parity"]:
            if "max_abs_ex2" in r:
                lines.append(f"| {r['B']} | {r['kind']} | {r['dtype']} | {r['max_abs_ex2']:.2e} | "
                             f"{r['bitwise_identical_ex2']} | {r['max_abs_libdevice']:.2e} | "
                             f"{r['bitwise_identical_libdevice']} | {r['inputs_zero_copy']} |")
            else:
                lines.append(f"| {r['B']} | {r['kind']} | {r['dtype']} | {r.get('error') or r.get('skipped')} |"
                             " | | | |")
        lines.append("")
    if isinstance(res.get("timing"), list):
        lines += ["## Device time per call (us)", "",
                  "| B | Pallas (jit loop) | jnp ref (jit loop) | speedup | Triton (CUDA graph) | Triton (direct) | "
                  "Pallas / Triton | loop baseline per iter | Pallas host dispatch |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in res["timing"]:
            lines.append("| " + " | ".join([str(r["B"])] + [fmt(r.get(k), ".2f" if "_over_" in k or "speedup" in k
                                                                 else ".1f") for k in (
                "pallas_us", "jnp_ref_us", "speedup_vs_jnp_ref", "triton_graph_us", "triton_direct_us",
                "pallas_over_triton_graph", "loop_baseline_us_per_iter", "pallas_host_dispatch_us")]) + " |")
        lines.append("")
    for key in ("low_precision", "determinism", "section_seconds"):
        if key in res:
            lines += json_block(key, res[key])
    failed = [k for k, v in res.items() if isinstance(v, str) and v.startswith("FAILED")]
    if failed:
        lines += ["## Failed sections", ""] + [f"### {k}\n```\n{res[k]}\n```" for k in failed]
    return write_results(out, res, "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="directory for results.json and results.md")
    ap.add_argument("--quick", action="store_true", help="small sizes only (smoke)")
    ap.add_argument("--cpu", action="store_true", help="CPU smoke run: Pallas and Triton interpreters")
    a = ap.parse_args()
    quick = a.quick or a.cpu
    sizes = (1, 127) if a.cpu else ((1, 127, 512, 2048) if quick else (1, 127, 512, 2048, 65536, 1048576))
    det_cases = ((64, "nonfinite"),) if quick else ((2048, "nonfinite"), (65536, "mixed"), (1048576, "random"))
    big = 64 if quick else 65536
    par_cases = ([(big, k, "float32") for k in KINDS] + [(big, "mixed", d) for d in ("bfloat16", "float16")]
                 + ([] if quick else [(2048, k, "float32") for k in KINDS] + [(1048576, "mixed", "float32")]))
    bench_sizes = (512,) if quick else (512, 2048, 8192, 65536, 1048576)
    res: dict = {}
    sections = [("env", env_info), ("correctness", lambda: correctness(sizes)),
                ("determinism", lambda: determinism(det_cases, 100)), ("parity", lambda: parity(par_cases)),
                ("timing", lambda: timing(bench_sizes)), ("low_precision", lambda: low_precision(big))]

    def set_deadline(name: str) -> None:
        _deadline[0] = float("inf") if a.cpu else DEADLINES.get(name, float("inf"))

    run_sections(sections, res, lambda r: write_report(a.out, r), on_start=set_deadline)
    res["total_seconds"] = round(time.time() - _T0, 1)
    write_report(a.out, res)
    print("\n".join(["", f"total {res['total_seconds']} s; full report: {os.path.join(a.out, 'results.md')}", "",
                     *summary(res)]))


if __name__ == "__main__":
    main()
