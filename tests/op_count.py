"""Counting the operations of one agent update (a test helper; ``python -m tests.op_count`` prints the counts).

torch: ``TorchOpCounter`` is a ``TorchDispatchMode`` that records every ATen op dispatched while it is active,
the backward pass included. Views and metadata ops (``is_view`` overloads, ``detach``) and bare allocations
(``empty*``) launch no kernel and are counted apart, so ``kernels`` is the number of ops that launch device work
(on CUDA one kernel each, a foreach op one multi-tensor kernel per chunk of tensors).

JAX: ``hlo_counts`` reads the compiled update's optimised HLO (``jit(f).lower(...).compile().as_text()``) and
counts the entry computation's instructions that run as programs on a device: fusions, custom calls, dots,
copies and the other non-trivial instructions (not parameters, tuples, get-tuple-elements, bitcasts, constants).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["TorchOpCounter", "hlo_counts", "jax_update_counts", "torch_update_counts"]

_FREE = {"detach", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "lift_fresh", "alias",
         "_unsafe_view", "_record_function_enter_new", "_record_function_exit"}


class TorchOpCounter(TorchDispatchMode):
    """``with TorchOpCounter() as c: ...`` then ``c.kernels`` ({op name: calls} of ops that launch work),
    ``c.free`` (views, detach, allocations) and ``c.total_kernels``."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: Counter[str] = Counter()
        self.free: Counter[str] = Counter()

    @property
    def total_kernels(self) -> int:
        return sum(self.kernels.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = func.overloadpacket.__name__
        if getattr(func, "is_view", False) or name in _FREE:
            self.free[name] += 1
        else:
            self.kernels[name] += 1
        return func(*args, **(kwargs or {}))


def torch_update_counts(agent: Any, batch: dict[str, Any]) -> dict[str, TorchOpCounter]:
    """The ops of one actor update (actor + temperature + critic + EMA, with the LR-scheduler steps) and one
    critic-only update of the torch ``agent`` on ``batch``, after one warm-up pair (lazy optimizer state).
    The agent must have ``agent.actor_update_period=2``; its update step must be even."""
    if agent.cfg.agent.actor_update_period != 2 or agent.update_step % 2:
        raise ValueError("torch_update_counts needs agent.actor_update_period=2 and an even update step, got "
                         f"{agent.cfg.agent.actor_update_period} and {agent.update_step}")
    flat = agent._flat_batch(batch)
    for _ in range(2):
        agent._apply_update(flat)
    out = {}
    for name in ("actor", "critic_only"):
        with TorchOpCounter() as counter:
            agent._apply_update(flat)
        out[name] = counter
    return out


_ENTRY = re.compile(r"^ENTRY .*?\{\n(.*?)\n\}", re.S | re.M)
_OPCODE = re.compile(r"=\s*(?:\([^=]*?\)|\S+)\s+([a-z][a-z0-9-]*)\(")
_TRIVIAL = {"parameter", "tuple", "get-tuple-element", "bitcast", "constant", "after-all", "opt-barrier"}


def hlo_counts(hlo_text: str) -> dict[str, Any]:
    """``{"programs": n, "fusions": n, "by_opcode": {opcode: n}}`` of the entry computation of compiled HLO text;
    ``programs`` counts every instruction but the trivial ones (parameters, tuples, bitcasts, constants)."""
    match = _ENTRY.search(hlo_text)
    if match is None:
        raise ValueError("no ENTRY computation in the HLO text")
    opcodes: Counter[str] = Counter()
    for line in match.group(1).splitlines():
        op = _OPCODE.search(line)
        if op is not None:
            opcodes[op.group(1)] += 1
    programs = sum(n for op, n in opcodes.items() if op not in _TRIVIAL)
    return {"programs": programs, "fusions": opcodes.get("fusion", 0), "by_opcode": dict(sorted(opcodes.items()))}


def jax_update_counts(agent: Any, batch: dict[str, Any],
                      variants: tuple[str, ...] = ("actor", "critic_only")) -> dict[str, dict[str, Any]]:
    """``hlo_counts`` of the JAX ``agent``'s compiled update (``update_networks_flat``) on ``batch``'s shape, for
    the actor update and / or the critic-only update (``variants``)."""
    from agent_common.buffer import flat_batch
    from agent_jax.update import update_networks_flat

    flat = flat_batch(batch)
    out = {}
    for name, do_actor in (("actor", True), ("critic_only", False)):
        if name not in variants:
            continue
        text = update_networks_flat.lower(agent.state, flat, agent.ctx, observation_dim=agent.observation_dim,
                                          do_actor_update=do_actor).compile().as_text()
        out[name] = hlo_counts(text)
    return out


RECIPE = ["agent.actor_hidden_dim=128", "agent.critic_hidden_dim=256", "agent.actor_num_blocks=2",
          "agent.critic_num_blocks=2", "agent.critic_num_bins=101", "agent.sample_batch_size=8",
          "agent.actor_update_period=2", "agent.device_type=cpu", "num_threads=1", "seed=0"]
"""The recipe's network sizes (critic 256 x 2 blocks, actor 128 x 2 blocks, 101 bins) with a small batch."""


def main(argv: list[str] | None = None) -> None:
    import sys

    from agent_common.config import load_config

    which = set((sys.argv[1:] if argv is None else argv) or ("torch", "jax"))
    from tests.data.make_fused_update_golden import fixed_batches, spaces

    batch = fixed_batches(1)[0]
    batch = {k: v[:8] for k, v in batch.items()}
    if "torch" in which:
        from agent_torch.agent import make_agent as make_torch

        agent = make_torch(load_config([*RECIPE, "agent.categorical_target_backend=torch"], "torch"), *spaces())
        for name, c in torch_update_counts(agent, batch).items():
            print(f"torch {name}: {c.total_kernels} kernel ops, {sum(c.free.values())} free ops; "
                  f"{dict(c.kernels.most_common())}")
    if "jax" not in which:
        return
    from agent_jax.agent import make_agent as make_jax

    jagent = make_jax(load_config([*RECIPE, "agent.categorical_target_backend=jax"], "jax"), *spaces())
    for name, c in jax_update_counts(jagent, batch).items():
        print(f"jax {name}: {c['programs']} programs, {c['fusions']} fusions; {c['by_opcode']}")


if __name__ == "__main__":
    main()
