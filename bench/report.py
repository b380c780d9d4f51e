"""Regenerate the results index (bench/results/README.md) and README.md's Results tables from the committed results.

    python -m bench report                  # rewrites both from bench/results/
    python -m bench report --check          # exits 1 when either is not what the committed results give
    python -m bench report --tiny --out DIR # writes both into DIR instead (what the smoke test runs)

Every job's newest run lives in ``bench/results/<job>/`` (``results.json`` + ``results.md``). The tables are built
from the raw JSON only, each with the results file it comes from, the machine, the date, the versions and the
command that regenerates it. A job folder that is absent is reported as not run; no number is typed in by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from bench.common import REPO, section_markers

RESULTS = os.path.join(REPO, "bench", "results")
README = os.path.join(REPO, "README.md")
BEGIN, END = section_markers("results")
JOB_COMMANDS = {
    "kernel": "python -m bench kernel --out bench/results/kernel --upstream PATH",
    "kernel-speed": "python -m bench kernel-speed --out bench/results/kernel-speed --sizes 512,2048,65536,1048576 "
                    "--bitwise --record-order",
    "kernel-validation": "python -m bench kernel-validate --out bench/results/kernel-validation/<run> --record",
    "agents": "python -m bench agents --out bench/results/agents",
    "vs-upstream": "python -m bench vs-upstream --upstream PATH --out bench/results/vs-upstream --upstream-dtype-fix",
    "mjx": "python -m bench mjx --framework jax --out bench/results/mjx/jax (and --framework torch)",
    "learning": "python -m bench learning run ... ; collect ... ; report bench/results/learning/* "
                "--out bench/results/learning",
    "harness": "python -m bench harness --out bench/results/harness",
    "gpu-recipe": "python -m bench gpu-recipe --out bench/results/gpu-recipe --upstream PATH",
    "breakdown": "python -m bench breakdown --out bench/results/breakdown --iters 100 --repeats 3 --warmup 10",
    "config-path": "python -m bench.config_path (CPU; c3538cd: the file copied into that checkout)",
}


def _load(*parts: str) -> dict | None:
    path = os.path.join(RESULTS, *parts)
    return json.load(open(path)) if os.path.isfile(path) else None


def _where(env: dict, path: str) -> str:
    date = (env.get("date_utc") or env.get("date") or "")[:10]
    versions = ", ".join(f"{k} {env[k]}" for k in ("torch", "triton", "jax") if env.get(k))
    return f"{env.get('gpu') or 'CPU'}, {date}, {versions}; [`{path}`]({path})"


def _med(v: list[float]) -> float:
    return float(np.median(v))


def kernel_table() -> list[str]:
    res = _load("kernel", "results.json")
    if res is None:
        return ["Not run: `" + JOB_COMMANDS["kernel"] + "`."]
    c, copy = res["config"], res["copy"]
    out = [f"Microseconds per call at N = {c['N']}, E = {c['E']}, fp32, median of {c['rounds']} interleaved rounds "
           f"(torch sides by CUDA-graph replay, JAX as device time in a jitted loop). Upstream: FlashSAC's two "
           f"`torch.compile`d functions from a copy of its repository. Floor: the log-probs read and the target "
           f"written at the bandwidth of a {copy['mib']:,} MiB device-to-device copy "
           f"({copy['bytes_per_s'] / 1e9:,.0f} GB/s). {_where(res['env'], 'bench/results/kernel/results.md')}. "
           f"Regenerate: `{JOB_COMMANDS['kernel']}`.", "",
           "| B | floor | upstream compiled | Triton (torch) | upstream / Triton | Pallas (JAX) | Triton / floor |",
           "|---|---|---|---|---|---|---|"]
    for r in res["sizes"]:
        us = r["us"]
        up, tri, pal = _med(us["upstream_compiled"]), _med(us["triton"]), _med(us["pallas"])
        ratio = _med([u / t for u, t in zip(us["upstream_compiled"], us["triton"], strict=True)])
        out.append(f"| {r['B']:,} | {r['floor_us']:.2f} | {up:.1f} | **{tri:.1f}** | {ratio:.2f}x | {pal:.1f} | "
                   f"{tri / r['floor_us']:.2f}x |")
    ch = res["checks"]
    bitwise = sum(bool(r.get("triton_pallas_bitwise")) for r in res["sizes"])
    err = max(max(r["max_abs_err_vs_float64"][k] for k in ("triton", "pallas")) for r in res["sizes"])
    out += ["", f"Triton and Pallas outputs bitwise equal at {bitwise} of {len(res['sizes'])} timed sizes and in the "
            f"{ch['configurations']}-configuration check ({'all passed' if not ch['failures'] else 'FAILURES'}; "
            f"each kernel identical over {ch['repeats']} repeats); largest error against the float64 specification "
            f"at the timed sizes {err:.1e}."]
    return out


def kernel_speed_table() -> list[str]:
    res = _load("kernel-speed", "results.json")
    if res is None:
        return ["Not run: `" + JOB_COMMANDS["kernel-speed"] + "`."]
    env, bw = res["env"], res["bandwidth"]
    names = [n for n in ("torch/triton", "jax/pallas", "jax/triton", "jax/mosaic", "jax/jax")
             if any(n in r["device_us"] for r in res["sizes"].values())]
    where = {"gpu": env.get("device"), "date": env.get("date"), **env.get("versions", {})}
    bits = "; ".join(f"{n} {b['equal']}/{b['compared']}" for n, b in res["bitwise"].items())
    out = [f"Each kernel's own device time per launch at N = {env['N']}, E = {env['E']}, {env['dtype']}, the same way "
           f"in both frameworks (the profilers' CUPTI kernel records, inputs rotated out of L2), µs; (x the torch "
           f"kernel); in brackets the in-program µs per call (JAX: a jitted `lax.scan` step; torch: CUDA-graph "
           f"replay). Floor: the log-probs read and the target written at {bw['bytes_per_s'] / 1e9:,.0f} GB/s (a 1 "
           f"GiB device-to-device copy, bytes read + written, CUDA events). "
           f"{_where(where, 'bench/results/kernel-speed/results.md')}. "
           f"Regenerate: `{JOB_COMMANDS['kernel-speed']}`.", "",
           "| B | floor | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for B, r in res["sizes"].items():
        cells = [f"{r['device_us'][n]:.1f} ({r['device_vs_torch'][n]:.2f}x) [{r['us'][n]:.1f}]"
                 if n in r["device_us"] else "-" for n in names]
        out.append(f"| {int(B):,} | {r['floor_us']:.2f} | " + " | ".join(cells) + " |")
    out += ["", f"Every JAX kernel's bits against the torch kernel's (timed sizes and adversarial shapes): {bits}."]
    return out


def agents_table() -> list[str]:
    res = _load("agents", "results.json")
    if res is None:
        return ["Not run: `" + JOB_COMMANDS["agents"] + "`."]
    c = res["config"]
    out = [f"Both CLIs, HalfCheetah-v4, B = 512, {c['num_env_steps']:,} env steps ({c['buffer_min_length']:,} "
           f"random), strict kernels, {c['rounds']} alternating rounds; steady = median over the logging windows "
           f"after the first update. {_where(res['env'], 'bench/results/agents/results.md')}. Regenerate: "
           f"`{JOB_COMMANDS['agents']}`.", "",
           "| agent | steady updates/s, median (min-max) | steady env steps/s, median |", "|---|---|---|"]
    for fw, s in res["summary"].items():
        u, e = s["steady_updates_per_second"], s["steady_env_steps_per_second"]
        out.append(f"| {fw} | {u['median']:.1f} ({u['min']:.1f}-{u['max']:.1f}) | {e['median']:.1f} |")
    r = res["jax_over_torch_steady_updates"]
    out += ["", f"JAX / torch steady updates/s per round: {r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f})."]
    up = _load("vs-upstream", "results.json")
    if up is None:
        out += ["", "Against upstream's own trainer: not yet run against a checkout of upstream's repository "
                f"(`{JOB_COMMANDS['vs-upstream']}`, PATH a clone of github.com/leeyngdo/FlashSAC)."]
    else:
        from bench.vs_upstream import cell, row_label, row_status

        parts = [f"{row_label(r)}: {cell(r.get('time_to_first_update_s')) or '-'} s / "
                 f"{cell(r.get('steady_updates_per_second')) or '-'}" + ("" if r["ok"] else f" ({row_status(r, up)})")
                 for r in up["rows"]]
        out += ["", "Against upstream's own `train.py`, time to first update / steady updates/s: "
                + "; ".join(parts) + f". {_where(up['env'], 'bench/results/vs-upstream/results.md')}, upstream "
                f"{up['config']['upstream_commit']}."]
    return out


def mjx_table() -> list[str]:
    runs = {fw: _load("mjx", fw, "results.json") for fw in ("jax", "torch")}
    if not any(runs.values()):
        return ["Not run: `" + JOB_COMMANDS["mjx"] + "`."]
    env = next(r for r in runs.values() if r)["env"]
    out = [f"halfcheetah on MJX, upstream's GPU recipe (batch 2048, 2 updates per step), one process per env count. "
           f"{_where(env, 'bench/results/mjx')}. Regenerate: `{JOB_COMMANDS['mjx']}`.", "",
           "| agent | envs | steady env steps/s | steady updates/s |", "|---|---|---|---|"]
    for fw, res in runs.items():
        for r in (res or {}).get("runs", []):
            if r.get("returncode") == 0:
                out.append(f"| {fw} | {r['num_envs']:,} | {r['steady_env_steps_per_second']:,.0f} | "
                           f"{r['steady_updates_per_second']:.1f} |")
    return out


def learning_table() -> list[str]:
    res = _load("learning", "results.json")
    if res is None:
        return ["Not run: `" + JOB_COMMANDS["learning"] + "`."]
    out = [f"Return at 100k env steps with the published protocol (learning rate decayed over 1M steps, 50 evaluation "
           f"episodes), against FlashSAC's published 5-seed figures (`bench/results/published/`). NVIDIA H200 runs "
           f"(each folder's README.md gives versions and commands); [`bench/results/learning/results.md`]"
           f"(bench/results/learning/results.md) has every row, the other schedule and the curves. Regenerate: "
           f"`{JOB_COMMANDS['learning']}`.", "",
           "| agent | task | seeds | mean [95 % CI] | published mean | p (same as published) |",
           "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if r["published_protocol"] and r["env_step"] == 100_000 and r["agent"] in ("torch", "jax"):
            m = r["mean"]
            p = "" if r["p"] is None else f"{r['p']:.2g}"
            out.append(f"| {r['agent']} | {r['task']} | {len(r['seeds'])} | {m[0]:,.0f} [{m[1]:,.0f}, {m[2]:,.0f}] | "
                       f"{r['published']['mean']:,.0f} | {p} |")
    return out


def readme_results() -> str:
    parts = [("Kernel against upstream's functions", kernel_table), ("Every kernel, like for like", kernel_speed_table),
             ("Agents", agents_table),
             ("Learning against published returns", learning_table), ("Agents on MJX", mjx_table)]
    lines = ["Generated by `python -m bench report` from `bench/results/` (the index: "
             "[`bench/results/README.md`](bench/results/README.md)).", ""]
    for title, table in parts:
        lines += [f"### {title}", "", *table(), ""]
    return "\n".join(lines).rstrip()


def results_index() -> str:
    lines = ["# Benchmark results", "", "Generated by `python -m bench report`. One folder per job, its newest run: "
             "`results.json` (raw) and `results.md` (machine, versions, date, command).", "",
             "| job | results | machine | date | regenerate |", "|---|---|---|---|---|"]
    for job, cmd in JOB_COMMANDS.items():
        folder = os.path.join(RESULTS, job)
        if not os.path.isdir(folder):
            lines.append(f"| {job} | not run | | | `{cmd}` |")
            continue
        env, machine = {}, ""
        for dirpath, _dirs, files in sorted(os.walk(folder)):
            if "results.json" in files and not env:
                env = json.load(open(os.path.join(dirpath, "results.json"))).get("env") or {}
            if "gpu.txt" in files and not machine:
                machine = open(os.path.join(dirpath, "gpu.txt")).read().split(",")[0].strip()
        date = (env.get("date_utc") or env.get("date") or "")[:10] or "see results.md"
        machine = env.get("gpu") or env.get("device") or machine or "see results.md"
        lines.append(f"| {job} | [`{job}/`]({job}/) | {machine} | {date} | `{cmd}` |")
    lines += ["", "`published/flashsac_gym_mujoco.csv` and `published/flashsac_suites_per_seed.csv`: FlashSAC's "
              "published returns on gym-MuJoCo and on DeepMind Control, MyoSuite and MuJoCo Playground (each header "
              "names the source), read by `python -m bench learning report`."]
    return "\n".join(lines) + "\n"


def replace_section(text: str, body: str) -> str:
    if BEGIN not in text or END not in text:
        raise ValueError(f"README.md has no {BEGIN} ... {END} markers around its Results tables")
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{body}\n{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when README.md or the index is stale")
    ap.add_argument("--out", default=None, help="write README.md and the index (results.md) here instead")
    ap.add_argument("--tiny", action="store_true", help="with --out: the same report, written outside the repository")
    ap.add_argument("--readme", default=README, help="the README whose Results section is rewritten or checked")
    a = ap.parse_args(argv)
    if a.tiny and not a.out:
        ap.error("--tiny: give --out DIR (the report is written there, not into the repository)")
    readme = replace_section(open(a.readme).read(), readme_results())
    index = results_index()
    if a.check:
        stale = [p for p, text in ((a.readme, readme), (os.path.join(RESULTS, "README.md"), index))
                 if not os.path.isfile(p) or open(p).read() != text]
        for p in stale:
            print(f"{p} is stale: run python -m bench report", file=sys.stderr)
        return 1 if stale else 0
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        targets = {os.path.join(a.out, "README.md"): readme, os.path.join(a.out, "results.md"): index}
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump({"readme_results": readme_results(), "index": index}, f, indent=1)
    else:
        targets = {a.readme: readme, os.path.join(RESULTS, "README.md"): index}
    for path, text in targets.items():
        with open(path, "w") as f:
            f.write(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
