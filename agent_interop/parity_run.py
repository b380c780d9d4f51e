"""A paired training run of the PyTorch and the JAX agent from identical state, with its report.

Both agents start from the same weights and optimizer state (``make_agent_pair``), get the same batches and the
same policy noise, and run their own ``update``; at chosen points the critic-target chain is compared
(``target_diagnostics``) and the parameter drift measured. ``run_pair`` returns a JSON-able record,
``summarize`` condenses it and ``render_markdown`` writes the report. The GPU comparison script (real kernels, in
``bench/``) is a thin command line over this module; a CPU test runs it with reference backends.

Precision: ``fp32_matmuls`` switches torch's TF32 off (the torch agent enables it on CUDA, as upstream does); the
caller sets JAX's ``jax_default_matmul_precision`` to ``highest``. Both sides are then true fp32, and the
comparison measures the frameworks, not TF32's ~1e-3 relative matmul error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from agent_interop.parity import (
    make_agent_pair,
    op_parity,
    param_diff_stats,
    record_jax_gradients,
    step_pair,
    target_diagnostics,
)
from agent_interop.synthetic import make_batch

__all__ = ["OP_BAR", "fp32_matmuls", "passes", "render_markdown", "run_pair", "summarize", "synthetic_op_parity"]

OP_BAR = 1e-6
"""Max |difference| of the TD-target op between the frameworks on identical inputs (SPEC.md section 7)."""


def fp32_matmuls() -> None:
    """True fp32 matmuls in torch (the torch agent enables TF32 on CUDA, as upstream's training script does)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def synthetic_op_parity(torch_backend: str, jax_backend: str, device: str, batch_size: int = 2048,
                        seed: int = 0) -> dict[str, Any]:
    """Both ops fed the same random critic outputs: peaked and flat rows, exact ties between the critics, 10 %
    terminated rows, rewards reaching past the [-5, 5] support (clipped atoms), N = 101.

    Returns:
        {"batch_size", "max_abs", "bitwise"}.
    """
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((2, batch_size, 101)).astype(np.float32) * rng.choice([0.5, 3.0, 8.0],
                                                                                      (2, batch_size, 1))
    log_probs = (logits - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))).astype(np.float32)
    atoms = np.linspace(-5.0, 5.0, 101, dtype=np.float32)
    next_qs = (np.exp(log_probs) * atoms).sum(-1).astype(np.float32)
    next_qs[1, ::7] = next_qs[0, ::7]  # exact ties -> critic 0
    reward = (1.5 * rng.standard_normal(batch_size)).astype(np.float32)
    terminated = (rng.random(batch_size) < 0.1).astype(np.float32)
    alpha_log_pi = (0.01 * rng.normal(-5.0, 3.0, batch_size)).astype(np.float32)
    out = op_parity(next_qs, log_probs, reward, terminated, alpha_log_pi, 0.99, -5.0, 5.0, torch_backend,
                    jax_backend, device=device)
    return {"batch_size": batch_size, "max_abs": out["max_abs"], "bitwise": out["bitwise"]}


