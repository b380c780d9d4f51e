"""Kernel timings: the fused Triton and Pallas kernels against the references and upstream FlashSAC's own functions,
with the bytes floor from a device-to-device copy of at least 1 GiB.

    python -m bench kernel --out bench/results/kernel                  # GPU: B = 512, 2048, 65536, 1048576
    python -m bench kernel --out /tmp/kernel --tiny                    # CPU: interpreters, B = 64, a few calls

Variants, every one on the same inputs (``shared_spec.make_inputs`` of the ``random`` kind, N = 101 atoms, E = 2
critics, fp32 log-probs), timed in interleaved rounds (``bench.common.interleaved_blocks``: every variant once per
round, so all see the same machine state), microseconds per call, median and min-max over ``--rounds``:

- ``torch``: ``torch_impl.categorical_td_target(backend="torch")``, the eager torch reference;
- ``triton``: the same call with ``backend="triton", strict=True`` (the fused kernel; under ``TRITON_INTERPRET=1`` on a
  CPU);
- ``upstream_eager`` / ``upstream_compiled``: upstream FlashSAC's ``_select_min_q_log_probs`` and
  ``_compute_categorical_td_target`` (``bench/upstream.py``, or the checkout given by ``--upstream``: its
  ``flash_rl/agents/flashSAC/update.py`` is imported from there), eager and under default-mode ``torch.compile`` as
  upstream runs them (compiled on a GPU only);
- ``jax`` / ``pallas``: ``jax_impl.categorical_td_target`` with ``backend="jax"`` / ``"pallas", strict=True`` as
  device time per call: a jitted loop of ``--calls`` dependent calls minus the same loop without the op
  (``bench.common.jit_loop``).

Checks (``checks`` in the JSON; the job exits 1 if one fails): over a case matrix of every input kind of
``shared_spec.KINDS`` (NaN / inf rows included) x batch sizes x atom counts x log-prob dtypes, the Triton and Pallas
outputs are bitwise equal (on a CPU, where XLA flushes subnormal numbers in the Pallas interpreter and numpy does
not, up to differences below 2**-125) and within ``shared_spec.tolerances.atol_vs_float64`` of the float64
specification on its finite rows (NaN exactly where the specification has NaN); each kernel repeated on one input
gives the same bits every time.

On a GPU the torch variants are timed by CUDA-graph replay of ``--calls`` calls (launch cost excluded, as in a
training step that is captured); on a CPU as plain calls. Correctness beside the timings: each variant's largest
absolute difference from the float64 specification (``shared_spec.reference``) on the first 4,096 rows, and whether
the Triton and Pallas outputs are bitwise equal.

Bytes floor: one read of the selected critic's log-probs and one write of the (B, N) fp32 output, at the bandwidth
of a device-to-device copy of ``--copy-mib`` MiB (default 2,048; at least 1,024 on a GPU: smaller copies run from
cache and overstate the bandwidth). On a CPU the copy is a host copy and labelled so: it is not a device floor.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from bench.common import (
    F64_ROWS,
    INPUT_NAMES,
    environment,
    first_rows,
    interleaved_blocks,
    repeated_inputs,
    tiny_defaults,
    write_results,
)

__all__ = ["copy_bandwidth", "main"]

GAMMA, N, E = 0.99, 101, 2
SUBNORMAL_SCALE = 2.0**-125  # on a CPU the interpreted kernels may differ below this (XLA:CPU flushes subnormals)
MIN_COPY_MIB = 1024  # on a GPU: smaller copies partly run from L2 and overstate the bandwidth


def copy_bandwidth(mib: int, device: str, repeats: int = 5) -> dict:
    """Bytes per second of a copy of ``mib`` MiB on ``device`` (read + write counted), median of ``repeats``."""
    import torch

    src = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    seconds = []
    for _ in range(repeats + 1):
        sync()
        t0 = time.perf_counter()
        dst.copy_(src)
        sync()
        seconds.append(time.perf_counter() - t0)
    s = float(np.median(seconds[1:]))
    return {"mib": mib, "device": device, "seconds": s, "bytes_per_s": 2 * src.numel() * 4 / s,
            "kind": "device-to-device copy" if device == "cuda" else "host copy (not a device floor)"}


def load_upstream(path: str | None):
    """(select, compute) of upstream's update module: from the checkout ``path`` or ``bench/upstream.py``."""
    if path is None:
        from bench import upstream

        return upstream._select_min_q_log_probs, upstream._compute_categorical_td_target, "bench/upstream.py"
    import importlib.util

    file = os.path.join(path, "flash_rl", "agents", "flashSAC", "update.py")
    if not os.path.isfile(file):
        raise SystemExit(f"--upstream: expected a checkout of upstream FlashSAC holding {file}, got {path!r}")
    sys.path.insert(0, os.path.abspath(path))
    spec = importlib.util.spec_from_file_location("upstream_flashsac_update", file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in ("_select_min_q_log_probs", "_compute_categorical_td_target"):
        if not hasattr(mod, name):
            raise SystemExit(f"--upstream: {file} has no {name} (expected upstream's update module)")
    compute = mod._compute_categorical_td_target
    return (getattr(mod._select_min_q_log_probs, "_torchdynamo_orig_callable", mod._select_min_q_log_probs),
            getattr(compute, "_torchdynamo_orig_callable", compute), file)


def torch_variants(x: dict, device: str, upstream: tuple) -> dict:
    """name -> a no-argument call of that variant on ``x`` (torch tensors on ``device``)."""
    import torch

    import torch_impl

    t = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in x.items()}
    args = [t[k] for k in INPUT_NAMES]
    select, compute = upstream[:2]

    def up(sel, comp):
        return lambda: comp(sel(t["next_qs"], t["next_log_probs"]), t["reward"], t["terminated"],
                            t["next_alpha_log_pi"], GAMMA, N, -5.0, 5.0)

    out = {"torch": lambda: torch_impl.categorical_td_target(*args, gamma=GAMMA, backend="torch"),
           "triton": lambda: torch_impl.categorical_td_target(*args, gamma=GAMMA, backend="triton", strict=True),
           "upstream_eager": up(select, compute)}
    if device == "cuda":
        out["upstream_compiled"] = up(torch.compile(select), torch.compile(compute))
    return out


