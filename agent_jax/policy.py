"""The JAX agent's trained policy: ``load_policy`` (a checkpoint as ``obs -> action``) and the deterministic actor
exported for deployment as a serialised ``jax.export`` program (StableHLO, any batch size) with its weights beside it
in one ``.npz``: ``load_exported`` needs only numpy and JAX, not this project."""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from agent_common.architecture import Architecture, ArchitectureError, infer_architecture
from agent_common.policy import Policy
from agent_common.policy import load_policy as _load_policy
from agent_common.runs.files import atomic_write, read_checkpoint_file
from agent_jax.step import policy_actions

__all__ = ["agent_factory", "export_actor", "load_exported", "load_policy", "read_architecture"]


def load_policy(path: str, deterministic: bool = True, seed: int = 0, overrides: Sequence[str] = ()) -> Policy:
    """The JAX policy at ``path`` (a run or checkpoint directory, or a folder written by ``python -m
    agent_interop.convert``) as a ``Policy`` (``agent_common.policy``)."""
    return _load_policy(path, "jax", agent_factory(), deterministic, seed, overrides, read_architecture)


def read_architecture(agent_dir: str) -> Architecture:
    """What the JAX agent files in ``agent_dir`` (``actor.pkl``, ``critic.pkl``) state about the networks
    (``agent_common.architecture``; the support is not in them).

    Raises:
        agent_common.runs.files.CheckpointError: a file is missing, unreadable or holds no parameters, naming it.
        agent_common.architecture.ArchitectureError: the networks are not a FlashSAC agent's.
    """
    nets = {}
    for name in ("actor", "critic"):
        path = os.path.join(agent_dir, f"{name}.pkl")
        state = read_checkpoint_file(path)
        params = state.get("params") if isinstance(state, dict) else None
        if not isinstance(params, dict):
            raise ArchitectureError(f"{path} holds no params ({type(state).__name__}): not a JAX agent file of this "
                                    "project")
        nets[name] = _flat(params)
    return infer_architecture(nets["actor"], nets["critic"], None, ("actor.pkl", "critic.pkl"), agent_dir)


def _flat(tree: dict, prefix: str = "") -> dict[str, np.ndarray]:
    """Nested params -> {"blocks_0.fc1.weight": array}."""
    out: dict[str, np.ndarray] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = np.asarray(value)
    return out


def agent_factory():  # noqa: ANN201  an agent_common.protocol.AgentFactory
    """The agent factory (imported on the call), a strict backend that cannot run here as a ``ConfigError``."""
    from agent_common.protocol import strict_backend_as_config_error
    from agent_jax.agent import make_agent
    from jax_impl import BackendUnavailable

    return strict_backend_as_config_error(make_agent, BackendUnavailable)


def export_actor(policy: Policy, path: str) -> str:
    """Writes the policy's deterministic actor to ``path`` (an ``.npz``); returns ``path``.

    The file holds ``program``: the serialised ``jax.export`` program (StableHLO) of tanh(mean) for (E, O) float32
    observations (E symbolic: any batch), and ``leaf_<i>``: the actor's parameters and BN statistics, which the
    program takes as arguments (weights passed in, not folded into the program as constants, keep its arithmetic
    that of the agent's own jitted call: bitwise the same actions). ``load_exported`` reads it with numpy and JAX.
    """
    agent = policy.agent
    actor = agent.state.actor
    leaves, treedef = jax.tree_util.tree_flatten(jax.device_get((actor.params, actor.batch_stats)))
    actor_def = agent._actor_def

    def act(flat: tuple[jax.Array, ...], observation: jax.Array) -> jax.Array:
        params, batch_stats = jax.tree_util.tree_unflatten(treedef, flat)
        return policy_actions(actor_def, params, batch_stats, observation, jnp.zeros(()), True)  # (E, A)

    (batch,) = jax.export.symbolic_shape("e")
    specs = tuple(jax.ShapeDtypeStruct(np.shape(leaf), np.asarray(leaf).dtype) for leaf in leaves)
    observation = jax.ShapeDtypeStruct((batch, policy.observation_dim), jnp.float32)
    exported = jax.export.export(jax.jit(act), platforms=("cpu", "cuda"))(specs, observation)
    arrays = {"program": np.frombuffer(bytes(exported.serialize()), dtype=np.uint8)}
    arrays.update({f"leaf_{i:04d}": np.asarray(leaf) for i, leaf in enumerate(leaves)})
    atomic_write(os.path.abspath(path), lambda f: np.savez(f, **arrays))
    return path


def load_exported(path: str):  # noqa: ANN201  the returned callable maps numpy to numpy
    """The exported actor as ``(E, O) numpy -> (E, A) numpy`` (``jax.export.deserialize(...).call``)."""
    with np.load(path) as data:
        exported = jax.export.deserialize(bytearray(data["program"].tobytes()))
        leaves = tuple(jnp.asarray(data[name]) for name in sorted(k for k in data.files if k.startswith("leaf_")))

    def act(observation: np.ndarray) -> np.ndarray:
        return np.asarray(exported.call(leaves, jnp.asarray(np.asarray(observation, dtype=np.float32))))

    return act
