"""The torch agent's compilation levers side by side: per variant the update alone, acting and the training step,
timed in one process in interleaved rounds, and the time to first update of fresh CLI runs, caches cold and warm.

    python -m bench torch-levers --out $OUT/levers                               # GPU: the default variants
    python -m bench torch-levers --variants graph,update --tiny --out /tmp/levers  # CPU: tests the job

Variants (``TORCH_VARIANTS``, on top of ``bench.breakdown.recipe``'s CPU-simulator recipe; all capture the update and
acting in CUDA graphs on a GPU):

    graph            no torch.compile (``bench.common.TORCH_RECIPE_EXTRA``: the recipe's path today)
    networks         compile_mode=default over each network's forward and projection (compile_scope=networks)
    update           compile_mode=default over the whole update and acting (compile_scope=update)
    update-combo     the same with Inductor's combo kernels (independent kernels launched as one:
                     ``FLASHSAC_TORCH_INDUCTOR_OPTIONS=combo_kernels=True``)
    update-autotune  the same with max-autotune-no-cudagraphs (Inductor autotunes its kernels: a slower start)
    update-dynamo-cache  update with torch's experimental caching precompile (``TORCH_CACHING_PRECOMPILE=1``: Dynamo's
                     compiled frames saved with the caches, for the warm start); in-process it is ``update``
    update-device    update with the device replay (``agent.buffer_device_type=cuda``: the agent's ``step`` samples
                     on the device and reads nothing back)
    update-device-overlap  the same with ``agent.overlap_critic_step=true`` (acting overlaps the critic's part)
    graph-device-overlap   graph with the device replay and the overlap

In-process: one ``bench.breakdown.LoopParts`` per variant (its own env, replay buffer filled with ``--fill`` random
steps, agent), each warmed up (compilation, graph capture: at least ``UPDATE_WARMUP_PERIODS`` actor-update periods of
updates and of training steps), then ``--repeats`` rounds; a round times one block of ``--iters`` calls of each part
of each variant, the variants' order rotated by the round; the device is synchronised around each block. Per part:
median and min-max of the rounds' ms per call.

Time to first update, per variant of ``--first-update-variants``: ``python -m agent_torch.train`` on the same
overrides with ``--fill`` warm-up steps and ``FIRST_UPDATE_EXTRA_STEPS`` more, in a fresh process with empty
``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` (a fresh machine's compiler caches, the categorical-target
kernel's included), then once more on the caches that run filled (a second run of the same configuration): the CLI's
``time_to_first_update`` (launch to the first update's return) and, for compile_scope=update, how long its background
compilation took. These runs come first, one after another; the in-process agents then compile on a merge of the
caches those runs filled.

``--tiny`` (CPU): tiny networks, variants graph and update; the compiled pieces run with
``FLASHSAC_TORCH_COMPILE_BACKEND=aot_eager`` (the same graphs without Inductor's minutes of C++ compilation), so it
tests the job, not the levers; ``networks``, if named, still compiles with Inductor (minutes on a CPU).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import statistics
import sys
import tempfile
from typing import Any

from bench.breakdown import LoopParts, recipe, update_blocks
from bench.common import (
    TORCH_RECIPE_EXTRA,
    block_seconds,
    environment,
    fmt,
    merge_overrides,
    parse_result_line,
    timed_run,
    tiny_defaults,
    train_command,
    write_results,
)

__all__ = ["FIRST_UPDATE_EXTRA_STEPS", "TORCH_VARIANTS", "VARIANT_PARTS", "main"]

_COMPILED = ["agent.use_compile=true", "agent.use_cuda_graph=true"]
_UPDATE = [*_COMPILED, "agent.compile_mode=default", "agent.compile_scope=update"]
TORCH_VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {  # name -> (config overrides, environment)
    "graph": (list(TORCH_RECIPE_EXTRA), {}),
    "networks": ([*_COMPILED, "agent.compile_mode=default", "agent.compile_scope=networks"], {}),
    "update": (_UPDATE, {}),
    "update-combo": (_UPDATE, {"FLASHSAC_TORCH_INDUCTOR_OPTIONS": "combo_kernels=True"}),
    "update-autotune": ([*_COMPILED, "agent.compile_mode=max-autotune-no-cudagraphs", "agent.compile_scope=update"],
                        {}),
    "update-dynamo-cache": (_UPDATE, {"TORCH_CACHING_PRECOMPILE": "1"}),
    "update-device": ([*_UPDATE, "agent.buffer_device_type=cuda"], {}),
    "update-device-overlap": ([*_UPDATE, "agent.buffer_device_type=cuda", "agent.overlap_critic_step=true"], {}),
    "graph-device-overlap": ([*TORCH_RECIPE_EXTRA, "agent.buffer_device_type=cuda", "agent.overlap_critic_step=true"],
                             {}),
}
VARIANT_PARTS = ("update", "act", "training step")
FIRST_UPDATE_EXTRA_STEPS = 100  # updates after the first: both CUDA graphs captured (GraphCache: 3 eager calls each)
_BACKGROUND = re.compile(r"torch update compiled in the background in ([0-9.]+) s \(waited ([0-9.]+) s")


def parse_variants(text: str) -> list[str]:
    """``graph,update`` -> ["graph", "update"]; raises ValueError naming an unknown variant."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in names if v not in TORCH_VARIANTS]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(f"--variants: expected distinct names among {', '.join(TORCH_VARIANTS)}, got {text!r}")
    return names


