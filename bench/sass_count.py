"""Static SASS and an estimate of the dynamic instruction count per row of both fused kernels, on a CPU machine.

    python -m bench.sass_count                      # both kernels, fp32 log-probs, N = 101, E = 2
    python -m bench.sass_count --kernel triton --N 101 256 --dtype bf16 --lines
    python -m bench.sass_count --dump /tmp/sass     # also writes <kernel>_N<N>.sass / .ptx / .ttir there

No GPU is needed (and none is used): the Triton kernel is compiled by `triton_kernels.aot.compile_kernel` (sm_90,
the pinned configuration); the Pallas kernel is traced with
`jax.jit(...).trace(...).lower(lowering_platforms=("cuda",))` under JAX_PLATFORMS=cpu, its Triton IR (the
`mhlo.backend_config` "ir" bytecode of the `pallas_call` custom call) is printed as text with jaxlib's Triton dialect
and compiled with the same pip Triton (XLA's bundled Triton may schedule differently: this counts the IR, not XLA's
binary). Both PTX files go through the pip package's ptxas for sm_90a; nvdisasm lists the SASS with line info.

Counts are per thread and row (one warp per row at N <= 128: one thread holds 4 of the 128 lanes; `--br 2`, the
row pairs of large B: a warp holds two rows, and a thread's count is halved), NOPs excluded. The
SASS is split into basic blocks (at labels and after branches). The dynamic estimate follows one path: at gamma =
0.99 the window is W = 3 = UNROLL sources, so the window loop runs zero times, and the total-mass branch is not taken
(no row has a probability >= 2**(127 - log2 BLOCK_N)); in the code both compilers emit, both are skipped by a forward
conditional branch, so the walk takes a forward conditional branch iff the blocks it skips hold a warp reduction
(REDUX: the total-mass sum) or a backward branch (the loop), falls through every other branch (e.g. the row mask of
the stores) and every backward one, and stops at the first unconditional EXIT. Each path block is printed with its
first source lines, so the assumption can be checked by eye. `--loop-trips T` adds T iterations of the loop body (a
longer window: gamma well below 1).
Must run without TRITON_INTERPRET=1 (the interpreter replaces the JIT function at decoration time).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from shared_spec.launch_config import kernel_config, with_overrides  # noqa: E402
from triton_kernels.aot import assemble, compile_kernel  # noqa: E402

_JNP_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def triton_kernel(N: int, E: int, dtype: str, rpp: int = 1, br: int = 1) -> dict:
    c = compile_kernel(N, E, 90, BR=br, lp_dtype=dtype, RPP=rpp)[0]
    info, sass = assemble(c.asm["ptx"], line_info=True)
    return {"ptx": c.asm["ptx"], "ttir": c.asm["ttir"], "info": info, "sass": sass,
            "src": "triton_kernels/categorical_td_target.py"}


def pallas_ttir(N: int, E: int, dtype: str, B: int = 37, rpp: int = 1, br: int = 1) -> tuple[str, int]:
    """The Pallas kernel's Triton IR (text) and num_warps, lowered for CUDA on a CPU-only JAX."""
    import jax
    import jax.numpy as jnp
    from jax._src.lib import triton as jtt
    from jax._src.lib.mlir import ir

    from jax_impl import pallas_kernel as pk
    from shared_spec import make_inputs

    names = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
    x = make_inputs(B, N=N, E=E)
    xs = [jnp.asarray(x[k]) for k in names]
    xs[1] = xs[1].astype(getattr(jnp, _JNP_DTYPES[dtype]))
    nw = with_overrides(kernel_config(1 << 20, N, False), {"BR": br}, False)["num_warps"]  # compile_kernel's
    low = jax.jit(lambda *a: pk.launch(*a[:5], a[5], interpret=False, rows_per_program=rpp, block_rows=br,
                                       num_warps=nw)).trace(
        *xs, jnp.float32(0.99)).lower(lowering_platforms=("cuda",))
    found = []

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for o in block.operations:
                    if o.operation.name == "stablehlo.custom_call":
                        found.append(o.operation.attributes["mhlo.backend_config"])
                    walk(o.operation)

    walk(low.compiler_ir("stablehlo").operation)
    d = ir.DictAttr(found[0])
    irb, nw = ir.StringAttr(d["ir"]).value_bytes, ir.IntegerAttr(d["num_warps"]).value
    ctx = ir.Context()
    jtt.dialect.register_dialect(ctx)
    ctx.allow_unregistered_dialects = True
    with ctx:
        text = ir.Module.parse(irb).operation.get_asm(enable_debug_info=True)
    # jaxlib prints the barrier in generic form; pip Triton parses the pretty form.
    return re.sub(r"\"gpu.barrier\"\(\) <[^>]*> : \(\) -> \(\)", "gpu.barrier", text), int(nw)


