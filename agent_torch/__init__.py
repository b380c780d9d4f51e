"""PyTorch FlashSAC agent (paper-era actor head) using the project's fused categorical TD target."""

from __future__ import annotations

from typing import Any

__all__ = ["FlashSACAgent", "make_agent"]


def __getattr__(name: str) -> Any:
    # Lazy, so `python -m agent_torch.train` validates the config before importing torch.
    if name in __all__:
        from agent_torch import agent

        return getattr(agent, name)
    raise AttributeError(f"module 'agent_torch' has no attribute {name!r}")
