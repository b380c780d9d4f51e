"""Training entry point: ``python -m agent_torch.train --overrides key=value [--overrides ...]``.

Under ``torchrun --nproc_per_node=N -m agent_torch.train ...`` each process is one data-parallel replica
(``agent_torch.distributed``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from agent_common.config import parse_args
from agent_common.keys import Config
from agent_common.loop import AgentFactory, run_cli, strict_backend_as_config_error
from agent_common.vector_loop import VectorFactory
from simulators import simulator
from simulators.mjx import xla_flags

__all__ = ["configure_mjx_xla", "main"]


def _factory() -> AgentFactory:
    from agent_torch.agent import make_agent  # imported after the config is validated
    from torch_impl import BackendUnavailable

    return strict_backend_as_config_error(make_agent, BackendUnavailable)


def _vector_factory() -> VectorFactory:
    from agent_torch.vector import make_vector_trainer  # env.env_type=mjx: imported after the config is validated

    return make_vector_trainer


def main(argv: list[str] | None = None, factory: Callable[[], AgentFactory] | None = None) -> int:
    """Parses ``--overrides``, trains (or resumes with ``agent_load_path``) and returns the exit code.

    ``factory`` (lazily returns the agent factory) replaces the agent's own ``make_agent``, e.g. with
    ``agent_interop.torch_jax.make_torch_agent_from_jax_init`` (``python -m agent_interop.train``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    from agent_torch.distributed import launch_from_env

    try:
        launch = launch_from_env()
    except ValueError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    if launch is None:
        # validate first (exit 2 naming the key, before any work), then the XLA flags, then the shared CLI
        configure_mjx_xla(parse_args(argv, framework="torch", prog="python -m agent_torch.train"))
        return run_cli(argv, "torch", factory or _factory, make_vector_module=_vector_factory)
    return _main_replicated(argv, factory or _factory)


def configure_mjx_xla(cfg: Config) -> None:
    """With ``env.env_type`` mjx or mujoco_playground (mjlab needs no JAX), before any JAX work: ``XLA_FLAGS`` for
    the JAX side that steps the environments (``simulators.mjx.xla_flags``: MJX's solver loops on the device;
    deterministic ops with ``deterministic=true``). Nothing when JAX is imported already (XLA may have read its
    flags)."""
    if getattr(simulator(cfg.env.env_type), "ARRAYS", None) == "jax" and "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = xla_flags(os.environ.get("XLA_FLAGS", ""), cfg.deterministic)


def _main_replicated(argv: list[str], factory: Callable[[], AgentFactory]) -> int:
    """One replica of a torchrun launch: validate the config (exit 2 before any work), join the process group,
    agree on replica 0's run directory, train; a failed collective (a replica died or timed out) ends this replica
    with one line saying so and where the intact checkpoints are."""
    import torch.distributed as dist

    from agent_common.runs.checkpoints import latest_checkpoint
    from agent_torch.distributed import init_replicas

    cfg = parse_args(argv, framework="torch", prog="torchrun ... -m agent_torch.train")
    replicas = init_replicas(cfg.agent.device_type, cfg.distributed_timeout_seconds)
    shared = [os.path.abspath(cfg.save_path or ".")]
    dist.broadcast_object_list(shared, src=0)  # a derived (timestamped) save_path is replica 0's on every replica
    argv = [*argv, "--overrides", f"save_path={shared[0]}"]
    try:
        code = run_cli(argv, "torch", factory, replicas, make_vector_module=_vector_factory)
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