def torch_block(fn, device: str, calls: int):
    """A block timer (iters -> seconds per call) for ``fn``: CUDA-graph replay of ``calls`` calls on a GPU."""
    import torch

    if device != "cuda":
        def run(iters: int) -> float:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            return (time.perf_counter() - t0) / iters
        return run
    from bench.common import capture_cuda_graph

    graph, _ = capture_cuda_graph(lambda: [fn() for _ in range(calls)])

    def replay(iters: int) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            graph.replay()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / (iters * calls)
    return replay


def jax_blocks(x: dict, calls: int) -> tuple[dict, dict]:
    """JAX block timers (device time per call: the loop minus an empty loop) and each variant's output."""
    import jax
    import jax.numpy as jnp

    import jax_impl
    from bench.common import jit_loop

    a = [jnp.asarray(x[k]) for k in INPUT_NAMES]
    base = jnp.zeros((x["reward"].shape[0], N), jnp.float32)
    ops = {b: (lambda q, lp, r, d, s, g, _b, backend=b: jax_impl.categorical_td_target(
        q, lp, r, d, s, gamma=g, backend=backend, strict=backend == "pallas")) for b in ("jax", "pallas")}
    empty = jit_loop(lambda q, lp, r, d, s, g, b: b * g, calls)
    loops = {name: jit_loop(op, calls) for name, op in ops.items()}

    def timed(loop):
        def run(iters: int) -> float:
            g = jnp.float32(GAMMA)
            jax.block_until_ready(loop(*a, g, base))
            t0 = time.perf_counter()
            for _ in range(iters):
                out = loop(*a, g, base)
            jax.block_until_ready(out)
            return (time.perf_counter() - t0) / (iters * calls)
        return run

    e = timed(empty)

    def minus_empty(loop):
        f = timed(loop)
        return lambda iters: max(f(iters) - e(iters), 0.0)

    blocks = {name: minus_empty(loop) for name, loop in loops.items()}
    outs = {name: np.asarray(jax.jit(lambda *v, op=op: op(*v, jnp.float32(GAMMA), base))(*a))
            for name, op in ops.items()}
    return blocks, outs


def measure(B: int, device: str, rounds: int, iters: int, calls: int, upstream: tuple, with_jax: bool) -> dict:
    from shared_spec import reference as R

    x = repeated_inputs(B, "random", N, E)
    ref = R.categorical_td_target(*[first_rows(x, F64_ROWS)[k] for k in INPUT_NAMES], gamma=GAMMA)
    fns = torch_variants(x, device, upstream)
    blocks = {name: torch_block(fn, device, calls) for name, fn in fns.items()}
    outs = {name: fn().float().cpu().numpy() for name, fn in fns.items()}
    if with_jax:
        jb, jo = jax_blocks(x, calls)
        blocks.update(jb)
        outs.update(jo)
    raw = interleaved_blocks(blocks, rounds, iters, warmup_iters=1)
    res = {"B": B, "us": {k: [v * 1e6 for v in vals] for k, vals in raw.items()},
           "max_abs_err_vs_float64": {k: float(np.nanmax(np.abs(o[:F64_ROWS] - ref))) for k, o in outs.items()}}
    if "pallas" in outs:
        res["triton_pallas_bitwise"] = bool(np.array_equal(outs["triton"].view(np.uint32),
                                                          outs["pallas"].view(np.uint32)))
    return res


