"""H200 run of the torch FlashSAC agent: 100k HalfCheetah-v4 env steps, backend triton (strict), split across calls.

Each call trains until ``--budget`` seconds of loop wall time (``max_wall_seconds``), checkpoints (replay buffer
included, so the resume is exact) and exits; the next call resumes from the run directory. When the run reaches
100k env steps, the same call times one update step with backend torch vs triton, paired and interleaved in one
process on the run's final agent and a batch from its replay buffer, and writes the summary JSON.

Usage (repeat until it prints ``DONE``; each call ends within ~8 minutes with the default budget):

    python -m bench.gpu_agent_torch --run-dir bench/results/agent_torch_halfcheetah_seed0 --seed 0
    python -m bench.gpu_agent_torch ... --overrides agent.use_compile=false   # extra overrides pass through

Split across device machines (each call may land on a fresh machine): carry a folder holding the previous call's
``run_state.tar.gz.part*`` (and ``.whl``), e.g. ``.bench_state`` listed in ``.git/info/exclude``, and run

    python3 -m bench.gpu_agent_torch --run-dir /tmp/agent_torch_run --state-in .bench_state --state-out $OUT

then copy the returned files into ``.bench_state`` for the next call. The state is the run directory with its
latest checkpoint (replay buffer included, ~20 MiB at 100k steps), in chunks of <= 15 MiB, plus progress.json,
eval.csv and, at the end, summary.json and learning_curve.png.

Output: per-call lines (env steps/s, updates/s, eval returns), ``<run-dir>/progress.json`` (all calls) and, at the
end, ``<run-dir>/summary.json`` plus ``eval.csv``, ``learning_curve.png``, TensorBoard files and checkpoints.

Expected time on the H200 (measured 2026-11-29, eager, 6k-step probe): 17-20 ms per update, ~50 updates/s with the
env, so 100k env steps take ~35 minutes of loop time: 5 calls at the default 400 s budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

from agent_common.checkpoint import atomic_write_text, latest_checkpoint, load_pickle
from agent_common.config import load_config
from agent_common.loop import BUFFER_FILE, LOOP_STATE_FILE, train

RECIPE = [
    # upstream scripts/run_mujoco.sh (CPU-sim recipe), FLASHSAC.md §19
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
    "agent.categorical_target_backend=triton",
    "agent.categorical_target_strict=true",
    "save_buffer=true",
    "progress_bar=false",
    # Measured on the H200 (2026-11-29): eager 17-20 ms per update; with upstream's compile_mode=auto
    # (max-autotune) the GEMM autotuning alone ran past 5.5 minutes, and every call of a split run recompiles, so
    # this benchmark runs eager. Try `--overrides agent.use_compile=true --overrides agent.compile_mode=default`.
    "agent.use_compile=false",
]


STATE_NAME = "run_state.tar.gz"
PART_BYTES = 15 * 1024 * 1024  # the device tool returns files of at most 16 MiB each
SIDE_FILES = ("progress.json", "summary.json", "eval.csv", "learning_curve.png")


def _latest_env_step(run_dir: str) -> int:
    ckpt = latest_checkpoint(run_dir) if os.path.isdir(run_dir) else None
    return -1 if ckpt is None else int(load_pickle(os.path.join(ckpt, LOOP_STATE_FILE))["env_step"])


def pack_state(run_dir: str, state_dir: str) -> list[str]:
    """Writes the run (latest checkpoint only) as ``run_state.tar.gz.partNN`` chunks of <= 15 MiB + side files.

    For runs split across device machines: each call's $OUT returns at most 8 files of 16 MiB, so the run directory
    travels as a few chunks; ``unpack_state`` restores it on the next machine.
    """
    import io
    import shutil
    import tarfile

    os.makedirs(state_dir, exist_ok=True)
    latest = latest_checkpoint(run_dir)
    root = os.path.basename(os.path.normpath(run_dir))
    ckpt_root = os.path.join(run_dir, "checkpoints")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        path = os.path.join(os.path.dirname(os.path.normpath(run_dir)), info.name)
        if os.path.dirname(os.path.normpath(path)) == os.path.normpath(ckpt_root) and os.path.isdir(path):
            return info if latest is not None and os.path.samefile(path, latest) else None
        return info

    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w:gz", compresslevel=6) as tar:
        tar.add(run_dir, arcname=root, filter=keep)
    data = blob.getvalue()
    written = []
    for old in os.listdir(state_dir):
        if old.startswith(STATE_NAME + ".part"):
            os.unlink(os.path.join(state_dir, old))
    for i in range(0, max(len(data), 1), PART_BYTES):
        path = os.path.join(state_dir, f"{STATE_NAME}.part{i // PART_BYTES:02d}")
        with open(path, "wb") as f:
            f.write(data[i : i + PART_BYTES])
        written.append(path)
    for name in SIDE_FILES:
        if os.path.exists(os.path.join(run_dir, name)):
            shutil.copyfile(os.path.join(run_dir, name), os.path.join(state_dir, name))
            written.append(os.path.join(state_dir, name))
    return written


def unpack_state(state_dir: str, run_dir: str) -> bool:
    """Restores a run packed by ``pack_state`` unless the local run directory is at least as far along."""
    import io
    import shutil
    import tarfile
    import tempfile

    parts = (
        sorted(p for p in os.listdir(state_dir) if p.startswith(STATE_NAME + ".part"))
        if os.path.isdir(state_dir)
        else []
    )
    if not parts:
        return False
    data = b"".join(open(os.path.join(state_dir, p), "rb").read() for p in parts)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(run_dir))) as tmp:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(tmp, filter="data")
        (root,) = os.listdir(tmp)
        unpacked = os.path.join(tmp, root)
        if _latest_env_step(unpacked) <= _latest_env_step(run_dir):
            return False
        if os.path.exists(run_dir):
            shutil.rmtree(run_dir)
        shutil.move(unpacked, run_dir)
    return True


def _progress(run_dir: str) -> dict:
    path = os.path.join(run_dir, "progress.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"calls": []}


def paired_update_timing(run_dir: str, overrides: list[str], repeats: int = 7, iters: int = 50) -> dict:
    """Median ms per full agent update and per target op, backend torch vs triton, interleaved in one process.

    The agent is the run's final checkpoint; batches come from its saved replay buffer (normalised rewards).
    """
    import torch

    from agent_common.buffer import ReplayBuffer
    from agent_common.envs import make_env
    from agent_common.normalizer import RewardNormalizer
    from agent_torch.agent import make_agent
    from agent_torch.update import critic_target

    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None, f"no checkpoint in {run_dir}"
    cfg = load_config(RECIPE + overrides + [f"save_path={run_dir}"], "torch")
    env = make_env(cfg.env.env_name, cfg.seed)
    agent = make_agent(cfg, env.observation_space, env.action_space)
    agent.load(os.path.join(ckpt, "agent"))
    buf_state = load_pickle(os.path.join(ckpt, BUFFER_FILE))
    buffer = ReplayBuffer(
        env.observation_space.shape[0],
        env.action_space.shape[0],
        cfg.agent.buffer_max_length,
        1,
        cfg.n_step,
        cfg.gamma,
        seed=123,
    )
    buffer.load_state_dict(buf_state)
    norm = RewardNormalizer(cfg.gamma, cfg.agent.normalized_G_max)
    norm.load_state_dict(load_pickle(os.path.join(ckpt, LOOP_STATE_FILE))["reward_normalizer"])
    batch = buffer.sample(cfg.agent.sample_batch_size)
    batch["reward"] = norm.normalize(batch["reward"])
    tbatch = agent._to_batch(batch)
    base_ctx = agent.ctx
    results: dict[str, dict[str, list[float]]] = {b: {"update_ms": [], "target_ms": []} for b in ("torch", "triton")}

    def sync() -> None:
        if agent.device.type == "cuda":
            torch.cuda.synchronize()

    for backend in ("torch", "triton"):  # warm-up (compilation, autotuning) outside the timed region
        agent.ctx = dataclasses.replace(base_ctx, backend=backend, strict=True)
        for _ in range(max(2, min(10, iters))):
            agent.update(batch)
    for _ in range(repeats):
        for backend in ("torch", "triton"):
            agent.ctx = dataclasses.replace(base_ctx, backend=backend, strict=True)
            sync()
            t0 = time.perf_counter()
            for _ in range(iters):
                agent.update(batch)
            sync()
            results[backend]["update_ms"].append(1e3 * (time.perf_counter() - t0) / iters)
            with torch.no_grad():
                sync()
                t0 = time.perf_counter()
                for _ in range(iters):
                    critic_target(agent.actor, agent.target_critic, agent.temperature, tbatch, agent.ctx)
                sync()
            results[backend]["target_ms"].append(1e3 * (time.perf_counter() - t0) / iters)
    agent.ctx = base_ctx
    out = {b: {k: statistics.median(v) for k, v in r.items()} | {"raw": r} for b, r in results.items()}
    out["batch_size"] = cfg.agent.sample_batch_size
    out["note"] = (
        "update_ms: one full agent.update (actor every 2nd step, so averaged over both kinds); "
        "target_ms: actor(s') + target critic on 2B rows + categorical_td_target"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="bench/results/agent_torch_halfcheetah_seed0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=400.0, help="loop wall seconds per call (max_wall_seconds)")
    parser.add_argument("--overrides", action="append", default=[], help="extra config overrides")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--timing-repeats", type=int, default=7, help="interleaved torch/triton timing blocks")
    parser.add_argument("--timing-iters", type=int, default=50, help="updates per timing block")
    parser.add_argument("--state-in", default=None, help="folder with run_state.tar.gz.part* from an earlier call")
    parser.add_argument("--state-out", default=None, help="folder to write run_state.tar.gz.part* (e.g. $OUT)")
    args = parser.parse_args(argv)
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
    progress = _progress(run_dir)
    overrides = RECIPE + [f"seed={args.seed}", f"save_path={run_dir}", f"max_wall_seconds={args.budget}"]
    overrides += args.overrides
    done_before = latest_checkpoint(run_dir) is not None and progress.get("completed", False)
    if not done_before:
        if latest_checkpoint(run_dir) is not None:
            overrides.append(f"agent_load_path={run_dir}")
        cfg = load_config(overrides, "torch")
        from agent_torch.agent import make_agent

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
            f"env steps/s {result.env_steps_per_second:.1f}, updates/s {result.updates_per_second:.1f}, "
            f"update {call['update_ms']:.2f} ms",
            flush=True,
        )
        for step, metrics in result.evaluations:
            print(f"  eval env_step={step}: avg_return={metrics['avg_return']:.1f}", flush=True)
        if result.status != "completed":
            print("NOT DONE: run this command again to resume", flush=True)
            return 0
    summary: dict = {"run_dir": run_dir, "seed": args.seed, "recipe": RECIPE + args.overrides}
    calls = progress["calls"]
    summary["train_wall_seconds"] = sum(c["wall_seconds"] for c in calls)
    total_steps = load_config(RECIPE + args.overrides, "torch").num_env_steps
    summary["num_env_steps"] = total_steps
    summary["env_steps_per_second"] = total_steps / max(summary["train_wall_seconds"], 1e-9)
    summary["updates_per_second_by_call"] = [c["updates_per_second"] for c in calls]
    evals = [tuple(e) for c in calls for e in c["evaluations"]]
    summary["eval_returns"] = {int(s): m["avg_return"] for s, m in evals}
    summary["final_return"] = summary["eval_returns"].get(total_steps)
    summary["published_100k"] = {"mean": 9815, "worst_seed": 9685, "best_seed": 10100.6}
    if not args.skip_timing:
        summary["paired_update_timing"] = paired_update_timing(
            run_dir, args.overrides, repeats=args.timing_repeats, iters=args.timing_iters
        )
    try:
        from agent_common.plot import plot_run

        summary["curve_png"] = plot_run(run_dir)
    except Exception as exc:  # plotting is a convenience; never lose the summary over it
        summary["curve_png_error"] = repr(exc)
    atomic_write_text(os.path.join(run_dir, "summary.json"), json.dumps(summary, indent=2, default=str))
    print(json.dumps({k: v for k, v in summary.items() if k != "paired_update_timing"}, indent=2, default=str))
    if "paired_update_timing" in summary:
        t = summary["paired_update_timing"]
        print(
            f"update step: torch {t['torch']['update_ms']:.3f} ms, triton {t['triton']['update_ms']:.3f} ms; "
            f"target: torch {t['torch']['target_ms']:.3f} ms, triton {t['triton']['target_ms']:.3f} ms"
        )
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
