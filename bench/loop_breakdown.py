"""Where the wall time of one env step goes in real training through an agent's CLI (both frameworks).

    python -m bench.loop_breakdown --framework jax --out $OUT/breakdown_jax -- --overrides num_env_steps=6000 ...
    python -m bench.loop_breakdown --framework torch --out /tmp/b --tiny -- --overrides agent.device_type=cpu ...

The CLI's ``main`` runs in this process with timers wrapped around the loop's parts (``agent_common.loop``):

- ``env``: ``step_env`` (the training vector env's step, auto-reset included);
- ``act``: ``_Loop.act`` (torch: the policy call, which waits for the previous update on the device; JAX: hands out
  the action the previous fused step computed);
- ``buffer_add`` and ``normalizer``: the host replay buffer's ``add`` and the reward normaliser's ``update``;
- ``sample`` and ``update``: the unfused path (torch): ``ReplayBuffer.sample`` and ``agent.update``;
- ``step_agent``: the fused path (JAX): ``_Loop.step_agent``, which draws the noise (``noise``) and calls the agent's
  ``step`` (``agent_step``); that one takes the staged rows (``take_pending``) and makes the jitted ``env_step``
  call, split into ``dispatch`` (until the call returns) and ``action_wait`` (waiting for the action it returns to be
  ready on the device);
- ``other``: the rest of the step (the loop's bookkeeping, the progress bar, logging).

Only steps after ``--skip`` steps past the first update are counted (compilation and CUDA-graph capture excluded).
Reported: microseconds per env step for each part, and the steady env steps/s of the counted steps. The timers add
a few microseconds per wrapped call; ``action_wait`` makes the wait explicit that the action's copy to the host would
do anyway.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import io
import pstats
import sys
import time
from collections import defaultdict
from typing import Any

import numpy as np

from bench.common import environment, fmt, json_block, trace_events, write_results

TINY = ["agent.actor_hidden_dim=8", "agent.actor_num_blocks=1", "agent.critic_hidden_dim=8",
        "agent.critic_num_blocks=1"]


class _Timers:
    def __init__(self, skip: int) -> None:
        self.skip = skip
        self.totals: dict[str, float] = defaultdict(float)
        self.updates_seen = False
        self.steps_after_update = 0
        self.counting = False
        self.counted_steps = 0
        self.start: float | None = None
        self.end: float | None = None
        self.gc_started = 0.0
        self.profiler: cProfile.Profile | None = None
        self.trace_dir: str | None = None  # jax.profiler trace of the first ``trace_steps`` counted steps
        self.trace_steps = 0
        self.traced_steps = 0
        self.tracing = False

    def add(self, name: str, seconds: float) -> None:
        if self.counting:
            self.totals[name] += seconds

    def step_boundary(self) -> None:
        """Called at the start of every env step (``step_env``)."""
        now = time.perf_counter()
        if self.counting:
            self.counted_steps += 1
            self.end = now
            if self.tracing and self.counted_steps >= self.trace_steps:
                self._stop_trace()
        elif self.updates_seen:
            self.steps_after_update += 1
            if self.steps_after_update > self.skip:
                self.counting, self.start = True, now
                if self.profiler is not None:
                    self.profiler.enable()
                if self.trace_dir is not None and self.trace_steps > 0:
                    import jax

                    options = jax.profiler.ProfileOptions()
                    options.host_tracer_level, options.python_tracer_level = 3, 0  # XLA / PjRt TraceMes, no Python
                    jax.profiler.start_trace(self.trace_dir, profiler_options=options)
                    self.tracing = True

    def _stop_trace(self) -> None:
        import jax

        jax.profiler.stop_trace()
        self.tracing, self.traced_steps = False, self.counted_steps

    def finish(self) -> None:
        """Stops a trace the run ended inside of."""
        if self.tracing:
            self._stop_trace()

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks`` entry: the time the cyclic garbage collector runs during counted steps."""
        if phase == "start":
            self.gc_started = time.perf_counter()
        else:
            self.add("gc", time.perf_counter() - self.gc_started)


