"""One training step of each agent on the CPU-simulator recipe, part by part: env step, act, replay sample, the
update and each of its parts, the loop's host work, and an evaluation action through ``agent.act`` and through
the loop's host-side evaluation policy.

    python -m bench breakdown --out $OUT/breakdown        # GPU (H200): recipe sizes, strict fused kernels
    python -m bench breakdown --out /tmp/breakdown --tiny  # CPU in seconds: tiny networks, a few calls per part

Each agent (torch, then JAX), its training env, replay buffer, reward normaliser and noise are built as the training
loop builds them, on upstream's gymnasium MuJoCo recipe (``bench.common.UPSTREAM_RECIPE``: HalfCheetah-v4, one env,
batch 512, critic 256 x 2 blocks, actor 128 x 2 blocks, the host replay buffer; torch with
``bench.common.TORCH_RECIPE_EXTRA``: CUDA graphs, no torch.compile) and ``--torch-backend`` / ``--jax-backend``
strict; its replay buffer is filled with ``--fill`` random-action steps. Every part is then timed in ``--repeats``
blocks of ``--iters`` calls after ``--warmup`` untimed calls (compilation, graph capture), the device synchronised
before the clock starts and after the last call of a block (``torch.cuda.synchronize``; ``jax.block_until_ready`` or
the agent's metric read-back), so a GPU's queued work is inside the block it belongs to; the report gives the median
block's milliseconds per call. ``update`` and ``training step`` run in blocks of whole actor-update periods after at
least five periods untimed, so every variant of the update is compiled (JAX) or captured (torch) before the clock
starts. Parts: ``env step`` (``step_env`` on the training env), ``act`` (the training action with noise,
``agent.act``), ``host work`` (storing the transition, the reward statistics, the noise draw), ``replay sample``
(``buffer.sample`` and the reward normalisation), ``batch to device`` (``agent.to_batch``), ``update`` (the whole
``agent.update`` as the loop calls it: torch's CUDA-graph replay, JAX's one program), then the update's parts on a
device batch through their public functions, each alone (torch eagerly, JAX each part its own jitted program, so
their sum exceeds the fused whole): ``actor step`` (with its optimiser step and weight projection), ``temperature
step``, ``critic TD target``, ``critic step`` (the target included), ``target EMA``, ``weight normalisation`` (actor
and critic), and ``eval action: agent.act`` against ``eval action: evaluation policy``
(``agent_common.host.evaluation_policy``, the host-side snapshot the evaluation acts with), both on one observation.
``kernels per update`` counts the device kernels of the loop's update calls with the profiler (GPU only); with both
frameworks, each is measured in a process of its own (one profiler holds the GPU's CUPTI per process).
``training step`` is the loop's step composed of the parts (act, env step, host work, sample, update); each part's
share of it is in the report. ``--tiny`` runs on the CPU with tiny networks and reference backends: it tests the
job; its numbers say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.common import (
    TORCH_RECIPE_EXTRA,
    UPSTREAM_RECIPE,
    environment,
    fmt,
    merge_overrides,
    tiny_defaults,
    write_results,
)

__all__ = ["FRAMEWORKS", "PARTS", "LoopParts", "main", "perfetto_gpu_kernels", "recipe", "update_blocks"]

FRAMEWORKS = ("torch", "jax")
STEP_PARTS = ("act", "env step", "host work", "replay sample", "update")  # the training step, in the loop's order
UPDATE_PARTS = ("actor step", "temperature step", "critic TD target", "critic step", "target EMA",
                "weight normalisation")
PARTS = (*STEP_PARTS, "batch to device", *UPDATE_PARTS, "eval action: agent.act", "eval action: evaluation policy",
         "training step")
UPDATE_WARMUP_PERIODS = 5  # untimed actor-update periods before the update's blocks (compilation, graph capture)
TINY = ["agent.actor_hidden_dim=8", "agent.critic_hidden_dim=8", "agent.actor_num_blocks=1",
        "agent.critic_num_blocks=1", "agent.sample_batch_size=8", "env.max_episode_steps=30", "num_threads=1",
        "agent.buffer_max_length=1000", "agent.device_type=cpu"]


def recipe(framework: str, backend: str, fill: int, tiny: bool, extra: list[str]) -> list[str]:
    """The config overrides of one agent: the CPU-simulator recipe, a strict ``backend``, a replay buffer that can
    sample after ``fill`` steps, no logging; ``--tiny``'s sizes and ``extra`` on top."""
    base = list(UPSTREAM_RECIPE) + (list(TORCH_RECIPE_EXTRA) if framework == "torch" else [])
    ours = [f"agent.categorical_target_backend={backend}", "agent.categorical_target_strict=true",
            f"agent.buffer_min_length={fill}", "num_eval_episodes=1", "logger_type=none", "progress_bar=false"]
    return merge_overrides(merge_overrides(base, ours + (TINY if tiny else [])), extra)


