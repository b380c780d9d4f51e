"""H200 cross-framework agent parity: the PyTorch agent with the Triton kernel against the JAX agent with the
Pallas kernel, from identical weights, on identical batches, with shared policy noise.

    python3 -m bench.gpu_agent_parity --out bench/results/agent_parity            # ~1-2 min on an H200

On the device machine (no gymnasium / omegaconf in its image: carry the project's ``.whl`` folder, which holds the
omegaconf + antlr4 wheels; gymnasium is optional, an import stub stands in for it, since the agents are built
from Box-shaped spaces directly and no environment is created):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
        .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH; python3 -m bench.gpu_agent_parity --out $OUT

What it measures (``agent_interop.parity_run`` is the run and its report, over the harness
``agent_interop.parity`` shared with ``tests/test_agent_parity.py``; this script is the command line):

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
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from typing import Any  # noqa: E402

OBS_DIM, ACT_DIM = 17, 6  # HalfCheetah-v4 shapes (the CPU-sim recipe's first task)
RECIPE = [  # upstream CPU-sim recipe network and batch sizes (docs/flashsac.md)
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


def _environment(jax: Any, torch: Any, stubbed: bool) -> dict[str, Any]:
    """bench.common's environment record plus what decides parity here: matmul precision flags, interpreters."""
    from bench.common import environment

    dev = jax.devices()[0]
    return environment() | {
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "jax_device": str(dev), "jax_device_kind": getattr(dev, "device_kind", None),
        "jax_default_matmul_precision": str(jax.config.jax_default_matmul_precision),
        "torch_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "torch_float32_matmul_precision": torch.get_float32_matmul_precision(), "gymnasium_stub": stubbed,
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
        "FLASHSAC_PALLAS_INTERPRET": os.environ.get("FLASHSAC_PALLAS_INTERPRET"),
    }


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

    from agent_interop.parity_run import OP_BAR, passes, render_markdown, run_pair

    if args.cpu_smoke:
        torch.set_num_threads(1)
    elif not torch.cuda.is_available() or jax.devices()[0].platform != "gpu":
        parser.error(f"needs a CUDA GPU for both torch and jax (torch: {torch.cuda.is_available()}, jax: "
                     f"{jax.devices()[0].platform})")
    t0 = time.perf_counter()
    pairs = [("triton", "pallas")] + ([("torch", "jax")] if args.reference else [])
    device, synthetic = ("cpu", 256) if args.cpu_smoke else ("cuda", 2048)
    results = [run_pair(RECIPE, OBS_DIM, ACT_DIM, tb, jb, args.updates, args.seed, args.batch_size, device, synthetic)
               for tb, jb in pairs]
    record = {
        "command": "python3 -m bench.gpu_agent_parity " + " ".join(argv if argv is not None else sys.argv[1:]),
        "environment": _environment(jax, torch, stubbed),
        "bar": OP_BAR,
        "cpu_smoke": bool(args.cpu_smoke),
        "pairs": results,
        "seconds": time.perf_counter() - t0,
    }
    record["pass"] = passes(results)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "agent_parity.json"), "w") as f:
        json.dump(record, f, indent=1, default=float)
    markdown = render_markdown(record)
    with open(os.path.join(args.out, "agent_parity.md"), "w") as f:
        f.write(markdown)
    print(markdown)
    return 0 if record["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
