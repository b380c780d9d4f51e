"""Thin JAX FlashSAC agent implementing the agent_common interface: act, update, info, save, load. No maths here."""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agent_common.buffer import RowStorage, flat_batch
from agent_common.keys import Config, target_entropy
from agent_common.protocol import Capabilities
from agent_common.runs.files import atomic_pickle, read_checkpoint_file
from agent_common.seeding import BUFFER_STREAM
from agent_jax import parallel
from agent_jax.amp import resolve_amp_dtype
from agent_jax.compilation_cache import compute_path
from agent_jax.packing import PackedTree, Parts, from_parts, host_unpack, packed, parts, unpacked
from agent_jax.state import AgentState, build_networks, create_agent_state, host_fold_in, host_prng_key
from agent_jax.step import (
    METRIC_NAMES,
    DeviceRowStorage,
    create_device_replay,
    env_step,
    metric_sums,
    policy_actions,
    policy_on_leaves,
    row_width,
)
from agent_jax.update import Batch, UpdateContext, metric_names, update_networks_flat
from jax_impl import dispatch_stats, resolve_backend

if TYPE_CHECKING:  # gymnasium is not needed to build and update the agent
    import gymnasium as gym

__all__ = ["FlashSACAgent", "host_copies", "make_agent", "policy_actions", "resolve_device"]

log = logging.getLogger("flashsac.agent_jax")

NETWORK_FILES = ("actor", "critic", "target_critic", "temperature")  # <name>.pkl, as agent_torch's <name>.pt
AGENT_STATE_FILE = "agent_state.pkl"
STATE_PACKING: str | None = "matrices"
"""How ``step`` hands the state to ``env_step``: an ``agent_jax.packing`` mode, or None for the AgentState's own
leaves. Packing cuts the host time of the per-env-step dispatch (docs/flashsac.md, "JAX training loop")."""
ACTION_ON_HOST = True
"""Whether the programs that act (``env_step``, and ``policy_on_leaves`` for ``act`` / ``act_async``) write the
action to pinned host memory inside the program instead of leaving it on the device for a transfer after it: on a
GPU a read of a device result after the program cost about 0.5 ms (H200), of pinned host memory about 30 us."""


def resolve_device(device_type: str) -> jax.Device:
    """``auto`` -> the default JAX device (GPU if present); ``cpu`` -> the host; ``cuda`` without a GPU raises."""
    if device_type == "auto":
        return jax.devices()[0]
    if device_type == "cuda":
        try:
            return jax.devices("gpu")[0]
        except RuntimeError:
            raise RuntimeError("agent.device_type=cuda but JAX sees no GPU (use agent.device_type=auto)") from None
    return jax.devices("cpu")[0]


def _act_on_leaves(actor_def: Any, arrays: tuple[jax.Array, ...], recipe: Parts, observation: np.ndarray,
                   noise: np.ndarray | None, host_output: bool) -> jax.Array:
    """Dispatches the policy on the actor's arrays (``FlashSACAgent.actor_leaves``): (E, O) observations and (E, A)
    noise or None -> the (E, A) action (in pinned host memory with ``host_output``), one array to the device and one
    jitted call."""
    obs = np.asarray(observation, dtype=np.float32)  # (E, O)
    inputs = obs if noise is None else np.concatenate([obs, np.asarray(noise, dtype=np.float32)], axis=1)
    action = policy_on_leaves(arrays, inputs, actor_def=actor_def, recipe=recipe, deterministic=noise is None,
                              host_output=host_output)  # (E, A)
    if not host_output:
        action.copy_to_host_async()  # started now: the read finds it on its way
    return action


def host_copies(leaves: Sequence[jax.Array]) -> tuple[jax.Array, ...]:
    """Copies of ``leaves`` on the host CPU device that own their memory, whatever the leaves' layout (one device,
    replicated or sharded over several devices, a GPU): no later donation, deletion or in-place write of a leaf
    reaches them, so another thread may read them while training goes on.

    The values are read back through NumPy (one batched read-back, then a host copy of each: on the CPU
    ``device_get`` returns views of the device buffers) and placed on the CPU device, where the arrays hold those
    private host copies. ``jax.device_put(leaf, cpu, may_alias=False)`` is no such copy: for a leaf replicated over
    host devices it returns the leaf's shard on that device, buffer and all, and an update that donates the leaf
    deletes it (``tests/test_agent_jax_train.py`` checks each layout by buffer address and by deleting the source).

    Args:
        leaves: arrays of any placement (fully addressable from this process, as the agent's state is).

    Returns:
        One (shape, dtype)-equal array per leaf on ``jax.devices("cpu")[0]``.
    """
    host = jax.devices("cpu")[0]
    values = jax.device_get(tuple(leaves))  # the read-backs of every leaf start before the first one is waited for
    return tuple(jax.device_put(np.array(value, copy=True), host) for value in values)