def _blocks(call: Callable[[], Any], sync: Callable[[Any], Any], iters: int, repeats: int,
            warmup: int) -> list[float]:
    """Milliseconds per call of ``repeats`` blocks of ``iters`` calls (after ``warmup`` untimed calls), ``sync`` on
    the last output before the clock starts and after each block's last call."""
    out = None
    for _ in range(warmup):
        out = call()
    sync(out)
    blocks = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            out = call()
        sync(out)
        blocks.append(1e3 * (time.perf_counter() - t0) / iters)
    return blocks


def _torch_parts(agent: Any, batch: dict[str, np.ndarray]) -> tuple[dict[str, Callable[[], Any]], Callable]:
    """The torch agent's update parts on one device batch, and the sync (``torch.cuda.synchronize`` on a GPU)."""
    import torch

    from agent_torch.update import critic_target, update_actor, update_critic, update_target, update_temperature

    b = agent.to_batch(batch)
    entropy = torch.ones((), device=agent.device)
    nets = (agent.actor, agent.critic, agent.target_critic, agent.temperature)
    actor, critic, target, temperature = nets

    def weight_normalisation() -> None:
        actor.normalize()
        critic.normalize()

    parts = {
        "actor step": lambda: update_actor(actor, critic, temperature, b, agent.ctx, agent.scaler),
        "temperature step": lambda: update_temperature(temperature, entropy, agent.ctx),
        "critic TD target": lambda: torch.no_grad()(critic_target)(actor, target, temperature, b, agent.ctx),
        "critic step": lambda: update_critic(actor, critic, target, temperature, b, agent.ctx, agent.scaler),
        "target EMA": lambda: update_target(critic, target, agent.ctx.tau),
        "weight normalisation": weight_normalisation,
    }
    cuda = agent.device.type == "cuda"
    return parts, (lambda _: torch.cuda.synchronize(agent.device)) if cuda else (lambda _: None)


def _jax_parts(agent: Any, batch: dict[str, np.ndarray]) -> tuple[dict[str, Callable[[], Any]], Callable]:
    """The JAX agent's update parts on one device batch, each its own jitted program on the agent's current state
    (not donated), and the sync (``jax.block_until_ready``)."""
    import jax
    import jax.numpy as jnp

    from agent_jax.networks import normalize_parameters
    from agent_jax.update import critic_target, update_actor, update_critic, update_target, update_temperature

    b = agent.to_batch(batch)
    ctx = agent.ctx
    key = jax.device_put(jax.random.PRNGKey(0), agent.device)
    entropy = jax.device_put(jnp.ones((), jnp.float32), agent.device)
    actor_step = jax.jit(lambda s, b, c, k: update_actor(s.actor, s.critic, s.temperature, b, c, k))
    temperature_step = jax.jit(lambda s, e, c: update_temperature(s.temperature, e, c))
    td_target = jax.jit(lambda s, b, c, k: critic_target(s.actor, s.critic, s.temperature, b, c, k))
    critic_step = jax.jit(lambda s, b, c, k: update_critic(s.actor, s.critic, s.temperature, b, c, k))
    ema = jax.jit(lambda s, c: update_target(s.critic, c.tau))
    project = jax.jit(lambda s: (normalize_parameters(s.actor.apply_fn, s.actor.params, s.actor.batch_stats),
                                 normalize_parameters(s.critic.apply_fn, s.critic.params, s.critic.batch_stats)))
    parts = {  # on the agent's state at the call: its update donates the buffers of the state before it
        "actor step": lambda: actor_step(agent.state, b, ctx, key),
        "temperature step": lambda: temperature_step(agent.state, entropy, ctx),
        "critic TD target": lambda: td_target(agent.state, b, ctx, key),
        "critic step": lambda: critic_step(agent.state, b, ctx, key),
        "target EMA": lambda: ema(agent.state, ctx),
        "weight normalisation": lambda: project(agent.state),
    }
    return parts, jax.block_until_ready


KERNEL_SKIP = ("memcpy", "memset")  # device copies and fills are not kernels of the update


