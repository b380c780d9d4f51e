"""Regenerate README.md's "Performance" section from the committed H200 results.

    python -m bench.report bench/results/h200-2026-12-02-pallas-rpp bench/results/h200-2026-11-29-agents \\
        bench/results/h200-2026-11-29 bench/results/h200x2-2026-11-29-agents bench/results/h200-2026-11-29-update-speed

The first folder holds the kernel results of `bench/gpu_kernel_checks.sh` (bitwise/, checks/; one call or its two
halves); a folder with checks/ only (bench.gpu_checks sections re-run later, e.g. the eager host time after a change
to the dispatch) replaces those sections wherever it is listed; of the others, the first one holds the agents'
seed-0 runs (agent_*_halfcheetah_seed0/summary.json), any further ones more JAX runs
(agent_jax*_halfcheetah_seed*/); the kernel harness (harness/results.json), the paired training benchmark
(paired/results.json) and the torch vs JAX update comparison (compare/*.json, bench/gpu_update_compare.py) come from
the last agents folder that has them.

Rewrites the text between the `<!-- performance:begin -->` and `<!-- performance:end -->` markers.
"""

from __future__ import annotations

import glob
import json
import math
import os
import statistics
import sys

from bench.common import replace_readme_section, section_markers
from bench.harness.report import fast_p_table
from bench.harness.scoring import fast_p_summary

BEGIN, END = section_markers("performance")


# bench.gpu_checks sections -> what they check (README wording).
CHECKS = {
    "triton": "Triton bitwise determinism over 100 repeats, `torch.compile(fullgraph=True)` (no graph break, "
              "bitwise equal to eager), CUDA-graph capture and replay with new inputs, `torch.library.opcheck`",
    "pallas_determinism": "Pallas bitwise determinism over 100 repeats",
    "nan_policy": "the NaN policy in both kernels",
    "strict": "strict mode in both frameworks",
    "pallas_vjp": "the Pallas op's custom_vjp (zero gradients, primal bitwise equal to the forward)",
    "fast_launch": "the eager fast launch path bitwise equal to `JITFunction.run` on 32 launch signatures",
}


def _cell(t: dict) -> str:
    """"median (min-max)" of one variant's interleaved rounds."""
    return f"{t['median']:.1f} ({t['min']:.1f}-{t['max']:.1f})"


def _ratio(num: list[float], den: list[float]) -> str:
    """Median and range of the per-round ratios num / den (the rounds are interleaved: same machine state)."""
    r = [a / b for a, b in zip(num, den, strict=True)]
    return f"{statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})"


