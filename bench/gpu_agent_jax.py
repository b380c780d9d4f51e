"""H200 run of the JAX FlashSAC agent: 100k HalfCheetah-v4 env steps, backend pallas (strict), split across calls.

The twin of ``bench/gpu_agent_torch.py`` (same recipe, state packing, progress/summary files), for agent_jax.
Each call trains until ``--budget`` seconds of loop wall time (``max_wall_seconds``), checkpoints (replay buffer
included, so the resume is exact) and exits; the next call resumes from the run directory. When the run reaches
100k env steps, the same call times one update step with backend jax vs pallas, paired and interleaved in one
process on the run's final agent and a batch from its replay buffer, and writes the summary JSON.

Usage (repeat until it prints ``DONE``; each call ends within ~8 minutes with the default budget):

    python -m bench.gpu_agent_jax --run-dir bench/results/agent_jax_halfcheetah_seed0 --seed 0
    python -m bench.gpu_agent_jax ... --overrides agent.sample_batch_size=512   # extra overrides pass through

Split across device machines (each call may land on a fresh machine): carry a folder holding the previous call's
``run_state.tar.gz.part*`` (and the gymnasium / mujoco wheels), e.g. ``.bench_state``, and run

    python3 -m bench.gpu_agent_jax --run-dir /tmp/agent_jax_run --state-in .bench_state --state-out $OUT

then copy the returned files into ``.bench_state`` for the next call (``pack_state`` / ``unpack_state`` are the
torch benchmark's, so both runs travel the same way).

``--timing-only`` needs neither gymnasium nor a run: it times the update step (jax vs pallas, strict) on a
synthetic HalfCheetah-shaped batch with the recipe's network sizes, which is how the update-step figures can be
taken before the wheels are there.

Output: per-call lines (env steps/s, updates/s, eval returns, update ms), ``<run-dir>/progress.json`` (all calls)
and, at the end, ``<run-dir>/summary.json`` plus ``eval.csv``, ``learning_curve.png``, TensorBoard files and
checkpoints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

RECIPE = [
    # upstream scripts/run_mujoco.sh (CPU-sim recipe), FLASHSAC.md §19 -- identical to bench/gpu_agent_torch.py
    "env.env_name=HalfCheetah-v4",
    "num_train_envs=1",
    "num_eval_envs=1",
    "agent.buffer_max_length=1_000_000",
    "agent.buffer_min_length=10_000",
    "agent.buffer_device_type=cpu",
    "agent.sample_batch_size=512",
    "agent.use_amp=false",
    "updates_per_interaction_step=1",
    "gamma=0.99",
    "n_step=1",
    # this benchmark
    "num_env_steps=100_000",
    "evaluation_per_interaction_step=10_000",
    "num_eval_episodes=10",
    "logging_per_interaction_step=1_000",
    "agent.categorical_target_backend=pallas",
    "agent.categorical_target_strict=true",
    "save_buffer=true",
    "progress_bar=false",
]
BACKENDS = ("jax", "pallas")
OBS_DIM, ACT_DIM = 17, 6  # HalfCheetah-v4


def _latest_env_step(run_dir: str) -> int:
    from agent_common.checkpoint import latest_checkpoint, load_pickle
    from agent_common.loop import LOOP_STATE_FILE

    ckpt = latest_checkpoint(run_dir) if os.path.isdir(run_dir) else None
    return -1 if ckpt is None else int(load_pickle(os.path.join(ckpt, LOOP_STATE_FILE))["env_step"])


def _progress(run_dir: str) -> dict:
    path = os.path.join(run_dir, "progress.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"calls": []}


def _time_backends(agent: Any, batch: dict, repeats: int, iters: int) -> dict:
    """Median ms per full update step and per critic target, each backend, interleaved blocks; strict selection."""
    import jax

    from agent_jax.update import critic_target
    from jax_impl import resolve_backend

    for backend in BACKENDS:  # strict: a backend that cannot run raises here instead of timing the fallback
        resolve_backend(backend, strict=True, num_bins=int(agent.cfg.agent.critic_num_bins),
                        platform=agent.device.platform)
    base_ctx = agent.ctx
    device_batch = agent._to_batch(batch)
    target_fn = jax.jit(critic_target)
    results: dict[str, dict[str, list[float]]] = {b: {"update_ms": [], "target_ms": []} for b in BACKENDS}

    def run_block(backend: str, n: int) -> tuple[float, float]:
        agent.ctx = base_ctx.replace(backend=backend)
        jax.block_until_ready(agent.state)
        t0 = time.perf_counter()
        for _ in range(n):
            agent.update(batch)
        jax.block_until_ready(agent.state)
        update_ms = 1e3 * (time.perf_counter() - t0) / n
        s = agent.state
        out = target_fn(s.actor, s.critic, s.temperature, device_batch, agent.ctx, s.rng)
        jax.block_until_ready(out)
        t0 = time.perf_counter()
        for _ in range(n):
            out = target_fn(s.actor, s.critic, s.temperature, device_batch, agent.ctx, s.rng)
        jax.block_until_ready(out)
        return update_ms, 1e3 * (time.perf_counter() - t0) / n

    for backend in BACKENDS:  # warm-up: compile both update variants and the target for each backend
        run_block(backend, max(2, min(10, iters)))
    for _ in range(repeats):
        for backend in BACKENDS:
            update_ms, target_ms = run_block(backend, iters)
            results[backend]["update_ms"].append(update_ms)
            results[backend]["target_ms"].append(target_ms)
    agent.ctx = base_ctx
    agent.flush_metrics()
    out: dict[str, Any] = {b: {k: statistics.median(v) for k, v in r.items()} | {"raw": r}
                           for b, r in results.items()}
    out["batch_size"] = int(batch["reward"].shape[0])
    out["device"] = str(agent.device)
    out["note"] = ("update_ms: one full agent.update incl. the host->device batch copy (actor every 2nd step, so "
                   "averaged over both kinds); target_ms: jitted actor(s') + target critic on 2B rows + "
                   "categorical_td_target")
    return out


def paired_update_timing(run_dir: str, overrides: list[str], repeats: int = 7, iters: int = 50) -> dict:
    """jax vs pallas update-step timing on the run's final agent and a batch from its saved replay buffer."""
    from agent_common.buffer import ReplayBuffer
    from agent_common.checkpoint import latest_checkpoint, load_pickle
    from agent_common.config import load_config
    from agent_common.envs import make_env
    from agent_common.loop import BUFFER_FILE, LOOP_STATE_FILE
    from agent_common.normalizer import RewardNormalizer
    from agent_jax.agent import make_agent

    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None, f"no checkpoint in {run_dir}"
    cfg = load_config(RECIPE + overrides + [f"save_path={run_dir}"], "jax")
    env = make_env(cfg.env.env_name, cfg.seed)
    agent = make_agent(cfg, env.observation_space, env.action_space)
    agent.load(os.path.join(ckpt, "agent"))
    buffer = ReplayBuffer(env.observation_space.shape[0], env.action_space.shape[0], cfg.agent.buffer_max_length, 1,
                          cfg.n_step, cfg.gamma, seed=123)
    buffer.load_state_dict(load_pickle(os.path.join(ckpt, BUFFER_FILE)))
    norm = RewardNormalizer(cfg.gamma, cfg.agent.normalized_G_max)
    norm.load_state_dict(load_pickle(os.path.join(ckpt, LOOP_STATE_FILE))["reward_normalizer"])
    batch = buffer.sample(cfg.agent.sample_batch_size)
    batch["reward"] = norm.normalize(batch["reward"])
    return _time_backends(agent, batch, repeats, iters)


