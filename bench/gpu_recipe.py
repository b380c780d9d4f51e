"""The GPU-simulator recipe measured part by part: training through both agents' CLIs on MJX at several env counts
(each agent with AMP off / bf16 / fp16), the batched env step alone, the update alone, the MJX evaluation, the
time to a return of 3,000, and upstream FlashSAC's own agent at the recipe's sizes, one process at a time.

The H200 run (a checkout of upstream's public repository at ``~/FlashSAC``, e.g. ``git clone
https://github.com/leeyngdo/FlashSAC``; nothing of it is copied here)::

    python -m bench gpu-recipe --out $OUT/gpu_recipe --upstream ~/FlashSAC

Phases (``--phases``, default all, in this order), each in its own child process, results kept after every phase
(``--amps`` picks the AMP variants of the capture, train and update phases, default all three):
``capture`` checks, per torch AMP variant (off / bf16 / fp16), that the MJX interaction step runs as CUDA-graph
replays with no host synchronisation: it builds the torch MJX trainer at the first ``--envs`` count, runs the warm-up
and a few update steps (warm-up calls and graph capture), then ``--capture-steps`` more steps under
``torch.cuda.set_sync_debug_mode("error")`` (any synchronising CUDA call raises), and records the captured graphs,
the loss scale and the metrics (on the CPU: no graphs and no sync mode, the steps only); ``train`` runs
``bench.mjx`` (``python -m agent_<framework>.train`` on ``agent_common.recipes.gpu_recipe`` at each
``--envs`` count: steady env steps/s and updates/s) for jax and for torch, each with ``agent.use_amp=false``, bf16
and fp16; ``env-step`` runs ``bench.mjx_env_speed`` (the jitted batched step alone, random actions, same env
counts); ``update`` times the update alone on batches sampled from a device replay of random rows, as the MJX loop
runs it (``updates_per_interaction_step`` updates per call: torch ``device_updates``, CUDA-graph replays; JAX
``step`` without an action, one jitted program), at the recipe's batch (the update does not depend on the env
count), per agent and AMP variant; ``eval`` times ``evaluate(num_eval_episodes)`` of each agent's MJX trainer
(first call with its compilation, then a second call); ``learn`` trains each agent through its CLI on the recipe
(torch: ``--learn-amp``), evaluating every ``--learn-eval-every`` interaction steps, until ``--learn-seconds``, and
reports the wall time of the first evaluation whose return reaches ``--target-return``; ``upstream`` builds upstream's
``FlashSACAgent`` (its ``MemoryEfficientTorchUniformBuffer`` on the agent's device, AMP, the recipe's sizes),
fills its replay with random transitions of ``--upstream-envs`` envs and times ``agent.update()`` with
``agent.use_compile=false`` (eager), ``compile_mode=default`` and ``reduce-overhead``. Without ``--upstream`` the
upstream phase is recorded as skipped, with the reason.

The report (``DIR/results.md``) puts the parts side by side: per env count, the loop's interaction step (E / steady
env steps/s) against the env step alone plus ``updates_per_interaction_step`` updates alone, so the loop's overhead
over its parts is visible. ``--tiny`` runs every phase on the CPU in tiny sizes (2 envs, 8-wide networks, batch 8,
12-step episodes, XLA's fast compile and one persistent JAX compilation cache under ``DIR``): it tests the job; its
numbers say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Any

from bench.common import environment, fmt, upstream_commit, write_results

__all__ = ["PHASES", "main"]

PHASES = ("capture", "train", "env-step", "update", "eval", "learn", "upstream")
TORCH_AMP = {"off": ["agent.use_amp=false"], "bf16": ["agent.use_amp=true", "agent.amp_dtype=bf16"],
             "fp16": ["agent.use_amp=true", "agent.amp_dtype=fp16"]}  # the AMP variants (the JAX agent's keys too)
VARIANTS = [(framework, amp) for framework in ("jax", "torch") for amp in TORCH_AMP]
"""(agent, AMP variant) pairs of the train and update phases."""
UPSTREAM_MODES = ("eager", "default", "reduce-overhead")
OBS_DIM, ACT_DIM = 18, 6  # MJX halfcheetah (brax): 18 observations, 6 actions
TINY = ["agent.sample_batch_size=8", "agent.actor_hidden_dim=8", "agent.critic_hidden_dim=8",
        "agent.actor_num_blocks=1", "agent.critic_num_blocks=1", "agent.buffer_max_length=4000",
        "agent.buffer_min_length=8",
        "agent.categorical_target_backend=torch", "agent.categorical_target_strict=false", "num_threads=1",
        "agent.device_type=cpu", "env.max_episode_steps=12"]
TINY_JAX = [o.replace("backend=torch", "backend=jax") for o in TINY]


def _tiny(framework: str) -> list[str]:
    return TINY if framework == "torch" else TINY_JAX


# ------------------------------------------------------------------------------------------------ child phases
def _recipe_cfg(framework: str, extra: list[str]) -> Any:
    from agent_common.config import load_config
    from agent_common.recipes import gpu_recipe

    return load_config([*gpu_recipe("halfcheetah", framework), *extra], framework)


def _random_rows(count: int, obs_dim: int, act_dim: int, seed: int = 0) -> Any:
    """(count, 2O + A + 3) float32 replay rows: random observations and actions, rewards, no episode ends."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = np.zeros((count, 2 * obs_dim + act_dim + 3), np.float32)
    rows[:, :obs_dim] = rng.normal(size=(count, obs_dim))
    rows[:, obs_dim:obs_dim + act_dim] = rng.uniform(-1, 1, (count, act_dim))
    rows[:, obs_dim + act_dim] = rng.normal(size=count)
    rows[:, obs_dim + act_dim + 2:2 * obs_dim + act_dim + 2] = rng.normal(size=(count, obs_dim))
    return rows