def checks(Bs: list[int], Ns: list[int], dtypes: list[str], repeats: int) -> dict:
    """The bitwise / float64 case matrix and the repeat determinism of both kernels (see the module docstring)."""
    import jax.numpy as jnp
    import torch

    import jax_impl
    import torch_impl
    from shared_spec import KINDS, make_inputs
    from shared_spec import reference as R
    from shared_spec.tolerances import atol_vs_float64

    device = "cuda" if torch.cuda.is_available() else "cpu"
    failures, count = [], 0
    for kind in KINDS:
        for B in Bs:
            for n in Ns:
                x = make_inputs(B, n, E, seed=B + n, kind=kind)
                ref = R.categorical_td_target(*[x[k] for k in INPUT_NAMES], gamma=GAMMA)
                for dtype in dtypes:
                    t = [torch.from_numpy(np.ascontiguousarray(x[k])).to(device) for k in INPUT_NAMES]
                    t[1] = t[1].to(getattr(torch, dtype))
                    j = [jnp.asarray(x[k]) for k in INPUT_NAMES]
                    j[1] = j[1].astype(dtype)
                    runs = {"triton": lambda t=t: torch_impl.categorical_td_target(
                                *t, gamma=GAMMA, backend="triton", strict=True).cpu().numpy(),
                            "pallas": lambda j=j: np.asarray(jax_impl.categorical_td_target(
                                *j, gamma=GAMMA, backend="pallas", strict=True))}
                    outs = {name: run() for name, run in runs.items()}
                    case = f"{kind} B={B} N={n} {dtype}"
                    count += 1
                    differ = outs["triton"].view(np.uint32) != outs["pallas"].view(np.uint32)
                    if device == "cpu":  # XLA:CPU flushes subnormals in the Pallas interpreter; numpy does not
                        differ &= ~(np.abs(outs["triton"] - outs["pallas"]) < SUBNORMAL_SCALE)
                    if differ.any():
                        failures.append(f"{case}: Triton and Pallas differ in {int(differ.sum())} elements")
                    if dtype != "float32":  # against the specification of the rounded log-probs: the fp32 bar
                        ref_d = R.categorical_td_target(*[x[k] if k != "next_log_probs" else np.asarray(
                            j[1].astype(jnp.float32)) for k in INPUT_NAMES], gamma=GAMMA)
                    else:
                        ref_d = ref
                    nan = np.isnan(ref_d)
                    for name, o in outs.items():
                        if not np.array_equal(np.isnan(o), nan):
                            failures.append(f"{case}: {name} NaN rows differ from the specification's")
                        elif np.abs(o[~nan] - ref_d[~nan]).max(initial=0.0) > atol_vs_float64(n):
                            failures.append(f"{case}: {name} beyond {atol_vs_float64(n):.1e} of float64")
                    if kind == "random" and B == Bs[-1]:
                        for name, run in runs.items():
                            if any(not np.array_equal(run().view(np.uint32), outs[name].view(np.uint32))
                                   for _ in range(repeats)):
                                failures.append(f"{case}: {name} not bitwise deterministic over {repeats} repeats")
    return {"configurations": count, "repeats": repeats, "failures": failures}


