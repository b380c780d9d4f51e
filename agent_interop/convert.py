"""``python -m agent_interop.convert DIRECTION SRC DST``: the project's one converter command.

Between the two agents (``torch-to-jax`` / ``jax-to-torch``: ``agent_interop.torch_jax``, where the conversion
functions live) and from / to upstream FlashSAC's checkpoint layout (``upstream-to-torch`` / ``upstream-to-jax`` /
``torch-to-upstream`` / ``jax-to-upstream``: ``agent_interop.upstream``).
"""

from __future__ import annotations

import os

import numpy as np

from agent_interop.synthetic import make_spaces
from agent_interop.torch_jax import (
    ConversionError,
    agent_dir_of,
    convert_jax_checkpoint,
    convert_torch_checkpoint,
)

__all__ = ["main"]


def _checkpoint_dims(src: str, source: str) -> tuple[int, int]:
    """(observation width, action width) read from the source checkpoint's actor."""
    agent_dir = agent_dir_of(src)
    if source == "torch":
        import torch

        state = torch.load(os.path.join(agent_dir, "actor.pt"), map_location="cpu", weights_only=False)
        weights = state["network_state_dict"]
        return int(weights["input_bn.weight"].shape[0]), int(weights["mean_bias"].shape[0])
    from agent_common.runs.files import load_pickle

    params = load_pickle(os.path.join(agent_dir, "actor.pkl"))["params"]
    return int(np.shape(params["input_bn"]["weight"])[0]), int(np.shape(params["mean_bias"])[0])


def main(argv: list[str] | None = None) -> int:
    """``python -m agent_interop.convert DIRECTION SRC DST --overrides key=value ...``.

    Builds the agents on the CPU from the training run's ``--overrides`` (the architecture and schedule keys must
    match the checkpoint; the observation and action widths are read from it, actions are the [-1, 1] box of
    RescaleAction), then converts. SRC may be an agent, training-checkpoint or run directory. DIRECTION
    ``torch-to-jax`` / ``jax-to-torch`` converts between the two agents; ``upstream-to-torch`` / ``upstream-to-jax``
    imports an upstream FlashSAC checkpoint folder (a new run starts from DST with ``agent_init_path=DST``) and
    ``torch-to-upstream`` / ``jax-to-upstream`` writes upstream's layout (``agent_interop.upstream``).
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agent_interop.convert", description=main.__doc__.split("\n\n")[0])
    parser.add_argument("direction", choices=("torch-to-jax", "jax-to-torch", "upstream-to-torch", "upstream-to-jax",
                                              "torch-to-upstream", "jax-to-upstream"))
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--overrides", action="append", default=[], help="the training run's key=value overrides")
    parser.add_argument("--no-check-hyperparameters", action="store_true",
                        help="convert even if the update configuration (LR schedule, gamma, ...) differs")
    parser.add_argument("--actor-head", choices=("paper", "upstream"), default=None,
                        help="upstream directions: the checkpoint's actor head (default: detected from an upstream "
                             "checkpoint's head weights, agent.actor_head / the imported folder's record on export)")
    args = parser.parse_args(argv)
    if "upstream" in args.direction:
        from agent_interop import upstream

        try:
            print(upstream.run(args.direction, args.src, args.dst, args.overrides, args.actor_head,
                               not args.no_check_hyperparameters))
        except ConversionError as exc:
            print(f"error: {exc}", file=__import__("sys").stderr)
            return 2
        return 0

    from agent_common.config import load_config
    from agent_jax.agent import FlashSACAgent as JaxAgent
    from agent_torch.agent import FlashSACAgent as TorchAgent

    source = args.direction.split("-")[0]
    from agent_common.runs.upstream_layout import is_upstream_checkpoint, upstream_checkpoints_in

    if is_upstream_checkpoint(args.src) or upstream_checkpoints_in(args.src):
        src = args.src if is_upstream_checkpoint(args.src) else upstream_checkpoints_in(args.src)[0]
        print(f"error: {args.src} holds upstream FlashSAC's checkpoint layout (another program's), not a {source} "
              f"checkpoint of this project; convert it with: python -m agent_interop.convert upstream-to-"
              f"{'jax' if source == 'torch' else 'torch'} {src} {args.dst} --overrides <the run's architecture and "
              "schedule keys>", file=__import__("sys").stderr)
        return 2
    try:
        observation_dim, action_dim = _checkpoint_dims(args.src, source)
    except FileNotFoundError as exc:  # NoCheckpointError: names another program's layout with its command
        print(f"error: {exc}", file=__import__("sys").stderr)
        return 2
    spaces = make_spaces(observation_dim, action_dim)
    kept = [o for o in args.overrides if o.split("=", 1)[0].strip() not in
            ("agent.categorical_target_backend", "agent.device_type", "agent.categorical_target_strict")]
    common = [*kept, "agent.device_type=cpu"]
    torch_agent = TorchAgent(load_config([*common, "agent.categorical_target_backend=torch"], "torch"), *spaces)
    jax_overrides = [*common, "agent.categorical_target_backend=jax"]
    if torch_agent.cfg.agent.use_amp:  # the converter's JAX agent runs fp32; the weights are fp32 either way
        jax_overrides.append("agent.use_amp=false")
    jax_agent = JaxAgent(load_config(jax_overrides, "jax"), *spaces)
    check = not args.no_check_hyperparameters
    if source == "torch":
        out = convert_torch_checkpoint(args.src, args.dst, torch_agent, jax_agent, check)
    else:
        out = convert_jax_checkpoint(args.src, args.dst, jax_agent, torch_agent, check)
    print(f"converted {args.src} ({source}) -> {out} ({'jax' if source == 'torch' else 'torch'}); "
          f"observation width {observation_dim}, action width {action_dim}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
