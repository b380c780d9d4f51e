"""JAX FlashSAC agent (paper-era actor head) using the project's fused categorical TD target (jax_impl)."""

from __future__ import annotations

from typing import Any

__all__ = ["FlashSACAgent", "make_agent"]


def __getattr__(name: str) -> Any:
    # Lazy, so `python -m agent_jax.train` validates the config before importing jax.
    if name in __all__:
        from agent_jax import agent

        return getattr(agent, name)
    raise AttributeError(f"module 'agent_jax' has no attribute {name!r}")
