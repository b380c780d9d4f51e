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

then copy the returned files into ``.bench_state`` for the next call (the run, its state packing and its
progress / summary files are ``bench/agent_run.py``'s, shared with the torch benchmark, so both runs travel the
same way).

``--timing-only`` needs neither gymnasium nor a run: it times the update step (jax vs pallas, strict) on a
synthetic HalfCheetah-shaped batch with the recipe's network sizes, which is how the update-step figures can be
taken before the wheels are there.

Output: per-call lines (env steps/s, updates/s, eval returns, update ms), ``<run-dir>/progress.json`` (all calls)
and, at the end, ``<run-dir>/summary.json`` plus ``eval.csv``, ``learning_curve.png``, TensorBoard files and
checkpoints.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
from typing import Any

from agent_interop.convert import make_agent_from_torch_init
from bench.agent_run import AgentBench, build_parser, load_final_agent_and_batch, run_with_state
from bench.common import block_seconds, interleaved_blocks, make_recipe, synthetic_jax_agent

RECIPE = make_recipe("pallas")  # the torch benchmark's recipe but for the backend (and the torch agent's extras)
BACKENDS = ("jax", "pallas")


def _time_backends(agent: Any, batch: dict, repeats: int, iters: int) -> dict:
    """Median ms per full update step and per critic target, each backend, interleaved blocks; strict selection."""
    import jax

    from agent_jax.update import critic_target
    from jax_impl import resolve_backend

    for backend in BACKENDS:  # strict: a backend that cannot run raises here instead of timing the fallback
        resolve_backend(backend, strict=True, num_bins=int(agent.cfg.agent.critic_num_bins),
                        platform=agent.device.platform)
    base_ctx = agent.ctx
    device_batch = agent.to_batch(batch)
    target_fn = jax.jit(critic_target)

    def update_block(backend: str):
        ctx = base_ctx.replace(backend=backend)

        def block(n: int) -> float:
            agent.ctx = ctx
            return 1e3 * block_seconds(lambda i: agent.update(batch), n, lambda _: jax.block_until_ready(agent.state))
        return block

    def target_block(backend: str):
        ctx = base_ctx.replace(backend=backend)

        def block(n: int) -> float:
            s = agent.state
            return 1e3 * block_seconds(
                lambda i: target_fn(s.actor, s.critic, s.temperature, device_batch, ctx, s.rng), n,
                jax.block_until_ready)
        return block

    blocks = {}
    for backend in BACKENDS:
        blocks[f"update_ms/{backend}"] = update_block(backend)
        blocks[f"target_ms/{backend}"] = target_block(backend)
    # the warm-up compiles both update variants and the target for each backend
    raw = interleaved_blocks(blocks, repeats, iters, warmup_iters=max(2, min(10, iters)))
    agent.ctx = base_ctx
    agent.flush_metrics()
    results = {b: {k: raw[f"{k}/{b}"] for k in ("update_ms", "target_ms")} for b in BACKENDS}
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
    _, agent, batch = load_final_agent_and_batch(BENCH, run_dir, overrides)
    return _time_backends(agent, batch, repeats, iters)


def synthetic_update_timing(batch_size: int, repeats: int, iters: int) -> dict:
    """The same timing without gymnasium: recipe-sized networks, a random HalfCheetah-shaped batch."""
    agent, batch = synthetic_jax_agent(batch_size)
    return _time_backends(agent, batch, repeats, iters)


def _print_timing(t: dict) -> None:
    print(f"update step: jax {t['jax']['update_ms']:.3f} ms, pallas {t['pallas']['update_ms']:.3f} ms; "
          f"target: jax {t['jax']['target_ms']:.3f} ms, pallas {t['pallas']['target_ms']:.3f} ms "
          f"(B={t['batch_size']}, {t['device']})", flush=True)


BENCH = AgentBench(
    framework="jax",
    agent_module="agent_jax.agent",
    recipe=RECIPE,
    backends=BACKENDS,
    default_run_dir="bench/results/agent_jax_halfcheetah_seed0",
    paired_update_timing=paired_update_timing,
    print_timing=_print_timing,
    summary_extra={"agent": "jax"},
    call_line_wall=True,
    update_ms_note=" (dispatch; see timing)",
)


def main(argv: list[str] | None = None) -> int:
    def extra_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--timing-only", action="store_true", help="synthetic-batch jax vs pallas timing only")
        parser.add_argument("--init-from-torch", action="store_true",
                            help="start a new run from the torch agent's initial weights for the same seed")

    args = build_parser(BENCH, __doc__, extra_args).parse_args(argv)
    if args.timing_only:
        timing = synthetic_update_timing(512, args.timing_repeats, args.timing_iters)
        _print_timing(timing)
        if args.state_out is not None:
            os.makedirs(args.state_out, exist_ok=True)
            with open(os.path.join(args.state_out, "timing_jax_agent.json"), "w") as f:
                json.dump(timing, f, indent=2)
        return 0
    if args.init_from_torch:
        bench = dataclasses.replace(BENCH, make_agent=make_agent_from_torch_init,
                                    summary_extra={"agent": "jax", "init": "torch agent's initial weights"})
        return run_with_state(bench, args)
    return run_with_state(BENCH, args)


if __name__ == "__main__":
    raise SystemExit(main())
