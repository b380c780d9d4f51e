"""The torch agent on MJX environments, checked on a GPU: what CPU tests cannot see (the two frameworks' CUDA streams).

    python -m bench.gpu_mjx_torch --out $OUT/gpu_mjx_torch [--envs 256] [--steps 32] [--batch 2048]

Builds the CLI's trainer (``agent_torch.vector.make_vector_trainer``) for halfcheetah with AMP off (CUDA-graph
update and action selection) and the strict fused target (``--backend``, default triton), records during
``--steps`` interaction steps what the env step was handed and returned (no host synchronisation is added: the
torch clone of each action is taken on torch's stream, the step's outputs stay device arrays), and checks
afterwards:

* every stored replay row equals the env step's observation, action, reward, flags and final observation (the
  rows are written from DLPack views; a missing stream order between JAX and torch would store stale data);
* every action JAX read is the torch tensor's memory (equal data pointers) and every output torch read is the JAX
  array's;
* the update metrics are finite (``take_metrics`` raises otherwise), no target-backend fallback happened, and on CUDA
  the graphs are captured;

and times ``--steps`` more steps (waited for): env steps/s and updates/s of the trainer without the CLI's driver.
Writes ``DIR/results.json`` and ``DIR/results.md``; exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.common import environment, fmt, json_block, write_results

__all__ = ["check", "main"]


def check(overrides: dict[str, Any], steps: int) -> dict[str, Any]:
    """Runs the checks of the module doc for the config ``overrides`` (merged over halfcheetah, env.env_type=mjx)."""
    import torch

    from agent_common.schema import build_config
    from agent_torch import vector
    from mjx_envs import torch_view
    from torch_impl import dispatch_stats

    cfg = build_config({"env.env_type": "mjx", "env.env_name": "halfcheetah", "agent.use_amp": False,
                        "agent.categorical_target_strict": True, **overrides}, "torch")
    t0 = time.perf_counter()
    fallbacks_before = dispatch_stats()["fallback_count"]  # process-wide: earlier work may have counted some
    trainer = vector.make_vector_trainer(cfg)
    built_s = time.perf_counter() - t0
    records: list[tuple[Any, ...]] = []
    pointers: list[bool] = []
    step = trainer.train_env.step

    def recording_step(action: torch.Tensor) -> torch_view.TorchStep:
        before, taken = trainer.obs, action.clone()
        array = torch_view.from_torch(action)
        pointers.append(array.unsafe_buffer_pointer() == action.data_ptr())
        out = step(action)
        records.append((before, taken, out))
        return out

    to_torch_views = torch_view.step_to_torch
    viewed: list[bool] = []

    def recording_views(out: Any) -> torch_view.TorchStep:
        views = to_torch_views(out)
        viewed.extend(t.data_ptr() == getattr(out, name).unsafe_buffer_pointer() for name, t in views._asdict().items())
        return views

    trainer.train_env.step = recording_step  # type: ignore[method-assign]
    torch_view.step_to_torch = recording_views
    try:
        t0 = time.perf_counter()
        trainer.advance(steps)
        first_s = time.perf_counter() - t0
    finally:
        trainer.train_env.step = step  # type: ignore[method-assign]
        torch_view.step_to_torch = to_torch_views
    rows = torch.as_tensor(trainer.replay.rows(), device=trainer.device)
    num_envs = trainer.num_envs
    mismatched = 0
    for i, (obs, action, out) in enumerate(records):
        want = torch.cat([obs, action, out.reward[:, None], out.terminated[:, None], out.final_obs,
                          out.truncated[:, None]], dim=1)
        mismatched += int(not torch.equal(rows[i * num_envs : (i + 1) * num_envs], want))
    metrics = trainer.take_metrics()
    updates_before = trainer.agent.update_step
    t0 = time.perf_counter()
    trainer.advance(steps)
    timed_s = time.perf_counter() - t0
    updates = trainer.agent.update_step - updates_before
    info = trainer.info()
    graphs = len(trainer.agent.graphs) if trainer.agent.graphs is not None else 0
    checks = {
        "rows_equal_env_outputs": mismatched == 0 and len(records) == steps,
        "actions_shared_with_jax": all(pointers) and len(pointers) == steps,
        "outputs_shared_with_torch": all(viewed) and len(viewed) == 5 * steps,
        "metrics_present_and_finite": bool(metrics) and all(count > 0 for _, count in metrics.values()),
        "no_backend_fallback": dispatch_stats()["fallback_count"] == fallbacks_before,
        "cuda_graphs_captured": graphs > 0 if trainer.device.type == "cuda" else True,
    }
    trainer.close()
    return {"checks": checks, "ok": all(checks.values()), "mismatched_steps": mismatched, "steps": steps,
            "num_envs": num_envs, "build_s": built_s, "first_steps_s": first_s, "timed_s": timed_s,
            "env_steps_per_second": steps * num_envs / timed_s, "updates_per_second": updates / timed_s,
            "graphs": graphs, "compute_path": info["compile/path"], "backend": info["backend/selected"],
            "metrics": {k: total / count for k, (total, count) in metrics.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_mjx_torch", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--envs", type=int, default=256)
    ap.add_argument("--steps", type=int, default=32, help="recorded steps, then as many timed steps")
    ap.add_argument("--warmup-steps", type=int, default=8, help="random warm-up steps (buffer_min_length / envs)")
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--overrides", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args(argv)
    if a.steps <= a.warmup_steps or a.envs < 1:
        ap.error(f"--steps ({a.steps}) must exceed --warmup-steps ({a.warmup_steps}) and --envs >= 1")
    from agent_common.config import parse_overrides

    overrides = {"num_train_envs": a.envs, "num_eval_envs": a.envs, "num_eval_episodes": a.envs,
                 "num_env_steps": a.envs * 4 * a.steps, "agent.buffer_min_length": a.envs * a.warmup_steps,
                 "agent.buffer_max_length": a.envs * 4 * a.steps, "agent.sample_batch_size": a.batch,
                 "updates_per_interaction_step": 2, "agent.categorical_target_backend": a.backend,
                 **parse_overrides(a.overrides)}
    res = {"env": environment(), "overrides": overrides, **check(overrides, a.steps)}
    lines = [f"# The torch agent on MJX: GPU checks ({res['env'].get('gpu') or 'CPU'}, {res['env']['date_utc']})", "",
             f"`{res['env']['command']}`: {res['num_envs']} envs, {res['steps']} recorded then {res['steps']} timed "
             "interaction steps.", "", "| check | passed |", "|---|---|"]
    lines += [f"| {name} | {passed} |" for name, passed in res["checks"].items()]
    lines += ["", f"Timed: {fmt(res['env_steps_per_second'], '.0f')} env steps/s, "
                  f"{fmt(res['updates_per_second'], '.1f')} updates/s (the trainer alone, no driver).", "",
              f"Compute path: {res['compute_path']}", "", *json_block("metrics (means)", res["metrics"])]
    print(write_results(a.out, res, "\n".join(lines) + "\n"))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