def first_update(variant: str, overrides: list[str], backend: str, fill: int, out: str, caches: str, tag: str,
                 timeout_s: float, extra_env: dict[str, str]) -> dict[str, Any]:
    """Time to first update of one CLI run whose compiler caches are in ``caches`` (empty for a cold run, as a
    fresh machine's; the run directory goes there too)."""
    env = dict(extra_env, TORCHINDUCTOR_CACHE_DIR=os.path.join(caches, "inductor"),
               TRITON_CACHE_DIR=os.path.join(caches, "triton"))
    steps = fill + FIRST_UPDATE_EXTRA_STEPS
    run_overrides = merge_overrides(overrides, [f"evaluation_per_interaction_step={steps}",
                                                f"save_checkpoint_per_interaction_step={steps}", "save_buffer=false"])
    cmd = train_command("torch", backend, 0, steps, tempfile.mkdtemp(prefix=f"run-{tag}-", dir=caches), run_overrides)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    rec = timed_run(cmd, os.path.join(out, "logs", f"first-update-{variant}-{tag}.log"), timeout_s, env)
    with open(rec["log"]) as f:
        text = f.read()
    rec.update(parse_result_line(text))
    found = _BACKGROUND.search(text)
    if found:
        rec["background_compile_s"], rec["first_update_waited_s"] = float(found.group(1)), float(found.group(2))
    print(f"  first update, {variant} ({tag} caches): rc={rec['returncode']} time_to_first_update="
          f"{rec.get('time_to_first_update_s')} s (process {rec['wall_s']:.1f} s)", flush=True)
    return rec


