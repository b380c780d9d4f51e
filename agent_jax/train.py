"""Training entry point: ``python -m agent_jax.train --overrides key=value [--overrides ...]``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from agent_common import cli
from agent_common.cli import Framework
from agent_common.config import parse_args
from agent_common.device import DeviceTrainerFactory
from agent_common.keys import Config
from agent_common.protocol import AgentFactory, strict_backend_as_config_error
from simulators import DEVICE, simulator
from simulators.mjx import DETERMINISTIC_FLAG, xla_flags

__all__ = ["configure_cache", "configure_xla", "main", "run"]


def configure_xla(cfg: Config) -> None:
    """Sets XLA flags that must be in place before JAX initialises its backends.

    ``deterministic=true`` -> ``--xla_gpu_deterministic_ops=true`` (CPU runs are deterministic anyway);
    ``num_threads=N`` -> XLA:CPU intra-op parallelism N (1 also turns off Eigen's thread pool).
    ``agent.device_type=cpu`` -> ``JAX_PLATFORMS=cpu``.
    a device simulator (MJX, Playground) -> MJX's solver loops on the device (``simulators.mjx.xla_flags``).
    """
    flags = [os.environ.get("XLA_FLAGS", "")]
    if cfg.num_threads is not None:
        flags.append(f"--xla_cpu_multi_thread_eigen={'false' if cfg.num_threads == 1 else 'true'}")
        flags.append(f"intra_op_parallelism_threads={cfg.num_threads}")
    flags_text = " ".join(f for f in flags if f)
    if simulator(cfg.env.env_type).STEPPER == DEVICE:
        flags_text = xla_flags(flags_text, cfg.deterministic)
    elif cfg.deterministic:
        flags_text = f"{flags_text} {DETERMINISTIC_FLAG}".strip()
    os.environ["XLA_FLAGS"] = flags_text
    if cfg.agent.device_type == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"


def configure_cache(cfg: Config) -> str:
    """Sets up the persistent compilation cache (``agent.compilation_cache_dir``, on by default;
    ``agent_jax.compilation_cache``) before the first compilation; returns the line saying where."""
    from agent_jax.compilation_cache import enable_persistent_cache

    return enable_persistent_cache(cfg.agent.compilation_cache_dir, cfg.agent.compilation_cache_max_mb)


def _factory() -> AgentFactory:
    from agent_jax.agent import make_agent  # imported after the config is validated and XLA is configured
    from jax_impl import BackendUnavailable

    return strict_backend_as_config_error(make_agent, BackendUnavailable)


def _vector_factory() -> DeviceTrainerFactory:
    from agent_jax.vector import make_vector_trainer  # a device simulator: imported after the config is validated

    return make_vector_trainer


def main(argv: list[str] | None = None, factory: Callable[[], AgentFactory] | None = None) -> int:
    """Parses the arguments once (exit 2 naming the key, before any JAX work) and trains them (``run``)."""
    argv = sys.argv[1:] if argv is None else argv
    return run(parse_args(argv, framework="jax", prog="python -m agent_jax.train"), factory)


def run(cfg: Config, factory: Callable[[], AgentFactory] | None = None) -> int:
    """Trains (or resumes with ``agent_load_path``) a parsed config and returns the exit status: XLA flags, the
    distributed runtime and the compilation cache first, then the run, then the cache line of its summary.

    ``factory`` (lazily returns the agent factory) replaces the agent's own ``make_agent``, e.g. with
    ``agent_interop.torch_jax.make_agent_from_torch_init`` (``python -m agent_interop.train``)."""
    if "jax" not in sys.modules:
        configure_xla(cfg)
    from agent_jax.parallel import initialize_distributed

    initialize_distributed()  # several hosts (JAX_COORDINATOR_ADDRESS): before any other JAX work
    print(configure_cache(cfg), file=sys.stderr, flush=True)
    from agent_jax.compilation_cache import CacheCounter

    code = cli.run(cfg, Framework("jax", factory or _factory, _vector_factory))
    print(CacheCounter.start().summary(), flush=True)  # the run summary's cache line: loaded vs compiled programs
    return code


if __name__ == "__main__":
    sys.exit(main())