def _actor_variables(state: AgentState) -> tuple[Any, Any]:
    """The actor's (params, batch_stats): what acting reads of the state."""
    return state.actor.params, state.actor.batch_stats


def _to_numpy(tree: Any) -> Any:
    """Device pytree -> nested dict of numpy arrays (flax state-dict form; picklable without jax)."""
    return jax.tree_util.tree_map(np.asarray, jax.device_get(flax.serialization.to_state_dict(tree)))


class FlashSACAgent:
    """JAX FlashSAC (paper-era heads) implementing the loop's agent protocol (``agent_common.protocol``).

    ``update`` returns the metrics of the *previous* update: they are read back after the current update has been
    dispatched, so the host never waits for the device inside ``update`` (JAX dispatch is asynchronous). The first
    call returns {}; the pending metrics are part of the checkpoint, so a resumed run logs exactly what an
    uninterrupted one does. A non-finite loss raises FloatingPointError one update later.

    Args:
        cfg: resolved config (``load_config(..., framework="jax")``).
        observation_space: Box (O,).
        action_space: Box (A,), [-1, 1] after RescaleAction.

    With ``agent.use_amp=true`` the update runs the actor and critic in bf16 or fp16 (``agent.amp_dtype``;
    ``agent_jax.amp``); acting and evaluation stay fp32.

    Raises:
        jax_impl.BackendUnavailable: strict backend selection that cannot be met (at construction).
    """

    # what the loop may call (agent_common.protocol)
    capabilities = Capabilities(device_replay=True, policy_snapshot=True, precompile_step=True, act_async=True)

    def __init__(self, cfg: Config, observation_space: gym.spaces.Box, action_space: gym.spaces.Box) -> None:
        a = cfg.agent
        assert a.critic_min_v is not None and a.critic_max_v is not None
        self.cfg = cfg
        self.device = resolve_device(a.device_type)
        # The update's compute dtype (None: fp32); fp16 adds a loss scale to the state (agent_jax.amp).
        self.amp_dtype, self.amp_reason = resolve_amp_dtype(a.use_amp, a.amp_dtype, self.device.platform)
        # Decide the TD-target backend once, outside jit (strict mode raises here, at construction).
        self.backend_decision = resolve_backend(a.categorical_target_backend, strict=a.categorical_target_strict,
                                                num_bins=a.critic_num_bins, platform=self.device.platform,
                                                rows=a.sample_batch_size)  # auto: the measured order of its band
        backend = self.backend_decision.backend
        observation_dim = int(observation_space.shape[0])
        action_dim = int(action_space.shape[0])
        self.ctx = UpdateContext.create(
            discount=float(a.gamma) ** int(a.n_step),  # type: ignore[operator]
            target_entropy=target_entropy(a, action_space.low, action_space.high),
            bc_alpha=a.actor_bc_alpha,
            tau=a.critic_target_update_tau,
            min_v=float(a.critic_min_v),
            max_v=float(a.critic_max_v),
            backend=backend,
        )
        bounds = (action_space.low, action_space.high)
        self._actor_def, _, _ = build_networks(a, observation_dim, action_dim, *bounds)  # fp32: acting
        with jax.default_device(self.device):
            state = create_agent_state(a, observation_dim, action_dim, int(cfg.seed), *bounds,
                                       compute_dtype=self.amp_dtype)
        # Commit everything to the device: uncommitted and committed inputs are different jit cache entries, so an
        # uncommitted initial state would compile each update variant twice.
        self.mesh = parallel.make_mesh(int(cfg.num_devices), self.device)  # None: one device
        self._state: AgentState | None = None
        self._packed: PackedTree | None = None  # the state as ``env_step`` takes it (``STATE_PACKING``)
        self.state = self._place(state)
        self.ctx = self._place(self.ctx)
        self.observation_dim = observation_dim
        self.action_dim = action_dim
        self.update_step = 0
        self._pending: tuple[tuple[str, ...], jax.Array] | None = None  # (names, stacked metrics) of the last
        # update, not yet returned
        # The device replay (``replay_storage``), created when the loop asks for it; until then its sampler key.
        self._storage: DeviceRowStorage | None = None
        self._replay_key = host_fold_in(host_prng_key(int(cfg.seed)), BUFFER_STREAM)  # no device program
        self._metric_carry = (np.zeros(len(METRIC_NAMES), np.float32), np.zeros(len(METRIC_NAMES), np.float32))
        # ``act``'s (source state, its arrays holding the actor, their recipe), gathered again when the packed or
        # unpacked state is another object (every update, load or outside replacement of ``state``)
        self._actor_leaves: tuple[Any, tuple[jax.Array, ...], Parts] | None = None
        # ``env_step`` programs being compiled in the background (``precompile_step``): static key -> done event
        self._precompiling: dict[tuple[Any, ...], threading.Event] = {}
        log.info("categorical_td_target backend: %s", self.info()["backend/selected"])
        if a.use_amp:
            log.info("mixed precision: %s", self.amp_reason)

    @property
    def state(self) -> AgentState:
        """The training state. After ``step`` it is held packed (``agent_jax.packing``) and unpacked here on first
        read (one jitted call; reading it again costs nothing until the next ``step``)."""
        if self._state is None:
            assert self._packed is not None
            self._state = unpacked(self._packed)
        return self._state

    @state.setter
    def state(self, value: AgentState) -> None:
        self._state, self._packed = value, None

    def _step_state(self) -> Any:
        """The state in the form ``env_step`` takes it: packed with ``STATE_PACKING`` (packed once, then kept so
        from step to step), or the AgentState itself when that is None."""
        if STATE_PACKING is None:
            return self.state
        if self._packed is None or self._packed.layout.mode != STATE_PACKING:
            self._packed = packed(self.state, mode=STATE_PACKING)
        return self._packed

    def _replace_state(self, new_state: Any) -> None:
        """The state a program returned, packed (then unpacked only when read) or not."""
        if isinstance(new_state, PackedTree):
            self._state, self._packed = None, new_state
        else:
            self.state = new_state

    def _place(self, tree: Any) -> Any:
        """Committed to the agent's device, or replicated over the ``num_devices`` mesh (``agent_jax.parallel``)."""
        return jax.device_put(tree, self.device) if self.mesh is None else parallel.replicate(tree, self.mesh)

    # ------------------------------------------------------------------------------------------------ acting
    def act(self, observation: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
        """Actions tanh(mean + std * noise), or tanh(mean) when ``noise`` is None (BN on running stats, fp32).

        Args:
            observation: (E, O) float32.
            noise: (E, A) float32 from ``ZetaNoise.sample()`` or None (deterministic evaluation).

        Returns:
            (E, A) float32 numpy actions in [-1, 1]. Consumes no JAX RNG.
        """
        # numpy in, as for the update: jit copies it to the parameters' device. The host work per call is kept
        # small: the actor's arrays are gathered once per new state (a few, from the packed state), one input array.
        arrays, recipe = self.actor_leaves()
        return np.asarray(_act_on_leaves(self._actor_def, arrays, recipe, observation, noise, self._action_on_host()),
                          dtype=np.float32)

    def act_async(self, observation: np.ndarray, noise: np.ndarray | None) -> Callable[[], np.ndarray]:
        """``act`` dispatched now and read later (``agent.act_before_update``): the jitted policy is dispatched on
        the current parameters (its action in pinned host memory, ``ACTION_ON_HOST``); an update dispatched afterwards
        does not change it (it donates the state's buffers only once this action has read them). The returned
        function waits for this action alone and returns it (call it once).
        """
        arrays, recipe = self.actor_leaves()
        action = _act_on_leaves(self._actor_def, arrays, recipe, observation, noise, self._action_on_host())
        return lambda: np.asarray(action, dtype=np.float32)

    def policy_snapshot(self) -> Callable[[np.ndarray], np.ndarray]:
        """The deterministic policy as it is now, on the host: an ``observation -> (E, A) actions`` function bound to
        copies of the actor's current params and BN statistics on the host CPU device.

        The evaluation steps its envs on the host, so its actions are computed there too: a call is the jitted
        policy of ``act`` (``policy_on_leaves``) run by XLA on the CPU, with no device round trip per action (on a
        GPU ``act`` pays a host-to-device copy, a launch and a device-to-host read per env step). Where the agent
        itself runs on the CPU, its actions are bitwise those of ``act(observation, None)`` at the time of the
        snapshot; on a GPU they are the fp32 CPU rounding of the same policy. The training loop evaluates with a
        fresh snapshot at each evaluation, and ``agent_common.policy.Policy`` acts with one, so a replayed
        evaluation gives the run's returns on any machine.

        Later updates do not change it (they donate the state's buffers, so the copy is what keeps these values), and
        it reads no agent state, so another thread may call it while training goes on: the training loop runs the
        initial evaluation with it in the background. The copies own their memory on every layout (``host_copies``),
        also with the state replicated over ``num_devices`` devices.
        """
        arrays, recipe = self.actor_leaves()
        # the actor's own leaves (sliced on the host out of a packed state's buffers), copies owning their memory
        actor = from_parts(jax.device_get(tuple(arrays)), recipe, take=lambda a, start, stop: a[start:stop])
        leaves, leaf_recipe = parts(actor, lambda t: t)
        copies = host_copies(leaves)
        actor_def = self._actor_def

        def policy(observation: np.ndarray) -> np.ndarray:  # on the host CPU: its result is host memory already
            return np.asarray(_act_on_leaves(actor_def, copies, leaf_recipe, observation, None, False),
                              dtype=np.float32)

        return policy

    def _action_on_host(self) -> bool:
        """Whether ``act`` takes its action from pinned host memory (``ACTION_ON_HOST``; not under data parallel,
        where the action is computed on the mesh's devices)."""
        return ACTION_ON_HOST and self.mesh is None

    def actor_leaves(self) -> tuple[tuple[jax.Array, ...], Parts]:
        """The arrays that hold the actor's (params, batch_stats) and the recipe that rebuilds them
        (``agent_jax.packing.parts``; ``agent_jax.step.policy_on_leaves`` takes both), gathered once per new state
        (an update, a load, a replaced ``state``): from the packed state when there is one (its flat buffers and the
        actor's weight matrices: fewer arrays to dispatch than the actor's leaves, and no unpacking), else the
        actor's leaves."""
        source = self._packed if self._packed is not None else self.state
        cache = self._actor_leaves
        if cache is None or cache[0] is not source:
            cache = self._actor_leaves = (source, *parts(source, _actor_variables))
        return cache[1], cache[2]

    # ------------------------------------------------------------------------------------------------ update
    def to_batch(self, batch: dict[str, np.ndarray]) -> Batch:
        """Numpy batch -> float32 device arrays (slices of one flat copy; for tests and benchmarks)."""
        return Batch.from_flat(jax.device_put(flat_batch(batch), self.device), self.observation_dim)

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """One FlashSAC update in upstream order: [actor -> temperature] (every actor_update_period) -> critic -> EMA.

        Args:
            batch: numpy batch with ``agent_common.buffer.BATCH_KEYS``; ``reward`` already normalised.

        Returns:
            Upstream metric names -> floats, of the previous update ({} on the first call; see the class doc).

        Raises:
            FloatingPointError: a non-finite loss or metric (detected one update late).
        """
        do_actor_update = self.update_step % self.cfg.agent.actor_update_period == 0
        previous = self._pending
        # The numpy batch goes to jit as it is: jit's C++ dispatch copies it to the device, without the Python
        # path of jax.device_put (bench/results/h200-2026-11-29-update-speed).
        flat = flat_batch(batch) if self.mesh is None else parallel.shard_batch(flat_batch(batch), self.mesh)
        with parallel.data_parallel(self.mesh):  # one device: the packed state, as ``step`` (fewer arrays to dispatch)
            new_state, values = update_networks_flat(self.state if self.mesh is not None else self._step_state(),
                                                     flat, self.ctx, observation_dim=self.observation_dim,
                                                     do_actor_update=do_actor_update)
        self._replace_state(new_state)
        values.copy_to_host_async()  # queued behind the update, so the next call's read-back finds it on the host
        self._pending = (metric_names(do_actor_update), values)
        self.update_step += 1
        return self._metrics(previous, self.update_step - 1)

    def flush_metrics(self) -> dict[str, float]:
        """The metrics of the last update, if not yet returned by ``update`` (blocks until it has finished)."""
        pending, self._pending = self._pending, None
        return self._metrics(pending, self.update_step)

    def state_replaced(self) -> None:
        """Call after something outside the agent replaced ``state`` (``agent_interop.torch_jax``): the pending
        metrics belong to the replaced state and are dropped, so the next ``update`` returns {}."""
        self._pending = None

    @staticmethod
    def _metrics(pending: tuple[tuple[str, ...], jax.Array] | None, update_step: int) -> dict[str, float]:
        if pending is None:
            return {}
        names, values = pending
        metrics = dict(zip(names, np.asarray(values).tolist(), strict=True))  # one read-back
        bad = [k for k, v in metrics.items() if not math.isfinite(v)]
        if bad:
            raise FloatingPointError(f"non-finite {', '.join(bad)} at update step {update_step}: "
                                     f"{ {k: metrics[k] for k in bad} } (check observations/rewards for NaN/Inf)")
        return metrics

    def info(self) -> dict[str, float | str]:
        """``backend/fallback_count``, ``backend/selected`` (backend that runs, what was requested and why) and
        ``compile/path`` (jit and the compilation cache: ``agent_jax.compilation_cache.compute_path``; with
        ``agent.use_amp`` the update's precision and why)."""
        d = self.backend_decision
        path = compute_path(self.device, () if self.mesh is None else list(self.mesh.devices.flat))
        return {
            "backend/fallback_count": float(dispatch_stats()["fallback_count"]),
            "backend/selected": f"{self.ctx.backend} (requested {d.requested}: {d.reason})",
            "compile/path": path + (f"; {self.amp_reason}" if self.cfg.agent.use_amp else ""),
        }

    # ------------------------------------------------------------------------------------------------ fused step
    def replay_storage(self, capacity: int) -> RowStorage | None:
        """The loop's replay rows as device arrays on the agent's device (``agent.buffer_device_type`` auto or
        cuda), which turns on ``step``; None for ``cpu`` (host numpy buffer, ``act`` and ``update`` per step) and
        under data parallel (``num_devices`` > 1: the host path samples and splits the N-times batch)."""
        if self.cfg.agent.buffer_device_type == "cpu" or self.cfg.num_devices > 1:
            return None
        replay = create_device_replay(int(capacity), row_width(self.observation_dim, self.action_dim),
                                      self._replay_key, self.device)
        self._storage = DeviceRowStorage(replay, self.observation_dim)
        return self._storage

    def step(self, observation: np.ndarray, noise: np.ndarray | None, num_updates: int,
             reward_scale: float) -> np.ndarray | None:
        """One env step of device work in one jitted call (``agent_jax.step.env_step``): store the rows the replay
        buffer has just written, run ``num_updates`` updates on batches sampled on the device (rewards divided by
        ``reward_scale``), then act on ``observation`` with ``noise``. A step with neither updates nor an action (the
        warm-up) makes no device call: the rows stay staged in the storage, which writes them in bulk
        (``DeviceRowStorage``).

        Args:
            observation: (E, O) float32, the observation the next action is taken in.
            noise: (E, A) float32 exploration noise, or None when no action is wanted (warm-up).
            num_updates: updates due now (0 during the warm-up).
            reward_scale: the reward normaliser's divisor (1.0 when normalisation is off).

        Returns:
            (E, A) float32 numpy action, or None when ``noise`` is None.
        """
        storage = self._storage
        if storage is None:
            raise RuntimeError("step() needs the device replay: call replay_storage(capacity) first")
        period = self.cfg.agent.actor_update_period
        updates = tuple((self.update_step + i) % period == 0 for i in range(int(num_updates)))
        act = noise is not None
        if not updates and not act:  # warm-up: the rows stay staged; the storage writes them in bulk
            return None
        rows = storage.take_pending()  # the newest rows (older staged ones are on the device now), or None
        parts = [] if rows is None else [rows.reshape(-1)]
        num_envs = rows.shape[0] if rows is not None else np.shape(observation)[0]
        if act:
            parts += [np.asarray(observation, np.float32).reshape(-1), np.asarray(noise, np.float32).reshape(-1)]
        if updates:
            parts.append(np.asarray([reward_scale], np.float32))
        packed = np.concatenate(parts).astype(np.float32, copy=False)  # one host -> device copy
        key = self._step_key(num_envs, rows is not None, updates, act)
        if self._precompiling:
            compiling = self._precompiling.pop(key, None)
            if compiling is not None:
                compiling.wait()  # compiled in the background (``precompile_step``): wait rather than compile twice
        new_state, storage.replay, action = env_step(self._step_state(), storage.replay, packed, self.ctx,
                                                     **dict(key))
        if action is not None and not ACTION_ON_HOST:
            action.copy_to_host_async()  # queued behind the program: the read below does not start a second wait
        self._replace_state(new_state)
        self.update_step += len(updates)
        if updates:
            self._pending = None  # the unfused path's one-late metrics belong to an older state
        return None if action is None else np.asarray(action, dtype=np.float32)

    def precompile_step(self, num_envs: int) -> threading.Thread | None:
        """Starts compiling the ``env_step`` programs of the first due steps (store + update(s) + act, one per
        actor/critic-only pattern of the next two due steps) on a background thread, so that compilation overlaps
        the initial evaluation and the random-action warm-up instead of delaying the first update. ``step`` waits
        for a program that is still compiling rather than compiling it a second time. Nothing happens without the
        device replay.

        Args:
            num_envs: E, the rows stored per step (the loop's training envs).

        Returns:
            The compiling thread (None when there is nothing to compile).
        """
        storage = self._storage
        if storage is None:
            return None
        period = self.cfg.agent.actor_update_period
        per_step = max(1, int(self.cfg.updates_per_interaction_step))
        keys = []
        for first in (self.update_step, self.update_step + per_step):
            updates = tuple((first + i) % period == 0 for i in range(per_step))
            key = self._step_key(num_envs, True, updates, not self.cfg.agent.act_before_update)
            if key not in keys and key not in self._precompiling:
                keys.append(key)
        if not keys:
            return None

        def spec(tree: Any) -> Any:  # shapes, dtypes and placements: the arrays themselves may be donated meanwhile
            return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), tree)

        state, replay, ctx = spec(self._step_state()), spec(storage.replay), self.ctx
        width = row_width(self.observation_dim, self.action_dim)
        act = not self.cfg.agent.act_before_update  # with act_before_update the action is its own call
        packed = jax.ShapeDtypeStruct((num_envs * (width + act * (self.observation_dim + self.action_dim)) + 1,),
                                      jnp.float32)
        events = {key: threading.Event() for key in keys}
        self._precompiling.update(events)

        def compile_all() -> None:
            for key, event in events.items():
                try:
                    env_step.lower(state, replay, packed, ctx, **dict(key)).compile()
                except Exception as exc:  # noqa: BLE001  the call compiles it then; say why it did not work here
                    log.warning("background compilation of env_step(%s) failed: %s", dict(key), exc)
                finally:
                    event.set()

        thread = threading.Thread(target=compile_all, name="flashsac-precompile")
        thread.start()
        return thread

    def _step_key(self, num_envs: int, insert: bool, updates: tuple[bool, ...], act: bool) -> tuple[Any, ...]:
        """``env_step``'s static arguments for one call, as a hashable key (``precompile_step``)."""
        return (("actor_def", self._actor_def), ("num_envs", int(num_envs)),
                ("observation_dim", self.observation_dim), ("action_dim", self.action_dim), ("insert", insert),
                ("updates", updates), ("act", act), ("batch_size", int(self.cfg.agent.sample_batch_size)),
                ("host_action", bool(ACTION_ON_HOST and act)))

    def _zeros_metrics(self) -> jax.Array:
        return jax.device_put(np.zeros(len(METRIC_NAMES), np.float32), self.device)  # committed, as the rest

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        """The update metrics of ``step`` since the last call, as ``{name: (sum, count)}`` (one read-back).

        Raises:
            FloatingPointError: a non-finite sum (a non-finite loss in one of these updates).
        """
        sums, counts = self._metric_carry
        self._metric_carry = (np.zeros_like(sums), np.zeros_like(counts))
        if self._storage is not None:
            replay = self._storage.replay
            device_sums, device_counts = jax.device_get((replay.metric_sum, replay.metric_count))
            sums, counts = sums + device_sums, counts + device_counts
            self._storage.replay = replay.replace(metric_sum=self._zeros_metrics(), metric_count=self._zeros_metrics())
        return metric_sums(sums, counts, self.update_step)

    # ------------------------------------------------------------------------------------------------ save/load
    def _host_state(self) -> AgentState:
        """The training state as numpy arrays; a packed state is unpacked on the host (no device program)."""
        if self._state is None and self._packed is not None:
            return host_unpack(self._packed)
        return jax.device_get(self.state)

    def _network_states(self, s: AgentState | None = None) -> dict[str, dict[str, Any]]:
        s = self.state if s is None else s
        out: dict[str, dict[str, Any]] = {}
        for name, net in (("actor", s.actor), ("critic", s.critic), ("temperature", s.temperature)):
            out[name] = {"params": net.params, "batch_stats": net.batch_stats, "opt_state": net.opt_state,
                         "step": net.step}
        out["target_critic"] = {"params": s.critic.target_params, "batch_stats": s.critic.target_batch_stats}
        return out

    def save(self, directory: str) -> None:
        """Writes actor.pkl, critic.pkl, target_critic.pkl, temperature.pkl and agent_state.pkl atomically.

        Each network file holds numpy ``params``, ``batch_stats`` and (trained networks) the Adam state and its
        step count, which drives the LR schedule. agent_state.pkl holds the update counter, the PRNG key, the
        pending metrics and the fp16 loss scale (``grad_scaler_state_dict``, ``torch.amp.GradScaler``'s keys; None
        in fp32 and bf16).
        """
        os.makedirs(directory, exist_ok=True)
        host = self._host_state()
        for name, tree in self._network_states(host).items():
            atomic_pickle(os.path.join(directory, f"{name}.pkl"), _to_numpy(tree))
        pending = None
        if self._pending is not None:
            names, values = self._pending
            pending = dict(zip(names, np.asarray(values), strict=True))  # {name: f32 scalar}
        replay_key, sums, counts = self._replay_key, *self._metric_carry
        if self._storage is not None:
            r = self._storage.replay
            replay_key, device_sums, device_counts = jax.device_get((r.key, r.metric_sum, r.metric_count))
            sums, counts = sums + device_sums, counts + device_counts
        state = {"update_step": self.update_step, "rng": np.asarray(host.rng),
                 "pending_metrics": pending, "backend": self.ctx.backend,
                 "grad_scaler_state_dict": None if host.loss_scale is None else host.loss_scale.state_dict(),
                 "replay_key": np.asarray(replay_key, np.uint32),
                 "step_metrics": {"names": METRIC_NAMES, "sums": np.asarray(sums, np.float32),
                                  "counts": np.asarray(counts, np.float32)}}
        atomic_pickle(os.path.join(directory, AGENT_STATE_FILE), state)

    def load(self, directory: str, load_optimizer: bool = True) -> None:
        """Restores ``save`` output (Adam states, step counts and the fp16 loss scale only if ``load_optimizer``; an
        fp16 agent keeps its fresh loss scale when the checkpoint has none).

        Raises:
            ValueError: a checkpoint whose structure or shapes do not match the current config, naming the leaf.
        """
        live = self._network_states()
        restored: dict[str, Any] = {}
        for name, template in live.items():
            loaded = read_checkpoint_file(os.path.join(directory, f"{name}.pkl"))
            if not load_optimizer and "opt_state" in loaded:
                loaded = dict(loaded, opt_state=_to_numpy(template["opt_state"]), step=np.asarray(0, np.int32))
            _check_structure(_to_numpy(template), loaded, name)
            with jax.default_device(self.device):
                restored[name] = flax.serialization.from_state_dict(
                    template, jax.tree_util.tree_map(jnp.asarray, loaded))
        agent_state = read_checkpoint_file(os.path.join(directory, AGENT_STATE_FILE))
        s = self.state

        def net(state: Any, name: str) -> Any:
            r = restored[name]
            return state.replace(params=r["params"], batch_stats=r["batch_stats"], opt_state=r["opt_state"],
                                 step=r["step"])

        critic = net(s.critic, "critic").replace(target_params=restored["target_critic"]["params"],
                                                 target_batch_stats=restored["target_critic"]["batch_stats"])
        rng = np.asarray(agent_state["rng"], dtype=np.uint32)
        loss_scale = s.loss_scale
        scaler_state = agent_state.get("grad_scaler_state_dict")
        if loss_scale is not None and load_optimizer and scaler_state is not None:
            loss_scale = loss_scale.load_state_dict(scaler_state)
        self.state = self._place(AgentState(actor=net(s.actor, "actor"), critic=critic,
                                            temperature=net(s.temperature, "temperature"), rng=rng,
                                            loss_scale=loss_scale))
        self.update_step = int(agent_state["update_step"])
        pending = agent_state["pending_metrics"]
        self._pending = None if pending is None else (
            tuple(pending), jax.device_put(np.asarray(list(pending.values()), np.float32), self.device))
        if "replay_key" in agent_state:  # checkpoints written before the device replay have none: keep the seed's
            self._replay_key = np.asarray(agent_state["replay_key"], np.uint32)
        step_metrics = agent_state.get("step_metrics")
        zeros = np.zeros(len(METRIC_NAMES), np.float32)
        if step_metrics is not None and tuple(step_metrics["names"]) == METRIC_NAMES:
            self._metric_carry = (np.asarray(step_metrics["sums"], np.float32),
                                  np.asarray(step_metrics["counts"], np.float32))
        else:
            self._metric_carry = (zeros, zeros.copy())
        if self._storage is not None:
            r = self._storage.replay
            self._storage.replay = r.replace(key=jax.device_put(self._replay_key, self.device),
                                             metric_sum=self._zeros_metrics(), metric_count=self._zeros_metrics())


    def start_from(self, directory: str, load_optimizer: bool = True) -> None:
        """A new run from a saved agent (``agent_init_path``): its weights, BN statistics and log α, and with
        ``load_optimizer`` its Adam moments and step counts; this run keeps its own PRNG keys, and its update counter
        and LR schedules (optax ``ScaleByScheduleState``) start at 0.

        Raises:
            ValueError: as ``load``.
        """
        rng, replay_key = np.asarray(jax.device_get(self.state.rng)), self._replay_key
        self.load(directory, load_optimizer=load_optimizer)

        def fresh_schedule(node: Any) -> Any:
            if isinstance(node, optax.ScaleByScheduleState):
                return node._replace(count=jnp.zeros_like(node.count))
            return node

        def restart(state: Any) -> Any:
            opt_state = jax.tree_util.tree_map(fresh_schedule, state.opt_state,
                                               is_leaf=lambda n: isinstance(n, optax.ScaleByScheduleState))
            return state.replace(opt_state=opt_state)

        s = self.state
        self.state = self._place(AgentState(actor=restart(s.actor), critic=restart(s.critic),
                                            temperature=restart(s.temperature), rng=rng, loss_scale=s.loss_scale))
        self._replay_key = replay_key
        self.update_step = 0
        self._pending = None
        zeros = np.zeros(len(METRIC_NAMES), np.float32)
        self._metric_carry = (zeros, zeros.copy())


def _check_structure(template: Any, loaded: Any, path: str) -> None:
    """Raise ValueError naming the first entry whose keys or shape differ between the live state and a checkpoint."""
    if isinstance(template, dict):
        if not isinstance(loaded, dict) or set(template) != set(loaded):
            got = sorted(loaded) if isinstance(loaded, dict) else type(loaded).__name__
            raise ValueError(f"checkpoint entry '{path}' has keys {got}, expected {sorted(template)}")
        for key in template:
            _check_structure(template[key], loaded[key], f"{path}/{key}")
        return
    if np.shape(template) != np.shape(loaded):
        raise ValueError(f"checkpoint entry '{path}' has shape {np.shape(loaded)}, the current config expects "
                         f"{np.shape(template)}")


def make_agent(cfg: Config, observation_space: gym.spaces.Box, action_space: gym.spaces.Box) -> FlashSACAgent:
    """Agent factory for the host stepper (``agent_common.host``)."""
    return FlashSACAgent(cfg, observation_space, action_space)
