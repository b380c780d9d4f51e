"""The JAX agent's update and action timed alone on both replay paths of its CLI, under XLA options side by side in
one process, with its compiled programs' kernel counts and its time to first update cold and cached.

    python -m bench jax-speed --out $OUT/jax-speed           # GPU: the CPU-simulator recipe, Pallas target (strict)
    python -m bench jax-speed --out /tmp/jax-speed --tiny    # CPU in a few minutes: tiny networks, reference target

1. **Time to first update.** Two runs of the CLI (``python -m agent_jax.train``, its default device replay) on the
   recipe (``bench.common.UPSTREAM_RECIPE``: HalfCheetah-v4, one env, batch 512, critic 256 x 2 blocks, actor
   128 x 2 blocks, one update per env step) with ``--fill`` random-action steps and ``--ttfu-updates`` updates: the
   first with an empty persistent compilation cache (``<out>/jax_cache``), the second with what the first stored.
   Each run's ``time_to_first_update`` and its cache line (programs loaded / compiled) are reported.
2. **In this process**, with the same cache and the same config (so the CLI's programs load from it): an agent with
   the device replay (the CLI's default path: ``agent.step``, one program per env step that stores the transition,
   runs the update on a batch sampled on the device and computes the next action) and one with the host replay
   (``agent.update`` on a host batch and ``agent.act``), their replays filled with ``--fill`` random-action steps.
3. **Variants**: each ``--variant NAME=KEY:VALUE,...`` compiles the agents' programs (``env_step``,
   ``update_networks_flat``, ``policy_on_leaves``) with those XLA compiler options (``jax.jit(...,
   compiler_options=...)`` of the same functions and arguments) and swaps them into the agent for its blocks. The
   defaults: ``default`` (the agent's own programs, XLA's defaults) and ``no-command-buffers``
   (``xla_gpu_enable_command_buffer`` empty: every kernel launched by the host, no CUDA graphs). The key
   ``donate_state:false`` (not an XLA option) compiles the programs without donating the agent state (fresh output
   buffers: XLA then makes no copy of the parameters at the program start, but the buffers move between calls).
4. **Measures**, in ``--rounds`` interleaved rounds (variants rotated per round), each a block of ``--iters`` calls
   after the variant's warm-up; the report gives the median and min-max over the rounds, ms per call:
   ``device path: step (update + act)`` (the CLI's per-env-step call: a row written, ``agent.step(obs, noise, 1,
   scale)`` returning the action, the actor and critic-only programs alternating); ``device path: step, host time
   of the call`` (the part of it spent in the ``env_step`` call until it returned: dispatch); ``device path: act
   alone`` (``agent.step(obs, noise, 0, scale)``: store and act); ``host path: update`` (``agent.update`` in blocks
   of whole actor periods, the last update's metrics read at the block's end); ``host path: act`` (``agent.act``,
   the action written to pinned host memory by its program) and ``host path: act, action read from the device``
   (``agent_jax.agent.ACTION_ON_HOST`` off).
5. Per variant and program: the first call's seconds (compilation, or a load from the cache) and the compiled
   program's kernel counts (``kernel_counts`` of its optimised HLO: fusions, library calls, copies and the command
   buffers that hold them; on a GPU the kernels it launches, a cuBLAS call counted once).

``--tiny`` runs it on the CPU (tiny networks, reference target): it tests the job; its numbers say nothing about a
GPU, and the XLA:GPU options change nothing there.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from bench.agents import TINY  # the CLI runs' tiny sizes, as bench agents has them
from bench.common import (
    UPSTREAM_RECIPE,
    cli_run_rates,
    environment,
    fmt,
    merge_overrides,
    timed_run,
    tiny_defaults,
    train_command,
    write_results,
)

__all__ = ["DEFAULT_VARIANTS", "MEASURES", "compile_log", "kernel_counts", "main", "parse_variant", "recipe"]

MEASURES = ("device path: step (update + act)", "device path: step, host time of the call", "device path: act alone",
            "host path: update", "host path: act", "host path: act, action read from the device")
DEFAULT_VARIANTS = ("default=", "no-command-buffers=xla_gpu_enable_command_buffer:")
_TRIVIAL = {"parameter", "tuple", "get-tuple-element", "bitcast", "constant", "after-all", "opt-barrier"}


def recipe(backend: str, fill: int, num_env_steps: int, tiny: bool, extra: list[str]) -> list[str]:
    """The config overrides of the CLI runs and of this process's agents: the recipe with the CLI's default (device)
    replay, a strict ``backend``, updates from step ``fill`` on, one evaluation episode, no checkpoint of the buffer;
    ``--tiny``'s sizes and ``extra`` on top. The LR schedule's horizon (``num_env_steps``) is a constant of the
    compiled programs, so the in-process agents take the CLI runs' value and load their programs."""
    ours = ["agent.buffer_device_type=auto", f"agent.buffer_min_length={fill}", f"num_env_steps={num_env_steps}",
            f"agent.categorical_target_backend={backend}", "agent.categorical_target_strict=true",
            "num_eval_episodes=1", f"evaluation_per_interaction_step={num_env_steps}",
            f"logging_per_interaction_step={num_env_steps}",
            f"save_checkpoint_per_interaction_step={num_env_steps}", "save_buffer=false", "progress_bar=false"]
    return merge_overrides(merge_overrides(list(UPSTREAM_RECIPE), ours + (TINY if tiny else [])), extra)


