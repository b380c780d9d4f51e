"""The host stepper: gymnasium, DMC and MyoSuite envs stepped on the host, an ``agent_common.protocol.Agent``
acting and updating, the replay buffer, exploration noise and reward normaliser of ``agent_common`` (numpy), as
upstream's ``train.py`` (docs/flashsac.md). A ``Trainer`` for ``agent_common.driver``.

Per interaction step (``advance``): act (uniform random with a seeded RNG until the buffer holds
``buffer_min_length`` transitions, then the policy with zeta noise), step the envs, store the transition (the true
final observation where an episode ended), update the reward statistics; once the buffer can sample,
``updates_per_interaction_step`` updates (a fractional count accumulates). An agent that keeps the replay rows on its
device (``capabilities.device_replay``) does the step's device work in one call (``agent.step``: store, the due
updates, the next action); with ``agent.act_before_update`` the next action is dispatched before the step's updates.

Data-parallel replicas (``agent_common.replicas``): each has its own envs, buffer and host RNG streams (``seed + r``);
the evaluation envs keep ``seed``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np

from agent_common.buffer import ReplayBuffer
from agent_common.envs import evaluate, get_env_states, make_vec_env, set_env_states, step_env
from agent_common.keys import Config, ConfigError
from agent_common.noise import ZetaNoise
from agent_common.normalizer import RewardNormalizer
from agent_common.protocol import (
    Agent,
    AgentFactory,
    AsyncActingAgent,
    DeviceReplayAgent,
    PrecompilingAgent,
    SnapshotAgent,
    check_agent,
)
from agent_common.replicas import SINGLE, Replicas
from agent_common.runs.files import warn
from agent_common.seeding import BUFFER_STREAM, NOISE_STREAM, WARMUP_STREAM
from agent_common.trainer import Evaluation, EvaluationCancelled, TrainerFactory, UpdateReport
from agent_common.video import RunVideos, run_videos

__all__ = ["HostStepper", "evaluation_policy", "host_trainer"]


def evaluation_policy(agent: Agent) -> Callable[[np.ndarray], np.ndarray]:
    """The deterministic policy an evaluation acts with, taken at the call: a fresh ``policy_snapshot()`` where the
    agent has one (both agents' snapshots run on the host, beside the envs: no device round trip per action), else
    ``agent.act(obs, None)``."""
    if agent.capabilities.policy_snapshot:
        return cast(SnapshotAgent, agent).policy_snapshot()

    def policy(observation: np.ndarray) -> np.ndarray:
        return agent.act(observation, None)

    return policy


def _framework_of(agent: Any) -> str:
    """``"torch"`` / ``"jax"`` from the agent's package (``agent_torch`` / ``agent_jax``)."""
    return type(agent).__module__.split(".")[0].removeprefix("agent_")


class HostStepper:
    """The host stepper of one run (see the module doc).

    Args:
        cfg: the resolved config (a host simulator).
        make_agent: builds the framework agent for the envs' spaces.
        replicas: this process's place among data-parallel replicas.

    Raises:
        ConfigError: ``agent.act_before_update`` with several replicas, or for an agent without ``act_async``.
    """

    steps_per_call = 1
    state_tag = None

    def __init__(self, cfg: Config, make_agent: AgentFactory, replicas: Replicas = SINGLE) -> None:
        self.cfg = cfg
        self.replicas = replicas
        if cfg.agent.act_before_update and replicas.world_size > 1:
            raise ConfigError(f"agent.act_before_update=true is not supported with {replicas.world_size} "
                              "data-parallel replicas: drop the override or train in one process")
        seed = replicas.seed(cfg.seed)  # this replica's env and host RNG seed (cfg.seed with one replica)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        env_cfg = cfg.env
        self.local_envs = int(cfg.num_train_envs)  # this replica's training envs
        self.num_envs = self.local_envs * replicas.world_size  # env steps of one interaction step, all replicas
        self.train_envs = make_vec_env(env_cfg.env_name, self.local_envs, seed, env_cfg.rescale_action,
                                       env_cfg.max_episode_steps, env_cfg.env_type)
        self.eval_envs = make_vec_env(env_cfg.env_name, cfg.num_eval_envs, cfg.seed, env_cfg.rescale_action,
                                      env_cfg.max_episode_steps, env_cfg.env_type)
        try:
            obs, _ = self.train_envs.reset(seed=seed)
            self.eval_envs.reset(seed=cfg.seed)
            self.observation = np.asarray(obs, dtype=np.float32)  # (E, O)
            obs_space = self.train_envs.single_observation_space
            act_space = self.train_envs.single_action_space
            assert isinstance(obs_space, gym.spaces.Box) and isinstance(act_space, gym.spaces.Box)
            self.action_low = np.asarray(act_space.low, dtype=np.float32)  # (A,)
            self.action_high = np.asarray(act_space.high, dtype=np.float32)  # (A,)
            action_dim = int(act_space.shape[0])
            self.agent = make_agent(cfg, obs_space, act_space)
            check_agent(self.agent)
            a = cfg.agent
            # An agent that keeps the replay rows itself (device buffer) also does the step's device work in ``step``
            storage = (cast(DeviceReplayAgent, self.agent).replay_storage(a.buffer_max_length)
                       if self.agent.capabilities.device_replay else None)
            self.fused = storage is not None
            self.act_before_update = bool(a.act_before_update)
            if self.act_before_update and not self.agent.capabilities.act_async:
                raise ConfigError(f"agent.act_before_update=true needs an agent with act_async; "
                                  f"{type(self.agent).__name__} has none: drop the override")
        except BaseException:
            self.close()
            raise
        self.next_action: np.ndarray | None = None  # (E, A) computed by the previous ``agent.step``
        # agent.act_before_update: the next action, dispatched before this step's updates and not yet read
        self.pending_action: Callable[[], np.ndarray] | None = None
        self.buffer = ReplayBuffer(int(obs_space.shape[0]), action_dim, a.buffer_max_length, a.buffer_min_length,
                                   cfg.n_step, cfg.gamma, seed=[seed, BUFFER_STREAM], storage=storage)
        self.normalizer = RewardNormalizer(cfg.gamma, a.normalized_G_max, enabled=a.normalize_reward)
        self.noise = ZetaNoise(self.local_envs, action_dim, a.actor_noise_zeta_mu, a.actor_noise_zeta_max,
                               seed=[seed, NOISE_STREAM])
        self.warmup_rng = np.random.Generator(np.random.PCG64([seed, WARMUP_STREAM]))
        self.interaction_step = 0
        self.update_counter = 0.0
        self.num_updates = 0
        self.eval_envs_before_last_eval: list[dict[str, Any]] | None = None  # replayed by agent_*.evaluate

    @property
    def replay_rows(self) -> int:
        return len(self.buffer)

    # ----------------------------------------------------------------------------------------- steps
    def advance(self, num_steps: int, report: UpdateReport) -> None:
        """Runs ``num_steps`` interaction steps (see the module doc), reporting each update call."""
        for _ in range(num_steps):
            self.interaction_step += 1
            self._collect()
            if self.fused:
                self._step_agent(report)  # one agent call: store, update(s), next action
            elif self.buffer.can_sample():
                if self.act_before_update:
                    self._dispatch_next_action()  # the next action, before this step's updates
                self._update(report)  # the due updates on batches sampled here

    def can_sample(self) -> bool:
        return self.buffer.can_sample()

    def _collect(self) -> None:
        """Acts, steps the training envs and stores the transition; updates the reward statistics."""
        action = self._act()  # (E, A)
        result = step_env(self.train_envs, action)
        self.buffer.add(self.observation, action, result.reward, result.terminated, result.truncated,
                        result.next_observation)
        self.normalizer.update(result.reward, result.terminated, result.truncated)
        self.observation = result.reset_observation  # (E, O)

    def _act(self) -> np.ndarray:
        """Training action: the policy with zeta-repeated noise once the buffer can sample, else uniform random
        (with ``agent.step`` or ``agent.act_before_update``: the action computed in the previous step)."""
        self._read_pending_action()
        if self.next_action is not None:
            action, self.next_action = self.next_action, None
            return action  # (E, A)
        if self.buffer.can_sample():
            return self.agent.act(self.observation, self.noise.sample())  # (E, A)
        return self.warmup_rng.uniform(
            self.action_low, self.action_high, size=(self.local_envs, self.action_low.shape[0])
        ).astype(np.float32)  # (E, A)

    def _read_pending_action(self) -> None:
        """Waits for the action ``_dispatch_next_action`` dispatched (that action alone) and keeps it as
        ``next_action``; nothing when none is pending."""
        if self.pending_action is not None:
            self.next_action, self.pending_action = self.pending_action(), None

    def _dispatch_next_action(self) -> None:
        """``agent.act_before_update``: dispatches the policy action for ``self.observation`` (its noise drawn now)
        with the parameters as they are before this step's updates; ``_act`` reads it in the next step."""
        self.pending_action = cast(AsyncActingAgent, self.agent).act_async(self.observation, self.noise.sample())

    def _step_agent(self, report: UpdateReport) -> None:
        """The agent's fused step (``agent.step``): store the rows just added, run the due updates, and compute the
        next action on ``self.observation`` (its noise drawn now) once the buffer can sample; with
        ``agent.act_before_update`` that action is dispatched before the step (``_dispatch_next_action``)."""
        due = 0
        if self.buffer.can_sample():
            self.update_counter += self.cfg.updates_per_interaction_step
            while self.update_counter >= 1.0:
                self.update_counter -= 1.0
                due += 1
        t0 = time.perf_counter()
        if self.act_before_update and self.buffer.can_sample():
            self._dispatch_next_action()
            noise = None
        else:
            noise = self.noise.sample() if self.buffer.can_sample() else None
        scale = self.normalizer.scale() if self.normalizer.enabled else 1.0
        action = cast(DeviceReplayAgent, self.agent).step(self.observation, noise, due, scale)
        if due:
            report(due, time.perf_counter() - t0, None)
        if not self.act_before_update:
            self.next_action = action
        self.num_updates += due

    def _update(self, report: UpdateReport) -> None:
        """The due updates (fractional UTD accumulates), each on a batch sampled from the buffer here."""
        cfg = self.cfg
        self.update_counter += cfg.updates_per_interaction_step
        while self.update_counter >= 1.0:
            batch = self.buffer.sample(cfg.agent.sample_batch_size * cfg.num_devices)  # jax: N devices
            batch["reward"] = self.normalizer.normalize(batch["reward"])  # (B,)
            t0 = time.perf_counter()
            metrics = self.agent.update(batch)
            report(1, time.perf_counter() - t0, metrics)
            self.update_counter -= 1.0
            self.num_updates += 1

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        """The metrics the agent's fused step summed on the device (a read-back); {} for ``agent.update``, whose
        metrics come with each update's report."""
        if not self.fused:
            return {}
        return cast(DeviceReplayAgent, self.agent).take_metrics()

    def info(self) -> dict[str, float | str]:
        return self.agent.info()

    def precompile(self) -> None:
        """The first updates' programs compile during the evaluation and the warm-up (an agent with the device
        replay and ``precompile_step``)."""
        if self.fused and self.agent.capabilities.precompile_step:
            cast(PrecompilingAgent, self.agent).precompile_step(self.local_envs)

    # ----------------------------------------------------------------------------------------- evaluation, videos
    def evaluation(self, num_episodes: int) -> Evaluation:
        """The deterministic policy on the evaluation envs (``evaluation_policy``, taken now). With a policy
        snapshot it may run on another thread while the steps go on: it steps only the evaluation envs and draws
        from no RNG the training uses, so what it returns does not depend on when it runs. Tests hold it on its
        thread by replacing this module's ``evaluate`` (tests/test_runs.py: until given training steps or the first
        update)."""
        policy = evaluation_policy(self.agent)
        envs = self.eval_envs
        self.eval_envs_before_last_eval = get_env_states(envs)

        def run(cancelled: Callable[[], bool]) -> dict[str, float]:
            def act(observation: np.ndarray) -> np.ndarray:
                if cancelled():
                    raise EvaluationCancelled
                return policy(observation)

            return evaluate(act, envs, num_episodes)

        return Evaluation(run, background=self.agent.capabilities.policy_snapshot)

    def open_videos(self, cfg: Config, run_dir: str) -> RunVideos | None:
        return run_videos(cfg, run_dir)

    def video_player(self) -> Callable[[np.ndarray], np.ndarray]:
        return evaluation_policy(self.agent)

    # ----------------------------------------------------------------------------------------- weights and state
    def start_from(self, path: str) -> str:
        """A new run from the weights at ``path`` (``agent_init_path``): the agent's ``start_from`` (weights, with
        ``agent_init_optimizer`` the Adam state; fresh update counter, LR schedule and RNG), and with
        ``agent_init_reward_normalizer`` the source's reward normaliser. The rest stays this run's own.

        Returns:
            One line for the run's log naming the source and what was taken from it.
        """
        from agent_common.runs.start_from import resolve_init_source

        source = resolve_init_source(path, _framework_of(self.agent))
        self.agent.start_from(source.agent_dir, load_optimizer=self.cfg.agent_init_optimizer)  # type: ignore[attr-defined]
        taken = ["weights"] + (["optimizer state"] if self.cfg.agent_init_optimizer else [])
        if self.cfg.agent_init_reward_normalizer:
            state = source.normalizer_state()
            if state is None:
                warn(f"agent_init_path={path} has no reward normaliser state; this run's normaliser starts fresh")
            else:
                self.normalizer.load_state_dict(state)
                taken.append("reward normaliser")
        return (f"new run started from {', '.join(taken)} of {source.agent_dir} (agent_init_path={path}); update "
                "counter, LR schedule, replay buffer and loop state start fresh")

    def save_agent(self, directory: str) -> None:
        self.agent.save(directory)

    def load_agent(self, directory: str, load_optimizer: bool) -> None:
        self.agent.load(directory, load_optimizer=load_optimizer)

    def state_dict(self) -> dict[str, Any]:
        self._read_pending_action()  # the checkpoint holds it as ``next_action``
        return {
            "interaction_step": self.interaction_step,
            "update_counter": self.update_counter,
            "num_updates": self.num_updates,
            "observation": self.observation.copy(),
            "python_random": random.getstate(),
            "numpy_global": np.random.get_state(),
            "warmup_rng": self.warmup_rng.bit_generator.state,
            "noise": self.noise.state_dict(),
            "reward_normalizer": self.normalizer.state_dict(),
            "buffer": self.buffer.state_dict(include_data=False),
            "train_envs": get_env_states(self.train_envs),
            "eval_envs": get_env_states(self.eval_envs),
            "eval_envs_before_last_eval": self.eval_envs_before_last_eval,
            "next_action": None if self.next_action is None else self.next_action.copy(),
        }

    def buffer_state(self) -> dict[str, Any]:
        return self.buffer.state_dict(include_data=True)

    def load_state_dict(self, state: dict[str, Any], buffer: dict[str, Any] | None) -> None:
        self.interaction_step = int(state["interaction_step"])
        self.update_counter = float(state["update_counter"])
        self.num_updates = int(state["num_updates"])
        self.observation = np.asarray(state["observation"], dtype=np.float32)  # (E, O)
        random.setstate(state["python_random"])
        np.random.set_state(state["numpy_global"])
        self.warmup_rng.bit_generator.state = state["warmup_rng"]
        self.noise.load_state_dict(state["noise"])
        if self.cfg.agent.load_reward_normalizer:
            self.normalizer.load_state_dict(state["reward_normalizer"])
        self.buffer.load_state_dict(buffer if buffer is not None else state["buffer"])
        set_env_states(self.train_envs, state["train_envs"])
        set_env_states(self.eval_envs, state["eval_envs"])
        self.eval_envs_before_last_eval = state.get("eval_envs_before_last_eval")
        # The action the agent's step already computed for the next env step (its noise is drawn); without the
        # buffer the run starts its warm-up again and acts at random.
        next_action = (state.get("next_action") if (self.fused or self.act_before_update) and buffer is not None
                       else None)
        self.next_action = None if next_action is None else np.asarray(next_action, dtype=np.float32)

    def close(self) -> None:
        """Closes the envs."""
        for envs in (getattr(self, "train_envs", None), getattr(self, "eval_envs", None)):
            if envs is not None:
                envs.close()


def host_trainer(make_agent: AgentFactory | Callable[[], AgentFactory], lazy: bool = False,
                 framework: str | None = None) -> TrainerFactory:
    """The ``TrainerFactory`` of ``HostStepper`` over ``make_agent`` (with ``lazy``: a function that imports and
    returns the factory, called once the run directory is checked: the framework is imported then)."""

    def build(cfg: Config, replicas: Replicas) -> HostStepper:
        factory = cast(Callable[[], AgentFactory], make_agent)() if lazy else cast(AgentFactory, make_agent)
        return HostStepper(cfg, factory, replicas)

    return TrainerFactory(build, framework)
