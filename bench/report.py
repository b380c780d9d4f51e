"""Regenerate README.md's "Performance" section from the committed H200 results.

    python -m bench.report bench/results/h200-2026-11-29

Rewrites the text between the `<!-- performance:begin -->` and `<!-- performance:end -->` markers.
"""

from __future__ import annotations

import json
import os
import re
import sys

BEGIN, END = "<!-- performance:begin -->", "<!-- performance:end -->"


def section(folder: str) -> str:
    tri = json.load(open(os.path.join(folder, "triton", "results.json")))
    pal = json.load(open(os.path.join(folder, "pallas", "results.json")))
    env = tri["env"]
    out = [f"Measured on an {env['gpu']} on {env['date_utc'][:10]} (torch {env['torch']}, triton {env['triton']}, "
           f"jax {pal['env'].get('jax', '?')}, Python {env['python']}); raw data, commands and notes in "
           f"[`{folder}`]({folder}/README.md). Median microseconds per call; \"graph\" is CUDA-graph replay; "
           "the baseline is upstream FlashSAC's two `torch.compile`d functions (`bench/upstream.py`).", "",
           "| B | upstream compiled | fused Triton | speedup | upstream compiled, graph | Triton, graph | speedup | "
           "bytes/bandwidth floor |", "|---|---|---|---|---|---|---|---|"]
    for r in tri["timing"]:
        out.append(f"| {r['B']} | {r['upstream_compiled_direct_us']:.1f} | {r['ours_triton_direct_us']:.1f} | "
                   f"{r['speedup_direct_vs_upstream_compiled']:.2f}x | {r['upstream_compiled_graph_us']:.1f} | "
                   f"{r['ours_triton_graph_us']:.1f} | {r['speedup_graph_vs_upstream_compiled_graph']:.2f}x | "
                   f"{r['bytes_floor_us']:.1f} |")
    out += ["", "| B | Pallas in jit | jnp reference in jit | speedup | Triton, graph |", "|---|---|---|---|---|"]
    for r in pal["timing"]:
        if "pallas_us" in r:
            out.append(f"| {r['B']} | {r['pallas_us']:.1f} | {r['jnp_ref_us']:.1f} | {r['speedup_vs_jnp_ref']:.1f}x | "
                       f"{r['triton_graph_us']:.1f} |")
    corr = tri["correctness"]
    out += ["", f"Correctness (Triton, {len(corr)} configurations): max error vs the float64 spec "
            f"{max(c['max_abs_vs_float64'] for c in corr):.2g}, vs the torch fp32 path "
            f"{max(c['max_abs_vs_torch_fp32'] for c in corr):.2g}, row-mass error "
            f"{max(c['max_mass_error'] for c in corr):.2g}; bitwise deterministic over 100 repeats.", "",
            f"![speedup]({folder}/triton/speedup.png)"]
    return "\n".join(out)


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else "bench/results/h200-2026-11-29"
    text = open("README.md").read()
    new = f"{BEGIN}\n{section(folder)}\n{END}"
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: new, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + new + "\n"
    open("README.md", "w").write(text)


if __name__ == "__main__":
    main()
