"""``python -m agent_interop.train --agent jax --init-from torch --overrides key=value ...``: one framework's agent
trained from the other framework's initial state for the same config and seed.

Everything but the agent's initial state is the agent's own CLI (``python -m agent_<agent>.train``, whose
``--overrides`` it takes unchanged): the same loop, logs, checkpoints and resume (a resumed run loads its checkpoint,
so the initial state matters only when the run starts). The environment, replay buffer and exploration streams are
framework-free numpy code seeded from ``seed``, so such a run shares its random warm-up steps with both agents' own
runs of that seed and differs from the other framework's run only in the update's random draws and the frameworks'
arithmetic. That is the experiment that tells an initialisation outcome from a defect when the two agents' returns
differ (``bench.learning`` runs it as the agents ``jax-torchinit`` and ``torch-jaxinit``).

    python -m agent_interop.train --agent jax --init-from torch --overrides env.env_name=HalfCheetah-v4 \\
        --overrides seed=1000
"""

from __future__ import annotations

import argparse
import sys

from agent_common.keys import FRAMEWORKS
from agent_common.protocol import AgentFactory
from simulators import DEVICE, simulator


def _factory(agent: str):
    """The lazy factory for ``agent`` started from the other framework's initialisation (the strict-backend error
    becomes a config error, as in the agents' own CLIs)."""

    def make() -> AgentFactory:
        from agent_common.protocol import strict_backend_as_config_error
        from agent_interop.torch_jax import make_agent_from_torch_init, make_torch_agent_from_jax_init

        if agent == "jax":
            from jax_impl import BackendUnavailable

            return strict_backend_as_config_error(make_agent_from_torch_init, BackendUnavailable)
        from torch_impl import BackendUnavailable

        return strict_backend_as_config_error(make_torch_agent_from_jax_init, BackendUnavailable)

    return make


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(prog="python -m agent_interop.train", description=__doc__.split("\n\n")[0],
                                 epilog="Every other argument (--overrides key=value ...) goes to the agent's CLI.")
    ap.add_argument("--agent", required=True, choices=FRAMEWORKS, help="the agent that trains")
    ap.add_argument("--init-from", required=True, choices=FRAMEWORKS, help="the agent whose initial state it takes")
    known, rest = ap.parse_known_args(argv)
    if known.agent == known.init_from:
        ap.error(f"--init-from: expected the other framework than --agent {known.agent!r}, got {known.init_from!r}")
    from agent_common.config import parse_args
    from agent_common.runs.commands import set_train_program

    cfg = parse_args(rest, framework=known.agent, prog="python -m agent_interop.train")  # exits 2 on a bad key
    if simulator(cfg.env.env_type).STEPPER == DEVICE:
        ap.error(f"--init-from: expected env.env_type=mujoco, dmc or myosuite (a host simulator), got "
                 f"env.env_type={cfg.env.env_type}, whose device trainer builds its own agent")
    set_train_program(f"python -m agent_{known.agent}.train")  # a resume's printed command: the agent's own CLI
    if known.agent == "jax":
        from agent_jax.train import run
    else:
        from agent_torch.train import run
    return run(cfg, factory=_factory(known.agent))


if __name__ == "__main__":
    sys.exit(main())