def _with_env(env: dict[str, str], fn: Any) -> Any:
    """``fn()`` with ``env`` set in this process's environment (restored afterwards)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return fn()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def measure_variants(overrides: dict[str, list[str]], fill: int, iters: int, repeats: int,
                     warmup: int) -> dict[str, dict[str, Any]]:
    """Every variant's parts in interleaved rounds: {variant: {"ms": {part: [ms per call, per round]}, ...}}; a
    variant that fails to build or warm up gets {"error": ...} and the others go on."""
    import torch

    runs: dict[str, LoopParts] = {}
    out: dict[str, dict[str, Any]] = {}
    syncs = {}
    try:
        for name, ov in overrides.items():
            print(f"  building {name}", flush=True)
            try:
                run = runs[name] = _with_env(TORCH_VARIANTS[name][1], lambda ov=ov: LoopParts("torch", ov, fill))
                device = run.agent.device
                syncs[name] = ((lambda _, d=device: torch.cuda.synchronize(d)) if device.type == "cuda"
                               else (lambda _: None))
            except Exception as exc:  # reported with the variant; the others are still measured
                out[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                print(f"  {name} failed: {out[name]['error']}", flush=True)
        for name, run in list(runs.items()):
            try:
                _, update_warmup = update_blocks(run, iters, warmup)
                for call, n in ((run.update, update_warmup), (run.training_step, update_warmup), (run.act, warmup)):
                    block_seconds(lambda _, c=call: c(), max(n, 1), syncs[name])  # compilation, capture
            except Exception as exc:
                out[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                print(f"  {name} failed: {out[name]['error']}", flush=True)
                runs.pop(name).close()
                continue
            print(f"  warmed up {name}", flush=True)
        ms: dict[str, dict[str, list[float]]] = {name: {part: [] for part in VARIANT_PARTS} for name in runs}
        names = list(runs)
        for rnd in range(repeats if names else 0):
            for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                run = runs[name]
                update_iters, _ = update_blocks(run, iters, warmup)
                calls = {"update": (run.update, update_iters), "act": (run.act, iters),
                         "training step": (run.training_step, update_iters)}
                for part in VARIANT_PARTS:
                    call, n = calls[part]
                    ms[name][part].append(1e3 * block_seconds(lambda _, c=call: c(), n, syncs[name]))
            print(f"  round {rnd}: " + ", ".join(f"{n} update {ms[n]['update'][-1]:.3f} ms" for n in names),
                  flush=True)
        for name, run in runs.items():
            out[name] = {"ms": ms[name], "build_and_fill_s": run.build_s,
                         "compute_path": run.agent.info()["compile/path"]}
        return out
    finally:
        for run in runs.values():
            run.close()


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _report(out: str, res: dict) -> str:
    c = res["config"]
    lines = [f"# Torch compilation levers ({res['env'].get('gpu') or 'CPU'}, {res['env']['date_utc']})", "",
             f"`{res['env']['command']}`: {c['iters']} calls per block, {c['repeats']} interleaved rounds, "
             f"--fill {c['fill']}; ms per call, median (min-max) of the rounds.", "",
             "| variant | update ms | updates/s (update alone) | act ms | training step ms | training steps/s | "
             "time to first update s, cold / warm caches | background compile s, cold / warm |",
             "|---|---|---|---|---|---|---|---|"]
    for name, v in res["variants"].items():
        s = {part: _summary(vals) for part, vals in v.get("ms", {}).items() if vals}
        first, warm = v.get("first_update", {}), v.get("first_update_warm", {})
        cell = {p: f"{x['median']:.3f} ({x['min']:.3f}-{x['max']:.3f})" for p, x in s.items()}
        cell.update({p: "" for p in VARIANT_PARTS if p not in s})
        rate = {p: fmt(1e3 / s[p]["median"], ".0f") if p in s else "" for p in ("update", "training step")}
        lines.append(f"| {name} | {cell['update']} | {rate['update']} | {cell['act']} | {cell['training step']} | "
                     f"{rate['training step']} | {fmt(first.get('time_to_first_update_s'), '.1f')} / "
                     f"{fmt(warm.get('time_to_first_update_s'), '.1f')} | "
                     f"{fmt(first.get('background_compile_s'), '.1f')} / "
                     f"{fmt(warm.get('background_compile_s'), '.1f')} |")
    lines += ["", "Overrides per variant (on the breakdown's recipe):", ""]
    lines += [f"- `{name}`: {' '.join(TORCH_VARIANTS[name][0])}"
              + "".join(f" ({k}={v})" for k, v in TORCH_VARIANTS[name][1].items()) for name in res["variants"]]
    errors = [f"- `{name}`: {v['error']}" for name, v in res["variants"].items() if v.get("error")]
    if errors:
        lines += ["", "**Variants that failed in-process:**", "", *errors]
    paths = {name: v["compute_path"] for name, v in res["variants"].items() if v.get("compute_path")}
    if paths:
        lines += ["", "Compute paths:", ""] + [f"- `{name}`: {p}" for name, p in paths.items()]
    failed = [f"{name} (rc {v[key]['returncode']}, log {v[key]['log']})" for name, v in res["variants"].items()
              for key in ("first_update", "first_update_warm") if v.get(key, {}).get("returncode", 0) != 0]
    if failed:
        lines += ["", f"**First-update runs that failed: {', '.join(failed)}.**"]
    if not res["env"].get("gpu"):
        lines += ["", "**No GPU: a CPU run tests the job; its numbers say nothing about the GPU.**"]
    return write_results(out, res, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    """CLI; returns 0 when every variant was measured and every first-update run completed."""
    ap = argparse.ArgumentParser(prog="python -m bench torch-levers", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default="graph,networks,update,update-combo,update-device,update-device-overlap",
                    help=f"comma-separated among {', '.join(TORCH_VARIANTS)}")
    ap.add_argument("--iters", type=int, default=200, help="calls per timed block")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--warmup", type=int, default=20, help="untimed calls of act (the update: whole periods, >= 5)")
    ap.add_argument("--fill", type=int, default=2_000, help="random-action steps stored before the first update")
    ap.add_argument("--torch-backend", default="triton")
    ap.add_argument("--torch-overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--first-update-variants", default="graph,networks,update", metavar="NAMES",
                    help="the variants (among --variants) whose time to first update is measured; 'none': none")
    ap.add_argument("--first-update-timeout-s", type=float, default=300.0, help="per CLI run")
    ap.add_argument("--tiny", action="store_true", help="CPU: tiny networks, reference backend, aot_eager")
    a = tiny_defaults(ap, argv, iters=3, repeats=1, warmup=1, fill=20, torch_backend="torch", variants="graph,update",
                      first_update_variants="graph,update")
    try:
        names = parse_variants(a.variants)
        first_names = [] if a.first_update_variants == "none" else [
            n for n in parse_variants(a.first_update_variants) if n in names]
    except ValueError as exc:
        ap.error(str(exc))
    for name in ("iters", "repeats", "fill"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    out = os.path.abspath(a.out)
    extra_env = {"FLASHSAC_TORCH_COMPILE_BACKEND": "aot_eager"} if a.tiny else {}
    if a.tiny:
        import agent_torch.compiled as compiled

        compiled.BACKEND = "aot_eager"
    overrides = {n: recipe("torch", a.torch_backend, a.fill, a.tiny, [*TORCH_VARIANTS[n][0], *a.torch_overrides])
                 for n in names}
    res: dict[str, Any] = {"env": environment(), "config": {"iters": a.iters, "repeats": a.repeats,
                                                           "warmup": a.warmup, "fill": a.fill, "tiny": a.tiny,
                                                           "variants": names, "overrides": overrides},
                           "variants": {n: {} for n in names}}
    ok = True
    with tempfile.TemporaryDirectory(prefix="flashsac-torch-levers-") as scratch:
        if first_names:
            print("time to first update (fresh processes; compiler caches empty, then filled):", flush=True)
            for n in first_names:
                caches = tempfile.mkdtemp(prefix=f"{n}-caches-", dir=scratch)
                for tag in ("cold", "warm"):  # empty caches, then the same caches again (a second run)
                    rec = first_update(n, overrides[n], a.torch_backend, a.fill, out, caches, tag,
                                       a.first_update_timeout_s, {**extra_env, **TORCH_VARIANTS[n][1]})
                    key = "first_update" if tag == "cold" else "first_update_warm"
                    res["variants"][n][key] = {k: v for k, v in rec.items() if k != "log_tail"}
                    ok &= rec["returncode"] == 0
                    _report(out, res)
        print("in-process timing:", flush=True)
        for var, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
            merged = os.environ[var] = os.path.join(scratch, "in-process", sub)  # read when compiling
            for caches in glob.glob(os.path.join(scratch, "*-caches-*", sub)):  # content-addressed: merge
                shutil.copytree(caches, merged, dirs_exist_ok=True)
        for n, measured in measure_variants(overrides, a.fill, a.iters, a.repeats, a.warmup).items():
            res["variants"][n].update(measured)
            ok &= "error" not in measured
    print(_report(out, res))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
