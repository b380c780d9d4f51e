"""The torch agent's trained policy: ``load_policy`` (a checkpoint as ``obs -> action``) and the deterministic actor
exported as TorchScript for deployment (``export_actor`` / ``load_exported``: ``torch.jit.load`` needs only torch,
not this project)."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence

import numpy as np
import torch

from agent_common.architecture import Architecture, ArchitectureError, infer_architecture
from agent_common.policy import Policy
from agent_common.policy import load_policy as _load_policy
from agent_common.runs.files import read_checkpoint_file

__all__ = ["agent_factory", "DeterministicActor", "export_actor", "load_exported", "load_policy", "read_architecture"]


def load_policy(path: str, deterministic: bool = True, seed: int = 0, overrides: Sequence[str] = ()) -> Policy:
    """The torch policy at ``path`` (a run or checkpoint directory, or a folder written by ``python -m
    agent_interop.convert``) as a ``Policy`` (``agent_common.policy``)."""
    return _load_policy(path, "torch", agent_factory(), deterministic, seed, overrides, read_architecture)


def read_architecture(agent_dir: str) -> Architecture:
    """What the torch agent files in ``agent_dir`` (``actor.pt``, ``critic.pt``) state about the networks
    (``agent_common.architecture``).

    Raises:
        agent_common.runs.files.CheckpointError: a file is missing, unreadable or holds no network state, naming it.
        agent_common.architecture.ArchitectureError: the networks are not a FlashSAC agent's.
    """
    nets = {}
    for name in ("actor", "critic"):
        path = os.path.join(agent_dir, f"{name}.pt")
        state = read_checkpoint_file(path, lambda p: torch.load(p, map_location="cpu", weights_only=False))
        weights = state.get("network_state_dict") if isinstance(state, dict) else None
        if not isinstance(weights, dict):
            raise ArchitectureError(f"{path} holds no network_state_dict ({type(state).__name__}): not a torch agent "
                                    "file of this project")
        nets[name] = {k: v.detach().float().cpu().numpy() for k, v in weights.items() if isinstance(v, torch.Tensor)}
    atoms = nets["critic"].pop("atoms", None)
    return infer_architecture(nets["actor"], nets["critic"], atoms, ("actor.pt", "critic.pt"), agent_dir)


def agent_factory():  # noqa: ANN201  an agent_common.protocol.AgentFactory
    """The agent factory (imported on the call), a strict backend that cannot run here as a ``ConfigError``."""
    from agent_common.protocol import strict_backend_as_config_error
    from agent_torch.agent import make_agent
    from torch_impl import BackendUnavailable

    return strict_backend_as_config_error(make_agent, BackendUnavailable)


class DeterministicActor(torch.nn.Module):
    """tanh(mean) of the actor, BN on its running statistics: (E, O) float32 -> (E, A) float32 in [-1, 1]."""

    def __init__(self, actor: torch.nn.Module) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        mean, _ = self.actor.get_mean_and_std(observation, training=False)  # type: ignore[operator]
        return torch.tanh(mean.float())


def export_actor(policy: Policy, path: str) -> str:
    """Writes the policy's deterministic actor (a CPU fp32 copy) as TorchScript to ``path``; returns ``path``.

    ``torch.jit.load(path)(obs)`` maps (E, O) float32 observations (any E) to the actions ``policy`` gives with
    ``deterministic=True``.
    """
    actor = copy.deepcopy(policy.agent.actor.module).to("cpu", torch.float32).eval()
    module = DeterministicActor(actor)
    example = torch.zeros(2, policy.observation_dim, dtype=torch.float32)
    with torch.no_grad():
        traced = torch.jit.trace(module, (example,), check_trace=False)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    traced.save(path)
    return path


def load_exported(path: str):  # noqa: ANN201  the returned callable maps numpy to numpy
    """The exported actor as ``(E, O) numpy -> (E, A) numpy`` (``torch.jit.load`` on the CPU)."""
    module = torch.jit.load(path, map_location="cpu").eval()

    def act(observation: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.as_tensor(np.asarray(observation, dtype=np.float32))).numpy()

    return act