def run_pair(overrides: Sequence[str], observation_dim: int, action_dim: int, torch_backend: str, jax_backend: str,
             updates: int, seed: int, batch_size: int, device: str = "cuda",
             synthetic_batch_size: int = 2048) -> dict[str, Any]:
    """Builds the pair, runs the diagnostics and ``updates`` paired updates; returns the JSON-able record.

    Args:
        overrides: the agents' ``key=value`` config overrides (network sizes, ...); batch size, seed, device and
            eager torch (no compile, no CUDA graphs: the gradients are read from ``.grad``) are appended.
        observation_dim, action_dim: O, A of the synthetic inputs.
        torch_backend, jax_backend: the target backends (run strict).
        updates: paired updates; diagnostics before updates 0, 1, min(10, updates) and after the last.
        seed: config seed and batch stream seed.
        batch_size: B.
        device: ``cuda`` or ``cpu`` (the torch agent's device; the JAX agent's follows ``agent.device_type``).
        synthetic_batch_size: B of ``synthetic_op_parity``.

    Returns:
        backends, sizes, ``diagnostics`` {update: ...}, ``synthetic_op_parity``, per-update ``trace`` and
        ``summary`` (``summarize``).
    """
    if updates < 1:
        raise ValueError(f"run_pair: updates must be >= 1, got {updates}")
    full = [*overrides, f"agent.sample_batch_size={batch_size}", f"seed={seed}", f"agent.device_type={device}",
            "agent.use_compile=false", "agent.use_cuda_graph=false"]
    full += ["num_threads=1"] if device == "cpu" else []
    t0 = time.perf_counter()
    torch_agent, jax_agent = make_agent_pair(full, observation_dim, action_dim, torch_backend, jax_backend)
    fp32_matmuls()  # the torch agent turned TF32 on (upstream's setting); parity is measured in true fp32
    rng = np.random.default_rng(seed)
    checkpoints = sorted({0, 1, min(10, updates), updates})
    diagnostics: dict[int, dict[str, Any]] = {}
    trace: list[dict[str, Any]] = []
    record_jax_gradients(jax_agent)
    for i in range(updates + 1):
        batch = make_batch(rng, batch_size, observation_dim, action_dim)
        if i in checkpoints:  # before update i (i = updates: after the last one, on a fresh batch)
            d = target_diagnostics(torch_agent, jax_agent, batch)
            d.pop("arrays")
            d["param_drift"] = param_diff_stats(torch_agent, jax_agent)
            diagnostics[i] = d
            print(f"[{torch_backend}/{jax_backend}] after {i} updates: TD target same inputs "
                  f"{d['td_target_same_inputs']:.3g} (bitwise {d['td_target_same_inputs_bitwise']}), end to end "
                  f"{d['td_target_end_to_end']:.3g}, critic drift {d['param_drift']['critic']['max']:.3g}",
                  flush=True)
        if i == updates:
            break
        step = step_pair(torch_agent, jax_agent, batch)
        trace.append({
            "update": i + 1, "actor_step": step["actor_step"],
            "metrics": {k: {"torch": t, "jax": j, "abs_diff": abs(t - j)} for k, (t, j) in step["metrics"].items()},
            "grad_norm": {k: {"torch": t, "jax": j, "rel_diff": abs(t - j) / max(abs(t), 1e-30), "max_abs": m}
                          for k, (t, j, m) in step["grad_norm"].items()},
            "param_max_abs": {k: v["max_abs"] for k, v in step["params"].items()},
        })
    return {
        "torch_backend": torch_backend, "jax_backend": jax_backend, "updates": updates, "batch_size": batch_size,
        "seed": seed, "overrides": full, "seconds": time.perf_counter() - t0,
        "diagnostics": {str(k): v for k, v in diagnostics.items()},
        "synthetic_op_parity": synthetic_op_parity(torch_backend, jax_backend, str(torch_agent.device),
                                                   batch_size=synthetic_batch_size),
        "trace": trace,
        "summary": summarize(diagnostics, trace),
    }


def summarize(diagnostics: dict[int, dict[str, Any]], trace: list[dict[str, Any]]) -> dict[str, Any]:
    """The worst values over a run: op parity, end-to-end target, losses, gradient norms, parameter drift."""
    same = [d["td_target_same_inputs"] for d in diagnostics.values()]
    metric_keys = sorted({k for t in trace for k in t["metrics"]})
    last = diagnostics[max(diagnostics)]
    return {
        "td_target_same_inputs_max": max(same),
        "td_target_same_inputs_all_bitwise": all(d["td_target_same_inputs_bitwise"] for d in diagnostics.values()),
        "td_target_end_to_end_initial": diagnostics[0]["td_target_end_to_end"],
        "td_target_end_to_end_final": last["td_target_end_to_end"],
        "metric_max_abs_diff": {k: max(t["metrics"][k]["abs_diff"] for t in trace if k in t["metrics"])
                                for k in metric_keys},
        "grad_norm_max_rel_diff": {k: max(t["grad_norm"][k]["rel_diff"] for t in trace if k in t["grad_norm"])
                                   for k in ("actor", "critic", "temperature")},
        "param_drift_after_1": diagnostics[1]["param_drift"] if 1 in diagnostics else None,
        "param_drift_final": last["param_drift"],
        "param_max_abs_by_update": {net: [t["param_max_abs"][net] for t in trace]
                                    for net in ("actor", "critic", "target_critic", "temperature")},
    }


