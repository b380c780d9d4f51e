"""MJX environments driven from torch: a step's arrays as torch tensors and torch actions as JAX arrays, through
DLPack, without copies.

The torch agent steps the MJX environments in JAX and reads the results as torch tensors. ``torch.from_dlpack``
shares the JAX buffer and ``jax.dlpack.from_dlpack`` the torch one (on the GPU the DLPack protocol orders the two
frameworks' streams: the consumer waits for the producer's pending work). A torch view of a JAX array must be treated
as read-only, since JAX assumes its arrays never change. ``TorchEnv`` keeps the env state (a JAX pytree) on the JAX
device that shares memory with a torch device and takes / returns torch tensors only, so a torch program needs no
JAX of its own.

Importing this module sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless it is set: JAX would otherwise reserve
most of the GPU's memory when its backend starts, leaving little to torch in the same process.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX's backend starts: torch shares the GPU

from typing import Any, NamedTuple  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from simulators.mjx_env import MjxEnvState, MjxStep, MjxVecEnv, key_from_seed  # noqa: E402

__all__ = ["TorchEnv", "TorchStep", "from_torch", "jax_device_for", "step_to_torch", "to_torch"]


class TorchStep(NamedTuple):
    """``MjxStep``'s arrays as torch tensors (same shapes and dtypes: float32), sharing the JAX buffers."""

    obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor


def to_torch(array: Any) -> torch.Tensor:
    """One JAX array as a torch tensor on the same device, sharing its memory (``torch.from_dlpack``).

    Raises:
        TypeError: ``array`` does not implement the DLPack protocol (not a JAX or other DLPack array).
    """
    if not hasattr(array, "__dlpack__"):
        raise TypeError(f"array: expected a JAX array (DLPack protocol), got {type(array).__name__}")
    return torch.from_dlpack(array)


def from_torch(tensor: torch.Tensor) -> jax.Array:
    """A contiguous torch tensor as a JAX array on the same device, sharing its memory (``jax.dlpack``).

    Raises:
        TypeError: ``tensor`` is not a torch tensor.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor: expected a torch.Tensor, got {type(tensor).__name__}")
    return jax.dlpack.from_dlpack(tensor)


def step_to_torch(step: MjxStep) -> TorchStep:
    """The tensors of one ``MjxVecEnv.step`` result (everything but the env state) as zero-copy torch views."""
    return TorchStep(
        obs=to_torch(step.obs),
        reward=to_torch(step.reward),
        terminated=to_torch(step.terminated),
        truncated=to_torch(step.truncated),
        final_obs=to_torch(step.final_obs),
    )


def jax_device_for(device: torch.device) -> jax.Device:
    """The JAX device that shares memory with the torch ``device`` (the same GPU, or the CPU).

    Raises:
        ValueError: neither a CUDA nor a CPU device, or a GPU that JAX does not see.
    """
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        try:
            return jax.devices("gpu")[index]  # JAX's name for its CUDA (or ROCm) platform
        except (RuntimeError, IndexError) as exc:
            raise ValueError(f"device: torch's {device} has no JAX counterpart ({exc}): JAX steps the MJX envs on the "
                             "same GPU, so it needs its CUDA backend (or run on the CPU)") from None
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    raise ValueError(f"device: expected a cuda or cpu torch device, got {device}")


class TorchEnv:
    """An ``MjxVecEnv`` stepped from torch: the env state lives on the JAX device of a torch device, actions go in
    and observations, rewards and flags come out as zero-copy torch tensors.

    Every array the jitted reset and step see is committed to that device (DLPack arrays are), so each compiles
    once. Several ``TorchEnv`` may share one ``MjxVecEnv`` (and its compilations), each with its own state.

    Args:
        env: the batched environment.
        device: the torch device the tensors live on.
        seed: the run seed; ``stream`` > 0 derives another key from it (``fold_in``), e.g. for evaluation envs.
        stream: which key of the seed.
    """

    exact_state = True
    """``state_dict`` holds the complete env state (a resume continues every episode)."""

    def __init__(self, env: MjxVecEnv, device: torch.device, seed: int, stream: int = 0) -> None:
        self.env = env
        self.device = device
        self.jax_device = jax_device_for(device)
        self.num_envs, self.max_episode_steps = env.num_envs, env.max_episode_steps
        self.observation_size, self.action_size = env.observation_size, env.action_size
        self.action_low, self.action_high = env.action_low, env.action_high  # (A,) float32 each
        key = key_from_seed(seed)
        if stream:
            key = jax.random.fold_in(key, int(stream))
        self.key = jax.device_put(key, self.jax_device)  # the stream's key (``reset_round`` folds a round in)
        self.state: MjxEnvState = env.jit_reset(self.key)

    def observation(self) -> torch.Tensor:
        """(E, O) float32 current observation (a view)."""
        obs = self.state.env_state.obs
        return to_torch(obs if obs.dtype == jnp.float32 else self.env.observation(self.state))

    def reset(self) -> torch.Tensor:
        """Fresh initial states of every env from the state's own key (which advances); returns the observation."""
        self.state = self.env.jit_reset(self.state.key)
        return self.observation()

    def reset_round(self, index: int) -> torch.Tensor:
        """Fresh initial states of every env from the stream's key folded with ``index`` (the same states for the
        same index, whatever ran before); returns the observation."""
        self.state = self.env.jit_reset(jax.device_put(jax.random.fold_in(self.key, int(index)), self.jax_device))
        return self.observation()

    def positions(self, num_envs: int) -> np.ndarray:
        """(num_envs, nq) float64 joint positions of the first ``num_envs`` envs (only they are copied to the host)."""
        return np.asarray(self.env.positions(self.state)[:num_envs], dtype=np.float64)

    def step(self, action: torch.Tensor) -> TorchStep:
        """One step of every env on (E, A) float32 actions (read by JAX in place); the state advances."""
        out = self.env.jit_step(self.state, from_torch(action))
        self.state = out.state
        return step_to_torch(out)

    def compile_step(self) -> None:
        """Compiles the jitted step for this env's shapes (a step of the current state on zero actions, whose result
        is dropped: the state does not change) and waits for it; safe to run on another thread."""
        action = torch.zeros((self.env.num_envs, self.env.action_size), dtype=torch.float32, device=self.device)
        jax.block_until_ready(self.env.jit_step(self.state, from_torch(action)))

    def block_until_ready(self) -> None:
        """Waits until the state's pending computation is done."""
        jax.block_until_ready(self.state)

    def state_dict(self) -> list[np.ndarray]:
        """The env state's arrays as numpy copies (pytree leaf order)."""
        return [np.asarray(leaf).copy() for leaf in jax.tree_util.tree_leaves(self.state)]

    def load_state_dict(self, leaves: list[np.ndarray]) -> None:
        """Restores ``state_dict`` output.

        Raises:
            ValueError: another number of arrays or another shape (another env count or task).
        """
        old = jax.tree_util.tree_leaves(self.state)
        if len(old) != len(leaves):
            raise ValueError(f"env state: expected {len(old)} arrays, got {len(leaves)}")
        for x, y in zip(old, leaves, strict=True):
            if tuple(x.shape) != tuple(np.shape(y)):
                raise ValueError(f"env state: an array of shape {tuple(x.shape)} was saved as {np.shape(y)} "
                                 "(another env count or task?)")
        arrays = [jnp.asarray(np.asarray(y), dtype=x.dtype) for x, y in zip(old, leaves, strict=True)]
        tree = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(self.state), arrays)
        self.state = jax.device_put(tree, self.jax_device)