def section(folder: str, later: str | None = None) -> str:
    """The kernel section from one GPU call of bench/gpu_kernel_checks.sh: ``bitwise/results.json``
    (bench.gpu_bitwise: the bitwise case matrix and the interleaved timings, with the kernel times that
    bench.gpu_bitwise records since 2026-12-03) and ``checks/results.json``
    (bench.gpu_checks: eager host time and the contract checks). ``later``: a folder whose ``checks/results.json``
    re-ran some of those sections since (after a change to the code they check); its sections replace the first
    folder's, and the text names it."""
    bit = json.load(open(os.path.join(folder, "bitwise", "results.json")))
    chk = json.load(open(os.path.join(folder, "checks", "results.json")))
    rerun_note = ""
    if later is not None:
        new = json.load(open(os.path.join(later, "checks", "results.json")))
        rerun = [k for k in new if k in CHECKS or k == "eager_host_time"]
        chk = {**chk, **{k: new[k] for k in rerun},
               "failures": [f for f in chk["failures"] if f.split(".")[0] not in rerun] + new["failures"]}
        rerun_note = (f" Re-run on {new['env']['date_utc'][:10]} after a change to the code they check, on another "
                      f"lent machine ({', '.join(f'`{k}`' for k in rerun)}; [`{later}`]({later}/README.md)).")
    env, timing = bit["env"], bit["timing"]
    sizes = timing["sizes"]
    rounds = len(next(iter(next(iter(sizes.values()))["times"].values()))["all"])
    bw = timing["copy_bandwidth_bytes_per_s"] / 1e12
    out = [f"Measured on an {env['gpu']} on {env['date'][:10]} (torch {env['torch']}, triton {env['triton']}, "
           f"jax {env['jax']}, Python {env['python']}) by `bench.gpu_bitwise` and `bench.gpu_checks` (the two halves "
           f"of `bash bench/gpu_kernel_checks.sh`); raw data, commands and notes in [`{folder}`]({folder}/README.md). "
           f"Microseconds per call, median (min-max) of {rounds} rounds "
           "in one process, every variant once per round: torch sides by CUDA-graph replay of 20 calls, the "
           "baseline is upstream FlashSAC's two `torch.compile`d functions (`bench/upstream.py`); Pallas as device "
           "time per call, a jitted loop of dependent calls minus the same loop without the kernel. Ratios are the "
           "median (min-max) of the per-round ratios. Bytes floor: one read of the selected critic's log-probs and "
           f"one write of the output at the copy bandwidth measured in the same process ({bw:.2f} TB/s, read + "
           "write).", "",
           "Kernel time (the last three columns): both pinned kernels' device durations per launch from one CUPTI "
           "session per round (torch.profiler's kernel records), each call followed by a sum of its output that the "
           "next call waits for (the Pallas loop; a CUDA graph of the Triton kernel with the same sum), so one tool "
           "and one pattern time both; the per-call columns use different methods for the two frameworks and are not "
           "a Pallas / Triton comparison.", "",
           "| B | bytes floor | upstream compiled | Triton | Triton / floor | upstream / Triton | Pallas per call | "
           "kernel time Triton | kernel time Pallas | Pallas / Triton kernel time |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for B, row in sizes.items():
        t = row["times"]
        tri = next(v for k, v in t.items() if k.startswith("triton_pinned"))
        up, pal = t["upstream_compiled"], t["pallas_pinned"]
        kt, kp = t["kernel/triton"], t["kernel/pallas"]
        out.append(f"| {int(B):,} | {row['floor_us']:.1f} | {_cell(up)} | **{_cell(tri)}** | "
                   f"{tri['median'] / row['floor_us']:.1f}x | {_ratio(up['all'], tri['all'])} | {_cell(pal)} | "
                   f"{_cell(kt)} | {_cell(kp)} | {_ratio(kp['all'], kt['all'])} |")
    eager = chk["eager_host_time"]
    us = {k: v["median"] for k, v in eager["us"].items()}
    met = us["op_auto"] <= eager["target_us"]
    out += ["", f"Eager call of `torch_impl.categorical_td_target` at B = {eager['B']}, host time (median of "
            f"{eager['calls_per_variant']} calls, interleaved blocks): **{us['op_auto']:.1f} us** (target <= "
            f"{eager['target_us']:.0f}: {'met' if met else 'NOT met'}); a bare launch of the same kernel "
            f"{us['bare_launch']:.1f} us ({us['bare_launch_jit_run']:.1f} through Triton's `JITFunction.run`), the "
            f"dispatch alone {us['dispatch_only']:.1f}, `torch.empty` of the output {us['torch_empty_output']:.1f}, "
            f"an empty torch custom op {us['empty_custom_op']:.1f}, the registered custom op "
            f"{us['registered_custom_op']:.1f}. The host's speed varies between lent machines: the call is "
            f"{us['op_auto'] / us['empty_custom_op']:.2f}x an empty custom op and "
            f"{us['op_auto'] / us['bare_launch']:.2f}x the bare launch on this one." + rerun_note]
    b = bit["bitwise"]
    out += ["", f"Bitwise: Triton (pip) and Pallas (the Triton inside XLA) outputs identical in "
            f"{b['bitwise_count']} of {b['configurations']} configurations of `bench.gpu_bitwise`'s case matrix; "
            f"bitwise deterministic over 50 repeats: Triton {'yes' if b['deterministic_triton_50'] else 'NO'}, "
            f"Pallas {'yes' if b['deterministic_pallas_50'] else 'NO'}; max error vs the float64 spec "
            f"{max(r['max_err_vs_float64'] for r in b['rows']):.2g}."]
    failed = chk["failures"]
    passed = [what for key, what in CHECKS.items() if key in chk and not any(f.startswith(key + ".") for f in failed)]
    out += ["", "Contract checks (`bench.gpu_checks`): " + (
        "all passed: " if not failed else "FAILED: " + ", ".join(failed) + "; passed: ") + "; ".join(passed) + "."]
    return "\n".join(out)


def _jax_runs(folder: str) -> list[tuple[str, dict]]:
    """(label, summary) of the extra JAX 100k runs in ``folder`` (agent_jax*_halfcheetah_seed*/summary.json)."""
    runs = []
    for path in sorted(glob.glob(os.path.join(folder, "agent_jax*_halfcheetah_seed*", "summary.json"))):
        s = json.load(open(path))
        init = ", torch agent's initial weights" if "torchinit" in path else ""
        runs.append((f"JAX + Pallas, seed {s['seed']}{init} (*)", s))
    return runs


def agents_section(folder: str, *more: str) -> str:
    """The agents' 100k runs (seed 0 of both from ``folder``, further JAX runs from ``more``), their isolated
    update-step timings, the kernel harness and the paired training benchmark (each from the last folder that has
    it)."""
    out = ["", "", "Agents (100k HalfCheetah-v4 env steps, upstream's CPU-sim recipe; seed 0 of both agents in "
           f"[`{folder}`]({folder}/README.md), trained at the same time on one GPU, so their wall-clock includes "
           "contention; update times are isolated, median ms per full update at B = 512 on each run's final "
           "checkpoint):", "",
           "| agent, target backend | return at 100k | train wall s | env steps/s | update ms: reference | "
           "update ms: fused kernel |", "|---|---|---|---|---|---|"]
    for fw, name in (("torch", "torch + Triton, CUDA graphs, seed 0"), ("jax", "JAX + Pallas, seed 0")):
        path = os.path.join(folder, f"agent_{fw}_halfcheetah_seed0", "summary.json")
        if not os.path.exists(path):
            continue
        s = json.load(open(path))
        t = s["paired_update_timing"]
        ref, ker = (t["graph/torch"], t["graph/triton"]) if fw == "torch" else (t["jax"], t["pallas"])
        out.append(f"| {name} | {s['final_return']:,.0f} | {s['train_wall_seconds']:.0f} | "
                   f"{s['env_steps_per_second']:.0f} | {ref['update_ms']:.3f} | {ker['update_ms']:.3f} |")
        if fw == "torch":
            eager = (t["eager/torch"]["update_ms"], t["eager/triton"]["update_ms"])
            out.append(f"| torch eager (`agent.use_cuda_graph=false`), same checkpoint | | | | {eager[0]:.2f} | "
                       f"{eager[1]:.2f} |")
    for extra in more:
        runs = _jax_runs(extra)
        for label, s in runs:
            out.append(f"| {label} | {s['final_return']:,.0f} | {s['train_wall_seconds']:.0f} | "
                       f"{s['env_steps_per_second']:.0f} | | |")
        if runs:
            out += ["", f"(*) [`{extra}`]({extra}/README.md): {len(runs)} runs trained at the same time on one GPU."]
    folders = (folder, *more)
    harness = [f for f in folders if os.path.exists(os.path.join(f, "harness", "results.json"))]
    if harness:
        out += ["", harness_section(harness[-1])]
    paired = [f for f in folders if os.path.exists(os.path.join(f, "paired", "results.json"))]
    if paired:
        res = json.load(open(os.path.join(paired[-1], "paired", "results.json")))
        parts = []
        for key, what in (("summary", "process"), ("summary_loop", "training loop")):
            parts += [f"{fw} {what} {v['n']} pairs, mean {v['mean']:+.2f} %, median {v['median']:+.2f} %, range "
                      f"{v['min']:+.2f} .. {v['max']:+.2f} %" for fw, v in res.get(key, {}).items()
                      if isinstance(v, dict)]
        out += ["", "Paired end-to-end training benchmark (wall-clock saving of the fused kernel over the reference "
                f"backend, {res['config']['num_env_steps']}-step runs, [`{paired[-1]}/paired`]"
                f"({paired[-1]}/paired/results.md)): {'; '.join(parts)}."]
    compare = [f for f in folders if glob.glob(os.path.join(f, "compare", "*.json"))]
    if compare:
        out += ["", compare_section(compare[-1])]
    return "\n".join(out)


def compare_section(folder: str) -> str:
    """The torch vs JAX agent update-step comparison (bench.gpu_update_compare): one row per run, then the JAX /
    torch ratio pooled over every repeat of every run."""
    runs = [(os.path.splitext(os.path.basename(p))[0], json.load(open(p)))
            for p in sorted(glob.glob(os.path.join(folder, "compare", "*.json")))]
    names = list(runs[0][1]["update_ms"])
    out = ["Update step, torch vs JAX agent (`python -m bench.gpu_update_compare`: both agents in one process, "
           f"interleaved blocks of {runs[0][1]['iters']} `agent.update` calls on random batches, B = "
           f"{runs[0][1]['batch_size']}, strict backends, median ms per update; torch with CUDA graphs; "
           f"[`{folder}`]({folder}/README.md)):", "",
           "| run | repeats | " + " | ".join(names) + f" | {runs[0][1]['ratio']['pair']}, median per repeat |",
           "|---|---|" + "---|" * (len(names) + 1)]
    ratios: list[float] = []
    for run, r in runs:
        ratios += r["ratio"]["per_repeat"]
        out.append(f"| {run} | {r['repeats']} | " + " | ".join(f"{r['update_ms'][n]:.3f}" for n in names)
                   + f" | {r['ratio']['median']:.3f} |")
    faster = sum(x < 1 for x in ratios)
    pair = runs[0][1]["ratio"]["pair"]
    geomean = math.exp(statistics.fmean(map(math.log, ratios)))
    out += ["", f"Over all {len(ratios)} repeats: {pair} median {statistics.median(ratios):.3f}, geometric mean "
            f"{geomean:.3f}, range {min(ratios):.2f} .. {max(ratios):.2f}; JAX faster in {faster} of {len(ratios)}."]
    return "\n".join(out)


def harness_section(folder: str) -> str:
    """The kernel harness's fast_p summaries (bench.harness: direct calls, and device time) and its speedup plot."""
    res = json.load(open(os.path.join(folder, "harness", "results.json")))
    env = res["env"]
    lines = [f"Kernel harness (`python -m bench.harness`, {len(res['cases'])} cases, every implementation through "
             f"compile -> correctness -> determinism -> integration -> performance; {env['gpu']}, "
             f"{env['date_utc'][:10]}, [`{folder}/harness`]({folder}/harness/results.md)). fast_p: share of cases "
             "correct and faster than upstream's compiled path by more than p. Direct calls (torch sides timed "
             "per call, launch overhead included; JAX sides as a jitted loop against the compiled path's CUDA "
             "graph):", ""]
    lines += fast_p_table(res["fast_p"], "")[2:]
    lines += ["Device time (torch sides by CUDA-graph replay on both sides):", ""]
    lines += fast_p_table(res.get("fast_p_device") or fast_p_summary(res["records"], device_time=True), "")[2:]
    return "\n".join(lines + [f"![harness speedup]({folder}/harness/speedup.png)"])


def is_checks_only(folder: str) -> bool:
    """A folder of bench.gpu_checks sections re-run without the bitwise half (checks/ but no bitwise/)."""
    return (os.path.isfile(os.path.join(folder, "checks", "results.json"))
            and not os.path.isdir(os.path.join(folder, "bitwise")))


def report_body(folders: list[str]) -> str:
    """The Performance section for the command line's folders (see the module docstring)."""
    later = [f for f in folders[1:] if is_checks_only(f)]
    agents = [f for f in folders[1:] if f not in later]
    return section(folders[0], later[-1] if later else None) + (agents_section(*agents) if agents else "")


def main() -> None:
    body = report_body(sys.argv[1:] or ["bench/results/h200-2026-11-29"])
    replace_readme_section("performance", body, "README.md")


if __name__ == "__main__":
    main()
