"""Training entry point: ``python -m agent_torch.train --overrides key=value [--overrides ...]``.

Under ``torchrun --nproc_per_node=N -m agent_torch.train ...`` each process is one data-parallel replica
(``agent_torch.distributed``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from agent_common import cli
from agent_common.cli import Framework
from agent_common.config import parse_args, with_save_path
from agent_common.device import DeviceTrainerFactory
from agent_common.keys import Config
from agent_common.protocol import AgentFactory, strict_backend_as_config_error
from simulators import simulator
from simulators.mjx import xla_flags

__all__ = ["configure_mjx_xla", "main", "run"]


def _factory() -> AgentFactory:
    from agent_torch.agent import make_agent  # imported after the config is validated
    from torch_impl import BackendUnavailable

    return strict_backend_as_config_error(make_agent, BackendUnavailable)


def _vector_factory() -> DeviceTrainerFactory:
    from agent_torch.vector import make_vector_trainer  # a device simulator: imported after the config is validated

    return make_vector_trainer


def main(argv: list[str] | None = None, factory: Callable[[], AgentFactory] | None = None) -> int:
    """Parses the arguments once (exit 2 naming the key, before any work) and trains them (``run``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return run(parse_args(argv, framework="torch", prog="python -m agent_torch.train"), factory)


def run(cfg: Config, factory: Callable[[], AgentFactory] | None = None) -> int:
    """Trains (or resumes with ``agent_load_path``) a parsed config and returns the exit status; under torchrun
    this process is one replica (``agent_torch.distributed``).

    ``factory`` (lazily returns the agent factory) replaces the agent's own ``make_agent``, e.g. with
    ``agent_interop.torch_jax.make_torch_agent_from_jax_init`` (``python -m agent_interop.train``)."""
    from agent_torch.distributed import launch_from_env

    try:
        launch = launch_from_env()
    except ValueError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    framework = Framework("torch", factory or _factory, _vector_factory)
    if launch is None:
        configure_mjx_xla(cfg)
        return cli.run(cfg, framework)
    return _main_replicated(cfg, framework)


def configure_mjx_xla(cfg: Config) -> None:
    """With ``env.env_type`` mjx or mujoco_playground (mjlab needs no JAX), before any JAX work: ``XLA_FLAGS`` for
    the JAX side that steps the environments (``simulators.mjx.xla_flags``: MJX's solver loops on the device;
    deterministic ops with ``deterministic=true``). Nothing when JAX is imported already (XLA may have read its
    flags)."""
    if getattr(simulator(cfg.env.env_type), "ARRAYS", None) == "jax" and "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = xla_flags(os.environ.get("XLA_FLAGS", ""), cfg.deterministic)


def _main_replicated(cfg: Config, framework: Framework) -> int:
    """One replica of a torchrun launch: join the process group, agree on replica 0's run directory, train; a failed
    collective (a replica died or timed out) ends this replica with one line saying so and where the intact
    checkpoints are."""
    import torch.distributed as dist

    from agent_common.runs.checkpoints import latest_checkpoint
    from agent_torch.distributed import init_replicas

    replicas = init_replicas(cfg.agent.device_type, cfg.distributed_timeout_seconds)
    shared = [os.path.abspath(cfg.save_path or ".")]
    dist.broadcast_object_list(shared, src=0)  # a derived (timestamped) save_path is replica 0's on every replica
    cfg = with_save_path(cfg, shared[0])
    try:
        code = cli.run(cfg, framework, replicas)
    except (dist.DistError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and not isinstance(exc, dist.DistError) and not _collective_failure(exc):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(
            f"error: replica {replicas.rank} of {replicas.world_size}: a collective failed ({first}): a replica "
            f"died, or waited longer than distributed_timeout_seconds={cfg.distributed_timeout_seconds}. "
            f"Checkpoints are committed atomically by replica 0; the newest complete one is "
            f"{latest_checkpoint(shared[0])}. Resume with the same torchrun command and --overrides "
            f"agent_load_path={shared[0]}",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        os._exit(1)  # no process-group teardown: it could wait on the dead peer
    dist.destroy_process_group()
    return code


def _collective_failure(exc: RuntimeError) -> bool:
    """Whether a RuntimeError comes from the process group's transport (gloo raises plain RuntimeErrors)."""
    text = str(exc).lower()
    return any(word in text for word in ("gloo", "nccl", "connection", "timed out", "timeout", "peer"))


if __name__ == "__main__":
    sys.exit(main())