def parse_variant(text: str) -> tuple[str, dict[str, Any], bool]:
    """``NAME=KEY:VALUE,...`` -> (name, XLA compiler options, whether the state is donated). Values: ``true`` /
    ``false``, integers, anything else a string (an empty value is the empty string; a comma followed by a word
    without ``:`` continues the value, so ``xla_gpu_enable_command_buffer:FUSION,CUBLAS`` is one item).
    ``donate_state:false`` is the donation switch, not an XLA option.

    Raises:
        ValueError: no name, or an item without ``:``.
    """
    name, sep, spec = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--variant: expected NAME=KEY:VALUE,... (NAME= for XLA's defaults), got {text!r}")
    options: dict[str, Any] = {}
    donate = True
    items: list[str] = []
    for token in (t.strip() for t in spec.split(",")):
        if items and ":" not in token:
            items[-1] += "," + token  # a list value: FUSION,CUBLAS
        elif token:
            items.append(token)
    for item in items:
        key, colon, value = item.partition(":")
        if not colon:
            raise ValueError(f"--variant {name}: expected KEY:VALUE, got {item!r}")
        parsed: Any = {"true": True, "false": False}.get(value.lower(), value)
        if isinstance(parsed, str) and re.fullmatch(r"-?\d+", parsed):
            parsed = int(parsed)
        if key == "donate_state":
            donate = bool(parsed)
        else:
            options[key] = parsed
    return name.strip(), options, donate


def kernel_counts(hlo_text: str) -> dict[str, Any]:
    """Counts of a compiled program's optimised HLO text, outside fused computations (each fusion is one kernel):
    ``kernels`` (every instruction that runs: fusions, custom calls such as cuBLAS GEMMs and Triton kernels, copies,
    dots, ...; not parameters, tuples, bitcasts, constants, nor the ``call`` of a command buffer itself), ``fusions``,
    ``custom_calls``, ``copies``, ``command_buffers`` (computations XLA made CUDA graphs of), ``in_command_buffers``
    (the kernels inside them) and ``by_opcode``."""
    computations: dict[str, list[str]] = {}
    current = None
    for line in hlo_text.splitlines():
        head = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if head and not line.startswith(" "):
            current = head.group(1)
            computations[current] = []
        elif line.startswith("}"):
            current = None
        elif current is not None:
            computations[current].append(line)
    fused = {name for lines in computations.values() for line in lines if " fusion(" in line
             for name in re.findall(r"calls=%?([\w.\-]+)", line)}
    opcodes: Counter[str] = Counter()
    in_buffers = 0
    buffers = [name for name in computations if "command_buffer" in name]
    for name, lines in computations.items():
        if name in fused:
            continue
        for line in lines:
            op = re.search(r"=\s*(?:\([^=]*?\)|\S+)\s+([a-z][a-z0-9\-]*)\(", line)
            if op is None or op.group(1) in _TRIVIAL:
                continue
            if op.group(1) == "call" and "command_buffer" in line:
                continue
            opcodes[op.group(1)] += 1
            in_buffers += name in buffers
    return {"kernels": sum(opcodes.values()), "fusions": opcodes.get("fusion", 0),
            "custom_calls": opcodes.get("custom-call", 0), "copies": opcodes.get("copy", 0),
            "command_buffers": len(buffers), "in_command_buffers": in_buffers,
            "by_opcode": dict(sorted(opcodes.items()))}


class _Program:
    """A jitted program swapped into the agent: times its first call per static key (compilation or a cache load),
    records that key's kernel counts, and adds up the host time of its calls (``seconds``)."""

    def __init__(self, fn: Any, name: str, key_names: tuple[str, ...], record: dict[str, dict[str, Any]]) -> None:
        self.fn, self.name, self.key_names, self.record = fn, name, key_names, record
        self.seconds = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = self.name + "(" + ", ".join(f"{k}={kwargs[k]}" for k in self.key_names if k in kwargs) + ")"
        if key not in self.record:
            t0 = time.perf_counter()
            compiled = self.fn.lower(*args, **kwargs).compile()  # the call below reuses it
            self.record[key] = {"first_call_s": time.perf_counter() - t0, **kernel_counts(compiled.as_text())}
        t0 = time.perf_counter()
        out = self.fn(*args, **kwargs)
        self.seconds += time.perf_counter() - t0
        return out


def _programs(options: dict[str, Any], donate: bool, record: dict[str, dict[str, Any]]) -> dict[str, _Program]:
    """The agent's three programs compiled with ``options`` (the agent's own objects for XLA's defaults with
    donation), each wrapped in a ``_Program``."""
    import jax

    from agent_jax.step import ENV_STEP_JIT, POLICY_JIT, env_step, policy_on_leaves
    from agent_jax.update import UPDATE_FLAT_JIT, update_networks_flat

    def build(fn: Any, settings: dict[str, Any]) -> Any:
        if not options and donate:
            return fn
        settings = dict(settings, compiler_options=options or None)
        if not donate:
            settings.pop("donate_argnums", None)
            settings["donate_argnums"] = (1,) if fn is env_step else ()  # env_step keeps the replay rows in place
        return jax.jit(fn.__wrapped__, **settings)

    return {"env_step": _Program(build(env_step, ENV_STEP_JIT), "env_step", ("updates", "act"), record),
            "update_networks_flat": _Program(build(update_networks_flat, UPDATE_FLAT_JIT), "update_networks_flat",
                                             ("do_actor_update",), record),
            "policy_on_leaves": _Program(build(policy_on_leaves, POLICY_JIT), "policy_on_leaves",
                                         ("deterministic", "host_output"), record)}


@contextlib.contextmanager
def _swapped(programs: dict[str, Any], **flags: Any) -> Iterator[None]:
    """``agent_jax.agent``'s program names (and flags such as ``ACTION_ON_HOST``) bound to ``programs`` meanwhile."""
    from agent_jax import agent as agent_module

    saved = {name: getattr(agent_module, name) for name in (*programs, *flags)}
    for name, value in {**programs, **flags}.items():
        setattr(agent_module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(agent_module, name, value)


_FIRST_UPDATE = re.compile(r"first update at env step \d+: ([0-9.]+) s after launch \(([0-9.]+) s after training "
                           r"started; the update call took ([0-9.]+) s\)")
_COMPILE_LOG = re.compile(r"Finished (tracing (\S+) for jit|jaxpr to MLIR module conversion jit\((\S+)\)"
                          r"|XLA compilation of jit\((\S+)\)) in ([0-9.e-]+) sec")


def compile_log(text: str) -> dict[str, Any]:
    """What a CLI run with ``JAX_LOG_COMPILES=1`` traced, lowered and compiled (or loaded from the persistent cache)
    before and after its first update: per phase the number of programs and the seconds of each step, and per program
    name its count and seconds (``first update at ...`` splits the log; without it everything is ``before``)."""
    head, found, tail = text.partition("first update at env step")
    out: dict[str, Any] = {}
    for part, chunk in (("before_first_update", head), ("after_first_update", tail if found else "")):
        steps = {"trace_s": 0.0, "lower_s": 0.0, "compile_s": 0.0}
        by_program: dict[str, dict[str, float]] = {}
        for match in _COMPILE_LOG.finditer(chunk):
            name = match.group(2) or match.group(3) or match.group(4)
            step = "trace_s" if match.group(2) else "lower_s" if match.group(3) else "compile_s"
            seconds = float(match.group(5))
            steps[step] += seconds
            entry = by_program.setdefault(name, {"programs": 0, "trace_s": 0.0, "lower_s": 0.0, "compile_s": 0.0})
            entry[step] += seconds
            entry["programs"] += step == "compile_s"
        out[part] = {"programs": sum(int(e["programs"]) for e in by_program.values()), **steps,
                     "by_program": by_program}
    return out


def _ttfu_runs(out: str, overrides: list[str], seed: int, timeout_s: float) -> list[dict[str, Any]]:
    """The CLI twice on ``overrides`` with the cache ``<out>/jax_cache`` (empty before the first): time to first
    update (and its split: before training, then until the first update's end, and that call's own seconds), the
    cache line and what each run compiled (``compile_log``)."""
    from agent_jax.compilation_cache import jax_cache_env

    cache_env = dict(jax_cache_env(os.path.join(out, "jax_cache")), JAX_LOG_COMPILES="1")
    backend = next(o.split("=", 1)[1] for o in overrides if o.startswith("agent.categorical_target_backend="))
    steps = int(next(o.split("=", 1)[1] for o in overrides if o.startswith("num_env_steps=")))
    runs = []
    for tag in ("cold", "cached"):  # an empty cache, then the one the first run filled
        run_dir = os.path.join(out, "runs", tag)
        cmd = train_command("jax", backend, seed, steps, run_dir, overrides)
        rec = timed_run(cmd, os.path.join(out, "logs", f"ttfu-{tag}.log"), timeout_s, cache_env)
        rec["cache"] = tag
        if rec["returncode"] == 0:
            rec.update(cli_run_rates(rec["log"], run_dir))
        with open(rec["log"]) as f:
            text = f.read()
        line = re.search(r"(\d+) programs loaded from the cache, (\d+) compiled", text)
        if line:
            rec.update(programs_loaded=int(line.group(1)), programs_compiled=int(line.group(2)))
        first = _FIRST_UPDATE.search(text)
        if first:
            launch, training, call = (float(g) for g in first.groups())
            rec.update(before_training_s=launch - training, first_update_call_s=call)
        rec["compile_log"] = compile_log(text)
        print(f"  time to first update, {tag} cache: rc={rec['returncode']} "
              f"{rec.get('time_to_first_update_s')} s (process {rec['wall_s']:.1f} s)", flush=True)
        runs.append(rec)
    return runs


def _build(overrides: list[str], fill: int, host: bool) -> dict[str, Any]:
    """One agent of ``overrides`` (``host``: with the host replay) with its env, replay buffer and reward normaliser,
    the replay filled with ``fill`` random-action steps as the training loop's warm-up does."""
    from agent_common.buffer import ReplayBuffer
    from agent_common.config import load_config
    from agent_common.envs import make_vec_env, step_env
    from agent_common.normalizer import RewardNormalizer
    from agent_common.seeding import BUFFER_STREAM, WARMUP_STREAM
    from agent_jax.agent import make_agent

    cfg = load_config(overrides + (["agent.buffer_device_type=cpu"] if host else []), "jax")
    a, env = cfg.agent, cfg.env
    envs = make_vec_env(env.env_name, int(cfg.num_train_envs), cfg.seed, env.rescale_action, env.max_episode_steps,
                        env.env_type)
    observation, _ = envs.reset(seed=cfg.seed)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    agent = make_agent(cfg, obs_space, act_space)
    storage = agent.replay_storage(a.buffer_max_length)
    if host != (storage is None):
        raise RuntimeError(f"agent.buffer_device_type: expected the {'host' if host else 'device'} replay")
    obs_dim, act_dim = int(obs_space.shape[0]), int(act_space.shape[0])
    buffer = ReplayBuffer(obs_dim, act_dim, a.buffer_max_length, a.buffer_min_length, cfg.n_step, cfg.gamma,
                          seed=[cfg.seed, BUFFER_STREAM], storage=storage)
    normalizer = RewardNormalizer(cfg.gamma, a.normalized_G_max, enabled=a.normalize_reward)
    rng = np.random.Generator(np.random.PCG64([cfg.seed, WARMUP_STREAM]))
    observation = np.asarray(observation, np.float32)
    for _ in range(fill):
        action = rng.uniform(act_space.low, act_space.high, size=(1, act_dim)).astype(np.float32)  # (1, A)
        result = step_env(envs, action)
        buffer.add(observation, action, result.reward, result.terminated, result.truncated, result.next_observation)
        normalizer.update(result.reward, result.terminated, result.truncated)
        observation = result.reset_observation
    envs.close()
    return {"cfg": cfg, "agent": agent, "buffer": buffer, "storage": storage, "normalizer": normalizer,
            "observation": observation, "noise": rng.standard_normal((1, act_dim)).astype(np.float32),
            "row": None if storage is None else storage.read(1)}  # (1, W): a stored row, written again per step


def _measures(device: dict[str, Any], host: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """The timed calls (each waits for its result, but ``host path: update``, whose block ends with a read of the
    last update's metrics); ``device path: step, host time of the call`` is taken from the step's block."""
    d_agent, storage, obs, noise = device["agent"], device["storage"], device["observation"], device["noise"]
    scale = device["normalizer"].scale() if device["normalizer"].enabled else 1.0
    h_agent, h_obs = host["agent"], host["observation"]
    batch = host["buffer"].sample(int(host["cfg"].agent.sample_batch_size))
    batch["reward"] = host["normalizer"].normalize(batch["reward"])

    def step(num_updates: int) -> Callable[[], None]:
        def call() -> None:
            storage.write(storage.next_index, device["row"])
            d_agent.step(obs, noise, num_updates, scale)  # returns the action: waits for the program
        return call

    return {"device path: step (update + act)": step(1), "device path: act alone": step(0),
            "host path: update": lambda: h_agent.update(batch),
            "host path: act": lambda: h_agent.act(h_obs, noise),
            "host path: act, action read from the device": lambda: h_agent.act(h_obs, noise)}


def main(argv: list[str] | None = None) -> int:
    """CLI; returns 0 when everything was measured (the report is written either way)."""
    ap = argparse.ArgumentParser(prog="python -m bench jax-speed", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="pallas", help="agent.categorical_target_backend (strict)")
    ap.add_argument("--fill", type=int, default=2_000, help="random-action steps before the first update")
    ap.add_argument("--ttfu-updates", type=int, default=100, help="updates of each time-to-first-update CLI run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=100, help="calls per timed block")
    ap.add_argument("--warmup", type=int, default=10, help="untimed calls per measure and variant first")
    ap.add_argument("--variant", action="append", default=None, metavar="NAME=KEY:VALUE,...",
                    help=f"an XLA variant (repeatable; default: {' '.join(DEFAULT_VARIANTS)})")
    ap.add_argument("--no-ttfu", dest="ttfu", action="store_false", help="skip the CLI runs")
    ap.add_argument("--overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=300.0, help="per CLI run")
    ap.add_argument("--tiny", action="store_true", help="CPU: tiny networks, reference target")
    a = tiny_defaults(ap, argv, backend="jax", fill=30, ttfu_updates=10, rounds=2, iters=4, warmup=2)
    for name in ("fill", "ttfu_updates", "rounds", "iters"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 2:
        ap.error(f"--warmup must be >= 2 (both update programs), got {a.warmup}")
    try:
        variants = [parse_variant(v) for v in (a.variant or DEFAULT_VARIANTS)]
    except ValueError as exc:
        ap.error(str(exc))
    if len({v[0] for v in variants}) != len(variants):
        ap.error(f"--variant: names must differ, got {[v[0] for v in variants]}")
    out = os.path.abspath(a.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    overrides = recipe(a.backend, a.fill, a.fill + a.ttfu_updates, a.tiny, a.overrides)
    res: dict[str, Any] = {"env": environment(), "config": {
        "overrides": overrides, "rounds": a.rounds, "iters": a.iters, "warmup": a.warmup, "fill": a.fill,
        "variants": {name: {"compiler_options": opts, "donate_state": donate} for name, opts, donate in variants},
        "tiny": a.tiny}, "ttfu": [], "ms": {}, "programs": {}, "complete": False}
    t_start = time.perf_counter()
    if a.ttfu:
        res["ttfu"] = _ttfu_runs(out, overrides, a.seed, a.timeout_s)
        _report(out, res)

    from agent_common.config import load_config
    from agent_jax.compilation_cache import enable_persistent_cache
    from agent_jax.train import configure_xla

    configure_xla(load_config(overrides, "jax"))  # the CLI's XLA flags (before JAX starts): the CLI's programs
    print(enable_persistent_cache(os.path.join(out, "jax_cache"), 4096), flush=True)
    device, host = _build(overrides, a.fill, host=False), _build(overrides, a.fill, host=True)
    period = int(device["cfg"].agent.actor_update_period)
    record: dict[str, dict[str, dict[str, Any]]] = {}
    programs = {}
    for name, options, donate in variants:
        record[name] = {}
        programs[name] = _programs(options, donate, record[name])
    res["programs"] = record
    ms: dict[str, dict[str, list[float]]] = {m: {name: [] for name, _, _ in variants} for m in MEASURES}
    res["ms"] = ms

    def block(variant: str, measure: str, iters: int) -> float:
        progs = programs[variant]
        flags = {"ACTION_ON_HOST": False} if measure.endswith("read from the device") else {}
        call = calls[measure]
        with _swapped(progs, **flags):
            progs["env_step"].seconds = 0.0
            if measure == "host path: update":
                iters = period * -(-iters // period)
                host["agent"].flush_metrics()
            t0 = time.perf_counter()
            for _ in range(iters):
                call()
            if measure == "host path: update":
                host["agent"].flush_metrics()  # the last update's metrics: waits for it
            elapsed = time.perf_counter() - t0
        if measure == "device path: step (update + act)":
            dispatch_ms[variant] = 1e3 * progs["env_step"].seconds / iters
        return 1e3 * elapsed / iters

    dispatch_ms: dict[str, float] = {}
    calls = _measures(device, host)
    timed = list(calls)
    for name, _, _ in variants:  # warm-up: compile (or load) every program of the variant
        t0 = time.perf_counter()
        for measure in timed:
            block(name, measure, max(a.warmup, period))
        print(f"  variant {name}: warm-up {time.perf_counter() - t0:.1f} s", flush=True)
    for rnd in range(a.rounds):
        order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
        for name, _, _ in order:
            for measure in timed:
                ms[measure][name].append(block(name, measure, a.iters))
            ms["device path: step, host time of the call"][name].append(dispatch_ms[name])
        print(f"  round {rnd}: " + "; ".join(
            f"{name}: step {ms[MEASURES[0]][name][-1]:.3f} ms, update {ms['host path: update'][name][-1]:.3f} ms, "
            f"act {ms['host path: act'][name][-1]:.3f} ms" for name, _, _ in variants), flush=True)
    res["complete"] = True
    res["seconds"] = round(time.perf_counter() - t_start, 1)
    print(_report(out, res))
    ok = all(r["returncode"] == 0 for r in res["ttfu"])
    return 0 if ok else 1


def _summary(values: list[float]) -> str:
    if not values:
        return ""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def _report(out: str, res: dict[str, Any]) -> str:
    c = res["config"]
    variants = list(c["variants"])
    gpu = res["env"].get("gpu")
    lines = [f"# The JAX agent's update and action, both replay paths, XLA variants ({gpu or 'CPU'}, "
             f"{res['env']['date_utc']})", "", f"`{res['env']['command']}`", "",
             f"Config: {', '.join(c['overrides'])}. {c['rounds']} interleaved rounds of {c['iters']} calls per "
             f"measure and variant after {c['warmup']} warm-up calls; median (min-max) over the rounds, ms per call.",
             "", "Variants: " + "; ".join(
                 f"`{name}`: {v['compiler_options'] or 'XLA defaults'}"
                 + ("" if v["donate_state"] else ", state not donated") for name, v in c["variants"].items()), ""]
    if res["ttfu"]:
        lines += ["| time to first update | rc | s | of it before training s | first update call s | process s | "
                  "programs loaded / compiled | before the first update: programs, trace / lower / compile s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in res["ttfu"]:
            b = r.get("compile_log", {}).get("before_first_update", {})
            lines.append(f"| {r['cache']} | {r['returncode']} | {fmt(r.get('time_to_first_update_s'), '.1f')} | "
                         f"{fmt(r.get('before_training_s'), '.1f')} | {fmt(r.get('first_update_call_s'), '.2f')} | "
                         f"{r['wall_s']:.1f} | {fmt(r.get('programs_loaded'))} / {fmt(r.get('programs_compiled'))} | "
                         f"{fmt(b.get('programs'))}, {fmt(b.get('trace_s'), '.1f')} / {fmt(b.get('lower_s'), '.1f')} / "
                         f"{fmt(b.get('compile_s'), '.1f')} |")
        lines.append("")
        lines += ["Seconds per program before the first update (trace / lower / compile or load), cold | cached:", ""]
        names = sorted({n for r in res["ttfu"]
                        for n in r.get("compile_log", {}).get("before_first_update", {}).get("by_program", {})})
        for name in names:
            cells = []
            for r in res["ttfu"]:
                e = r.get("compile_log", {}).get("before_first_update", {}).get("by_program", {}).get(name)
                cells.append("-" if e is None else f"{int(e['programs'])}x {e['trace_s']:.2f} / {e['lower_s']:.2f} / "
                             f"{e['compile_s']:.2f}")
            lines.append(f"- `{name}`: " + " | ".join(cells))
        lines.append("")
    if any(res["ms"].get(m, {}).get(v) for m in MEASURES for v in variants):
        lines += ["| measure | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
        for m in MEASURES:
            lines.append(f"| {m} | " + " | ".join(_summary(res["ms"][m][v]) for v in variants) + " |")
        step, act = (res["ms"][m] for m in ("device path: step (update + act)", "device path: act alone"))
        lines.append("| device path: update (step minus act alone, medians) | " + " | ".join(
            fmt(statistics.median(step[v]) - statistics.median(act[v]) if step[v] and act[v] else None, ".3f")
            for v in variants) + " |")
        lines.append("")
    if res["programs"]:
        lines += ["| program | variant | first call s | kernels | fusions | custom calls | copies | command buffers "
                  "(kernels in them) |", "|---|---|---|---|---|---|---|---|"]
        keys = sorted({k for v in res["programs"].values() for k in v})
        for key in keys:
            for v in variants:
                p = res["programs"].get(v, {}).get(key)
                if p:
                    lines.append(f"| `{key}` | {v} | {p['first_call_s']:.2f} | {p['kernels']} | {p['fusions']} | "
                                 f"{p['custom_calls']} | {p['copies']} | {p['command_buffers']} "
                                 f"({p['in_command_buffers']}) |")
        lines.append("")
    lines.append("The first call of a program compiles it, or loads it from the cache the CLI runs filled.")
    if not gpu:
        lines += ["", "**No GPU: a CPU run tests the job; its numbers say nothing about the GPU.**"]
    return write_results(out, res, "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