def _kernel_summary(names_us: list[tuple[str, float]], updates: int) -> dict[str, Any]:
    """{"per_update", "device_us_per_update", "top"} from the device kernels ``(name, µs)`` seen over ``updates``
    updates; ``top``: the 15 most frequent kernel names with their count and µs per update."""
    by_name: dict[str, list[float]] = {}
    for name, us in names_us:
        by_name.setdefault(name, []).append(us)
    top = sorted(by_name.items(), key=lambda kv: -len(kv[1]))[:15]
    return {"per_update": len(names_us) / updates, "device_us_per_update": sum(us for _, us in names_us) / updates,
            "top": [{"name": n[:120], "per_update": len(v) / updates, "us_per_update": sum(v) / updates}
                    for n, v in top]}


def torch_kernels_per_update(update: Callable[[], Any], updates: int) -> dict[str, Any] | None:
    """The device kernels of ``updates`` calls of ``update`` (already warmed up: graph captured), from the torch
    profiler's CUDA activity (CUPTI records each kernel node of a replayed CUDA graph); None without CUDA."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(updates):
            update()
        torch.cuda.synchronize()
    kernels = [(e.name, e.device_time) for e in prof.events()
               if e.device_type == DeviceType.CUDA and not e.name.lower().startswith(KERNEL_SKIP)]
    out = _kernel_summary(kernels, updates)
    out["method"] = "torch.profiler CUDA activity over the loop's update calls (graph replay)"
    return out


def jax_kernels_per_update(update: Callable[[], Any], sync: Callable[[Any], Any], updates: int,
                           trace_dir: str) -> dict[str, Any] | None:
    """The device kernels of ``updates`` calls of ``update`` (already compiled; ``sync`` waits for the last), from a
    ``jax.profiler`` trace's Perfetto export (``perfetto_gpu_kernels``); None without a GPU."""
    import glob
    import gzip
    import json

    import jax

    if jax.default_backend() != "gpu":
        return None
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        for _ in range(updates):
            out = update()
        sync(out)
    files = sorted(glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True))
    if not files:
        return None
    with gzip.open(files[-1]) as f:
        kernels, threads = perfetto_gpu_kernels(json.load(f))
    if not kernels:
        return {"per_update": None, "threads": threads}
    out = _kernel_summary(kernels, updates)
    out["method"] = "jax.profiler trace (Perfetto export), events on the GPU stream threads"
    out["threads"] = threads
    return out