def pallas_kernel(N: int, E: int, dtype: str, rpp: int = 1, br: int = 1) -> dict:
    ttir, nw = pallas_ttir(N, E, dtype, rpp=rpp, br=br)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ttir")
        with open(path, "w") as f:
            f.write(ttir)
        c = triton.compile(path, target=GPUTarget("cuda", 90, 32), options={"num_warps": nw})
    info, sass = assemble(c.asm["ptx"], line_info=True)
    return {"ptx": c.asm["ptx"], "ttir": ttir, "info": info, "sass": sass, "src": "jax_impl/pallas_kernel.py"}


def parse(sass: str, src_name: str) -> list[dict]:
    """Instructions in address order: {addr, text, op, line, labels} (line: the kernel file's, else -line)."""
    ins, pending, line = [], [], None
    base = os.path.basename(src_name)
    for raw in sass.splitlines():
        m = re.search(r'//## File "(.*?)", line (\d+)', raw)
        if m:
            line = int(m.group(2)) if m.group(1).endswith(base) else -int(m.group(2))
            continue
        m = re.match(r"\s*(\.L_x_\d+):", raw)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", raw)
        if m:
            t = m.group(2).strip()
            if t.startswith("NOP"):
                continue
            op = re.sub(r"^@!?U?P[T0-9]+\s+", "", t).split()[0].split(".")[0]
            ins.append({"addr": int(m.group(1), 16), "text": t, "op": op, "line": line, "labels": pending})
            pending = []
    return ins


def blocks(ins: list[dict]) -> list[dict]:
    out, cur = [], []
    for i in ins:
        if i["labels"] and cur:
            out.append(cur)
            cur = []
        cur.append(i)
        if i["op"] in ("BRA", "EXIT"):
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    label_block = {lab: n for n, b in enumerate(out) for lab in b[0]["labels"]}
    res = []
    for n, b in enumerate(out):
        last = b[-1]
        tgt = re.search(r"\((\.L_x_\d+)\)", last["text"])
        res.append({"n": n, "ins": b, "start": b[0]["addr"], "last": last,
                    "target": label_block.get(tgt.group(1)) if tgt and last["op"] == "BRA" else None,
                    "cond": last["text"].startswith("@")})
    return res


def dynamic_path(bl: list[dict], loop_trips: int = 0, tiles: int = 1) -> list[int]:
    """Block indices executed at gamma = 0.99 (see the module docstring), loop bodies repeated loop_trips times.

    tiles > 1 (a kernel with RPP = tiles): the tile loop's back edge (the unconditional backward branch) is taken
    tiles - 1 times, and the loop's conditional EXIT ends the walk in the last tile."""
    path, n, trips, tile = [], 0, collections.Counter(), 0
    while n is not None and n < len(bl) and len(path) < 10 * len(bl) * tiles:
        b = bl[n]
        path.append(n)
        last = b["last"]
        if last["op"] == "EXIT" and (not b["cond"] or (tiles > 1 and tile == tiles - 1)):
            break
        if last["op"] == "BRA":
            t = b["target"]
            if not b["cond"]:
                if tiles > 1 and t is not None and t <= n:  # the tile loop's back edge
                    tile += 1
                n = t
            elif t is not None and t > n:  # forward conditional: taken iff it skips the rare branch or the loop
                skipped = bl[n + 1:t]
                rare = any(i["op"] == "REDUX" for s in skipped for i in s["ins"])
                loop = any(s["target"] is not None and s["target"] <= s["n"] and s["cond"] for s in skipped)
                n = t if rare or loop else n + 1
            elif trips[n] < loop_trips:  # backward conditional: the loop, repeated loop_trips times
                trips[n] += 1
                n = t
            else:
                n += 1
        else:
            n += 1
    return path


