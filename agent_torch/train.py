"""Training entry point: ``python -m agent_torch.train --overrides key=value [--overrides ...]``."""

from __future__ import annotations

import sys

from agent_common.loop import AgentFactory, run_cli, strict_backend_as_config_error

__all__ = ["main"]


def _factory() -> AgentFactory:
    from agent_torch.agent import make_agent  # imported after the config is validated
    from torch_impl import BackendUnavailable

    return strict_backend_as_config_error(make_agent, BackendUnavailable)


def main(argv: list[str] | None = None) -> int:
    """Parses ``--overrides``, trains (or resumes with ``agent_load_path``) and returns the exit code."""
    return run_cli(argv, "torch", _factory)


if __name__ == "__main__":
    sys.exit(main())
