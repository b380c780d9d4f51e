"""Thin PyTorch FlashSAC agent: builds the networks, moves batches, calls the update functions, saves/loads."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Hashable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from agent_common.buffer import RowStorage, flat_batch, flat_widths
from agent_common.keys import Config, target_entropy
from agent_common.protocol import Capabilities
from agent_common.runs.files import atomic_write, read_checkpoint_file
from agent_torch import distributed
from agent_torch.amp import DeviceLossScaler, resolve_amp_dtype
from agent_torch.compiled import Precompile, compile_update
from agent_torch.graphs import GraphCache, resolve_cuda_graph
from agent_torch.networks import FlashSACActor, FlashSACDoubleCritic, FlashSACTemperature
from agent_torch.replay import TensorRowStorage
from agent_torch.state import Network, explain_compile_mode, make_network
from agent_torch.update import Batch, UpdateContext, UpdateFunctions, update_actor, update_critic, update_temperature
from shared_spec import CategoricalSupport
from torch_impl import dispatch_stats, resolve_backend

__all__ = ["FlashSACAgent", "compute_path", "make_agent", "resolve_cuda_graph", "resolve_device"]

NETWORK_FILES = ("actor", "critic", "target_critic", "temperature")

log = logging.getLogger(__name__)


def compute_path(device: torch.device, compile_mode: str, compile_reason: str, cuda_graph: bool,
                 cuda_graph_reason: str, amp_reason: str | None = None, compile_scope: str = "networks") -> str:
    """One line naming how the agent computes (compilation and its scope, CUDA graphs, precision) and why; the
    training loop prints it once and logs it as TensorBoard text ``compile/path``."""
    scope = "the networks" if compile_scope == "networks" else "the whole update and acting"
    how = "eager" if compile_mode == "off" else f"torch.compile mode={compile_mode} over {scope}"
    graphs = "CUDA graphs on" if cuda_graph else "CUDA graphs off"
    amp = "" if amp_reason is None else f"; {amp_reason}"
    return (f"torch {torch.__version__} on {device}: {how}, {graphs}. Why: {compile_reason}; {cuda_graph_reason}"
            f"{amp}")


def resolve_device(device_type: str) -> torch.device:
    """``auto`` -> cuda if available else cpu; ``cuda`` without a GPU raises."""
    if device_type == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device_type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("agent.device_type=cuda but no CUDA device is available (use agent.device_type=auto)")
    return torch.device(device_type)


def _configure_torch(cfg: Config, device: torch.device) -> None:
    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    elif device.type == "cuda":
        # upstream train.py: cudnn.benchmark, TF32 matmuls (fp32 recipe runs in TF32 on Ampere and later)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")


class FlashSACAgent:
    """PyTorch FlashSAC (actor head: ``agent.actor_head``) implementing the loop's agent protocol
    (``agent_common.protocol``).

    Args:
        cfg: resolved config.
        observation_space: Box (O,).
        action_space: Box (A,), [-1, 1] after RescaleAction.
    """

    capabilities = Capabilities(device_replay=True, policy_snapshot=True,  # what the loop may call (protocol)
                                act_async=True)

    def __init__(self, cfg: Config, observation_space: gym.spaces.Box, action_space: gym.spaces.Box) -> None:
        a = cfg.agent
        self.cfg = cfg
        self.device = distributed.local_device(resolve_device(a.device_type))  # cuda:LOCAL_RANK under torchrun
        _configure_torch(cfg, self.device)
        assert a.critic_min_v is not None and a.critic_max_v is not None
        support = CategoricalSupport(a.critic_num_bins, float(a.critic_min_v), float(a.critic_max_v))
        # Decide the TD-target backend once, outside the update (strict mode raises here, at construction).
        self.backend_decision = resolve_backend(
            a.categorical_target_backend,
            a.categorical_target_strict,
            device=self.device,
            dtype=torch.float32,
            num_bins=support.num_bins,
            num_critics=2,
            needs_grad=False,
            rows=a.sample_batch_size,  # auto: the measured order of its size band
        )
        observation_dim = int(observation_space.shape[0])
        action_dim = int(action_space.shape[0])
        compile_mode, compile_reason = explain_compile_mode(a, self.device)
        self.compile_mode = compile_mode
        self.use_cuda_graph, self.cuda_graph_reason = resolve_cuda_graph(cfg, self.device, compile_mode)
        self.amp_dtype, amp_reason = resolve_amp_dtype(a.use_amp, a.amp_dtype, self.device)
        # agent.overlap_critic_step: the update replays as two graphs, actor part then critic part, and acting runs
        # on a stream of its own that waits for the actor part only, so the critic part runs while the host reads
        # the action and steps the env (the same kernels on the same tensors: bitwise the same run)
        self.overlap = bool(a.overlap_critic_step) and self.use_cuda_graph
        if a.overlap_critic_step:
            self.cuda_graph_reason += ("; the critic step overlaps acting (agent.overlap_critic_step)" if self.overlap
                                       else "; agent.overlap_critic_step needs the CUDA graphs: off")
        self._act_stream = torch.cuda.Stream(self.device) if self.overlap else None
        self._actor_ready = torch.cuda.Event() if self.overlap else None  # recorded after each actor part
        self._act_done: torch.cuda.Event | None = None  # recorded after each action on the acting stream
        self.compute_path = compute_path(self.device, compile_mode, compile_reason, self.use_cuda_graph,
                                         self.cuda_graph_reason, amp_reason, a.compile_scope)
        if distributed.is_distributed():
            self.compute_path += distributed.describe_replicas(self.device)
        log.info("compute path: %s", self.compute_path)
        # under data parallel the NCCL watchdog thread queries CUDA events while a graph is captured
        mode = "thread_local" if distributed.is_distributed() else "global"
        self.graphs = GraphCache(capture_error_mode=mode) if self.use_cuda_graph else None
        graph_safe = self.use_cuda_graph
        torch.manual_seed(cfg.seed)  # init order as upstream: actor, critic, target critic, temperature
        actor = FlashSACActor(observation_dim, action_dim, a.actor_num_blocks, a.actor_hidden_dim, head=a.actor_head,
                              action_low=action_space.low, action_high=action_space.high)
        critic = FlashSACDoubleCritic(
            observation_dim + action_dim, a.critic_num_blocks, a.critic_hidden_dim, support.atoms()
        )
        target = FlashSACDoubleCritic(
            observation_dim + action_dim, a.critic_num_blocks, a.critic_hidden_dim, support.atoms()
        )
        temperature = FlashSACTemperature(a.temp_initial_value)
        # compile_scope=networks: torch.compile wraps each network's forward and projection; update: the update's
        # pieces and acting are compiled whole (agent_torch.compiled), the networks stay plain modules
        whole = a.compile_scope == "update" and compile_mode != "off"
        net_mode = "off" if whole else compile_mode
        self.pieces = compile_update(compile_mode) if whole else UpdateFunctions()
        self.actor = make_network(actor, a, self.device, compile_mode=net_mode, graph_safe=graph_safe)
        self.critic = make_network(critic, a, self.device, compile_mode=net_mode, graph_safe=graph_safe)
        self.target_critic = make_network(target, a, self.device, trainable=False, compile_mode=net_mode)
        self.temperature = make_network(temperature, a, self.device, project=False, graph_safe=graph_safe)
        self.actor.normalize()
        self.critic.normalize()
        self.target_critic.module.load_state_dict(self.critic.module.state_dict())
        self.target_critic.normalize()
        self.target_critic.module.requires_grad_(False)
        self._replicate()
        # fp16 needs a loss scale (kept on the device: graph-capturable); bf16 has fp32's range and needs none
        self.scaler = DeviceLossScaler(self.device) if self.amp_dtype == torch.float16 else None
        self.ctx = UpdateContext(
            discount=float(a.gamma) ** int(a.n_step),  # type: ignore[operator]
            min_v=support.min_v,
            max_v=support.max_v,
            target_entropy=target_entropy(a, action_space.low, action_space.high),
            bc_alpha=a.actor_bc_alpha,
            tau=a.critic_target_update_tau,
            amp_dtype=self.amp_dtype,
            device_type=self.device.type,
            backend=a.categorical_target_backend,
            strict=a.categorical_target_strict,
            autocast_cache=not self.use_cuda_graph,
        )
        self.update_step = 0
        self._host_batch: torch.Tensor | None = None  # reused (pinned on CUDA) host buffer of the flat batch
        self._copy_done: torch.cuda.Event | None = None  # recorded after the last host -> device batch copy
        self._widths = flat_widths(observation_dim, action_dim)  # flat batch columns, UPDATE_KEYS order
        self._storage: TensorRowStorage | None = None  # the device replay rows (``replay_storage``)
        self._storage_state: dict[str, Any] | None = None  # its sampler state from a checkpoint, until it exists
        self._metric_sums: dict[tuple[str, ...], torch.Tensor] = {}  # ``step`` metrics per name tuple, on device
        self._metric_counts: dict[tuple[str, ...], int] = {}
        self._action_host: dict[tuple[int, ...], torch.Tensor] = {}  # pinned host buffers of ``act_async`` (CUDA)
        self._precompile: Precompile | None = None
        self._parameters_written()
        if whole:
            # the actor's projection after its step is a compiled piece too (the critic's is in finish_critic)
            self.actor.project_fn = functools.partial(self.pieces.project, self.actor.module)
            # compiled in the background (copies of the networks, RNG restored) while the envs and warm-up run
            self._precompile = Precompile(
                self.pieces, (self.actor, self.critic, self.target_critic, self.temperature), self.ctx, self._split,
                (int(a.sample_batch_size), sum(self._widths)),
                ((int(cfg.num_train_envs), observation_dim), (int(cfg.num_train_envs), action_dim)), self.device)

    def _parameters_written(self) -> None:
        """With ``agent.overlap_critic_step``: acting, on its own stream, waits for everything queued so far on this
        one (initialisation, a load): call after writing the actor's tensors outside an update."""
        if self._actor_ready is not None:
            self._actor_ready.record(torch.cuda.current_stream(self.device))

    def _await_precompile(self) -> None:
        """Waits for the background compilation of the update (``agent_torch.compiled.Precompile``), if one runs:
        before anything uses the agent's networks, random generators or a CUDA-graph capture."""
        if self._precompile is not None:
            precompile, self._precompile = self._precompile, None
            t0 = time.perf_counter()
            precompile.wait()
            print(f"torch update compiled in the background in {precompile.seconds:.1f} s (waited "
                  f"{time.perf_counter() - t0:.1f} s for it)", file=sys.stderr, flush=True)

    def _replicate(self) -> None:
        """Under torchrun: every network starts from replica 0's weights, and each trained network averages its
        gradients across replicas at every step (``agent_torch.distributed``); nothing for a single process."""
        if not distributed.is_distributed():
            return
        networks = (self.actor, self.critic, self.target_critic, self.temperature)
        distributed.broadcast_modules(net.module for net in networks)
        for net in (self.actor, self.critic, self.temperature):
            net.grad_sync = distributed.GradientAverager(net.module.parameters())

    # ------------------------------------------------------------------------------------------------ acting
    @torch.no_grad()
    def act(self, observation: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
        """Actions tanh(μ + σ·noise), or tanh(μ) when ``noise`` is None (BN on running stats, fp32, no autocast).

        Args:
            observation: (E, O) float32.
            noise: (E, A) float32 from ``ZetaNoise.sample()`` or None (deterministic evaluation).

        Returns:
            (E, A) float32 numpy actions in [-1, 1].
        """
        with self._acting():
            obs = torch.as_tensor(np.asarray(observation, dtype=np.float32), device=self.device)  # (E, O)
            eps = None if noise is None else torch.as_tensor(np.asarray(noise, dtype=np.float32), device=self.device)
            return self.act_device(obs, eps).float().cpu().numpy()

    @contextlib.contextmanager
    def _acting(self):  # noqa: ANN202  a context manager
        """With ``agent.overlap_critic_step``: the acting stream, waiting for the last actor part (not for the
        critic part after it); the next update waits for what acting queued here. Otherwise nothing."""
        stream = self._act_stream
        if stream is None:
            yield
            return
        assert self._actor_ready is not None
        with torch.cuda.stream(stream):
            stream.wait_event(self._actor_ready)
            yield
            done = torch.cuda.Event()
            done.record(stream)
            self._act_done = done

    @torch.no_grad()
    def act_async(self, observation: np.ndarray, noise: np.ndarray | None) -> Callable[[], np.ndarray]:
        """``act`` with its device work queued now and its result read later (``agent.act_before_update``).

        On CUDA the action (the CUDA-graph path where captured) is copied with ``non_blocking`` into a pinned host
        buffer and a CUDA event is recorded after the copy; the returned function waits for that event alone (not
        for the stream or the device, so an update queued after it keeps running) and returns a copy of the
        action. On the CPU the action is computed here and the function returns it.

        Returns:
            A function of no arguments returning the (E, A) float32 numpy action (``act(observation, noise)`` with
            the parameters of this call); call it once.
        """
        with self._acting():
            obs = torch.as_tensor(np.asarray(observation, dtype=np.float32), device=self.device)  # (E, O)
            eps = None if noise is None else torch.as_tensor(np.asarray(noise, dtype=np.float32), device=self.device)
            action = self.act_device(obs, eps).float()  # (E, A); with CUDA graphs the graph's static output
            if self.device.type != "cuda":
                result = action.numpy().copy()  # computed already; copied so a later call cannot change it
                return lambda: result
            host = self._action_host.get(tuple(action.shape))
            if host is None:
                host = self._action_host[tuple(action.shape)] = torch.empty(action.shape, dtype=torch.float32,
                                                                            pin_memory=True)
            host.copy_(action, non_blocking=True)  # queued behind the action; the update queued next runs after it
            event = torch.cuda.Event()
            event.record()

        def wait() -> np.ndarray:
            event.synchronize()  # this action's copy alone
            return host.numpy().copy()  # the pinned buffer is reused by the next call

        return wait

    def policy_snapshot(self) -> Callable[[np.ndarray], np.ndarray]:
        """The deterministic policy as it is now, on the host: an ``observation -> (E, A) actions`` function bound to
        an fp32 copy of the actor on the CPU, run under ``torch.inference_mode``.

        The evaluation steps its envs on the host, so its actions are computed there too, with no device round trip
        per action and none of ``act``'s per-call work (device placement, the CUDA-graph lookup, autograd state).
        Where the agent runs on the CPU in fp32, its actions are bitwise those of ``act(observation, None)`` at the
        time of the snapshot; on a GPU they are the CPU fp32 rounding of the same policy. The copy is the agent's
        own, so later updates (in place) do not change it and another thread may call it while training goes on.
        """
        actor = copy.deepcopy(self.actor.module).to("cpu", torch.float32).eval()
        actor.requires_grad_(False)

        def policy(observation: np.ndarray) -> np.ndarray:
            obs = torch.from_numpy(np.ascontiguousarray(observation, dtype=np.float32))  # (E, O)
            with torch.inference_mode():
                mean, _ = actor.get_mean_and_std(obs, training=False)  # (E, A)
                return actor.scale_action(torch.tanh(mean)).numpy()  # (E, A)

        return policy

    @torch.no_grad()
    def act_device(self, obs: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        """``act`` on device tensors: (E, O) float32 observations and (E, A) noise or None -> (E, A) float32
        actions on the device, without a host copy. With CUDA graphs the result is the graph's static output:
        read or copy it before the next call."""
        self._await_precompile()
        inputs = (obs,) if noise is None else (obs, noise)
        if self.graphs is not None:
            return self.graphs(("act", obs.shape, noise is None), self._act, *inputs)
        return self._act(*inputs)

    def run_captured(self, key: Hashable, fn: Callable[..., Any], *inputs: torch.Tensor) -> Any:
        """``fn(*inputs)`` as a replay of its CUDA graph (captured under ``key`` on first use, ``GraphCache``'s rules)
        when the agent captures graphs, else eagerly; for device work around ``act_tensor`` (MJX evaluation)."""
        self._await_precompile()
        return fn(*inputs) if self.graphs is None else self.graphs(key, fn, *inputs)

    @torch.no_grad()
    def act_tensor(self, obs: torch.Tensor, eps: torch.Tensor | None = None) -> torch.Tensor:
        """``act_device``'s computation, never captured by itself (for functions given to ``run_captured``)."""
        return self._act(obs, eps)

    def _act(self, obs: torch.Tensor, eps: torch.Tensor | None = None) -> torch.Tensor:
        """tanh(μ) or tanh(μ + σ·eps) for (E, O) observations, as (E, A) (scaled to the env's bounds with
        ``agent.actor_head=upstream``)."""
        return self.pieces.act(self.actor.module, obs, eps)

    # ------------------------------------------------------------------------------------------------ update
    def _flat_batch(self, batch: dict[str, np.ndarray]) -> torch.Tensor:
        """Numpy batch -> one (B, 2O + A + 2) float32 device tensor (through a reused pinned host buffer on CUDA)."""
        shape = (len(batch["reward"]), sum(self._widths))
        if self._host_batch is None or tuple(self._host_batch.shape) != shape:
            self._host_batch = torch.empty(shape, dtype=torch.float32, pin_memory=self.device.type == "cuda")
        if self._copy_done is not None:
            self._copy_done.synchronize()  # the previous asynchronous copy has read the buffer
        flat_batch(batch, out=self._host_batch.numpy())
        if self.device.type != "cuda":
            return self._host_batch.clone()
        flat = self._host_batch.to(self.device, non_blocking=True)
        self._copy_done = torch.cuda.Event()
        self._copy_done.record()
        return flat

    def _split(self, flat: torch.Tensor) -> Batch:
        """Views of a flat (B, 2O + A + 2) device batch, columns in ``UPDATE_KEYS`` order, and the joint (2B, O)
        observations [s; s'] that the actor, target and critic steps share (one concatenation per update)."""
        parts = torch.split(flat, self._widths, dim=1)
        return Batch(
            observation=parts[0],  # (B, O)
            action=parts[1],  # (B, A)
            reward=parts[2].reshape(-1),  # (B,)
            terminated=parts[3].reshape(-1),  # (B,)
            next_observation=parts[4],  # (B, O)
            observation_all=torch.cat([parts[0], parts[4]], dim=0),  # (2B, O)
        )

    def to_batch(self, batch: dict[str, np.ndarray]) -> Batch:
        """Numpy batch -> float32 tensors on the device (views of one flat copy; for tests and benchmarks)."""
        return self._split(self._flat_batch(batch))

    def _update_step(self, flat: torch.Tensor, do_actor: bool,
                     critic: bool = True) -> tuple[tuple[str, ...], torch.Tensor]:
        """The update on a flat device batch, without LR-scheduler steps: the actor and temperature steps if
        ``do_actor``, the critic step, its projection and the target EMA if ``critic``; returns metric names and
        their values stacked in one fp32 tensor (the function a CUDA graph captures)."""
        b = self._split(flat)
        p = self.pieces
        info: dict[str, torch.Tensor] = {}
        if do_actor:
            info.update(update_actor(self.actor, self.critic, self.temperature, b, self.ctx, self.scaler,
                                     p.actor_loss))
            info.update(update_temperature(self.temperature, info["actor/entropy"], self.ctx, p.temperature_loss))
        if critic:
            info.update(update_critic(self.actor, self.critic, self.target_critic, self.temperature, b, self.ctx,
                                      self.scaler, p.critic_loss, project=False))
            p.finish_critic(self.critic, self.target_critic, self.ctx.tau)  # projection, then the target EMA
        return tuple(info), torch.stack([v.float().reshape(()) for v in info.values()])

    def _replay_split(self, flat: torch.Tensor, do_actor: bool) -> tuple[tuple[str, ...], torch.Tensor]:
        """``agent.overlap_critic_step``: the actor part's graph (if ``do_actor``), an event for acting, then the
        critic part's graph; the metrics as ``_update_step`` returns them."""
        assert self.graphs is not None and self._actor_ready is not None
        parts = []
        if do_actor:
            step = functools.partial(self._update_step, do_actor=True, critic=False)
            parts.append(self.graphs(("update", True, False, self.ctx), step, flat))
            self._actor_ready.record(torch.cuda.current_stream(self.device))  # acting waits for this, not the critic
        step = functools.partial(self._update_step, do_actor=False, critic=True)
        parts.append(self.graphs(("update", False, True, self.ctx), step, flat))
        keys = tuple(k for names, _ in parts for k in names)
        return keys, parts[0][1] if len(parts) == 1 else torch.cat([values for _, values in parts])

    def _apply_update(self, flat: torch.Tensor) -> tuple[tuple[str, ...], torch.Tensor]:
        """One update on a flat device batch (graph replay or eager), then the LR-scheduler steps; returns the
        metric names and their stacked values (a graph's static output: read it before the next update)."""
        self._await_precompile()
        do_actor = self.update_step % self.cfg.agent.actor_update_period == 0
        if self._act_done is not None:  # the actor step must not rewrite parameters an action still reads
            torch.cuda.current_stream(self.device).wait_event(self._act_done)
        if self.overlap:
            keys, values = self._replay_split(flat, do_actor)
        elif self.graphs is not None:
            step = functools.partial(self._update_step, do_actor=do_actor)
            keys, values = self.graphs(("update", do_actor, self.ctx), step, flat)
        else:
            keys, values = self._update_step(flat, do_actor)
        stepped = (self.actor, self.temperature, self.critic) if do_actor else (self.critic,)
        for net in stepped:
            assert net.scheduler is not None
            net.scheduler.step()
        self.update_step += 1
        return keys, values

    # ------------------------------------------------------------------------------------------------ device buffer
    def replay_storage(self, capacity: int) -> RowStorage | None:
        """With ``agent.buffer_device_type=cuda``: the loop's replay rows as tensors on the agent's device
        (``agent_torch.replay``), which turns on ``step``; otherwise None (host numpy buffer, ``update``)."""
        if self.cfg.agent.buffer_device_type != "cuda":
            return None
        width = sum(self._widths) + 1  # ROW_KEYS: the update's columns and truncated
        self._storage = TensorRowStorage(capacity, width, self._widths[0], self.device, int(self.cfg.seed))
        if self._storage_state is not None:
            self._storage.load_state_dict(self._storage_state)
        return self._storage

    def step(self, observation: np.ndarray, noise: np.ndarray | None, num_updates: int,
             reward_scale: float) -> np.ndarray | None:
        """An env step's device work: ``num_updates`` updates on batches sampled on the device (rewards divided by
        ``reward_scale``), then the action for ``observation`` (None when ``noise`` is None: warm-up). The new rows
        were already stored by the replay buffer. The metrics are summed on the device (``take_metrics``)."""
        storage = self._storage
        if storage is None:
            raise RuntimeError("step() needs the device replay: call replay_storage(capacity) first")
        batch_size = int(self.cfg.agent.sample_batch_size)
        self.device_updates(int(num_updates), lambda: storage.sample(batch_size, reward_scale))
        return None if noise is None else self.act(observation, noise)

    def device_updates(self, num_updates: int, sample: Callable[[], torch.Tensor]) -> None:
        """``num_updates`` updates, each on the flat (B, 2O + A + 2) device batch ``sample()`` returns (a graph
        replay on CUDA), with the metrics summed on the device (``take_metrics``): nothing is read back."""
        for _ in range(num_updates):
            keys, values = self._apply_update(sample())
            total = self._metric_sums.get(keys)
            self._metric_sums[keys] = values.detach().clone() if total is None else total.add_(values)
            self._metric_counts[keys] = self._metric_counts.get(keys, 0) + 1

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        """The update metrics of ``step`` since the last call, ``{name: (sum, count)}`` (one host sync).

        Raises:
            FloatingPointError: a non-finite sum (a non-finite loss in one of these updates).
        """
        out: dict[str, tuple[float, int]] = {}
        for keys, total in self._metric_sums.items():
            count = self._metric_counts[keys]
            for name, value in zip(keys, total.tolist(), strict=True):
                previous = out.get(name, (0.0, 0))
                out[name] = (previous[0] + value, previous[1] + count)
        self._metric_sums.clear()
        self._metric_counts.clear()
        bad = [k for k, (v, _) in out.items() if not math.isfinite(v)]
        if bad:
            raise FloatingPointError(
                f"non-finite {', '.join(bad)} before update step {self.update_step}: "
                f"{ {k: out[k][0] for k in bad} } (sums since the last logging step; check observations/rewards)"
            )
        return out

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """One FlashSAC update in upstream order: [actor → temperature] (every actor_update_period) → critic → EMA.

        With ``agent.use_cuda_graph`` on CUDA the step replays a captured graph (one per actor/critic-only variant
        and target backend); the LR schedulers step afterwards, on the host, in both modes.

        Args:
            batch: numpy batch with ``agent_common.buffer.BATCH_KEYS``; ``reward`` already normalised.

        Returns:
            Upstream metric names -> floats.

        Raises:
            FloatingPointError: a non-finite loss or metric (the update is not silently continued).
        """
        keys, values = self._apply_update(self._flat_batch(batch))
        metrics = dict(zip(keys, values.tolist(), strict=True))  # one host sync
        bad = [k for k, v in metrics.items() if not math.isfinite(v)]
        if bad:
            raise FloatingPointError(
                f"non-finite {', '.join(bad)} at update step {self.update_step}: "
                f"{ {k: metrics[k] for k in bad} } (check observations/rewards for NaN/Inf)"
            )
        return metrics

    def state_replaced(self) -> None:
        """Call after anything replaced optimizer state or learning rates (``load``, ``agent_interop.torch_jax``): the
        learning rates go back into device tensors and the CUDA graphs are captured again from the new state."""
        self._await_precompile()
        self._parameters_written()
        for net in (self.actor, self.critic, self.temperature):
            net.ensure_lr_tensors()
        if self.graphs is not None:
            self.graphs.clear()

    def info(self) -> dict[str, float | str]:
        """``backend/fallback_count``, ``backend/selected`` (backend that runs, what was requested and why) and
        ``compile/path`` (compilation and CUDA graphs, and why: ``compute_path``)."""
        d = self.backend_decision
        return {
            "backend/fallback_count": float(dispatch_stats()["fallback_count"]),
            "backend/selected": f"{d.backend} (requested {d.requested}: {d.reason})",
            "compile/path": self.compute_path,
        }

    # ------------------------------------------------------------------------------------------------ save/load
    def _networks(self) -> dict[str, Network]:
        return {
            "actor": self.actor,
            "critic": self.critic,
            "target_critic": self.target_critic,
            "temperature": self.temperature,
        }

    def save(self, directory: str) -> None:
        """Writes actor.pt, critic.pt, target_critic.pt, temperature.pt and agent_state.pt atomically."""
        self._await_precompile()  # the random generators' states are the run's again
        os.makedirs(directory, exist_ok=True)
        for name, net in self._networks().items():
            _save_torch(os.path.join(directory, f"{name}.pt"), net.state_dict())
        state: dict[str, Any] = {
            "update_step": self.update_step,
            "grad_scaler_state_dict": self.scaler.state_dict() if self.scaler is not None else None,
            "torch_rng_state": torch.get_rng_state(),
            "cuda_rng_state": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "replay_sampler": self._storage.state_dict() if self._storage is not None else self._storage_state,
            "step_metrics": self.take_metrics() if self._metric_sums else {},
        }
        for name, (total, count) in state["step_metrics"].items():  # taken for the file; kept for the run
            self._carry_metric(name, total, count)
        _save_torch(os.path.join(directory, "agent_state.pt"), state)

    def load(self, directory: str, load_optimizer: bool = True) -> None:
        """Restores ``save`` output (optimizers, schedulers and scaler only if ``load_optimizer``).

        Raises:
            agent_common.runs.files.CheckpointError: a file is missing or damaged; the message names the file.
            RuntimeError: networks of another architecture (torch's ``load_state_dict`` message).
        """
        self._await_precompile()
        if self._act_done is not None:  # an action still in flight reads the parameters about to be replaced
            self._act_done.synchronize()
        for name, net in self._networks().items():
            path = os.path.join(directory, f"{name}.pt")
            net.load_state_dict(read_checkpoint_file(path, functools.partial(_load_torch, map_location=self.device)),
                                load_optimizer=load_optimizer)
        agent_state = read_checkpoint_file(
            os.path.join(directory, "agent_state.pt"), functools.partial(_load_torch, map_location="cpu")
        )
        self.update_step = int(agent_state["update_step"])
        self.state_replaced()
        if load_optimizer and self.scaler is not None and agent_state["grad_scaler_state_dict"] is not None:
            self.scaler.load_state_dict(agent_state["grad_scaler_state_dict"])
        torch.set_rng_state(agent_state["torch_rng_state"])
        if agent_state["cuda_rng_state"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(agent_state["cuda_rng_state"])
        self._storage_state = agent_state.get("replay_sampler")  # None: written before the device replay
        if self._storage is not None and self._storage_state is not None:
            self._storage.load_state_dict(self._storage_state)
        self._metric_sums.clear()
        self._metric_counts.clear()
        for name, (total, count) in agent_state.get("step_metrics", {}).items():
            self._carry_metric(name, total, count)

    def start_from(self, directory: str, load_optimizer: bool = True) -> None:
        """A new run from a saved agent (``agent_init_path``): its weights, BN statistics and log α, and with
        ``load_optimizer`` its Adam moments and step counts; this run keeps its own RNG state, and its update
        counter and LR schedules start at 0.

        Raises:
            agent_common.runs.files.CheckpointError / RuntimeError: as ``load``.
        """
        self._await_precompile()
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        self.load(directory, load_optimizer=load_optimizer)
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        self.update_step = 0
        for net in (self.actor, self.critic, self.temperature):
            net.set_schedule_step(0)
            net.ensure_lr_tensors()
        self._storage_state = None
        self._metric_sums.clear()
        self._metric_counts.clear()
        self.state_replaced()

    def _carry_metric(self, name: str, total: float, count: int) -> None:
        """Puts a metric sum back (saved by ``save``) so that ``take_metrics`` returns it."""
        self._metric_sums[(name,)] = torch.tensor([total], dtype=torch.float32, device=self.device)
        self._metric_counts[(name,)] = int(count)


def _save_torch(path: str, obj: Any) -> None:
    """``torch.save`` into memory, then one atomic file write: a failing write (disk full) raises the ``OSError``
    itself, where torch's zip writer would wrap it in an unrelated ``RuntimeError``."""
    data = io.BytesIO()
    torch.save(obj, data)
    atomic_write(path, lambda f: f.write(data.getbuffer()))


def _load_torch(path: str, map_location: Any) -> Any:
    return torch.load(path, map_location=map_location, weights_only=False)


def make_agent(cfg: Config, observation_space: gym.spaces.Box, action_space: gym.spaces.Box) -> FlashSACAgent:
    """Agent factory for the host stepper (``agent_common.host``)."""
    return FlashSACAgent(cfg, observation_space, action_space)
