"""The device stepper: MJX, Playground and mjlab envs, the replay rows and the updates on the agent's device,
stepped by the framework's ``DeviceTrainer`` (``agent_jax.vector``, ``agent_torch.vector``) in chunks of interaction
steps without the host. A ``Trainer`` for ``agent_common.driver``.

One interaction step is one step of every env (``num_train_envs`` env steps), as in the config's intervals. A call is
at most ``interaction_steps_per_call(cfg)`` steps (the driver ends one at every event). The stepper mirrors the
replay's fill on the host (``num_train_envs`` rows per step, up to ``agent.buffer_max_length``; with ``n_step`` n > 1
the first n − 1 steps of a window store nothing), so it knows which steps ran updates without reading the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from agent_common.keys import Config, ConfigError
from agent_common.replicas import Replicas
from agent_common.trainer import Evaluation, TrainerFactory, UpdateReport
from agent_common.video import RunVideos, recording_on, run_videos

__all__ = ["DRIVER", "MAX_STEPS_PER_CALL", "DeviceStepper", "DeviceTrainer", "DeviceTrainerFactory",
           "device_trainer", "interaction_steps_per_call"]

DRIVER = "mjx"
"""``loop_state.pkl``'s ``driver`` entry of a device stepper's checkpoint."""

MAX_STEPS_PER_CALL = 64
"""The most interaction steps of one ``advance`` call when ``interaction_steps_per_call`` is null."""


class DeviceTrainer(Protocol):
    """What a framework provides for the device simulators (``agent_jax.vector``, ``agent_torch.vector``): the envs,
    the replay rows and the updates on its device, stepped in chunks without the host.

    Attributes:
        num_envs: E, the training envs (``num_train_envs``).
    """

    num_envs: int

    def advance(self, num_steps: int) -> None:
        """Runs ``num_steps`` interaction steps (1 <= num_steps <= ``interaction_steps_per_call(cfg)``) and returns
        when they are done. Each step: the action (uniform random in the action bounds while the replay holds fewer
        than ``agent.buffer_min_length`` rows before this step's rows, else the policy with zeta-repeated noise),
        the env step, the E rows stored (``agent_common.buffer.ROW_KEYS``: the true final observation as the
        successor; with ``n_step`` n > 1 the n-step rows of the step n − 1 steps back, once n steps were taken, with
        ``agent_common.buffer.ReplayBuffer``'s rule, the n − 1 newest steps in flight), the reward normaliser
        updated (per-env running return, ``agent_common.normalizer``), then,
        once the replay holds ``buffer_min_length`` rows, ``updates_per_interaction_step`` updates on batches
        sampled on the device (rewards divided by the normaliser's scale; actor and temperature every
        ``actor_update_period``-th update of the run)."""
        ...

    def evaluate(self, num_episodes: int) -> dict[str, float]:
        """The deterministic policy on the evaluation envs (``num_eval_envs``): ``num_episodes //
        num_eval_envs`` rounds, each from a fresh reset until every env has finished once, returns counted up to
        each env's first end (as ``agent_common.envs.evaluate``). Keys ``avg_return``, ``avg_length``,
        ``avg_success_once``, ``avg_success_end``."""
        ...

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        """The update metrics since the last call, ``{name: (sum, count)}`` (upstream names); resets the sums.

        Raises:
            FloatingPointError: a non-finite sum.
        """
        ...

    def info(self) -> dict[str, float | str]:
        """As ``Agent.info``: ``backend/*`` and ``compile/path`` (printed once as the ``compute path:`` line)."""
        ...

    def save_agent(self, directory: str) -> None:
        """Writes the agent's files (the framework agent's ``save`` layout)."""
        ...

    def load_agent(self, directory: str, load_optimizer: bool) -> None:
        """Restores ``save_agent`` output."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything else a bitwise resume needs but the replay rows, as picklable host values: env state, keys
        or generators, noise, reward normaliser, counters, the replay's ring index, size and sampler state."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict`` output (the reward normaliser only if ``agent.load_reward_normalizer``)."""
        ...

    def buffer_state(self) -> dict[str, Any]:
        """The replay rows for a checkpoint (``rows``: (size, 2O + A + 3) float32 in ``ROW_KEYS`` columns)."""
        ...

    def load_buffer_state(self, state: dict[str, Any] | None) -> None:
        """Restores ``buffer_state`` output after ``load_state_dict``; None empties the replay (a checkpoint
        without rows: the warm-up starts again)."""
        ...

    def close(self) -> None:
        """Releases what the trainer holds (called once, also after an error)."""
        ...

    # Needed with ``n_step`` > 1: ``window_fill() -> int``, the steps in flight in the n-step window (0 .. n − 1;
    # read after ``load_buffer_state``, which may restart the window empty).
    # Optional: ``precompile() -> None``, called once before the initial evaluation of a run that has steps left:
    # starts compiling the training program in the background (the first ``advance`` waits for it).
    # Needed by ``record_video``: ``recording_model() -> (MjModel, seconds per step)`` and
    # ``record_round(num_envs, num_steps, index) -> {"qpos", "alive", "returns", "finished"}``, one round of the
    # deterministic policy on copies of the evaluation envs from the recording key folded with ``index`` (the same
    # round for the same index), at most ``num_steps`` steps; only the first ``num_envs`` envs' joint positions
    # reach the host (``agent_common.video.VectorRecorder`` renders them).


DeviceTrainerFactory = Callable[[Config], DeviceTrainer]
"""``make_vector_trainer(cfg) -> DeviceTrainer``; raises ``ConfigError`` for a config it cannot run, before work."""


def interaction_steps_per_call(cfg: Config) -> int:
    """K, the most interaction steps of one ``advance`` call: ``interaction_steps_per_call``, or when null the
    logging interval L cut into equal calls of at most ``MAX_STEPS_PER_CALL`` steps, ceil(L / ceil(L / 64))."""
    if cfg.interaction_steps_per_call is not None:
        return int(cfg.interaction_steps_per_call)
    every = max(1, int(cfg.logging_per_interaction_step or 1))
    calls = -(-every // MAX_STEPS_PER_CALL)
    return -(-every // calls)


class DeviceStepper:
    """The device stepper of one run over a framework's ``DeviceTrainer`` (see the module doc).

    Args:
        cfg: the resolved config (a device simulator).
        trainer: the framework's trainer for it.
        framework: the agent's framework, for the messages.
    """

    state_tag = DRIVER

    def __init__(self, cfg: Config, trainer: DeviceTrainer, framework: str | None = None) -> None:
        self.cfg = cfg
        self.trainer = trainer
        self.framework = framework
        self.num_envs = int(trainer.num_envs)
        self.steps_per_call = interaction_steps_per_call(cfg)
        self.capacity = int(cfg.agent.buffer_max_length)
        self.min_rows = int(cfg.agent.buffer_min_length)
        self.updates_per_step = int(cfg.updates_per_interaction_step)
        self.n_step = int(cfg.n_step)
        self.interaction_step = 0
        self.num_updates = 0
        self.rows = 0  # rows the trainer's replay holds (host mirror)
        self.window_fill = 0  # steps in the trainer's n-step window, not stored yet (host mirror, <= n_step - 1)

    @property
    def replay_rows(self) -> int:
        return self.rows

    def advance(self, num_steps: int, report: UpdateReport) -> None:
        """Runs ``num_steps`` interaction steps in one trainer call; reports its updates (counted on the host
        mirror) with the call's wall time."""
        rows, updates, fill = self.rows, 0, self.window_fill
        for _ in range(num_steps):
            if fill < self.n_step - 1:  # the step enters the n-step window; nothing is stored yet
                fill += 1
            else:
                rows = min(self.capacity, rows + self.num_envs)
            if rows >= self.min_rows:
                updates += self.updates_per_step
        t0 = time.perf_counter()
        self.trainer.advance(num_steps)
        seconds = time.perf_counter() - t0
        self.interaction_step += num_steps
        self.rows, self.window_fill = rows, fill
        self.num_updates += updates
        if updates:
            report(updates, seconds, None)

    def can_sample(self) -> bool:
        return self.rows >= self.min_rows

    def evaluation(self, num_episodes: int) -> Evaluation:
        """The trainer's evaluation (device work: never beside the steps)."""
        return Evaluation(lambda cancelled: self.trainer.evaluate(num_episodes), background=False)

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        return self.trainer.take_metrics()

    def info(self) -> dict[str, float | str]:
        return self.trainer.info()

    def precompile(self) -> None:
        precompile = getattr(self.trainer, "precompile", None)
        if callable(precompile):
            precompile()  # the training program compiles during the initial evaluation

    def open_videos(self, cfg: Config, run_dir: str) -> RunVideos | None:
        if recording_on(cfg) and not callable(getattr(self.trainer, "record_round", None)):
            raise ConfigError(f"record_video=true: the {self.framework} trainer of env.env_type={cfg.env.env_type} "
                              "cannot record evaluation videos (no record_round); set record_video=false")
        return run_videos(cfg, run_dir, self.trainer)  # None: no renderer is ever created

    def video_player(self) -> Callable[..., Any]:
        return self.trainer.record_round  # type: ignore[attr-defined]

    def start_from(self, path: str) -> str:
        raise ConfigError(f"agent_init_path={path}: starting from weights is wired into the host stepper, not into "
                          f"the device steppers (env.env_type={self.cfg.env.env_type}) yet")

    def save_agent(self, directory: str) -> None:
        self.trainer.save_agent(directory)

    def load_agent(self, directory: str, load_optimizer: bool) -> None:
        self.trainer.load_agent(directory, load_optimizer)

    def state_dict(self) -> dict[str, Any]:
        return {"driver": DRIVER, "interaction_step": self.interaction_step, "replay_rows": self.rows,
                "num_updates": self.num_updates, "trainer": self.trainer.state_dict()}

    def buffer_state(self) -> dict[str, Any]:
        return self.trainer.buffer_state()

    def load_state_dict(self, state: dict[str, Any], buffer: dict[str, Any] | None) -> None:
        self.trainer.load_state_dict(state["trainer"])
        self.trainer.load_buffer_state(buffer)
        self.interaction_step = int(state["interaction_step"])
        self.rows = int(state["replay_rows"]) if buffer is not None else 0
        self.window_fill = int(self.trainer.window_fill()) if self.n_step > 1 else 0  # type: ignore[attr-defined]
        self.num_updates = int(state["num_updates"])

    def close(self) -> None:
        self.trainer.close()


def device_trainer(make_trainer: DeviceTrainerFactory | Callable[[], DeviceTrainerFactory], framework: str | None,
                   lazy: bool = False) -> TrainerFactory:
    """The ``TrainerFactory`` of ``DeviceStepper`` over ``make_trainer`` (with ``lazy``: a function that imports
    and returns it, called once the run directory is checked); ``framework``: the agent's."""

    def build(cfg: Config, replicas: Replicas) -> DeviceStepper:
        if replicas.world_size > 1:
            raise ConfigError(f"env.env_type={cfg.env.env_type} runs in one process (got {replicas.world_size} "
                              "replicas): the envs, the replay and the update share one device; start it without "
                              "torchrun")
        factory = make_trainer() if lazy else make_trainer  # type: ignore[call-arg]
        return DeviceStepper(cfg, factory(cfg), framework)  # type: ignore[operator]

    return TrainerFactory(build, framework)