def perfetto_gpu_kernels(trace: dict | list) -> tuple[list[tuple[str, float]], list[str]]:
    """The kernels ``[(name, µs)]`` of a Perfetto trace (JSON trace-event format, as ``jax.profiler`` exports it):
    complete ("X") events on the threads named "...Stream..." of processes named "...GPU...", copies and fills
    excluded; and the names of those stream threads (all GPU threads when there is none, for the report)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    gpu = {pid for pid, name in procs.items() if "gpu" in name.lower()}
    streams = {key for key, name in threads.items() if key[0] in gpu and "stream" in name.lower()}
    kernels = [(e.get("name", ""), float(e.get("dur", 0.0))) for e in events
               if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in streams
               and not e.get("name", "").lower().startswith(KERNEL_SKIP)]
    return kernels, sorted({threads[k] for k in (streams or {k for k in threads if k[0] in gpu})})


class LoopParts:
    """One agent with its training env, replay buffer, reward normaliser and noise, built as the training loop builds
    them (seeded streams of ``agent_common.seeding``), the buffer filled with ``fill`` random-action steps; its
    methods are the loop's parts of an interaction step. ``close`` closes the env.

    With an agent that keeps the replay rows itself (``fused``: the torch agent with
    ``agent.buffer_device_type=cuda``), the rows go to its storage and its ``step`` does the device work, as in the
    loop: ``update`` is ``step`` with one update and no action, ``act`` is ``step`` with no update, and the training
    step is env step, host work, then ``step`` with one update and the next action."""

    def __init__(self, framework: str, overrides: list[str], fill: int) -> None:
        from agent_common.buffer import ReplayBuffer
        from agent_common.config import load_config
        from agent_common.envs import make_vec_env, step_env
        from agent_common.noise import ZetaNoise
        from agent_common.normalizer import RewardNormalizer
        from agent_common.seeding import BUFFER_STREAM, NOISE_STREAM, WARMUP_STREAM

        if framework == "torch":
            from agent_torch.agent import make_agent
        else:
            from agent_jax.agent import make_agent
        cfg = load_config(overrides, framework)  # type: ignore[arg-type]
        a, env = cfg.agent, cfg.env
        if int(cfg.num_devices) != 1:
            raise ValueError(f"{framework}: the loop's parts are timed on one device, got num_devices="
                             f"{cfg.num_devices}")
        t0 = time.perf_counter()
        self._step_env = step_env
        self.cfg = cfg
        self.envs = make_vec_env(env.env_name, int(cfg.num_train_envs), cfg.seed, env.rescale_action,
                                 env.max_episode_steps, env.env_type)
        try:
            observation, _ = self.envs.reset(seed=cfg.seed)
            obs_space, act_space = self.envs.single_observation_space, self.envs.single_action_space
            obs_dim, act_dim, num_envs = int(obs_space.shape[0]), int(act_space.shape[0]), int(cfg.num_train_envs)
            self.agent = make_agent(cfg, obs_space, act_space)
            storage = (self.agent.replay_storage(a.buffer_max_length) if self.agent.capabilities.device_replay
                       else None)
            self.fused = storage is not None
            self.buffer = ReplayBuffer(obs_dim, act_dim, a.buffer_max_length, a.buffer_min_length, cfg.n_step,
                                       cfg.gamma, seed=[cfg.seed, BUFFER_STREAM], storage=storage)
            self.normalizer = RewardNormalizer(cfg.gamma, a.normalized_G_max, enabled=a.normalize_reward)
            self.noise_source = ZetaNoise(num_envs, act_dim, a.actor_noise_zeta_mu, a.actor_noise_zeta_max,
                                          seed=[cfg.seed, NOISE_STREAM])
            warmup_rng = np.random.Generator(np.random.PCG64([cfg.seed, WARMUP_STREAM]))
            low, high = np.asarray(act_space.low, np.float32), np.asarray(act_space.high, np.float32)  # (A,), (A,)
            self.observation = np.asarray(observation, np.float32)  # (E, O)
            self.result: Any = None
            for _ in range(fill):  # the loop's random-action warm-up
                action = warmup_rng.uniform(low, high, size=(num_envs, act_dim)).astype(np.float32)  # (E, A)
                result = step_env(self.envs, action)
                self.buffer.add(self.observation, action, result.reward, result.terminated, result.truncated,
                                result.next_observation)
                self.normalizer.update(result.reward, result.terminated, result.truncated)
                self.observation = result.reset_observation  # (E, O)
        except BaseException:
            self.envs.close()
            raise
        self.build_s = time.perf_counter() - t0
        self.noise = self.noise_source.sample()  # (E, A)
        self.batch = None if self.fused else self.sample()
        self.action = self.act()
        self.env_step()  # a result for host_work's first call

    def sample(self) -> dict[str, np.ndarray]:
        batch = self.buffer.sample(int(self.cfg.agent.sample_batch_size))
        batch["reward"] = self.normalizer.normalize(batch["reward"])  # (B,)
        return batch

    def _scale(self) -> float:
        return self.normalizer.scale() if self.normalizer.enabled else 1.0

    def act(self) -> np.ndarray:
        if self.fused:
            self.action = self.agent.step(self.observation, self.noise, 0, self._scale())  # (E, A)
        else:
            self.action = self.agent.act(self.observation, self.noise)  # (E, A)
        return self.action

    def env_step(self) -> None:
        self.result = self._step_env(self.envs, self.action)
        self.observation = self.result.reset_observation  # (E, O)

    def host_work(self) -> None:
        r = self.result
        self.buffer.add(self.observation, self.action, r.reward, r.terminated, r.truncated, r.next_observation)
        self.normalizer.update(r.reward, r.terminated, r.truncated)
        self.noise_source.sample()

    def update(self) -> dict[str, float] | None:
        """``agent.update`` on the one batch sampled at construction (fused: one update in ``step``, on the device's
        own sample)."""
        if self.fused:
            return self.agent.step(self.observation, None, 1, self._scale())
        return self.agent.update(self.batch)

    def training_step(self) -> None:
        if self.fused:  # the loop's order: the env steps with the action the previous step computed
            self.env_step()
            self.host_work()
            self.action = self.agent.step(self.observation, self.noise, 1, self._scale())
            return
        self.act()
        self.env_step()
        self.host_work()
        self.agent.update(self.sample())

    def close(self) -> None:
        self.envs.close()


def measure(framework: str, overrides: list[str], fill: int, iters: int, repeats: int, warmup: int,
            trace_root: str) -> dict:
    """The parts of one agent: {"ms": {part: [ms per call of each block]}, ...} (``LoopParts``)."""
    from agent_common.config import load_config
    from agent_common.host import evaluation_policy

    buffer_device = load_config(overrides, framework).agent.buffer_device_type  # type: ignore[arg-type]
    if buffer_device != "cpu":
        raise ValueError(f"{framework}: the breakdown times the host replay buffer's parts; got "
                         f"agent.buffer_device_type={buffer_device} (expected cpu: drop it from --torch-overrides / "
                         "--jax-overrides)")
    run = LoopParts(framework, overrides, fill)
    agent = run.agent
    try:
        if framework == "torch":
            parts, device_sync = _torch_parts(agent, run.batch)
            update_sync = device_sync
        else:
            parts, device_sync = _jax_parts(agent, run.batch)
            update_sync = lambda _: agent.flush_metrics()  # noqa: E731  waits for the last update's metrics
        eval_obs = np.asarray(run.observation[:1], dtype=np.float32)  # (1, O)
        policy = evaluation_policy(agent)
        calls: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]] = {
            "act": (run.act, device_sync),
            "env step": (run.env_step, lambda _: None),
            "host work": (run.host_work, lambda _: None),
            "replay sample": (run.sample, lambda _: None),
            "batch to device": (lambda: agent.to_batch(run.batch), device_sync),
            "update": (run.update, update_sync),
            **{name: (fn, device_sync) for name, fn in parts.items()},
            "eval action: agent.act": (lambda: agent.act(eval_obs, None), device_sync),
            "eval action: evaluation policy": (lambda: policy(eval_obs), lambda _: None),
            "training step": (run.training_step, update_sync),
        }
        # The update alternates variants (actor + critic every ``actor_update_period``-th update, else critic only):
        # its blocks hold whole periods, and its warm-up compiles (JAX) or captures (torch: CUDA graphs after three
        # eager calls per variant) every variant before the clock starts.
        update_iters, update_warmup = update_blocks(run, iters, warmup)
        ms = {}
        for name in PARTS:
            call, sync = calls[name]
            whole = name in ("update", "training step")
            ms[name] = _blocks(call, sync, update_iters if whole else iters, repeats,
                               update_warmup if whole else warmup)
            print(f"  {framework} {name}: {statistics.median(ms[name]):.3f} ms", flush=True)
        # Kernels per update over whole actor-update periods, on the loop's update path (already warm).
        period = int(run.cfg.agent.actor_update_period)
        if framework == "torch":
            kernels = torch_kernels_per_update(run.update, 4 * period)
        else:
            kernels = jax_kernels_per_update(run.update, update_sync, 4 * period,
                                             os.path.join(trace_root, f"jax-trace-{os.getpid()}"))
        if kernels is not None:
            print(f"  {framework} kernels per update: {kernels.get('per_update')}", flush=True)
    finally:
        run.close()
    return {"ms": ms, "kernels": kernels, "build_and_fill_s": run.build_s, "device": str(getattr(agent, "device", "")),
            "info": {k: v for k, v in agent.info().items() if isinstance(v, str)}}


def update_blocks(run: LoopParts, iters: int, warmup: int) -> tuple[int, int]:
    """Calls per block and untimed calls of the update and the training step: whole actor-update periods, at
    least ``UPDATE_WARMUP_PERIODS`` of them untimed."""
    period = int(run.cfg.agent.actor_update_period)
    return period * -(-iters // period), max(warmup, UPDATE_WARMUP_PERIODS * period)


def _report(out: str, res: dict) -> str:
    c = res["config"]
    gpu = res["env"].get("gpu")
    frameworks = [fw for fw in FRAMEWORKS if fw in res["agents"]]
    lines = [f"# One training step, part by part ({gpu or 'CPU'}, {res['env']['date_utc']})", "",
             f"`{res['env']['command']}`: {', '.join(c['overrides'][frameworks[0]]) if frameworks else ''}; "
             f"{c['iters']} calls x {c['repeats']} blocks per part after {c['warmup']} untimed, median block.", "",
             "| part | " + " | ".join(f"{fw} ms | {fw} % of step" for fw in frameworks) + " |",
             "|---|" + "---|---|" * len(frameworks)]
    for name in PARTS:
        cells = []
        for fw in frameworks:
            med = res["agents"][fw]["median_ms"]
            share = 100 * med[name] / med["training step"] if name in STEP_PARTS and med["training step"] else None
            cells += [fmt(med[name], ".3f"), fmt(share, ".0f")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    kernels = {fw: res["agents"][fw].get("kernels") or {} for fw in frameworks}
    lines.append("| kernels per update (profiler) | " + " | ".join(
        f"{fmt(kernels[fw].get('per_update'), '.1f')} | " for fw in frameworks) + " |")
    lines.append("| kernel device time per update, µs | " + " | ".join(
        f"{fmt(kernels[fw].get('device_us_per_update'), '.0f')} | " for fw in frameworks) + " |")
    lines += ["", "The update's parts are timed alone (torch eagerly, JAX one jitted program each): their sum exceeds "
              "`update`, which runs them as one CUDA graph (torch) or one program (JAX). Kernels per update: the "
              "device kernels of 4 actor-update periods of the loop's update calls (torch: torch.profiler's CUDA "
              "activity; JAX: a jax.profiler trace's GPU stream events), copies and fills excluded; on a CPU none."]
    if not gpu:
        lines += ["", "**No GPU: a CPU run; its numbers say nothing about the GPU.**"]
    return write_results(out, res, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    """CLI; returns 0 when every agent was measured (the report is written either way)."""
    ap = argparse.ArgumentParser(prog="python -m bench breakdown", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--frameworks", default="torch,jax", help="comma-separated: torch, jax")
    ap.add_argument("--iters", type=int, default=200, help="calls per timed block")
    ap.add_argument("--repeats", type=int, default=3, help="timed blocks per part")
    ap.add_argument("--warmup", type=int, default=20, help="untimed calls per part before its blocks")
    ap.add_argument("--fill", type=int, default=2_000, help="random-action steps stored before the timing")
    ap.add_argument("--torch-backend", default="triton")
    ap.add_argument("--jax-backend", default="pallas")
    ap.add_argument("--torch-overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--jax-overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--tiny", action="store_true", help="CPU in seconds: tiny networks, reference backends")
    a = tiny_defaults(ap, argv, iters=3, repeats=1, warmup=1, fill=20, torch_backend="torch", jax_backend="jax")
    frameworks = [f.strip() for f in a.frameworks.split(",") if f.strip()]
    bad = [f for f in frameworks if f not in FRAMEWORKS]
    if bad or not frameworks:
        ap.error(f"--frameworks: expected a comma-separated subset of {', '.join(FRAMEWORKS)}, got {a.frameworks!r}")
    for name in ("iters", "repeats", "fill"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 0:
        ap.error(f"--warmup must be >= 0, got {a.warmup}")
    out = os.path.abspath(a.out)
    backends = {"torch": a.torch_backend, "jax": a.jax_backend}
    extras = {"torch": a.torch_overrides, "jax": a.jax_overrides}
    overrides = {fw: recipe(fw, backends[fw], a.fill, a.tiny, extras[fw]) for fw in frameworks}
    res: dict[str, Any] = {"env": environment(), "config": {"iters": a.iters, "repeats": a.repeats,
                                                           "warmup": a.warmup, "fill": a.fill, "tiny": a.tiny,
                                                           "overrides": overrides}, "agents": {}}
    for fw in frameworks:
        print(f"{fw}:", flush=True)
        if len(frameworks) == 1:
            measured = measure(fw, overrides[fw], a.fill, a.iters, a.repeats, a.warmup, tempfile.mkdtemp())
            measured["median_ms"] = {name: statistics.median(v) for name, v in measured["ms"].items()}
        else:  # each framework in a process of its own: one profiler may hold the GPU's CUPTI per process
            child = os.path.join(tempfile.mkdtemp(), fw)
            cmd = [sys.executable, "-m", "bench", "breakdown", "--out", child, "--frameworks", fw,
                   "--iters", str(a.iters), "--repeats", str(a.repeats), "--warmup", str(a.warmup),
                   "--fill", str(a.fill), "--torch-backend", a.torch_backend, "--jax-backend", a.jax_backend,
                   *(f"--{fw}-overrides={o}" for o in extras[fw]), *(["--tiny"] if a.tiny else [])]
            if subprocess.run(cmd).returncode != 0:
                print(f"{fw}: the breakdown's child process failed: {' '.join(cmd)}", file=sys.stderr)
                continue
            with open(os.path.join(child, "results.json")) as f:
                measured = json.load(f)["agents"][fw]
        res["agents"][fw] = measured
        _report(out, res)
    print(_report(out, res))
    return 0 if list(res["agents"]) == frameworks else 1


if __name__ == "__main__":
    sys.exit(main())