def _time_blocks(call: Any, sync: Any, warmup: int, repeats: int, iters: int) -> dict[str, Any]:
    for _ in range(warmup):
        call()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        sync()
        times.append((time.perf_counter() - t0) / iters)
    return {"seconds_per_call": statistics.median(times), "all_seconds_per_call": times}


def capture_overrides(amp: str, num_envs: int, warmup_steps: int = 4) -> list[str]:
    """The capture phase's overrides on the recipe: ``num_envs`` training and evaluation envs (one compiled env
    shape), as many evaluation episodes (a multiple of the evaluation envs), a warm-up of ``warmup_steps`` steps."""
    return [*TORCH_AMP[amp], f"num_train_envs={num_envs}", f"num_eval_envs={num_envs}",
            f"num_eval_episodes={num_envs}", f"agent.buffer_min_length={max(num_envs * warmup_steps, 2048)}"]


def update_agent(framework: str, amp: str, extra: list[str]) -> tuple[Any, Any]:
    """(config, agent) of the update phase: the recipe with the AMP variant's keys and ``extra`` on top, MJX
    halfcheetah's spaces."""
    from agent_interop.synthetic import make_spaces

    if framework == "torch":
        from agent_torch.agent import make_agent
    else:
        from agent_jax.agent import make_agent
    cfg = _recipe_cfg(framework, [*TORCH_AMP[amp], *extra])
    return cfg, make_agent(cfg, *make_spaces(OBS_DIM, ACT_DIM))


def compute_path(framework: str, agent: Any) -> str:
    """The agent's compute path line (torch ``compute_path``, JAX ``info()["compile/path"]``)."""
    return agent.compute_path if framework == "torch" else agent.info()["compile/path"]


def child_update(framework: str, amp: str, extra: list[str], warmup: int, repeats: int, iters: int) -> dict:
    """The update alone on device-sampled batches of random rows (see the module doc)."""
    rows_count = 4096
    cfg, agent = update_agent(framework, amp, extra)
    if framework == "torch":
        import torch

        from agent_torch.replay import TensorRowStorage

        storage = TensorRowStorage(rows_count, 2 * OBS_DIM + ACT_DIM + 3, OBS_DIM, agent.device, 0)
        storage.write(0, _random_rows(rows_count, OBS_DIM, ACT_DIM))
        scale = torch.ones((), device=agent.device)
        n, batch = int(cfg.updates_per_interaction_step), int(cfg.agent.sample_batch_size)

        def call() -> None:
            agent.device_updates(n, lambda: storage.sample(batch, scale))

        res = _time_blocks(call, agent.take_metrics, warmup, repeats, iters)
    else:
        import numpy as np

        storage = agent.replay_storage(rows_count)
        storage.write(0, _random_rows(rows_count, OBS_DIM, ACT_DIM))
        storage.flush()  # the rows on the device: every timed call is the same program (no insert)
        n = int(cfg.updates_per_interaction_step)
        shape_only = np.zeros((1, OBS_DIM), np.float32)  # no action is computed; the program key needs a shape

        def call() -> None:
            agent.step(shape_only, None, n, 1.0)  # updates only: one jitted program

        res = _time_blocks(call, agent.take_metrics, warmup, repeats, iters)
    res["compute_path"] = compute_path(framework, agent)
    res.update(framework=framework, amp=amp, updates_per_call=n, batch_size=int(cfg.agent.sample_batch_size),
               updates_per_second=n / res["seconds_per_call"])
    return res