def synthetic_update_timing(batch_size: int, repeats: int, iters: int) -> dict:
    """The same timing without gymnasium / omegaconf: recipe-sized networks, a random HalfCheetah-shaped batch."""
    import types

    import numpy as np

    from agent_jax.agent import FlashSACAgent

    agent_cfg = types.SimpleNamespace(
        use_amp=False, device_type="auto", categorical_target_backend="pallas", categorical_target_strict=True,
        critic_num_bins=101, critic_min_v=-5.0, critic_max_v=5.0, gamma=0.99, n_step=1, actor_bc_alpha=0.0,
        critic_target_update_tau=0.01, temp_target_entropy=-2.869, temp_target_sigma=0.15, actor_num_blocks=2,
        actor_hidden_dim=128, critic_num_blocks=2, critic_hidden_dim=256, temp_initial_value=0.01,
        learning_rate_init=3e-4, learning_rate_peak=3e-4, learning_rate_end=1.5e-4, learning_rate_warmup_step=0,
        learning_rate_decay_step=100_000, actor_update_period=2,
    )
    cfg = types.SimpleNamespace(agent=agent_cfg, seed=0)
    box = types.SimpleNamespace
    obs_space = box(shape=(OBS_DIM,), low=-np.inf * np.ones(OBS_DIM), high=np.inf * np.ones(OBS_DIM))
    act_space = box(shape=(ACT_DIM,), low=-np.ones(ACT_DIM, np.float32), high=np.ones(ACT_DIM, np.float32))
    agent = FlashSACAgent(cfg, obs_space, act_space)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    batch = {
        "observation": rng.standard_normal((batch_size, OBS_DIM)).astype(np.float32),
        "action": rng.uniform(-1, 1, (batch_size, ACT_DIM)).astype(np.float32),
        "reward": (0.3 * rng.standard_normal(batch_size)).astype(np.float32),
        "terminated": np.zeros(batch_size, np.float32),
        "next_observation": rng.standard_normal((batch_size, OBS_DIM)).astype(np.float32),
    }
    return _time_backends(agent, batch, repeats, iters)


