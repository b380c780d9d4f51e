"""The Pallas TD target against the jnp target INSIDE jitted programs, with what explains the difference.

    python -m bench.pallas_in_program --out $OUT/pallas_in_program                       # GPU: B = 512 and 2048
    XLA_FLAGS=--xla_gpu_enable_command_buffer= python -m bench.pallas_in_program --out $OUT/pip_no_cmdbuf
    python -m bench.pallas_in_program --out /tmp/pip --tiny                              # CPU (interpret mode)

Sections, per batch size B and backend (``jax`` = the jnp reference, ``pallas`` = the kernel, strict):

- ``scan``: K dependent calls of ``jax_impl.categorical_td_target`` in one jitted ``fori_loop``
  (``bench.common.jit_loop``), minus the same loop around a trivial op; per call in microseconds. Operand forms:
  ``dense`` (next_qs (E, B) and the (E, B, N) log-probs as their own arrays); ``sliced`` (the second half of
  (E, 2B) / (E, 2B, N) arrays, as the agent's target critic produces them, passed whole with ``row_offset=B``: what
  the agent does); and, for Pallas only, ``explicit_slice`` (the same halves cut by ``x[:, B:]`` before the call,
  the agent's former form, which XLA materialises before the custom call). ``pallas_sliced`` - ``pallas_dense``
  is what reading the agent's layout costs; ``pallas_explicit_slice`` - ``pallas_sliced`` is what the row offset
  saves.
- ``update``: the agent's jitted update step (``agent_jax.update.update_networks_flat``, recipe networks) on a
  device batch, K back-to-back calls, per update in milliseconds.
- ``hlo``: the optimised HLO text of the scan program and of the update (files under ``hlo/``) and, per program,
  every custom call with the instructions that define its operands and use its result, plus counts of copy,
  transpose and slice-fusion instructions: layout copies around the kernel show up there. ``sources``: for the
  update, the op that produces each custom-call operand in the lowered (StableHLO) module
  (``stablehlo_operand_sources``); a slice there is a copy in the compiled program.
- ``profile`` (``--profile``): a jax.profiler trace of a few scan and update calls (``profile/``, open with
  TensorBoard's profile plugin or Perfetto) for per-op device time.

The timed blocks run interleaved (jnp, pallas, jnp, ...), ``--repeats`` rounds; the median and the range are
reported. ``XLA_FLAGS`` is recorded with the results (command buffers on or off changes the per-launch cost).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

import numpy as np

from bench.common import (
    ACT_DIM,
    OBS_DIM,
    environment,
    interleaved_blocks,
    jit_loop,
    json_block,
    recipe_config,
    repeated_inputs,
    synthetic_batches,
    write_results,
)

__all__ = ["BACKENDS", "MATERIALISING_OPS", "custom_call_context", "main", "stablehlo_operand_sources"]

BACKENDS = ("jax", "pallas")
TINY_AGENT = ["agent.actor_hidden_dim=8", "agent.critic_hidden_dim=8", "agent.actor_num_blocks=1",
              "agent.critic_num_blocks=1"]
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?(%?[\w.\-]+)\s*=\s*([^=]*?)\s+([\w\-]+)\((.*)$")
# StableHLO ops that make a new buffer out of part of another (what XLA materialises before a custom call).
MATERIALISING_OPS = ("stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.gather", "stablehlo.concatenate",
                     "stablehlo.transpose")
_VIEW_OPS = ("stablehlo.reshape", "stablehlo.convert")  # free on a row-major f32 array: followed to their operand
_FUNC = re.compile(r"^\s*func\.func\s+(?:public\s+|private\s+)?@([\w.$\-]+)\((.*?)\)\s*(?:->|\{)")
_OP = re.compile(r"^\s*(%[\w.\-]+)(?::(\d+))?\s*=\s*([\w.]+)\s*(@[\w.$\-]+)?(.*)$")
_RETURN = re.compile(r"^\s*(?:func\.)?return\s+(.*?)\s*:")
_VALUE = re.compile(r"%[\w.\-]+(?:#\d+)?")


def stablehlo_operand_sources(text: str, target: str = "__gpu$xla.gpu.triton") -> list[list[str]]:
    """For each custom call ``@target`` in a lowered (StableHLO) module, the op that produces each operand.

    Each operand is followed through reshapes and converts (free for these row-major arrays), into the function
    that calls the custom call's function (an argument) and into a called function's return (a call result), up to
    the first other op: its name (``stablehlo.subtract``, ``stablehlo.slice``, ``stablehlo.constant``, ...) or
    ``parameter`` for an argument of the entry function. An operand whose source is one of MATERIALISING_OPS is
    copied by XLA before the custom call.

    Returns:
        One list per custom call, one source per operand, in operand order.
    """
    funcs: dict[str, dict] = {}
    calls: list[tuple[str, str, list[str]]] = []  # (calling function, callee, operands)
    current = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = {"args": re.findall(r"(%arg\d+)\s*:", m.group(2)), "defs": {}, "returns": [], "custom": []}
            funcs[m.group(1)] = current
            continue
        if current is None:
            continue
        m = _RETURN.match(line)
        if m:
            current["returns"] = _VALUE.findall(m.group(1))
            continue
        m = _OP.match(line)
        if not m:
            continue
        name, count, op, callee, rest = m.groups()
        operands = _VALUE.findall(rest.split(" : ")[0])
        results = [f"{name}#{i}" for i in range(int(count))] if count else [name]
        for i, r in enumerate(results):
            current["defs"][r] = (op, callee, operands, i)
        if op in ("call", "func.call") and callee:
            calls.append((next(k for k, v in funcs.items() if v is current), callee[1:], operands))
        if op == "stablehlo.custom_call" and callee == "@" + target:
            current["custom"].append(operands)

    def source(func: str, value: str, depth: int = 0) -> str:
        if depth > 200:
            return "unresolved"
        f = funcs[func]
        if value in f["defs"]:
            op, callee, operands, index = f["defs"][value]
            if op in _VIEW_OPS and operands:
                return source(func, operands[0], depth + 1)
            if op in ("call", "func.call") and callee and callee[1:] in funcs:
                returns = funcs[callee[1:]]["returns"]
                return source(callee[1:], returns[index], depth + 1) if index < len(returns) else "unresolved"
            return op
        if value in f["args"]:
            k = f["args"].index(value)
            callers = [(caller, ops) for caller, callee, ops in calls if callee == func]
            if not callers:
                return "parameter"
            found = {source(caller, ops[k], depth + 1) for caller, ops in callers if k < len(ops)}
            return "|".join(sorted(found)) if found else "unresolved"
        return "unresolved"

    return [[source(fname, v) for v in operands] for fname, f in funcs.items() for operands in f["custom"]]


def custom_call_context(hlo_text: str) -> dict[str, Any]:
    """Custom calls of an optimised HLO module with the instructions around them.

    Returns:
        {"custom_calls": [{"line", "operands": [defining lines], "sources": ["opcode name" of the instruction each
         operand comes from, through bitcasts (a slice or copy fusion there is a copy made for the call)],
         "users": [lines using the result]}],
         "counts": {"copy", "transpose", "custom-call", "fusion", "while"}} (instruction counts in the module).
    """
    lines = hlo_text.splitlines()
    defs: dict[str, str] = {}
    users: dict[str, list[str]] = {}
    parsed = []
    for line in lines:
        m = _INSTR.match(line)
        if not m:
            continue
        name, _, opcode, rest = m.groups()
        name = name.lstrip("%")
        defs[name] = line.strip()
        operands = [o.lstrip("%") for o in re.findall(r"%?([\w.\-]+)(?=[,)])", rest.split("),")[0] + ")")]
        parsed.append((name, opcode, operands, line.strip()))
        for o in operands:
            users.setdefault(o, []).append(line.strip())
    counts = {op: sum(1 for _, opcode, _, _ in parsed if opcode == op)
              for op in ("copy", "transpose", "custom-call", "fusion", "while", "slice", "bitcast")}
    by_name = {name: (opcode, operands) for name, opcode, operands, _ in parsed}

    def source(o: str) -> str:
        for _ in range(100):
            opcode, operands = by_name[o]
            if opcode != "bitcast" or not operands or operands[0] not in by_name:
                return f"{opcode} {o}"
            o = operands[0]
        return f"bitcast {o}"

    calls = []
    for name, opcode, operands, line in parsed:
        if opcode != "custom-call":
            continue
        calls.append({"line": line[:600],
                      "operands": [defs.get(o, o)[:400] for o in operands if o in defs],
                      "sources": [source(o) for o in operands if o in by_name],
                      "users": [u[:400] for u in users.get(name, [])][:8]})
    return {"custom_calls": calls, "counts": counts}


def _median_range(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {"median": float(np.median(a)), "min": float(a.min()), "max": float(a.max())}


def _scan_programs(B: int, K: int) -> tuple[dict[str, tuple[Any, tuple]], dict[str, Any]]:
    """The jitted loops (per backend and operand form, plus the baseline), each with its device arguments, and the
    single calls of the op (per backend and form) the loops repeat."""
    import jax
    import jax.numpy as jnp

    from jax_impl import categorical_td_target

    x = repeated_inputs(B, "random", seed=5)
    # (E, 2B[, N]): the agent's layout, the target rows second (a decoy first half, so reading it would show)
    full_q, full_lp = (np.concatenate([np.flip(x[k], 1), x[k]], axis=1) for k in ("next_qs", "next_log_probs"))
    dev = jax.devices()[0]
    rest = tuple(jax.device_put(x[k], dev) for k in ("reward", "terminated", "next_alpha_log_pi"))
    gamma, base = jnp.float32(0.99), jax.device_put(np.ones((B, 101), np.float32), dev)
    dense_args = (jax.device_put(x["next_qs"], dev), jax.device_put(x["next_log_probs"], dev), *rest, gamma, base)
    sliced_args = (jax.device_put(full_q, dev), jax.device_put(full_lp, dev), *rest, gamma, base)

    def op(backend: str, form: str):
        def call(q, lp, r, d, s, g, base):
            if form == "explicit_slice":
                q, lp = q[:, B:], lp[:, B:]
            rows = {"row_offset": B} if form == "sliced" else {}
            return categorical_td_target(q, lp, r, d, s, gamma=g, min_v=-5.0, max_v=5.0, backend=backend,
                                         strict=True, **rows)
        return call

    forms = [(b, form) for b in BACKENDS for form in ("dense", "sliced")] + [("pallas", "explicit_slice")]
    programs = {f"{b}_{form}": (jit_loop(op(b, form), K), dense_args if form == "dense" else sliced_args)
                for b, form in forms}
    programs["baseline"] = (jit_loop(lambda q, lp, r, d, s, g, base: base * g, K), dense_args)
    return programs, {f"{b}_{form}": jax.jit(op(b, form)) for b, form in forms}


def scan_section(sizes: list[int], K: int, repeats: int, res: dict, hlo_dir: str) -> None:
    import jax

    for B in sizes:
        programs, ops = _scan_programs(B, K)

        def block(fn, args):
            def run(iters: int) -> float:
                t0 = time.perf_counter()
                for _ in range(iters):
                    out = fn(*args)
                jax.block_until_ready(out)
                return (time.perf_counter() - t0) / iters
            return run

        raw = interleaved_blocks({k: block(*p) for k, p in programs.items()}, repeats, iters=3, warmup_iters=1)
        row: dict[str, Any] = {"B": B, "K": K, "raw_loop_s": raw}
        base = np.asarray(raw["baseline"])
        for name in programs:
            if name != "baseline":
                row[f"{name}_us"] = _median_range(list((np.asarray(raw[name]) - base) / K * 1e6))
        res.setdefault("scan", []).append(row)
        # Every form computes the same bits (the row offset changes where the kernel reads, nothing else).
        outs = {name: np.asarray(fn(*programs[name][1])).view(np.int32) for name, fn in ops.items()}
        row["bitwise_equal_to_pallas_dense"] = {name: bool(np.array_equal(v, outs["pallas_dense"]))
                                                for name, v in outs.items() if name.startswith("pallas")}
        if not all(row["bitwise_equal_to_pallas_dense"].values()):
            res["errors"][f"bitwise_B{B}"] = f"operand forms differ: {row['bitwise_equal_to_pallas_dense']}"
        for name in ("pallas_dense", "pallas_sliced", "pallas_explicit_slice", "jax_sliced"):
            fn, args = programs[name]
            text = fn.lower(*args).compile().as_text()
            path = os.path.join(hlo_dir, f"scan_{name}_B{B}.txt")
            with open(path, "w") as f:
                f.write(text)
            res.setdefault("hlo", {})[f"scan_{name}_B{B}"] = dict(custom_call_context(text), file=path)
        print(f"  scan B={B}: " + ", ".join(f"{k}={row[k]['median']:.2f}us" for k in row if k.endswith("_us")),
              flush=True)


def _agent(B: int, backend: str, tiny: bool):
    from agent_interop.synthetic import make_spaces
    from agent_jax.agent import make_agent

    cfg = recipe_config("jax", backend, [f"agent.sample_batch_size={B}", *(TINY_AGENT if tiny else [])])
    return make_agent(cfg, *make_spaces(OBS_DIM, ACT_DIM))


def update_section(sizes: list[int], K: int, repeats: int, tiny: bool, res: dict, hlo_dir: str) -> None:
    import jax

    from agent_common.buffer import flat_batch
    from agent_jax.update import update_networks_flat

    for B in sizes:
        agents = {b: _agent(B, b, tiny) for b in BACKENDS}
        flat = jax.device_put(flat_batch(synthetic_batches(B, 1)[0]), agents["jax"].device)

        def block(agent, flat=flat):
            def run(iters: int) -> float:
                t0 = time.perf_counter()
                for i in range(iters):
                    agent.state, values = update_networks_flat(agent.state, flat, agent.ctx,
                                                               observation_dim=OBS_DIM, do_actor_update=i % 2 == 0)
                jax.block_until_ready(values)
                return (time.perf_counter() - t0) / iters
            return run

        raw = interleaved_blocks({b: block(a) for b, a in agents.items()}, repeats, iters=K, warmup_iters=2)
        row = {"B": B, "K": K, "raw_s": raw}
        for b in BACKENDS:
            row[f"{b}_ms"] = _median_range([v * 1e3 for v in raw[b]])
        res.setdefault("update", []).append(row)
        for b, agent in agents.items():
            lowered = update_networks_flat.lower(agent.state, flat, agent.ctx, observation_dim=OBS_DIM,
                                                 do_actor_update=False)
            text = lowered.compile().as_text()
            path = os.path.join(hlo_dir, f"update_{b}_B{B}.txt")
            with open(path, "w") as f:
                f.write(text)
            stablehlo = lowered.as_text()
            with open(os.path.join(hlo_dir, f"update_{b}_B{B}.stablehlo.txt"), "w") as f:
                f.write(stablehlo)
            res.setdefault("hlo", {})[f"update_{b}_B{B}"] = dict(custom_call_context(text), file=path,
                                                                 sources=stablehlo_operand_sources(stablehlo))
        print(f"  update B={B}: " + ", ".join(f"{b}={row[f'{b}_ms']['median']:.3f}ms" for b in BACKENDS),
              flush=True)


def profile_section(B: int, out: str, tiny: bool) -> None:
    import jax

    from agent_common.buffer import flat_batch
    from agent_jax.update import update_networks_flat

    programs, _ = _scan_programs(B, 20)
    agents = {b: _agent(B, b, tiny) for b in BACKENDS}
    flat = jax.device_put(flat_batch(synthetic_batches(B, 1)[0]), agents["jax"].device)
    for fn, args in programs.values():  # compiled outside the trace
        jax.block_until_ready(fn(*args))
    with jax.profiler.trace(os.path.join(out, "profile")):
        for fn, args in programs.values():
            jax.block_until_ready(fn(*args))
        for agent in agents.values():
            for i in range(4):
                agent.state, values = update_networks_flat(agent.state, flat, agent.ctx, observation_dim=OBS_DIM,
                                                           do_actor_update=i % 2 == 0)
            jax.block_until_ready(values)


def _report(out: str, res: dict) -> str:
    lines = [f"# Pallas vs jnp target inside jitted programs ({res['env'].get('gpu') or 'CPU'}, "
             f"{res['env']['date_utc']})", "", f"`{res['env']['command']}`; XLA_FLAGS=`{res['xla_flags']}`", "",
             "## Per call inside a jitted fori_loop (us, median [min, max] over rounds)", "",
             "sliced: next_qs / log-probs as the second half of (E, 2B[, N]) arrays, passed whole with "
             "`row_offset=B` (the agent's form); explicit slice: the same halves cut by `x[:, B:]` before the call "
             "(the former form).", "",
             "| B | K | jnp dense | pallas dense | jnp sliced | pallas sliced | pallas explicit slice |",
             "|---|---|---|---|---|---|---|"]
    for row in res.get("scan", []):
        cells = [f"{row[k]['median']:.2f} [{row[k]['min']:.2f}, {row[k]['max']:.2f}]"
                 for k in ("jax_dense_us", "pallas_dense_us", "jax_sliced_us", "pallas_sliced_us",
                           "pallas_explicit_slice_us")]
        lines.append(f"| {row['B']} | {row['K']} | " + " | ".join(cells) + " |")
    for row in res.get("scan", []):
        lines.append(f"\nB = {row['B']}: Pallas outputs bitwise equal to the dense form: "
                     f"{row['bitwise_equal_to_pallas_dense']}")
    lines += ["", "## Agent update step (ms per update, median [min, max])", "", "| B | K | jnp | pallas |",
              "|---|---|---|---|"]
    for row in res.get("update", []):
        cells = [f"{row[k]['median']:.3f} [{row[k]['min']:.3f}, {row[k]['max']:.3f}]" for k in ("jax_ms", "pallas_ms")]
        lines.append(f"| {row['B']} | {row['K']} | " + " | ".join(cells) + " |")
    lines += ["", "## HLO around the custom calls", ""]
    for name, h in res.get("hlo", {}).items():
        lines.append(f"- `{name}`: counts {h['counts']}, {len(h['custom_calls'])} custom call(s); file `{h['file']}`")
        if h.get("sources"):
            lines.append(f"  - StableHLO producers of the TD-target custom call's operands (gamma, q, log-probs, "
                         f"r, d, s): {h['sources']}")
    for name, h in res.get("hlo", {}).items():
        kernel_first = sorted(h["custom_calls"], key=lambda c: "xla.gpu.triton" not in c["line"])  # not cuBLAS
        for i, call in enumerate(kernel_first[:2]):
            lines += json_block(f"{name}: custom call {i}", call)
    if res.get("errors"):
        lines += json_block("errors", res["errors"])
    if not res["env"].get("gpu"):
        lines += ["", "**No GPU: Pallas ran in interpret mode (no custom call); this tests the script only.**"]
    return write_results(out, res, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    """CLI; returns 0 if every section ran, 1 otherwise (the report is written either way)."""
    ap = argparse.ArgumentParser(prog="python -m bench.pallas_in_program", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default="512,2048", help="batch sizes B, comma-separated")
    ap.add_argument("--scan-k", type=int, default=200, help="calls per jitted loop")
    ap.add_argument("--update-k", type=int, default=50, help="updates per timed block")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--profile", action="store_true", help="also write a jax.profiler trace (first size)")
    ap.add_argument("--tiny", action="store_true", help="CPU check: small sizes, tiny networks, few calls")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",") if s]
    if not sizes or min(sizes) < 1 or a.scan_k < 1 or a.update_k < 1 or a.repeats < 1:
        ap.error(f"--sizes, --scan-k, --update-k and --repeats must be >= 1, got {a.sizes!r}, {a.scan_k}, "
                 f"{a.update_k}, {a.repeats}")
    out = os.path.abspath(a.out)
    hlo_dir = os.path.join(out, "hlo")
    os.makedirs(hlo_dir, exist_ok=True)
    res: dict[str, Any] = {"env": environment(), "xla_flags": os.environ.get("XLA_FLAGS", ""), "sizes": sizes,
                           "errors": {}}
    t0 = time.perf_counter()
    sections = [("scan", lambda: scan_section(sizes, a.scan_k, a.repeats, res, hlo_dir)),
                ("update", lambda: update_section(sizes, a.update_k, a.repeats, a.tiny, res, hlo_dir))]
    if a.profile:
        sections.append(("profile", lambda: profile_section(sizes[0], out, a.tiny)))
    for name, fn in sections:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a failed section is reported, the others still run
            res["errors"][name] = f"{type(exc).__name__}: {exc}"[:2000]
            print(f"  {name} failed: {res['errors'][name][:300]}", flush=True)
        res["seconds"] = round(time.perf_counter() - t0, 1)
        _report(out, res)
    print(_report(out, res))
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
