"""H200 cross-framework agent parity (issue 7, item 3): the PyTorch agent with the Triton kernel against the JAX
agent with the Pallas kernel, from identical weights, on identical batches, with shared policy noise.

    python3 -m bench.gpu_agent_parity --out bench/results/agent_parity            # ~1-2 min on an H200

On the device machine (no gymnasium / omegaconf in its image: carry the project's ``.whl`` folder, which holds the
omegaconf + antlr4 wheels; gymnasium is optional, an import stub stands in for it, since the agents are built
from Box-shaped spaces directly and no environment is created):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
        .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH; python3 -m bench.gpu_agent_parity --out $OUT

What it measures (``bench/agent_parity.py`` is the harness, shared with ``tests/test_agent_parity.py``):

1. **Op parity, identical inputs**: the torch agent's target-critic outputs (min-Q means, log-probs, alpha log pi)
   fed to both ops -- Triton and Pallas -- at the start, after 1, 10 and all updates; plus a synthetic B = 2048
   batch with terminated rows and clipped atoms. Bar: max |difference| <= 1e-6; bitwise equality is reported.
2. **End to end from identical weights**: next actions, log pi, target-critic outputs and each agent's own TD
   target (its own a', critic outputs and op).
3. **Training**: both agents run their own ``update`` for ``--updates`` steps (recipe sizes, B = 512, actor every
   2nd update): per-update losses, gradient norms (torch ``.grad``; JAX through a pass-through optax slot) and the
   parameter drift (max |difference| and 99.9th percentile per network, BN running statistics included).

Precision: torch runs eager (``agent.use_compile=false``, ``agent.use_cuda_graph=false``: neither would change the
op, and the gradients are read from ``.grad``, which a captured graph's replays do not refresh) with TF32 switched
off after the agent is built (the agent enables it on CUDA, as upstream does); JAX with
``jax_default_matmul_precision=highest``. Both are therefore true fp32; TF32 would add ~1e-3 relative differences to
every matmul and say nothing about the frameworks.
``--reference`` also runs the torch / jax reference backends as a second pair.

Output: ``<out>/agent_parity.json`` (everything, including per-update traces) and ``<out>/agent_parity.md``.
Exit status 1 if the 1e-6 bar is missed.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before jax initialises: torch shares the GPU

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

BAR = 1e-6  # op parity bar for identical inputs (SPEC.md section 7; the kernels agree bitwise on the H200)
OBS_DIM, ACT_DIM = 17, 6  # HalfCheetah-v4 shapes (the CPU-sim recipe's first task)
RECIPE = [  # upstream CPU-sim recipe network and batch sizes (FLASHSAC.md section 1)
    "agent.actor_num_blocks=2", "agent.actor_hidden_dim=128", "agent.critic_num_blocks=2",
    "agent.critic_hidden_dim=256", "agent.critic_num_bins=101", "agent.sample_batch_size=512",
    "agent.use_amp=false", "gamma=0.99", "n_step=1", "num_env_steps=1_000_000",
]


def _stub_gymnasium() -> bool:
    """agent_torch.agent imports gymnasium only for annotations; stand in an empty module if it is missing."""
    try:
        import gymnasium  # noqa: F401

        return False
    except ImportError:
        sys.modules["gymnasium"] = types.ModuleType("gymnasium")
        return True


def _fp32_matmuls() -> None:
    """True fp32 matmuls in torch (the agent enables TF32 on CUDA, as upstream's train.py does)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def _environment(jax: Any, torch: Any, stubbed: bool) -> dict[str, Any]:
    import triton

    dev = jax.devices()[0]
    return {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(), "torch": torch.__version__, "jax": jax.__version__,
        "triton": triton.__version__, "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available()
        else None, "jax_device": str(dev), "jax_device_kind": getattr(dev, "device_kind", None),
        "jax_default_matmul_precision": str(jax.config.jax_default_matmul_precision),
        "torch_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "torch_float32_matmul_precision": torch.get_float32_matmul_precision(), "gymnasium_stub": stubbed,
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
        "FLASHSAC_PALLAS_INTERPRET": os.environ.get("FLASHSAC_PALLAS_INTERPRET"),
    }


def _synthetic_op_parity(torch_backend: str, jax_backend: str, device: str, batch_size: int = 2048,
                         seed: int = 0) -> dict[str, Any]:
    """Random critic outputs (peaked and flat rows, near-ties between critics), 10% terminated rows, rewards
    reaching past the support (clipped atoms), fed to both ops."""
    from bench.agent_parity import op_parity

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


def run_pair(torch_backend: str, jax_backend: str, updates: int, seed: int, batch_size: int, device: str = "cuda",
             synthetic_batch_size: int = 2048) -> dict[str, Any]:
    """Builds the pair, runs the diagnostics and ``updates`` paired updates; returns the JSON-able record."""
    from bench.agent_parity import (
        make_agent_pair,
        make_batch,
        param_diff_stats,
        record_jax_gradients,
        step_pair,
        target_diagnostics,
    )

    overrides = [*RECIPE, f"agent.sample_batch_size={batch_size}", f"seed={seed}", f"agent.device_type={device}",
                 "agent.use_compile=false", "agent.use_cuda_graph=false"]
    overrides += ["num_threads=1"] if device == "cpu" else []
    t0 = time.perf_counter()
    torch_agent, jax_agent = make_agent_pair(overrides, OBS_DIM, ACT_DIM, torch_backend, jax_backend)
    _fp32_matmuls()  # the torch agent turned TF32 on (upstream's setting); parity is measured in true fp32
    rng = np.random.default_rng(seed)
    checkpoints = sorted({0, 1, min(10, updates), updates})
    diagnostics: dict[int, dict[str, Any]] = {}
    trace: list[dict[str, Any]] = []
    record_jax_gradients(jax_agent)
    for i in range(updates + 1):
        batch = make_batch(rng, batch_size, OBS_DIM, ACT_DIM)
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
        "seed": seed, "overrides": overrides, "seconds": time.perf_counter() - t0,
        "diagnostics": {str(k): v for k, v in diagnostics.items()},
        "synthetic_op_parity": _synthetic_op_parity(torch_backend, jax_backend, str(torch_agent.device),
                                                    batch_size=synthetic_batch_size),
        "trace": trace,
        "summary": _summarize(diagnostics, trace),
    }


