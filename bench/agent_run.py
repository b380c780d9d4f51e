"""The resumable 100k-step recipe run shared by ``bench/gpu_agent_torch.py`` and ``bench/gpu_agent_jax.py``.

Both H200 agent benchmarks train the same recipe (``bench.common.make_recipe``: upstream's CPU-sim HalfCheetah
recipe with a strict custom categorical-target backend) in calls bounded by ``--budget`` seconds of loop wall time,
resume from the run directory, carry the run between device machines as ``run_state.tar.gz.part*`` chunks, keep
``progress.json`` over the calls and, once the run is complete, write ``summary.json``. What differs per framework
-- the config framework name, where ``make_agent`` lives, the backend pair, the paired update-step timing and its
printout -- comes in an ``AgentBench``; the framework-specific timing code stays in each script.

Every ``agent_common`` import is local, so importing this module needs neither gymnasium nor omegaconf
(``python -m bench.gpu_agent_jax --timing-only`` needs no gymnasium).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

from bench.common import PUBLISHED_100K

STATE_NAME = "run_state.tar.gz"
PART_BYTES = 15 * 1024 * 1024  # the device tool returns files of at most 16 MiB each
SIDE_FILES = ("progress.json", "summary.json", "eval.csv", "learning_curve.png")


@dataclasses.dataclass(frozen=True)
class AgentBench:
    """What one framework's benchmark script plugs into the shared run."""

    framework: str  # load_config's framework: "torch" / "jax"
    agent_module: str  # the module holding make_agent(cfg, observation_space, action_space); imported when training
    recipe: list[str]
    backends: tuple[str, str]  # (reference backend, custom kernel backend), as named in the --timing-* help
    default_run_dir: str
    # paired_update_timing(run_dir, overrides, repeats=..., iters=...) -> timing dict (the summary's entry)
    paired_update_timing: Callable[..., dict]
    print_timing: Callable[[dict], None]
    summary_extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # after "recipe" in summary.json
    call_line_wall: bool = False  # per-call line also reports the loop wall seconds
    update_ms_note: str = ""  # appended to the per-call line's update ms
    # replaces agent_module's make_agent (e.g. a JAX agent started from the torch agent's initial weights)
    make_agent: Callable[..., Any] | None = None

    def agent_factory(self) -> Callable[..., Any]:
        """``make_agent`` if set, else ``agent_module``'s."""
        return self.make_agent or importlib.import_module(self.agent_module).make_agent


# ------------------------------------------------------------------------------------------------------ run state
def latest_env_step(run_dir: str) -> int:
    """The env step of the run directory's latest checkpoint, -1 when there is none."""
    from agent_common.checkpoint import latest_checkpoint, load_pickle
    from agent_common.loop import LOOP_STATE_FILE

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

    from agent_common.checkpoint import latest_checkpoint

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
        if latest_env_step(unpacked) <= latest_env_step(run_dir):
            return False
        if os.path.exists(run_dir):
            shutil.rmtree(run_dir)
        shutil.move(unpacked, run_dir)
    return True


def load_progress(run_dir: str) -> dict:
    path = os.path.join(run_dir, "progress.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"calls": []}


def load_final_agent_and_batch(bench: AgentBench, run_dir: str, overrides: list[str]) -> tuple[Any, Any, dict]:
    """(cfg, agent, batch) for the paired timing: the run's final checkpoint and a batch from its saved replay
    buffer (rewards normalised with the run's reward normaliser)."""
    from agent_common.buffer import ReplayBuffer
    from agent_common.checkpoint import latest_checkpoint, load_pickle
    from agent_common.config import load_config
    from agent_common.envs import make_env
    from agent_common.loop import BUFFER_FILE, LOOP_STATE_FILE
    from agent_common.normalizer import RewardNormalizer

    make_agent = bench.agent_factory()
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None, f"no checkpoint in {run_dir}"
    cfg = load_config(bench.recipe + overrides + [f"save_path={run_dir}"], bench.framework)
    env = make_env(cfg.env.env_name, cfg.seed)
    agent = make_agent(cfg, env.observation_space, env.action_space)
    agent.load(os.path.join(ckpt, "agent"))
    buffer = ReplayBuffer(
        env.observation_space.shape[0],
        env.action_space.shape[0],
        cfg.agent.buffer_max_length,
        1,
        cfg.n_step,
        cfg.gamma,
        seed=123,
    )
    buffer.load_state_dict(load_pickle(os.path.join(ckpt, BUFFER_FILE)))
    norm = RewardNormalizer(cfg.gamma, cfg.agent.normalized_G_max)
    norm.load_state_dict(load_pickle(os.path.join(ckpt, LOOP_STATE_FILE))["reward_normalizer"])
    batch = buffer.sample(cfg.agent.sample_batch_size)
    batch["reward"] = norm.normalize(batch["reward"])
    return cfg, agent, batch


# ----------------------------------------------------------------------------------------------------------- CLI
def build_parser(
    bench: AgentBench,
    description: str | None,
    extra_timing_args: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.ArgumentParser:
    """The shared command line; ``extra_timing_args`` adds a script's own flags after ``--skip-timing``."""
    ref, custom = bench.backends
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default=bench.default_run_dir)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=400.0, help="loop wall seconds per call (max_wall_seconds)")
    parser.add_argument("--overrides", action="append", default=[], help="extra config overrides")
    parser.add_argument("--skip-timing", action="store_true")
    if extra_timing_args is not None:
        extra_timing_args(parser)
    parser.add_argument("--timing-repeats", type=int, default=7, help=f"interleaved {ref}/{custom} timing blocks")
    parser.add_argument("--timing-iters", type=int, default=50, help="updates per timing block")
    parser.add_argument("--state-in", default=None, help="folder with run_state.tar.gz.part* from an earlier call")
    parser.add_argument("--state-out", default=None, help="folder to write run_state.tar.gz.part* (e.g. $OUT)")
    return parser


