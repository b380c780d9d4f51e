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

from bench.agent_run import AgentBench, build_parser, load_final_agent_and_batch, run_with_state
from bench.common import (
    ACT_DIM,
    OBS_DIM,
    TORCH_RECIPE_EXTRA,
    block_seconds,
    interleaved_blocks,
    make_recipe,
    synthetic_torch_agents,
)

RECIPE = make_recipe("triton") + TORCH_RECIPE_EXTRA
MODES = ("eager", "graph")
BACKENDS = ("torch", "triton")


def time_update_variants(agents: dict, batch: dict, repeats: int, iters: int) -> dict:
    """Median ms per full agent update for every (mode, backend) pair, and per critic target for each backend,
    interleaved blocks, strict backends.

    Args:
        agents: mode -> agent, for "eager" (and "graph"); the agents start from the same state.
        batch: numpy batch (normalised rewards).
        repeats: interleaved blocks per variant.
        iters: updates per block.

    Returns:
        ``{"eager/torch": {"update_ms": median, "raw": [...]}, ..., "target_ms": {backend: median}, ...}``: the
        update includes the host -> device batch copy and the one host sync that reads the metrics.
    """
    import torch

    from agent_torch.update import critic_target

    def sync(_: object = None) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    base = {mode: agent.ctx for mode, agent in agents.items()}
    eager = agents["eager"]
    tbatch = eager.to_batch(batch)

    def update_block(mode: str, backend: str):
        agent, ctx = agents[mode], dataclasses.replace(base[mode], backend=backend, strict=True)

        def block(n: int) -> float:
            agent.ctx = ctx
            return 1e3 * block_seconds(lambda i: agent.update(batch), n, sync)
        return block

    def target_block(backend: str):
        ctx = dataclasses.replace(base["eager"], backend=backend, strict=True)

        def block(n: int) -> float:
            with torch.no_grad():
                return 1e3 * block_seconds(
                    lambda i: critic_target(eager.actor, eager.target_critic, eager.temperature, tbatch, ctx), n, sync)
        return block

    blocks = {f"{mode}/{backend}": update_block(mode, backend) for mode in agents for backend in BACKENDS}
    blocks |= {f"target/{backend}": target_block(backend) for backend in BACKENDS}
    # the warm-up covers both update variants, graph capture and Triton compilation
    raw = interleaved_blocks(blocks, repeats, iters, warmup_iters=max(10, min(20, iters)))
    for mode, agent in agents.items():
        agent.ctx = base[mode]
    target_raw = {b: raw.pop(f"target/{b}") for b in BACKENDS}
    out: dict = {k: {"update_ms": statistics.median(v), "raw": v} for k, v in raw.items()}
    out["target_ms"] = {b: statistics.median(v) for b, v in target_raw.items()}
    out["target_raw"] = target_raw
    out["batch_size"] = int(batch["reward"].shape[0])
    out["note"] = (
        "update_ms: one full agent.update incl. the batch copy and the metrics sync (actor every 2nd step, so "
        "averaged over both kinds); eager = agent.use_cuda_graph=false, graph = true; target_ms (eager): "
        "actor(s') + target critic on 2B rows + categorical_td_target"
    )
    return out


def paired_update_timing(run_dir: str, overrides: list[str], repeats: int = 7, iters: int = 50) -> dict:
    """Update-step timing on the run's final checkpoint and a batch from its replay buffer: backend torch vs triton,
    eager vs CUDA graph, interleaved in one process."""
    agents = {}
    batch: dict = {}
    for mode in MODES:
        flag = f"agent.use_cuda_graph={'true' if mode == 'graph' else 'false'}"
        _, agents[mode], batch = load_final_agent_and_batch(BENCH, run_dir, overrides + [flag])
    return time_update_variants(agents, batch, repeats, iters)


def graph_check(overrides: list[str], repeats: int, iters: int) -> dict:
    """CUDA-graph agent vs eager agent from identical weights on the same 40 batches and the same RNG seed: max
    metric and parameter differences after every update, acting outputs, LR values; then the timing of all four
    (mode, backend) variants on a synthetic batch."""
    import numpy as np
    import torch

    agents, batches = synthetic_torch_agents(overrides)
    metric_diff, param_diff = [], []
    for i, batch in enumerate(batches):
        metrics = {}
        for mode, agent in agents.items():
            torch.manual_seed(1000 + i)  # same actor noise in both agents
            metrics[mode] = agent.update(batch)
        metric_diff.append(max(abs(metrics["eager"][k] - metrics["graph"][k]) for k in metrics["eager"]))
        diffs = [
            (a - b).abs().max().item()
            for name in ("actor", "critic", "target_critic", "temperature")
            for a, b in zip(
                getattr(agents["eager"], name).module.state_dict().values(),
                getattr(agents["graph"], name).module.state_dict().values(),
                strict=True,
            )
            if a.is_floating_point()
        ]
        param_diff.append(max(diffs))
    obs = np.random.default_rng(1).standard_normal((1, OBS_DIM)).astype(np.float32)
    noise = np.random.default_rng(2).standard_normal((1, ACT_DIM)).astype(np.float32)
    act_diff = max(
        float(np.abs(agents["eager"].act(obs, n) - agents["graph"].act(obs, n)).max())
        for n in (noise, None)
        for _ in range(5)  # the graph path warms up, captures, then replays
    )
    lrs = {mode: [float(g["lr"]) for g in a.critic.optimizer.param_groups] for mode, a in agents.items()}
    out = {
        "updates": len(batches),
        "max_metric_diff_per_update": metric_diff,
        "max_param_diff_per_update": param_diff,
        "bitwise_equal_params": all(d == 0.0 for d in param_diff),
        "max_act_diff": act_diff,
        "critic_lr": lrs,
        "graphs_captured": len(agents["graph"].graphs or ()),
        "cuda_graph": {mode: a.cuda_graph_reason for mode, a in agents.items()},
    }
    out["timing"] = time_update_variants(agents, batches[0], repeats, iters)
    return out


def _print_timing(t: dict) -> None:
    parts = [f"{k} {v['update_ms']:.3f} ms" for k, v in t.items() if isinstance(v, dict) and "update_ms" in v]
    target = ", ".join(f"{b} {ms:.3f} ms" for b, ms in t["target_ms"].items())
    print(f"update step: {'; '.join(parts)}; target (eager): {target}", flush=True)


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
    def graph_check_arg(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--graph-check", action="store_true",
                            help="CUDA-graph vs eager agent check and four-way update timing, synthetic batches")

    args = build_parser(BENCH, __doc__, graph_check_arg).parse_args(argv)
    if args.graph_check:
        result = graph_check(args.overrides, args.timing_repeats, args.timing_iters)
        print(f"graph vs eager: max param diff {max(result['max_param_diff_per_update']):.3g}, max metric diff "
              f"{max(result['max_metric_diff_per_update']):.3g}, act diff {result['max_act_diff']:.3g}, "
              f"graphs {result['graphs_captured']}, lr {result['critic_lr']}", flush=True)
        _print_timing(result["timing"])
        if args.state_out is not None:
            os.makedirs(args.state_out, exist_ok=True)
            with open(os.path.join(args.state_out, "graph_check_torch_agent.json"), "w") as f:
                json.dump(result, f, indent=2)
        return 0
    return run_with_state(BENCH, args)


if __name__ == "__main__":
    raise SystemExit(main())