def _summarize(diagnostics: dict[int, dict[str, Any]], trace: list[dict[str, Any]]) -> dict[str, Any]:
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


def _markdown(record: dict[str, Any]) -> str:
    env = record["environment"]
    lines = [
        "# Cross-framework agent parity on the GPU (issue 7)"
        + (" -- CPU SMOKE RUN (interpreted kernels), not a measurement" if record["cpu_smoke"] else ""),
        "",
        f"{env['date_utc']}; {env['cuda_device']} / {env['jax_device_kind']}; torch {env['torch']}, jax "
        f"{env['jax']}, triton {env['triton']}; fp32 matmuls (torch TF32 off: {not env['torch_allow_tf32']}, "
        f"jax precision {env['jax_default_matmul_precision']}). Command: `{record['command']}`.",
        "",
        "HalfCheetah-shaped agents (O = 17, A = 6) with the CPU-sim recipe's networks (actor 2x128, critic 2x256, "
        "101 atoms), identical weights and optimizer state (agent_jax.convert), identical batches, shared policy "
        "noise. Bar for the op on identical inputs: max |diff| <= 1e-6.",
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
    lines += [f"Verdict: {'PASS' if record['pass'] else 'FAIL'} (op bar 1e-6 on identical inputs).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output directory (JSON + markdown)")
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference", action="store_true", help="also run the torch / jax reference backends")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="check the script on a CPU: interpreted kernels, 1 torch thread (not a measurement)")
    args = parser.parse_args(argv)
    if args.cpu_smoke:
        os.environ.update(TRITON_INTERPRET="1", FLASHSAC_PALLAS_INTERPRET="1", JAX_PLATFORMS="cpu")
    else:
        for var in ("TRITON_INTERPRET", "FLASHSAC_PALLAS_INTERPRET"):
            if os.environ.get(var, "0") not in ("", "0"):
                parser.error(f"{var} is set: this benchmark compares the real kernels")
    try:
        import omegaconf  # noqa: F401
    except ImportError:
        parser.error("omegaconf is missing (agent_common.config needs it): carry the .whl folder, see the docstring")
    stubbed = _stub_gymnasium()

    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    import torch

    if args.cpu_smoke:
        torch.set_num_threads(1)
    elif not torch.cuda.is_available() or jax.devices()[0].platform != "gpu":
        parser.error(f"needs a CUDA GPU for both torch and jax (torch: {torch.cuda.is_available()}, jax: "
                     f"{jax.devices()[0].platform})")
    t0 = time.perf_counter()
    pairs = [("triton", "pallas")] + ([("torch", "jax")] if args.reference else [])
    device, synthetic = ("cpu", 256) if args.cpu_smoke else ("cuda", 2048)
    results = [run_pair(tb, jb, args.updates, args.seed, args.batch_size, device, synthetic) for tb, jb in pairs]
    record = {
        "command": "python3 -m bench.gpu_agent_parity " + " ".join(argv if argv is not None else sys.argv[1:]),
        "environment": _environment(jax, torch, stubbed),
        "bar": BAR,
        "cpu_smoke": bool(args.cpu_smoke),
        "pairs": results,
        "seconds": time.perf_counter() - t0,
    }
    record["pass"] = all(p["summary"]["td_target_same_inputs_max"] <= BAR and p["synthetic_op_parity"]["max_abs"]
                         <= BAR for p in results)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "agent_parity.json"), "w") as f:
        json.dump(record, f, indent=1, default=float)
    markdown = _markdown(record)
    with open(os.path.join(args.out, "agent_parity.md"), "w") as f:
        f.write(markdown)
    print(markdown)
    return 0 if record["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
