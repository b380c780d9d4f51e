"""The JAX agent's env step as one jitted call: device replay rows, on-device sampling, the update(s), the next action.

Per env step the host stepper (``agent_common.host``) hands the agent the new n-step transition (through the replay
buffer's ``RowStorage``, ``DeviceRowStorage`` here), the observation to act on next, the exploration noise, the
number of updates that are due and the reward normaliser's current scale. ``env_step`` then runs, in one
dispatch and in FlashSAC's order: store the rows at the ring index, then for each due update sample B row indices
on the device from the buffer's own PRNG key, normalise their rewards and run ``update_networks``, then act on the
new observation. Only the packed host inputs (one float32 vector) go to the device and only the (E, A) action comes
back; the metrics are summed on the device and read at a logging step (``take_metrics``).

What is static (one executable per combination): whether rows are inserted, the actor/critic-only pattern of the
due updates (the host knows ``update_step % actor_update_period``), whether an action is wanted, and the sizes.

A step that would only store rows (the random-action warm-up) makes no device call: ``DeviceRowStorage`` stages the
rows on the host and writes them in chunks (``write_chunk``, one executable for the storage's chunk shape) when the
staging area fills, when a step with device work comes (before it) and before the rows are read for a checkpoint.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from agent_common.buffer import ROW_KEYS
from agent_jax.networks import scale_action
from agent_jax.packing import PackedTree, Parts, from_parts, pack_like, unpack
from agent_jax.update import Batch, UpdateContext, metric_names, update_networks

__all__ = [
    "ENV_STEP_JIT",
    "METRIC_NAMES",
    "POLICY_JIT",
    "STAGING_ROWS",
    "DeviceReplay",
    "DeviceRowStorage",
    "create_device_replay",
    "env_step",
    "insert_first",
    "insert_rows",
    "metric_sums",
    "policy_actions",
    "policy_on_leaves",
    "row_width",
    "sample_batch",
    "write_chunk",
]

Array = jax.Array

METRIC_NAMES: tuple[str, ...] = metric_names(True)
"""Order of ``DeviceReplay.metric_sum`` / ``metric_count``: every metric an update can report."""


def row_width(observation_dim: int, action_dim: int) -> int:
    """Columns of a stored row (``agent_common.buffer.ROW_KEYS``): 2O + A + 3."""
    return 2 * observation_dim + action_dim + 3


def policy_actions(actor_def: Any, params: Any, batch_stats: Any, observation: jax.Array, noise: jax.Array,
                   deterministic: bool) -> jax.Array:
    """Acting (docs/flashsac.md): BN on running stats; tanh(mean) or tanh(mean + std * noise).

    Args:
        actor_def: the FlashSACActor module.
        params: actor parameters.
        batch_stats: actor BN running statistics.
        observation: (E, O).
        noise: (E, A) held exploration noise (ignored when deterministic).
        deterministic: evaluation mode.

    Returns:
        (E, A) actions in [-1, 1] (the env's bounds with the upstream head).
    """
    mean, std = actor_def.apply({"params": params, "batch_stats": batch_stats}, observation, False,
                                method="get_mean_and_std")  # (E, A), (E, A)
    if deterministic:
        return scale_action(actor_def, jnp.tanh(mean))  # (E, A)
    return scale_action(actor_def, jnp.tanh(mean + std * noise))  # (E, A)


POLICY_JIT: dict[str, Any] = {"static_argnames": ("actor_def", "recipe", "deterministic", "host_output")}
"""``jax.jit``'s arguments of ``policy_on_leaves`` (a benchmark compiles the same function with other XLA options)."""


@functools.partial(jax.jit, **POLICY_JIT)
def policy_on_leaves(arrays: tuple[Array, ...], inputs: Array, *, actor_def: Any, recipe: Parts,
                     deterministic: bool, host_output: bool = False) -> Array:
    """Jitted ``policy_actions`` as one call with one input array, for acting from the host.

    The actor's (params, batch_stats) come as the few arrays that hold them (``agent_jax.packing.parts`` of the
    packed state: its flat buffers and the actor's weight matrices; or the leaves themselves), one tuple that jit
    dispatches faster than the nested dicts, rebuilt here by ``recipe`` (slices XLA fuses into their consumers). The
    observation and the noise come as one array, so a call copies one array to the device.

    Args:
        arrays: the arrays of ``parts`` that hold the actor's params and BN statistics.
        inputs: (E, O) observations when ``deterministic``, else (E, O + A) rows [observation | noise].
        actor_def: the FlashSACActor module (static).
        recipe: how ``arrays`` make (params, batch_stats) (``agent_jax.packing.Parts``, static).
        deterministic: tanh(mean), no noise.
        host_output: the program writes the action to pinned host memory (``jax.memory.Space.Host``), so reading
            it needs no device-to-host transfer after the program (``agent_jax.agent.ACTION_ON_HOST``).

    Returns:
        (E, A) actions.
    """
    params, batch_stats = from_parts(arrays, recipe)
    observation_dim = actor_def.observation_dim
    observation = inputs[:, :observation_dim]  # (E, O)
    noise = None if deterministic else inputs[:, observation_dim:]  # (E, A)
    action = policy_actions(actor_def, params, batch_stats, observation, noise, deterministic)  # (E, A)
    if host_output:
        action = jax.device_put(action, jax.memory.Space.Host)  # the same values, in pinned host memory
    return action


@flax.struct.dataclass
class DeviceReplay:
    """The replay rows and everything the fused step changes besides the networks (donated each step).

    Attributes:
        rows: (M, 2O + A + 3) float32, ``ROW_KEYS`` columns (raw n-step rewards).
        index: () int32 ring position of the next write.
        size: () int32 rows stored (sampling is uniform over [0, size)).
        key: (2,) uint32 PRNG key of the batch indices (split once per sampled batch; saved in checkpoints).
        metric_sum: (len(METRIC_NAMES),) float32 sums of the update metrics since the last ``take_metrics``.
        metric_count: (len(METRIC_NAMES),) float32 number of updates in each sum.
    """

    rows: Array
    index: Array
    size: Array
    key: Array
    metric_sum: Array
    metric_count: Array


@functools.partial(jax.jit, static_argnames=("capacity", "width"))
def _zero_rows(capacity: int, width: int) -> Array:
    return jnp.zeros((capacity, width), jnp.float32)  # (M, W)


def create_device_replay(capacity: int, width: int, key: np.ndarray, device: jax.Device) -> DeviceReplay:
    """An empty replay of ``capacity`` rows of ``width`` columns on ``device``, sampling from ``key`` ((2,) uint32).
    The small fields are numpy copied to the device (no device program each); the rows are zeros made there by one
    program (``_zero_rows``)."""
    with jax.default_device(device):
        rows = _zero_rows(int(capacity), int(width))
    zero = np.zeros((), np.int32)
    replay = DeviceReplay(rows=rows, index=zero, size=zero.copy(), key=np.asarray(key, np.uint32),
                          metric_sum=np.zeros(len(METRIC_NAMES), np.float32),
                          metric_count=np.zeros(len(METRIC_NAMES), np.float32))
    return jax.device_put(replay, device)


def insert_rows(replay: DeviceReplay, rows: Array) -> DeviceReplay:
    """Writes (E, W) rows at the ring positions index, index + 1, ... (mod capacity), as the host buffer does."""
    capacity = replay.rows.shape[0]
    num_rows = rows.shape[0]
    positions = (replay.index + jnp.arange(num_rows, dtype=jnp.int32)) % capacity  # (E,)
    # positions are in [0, capacity) by construction: no bounds handling in the scatter
    data = replay.rows.at[positions].set(rows, mode="promise_in_bounds")
    return replay.replace(rows=data, index=(replay.index + num_rows) % capacity,
                          size=jnp.minimum(replay.size + num_rows, capacity))


def sample_batch(replay: DeviceReplay, batch_size: int, observation_dim: int,
                 reward_scale: Array) -> tuple[DeviceReplay, Batch, Array]:
    """Uniform sample with replacement of ``batch_size`` stored rows, rewards divided by ``reward_scale``.

    The indices are ``jax.random.randint(k, (B,), 0, size)`` with ``key, k = jax.random.split(key)``.

    Returns:
        (replay with the advanced key, the batch, the (B,) int32 indices).
    """
    key, sample_key = jax.random.split(replay.key)
    indices = jax.random.randint(sample_key, (batch_size,), 0, replay.size, dtype=jnp.int32)  # (B,)
    update_width = replay.rows.shape[1] - 1  # the truncated column is not read by the update
    # indices are in [0, size) by construction: no bounds handling in the gather
    flat = replay.rows.at[indices].get(mode="promise_in_bounds")[:, :update_width]  # (B, 2O + A + 2)
    batch = Batch.from_flat(flat, observation_dim)
    batch = batch.replace(reward=batch.reward / reward_scale)  # (B,) as RewardNormalizer.normalize
    return replay.replace(key=key), batch, indices


def metric_sums(sums: Any, counts: Any, update_step: int) -> dict[str, tuple[float, int]]:
    """``{name: (sum, count)}`` of the metrics that updates reported (``METRIC_NAMES`` order in ``sums`` /
    ``counts``).

    Raises:
        FloatingPointError: a non-finite sum (a non-finite loss in one of these updates), naming the metrics.
    """
    out = {name: (float(s), int(n)) for name, s, n in zip(METRIC_NAMES, sums, counts, strict=True) if n > 0}
    bad = [k for k, (v, _) in out.items() if not math.isfinite(v)]
    if bad:
        raise FloatingPointError(f"non-finite {', '.join(bad)} before update step {update_step}: "
                                 f"{ {k: out[k][0] for k in bad} } (sums since the last logging step; check "
                                 "observations/rewards for NaN/Inf)")
    return out


def _add_metrics(replay: DeviceReplay, info: dict[str, Array]) -> DeviceReplay:
    values = jnp.stack([info.get(name, jnp.zeros((), jnp.float32)).astype(jnp.float32) for name in METRIC_NAMES])
    present = jnp.asarray([name in info for name in METRIC_NAMES], jnp.float32)
    return replay.replace(metric_sum=replay.metric_sum + values * present,
                          metric_count=replay.metric_count + present)


ENV_STEP_JIT: dict[str, Any] = {
    "static_argnames": ("actor_def", "num_envs", "observation_dim", "action_dim", "insert", "updates", "act",
                        "batch_size", "host_action"),
    "donate_argnums": (0, 1)}
"""``jax.jit``'s arguments of ``env_step`` (a benchmark compiles the same function with other XLA options)."""


@functools.partial(jax.jit, **ENV_STEP_JIT)
def env_step(state: Any, replay: DeviceReplay, packed: Array, ctx: UpdateContext, *, actor_def: Any, num_envs: int,
             observation_dim: int, action_dim: int, insert: bool, updates: tuple[bool, ...], act: bool,
             batch_size: int, host_action: bool = False) -> tuple[Any, DeviceReplay, Array | None]:
    """One env step of device work: [store rows] -> [update(s) on sampled batches] -> [next action].

    Args:
        state: AgentState, or the AgentState as a ``PackedTree`` (``agent_jax.packing``: a few flat buffers, which
            dispatch much faster than the state's leaves; the agent passes this form) (donated).
        replay: DeviceReplay (donated).
        packed: float32 vector, the present parts in this order: the new rows (E * W, if ``insert``), the next
            observation (E * O) and the noise (E * A) (if ``act``), the reward scale (1, if ``updates``).
        ctx: update constants.
        actor_def: the actor module (static).
        num_envs: E.
        observation_dim: O.
        action_dim: A.
        insert: whether ``packed`` starts with rows to store.
        updates: one flag per due update: whether it updates the actor and the temperature first.
        act: whether to return the next action.
        batch_size: B.
        host_action: the program itself writes the action to pinned host memory (``jax.memory.Space.Host``), so
            reading it needs no device-to-host transfer after the program (``agent_jax.agent.ACTION_ON_HOST``).

    Returns:
        (new AgentState in the form it came in, new DeviceReplay, (E, A) action or None).
    """
    layout = state.layout if isinstance(state, PackedTree) else None
    if layout is not None:
        state = unpack(state)
    width = row_width(observation_dim, action_dim)
    offset = 0

    def take(size: int) -> Array:
        nonlocal offset
        part = jax.lax.slice_in_dim(packed, offset, offset + size)
        offset += size
        return part

    if insert:
        replay = insert_rows(replay, take(num_envs * width).reshape(num_envs, width))
    observation = noise = None
    if act:
        observation = take(num_envs * observation_dim).reshape(num_envs, observation_dim)  # (E, O)
        noise = take(num_envs * action_dim).reshape(num_envs, action_dim)  # (E, A)
    if updates:
        reward_scale = take(1)[0]
        for do_actor_update in updates:
            replay, batch, _ = sample_batch(replay, batch_size, observation_dim, reward_scale)
            state, info = update_networks(state, batch, ctx, do_actor_update=do_actor_update)
            replay = _add_metrics(replay, info)
    action = None
    if act:
        action = policy_actions(actor_def, state.actor.params, state.actor.batch_stats, observation, noise,
                                deterministic=False)  # (E, A)
        if host_action:
            action = jax.device_put(action, jax.memory.Space.Host)  # the same values, in pinned host memory
    if layout is not None:
        state = pack_like(state, layout)
    return state, replay, action


STAGING_ROWS = 4096
"""Rows a ``DeviceRowStorage`` keeps on the host before it writes them to the device in one call (at most this many,
or the capacity if smaller; more when one write alone is larger)."""


def insert_first(replay: DeviceReplay, rows: Array, count: Array) -> DeviceReplay:
    """Writes the first ``count`` of the (C, W) ``rows`` at the ring positions index, index + 1, ... (mod capacity),
    as ``insert_rows`` with those rows would; the other C - count rows are not written (``count`` 0: nothing
    changes). Traceable: the MJX scan's masked store and ``write_chunk`` use it.

    Args:
        replay: DeviceReplay.
        rows: (C, W) float32 rows, C <= capacity (so the written positions are distinct).
        count: () int32 rows to write, 0 <= count <= C.
    """
    capacity = replay.rows.shape[0]
    offsets = jnp.arange(rows.shape[0], dtype=jnp.int32)  # (C,)
    # rows past ``count`` get the position ``capacity``, out of bounds: the scatter drops them
    positions = jnp.where(offsets < count, (replay.index + offsets) % capacity, capacity)  # (C,)
    data = replay.rows.at[positions].set(rows, mode="drop")
    return replay.replace(rows=data, index=((replay.index + count) % capacity).astype(jnp.int32),
                          size=jnp.minimum(replay.size + count, capacity).astype(jnp.int32))


@functools.partial(jax.jit, donate_argnums=(0,))
def write_chunk(replay: DeviceReplay, chunk: Array, count: Array) -> DeviceReplay:
    """``insert_first`` as one executable per chunk shape, whatever ``count`` is (``replay`` donated): the first
    ``count`` rows of a (C, W) ``chunk``, as ``count`` / E calls of ``insert_rows`` with E rows each would."""
    return insert_first(replay, chunk, count)


READ_CHUNK_ROWS = 1 << 16  # rows per device-to-host chunk of ``DeviceRowStorage.read``


@functools.partial(jax.jit, static_argnames=("num_rows",))
def _row_chunk(rows: Array, start: Array, num_rows: int) -> Array:
    return jax.lax.dynamic_slice_in_dim(rows, start, num_rows)


class DeviceRowStorage:
    """``agent_common.buffer.RowStorage`` over a ``DeviceReplay``. ``write`` stages the new rows on the host; they go
    to the device either with the agent's next ``env_step`` that does device work (the newest write, in the same
    dispatch as the update and the action; older staged rows in one ``write_chunk`` call just before), or in one
    ``write_chunk`` call when the staging area is full, at ``flush`` and before ``read``. So the random-action
    warm-up, where a step stores rows and nothing else, costs no device call per step, and the device rows end up
    exactly as per-step stores leave them.

    ``replay`` (its rows, index and size) does not include the staged rows until they are written; ``staged`` says
    how many there are.

    Args:
        replay: the device replay it manages (the agent replaces ``self.replay`` after each step).
        observation_dim: O (only to name the row layout in errors).
        staging_rows: the staging area's size in rows (``STAGING_ROWS``; clipped to the capacity).
    """

    def __init__(self, replay: DeviceReplay, observation_dim: int, staging_rows: int = STAGING_ROWS) -> None:
        if staging_rows < 1:
            raise ValueError(f"staging_rows must be >= 1, got {staging_rows}")
        self.replay = replay
        self.observation_dim = observation_dim
        self.capacity, self.width = (int(d) for d in replay.rows.shape)
        self._staging = np.empty((min(int(staging_rows), self.capacity), self.width), np.float32)  # (C, W)
        self.staged = 0  # rows in the staging area, written from ring position ``replay.index`` on
        self._newest = 0  # rows of the newest write (the last ``_newest`` staged rows)
        self.next_index = 0  # ring position of the next write, to check that writes arrive in ring order

    def write(self, index: int, rows: np.ndarray) -> None:
        """Stages (E, W) rows; they must continue the ring (``index`` = the ring position)."""
        rows = np.asarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != self.width or rows.shape[0] > self.capacity:
            raise ValueError(f"rows must be (E <= {self.capacity}, {self.width}) ({', '.join(ROW_KEYS)}), "
                             f"got {rows.shape}")
        if index != self.next_index:
            raise ValueError(f"rows written at ring index {index}, expected {self.next_index}")
        num_rows = rows.shape[0]
        if self.staged + num_rows > self._staging.shape[0]:
            self.flush()
            if num_rows > self._staging.shape[0]:  # one write larger than the area: grow it (one more executable)
                self._staging = np.empty((num_rows, self.width), np.float32)
        self._staging[self.staged:self.staged + num_rows] = rows
        self.staged += num_rows
        self._newest = num_rows
        self.next_index = (index + num_rows) % self.capacity

    def take_pending(self) -> np.ndarray | None:
        """The newest write's rows (now the caller's to store, after every older staged row is on the device),
        or None when nothing is staged."""
        if self.staged == 0:
            return None
        older = self.staged - self._newest
        rows = self._staging[older:self.staged].copy()  # (E, W)
        self.staged, self._newest = older, 0
        self.flush()
        return rows

    def flush(self) -> None:
        """Writes the staged rows to the device now (one ``write_chunk`` call; nothing when none are staged)."""
        if self.staged == 0:
            return
        # jit may use a numpy argument's memory in place (on the CPU): hand the area over and stage into a new one
        chunk, self._staging = self._staging, np.empty_like(self._staging)
        self.replay = write_chunk(self.replay, chunk, np.int32(self.staged))
        self.staged = self._newest = 0

    def read(self, size: int) -> np.ndarray:
        """The first ``size`` rows, (size, W) float32 numpy.

        Read in chunks of a fixed ``READ_CHUNK_ROWS`` rows (one compiled slice program for every size: a slice of
        ``size`` rows would compile a new program at each checkpoint, as the buffer grows).
        """
        self.flush()
        chunk = min(READ_CHUNK_ROWS, self.capacity)
        starts = [min(begin, self.capacity - chunk) for begin in range(0, size, chunk)]  # the last one ends in range
        blocks = jax.device_get([_row_chunk(self.replay.rows, np.int32(start), num_rows=chunk) for start in starts])
        out = np.empty((size, self.width), np.float32)
        for begin, start, block in zip(range(0, size, chunk), starts, blocks, strict=True):
            n = min(chunk, size - begin)
            out[begin:begin + n] = block[begin - start:begin - start + n]
        return out

    def load(self, rows: np.ndarray, index: int) -> None:
        """Replaces the rows (positions 0 .. len(rows) - 1) and the ring index; keeps the key and the metrics."""
        rows = np.asarray(rows, dtype=np.float32)
        size = rows.shape[0]
        if rows.ndim != 2 or rows.shape[1] != self.width or size > self.capacity:
            raise ValueError(f"rows must be (<= {self.capacity}, {self.width}), got {rows.shape}")
        data = np.zeros((self.capacity, self.width), np.float32)
        data[:size] = rows
        device = next(iter(self.replay.rows.devices()))
        self.staged = self._newest = 0
        self.replay = self.replay.replace(rows=jax.device_put(data, device),
                                          index=jax.device_put(np.int32(index), device),
                                          size=jax.device_put(np.int32(size), device))
        self.next_index = int(index)