def _timed(timers: _Timers, name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            timers.add(name, time.perf_counter() - t0)

    return wrapper


def instrument(framework: str, timers: _Timers) -> list[tuple[Any, str, Any]]:
    """Wraps the loop's parts (module attributes and class methods) with ``timers``; returns what ``restore`` puts
    back."""
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, value: Any) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    from agent_common import buffer, loop, normalizer

    raw_step_env = loop.step_env

    def step_env(*args: Any, **kwargs: Any) -> Any:
        timers.step_boundary()
        t0 = time.perf_counter()
        try:
            return raw_step_env(*args, **kwargs)
        finally:
            timers.add("env", time.perf_counter() - t0)

    patch(loop, "step_env", step_env)
    patch(loop._Loop, "act", _timed(timers, "act", loop._Loop.act))
    patch(buffer.ReplayBuffer, "add", _timed(timers, "buffer_add", buffer.ReplayBuffer.add))
    patch(buffer.ReplayBuffer, "sample", _timed(timers, "sample", buffer.ReplayBuffer.sample))
    patch(normalizer.RewardNormalizer, "update", _timed(timers, "normalizer", normalizer.RewardNormalizer.update))

    raw_step_agent = loop._Loop.step_agent

    def step_agent(self: Any, num_updates: int) -> None:
        if num_updates:
            timers.updates_seen = True
        t0 = time.perf_counter()
        try:
            raw_step_agent(self, num_updates)
        finally:
            timers.add("step_agent", time.perf_counter() - t0)

    patch(loop._Loop, "step_agent", step_agent)
    if framework == "jax":
        import jax

        from agent_jax import agent as jax_agent

        raw_env_step = jax_agent.env_step

        def env_step(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = raw_env_step(*args, **kwargs)
            t1 = time.perf_counter()
            if out[2] is not None:
                jax.block_until_ready(out[2])
            t2 = time.perf_counter()
            if out[2] is not None:
                np.asarray(out[2])  # the action's device-to-host copy (the agent's own read then finds it done)
            t3 = time.perf_counter()
            timers.add("dispatch", t1 - t0)
            timers.add("action_wait", t2 - t1)
            timers.add("action_copy", t3 - t2)
            return out

        patch(jax_agent, "env_step", env_step)
        from agent_common import noise
        from agent_jax import step as jax_step

        cls = jax_agent.FlashSACAgent
        raw_update = cls.update
        patch(cls, "step", _timed(timers, "agent_step", cls.step))
        patch(jax_step.DeviceRowStorage, "take_pending",
              _timed(timers, "take_pending", jax_step.DeviceRowStorage.take_pending))
        patch(noise.ZetaNoise, "sample", _timed(timers, "noise", noise.ZetaNoise.sample))
    else:
        from agent_torch import agent as torch_agent

        cls = torch_agent.FlashSACAgent
        raw_update = cls.update

    def update(self: Any, batch: Any) -> Any:
        timers.updates_seen = True
        t0 = time.perf_counter()
        try:
            return raw_update(self, batch)
        finally:
            timers.add("update", time.perf_counter() - t0)

    patch(cls, "update", update)
    return saved


def restore(saved: list[tuple[Any, str, Any]]) -> None:
    """Undoes ``instrument``."""
    for owner, name, value in reversed(saved):
        setattr(owner, name, value)


PARTS = ("env", "act", "buffer_add", "normalizer", "sample", "update", "step_agent", "agent_step", "dispatch",
         "action_wait", "action_copy", "take_pending", "noise", "gc")


def report(framework: str, timers: _Timers, rc: int, argv: list[str]) -> tuple[dict[str, Any], str]:
    steps = timers.counted_steps
    wall = (timers.end - timers.start) if steps and timers.start is not None and timers.end is not None else 0.0
    per_step = {name: 1e6 * timers.totals.get(name, 0.0) / steps for name in PARTS} if steps else {}
    if steps:
        top = ("env", "act", "buffer_add", "normalizer", "sample", "update", "step_agent")
        per_step["other"] = 1e6 * wall / steps - sum(per_step[n] for n in top)
        per_step["total"] = 1e6 * wall / steps
    res = {"framework": framework, "rc": rc, "cli_args": argv, "counted_steps": steps, "wall_s": wall,
           "env_steps_per_second": steps / wall if wall else None, "us_per_step": per_step,
           "environment": environment()}
    lines = [f"# Loop breakdown, {framework} agent", "", f"CLI arguments: `{' '.join(argv)}`", "",
             f"Counted steps: {steps} ({fmt(res['env_steps_per_second'], '.1f')} env steps/s); exit code {rc}.", "",
             "| part | µs per env step |", "|---|---|"]
    lines += [f"| {name} | {fmt(value, '.1f')} |" for name, value in per_step.items()]
    lines += [""] + json_block("environment", res["environment"])
    return res, "\n".join(lines)


def trace_summary(path: str, steps: int, top: int = 60) -> dict[str, Any]:
    """Per traced env step, from a ``jax.profiler`` trace of ``steps`` steps: each host event name's count and µs
    (events nest, so a caller's time includes its callees'; thread names without their numeric suffixes), and the
    device's kernels (count and busy µs, on the device processes' ``Stream`` threads)."""
    events = trace_events(path)
    host: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    kernels, busy = 0, 0.0
    for e in events:
        if e["process"].startswith("/device:"):
            if e["thread"].startswith("Stream"):
                kernels, busy = kernels + 1, busy + float(e["dur"])
            continue
        entry = host[(e["thread"].split("/")[0], e["name"][:100])]
        entry[0] += 1
        entry[1] += float(e["dur"])
    rows = sorted(host.items(), key=lambda kv: -kv[1][1])[:top]
    return {"steps": steps, "kernels_per_step": kernels / steps, "kernel_busy_us_per_step": busy / steps,
            "host": [{"thread": t, "name": n, "per_step": c / steps, "us_per_step": us / steps}
                     for (t, n), (c, us) in rows]}


def _trace_markdown(summary: dict[str, Any]) -> str:
    lines = [f"## jax.profiler trace of {summary['steps']} counted steps", "",
             f"Device: {fmt(summary['kernels_per_step'], '.1f')} kernels and "
             f"{fmt(summary['kernel_busy_us_per_step'], '.1f')} µs of kernel time per step.", "",
             "| host thread | event | per step | µs per step |", "|---|---|---|---|"]
    lines += [f"| {r['thread']} | `{r['name']}` | {fmt(r['per_step'])} | {fmt(r['us_per_step'], '.1f')} |"
              for r in summary["host"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "jax"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--skip", type=int, default=300, help="steps after the first update left uncounted")
    parser.add_argument("--tiny", action="store_true", help="tiny networks (CPU smoke runs)")
    parser.add_argument("--packing", choices=("default", "none", "matrices", "all"), default="default",
                        help="JAX: how the agent hands its state to env_step (agent_jax.agent.STATE_PACKING)")
    parser.add_argument("--host-action", choices=("default", "on", "off"), default="default",
                        help="JAX: whether env_step writes the action to pinned host memory in its program "
                        "(agent_jax.agent.STEP_ACTION_ON_HOST)")
    parser.add_argument("--cprofile", action="store_true", help="cProfile the counted steps (top functions in the "
                        "report; the profiler slows them down, so the µs are not comparable)")
    parser.add_argument("--jax-trace", default=None, metavar="DIR",
                        help="JAX: jax.profiler-trace the first --trace-steps counted steps into DIR and summarise "
                        "the host events per step (set XLA_FLAGS=--xla_enable_command_buffers_during_profiling=true, "
                        "or XLA runs its command buffers as single kernels while tracing)")
    parser.add_argument("--trace-steps", type=int, default=200)
    parser.add_argument("cli", nargs=argparse.REMAINDER, help="-- then the CLI's arguments (--overrides ...)")
    args = parser.parse_args(argv)
    cli = [a for a in args.cli if a != "--"]
    if args.tiny:
        for item in TINY:
            cli += ["--overrides", item]
    timers = _Timers(args.skip)
    timers.profiler = cProfile.Profile() if args.cprofile else None
    if args.jax_trace is not None:
        if args.framework != "jax":
            parser.error("--jax-trace: the JAX agent only")
        timers.trace_dir, timers.trace_steps = args.jax_trace, args.trace_steps
    gc.callbacks.append(timers.gc_callback)
    saved = instrument(args.framework, timers)
    settings: dict[str, Any] = {}
    if args.framework == "jax":
        from agent_jax import agent as jax_agent
        from agent_jax.train import main as cli_main

        if args.packing != "default":
            saved.append((jax_agent, "STATE_PACKING", jax_agent.STATE_PACKING))
            jax_agent.STATE_PACKING = None if args.packing == "none" else args.packing
        if args.host_action != "default":
            saved.append((jax_agent, "STEP_ACTION_ON_HOST", jax_agent.STEP_ACTION_ON_HOST))
            jax_agent.STEP_ACTION_ON_HOST = args.host_action == "on"
        settings = {"state_packing": jax_agent.STATE_PACKING, "step_action_on_host": jax_agent.STEP_ACTION_ON_HOST}
    else:
        from agent_torch.train import main as cli_main
    try:
        rc = cli_main(cli)
    finally:
        timers.finish()
        restore(saved)
        gc.callbacks.remove(timers.gc_callback)
        if timers.profiler is not None:
            timers.profiler.disable()
    res, markdown = report(args.framework, timers, rc, cli)
    res.update(settings)
    if settings:
        markdown = markdown.replace("\n\nCounted", f"\n\nState packing: {settings['state_packing']}.\n\nCounted", 1)
    if timers.profiler is not None:
        text = io.StringIO()
        pstats.Stats(timers.profiler, stream=text).sort_stats("tottime").print_stats(30)
        res["cprofile"] = text.getvalue()
        markdown += "\n## cProfile of the counted steps (tottime)\n\n```\n" + text.getvalue() + "\n```\n"
    if timers.traced_steps:
        res["trace"] = trace_summary(args.jax_trace, timers.traced_steps)
        markdown += "\n" + _trace_markdown(res["trace"])
    write_results(args.out, res, markdown)
    print(markdown)
    return 0 if rc == 0 and timers.counted_steps else 1


if __name__ == "__main__":
    sys.exit(main())
