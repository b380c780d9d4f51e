"""Ahead-of-time compilation of the kernel for a CUDA target on a machine without a GPU (docs/kernel_notes.md).

    python -m triton_kernels.aot --arch 90 --N 101 --E 2

prints the registers, spills and barriers that the bundled ptxas reports for each pinned configuration (at
B = 2**20 rows unless --B says otherwise; --rpp 1 16 compiles those tiles per program instead), so CI
proves the kernel compiles for the H200 (sm_90) and tracks its register pressure. Must run without
TRITON_INTERPRET=1 (the interpreter replaces the JIT function at decoration time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from shared_spec.launch_config import kernel_config, with_overrides
from triton_kernels.categorical_td_target import categorical_td_target_kernel

__all__ = ["BIN", "assemble", "compile_for_target", "compile_kernel", "sass_text"]

_INT_ARGS = ("q_stride_e", "q_stride_b", "lp_stride_e", "lp_stride_b", "r_stride", "d_stride", "s_stride",
             "out_stride_b", "B")


BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")  # the bundled ptxas, nvdisasm


def compile_kernel(N: int = 101, E: int = 2, arch: int = 90, BR: int | None = None, num_warps: int | None = None,
                   lp_dtype: str = "fp32", RPP: int | None = None, B: int = 1 << 20,
                   kernel: Any = None) -> tuple[Any, int, int, int]:
    """The kernel compiled by Triton for `sm_<arch>` with the pinned configuration at B rows (or the given BR,
    num_warps, RPP; Q follows from them: `shared_spec.launch_config.with_overrides`), on any machine. kernel: another
    JIT function with this signature (a baseline kernel file's; one without the RPP or Q parameter is compiled
    without it).

    Returns:
        (Triton's compiled kernel, with ``asm["ttir" | "ttgir" | "ptx" | "cubin"]``; BR; num_warps; RPP).
    """
    over = {k: v for k, v in (("BR", BR), ("num_warps", num_warps), ("RPP", RPP)) if v is not None}
    cfg = with_overrides(kernel_config(B, N, interpret=False), over, False)
    BR, num_warps, RPP = cfg["BR"], cfg["num_warps"], cfg["RPP"]
    sig = {"q_ptr": "*fp32", "lp_ptr": f"*{lp_dtype}", "r_ptr": "*fp32", "d_ptr": "*fp32", "s_ptr": "*fp32",
           "out_ptr": "*fp32", "gamma": "fp32", "min_v": "fp32", "inv_delta": "fp32", "lp_stride_n": "constexpr",
           "E": "constexpr", "N": "constexpr", "BLOCK_N": "constexpr", "BR": "constexpr", "RPP": "constexpr",
           "Q": "constexpr"}
    sig.update({name: "i32" for name in _INT_ARGS})
    fn = categorical_td_target_kernel if kernel is None else kernel
    order = fn.arg_names
    constexprs = {"lp_stride_n": 1, "E": E, "N": N, "BLOCK_N": cfg["BLOCK_N"], "BR": BR, "RPP": RPP, "Q": cfg["Q"]}
    src = ASTSource(fn=fn, signature={k: sig[k] for k in order},
                    constexprs={k: v for k, v in constexprs.items() if k in order})
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})
    return compiled, BR, num_warps, RPP


def assemble(ptx: str, arch: int = 90, line_info: bool = False) -> tuple[str, str]:
    """The bundled ptxas (sm_<arch>a, -v) and nvdisasm -c on a PTX text: (ptxas's resource report, the SASS listing).
    line_info: ptxas -lineinfo and nvdisasm -gi (source lines beside the instructions, where nvdisasm can)."""
    with tempfile.TemporaryDirectory() as tmp:
        path, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(path, "w") as f:
            f.write(ptx)
        info = subprocess.run([os.path.join(BIN, "ptxas"), f"-arch=sm_{arch}a", "-v", *(["-lineinfo"] * line_info),
                               path, "-o", cubin], capture_output=True, text=True, check=True).stderr
        sass = ""
        if line_info:
            sass = subprocess.run([os.path.join(BIN, "nvdisasm"), "-c", "-gi", cubin], capture_output=True,
                                  text=True).stdout
        if not sass.strip():
            sass = subprocess.run([os.path.join(BIN, "nvdisasm"), "-c", cubin], capture_output=True, text=True,
                                  check=True).stdout
    return info, sass


def sass_text(compiled: Any, arch: int = 90) -> str:
    """The SASS instructions of a compiled kernel (bundled ptxas for sm_<arch>a, then nvdisasm), one per line,
    without addresses or line information: two kernels with equal text run the same instructions."""
    text = assemble(compiled.asm["ptx"], arch)[1]
    return "\n".join(re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", line).split(";")[0].strip()
                     for line in text.splitlines() if re.match(r"\s*/\*[0-9a-f]{4,}\*/", line))


def compile_for_target(N: int = 101, E: int = 2, arch: int = 90, BR: int | None = None,
                       num_warps: int | None = None, lp_dtype: str = "fp32", RPP: int | None = None,
                       B: int = 1 << 20) -> dict:
    """Compile to PTX + cubin for `sm_<arch>` and read ptxas's resource usage.

    Returns:
        {"arch", "N", "E", "BR", "num_warps", "RPP", "registers", "spill_bytes", "barriers", "ptx_lines", ...}.
    """
    compiled, BR, num_warps, RPP = compile_kernel(N, E, arch, BR, num_warps, lp_dtype, RPP, B)
    info = assemble(compiled.asm["ptx"], arch)[0]
    regs = re.search(r"Used (\d+) registers", info)
    spill = re.search(r"(\d+) bytes spill stores", info)
    bars = re.search(r"used (\d+) barriers", info)
    return {"arch": arch, "N": N, "E": E, "BR": BR, "num_warps": num_warps, "RPP": RPP, "lp_dtype": lp_dtype,
            "registers": int(regs.group(1)) if regs else None, "spill_bytes": int(spill.group(1)) if spill else 0,
            "barriers": int(bars.group(1)) if bars else 0, "ptx_lines": compiled.asm["ptx"].count("\n"),
            "cubin_bytes": len(compiled.asm["cubin"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--N", type=int, nargs="+", default=[101])
    ap.add_argument("--E", type=int, default=2)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--B", type=int, default=1 << 20, help="rows: the pinned configuration at this B")
    ap.add_argument("--rpp", type=int, nargs="+", default=[None], help="tiles per program (default: pinned at --B)")
    a = ap.parse_args()
    for n in a.N:
        for rpp in a.rpp:
            print(json.dumps(compile_for_target(n, a.E, a.arch, lp_dtype=a.dtype, RPP=rpp, B=a.B)))


if __name__ == "__main__":
    main()
