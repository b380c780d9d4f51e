"""What the host stepper (``agent_common.host.HostStepper``) calls on an agent: the ``Agent`` protocol, the
optional capabilities an agent declares (``Capabilities``) and the protocols of their methods, and
``conformance_problems`` / ``check_agent``, which check an agent (or its class) against all of them.

Every agent has ``act``, ``update``, ``save``, ``load``, ``info`` and a ``capabilities`` attribute. The stepper calls a
capability's methods only when the agent declares it:

    device_replay    ``replay_storage``, ``step``, ``take_metrics`` (``DeviceReplayAgent``): the replay rows on the
                     agent's device and one agent call per env step (store, updates, next action)
    policy_snapshot  ``policy_snapshot`` (``SnapshotAgent``): evaluations act with a fresh snapshot, and the step-0
                     evaluation runs alongside the updates
    precompile_step  ``precompile_step`` (``PrecompilingAgent``): compilation starts before the initial evaluation
    act_async        ``act_async`` (``AsyncActingAgent``): an action dispatched now and read later, which
                     ``agent.act_before_update`` needs
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from agent_common.buffer import RowStorage
from agent_common.keys import Config, ConfigError

__all__ = [
    "NO_CAPABILITIES",
    "Agent",
    "AgentFactory",
    "AsyncActingAgent",
    "Capabilities",
    "DeviceReplayAgent",
    "PrecompilingAgent",
    "SnapshotAgent",
    "check_agent",
    "conformance_problems",
    "strict_backend_as_config_error",
]


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """The optional parts of the agent interface an agent implements (each field names a protocol below)."""

    device_replay: bool = False  # DeviceReplayAgent: replay_storage, step, take_metrics
    policy_snapshot: bool = False  # SnapshotAgent: policy_snapshot
    precompile_step: bool = False  # PrecompilingAgent: precompile_step
    act_async: bool = False  # AsyncActingAgent: act_async


NO_CAPABILITIES = Capabilities()


class Agent(Protocol):
    """What the host stepper needs from every agent (see ``agent_common.__init__`` for the full contract)."""

    capabilities: Capabilities

    def act(self, observation: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
        """(E, O) float32 -> (E, A) float32 actions in [-1, 1]; ``noise`` None means deterministic tanh(μ)."""
        ...

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """One FlashSAC update on a numpy batch (reward already normalised); returns upstream metric names."""
        ...

    def save(self, directory: str) -> None:
        """Writes the agent state (networks, optimizers, schedulers, scaler, counters, framework RNG)."""
        ...

    def load(self, directory: str, load_optimizer: bool = True) -> None:
        """Restores ``save`` output."""
        ...

    def info(self) -> dict[str, float | str]:
        """Diagnostics logged with the metrics (floats as scalars, strings as TensorBoard text)."""
        ...


class DeviceReplayAgent(Agent, Protocol):
    """``capabilities.device_replay``: the agent keeps the replay rows on its device."""

    def replay_storage(self, capacity: int) -> RowStorage | None:
        """Called once by the stepper: a storage for its ``ReplayBuffer`` rows, which turns on ``step`` and
        ``take_metrics``; None keeps the rows on the host (``act`` and ``update`` per step)."""
        ...

    def step(self, observation: np.ndarray, noise: np.ndarray | None, num_updates: int,
             reward_scale: float) -> np.ndarray | None:
        """Per env step, after the transition is stored: ``num_updates`` updates on batches the agent samples itself
        (rewards divided by ``reward_scale``), then the action for ``observation`` (None when ``noise`` is None)."""
        ...

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        """The metrics of ``step`` since the last call, ``{name: (sum, count)}``."""
        ...


class SnapshotAgent(Agent, Protocol):
    """``capabilities.policy_snapshot``: a copy of the deterministic policy another thread may call."""

    def policy_snapshot(self) -> Callable[[np.ndarray], np.ndarray]:
        """The deterministic policy as it is now (``act(obs, None)``), on memory of its own: later updates (in
        place, or donating the agent's buffers) neither change nor invalidate it."""
        ...


class PrecompilingAgent(Agent, Protocol):
    """``capabilities.precompile_step``: the first updates' programs compile in the background."""

    def precompile_step(self, num_envs: int) -> Any:
        """Called once before the initial evaluation (with the device replay): starts compiling."""
        ...


class AsyncActingAgent(Agent, Protocol):
    """``capabilities.act_async``: an action whose device work is dispatched now and whose value is read later."""

    def act_async(self, observation: np.ndarray, noise: np.ndarray | None) -> Callable[[], np.ndarray]:
        """``act``'s action computed with the parameters as they are now; the returned function waits for that
        action alone and returns it (call it once). Later updates do not change it."""
        ...


AgentFactory = Callable[[Config, gym.spaces.Box, gym.spaces.Box], Agent]
"""``make_agent(cfg, observation_space, action_space) -> Agent``; seeds its framework RNG from ``cfg.seed``."""

_CAPABILITY_PROTOCOLS: dict[str, type] = {
    "device_replay": DeviceReplayAgent,
    "policy_snapshot": SnapshotAgent,
    "precompile_step": PrecompilingAgent,
    "act_async": AsyncActingAgent,
}


def _methods(protocol: type, own_only: bool) -> dict[str, inspect.Signature]:
    names = vars(protocol) if own_only else {n for cls in protocol.__mro__ if cls is not object for n in vars(cls)}
    return {name: inspect.signature(getattr(protocol, name)) for name in sorted(names)
            if not name.startswith("_") and inspect.isfunction(getattr(protocol, name))}


def _shape(params: list[inspect.Parameter]) -> list[tuple[str | None, bool]]:
    """What the stepper relies on of a method's parameters: their order, which are required, and the names of the
    optional ones (passed by keyword); required ones are passed by position, so a wrapper may name them freely."""
    return [(None if p.default is inspect.Parameter.empty else p.name, p.default is inspect.Parameter.empty)
            for p in params]


def conformance_problems(agent: Any) -> list[str]:
    """What ``agent`` (an agent or its class) lacks of ``Agent`` and of the protocol of each capability it declares:
    a missing ``capabilities``, a missing method, or a method whose parameters are not the protocol's (order, which
    have defaults, and the optional ones' names). Empty when it conforms."""
    name = agent.__name__ if isinstance(agent, type) else type(agent).__name__
    capabilities = getattr(agent, "capabilities", None)
    if not isinstance(capabilities, Capabilities):
        return [f"{name}.capabilities: expected an agent_common.protocol.Capabilities, got {capabilities!r}"]
    required = _methods(Agent, own_only=True)
    for field, protocol in _CAPABILITY_PROTOCOLS.items():
        if getattr(capabilities, field):
            required.update(_methods(protocol, own_only=True))
    problems = []
    for method, expected in required.items():
        got = getattr(agent, method, None)
        if not callable(got):
            problems.append(f"{name}.{method}: missing (expected {method}{expected})")
            continue
        params = list(inspect.signature(got).parameters.values())
        if isinstance(agent, type) and params and params[0].name == "self":
            params = params[1:]
        want = [p for p in expected.parameters.values() if p.name != "self"]
        if _shape(params) != _shape(want):
            problems.append(f"{name}.{method}: expected parameters {method}{expected}, got {method}"
                            f"{inspect.signature(got)}")
    return problems


def check_agent(agent: Any) -> None:
    """Raises ``TypeError`` naming every way ``agent`` does not conform (``conformance_problems``)."""
    problems = conformance_problems(agent)
    if problems:
        raise TypeError("the agent does not implement the loop's agent protocol (agent_common.protocol): "
                        + "; ".join(problems))


def strict_backend_as_config_error(make_agent: AgentFactory, unavailable: type[Exception]) -> AgentFactory:
    """Wraps an agent factory for the CLI: a strict backend that cannot run here (``unavailable``, the framework's
    ``BackendUnavailable``) becomes a one-line ``ConfigError`` naming the keys, instead of a traceback."""

    def build(cfg: Config, observation_space: gym.spaces.Box, action_space: gym.spaces.Box) -> Agent:
        try:
            return make_agent(cfg, observation_space, action_space)
        except unavailable as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"agent.categorical_target_backend={cfg.agent.categorical_target_backend} with "
                f"agent.categorical_target_strict=true cannot run here: {reason}. Use a GPU, or "
                "agent.categorical_target_strict=false (falls back to the reference, logged)"
            ) from None

    return build
