"""Data-parallel updates of the JAX agent over several devices with ``jax.sharding`` (key ``num_devices``).

A one-dimensional ``Mesh`` (axis ``"data"``) spans ``num_devices`` local devices. The agent state (parameters,
BatchNorm statistics, optimiser state, PRNG key) is replicated on every device, the update batch of
``num_devices x agent.sample_batch_size`` rows is split along the mesh, and the update runs under the mesh as a
context (``data_parallel``), where ``agent_jax.update.update_networks`` constrains its batch to that split and its
result state to replication (``constrain_batch`` / ``constrain_replicated``: no-ops without a mesh), and the
categorical TD target, row-independent, runs on each device's rows (``rows_per_device``: a Pallas kernel is a custom
call that XLA cannot split itself). XLA's SPMD
partitioner then inserts the cross-device reductions itself: gradients, losses and the BatchNorm batch statistics
are reduced over the whole batch, and the random draws of a jax.random call do not depend on how its output is
split. So a run on N devices is, up to the order of floating-point reductions, the one-device run with an N times
larger batch. (The torch agent's replicas keep BatchNorm statistics local instead; docs/flashsac.md.)

Several hosts: with ``JAX_COORDINATOR_ADDRESS`` set, ``initialize_distributed`` calls ``jax.distributed.initialize``
and the mesh takes ``num_devices`` devices of every process; each process then contributes its own rows of the
batch (``shard_batch``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from shared_spec.reference import check_shapes

__all__ = [
    "AXIS",
    "batch_sharding",
    "constrain_batch",
    "constrain_replicated",
    "data_parallel",
    "initialize_distributed",
    "make_mesh",
    "replicate",
    "replicated",
    "rows_per_device",
    "shard_batch",
]

AXIS = "data"


def initialize_distributed(environ: Mapping[str, str] | None = None) -> bool:
    """``jax.distributed.initialize()`` when launched on several hosts (``JAX_COORDINATOR_ADDRESS`` set; JAX reads
    ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` itself); returns whether it did. Must run before any JAX work."""
    env = os.environ if environ is None else environ
    if not env.get("JAX_COORDINATOR_ADDRESS"):
        return False
    jax.distributed.initialize()
    return True


def make_mesh(num_devices: int, device: jax.Device) -> Mesh | None:
    """The data-parallel mesh over the first ``num_devices`` local devices of ``device``'s platform (of every
    process), or None for ``num_devices=1``.

    Raises:
        ValueError: ``num_devices`` is not an int >= 1, or more than the platform's local devices (names both).
    """
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(f"num_devices must be an integer >= 1, got {num_devices!r}")
    if num_devices == 1:
        return None
    platform = device.platform
    local = jax.local_devices(backend=platform)
    if num_devices > len(local):
        hint = " (on the CPU: XLA_FLAGS=--xla_force_host_platform_device_count=N)" if platform == "cpu" else ""
        raise ValueError(f"num_devices={num_devices} but JAX sees {len(local)} local {platform} device(s){hint}")
    per_process: dict[int, list[jax.Device]] = {}
    for d in jax.devices(platform):
        per_process.setdefault(d.process_index, []).append(d)
    devices = [d for p in sorted(per_process) for d in sorted(per_process[p], key=lambda d: d.id)[:num_devices]]
    return Mesh(np.array(devices), (AXIS,), axis_types=(jax.sharding.AxisType.Auto,))


def replicated(mesh: Mesh) -> NamedSharding:
    """Every device holds the whole array."""
    return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Rows split along the mesh (axis 0), the rest whole."""
    return NamedSharding(mesh, PartitionSpec(AXIS))


def replicate(tree: Any, mesh: Mesh) -> Any:
    """``tree`` replicated on every device of the mesh (committed, so the update compiles once)."""
    return jax.device_put(tree, replicated(mesh))


def shard_batch(rows: np.ndarray, mesh: Mesh) -> jax.Array:
    """This process's batch rows as one array split along the mesh (several hosts: the processes' rows, stacked).

    Raises:
        ValueError: the rows do not split evenly over this process's devices.
    """
    local = mesh.local_mesh.size
    if rows.ndim < 1 or rows.shape[0] % local:
        raise ValueError(f"shard_batch: {rows.shape[0] if rows.ndim else 0} batch rows do not split evenly over "
                         f"{local} devices (num_devices)")
    if jax.process_count() == 1:
        return jax.device_put(rows, batch_sharding(mesh))
    return jax.make_array_from_process_local_data(batch_sharding(mesh), rows)


@contextlib.contextmanager
def data_parallel(mesh: Mesh | None) -> Iterator[None]:
    """Runs the enclosed jitted calls under ``mesh`` (the constraints below apply); nothing for None. The mesh is
    part of jit's cache key, so the same function traces once with and once without it."""
    if mesh is None:
        yield
        return
    with jax.set_mesh(mesh):
        yield


def _active() -> bool:
    mesh = jax.sharding.get_abstract_mesh()
    return not mesh.empty and AXIS in mesh.axis_names


def constrain_batch(tree: Any) -> Any:
    """Inside a jitted update under ``data_parallel``: every array of ``tree`` split along its rows; else ``tree``."""
    if not _active():
        return tree
    return jax.tree_util.tree_map(lambda x: jax.lax.with_sharding_constraint(x, PartitionSpec(AXIS)), tree)


def constrain_replicated(tree: Any) -> Any:
    """Inside a jitted update under ``data_parallel``: every array of ``tree`` replicated; else ``tree``."""
    if not _active():
        return tree
    return jax.tree_util.tree_map(lambda x: jax.lax.with_sharding_constraint(x, PartitionSpec()), tree)


def rows_per_device(op: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
    """The categorical TD target ``op`` (``jax_impl.categorical_td_target``'s signature) on each device's rows.

    Inside a jitted update under ``data_parallel``, ``op(next_qs (E, B), next_log_probs (E, B, K), reward (B,),
    terminated (B,), next_alpha_log_pi (B,), gamma=..., **static)`` runs under ``jax.shard_map`` with B split along
    the mesh (the op is row-independent, so the result is the same); elsewhere it is ``op`` itself. A
    ``row_offset=o`` (next_qs (E, R), next_log_probs (E, R, K)) is applied here as a slice of rows [o, o + B) before
    the split, since the mesh splits the B target rows, not the R rows.
    """
    if not _active():
        return op

    def call(next_qs: jax.Array, next_log_probs: jax.Array, reward: jax.Array, terminated: jax.Array,
             next_alpha_log_pi: jax.Array, *, gamma: Any, row_offset: int | None = None, **static: Any) -> jax.Array:
        if row_offset is not None:  # validated first: an out-of-range slice would be clipped silently
            check_shapes(next_qs.shape, next_log_probs.shape, reward.shape, terminated.shape, next_alpha_log_pi.shape,
                         row_offset=row_offset)
            rows = slice(int(row_offset), int(row_offset) + reward.shape[0])
            next_qs, next_log_probs = next_qs[:, rows], next_log_probs[:, rows]

        def local(q: jax.Array, lp: jax.Array, r: jax.Array, d: jax.Array, s: jax.Array, g: jax.Array) -> jax.Array:
            return op(q, lp, r, d, s, gamma=g, **static)

        rows, p = PartitionSpec(AXIS), PartitionSpec
        mapped = jax.shard_map(local, in_specs=(p(None, AXIS), p(None, AXIS, None), rows, rows, rows, p()),
                               out_specs=p(AXIS, None), check_vma=False)  # a Pallas call declares no vma
        return mapped(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, jax.numpy.asarray(gamma))

    return call