def _report(out: str, res: dict) -> str:
    env, c = res["env"], res["config"]
    floor = res["copy"]
    lines = [f"# Kernel timings ({env.get('gpu') or 'CPU'}, {env['date_utc']})", "",
             f"`{c['command']}`; torch {env.get('torch')}, triton {env.get('triton')}, jax {env.get('jax')}, "
             f"Python {env['python']}, commit {env.get('git_sha')}. Upstream's functions: {c['upstream']}.", "",
             f"Microseconds per call, median (min-max) of {c['rounds']} interleaved rounds; torch variants "
             f"{'by CUDA-graph replay' if c['device'] == 'cuda' else 'as plain calls'}, JAX variants as device time in "
             f"a jitted loop (0 where the loop was not measurably slower than the empty loop). Bytes floor: "
             f"log-probs read + output write at {floor['bytes_per_s'] / 1e9:.1f} GB/s "
             f"({floor['kind']} of {floor['mib']} MiB).", ""]
    names = list(res["sizes"][0]["us"])
    lines += ["| B | floor | " + " | ".join(names) + " | upstream_compiled / triton | max error vs float64 | "
              "Triton == Pallas |", "|" + "---|" * (len(names) + 5)]
    for r in res["sizes"]:
        med = {k: float(np.median(v)) for k, v in r["us"].items()}
        cells = [f"{med[k]:.1f} ({min(r['us'][k]):.1f}-{max(r['us'][k]):.1f})" for k in names]
        ratio = (f"{med['upstream_compiled'] / med['triton']:.2f}x" if "upstream_compiled" in med and med["triton"]
                 else "")
        err = max(r["max_abs_err_vs_float64"].values())
        lines.append(f"| {r['B']:,} | {r['floor_us']:.2f} | " + " | ".join(cells) + f" | {ratio} | {err:.1e} | "
                     f"{ {True: 'yes', False: 'NO', None: ''}[r.get('triton_pallas_bitwise')]} |")
    ch = res.get("checks")
    if ch:
        lines += ["", f"Checks: {ch['configurations']} configurations, Triton == Pallas bit for bit and both within "
                  f"tolerance of float64, each kernel deterministic over {ch['repeats']} repeats: "
                  + ("all passed." if not ch["failures"] else "FAILED: " + "; ".join(ch["failures"][:20]))]
    if c["device"] != "cuda":
        lines += ["", "**No GPU: the kernels ran in their interpreters; these numbers test the job, they are not "
                  "kernel performance.**"]
    return write_results(out, res, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    """CLI; returns 0 when every kernel output is within the specification's tolerance of float64 and every check
    passed, else 1."""
    ap = argparse.ArgumentParser(prog="python -m bench kernel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 2048, 65536, 1048576])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20, help="blocks per variant per round")
    ap.add_argument("--calls", type=int, default=20, help="calls per CUDA graph / jitted loop")
    ap.add_argument("--copy-mib", type=int, default=2048)
    ap.add_argument("--upstream", default=None, help="a checkout of upstream FlashSAC (default: bench/upstream.py)")
    ap.add_argument("--no-jax", dest="jax", action="store_false", help="torch variants only (no Pallas, no checks)")
    ap.add_argument("--check-sizes", type=int, nargs="+", default=[1, 127, 2048, 65536])
    ap.add_argument("--check-bins", type=int, nargs="+", default=[2, 101, 1024])
    ap.add_argument("--check-dtypes", nargs="+", default=["float32", "bfloat16", "float16"])
    ap.add_argument("--repeats", type=int, default=50, help="determinism repeats per kernel")
    ap.add_argument("--tiny", action="store_true", help="CPU in seconds: interpreters, B = 64, a few calls")
    a = tiny_defaults(ap, argv, sizes=[64], rounds=2, iters=1, calls=2, copy_mib=8, check_sizes=[17],
                      check_bins=[11], check_dtypes=["float32", "bfloat16"], repeats=2)
    import torch

    from shared_spec.tolerances import ATOL_FLOAT64

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and a.copy_mib < MIN_COPY_MIB:
        ap.error(f"--copy-mib: expected >= {MIN_COPY_MIB} on a GPU (a smaller copy overstates the bandwidth), got "
                 f"{a.copy_mib}")
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        ap.error("no GPU: run with TRITON_INTERPRET=1 FLASHSAC_PALLAS_INTERPRET=1 (python -m bench kernel --tiny "
                 "sets both)")
    upstream = load_upstream(a.upstream)
    res = {"env": environment(), "config": {
        "command": "python -m bench kernel " + " ".join(sys.argv[1:] if argv is None else argv), "device": device,
        "rounds": a.rounds, "iters": a.iters, "calls": a.calls, "upstream": upstream[2], "N": N, "E": E,
        "gamma": GAMMA}, "copy": copy_bandwidth(a.copy_mib, device), "sizes": []}
    for B in a.sizes:
        r = measure(B, device, a.rounds, a.iters, a.calls, upstream, a.jax)
        r["floor_us"] = 2 * B * N * 4 / res["copy"]["bytes_per_s"] * 1e6
        res["sizes"].append(r)
        print(f"B={B}: " + ", ".join(f"{k} {np.median(v):.1f} us" for k, v in r["us"].items()), flush=True)
    if a.jax:
        res["checks"] = checks(a.check_sizes, a.check_bins, a.check_dtypes, a.repeats)
    print(_report(os.path.abspath(a.out), res))
    bad = [(r["B"], k) for r in res["sizes"] for k, e in r["max_abs_err_vs_float64"].items()
           if k in ("triton", "pallas") and not e <= ATOL_FLOAT64]
    if bad:
        print(f"kernel outputs beyond {ATOL_FLOAT64} of float64: {bad}", file=sys.stderr)
    if res.get("checks", {}).get("failures"):
        print("\n".join(res["checks"]["failures"]), file=sys.stderr)
    return 1 if bad or res.get("checks", {}).get("failures") else 0


if __name__ == "__main__":
    sys.exit(main())
