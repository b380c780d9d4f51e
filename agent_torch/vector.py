"""The torch agent on MJX environments (``env.env_type=mjx``): the torch side of the MJX driver
(``agent_common.vector_loop``). The environments step in JAX, everything else runs in torch, and the two share
device memory through DLPack.

One interaction step (``TorchVectorTrainer.advance``), with no host round trip:

1. the action: uniform random from a torch generator while the replay holds fewer than ``agent.buffer_min_length``
   rows, else the policy on the current observation with device zeta noise (``agent.act_device``: a CUDA-graph
   replay on CUDA);
2. the environments' jitted step (``MjxVecEnv.jit_step``, all envs at once) on that action, handed to JAX as a view
   (``jax.dlpack.from_dlpack``); its outputs come back as torch views (``mjx_envs.torch_view.step_to_torch``);
3. the E rows written into the device replay (``on_device.DeviceReplay``; the one copy), the reward statistics
   updated on the device (``on_device.DeviceRewardNormalizer``);
4. once the replay can sample, ``updates_per_interaction_step`` updates, each on a batch sampled on the device with
   the rewards divided by the device divisor (``agent.device_updates``: CUDA-graph replays on CUDA).

DLPack orders the two frameworks' GPU streams: JAX's step waits for torch's action, torch's reads wait for the step's
outputs (so the next step's action, which may overwrite a graph's output, is computed after the step read it). The
torch views of JAX arrays are only read (JAX arrays are immutable).

JAX must not take most of the GPU's memory at start (its default) when torch shares the GPU: importing this module
sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless it is set already.
"""

from __future__ import annotations

import functools
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX's backend starts: torch shares the GPU

from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from agent_common.loop import strict_backend_as_config_error  # noqa: E402
from agent_common.schema import Config  # noqa: E402
from agent_torch.agent import FlashSACAgent, make_agent  # noqa: E402
from agent_torch.on_device import DeviceReplay, DeviceRewardNormalizer, DeviceZetaNoise, torch_generator  # noqa: E402
from agent_torch.replay import TensorRowStorage  # noqa: E402
from mjx_envs.env import MjxEnvState, MjxVecEnv, key_from_seed, make_mjx_env  # noqa: E402
from mjx_envs.torch_view import step_to_torch, to_torch  # noqa: E402
from torch_impl import BackendUnavailable  # noqa: E402

__all__ = ["TorchVectorTrainer", "jax_device_for", "make_vector_trainer", "to_jax"]

_NOISE_STREAM, _WARMUP_STREAM = 1, 3  # the loop's RNG stream numbers (the sampler's, 2, is TensorRowStorage's)
_EVAL_KEY = 1  # the eval envs' key: fold_in(key_from_seed(seed), 1); the train envs use key_from_seed(seed)
_EVAL_CHECK_EVERY = 16  # eval steps between read-backs of "has every env finished an episode"


@functools.lru_cache(maxsize=4)
def _cached_env(task: str, num_envs: int, max_episode_steps: int | None, rescale_action: bool) -> MjxVecEnv:
    """One ``MjxVecEnv`` (and so one compilation of its jitted reset and step) per shape in a process: a resume in
    the same process, or an eval env as large as the training one, reuses it."""
    return make_mjx_env(task, num_envs, max_episode_steps, rescale_action)


def jax_device_for(device: torch.device) -> jax.Device:
    """The JAX device that shares memory with the torch ``device`` (the same GPU, or the CPU)."""
    if device.type == "cuda":
        gpus = jax.devices("gpu")
        index = device.index if device.index is not None else torch.cuda.current_device()
        return gpus[index]
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    raise ValueError(f"device: expected a cuda or cpu torch device, got {device}")


def to_jax(tensor: torch.Tensor) -> jax.Array:
    """A contiguous torch tensor as a JAX array on the same device, sharing its memory (DLPack)."""
    return jax.dlpack.from_dlpack(tensor)


