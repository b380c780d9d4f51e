"""The torch agent on device-stepped environments (``env.env_type`` mjx, mujoco_playground or mjlab): the torch side
of the device stepper (``agent_common.device``). MJX and MuJoCo Playground environments step in JAX and share
device memory with torch through DLPack (``simulators.torch_view.TorchEnv``); mjlab's step in MuJoCo Warp and return
torch tensors themselves (``simulators.mjlab_env.MjlabVecEnv``). The trainer takes either through one small
interface, ``TorchVectorEnv``.

One interaction step (``TorchVectorTrainer.advance``), with no host round trip:

1. the action: uniform random from a torch generator while the replay holds fewer than ``agent.buffer_min_length``
   rows, else the policy on the current observation with device zeta noise (``agent.act_device``: a CUDA-graph
   replay on CUDA);
2. the environments' step on that action, all envs at once (MJX: the jitted ``MjxVecEnv.jit_step``, the action
   handed to JAX as a view, its outputs back as torch views; mjlab: its own torch step);
3. the E rows written into the device replay (``on_device.DeviceReplay``; the one copy), the reward statistics
   updated on the device (``on_device.DeviceRewardNormalizer``);
4. once the replay can sample, ``updates_per_interaction_step`` updates, each on a batch sampled on the device with
   the rewards divided by the device divisor (``agent.device_updates``: CUDA-graph replays on CUDA).

DLPack orders the two frameworks' GPU streams: JAX's step waits for torch's action, torch's reads wait for the step's
outputs (so the next step's action, which may overwrite a graph's output, is computed after the step read it). The
torch views of JAX arrays are only read (JAX arrays are immutable). The JAX side (env state, jitted calls, DLPack)
is ``simulators.torch_view.TorchEnv``, imported only for MJX and Playground runs; this module is torch only.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from agent_common.keys import Config, ConfigError
from agent_common.protocol import strict_backend_as_config_error
from agent_common.seeding import NOISE_STREAM, WARMUP_STREAM
from agent_torch.agent import FlashSACAgent, make_agent, resolve_device
from agent_torch.distributed import local_device
from agent_torch.on_device import DeviceReplay, DeviceRewardNormalizer, DeviceZetaNoise, torch_generator
from agent_torch.replay import TensorRowStorage
from simulators import make_device_env, simulator
from torch_impl import BackendUnavailable

__all__ = ["TorchVectorEnv", "TorchVectorTrainer", "make_vector_trainer"]

_EVAL_KEY_STREAM = 1  # the eval envs' key is derived from the seed's (TorchEnv's stream)
_RECORD_KEY_STREAM = 2  # the recording rounds' key (one round per fold of it: TorchEnv.reset_round)
_EVAL_CHECK_EVERY = 16  # eval steps between read-backs of "has every env finished an episode"


class TorchVectorEnv(Protocol):
    """``num_envs`` copies of a task stepped from torch on the agent's device (``simulators.torch_view.TorchEnv``,
    ``simulators.mjlab_env.MjlabVecEnv``).

    Attributes:
        num_envs: E.
        observation_size: O.
        action_size: A.
        action_low: (A,) float32 action lower bounds.
        action_high: (A,) float32 action upper bounds.
        max_episode_steps: the longest episode (evaluation steps at most this many times).
        jax_device: where the envs step, in words (the trainer's ``compute path:`` line).
        exact_state: whether ``state_dict`` holds the complete env state (False: a resume starts new episodes).
    """

    num_envs: int
    observation_size: int
    action_size: int
    action_low: np.ndarray
    action_high: np.ndarray
    max_episode_steps: int
    jax_device: Any
    exact_state: bool

    def observation(self) -> torch.Tensor:
        """(E, O) float32 current observation (only read by the caller)."""
        ...

    def reset(self) -> torch.Tensor:
        """Fresh episodes in every env; returns the (E, O) observation."""
        ...

    def step(self, action: torch.Tensor) -> Any:
        """One step of every env on (E, A) float32 actions; returns (E, ...) float32 tensors ``obs`` (the reset
        observation where an episode ended), ``reward``, ``terminated``, ``truncated`` (0 / 1) and ``final_obs``
        (the true successors), only read by the caller."""
        ...

    def compile_step(self) -> None:
        """Compiles the step ahead of the first one (may run on another thread)."""
        ...

    def block_until_ready(self) -> None:
        """Waits for the envs' pending device work."""
        ...

    def state_dict(self) -> Any:
        """The env state as picklable host values."""
        ...

    def load_state_dict(self, state: Any) -> None:
        """Restores ``state_dict`` output; raises ``ValueError`` for a state of other envs."""
        ...


class TorchVectorTrainer:
    """The torch agent's ``DeviceTrainer`` (``agent_common.device``) on device-stepped envs (see the module doc).

    Args:
        cfg: the run's config (``env.env_type`` mjx, mujoco_playground or mjlab).
        agent: the torch agent (its device is where the replay rows, statistics and noise live).
        train_env: ``num_train_envs`` copies of the task.
        eval_env: ``num_eval_envs`` copies, with a state of their own.
    """

    def __init__(self, cfg: Config, agent: FlashSACAgent, train_env: TorchVectorEnv,
                 eval_env: TorchVectorEnv) -> None:
        a = cfg.agent
        seed = int(cfg.seed)
        self.cfg, self.agent = cfg, agent
        self.device = agent.device
        self.num_envs = train_env.num_envs
        obs_dim, act_dim = train_env.observation_size, train_env.action_size
        storage = TensorRowStorage(a.buffer_max_length, 2 * obs_dim + act_dim + 3, obs_dim, self.device, seed)
        self.replay = DeviceReplay(storage, obs_dim, act_dim, a.buffer_min_length, int(cfg.n_step), float(cfg.gamma))
        self.normalizer = DeviceRewardNormalizer(cfg.gamma, a.normalized_G_max, a.normalize_reward, self.num_envs,
                                                 self.device)
        self.noise = DeviceZetaNoise(self.num_envs, act_dim, a.actor_noise_zeta_mu, a.actor_noise_zeta_max,
                                     torch_generator(self.device, seed, NOISE_STREAM))
        self.warmup = torch_generator(self.device, seed, WARMUP_STREAM)
        self.action_low = torch.as_tensor(train_env.action_low, device=self.device)  # (A,)
        self.action_high = torch.as_tensor(train_env.action_high, device=self.device)  # (A,)
        self.batch_size = int(a.sample_batch_size)
        self.updates_per_step = int(cfg.updates_per_interaction_step)
        self.train_env, self.eval_env = train_env, eval_env
        self.obs = self.train_env.observation()  # (E, O) view
        self._precompiling: threading.Thread | None = None
        self._eval_sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # evaluate's accumulators
        self._recorder: Any = None  # a TorchEnv; the recording rounds' env state (record_round), built on first use
        self._restart_window = False  # a resume starts new episodes: the saved n-step window is not continued

    def precompile(self) -> None:
        """Starts compiling the training envs' jitted step on a background thread (the driver calls it before the
        initial evaluation, which then overlaps the compilation); the first ``advance`` waits for it."""
        def compile_step() -> None:
            try:
                self.train_env.compile_step()
            except BaseException as exc:  # re-raised by the next advance
                self._precompile_error = exc

        self._precompile_error: BaseException | None = None
        self._precompiling = threading.Thread(target=compile_step, name="mjx-step-compile", daemon=True)
        self._precompiling.start()

    def _wait_precompile(self) -> None:
        thread, self._precompiling = self._precompiling, None
        if thread is not None:
            thread.join()
            if self._precompile_error is not None:
                raise self._precompile_error

    def _sync(self) -> None:
        self.train_env.block_until_ready()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------------------------------------ training
    def _action(self) -> torch.Tensor:
        if self.replay.can_sample():
            return self.agent.act_device(self.obs, self.noise.sample())  # (E, A)
        shape = (self.num_envs, self.action_low.shape[0])
        u = torch.rand(shape, generator=self.warmup, device=self.device)  # (E, A)
        return self.action_low + u * (self.action_high - self.action_low)

    def _sample(self) -> torch.Tensor:
        """A (B, 2O + A + 2) device batch, rewards divided by the current device divisor."""
        return self.replay.sample(self.batch_size, self.normalizer.scale())

    def advance(self, num_steps: int) -> None:
        """``num_steps`` interaction steps (every env once per step) with their updates, then waits for the device.
        Nothing is read back."""
        self._wait_precompile()
        for _ in range(int(num_steps)):
            action = self._action()  # (E, A)
            out = self.train_env.step(action)
            self.replay.add(self.obs, action, out.reward, out.terminated, out.truncated, out.final_obs)
            self.normalizer.update(out.reward, out.terminated, out.truncated)
            self.obs = out.obs
            if self.replay.can_sample():
                self.agent.device_updates(self.updates_per_step, self._sample)
        self._sync()

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
        if isinstance(self.train_env.jax_device, str):  # a torch-native simulator names itself
            envs = f"envs: {self.train_env.jax_device}, its torch tensors read in place"
        else:
            envs = f"MJX envs: jitted JAX step on {self.train_env.jax_device}, DLPack views both ways"
        info["compile/path"] = f"{info['compile/path']}; {envs}, replay rows on the agent's device"
        return info

    # ------------------------------------------------------------------------------------------------ evaluation
    def evaluate(self, num_episodes: int) -> dict[str, float]:
        """Deterministic evaluation (tanh of the mean) on the eval envs, as ``agent_common.envs.evaluate``:
        ``num_episodes / num_eval_envs`` rounds, each from freshly reset envs, returns summed until each env's
        first episode end. The eval envs' key advances, so every evaluation sees new initial states.

        All eval envs step at once; per step the device runs the jitted env step and one function that adds the
        step's rewards to the still-running episodes and computes the next deterministic action
        (``_eval_step``: a CUDA-graph replay on CUDA). The host reads a flag every 16 steps (have all envs
        finished?) and the returns once at the end."""
        env = self.eval_env
        num_envs, limit = env.num_envs, env.max_episode_steps
        rounds = max(1, num_episodes // num_envs) if num_episodes > 0 else 0
        if rounds == 0:
            return {}
        if self._eval_sums is None:
            f64, i64 = {"dtype": torch.float64, "device": self.device}, {"dtype": torch.int64, "device": self.device}
            self._eval_sums = (torch.zeros(num_envs, **f64), torch.zeros(num_envs, **i64),
                               torch.zeros(num_envs, dtype=torch.bool, device=self.device))
        ret, length, done_once = self._eval_sums  # (E,) each, updated in place (a captured graph reads them)
        returns, lengths = [], []
        for _ in range(rounds):
            obs = env.reset()
            ret.zero_()
            length.zero_()
            done_once.zero_()
            action = self.agent.act_device(obs, None)  # (E, A)
            for t in range(limit):
                out = env.step(action)
                action = self.agent.run_captured(("eval_step", tuple(out.obs.shape)), self._eval_step, out.obs,
                                                 out.reward, out.terminated, out.truncated)
                if (t + 1) % _EVAL_CHECK_EVERY == 0 and bool(done_once.all()):
                    break
            returns.append(ret.clone())
            lengths.append(length.clone())
        ret_all, len_all = torch.cat(returns).cpu().numpy(), torch.cat(lengths).cpu().numpy()
        return {"avg_return": float(ret_all.mean()), "avg_length": float(len_all.mean()),
                "avg_success_once": 0.0, "avg_success_end": 0.0}

    @torch.no_grad()
    def _eval_step(self, obs: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor,
                   truncated: torch.Tensor) -> torch.Tensor:
        """Adds one step's (E,) rewards to the episodes still running, marks ended ones, returns the deterministic
        (E, A) action for the (E, O) next observation."""
        ret, length, done_once = self._eval_sums
        alive = ~done_once
        ret.add_(torch.where(alive, reward.to(torch.float64), 0.0))
        length.add_(alive.to(torch.int64))
        done_once.logical_or_((terminated > 0) | (truncated > 0))
        return self.agent.act_tensor(obs)

    # ------------------------------------------------------------------------------------------------ videos
    def recording_model(self) -> tuple[Any, float]:
        """(the task's ``MjModel``, seconds per env step): what ``agent_common.video.VectorRecorder`` renders."""
        return self.eval_env.env.mj_model, float(self.eval_env.env.dt)

    @torch.no_grad()
    def record_round(self, num_envs: int, num_steps: int, index: int) -> dict[str, np.ndarray]:
        """One recording round of the deterministic policy on copies of the eval envs (a state of their own, from
        the recording key folded with ``index``; the eval envs' state does not change), at most ``num_steps`` steps
        or the episode limit (the eval envs' compiled reset and step). Only the first ``num_envs`` envs' joint
        positions reach the host.

        Returns:
            ``qpos`` (T, n, nq) float64 positions before each action, ``alive`` (T, n) bool (episode still running),
            ``returns`` (n,) float64 up to each env's first end, ``finished`` (n,) bool.
        """
        if self._recorder is None:
            from simulators.torch_view import TorchEnv  # MJX / Playground only (mjlab refuses recording)

            self._recorder = TorchEnv(self.eval_env.env, self.device, int(self.cfg.seed), stream=_RECORD_KEY_STREAM)
        env = self._recorder
        obs = env.reset_round(index)
        total = torch.zeros(env.env.num_envs, dtype=torch.float64, device=self.device)
        finished = torch.zeros(env.env.num_envs, dtype=torch.bool, device=self.device)
        qpos, alive = [], []
        for _ in range(min(int(num_steps), env.env.max_episode_steps)):
            qpos.append(env.positions(num_envs))  # (n, nq)
            alive.append((~finished[:num_envs]).cpu().numpy())
            out = env.step(self.agent.act_tensor(obs))
            total += torch.where(finished, 0.0, out.reward.to(torch.float64))
            finished |= (out.terminated > 0) | (out.truncated > 0)
            obs = out.obs
            if bool(finished[:num_envs].all()):
                break
        return {"qpos": np.stack(qpos), "alive": np.stack(alive), "returns": total[:num_envs].cpu().numpy(),
                "finished": finished[:num_envs].cpu().numpy()}

    # ------------------------------------------------------------------------------------------------ checkpoints
    def save_agent(self, directory: str) -> None:
        """The agent's files (``FlashSACAgent.save``)."""
        self.agent.save(directory)

    def load_agent(self, directory: str, load_optimizer: bool) -> None:
        self.agent.load(directory, load_optimizer=load_optimizer)

    def state_dict(self) -> dict[str, Any]:
        """Everything but the agent's files and the replay rows, as numpy / Python values: both env states, the
        replay's size, ring index and sampler generator, the reward statistics, the noise and the warm-up
        generator."""
        return {
            "framework": "torch",
            "train_env_state": self.train_env.state_dict(),
            "eval_env_state": self.eval_env.state_dict(),
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
        self.train_env.load_state_dict(state["train_env_state"])
        self.eval_env.load_state_dict(state["eval_env_state"])
        self.obs = self.train_env.observation()
        self.replay.load_state_dict(state["replay"])
        if self.cfg.agent.load_reward_normalizer:
            self.normalizer.load_state_dict(state["reward_normalizer"])
        if not self.train_env.exact_state:  # the envs start new episodes: so do their running returns
            self.normalizer.G.zero_()
            print(f"warning: {self.cfg.env.env_type} envs: the simulator state is not saved in checkpoints, so the "
                  "resumed run starts new episodes in every env (the agent, replay rows, reward statistics, noise "
                  "and counters are restored; an in-flight n-step window starts empty)", file=sys.stderr, flush=True)
        self._restart_window = not self.train_env.exact_state
        self.noise.load_state_dict(state["noise"])
        self.warmup.set_state(state["warmup_generator"])

    def buffer_state(self) -> dict[str, Any]:
        """``{"rows": (size, 2O + A + 3) float32}``, ``ROW_KEYS`` columns (one device read), and with n > 1
        ``"window"``: the in-flight n-step window's (<= n - 1, E, 2O + A + 3) steps, oldest first."""
        state: dict[str, Any] = {"rows": self.replay.rows()}
        window = self.replay.window_steps()
        if window is not None:
            state["window"] = window
        return state

    def window_fill(self) -> int:
        """The steps in flight in the n-step window (0 with n = 1)."""
        return min(self.replay.window_fill, self.replay.n_step - 1)

    def load_buffer_state(self, state: dict[str, Any] | None) -> None:
        """The saved rows and n-step window (after ``load_state_dict``), or None: an empty replay (a new warm-up
        follows). A window of another n or env count, a missing one, or one whose envs start new episodes on
        resume restarts empty (with a warning when it drops saved steps)."""
        self.replay.load_rows(None if state is None else state["rows"])
        if state is None:
            return
        window = state.get("window")
        restart = self._restart_window
        if window is not None and (restart or self.replay.n_step == 1 or np.shape(window)[0] > self.replay.n_step - 1
                                   or np.shape(window)[1] != self.num_envs):
            print(f"warning: the saved n-step window {np.shape(window)} is not resumed (n_step={self.replay.n_step}, "
                  f"num_train_envs={self.num_envs}{', new episodes' if restart else ''}): it restarts empty",
                  file=sys.stderr, flush=True)
            window = None
        elif window is None and self.replay.n_step > 1:
            print(f"warning: the checkpoint has no n-step window (n_step={self.replay.n_step}): it restarts empty",
                  file=sys.stderr, flush=True)
        self.replay.load_window(window)

    def close(self) -> None:
        """Waits for a background compilation and the device (MJX envs are cached per process and stay; mjlab envs
        are closed)."""
        if self._precompiling is not None:
            self._precompiling.join()
            self._precompiling = None
        self._sync()
        for env in {id(self.train_env): self.train_env, id(self.eval_env): self.eval_env}.values():
            close = getattr(env, "close", None)
            if callable(close):
                close()


def make_vector_trainer(cfg: Config) -> TorchVectorTrainer:
    """``DeviceTrainerFactory`` of the torch agent: the envs (``_envs``), the agent and the trainer.

    Raises:
        ConfigError: ``agent.buffer_device_type=cpu`` (the replay rows live on the agent's device, with the envs),
            ``agent.device_type`` (or ``env.device``) naming a device that torch (or JAX, for MJX) cannot use, or a
            strict categorical-target backend that cannot run here; before any env step.
    """
    env_type = cfg.env.env_type
    if cfg.agent.buffer_device_type == "cpu":
        raise ConfigError(f"invalid value 'cpu' for 'agent.buffer_device_type': with env.env_type={env_type} the torch "
                          "agent keeps the replay rows on its device, with the envs; use auto or cuda")
    try:
        device = local_device(resolve_device(cfg.agent.device_type))
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"invalid value {cfg.agent.device_type!r} for 'agent.device_type': {exc}") from None
    train_env, eval_env = _envs(cfg, device)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (train_env.observation_size,), np.float32)
    act_space = gym.spaces.Box(train_env.action_low, train_env.action_high, dtype=np.float32)
    try:
        agent = strict_backend_as_config_error(make_agent, BackendUnavailable)(cfg, obs_space, act_space)
    except BaseException:
        for env in (train_env, eval_env):
            getattr(env, "close", lambda: None)()
        raise
    assert isinstance(agent, FlashSACAgent)  # on ``device``: it resolves agent.device_type the same way
    return TorchVectorTrainer(cfg, agent, train_env, eval_env)


def _envs(cfg: Config, device: torch.device) -> tuple[TorchVectorEnv, TorchVectorEnv]:
    """The simulator's training envs (seed ``seed``) and evaluation envs on ``device``: JAX envs (MJX, Playground;
    one per shape in a process) stepped through ``simulators.torch_view.TorchEnv``, the evaluation envs on another
    key stream of the seed; torch envs (mjlab) as they are, the evaluation envs seeded ``seed + 1``."""
    sim = simulator(cfg.env.env_type)
    seed = int(cfg.seed)
    if sim.ARRAYS == "jax":
        from simulators.torch_view import TorchEnv, jax_device_for

        try:  # JAX's view of the agent's device, before any env work
            jax_device_for(device)
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"invalid value {cfg.agent.device_type!r} for 'agent.device_type': {exc}") from None
        train = TorchEnv(make_device_env(cfg, int(cfg.num_train_envs), seed), device, seed)
        evaluation = TorchEnv(make_device_env(cfg, int(cfg.num_eval_envs), seed), device, seed,
                              stream=_EVAL_KEY_STREAM)
        return train, evaluation
    try:
        train = make_device_env(cfg, int(cfg.num_train_envs), seed, device)
    except ValueError as exc:  # a device the simulator cannot use here (its message names the key)
        raise ConfigError(str(exc)) from None
    try:
        evaluation = make_device_env(cfg, int(cfg.num_eval_envs), seed + _EVAL_KEY_STREAM, device)
    except BaseException:
        train.close()
        raise
    return train, evaluation