def passes(pairs: Sequence[dict[str, Any]], bar: float = OP_BAR) -> bool:
    """Whether every pair's op parity on identical inputs (run checkpoints and synthetic batch) is within ``bar``."""
    return all(p["summary"]["td_target_same_inputs_max"] <= bar and p["synthetic_op_parity"]["max_abs"] <= bar
               for p in pairs)


def render_markdown(record: dict[str, Any]) -> str:
    """The report of a comparison record: {"environment", "command", "cpu_smoke", "pairs", "pass"}, where
    ``environment`` has date_utc, cuda_device, jax_device_kind, torch, jax, triton, torch_allow_tf32 and
    jax_default_matmul_precision, and each pair is a ``run_pair`` record."""
    env = record["environment"]
    lines = [
        "# Cross-framework agent parity on the GPU"
        + (" -- CPU SMOKE RUN (interpreted kernels), not a measurement" if record["cpu_smoke"] else ""),
        "",
        f"{env['date_utc']}; {env['cuda_device']} / {env['jax_device_kind']}; torch {env['torch']}, jax "
        f"{env['jax']}, triton {env['triton']}; fp32 matmuls (torch TF32 off: {not env['torch_allow_tf32']}, "
        f"jax precision {env['jax_default_matmul_precision']}). Command: `{record['command']}`.",
        "",
        "HalfCheetah-shaped agents (O = 17, A = 6) with the CPU-sim recipe's networks (actor 2x128, critic 2x256, "
        "101 atoms), identical weights and optimizer state (agent_interop.torch_jax), identical batches, shared "
        f"policy noise. Bar for the op on identical inputs: max |diff| <= {OP_BAR:g}.",
        "",
    ]
    for pair in record["pairs"]:
        s = pair["summary"]
        lines += [
            f"## {pair['torch_backend']} vs {pair['jax_backend']} (B = {pair['batch_size']}, {pair['updates']} "
            f"updates, {pair['seconds']:.0f} s)",
            "",
            "| quantity | value |",
            "|---|---|",
            f"| TD target, identical critic outputs, max abs diff (all checkpoints) | "
            f"{s['td_target_same_inputs_max']:.3g} (bitwise: {s['td_target_same_inputs_all_bitwise']}) |",
            f"| same, synthetic B = {pair['synthetic_op_parity']['batch_size']} | "
            f"{pair['synthetic_op_parity']['max_abs']:.3g} (bitwise: {pair['synthetic_op_parity']['bitwise']}) |",
            f"| TD target end to end from identical weights (start / after {pair['updates']}) | "
            f"{s['td_target_end_to_end_initial']:.3g} / {s['td_target_end_to_end_final']:.3g} |",
        ]
        d0 = pair["diagnostics"]["0"]
        for key in ("next_action", "next_log_pi", "next_alpha_log_pi", "target_q", "target_log_probs"):
            lines.append(f"| {key} (start), max abs diff | {d0[key]:.3g} |")
        for key, v in s["metric_max_abs_diff"].items():
            lines.append(f"| {key}, max abs diff over the updates | {v:.3g} |")
        for key, v in s["grad_norm_max_rel_diff"].items():
            lines.append(f"| gradient norm {key}, max relative diff | {v:.3g} |")
        for label, drift in (("after 1 update", s["param_drift_after_1"]),
                             (f"after {pair['updates']} updates", s["param_drift_final"])):
            if drift is None:
                continue
            for net, v in drift.items():
                lines.append(f"| parameters {net} {label}: max / p99.9 / fraction > 1e-6 | {v['max']:.3g} / "
                             f"{v['p999']:.3g} / {v['fraction_over']:.2g} |")
        lines.append("")
    lines += [f"Verdict: {'PASS' if record['pass'] else 'FAIL'} (op bar {OP_BAR:g} on identical inputs).", ""]
    return "\n".join(lines)