def run_with_state(bench: AgentBench, args: argparse.Namespace) -> int:
    """One call: restore the run from ``--state-in``, train / summarise, pack the run into ``--state-out``."""
    run_dir = args.run_dir
    if args.state_in is not None and unpack_state(args.state_in, run_dir):
        print(f"restored the run from {args.state_in} at env_step {latest_env_step(run_dir)}", flush=True)
    try:
        return run(bench, args, run_dir)
    finally:
        if args.state_out is not None and os.path.isdir(run_dir):
            for path in pack_state(run_dir, args.state_out):
                print(f"state: {path} ({os.path.getsize(path) / 2**20:.1f} MiB)", flush=True)


def run(bench: AgentBench, args: argparse.Namespace, run_dir: str) -> int:
    """Trains until the budget or the end of the run; once the run is complete, writes and prints the summary."""
    from agent_common.checkpoint import atomic_write_text, latest_checkpoint
    from agent_common.config import load_config
    from agent_common.loop import train

    progress = load_progress(run_dir)
    overrides = bench.recipe + [f"seed={args.seed}", f"save_path={run_dir}", f"max_wall_seconds={args.budget}"]
    overrides += args.overrides
    done_before = latest_checkpoint(run_dir) is not None and progress.get("completed", False)
    if not done_before:
        if latest_checkpoint(run_dir) is not None:
            overrides.append(f"agent_load_path={run_dir}")
        cfg = load_config(overrides, bench.framework)
        t0 = time.time()
        result = train(cfg, bench.agent_factory())
        call = {
            "status": result.status,
            "env_step": result.env_step,
            "wall_seconds": result.wall_seconds,
            "call_seconds": time.time() - t0,
            "env_steps_per_second": result.env_steps_per_second,
            "updates_per_second": result.updates_per_second,
            "update_ms": 1e3 * result.update_seconds_mean,
            "time_to_first_update_s": result.time_to_first_update,
            "steady_updates_per_second": result.steady_updates_per_second,
            "evaluations": result.evaluations,
        }
        progress["calls"].append(call)
        progress["completed"] = result.status == "completed"
        os.makedirs(run_dir, exist_ok=True)
        atomic_write_text(os.path.join(run_dir, "progress.json"), json.dumps(progress, indent=2))
        wall = f"wall {result.wall_seconds:.1f} s, " if bench.call_line_wall else ""
        print(
            f"call {len(progress['calls'])}: {result.status} at env_step {result.env_step}; "
            f"{wall}env steps/s {result.env_steps_per_second:.1f}, updates/s {result.updates_per_second:.1f}, "
            f"update {call['update_ms']:.2f} ms{bench.update_ms_note}",
            flush=True,
        )
        for step, metrics in result.evaluations:
            print(f"  eval env_step={step}: avg_return={metrics['avg_return']:.1f}", flush=True)
        if result.status != "completed":
            print("NOT DONE: run this command again to resume", flush=True)
            return 0
    summary: dict = {"run_dir": run_dir, "seed": args.seed, "recipe": bench.recipe + args.overrides}
    summary.update(bench.summary_extra)
    calls = progress["calls"]
    summary["train_wall_seconds"] = sum(c["wall_seconds"] for c in calls)
    total_steps = load_config(bench.recipe + args.overrides, bench.framework).num_env_steps
    summary["num_env_steps"] = total_steps
    summary["env_steps_per_second"] = total_steps / max(summary["train_wall_seconds"], 1e-9)
    summary["updates_per_second_by_call"] = [c["updates_per_second"] for c in calls]
    summary["time_to_first_update_s"] = calls[0].get("time_to_first_update_s") if calls else None
    summary["steady_updates_per_second_by_call"] = [c.get("steady_updates_per_second") for c in calls]
    evals = [tuple(e) for c in calls for e in c["evaluations"]]
    summary["eval_returns"] = {int(s): m["avg_return"] for s, m in evals}
    summary["final_return"] = summary["eval_returns"].get(total_steps)
    summary["published_100k"] = dict(PUBLISHED_100K)
    if not args.skip_timing:
        summary["paired_update_timing"] = bench.paired_update_timing(
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
        bench.print_timing(summary["paired_update_timing"])
    print("DONE", flush=True)
    return 0