def report(name: str, k: dict, src_lines: list[str], lines: bool, loop_trips: int, rpp: int = 1, br: int = 1) -> dict:
    ins = parse(k["sass"], k["src"])
    bl = blocks(ins)
    path = dynamic_path(bl, loop_trips, rpp)
    regs = re.search(r"Used (\d+) registers", k["info"])
    spill = re.search(r"(\d+) bytes spill stores", k["info"])
    total = sum(len(bl[n]["ins"]) for n in path)
    dyn = round(total / (rpp * br), 1)
    tiles = f", a program of {rpp} tiles of {br} rows: {total} / {rpp * br}" if rpp * br > 1 else ""
    print(f"== {name}: static {len(ins)} instructions, {regs.group(1) if regs else '?'} registers, "
          f"{spill.group(1) if spill else 0} bytes spilled; dynamic estimate per thread per row "
          f"(gamma = 0.99, {loop_trips} loop trips{tiles}): {dyn}")
    on_path = set(path)
    for b in bl:
        lns = [i["line"] for i in b["ins"] if i["line"] and i["line"] > 0]
        first = src_lines[min(lns) - 1].strip()[:60] if lns else ""
        span = f"lines {min(lns)}-{max(lns)}" if lns else "lines -"
        ops = collections.Counter(i["op"] for i in b["ins"]).most_common(8)
        kind = "loop " if b["target"] is not None and b["target"] <= b["n"] else ""
        print(f"  block {b['n']:2d} @{b['start']:#06x} {len(b['ins']):4d} {'path' if b['n'] in on_path else 'skip'} "
              f"{kind}{span:14s} {first!r:64s} {dict(ops)}")
    if lines:
        per = collections.Counter(i["line"] for i in ins)
        ops = collections.defaultdict(collections.Counter)
        for i in ins:
            ops[i["line"]][i["op"]] += 1
        for ln in sorted(per, key=lambda x: (x is None, x or 0)):
            text = src_lines[ln - 1].strip()[:80] if ln and ln > 0 else "(no line / library)"
            print(f"    {ln!s:>5} {per[ln]:4d}  {text:80s} {dict(ops[ln].most_common(4))}")
    return {"static": len(ins), "dynamic": dyn, "dynamic_program": total, "blocks": [len(b["ins"]) for b in bl],
            "path": path}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=("triton", "pallas", "both"), default="both")
    ap.add_argument("--N", type=int, nargs="+", default=[101])
    ap.add_argument("--E", type=int, default=2)
    ap.add_argument("--dtype", choices=tuple(_JNP_DTYPES), default="fp32")
    ap.add_argument("--lines", action="store_true", help="also print the static count per source line")
    ap.add_argument("--loop-trips", type=int, default=0)
    ap.add_argument("--rpp", type=int, default=1, help="tiles per program (1: the one-tile kernel)")
    ap.add_argument("--br", type=int, default=1, help="rows per tile (2: the row pairs of large B at N <= 128)")
    ap.add_argument("--dump", default=None, help="folder for the SASS, PTX and Triton IR")
    a = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    names = ("triton", "pallas") if a.kernel == "both" else (a.kernel,)
    for n in a.N:
        for name in names:
            k = (triton_kernel if name == "triton" else pallas_kernel)(n, a.E, a.dtype, a.rpp, a.br)
            with open(k["src"]) as f:
                src_lines = f.read().splitlines()
            report(f"{name} N={n} E={a.E} {a.dtype} BR={a.br} RPP={a.rpp}", k, src_lines, a.lines, a.loop_trips,
                   a.rpp, a.br)
            if a.dump:
                os.makedirs(a.dump, exist_ok=True)
                for ext in ("sass", "ptx", "ttir"):
                    with open(os.path.join(a.dump, f"{name}_N{n}_{a.dtype}.{ext}"), "w") as f:
                        f.write(k[ext])


if __name__ == "__main__":
    main()
