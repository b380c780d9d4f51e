"""Evaluation only: ``python -m agent_torch.evaluate <run, checkpoint or converted dir> --episodes N [--video [DIR]]
[--sampled] [--seed S] [--replay-last-eval] [--export actor.pt]`` (``agent_common.policy.evaluate_main``)."""

from __future__ import annotations

import sys

from agent_common.policy import evaluate_main

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Loads the policy, plays the episodes, prints each return and the mean; returns the exit code."""
    from agent_torch.policy import export_actor, load_policy

    return evaluate_main(sys.argv[1:] if argv is None else argv, "torch", load_policy, export_actor)


if __name__ == "__main__":
    sys.exit(main())
