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

import dataclasses
import statistics
import time

from bench.agent_run import AgentBench, build_parser, load_final_agent_and_batch, make_recipe, run_with_state

RECIPE = make_recipe("triton") + [
    # Measured on the H200 (2026-11-29): eager 17-20 ms per update; with upstream's compile_mode=auto
    # (max-autotune) the GEMM autotuning alone ran past 5.5 minutes, and every call of a split run recompiles, so
    # this benchmark runs eager. Try `--overrides agent.use_compile=true --overrides agent.compile_mode=default`.
    "agent.use_compile=false",
]


def paired_update_timing(run_dir: str, overrides: list[str], repeats: int = 7, iters: int = 50) -> dict:
    """Median ms per full agent update and per target op, backend torch vs triton, interleaved in one process.

    The agent is the run's final checkpoint; batches come from its saved replay buffer (normalised rewards).
    """
    import torch

    from agent_torch.update import critic_target

    cfg, agent, batch = load_final_agent_and_batch(BENCH, run_dir, overrides)
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


def _print_timing(t: dict) -> None:
    print(
        f"update step: torch {t['torch']['update_ms']:.3f} ms, triton {t['triton']['update_ms']:.3f} ms; "
        f"target: torch {t['torch']['target_ms']:.3f} ms, triton {t['triton']['target_ms']:.3f} ms"
    )


BENCH = AgentBench(
    framework="torch",
    agent_module="agent_torch.agent",
    recipe=RECIPE,
    backends=("torch", "triton"),
    default_run_dir="bench/results/agent_torch_halfcheetah_seed0",
    paired_update_timing=paired_update_timing,
    print_timing=_print_timing,
)


def main(argv: list[str] | None = None) -> int:
    args = build_parser(BENCH, __doc__).parse_args(argv)
    return run_with_state(BENCH, args)


if __name__ == "__main__":
    raise SystemExit(main())