def _print_timing(t: dict) -> None:
    print(f"update step: jax {t['jax']['update_ms']:.3f} ms, pallas {t['pallas']['update_ms']:.3f} ms; "
          f"target: jax {t['jax']['target_ms']:.3f} ms, pallas {t['pallas']['target_ms']:.3f} ms "
          f"(B={t['batch_size']}, {t['device']})", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="bench/results/agent_jax_halfcheetah_seed0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=400.0, help="loop wall seconds per call (max_wall_seconds)")
    parser.add_argument("--overrides", action="append", default=[], help="extra config overrides")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--timing-only", action="store_true", help="synthetic-batch jax vs pallas timing only")
    parser.add_argument("--timing-repeats", type=int, default=7, help="interleaved jax/pallas timing blocks")
    parser.add_argument("--timing-iters", type=int, default=50, help="updates per timing block")
    parser.add_argument("--state-in", default=None, help="folder with run_state.tar.gz.part* from an earlier call")
    parser.add_argument("--state-out", default=None, help="folder to write run_state.tar.gz.part* (e.g. $OUT)")
    args = parser.parse_args(argv)
    if args.timing_only:
        timing = synthetic_update_timing(512, args.timing_repeats, args.timing_iters)
        _print_timing(timing)
        if args.state_out is not None:
            os.makedirs(args.state_out, exist_ok=True)
            with open(os.path.join(args.state_out, "timing_jax_agent.json"), "w") as f:
                json.dump(timing, f, indent=2)
        return 0
    from bench.gpu_agent_torch import pack_state, unpack_state  # the same packing for both agents' runs

    run_dir = args.run_dir
    if args.state_in is not None and unpack_state(args.state_in, run_dir):
        print(f"restored the run from {args.state_in} at env_step {_latest_env_step(run_dir)}", flush=True)
    try:
        return _run(args, run_dir)
    finally:
        if args.state_out is not None and os.path.isdir(run_dir):
            for path in pack_state(run_dir, args.state_out):
                print(f"state: {path} ({os.path.getsize(path) / 2**20:.1f} MiB)", flush=True)


def _run(args: argparse.Namespace, run_dir: str) -> int:
    from agent_common.checkpoint import atomic_write_text, latest_checkpoint
    from agent_common.config import load_config
    from agent_common.loop import train

    progress = _progress(run_dir)
    overrides = RECIPE + [f"seed={args.seed}", f"save_path={run_dir}", f"max_wall_seconds={args.budget}"]
    overrides += args.overrides
    done_before = latest_checkpoint(run_dir) is not None and progress.get("completed", False)
    if not done_before:
        if latest_checkpoint(run_dir) is not None:
            overrides.append(f"agent_load_path={run_dir}")
        cfg = load_config(overrides, "jax")
        from agent_jax.agent import make_agent

        t0 = time.time()
        result = train(cfg, make_agent)
        call = {
            "status": result.status,
            "env_step": result.env_step,
            "wall_seconds": result.wall_seconds,
            "call_seconds": time.time() - t0,
            "env_steps_per_second": result.env_steps_per_second,
            "updates_per_second": result.updates_per_second,
            "update_ms": 1e3 * result.update_seconds_mean,
            "evaluations": result.evaluations,
        }
        progress["calls"].append(call)
        progress["completed"] = result.status == "completed"
        os.makedirs(run_dir, exist_ok=True)
        atomic_write_text(os.path.join(run_dir, "progress.json"), json.dumps(progress, indent=2))
        print(
            f"call {len(progress['calls'])}: {result.status} at env_step {result.env_step}; "
            f"wall {result.wall_seconds:.1f} s, env steps/s {result.env_steps_per_second:.1f}, "
            f"updates/s {result.updates_per_second:.1f}, update {call['update_ms']:.2f} ms (dispatch; see timing)",
            flush=True,
        )
        for step, metrics in result.evaluations:
            print(f"  eval env_step={step}: avg_return={metrics['avg_return']:.1f}", flush=True)
        if result.status != "completed":
            print("NOT DONE: run this command again to resume", flush=True)
            return 0
    summary: dict = {"run_dir": run_dir, "seed": args.seed, "recipe": RECIPE + args.overrides, "agent": "jax"}
    calls = progress["calls"]
    summary["train_wall_seconds"] = sum(c["wall_seconds"] for c in calls)
    total_steps = load_config(RECIPE + args.overrides, "jax").num_env_steps
    summary["num_env_steps"] = total_steps
    summary["env_steps_per_second"] = total_steps / max(summary["train_wall_seconds"], 1e-9)
    summary["updates_per_second_by_call"] = [c["updates_per_second"] for c in calls]
    evals = [tuple(e) for c in calls for e in c["evaluations"]]
    summary["eval_returns"] = {int(s): m["avg_return"] for s, m in evals}
    summary["final_return"] = summary["eval_returns"].get(total_steps)
    summary["published_100k"] = {"mean": 9815, "worst_seed": 9685, "best_seed": 10100.6}
    if not args.skip_timing:
        summary["paired_update_timing"] = paired_update_timing(run_dir, args.overrides, repeats=args.timing_repeats,
                                                               iters=args.timing_iters)
    try:
        from agent_common.plot import plot_run

        summary["curve_png"] = plot_run(run_dir)
    except Exception as exc:  # plotting is a convenience; never lose the summary over it
        summary["curve_png_error"] = repr(exc)
    atomic_write_text(os.path.join(run_dir, "summary.json"), json.dumps(summary, indent=2, default=str))
    print(json.dumps({k: v for k, v in summary.items() if k != "paired_update_timing"}, indent=2, default=str))
    if "paired_update_timing" in summary:
        _print_timing(summary["paired_update_timing"])
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