class TorchVectorTrainer:
    """The torch agent's ``VectorTrainer`` (``agent_common.vector_loop``) on MJX environments (see the module doc).

    Args:
        cfg: the run's config (``env.env_type=mjx``).
        agent: the torch agent (its device is where the replay rows, statistics and noise live).
        train_env: ``num_train_envs`` copies of the task.
        eval_env: ``num_eval_envs`` copies (``train_env`` itself when the counts match: one compilation).
    """

    def __init__(self, cfg: Config, agent: FlashSACAgent, train_env: MjxVecEnv, eval_env: MjxVecEnv) -> None:
        a = cfg.agent
        seed = int(cfg.seed)
        self.cfg, self.agent = cfg, agent
        self.train_env, self.eval_env = train_env, eval_env
        self.device = agent.device
        self.jax_device = jax_device_for(self.device)
        self.num_envs = train_env.num_envs
        obs_dim, act_dim = train_env.observation_size, train_env.action_size
        storage = TensorRowStorage(a.buffer_max_length, 2 * obs_dim + act_dim + 3, obs_dim, self.device, seed)
        self.replay = DeviceReplay(storage, obs_dim, act_dim, a.buffer_min_length)
        self.normalizer = DeviceRewardNormalizer(cfg.gamma, a.normalized_G_max, a.normalize_reward, self.num_envs,
                                                 self.device)
        self.noise = DeviceZetaNoise(self.num_envs, act_dim, a.actor_noise_zeta_mu, a.actor_noise_zeta_max,
                                     torch_generator(self.device, seed, _NOISE_STREAM))
        self.warmup = torch_generator(self.device, seed, _WARMUP_STREAM)
        self.action_low = torch.as_tensor(train_env.action_low, device=self.device)  # (A,)
        self.action_high = torch.as_tensor(train_env.action_high, device=self.device)  # (A,)
        self.batch_size = int(a.sample_batch_size)
        self.updates_per_step = int(cfg.updates_per_interaction_step)
        # Every array the jitted reset / step sees is committed to the device (DLPack actions are): one compilation.
        self.state = train_env.jit_reset(self._commit(key_from_seed(seed)))
        self.eval_state = eval_env.jit_reset(self._commit(jax.random.fold_in(key_from_seed(seed), _EVAL_KEY)))
        self.obs = to_torch(_observation(train_env, self.state))  # (E, O) view

    def _commit(self, tree: Any) -> Any:
        return jax.device_put(tree, self.jax_device)

    def _sync(self) -> None:
        jax.block_until_ready(self.state)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------------------------------------ training
    def _action(self) -> torch.Tensor:
        if self.replay.can_sample():
            return self.agent.act_device(self.obs, self.noise.sample())  # (E, A)
        shape = (self.num_envs, self.action_low.shape[0])
        u = torch.rand(shape, generator=self.warmup, device=self.device)  # (E, A)
        return self.action_low + u * (self.action_high - self.action_low)

    def advance(self, num_steps: int) -> None:
        """``num_steps`` interaction steps (every env once per step) with their updates, then waits for the device.
        Nothing is read back."""
        step_fn = self.train_env.jit_step
        for _ in range(int(num_steps)):
            action = self._action()  # (E, A)
            out = step_fn(self.state, to_jax(action))
            view = step_to_torch(out)
            self.replay.add(self.obs, action, view.reward, view.terminated, view.truncated, view.final_obs)
            self.normalizer.update(view.reward, view.terminated, view.truncated)
            self.state, self.obs = out.state, view.obs
            if self.replay.can_sample():
                self.agent.device_updates(self.updates_per_step, self._sample)
        self._sync()

    def _sample(self) -> torch.Tensor:
        """A (B, 2O + A + 2) device batch, rewards divided by the current device divisor."""
        return self.replay.sample(self.batch_size, self.normalizer.scale())

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        """The update metrics since the last call, ``{name: (sum, count)}`` (one device read).

        Raises:
            FloatingPointError: a non-finite value entered the replay rows, or a non-finite metric.
        """
        self.replay.check_finite()
        return self.agent.take_metrics()

    def info(self) -> dict[str, float | str]:
        """The agent's ``info()``, its ``compile/path`` extended by how the environments step."""
        info = self.agent.info()
        info["compile/path"] = (f"{info['compile/path']}; MJX envs: jax.jit step on {self.jax_device}, "
                                "DLPack views both ways, replay rows on the agent's device")
        return info

    # ------------------------------------------------------------------------------------------------ evaluation
    def evaluate(self, num_episodes: int) -> dict[str, float]:
        """Deterministic evaluation (tanh of the mean) on the eval envs, as ``agent_common.envs.evaluate``:
        ``num_episodes / num_eval_envs`` rounds, each from freshly reset envs, returns summed until each env's
        first episode end. The eval envs' key advances, so every evaluation sees new initial states."""
        env = self.eval_env
        returns, lengths = [], []
        for _ in range(max(1, num_episodes // env.num_envs) if num_episodes > 0 else 0):
            state = env.jit_reset(self.eval_state.key)
            obs = to_torch(_observation(env, state))
            ret = torch.zeros(env.num_envs, dtype=torch.float64, device=self.device)  # (E,)
            length = torch.zeros(env.num_envs, dtype=torch.int64, device=self.device)  # (E,)
            done_once = torch.zeros(env.num_envs, dtype=torch.bool, device=self.device)  # (E,)
            for t in range(env.max_episode_steps):
                out = env.jit_step(state, to_jax(self.agent.act_device(obs, None)))
                view = step_to_torch(out)
                alive = ~done_once
                ret += torch.where(alive, view.reward.to(torch.float64), 0.0)
                length += alive.to(torch.int64)
                done_once |= (view.terminated > 0) | (view.truncated > 0)
                state, obs = out.state, view.obs
                if (t + 1) % _EVAL_CHECK_EVERY == 0 and bool(done_once.all()):
                    break
            self.eval_state = state
            returns.append(ret.cpu().numpy())
            lengths.append(length.cpu().numpy())
        if not returns:
            return {}
        ret_all, len_all = np.concatenate(returns), np.concatenate(lengths)
        return {"avg_return": float(ret_all.mean()), "avg_length": float(len_all.mean()),
                "avg_success_once": 0.0, "avg_success_end": 0.0}

    # ------------------------------------------------------------------------------------------------ checkpoints
    def save_agent(self, directory: str) -> None:
        """The agent's files (``FlashSACAgent.save``)."""
        self.agent.save(directory)

    def load_agent(self, directory: str, load_optimizer: bool) -> None:
        self.agent.load(directory, load_optimizer=load_optimizer)

    def state_dict(self) -> dict[str, Any]:
        """Everything but the agent's files and the replay rows, as numpy / Python values: both env states (JAX
        leaves), the replay's size, ring index and sampler generator, the reward statistics, the noise and the
        warm-up generator."""
        return {
            "framework": "torch",
            "train_env_state": _leaves(self.state),
            "eval_env_state": _leaves(self.eval_state),
            "replay": self.replay.state_dict(),
            "reward_normalizer": self.normalizer.state_dict(),
            "noise": self.noise.state_dict(),
            "warmup_generator": self.warmup.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict`` output (``agent.load_reward_normalizer=false`` keeps fresh reward statistics);
        the replay rows follow with ``load_buffer_state``.

        Raises:
            ValueError: a state of the other framework, or env states of other shapes (another env count).
        """
        if state.get("framework") != "torch":
            raise ValueError(f"trainer state: expected the torch agent's, got {state.get('framework')!r}'s")
        self.state = self._restore(self.state, state["train_env_state"])
        self.eval_state = self._restore(self.eval_state, state["eval_env_state"])
        self.obs = to_torch(_observation(self.train_env, self.state))
        self.replay.load_state_dict(state["replay"])
        if self.cfg.agent.load_reward_normalizer:
            self.normalizer.load_state_dict(state["reward_normalizer"])
        self.noise.load_state_dict(state["noise"])
        self.warmup.set_state(state["warmup_generator"])

    def _restore(self, current: Any, leaves: list[np.ndarray]) -> Any:
        old = jax.tree_util.tree_leaves(current)
        if len(old) != len(leaves):
            raise ValueError(f"env state: expected {len(old)} arrays, got {len(leaves)}")
        for x, y in zip(old, leaves, strict=True):
            if tuple(x.shape) != tuple(np.shape(y)):
                raise ValueError(f"env state: an array of shape {tuple(x.shape)} was saved as {np.shape(y)} "
                                 "(another num_train_envs / num_eval_envs?)")
        arrays = [jnp.asarray(np.asarray(y), dtype=x.dtype) for x, y in zip(old, leaves, strict=True)]
        return self._commit(jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(current), arrays))

    def buffer_state(self) -> dict[str, Any]:
        """``{"rows": (size, 2O + A + 3) float32}``, ``ROW_KEYS`` columns (one device read)."""
        return {"rows": self.replay.rows()}

    def load_buffer_state(self, state: dict[str, Any] | None) -> None:
        """The saved rows (after ``load_state_dict``), or None: an empty replay (a new warm-up follows)."""
        self.replay.load_rows(None if state is None else state["rows"])

    def close(self) -> None:
        """Waits for the device (the envs are cached per process and stay)."""
        self._sync()


def _observation(env: MjxVecEnv, state: MjxEnvState) -> jax.Array:
    """(E, O) float32 observation of ``state`` (the state's own array when it is float32 already: no copy)."""
    obs = state.env_state.obs
    return obs if obs.dtype == jnp.float32 else env.observation(state)


def _leaves(tree: Any) -> list[np.ndarray]:
    return [np.asarray(leaf).copy() for leaf in jax.tree_util.tree_leaves(tree)]


def make_vector_trainer(cfg: Config) -> TorchVectorTrainer:
    """``VectorFactory`` of the torch agent: the MJX envs (cached per process), the agent (a strict backend that
    cannot run here is a ``ConfigError``, exit 2, before any step) and the trainer."""
    env_cfg = cfg.env
    train_env = _cached_env(env_cfg.env_name, int(cfg.num_train_envs), env_cfg.max_episode_steps,
                            bool(env_cfg.rescale_action))
    eval_env = _cached_env(env_cfg.env_name, int(cfg.num_eval_envs), env_cfg.max_episode_steps,
                           bool(env_cfg.rescale_action))
    obs_space = gym.spaces.Box(-np.inf, np.inf, (train_env.observation_size,), np.float32)
    act_space = gym.spaces.Box(train_env.action_low, train_env.action_high, dtype=np.float32)
    agent = strict_backend_as_config_error(make_agent, BackendUnavailable)(cfg, obs_space, act_space)
    assert isinstance(agent, FlashSACAgent)
    return TorchVectorTrainer(cfg, agent, train_env, eval_env)