def child_eval(framework: str, extra: list[str]) -> dict:
    """Seconds of the first (compiling) and second ``evaluate`` of the agent's MJX trainer."""
    cfg = _recipe_cfg(framework, [*(TORCH_AMP["off"] if framework == "torch" else []), *extra])
    if framework == "torch":
        from agent_torch.vector import make_vector_trainer
    else:
        from agent_jax.vector import make_vector_trainer  # type: ignore[assignment]
    trainer = make_vector_trainer(cfg)
    out: dict[str, Any] = {"framework": framework, "num_eval_envs": int(cfg.num_eval_envs),
                           "num_eval_episodes": int(cfg.num_eval_episodes),
                           "max_episode_steps": cfg.env.max_episode_steps}
    for name in ("first", "second"):
        t0 = time.perf_counter()
        result = trainer.evaluate(int(cfg.num_eval_episodes))
        out[f"{name}_s"] = time.perf_counter() - t0
        out[f"{name}_return"] = result.get("avg_return")
    trainer.close()
    return out


def child_capture(amp: str, num_envs: int, steps: int, extra: list[str]) -> dict:
    """The torch MJX interaction step as CUDA-graph replays without host synchronisation (see the module doc)."""
    import torch

    from agent_torch.vector import make_vector_trainer

    cfg = _recipe_cfg("torch", [*capture_overrides(amp, num_envs), *extra])
    trainer = make_vector_trainer(cfg)
    agent = trainer.agent
    fill = -(-int(cfg.agent.buffer_min_length) // num_envs)  # steps until the replay can sample
    trainer.advance(fill + 6)  # warm-up, then updates: eager warm-up calls and the graph captures
    cuda = agent.device.type == "cuda"
    t0 = time.perf_counter()
    if cuda:
        torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(steps):
            trainer.advance(1) if not cuda else _advance_unsynced(trainer)
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
    trainer._sync()
    seconds = time.perf_counter() - t0
    metrics = trainer.take_metrics()
    scaler = agent.scaler
    return {"amp": amp, "num_envs": num_envs, "device": str(agent.device), "graphs": len(agent.graphs or ()),
            "graph_keys": [str(k[:2]) for k in (agent.graphs._graphs if agent.graphs is not None else {})],
            "sync_debug_mode": "error" if cuda else "n/a (CPU)", "checked_steps": steps,
            "seconds_per_step": seconds / steps, "update_step": agent.update_step,
            "loss_scale": None if scaler is None else float(scaler.scale),
            "critic_loss_mean": metrics["critic/loss"][0] / metrics["critic/loss"][1],
            "compute_path": agent.compute_path}


def _advance_unsynced(trainer: Any) -> None:
    """One interaction step as ``TorchVectorTrainer.advance`` runs it, without its closing device wait (which the sync
    debug mode would flag: it is the loop's one wait per chunk, outside the step)."""
    action = trainer._action()
    out = trainer.train_env.step(action)
    trainer.replay.add(trainer.obs, action, out.reward, out.terminated, out.truncated, out.final_obs)
    trainer.normalizer.update(out.reward, out.terminated, out.truncated)
    trainer.obs = out.obs
    trainer.agent.device_updates(trainer.updates_per_step, trainer._sample)


def child_upstream(upstream: str, mode: str, num_envs: int, extra: list[str], warmup: int, repeats: int,
                   iters: int, device: str) -> dict:
    """Upstream's own agent (``flash_rl.agents.flashSAC.agent.FlashSACAgent``) on random transitions."""
    import dataclasses

    import gymnasium as gym
    import numpy as np
    import torch

    sys.path.insert(0, os.path.abspath(upstream))
    from flash_rl.agents.flashSAC.agent import FlashSACAgent, FlashSACConfig  # upstream's checkout, not this repo

    cfg = _recipe_cfg("torch", [*TORCH_AMP["fp16"], *extra])
    a = cfg.agent
    values = {f.name: getattr(a, f.name) for f in dataclasses.fields(FlashSACConfig) if hasattr(a, f.name)}
    values.update(seed=int(cfg.seed), gamma=float(cfg.gamma), n_step=int(cfg.n_step), device_type=device,
                  buffer_device_type=device, use_amp=True, use_compile=mode != "eager",
                  compile_mode="default" if mode == "eager" else mode, temp_target_entropy=None,
                  learning_rate_warmup_step=int(a.learning_rate_warmup_step or 0),
                  learning_rate_decay_step=int(a.learning_rate_decay_step or 1),
                  buffer_min_length=min(int(a.buffer_min_length), 4 * num_envs))
    missing = [f.name for f in dataclasses.fields(FlashSACConfig) if f.name not in values
               and f.default is dataclasses.MISSING]
    if missing:
        raise RuntimeError(f"upstream FlashSACConfig fields this job does not fill: {missing} (another upstream "
                           "version?)")
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
    agent = FlashSACAgent(obs_space, act_space, {}, FlashSACConfig(**values))
    rng = np.random.default_rng(0)
    dev = torch.device(device)
    obs = torch.as_tensor(rng.normal(size=(num_envs, OBS_DIM)), dtype=torch.float32, device=dev)
    steps = max(8, int(math.ceil(values["buffer_min_length"] / num_envs)) + 2)
    for _ in range(steps):
        nxt = torch.as_tensor(rng.normal(size=(num_envs, OBS_DIM)), dtype=torch.float32, device=dev)
        agent.process_transition({
            "observation": obs, "action": torch.as_tensor(rng.uniform(-1, 1, (num_envs, ACT_DIM)),
                                                          dtype=torch.float32, device=dev),
            "reward": torch.as_tensor(rng.normal(size=num_envs), dtype=torch.float32, device=dev),
            "terminated": torch.zeros(num_envs, device=dev), "truncated": torch.zeros(num_envs, device=dev),
            "next_observation": nxt})
        obs = nxt
    if not agent.can_start_training():
        raise RuntimeError(f"upstream replay cannot sample after {steps} steps of {num_envs} envs")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    agent.update()
    first = time.perf_counter() - t0
    res = _time_blocks(agent.update, sync, warmup, repeats, iters)  # update() reads its metrics: synchronous
    res.update(mode=mode, num_envs=num_envs, first_update_s=first, updates_per_second=1.0 / res["seconds_per_call"],
               batch_size=int(values["sample_batch_size"]), upstream_commit=upstream_commit(upstream))
    return res


# ------------------------------------------------------------------------------------------------ orchestration
def _child(args: list[str], log: str, timeout: float, env: dict[str, str]) -> dict:
    from bench.common import timed_run

    return timed_run([sys.executable, "-m", "bench.gpu_recipe", *args], log, timeout, env)


def _child_json(kind: str, args: list[str], out: str, tag: str, timeout: float, env: dict[str, str]) -> dict:
    path = os.path.join(out, "phases", f"{tag}.json")
    rec = _child(["--child", kind, "--child-json", path, *args], os.path.join(out, "logs", f"{tag}.log"), timeout,
                 env)
    if rec["returncode"] == 0 and os.path.isfile(path):
        with open(path) as f:
            rec.update(json.load(f))
    return rec


def _learn(a: argparse.Namespace, framework: str, out: str, env: dict[str, str], tiny: list[str]) -> dict:
    from agent_common.recipes import gpu_recipe
    from bench.common import merge_overrides, tensorboard_events, timed_run, train_command

    run_dir = os.path.join(out, "runs", f"learn-{framework}")
    steps = a.learn_steps
    ours = [f"num_env_steps={a.envs_learn * steps}", f"num_train_envs={a.envs_learn}",
            f"evaluation_per_interaction_step={a.learn_eval_every}", f"max_wall_seconds={a.learn_seconds}",
            f"logging_per_interaction_step={a.learn_eval_every}", "save_buffer=false"]
    amp = TORCH_AMP[a.learn_amp] if framework == "torch" else []
    extra = merge_overrides(merge_overrides(gpu_recipe("halfcheetah", framework), ours), [*amp, *tiny])
    backend = "torch" if a.tiny and framework == "torch" else "jax" if a.tiny else None
    backend = backend or ("triton" if framework == "torch" else "pallas")
    cmd = train_command(framework, backend, a.seed, a.envs_learn * steps, run_dir, extra)
    if a.tiny:
        cmd = [c.replace("agent.categorical_target_strict=true", "agent.categorical_target_strict=false") for c in cmd]
    rec = timed_run(cmd, os.path.join(out, "logs", f"learn-{framework}.log"), a.learn_seconds + 600, env)
    start, events = tensorboard_events(os.path.join(run_dir, "tb"), ["avg_return"])
    series = events.get("avg_return", [])
    rec.update(framework=framework, evaluations=[(s, v, w - start if start is not None else None)
                                                 for s, v, w in series])
    hit = next(((s, w) for s, v, w in series if v >= a.target_return), None)
    rec["time_to_target_s"] = None if hit is None or start is None else hit[1] - start
    rec["env_steps_to_target"] = None if hit is None else hit[0]
    return rec


def _summary_rows(res: dict) -> list[str]:
    """Per env count: interaction step of the loop against env step alone + updates alone."""
    env_step = {r["num_envs"]: r for r in res.get("env_step", {}).get("runs", [])}
    updates = {f"{u.get('framework')}:{u.get('amp')}": u for u in res.get("update", [])}
    rows = ["| agent | envs | loop step ms | env step alone ms | updates alone ms | parts ms | loop / parts |",
            "|---|---|---|---|---|---|---|"]
    for train in res.get("train", []):
        key = f"{train['framework']}:{train['amp']}"
        for run in train.get("runs", []):
            E = run.get("num_envs")
            rate = run.get("steady_env_steps_per_second")
            loop_ms = 1e3 * E / rate if rate else None
            env_s = env_step.get(E, {}).get("seconds_per_call_median")
            steps = env_step.get(E, {}).get("steps")
            env_ms = 1e3 * env_s / steps if env_s and steps else None
            upd = updates.get(key, {}).get("seconds_per_call")
            upd_ms = 1e3 * upd if upd else None
            parts = env_ms + upd_ms if env_ms is not None and upd_ms is not None else None
            ratio = loop_ms / parts if loop_ms and parts else None
            rows.append(f"| {key} | {E} | {fmt(loop_ms, '.2f')} | {fmt(env_ms, '.2f')} | {fmt(upd_ms, '.2f')} | "
                        f"{fmt(parts, '.2f')} | {fmt(ratio, '.2f')} |")
    return rows


def report(out: str, res: dict) -> str:
    c = res["config"]
    lines = [f"# GPU-simulator recipe, part by part ({res['env'].get('gpu') or 'CPU'}, {res['env']['date_utc']})", "",
             f"`{res['env']['command']}`: halfcheetah, envs {c['envs']}, phases {', '.join(c['phases'])}"
             + (" (tiny sizes)" if c["tiny"] else "") + ".", "",
             "## Torch MJX interaction step: CUDA graphs and host synchronisation", "",
             "| AMP | rc | device | graphs | steps under sync debug mode | loss scale | ms per step |",
             "|---|---|---|---|---|---|---|",
             *[f"| {r.get('amp')} | {r.get('returncode')} | {r.get('device')} | {r.get('graphs')} | "
               f"{r.get('checked_steps')} ({r.get('sync_debug_mode')}) | {fmt(r.get('loss_scale'), '.0f')} | "
               f"{fmt(1e3 * r['seconds_per_step'] if r.get('seconds_per_step') else None, '.2f')} |"
               for r in res.get("capture", [])], "",
             "## Training through the CLIs (steady: median of the logging windows after the first update)", "",
             "| agent | envs | rc | steady env steps/s | steady updates/s | time to first update s |",
             "|---|---|---|---|---|---|"]
    for train in res.get("train", []):
        for run in train.get("runs", []) or [{"num_envs": "-", "returncode": train.get("returncode")}]:
            lines.append(f"| {train['framework']}:{train['amp']} | {run.get('num_envs')} | {run.get('returncode')} | "
                         f"{fmt(run.get('steady_env_steps_per_second'), '.1f')} | "
                         f"{fmt(run.get('steady_updates_per_second'), '.1f')} | "
                         f"{fmt(run.get('time_to_first_update_s'), '.1f')} |")
    lines += ["", "## Env step alone (jitted batched step, random actions)", "",
              "| envs | env steps/s | compile s |", "|---|---|---|"]
    for r in res.get("env_step", {}).get("runs", []):
        lines.append(f"| {r.get('num_envs')} | {fmt(r.get('env_steps_per_second'), '.0f')} | "
                     f"{fmt(r.get('compile_s'), '.1f')} |")
    lines += ["", "## Update alone (device-sampled batches, updates_per_interaction_step per call)", "",
              "| agent | rc | batch | updates/s | compute path |", "|---|---|---|---|---|"]
    for u in res.get("update", []):
        lines.append(f"| {u.get('framework')}:{u.get('amp')} | {u.get('returncode')} | {u.get('batch_size')} | "
                     f"{fmt(u.get('updates_per_second'), '.1f')} | {u.get('compute_path', '')} |")
    lines += ["", "## Loop against its parts (per interaction step)", "", *_summary_rows(res)]
    lines += ["", "## Evaluation (num_eval_episodes on num_eval_envs)", "",
              "| agent | rc | envs | episodes | first call s | second call s |", "|---|---|---|---|---|---|"]
    for e in res.get("eval", []):
        lines.append(f"| {e.get('framework')} | {e.get('returncode')} | {e.get('num_eval_envs')} | "
                     f"{e.get('num_eval_episodes')} | {fmt(e.get('first_s'), '.2f')} | "
                     f"{fmt(e.get('second_s'), '.2f')} |")
    lines += ["", f"## Time to a return of {c['target_return']:g}", "",
              "| agent | rc | s | env steps | evaluations (step, return, s) |", "|---|---|---|---|---|"]
    for r in res.get("learn", []):
        evals = "; ".join(f"{s}, {v:.0f}, {fmt(w, '.0f')}" for s, v, w in r.get("evaluations", []))
        lines.append(f"| {r.get('framework')} | {r.get('returncode')} | {fmt(r.get('time_to_target_s'), '.0f')} | "
                     f"{r.get('env_steps_to_target')} | {evals} |")
    lines += ["", "## Upstream FlashSAC's own agent (its GPU replay buffer, AMP, random transitions)", ""]
    up = res.get("upstream")
    if isinstance(up, dict) and "skipped" in up:
        lines.append(f"Skipped: {up['skipped']}")
    else:
        lines += ["| mode | rc | updates/s | first update s | commit |", "|---|---|---|---|---|"]
        for u in up or []:
            lines.append(f"| {u.get('mode')} | {u.get('returncode')} | {fmt(u.get('updates_per_second'), '.1f')} | "
                         f"{fmt(u.get('first_update_s'), '.1f')} | {u.get('upstream_commit')} |")
    if not res["env"].get("gpu"):
        lines += ["", "**No GPU: a CPU run tests the job; its numbers say nothing about the GPU.**"]
    return write_results(out, res, "\n".join(lines) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench gpu-recipe", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=False)
    ap.add_argument("--tiny", action="store_true", help="every phase in tiny sizes on the CPU (tests the job)")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {', '.join(PHASES)}")
    ap.add_argument("--envs", type=int, nargs="+", default=None, help="env counts (default 256 1024 4096; tiny 2)")
    ap.add_argument("--train-steps", type=int, default=None, help="interaction steps per training run (default 60)")
    ap.add_argument("--upstream", default=None, help="a checkout of github.com/leeyngdo/FlashSAC (upstream phase)")
    ap.add_argument("--upstream-envs", type=int, default=1024)
    ap.add_argument("--target-return", type=float, default=3000.0)
    ap.add_argument("--learn-seconds", type=float, default=900.0, help="wall-time cap of each learning run")
    ap.add_argument("--learn-steps", type=int, default=50_000, help="interaction steps of each learning run")
    ap.add_argument("--learn-eval-every", type=int, default=500, help="interaction steps between evaluations")
    ap.add_argument("--learn-amp", choices=tuple(TORCH_AMP), default="bf16", help="the torch learning run's AMP")
    ap.add_argument("--amps", default=",".join(TORCH_AMP),
                    help="AMP variants of the capture, train and update phases, comma-separated (default all)")
    ap.add_argument("--learn-frameworks", default="jax,torch", help="agents of the learn phase, in order")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per child process (learning: its cap + 600)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--capture-steps", type=int, default=20, help="steps checked under the CUDA sync debug mode")
    ap.add_argument("--child", choices=("capture", "update", "eval", "upstream"), help=argparse.SUPPRESS)
    ap.add_argument("--num-envs", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--child-json", help=argparse.SUPPRESS)
    ap.add_argument("--framework", choices=("torch", "jax"), help=argparse.SUPPRESS)
    ap.add_argument("--amp", choices=tuple(TORCH_AMP), default="off", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=UPSTREAM_MODES, help=argparse.SUPPRESS)
    ap.add_argument("--extra", action="append", default=[], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is None and not a.out:
        ap.error("--out DIR is required")
    phases = [p for p in a.phases.split(",") if p]
    bad = [p for p in phases if p not in PHASES]
    if bad:
        ap.error(f"--phases: unknown {bad}; expected a subset of {', '.join(PHASES)}")
    a.phases = phases
    a.amps = [amp for amp in a.amps.split(",") if amp]
    if not a.amps or any(amp not in TORCH_AMP for amp in a.amps):
        ap.error(f"--amps: expected a comma-separated subset of {', '.join(TORCH_AMP)}, got {a.amps}")
    a.learn_frameworks = [f for f in a.learn_frameworks.split(",") if f]
    if not a.learn_frameworks or any(f not in ("jax", "torch") for f in a.learn_frameworks):
        ap.error(f"--learn-frameworks: expected a comma-separated subset of jax, torch, got {a.learn_frameworks}")
    if a.upstream is not None and not os.path.isfile(os.path.join(a.upstream, "flash_rl", "agents", "flashSAC",
                                                                  "agent.py")):
        ap.error(f"--upstream {a.upstream}: no flash_rl/agents/flashSAC/agent.py there; expected a checkout of "
                 "github.com/leeyngdo/FlashSAC (git clone https://github.com/leeyngdo/FlashSAC)")
    a.envs = a.envs or ([2] if a.tiny else [256, 1024, 4096])
    if min(a.envs) < 1:
        ap.error(f"--envs must be >= 1, got {a.envs}")
    a.train_steps = a.train_steps or (24 if a.tiny else 60)
    a.envs_learn = a.envs[0] if a.tiny else 1024
    if a.tiny:
        a.learn_steps, a.learn_eval_every, a.learn_seconds = 16, 8, min(a.learn_seconds, 120.0)
        a.upstream_envs = 2
    return a


def _child_main(a: argparse.Namespace) -> int:
    timing = (1, 2, 2) if "agent.device_type=cpu" in a.extra else (10, 5, 20)
    if a.child == "capture":
        res = child_capture(a.amp, a.num_envs, a.capture_steps, a.extra)
    elif a.child == "update":
        res = child_update(a.framework, a.amp, a.extra, *timing)
    elif a.child == "eval":
        res = child_eval(a.framework, a.extra)
    else:
        device = "cpu" if "agent.device_type=cpu" in a.extra else "cuda"
        res = child_upstream(a.upstream, a.mode, a.upstream_envs, a.extra, *timing, device=device)
    os.makedirs(os.path.dirname(os.path.abspath(a.child_json)), exist_ok=True)
    with open(a.child_json, "w") as f:
        json.dump(res, f, indent=1, default=str)
    print(json.dumps({k: v for k, v in res.items() if not isinstance(v, list)}, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.child is not None:
        return _child_main(a)
    from agent_jax.compilation_cache import jax_cache_env
    from simulators.mjx_env import FAST_COMPILE_ENV

    out = os.path.abspath(a.out)
    for sub in ("logs", "phases"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    env = jax_cache_env(os.path.join(out, "jax_cache"))  # one persistent cache: later processes load programs
    if a.tiny:
        env[FAST_COMPILE_ENV] = "1"
    config = {"tiny": a.tiny, "phases": a.phases, "envs": a.envs, "train_steps": a.train_steps,
              "target_return": a.target_return, "upstream": a.upstream, "seed": a.seed, "amps": a.amps}
    res: dict[str, Any] = {"env": environment(), "config": config}
    variants = [(framework, amp) for framework, amp in VARIANTS if amp in a.amps]
    t0 = time.perf_counter()

    def save(complete: bool = False) -> str:
        res.update(complete=complete, seconds=round(time.perf_counter() - t0, 1))
        return report(out, res)

    def extra_args(framework: str) -> list[str]:
        return [arg for o in (_tiny(framework) if a.tiny else []) for arg in ("--extra", o)]

    if "capture" in a.phases:
        res["capture"] = []
        for amp in a.amps:
            rec = _child_json("capture", ["--amp", amp, "--num-envs", str(a.envs[0]), "--capture-steps",
                                          str(4 if a.tiny else a.capture_steps), *extra_args("torch")], out,
                              f"capture-torch-{amp}", a.timeout_s, env)
            rec["amp"] = amp
            res["capture"].append(rec)
            save()
    if "train" in a.phases:
        res["train"] = []
        warmup, log_every = (4, 4) if a.tiny else (10, 5)
        for framework, amp in variants:
            tag = f"train-{framework}-{amp}"
            sub = os.path.join(out, tag)
            overrides = [*TORCH_AMP[amp], *(_tiny(framework) if a.tiny else [])]
            cmd = ["-m", "bench.mjx", "--out", sub, "--framework", framework, "--envs",
                   *map(str, a.envs), "--steps", str(a.train_steps), "--warmup-steps", str(warmup), "--log-every",
                   str(log_every), "--timeout-s", str(a.timeout_s), "--cache-dir", os.path.join(out, "jax_cache"),
                   *(["--backend", "torch" if framework == "torch" else "jax"] if a.tiny else []),
                   *[arg for o in overrides for arg in ("--overrides", o)]]
            from bench.common import timed_run

            rec = timed_run([sys.executable, *cmd], os.path.join(out, "logs", f"{tag}.log"),
                            a.timeout_s * len(a.envs) + 60, env)
            rec.update(framework=framework, amp=amp)
            if os.path.isfile(os.path.join(sub, "results.json")):
                with open(os.path.join(sub, "results.json")) as f:
                    rec["runs"] = json.load(f).get("runs", [])
            res["train"].append(rec)
            save()
    if "env-step" in a.phases:
        sub = os.path.join(out, "env_step")
        steps, repeats = (4, 2) if a.tiny else (100, 5)
        from bench.common import timed_run

        rec = timed_run([sys.executable, "-m", "bench.mjx_env_speed", "--out", sub, "--envs", *map(str, a.envs),
                         "--steps", str(steps), "--repeats", str(repeats)], os.path.join(out, "logs", "env_step.log"),
                        a.timeout_s, env)
        if os.path.isfile(os.path.join(sub, "results.json")):
            with open(os.path.join(sub, "results.json")) as f:
                got = json.load(f)
            rec["runs"] = [dict(r, steps=steps) for r in _env_speed_runs(got)]
        res["env_step"] = rec
        save()
    if "update" in a.phases:
        res["update"] = []
        for framework, amp in variants:
            tag = f"update-{framework}-{amp}"
            rec = _child_json("update", ["--framework", framework, "--amp", amp, *extra_args(framework)], out, tag,
                              a.timeout_s, env)
            rec.update(framework=framework, amp=amp)
            res["update"].append(rec)
            save()
    if "eval" in a.phases:
        res["eval"] = []
        for framework in ("jax", "torch"):
            rec = _child_json("eval", ["--framework", framework, *extra_args(framework),
                                       *([] if not a.tiny else ["--extra", "num_eval_envs=2", "--extra",
                                                                "num_eval_episodes=2"])],
                              out, f"eval-{framework}", a.timeout_s, env)
            rec["framework"] = framework
            res["eval"].append(rec)
            save()
    if "learn" in a.phases:
        res["learn"] = [_learn(a, framework, out, env, _tiny(framework) if a.tiny else []) for framework in
                        a.learn_frameworks]
        save()
    if "upstream" in a.phases:
        if a.upstream is None:
            res["upstream"] = {"skipped": "no --upstream checkout given (git clone https://github.com/leeyngdo/"
                                          "FlashSAC, then --upstream PATH)"}
        else:
            res["upstream"] = []
            for mode in UPSTREAM_MODES:
                rec = _child_json("upstream", ["--mode", mode, "--upstream", a.upstream, "--upstream-envs",
                                               str(a.upstream_envs), *extra_args("torch")], out, f"upstream-{mode}",
                                  a.timeout_s, env)
                rec["mode"] = mode
                res["upstream"].append(rec)
                save()
    print(save(complete=True))
    failed = [r for key in ("capture", "train", "update", "eval", "learn") for r in res.get(key, [])
              if r.get("returncode") != 0]
    if isinstance(res.get("upstream"), list):
        failed += [r for r in res["upstream"] if r.get("returncode") != 0]
    if res.get("env_step", {}).get("returncode", 0) != 0:
        failed.append(res["env_step"])
    return 1 if failed else 0


def _env_speed_runs(got: dict) -> list[dict]:
    """``bench.mjx_env_speed``'s results.json (``envs_<E>`` sections) as one record per env count."""
    runs = []
    for key, r in got.items():
        if key.startswith("envs_") and isinstance(r, dict) and r.get("seconds_per_call"):
            runs.append({"num_envs": r["num_envs"], "env_steps_per_second": r["median_env_steps_per_s"],
                         "seconds_per_call_median": statistics.median(r["seconds_per_call"]),
                         "compile_s": r.get("first_call_s")})
    return runs


if __name__ == "__main__":
    sys.exit(main())
