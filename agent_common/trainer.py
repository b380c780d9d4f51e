"""What the training driver (``agent_common.driver``) calls: the ``Trainer`` protocol, one for every simulator.

Two steppers implement it: ``agent_common.host.HostStepper`` (gymnasium, DMC, MyoSuite: the envs step on the host,
the agent is an ``agent_common.protocol.Agent``) and ``agent_common.device.DeviceStepper`` (MJX, Playground, mjlab:
the envs, the replay rows and the updates stay on the device, stepped by the framework's
``agent_common.device.DeviceTrainer``). The driver does everything between their steps once: evaluation, logging,
checkpoints, stop signals, videos and the progress bar.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agent_common.keys import Config
from agent_common.replicas import Replicas

__all__ = ["Evaluation", "EvaluationCancelled", "Trainer", "TrainerFactory", "UpdateReport"]

UpdateReport = Callable[[int, float, "dict[str, float] | None"], None]
"""``report(count, seconds, metrics)``: a stepper ran ``count`` updates in ``seconds`` (the call that ran them);
``metrics`` are an update's own metrics when it returns them to the host (``Agent.update``), else None (the stepper
sums them where they are computed: ``Trainer.take_metrics``)."""


class EvaluationCancelled(Exception):  # noqa: N818 - a stop, not an error
    """Raised inside a background evaluation's policy call once the driver has cancelled it."""


@dataclass(frozen=True)
class Evaluation:
    """One evaluation, prepared by ``Trainer.evaluation`` with the policy as it was then.

    Attributes:
        run: ``run(cancelled) -> metrics``: plays the episodes (``avg_return``, ``avg_length``, ``avg_success_once``,
            ``avg_success_end``); raises ``EvaluationCancelled`` once ``cancelled()`` turns true.
        background: whether ``run`` may run on another thread while the stepper goes on (it acts with a copy of the
            policy and steps envs of its own); the driver runs the step-0 evaluation there.
    """

    run: Callable[[Callable[[], bool]], dict[str, float]]
    background: bool


class Trainer(Protocol):
    """A stepper: runs interaction steps (one step of every training env) and holds everything of the run that the
    driver does not: envs, agent, replay, exploration, their state in a checkpoint.

    Attributes:
        num_envs: env steps of one interaction step, all replicas together.
        steps_per_call: the most interaction steps one ``advance`` may run (the driver ends a call at every event).
        interaction_step: interaction steps run so far (a resumed run's included).
        num_updates: updates run so far.
        replay_rows: rows the replay holds.
        state_tag: ``driver`` entry of the loop state this stepper writes (None: none), checked before a load.
    """

    num_envs: int
    steps_per_call: int
    interaction_step: int
    num_updates: int
    state_tag: str | None

    @property
    def replay_rows(self) -> int: ...

    def advance(self, num_steps: int, report: UpdateReport) -> None:
        """Runs ``num_steps`` interaction steps (the random warm-up, then the policy with exploration noise and the
        due updates), reporting the updates it runs."""
        ...

    def can_sample(self) -> bool:
        """Whether the replay can sample (evaluation, logging and checkpoints happen from then on)."""
        ...

    def evaluation(self, num_episodes: int) -> Evaluation:
        """An evaluation of the deterministic policy as it is now, on the evaluation envs."""
        ...

    def take_metrics(self) -> dict[str, tuple[float, int]]:
        """The update metrics the stepper summed since the last call, ``{name: (sum, count)}``.

        Raises:
            FloatingPointError: a non-finite sum.
        """
        ...

    def info(self) -> dict[str, float | str]:
        """The agent's diagnostics (``Agent.info``: ``compile/path`` is printed once)."""
        ...

    def precompile(self) -> None:
        """Called once before the step-0 evaluation of a run with steps left: the training program may start
        compiling in the background."""
        ...

    def open_videos(self, cfg: Config, run_dir: str) -> Any:
        """The run's ``agent_common.video.RunVideos`` when ``record_video`` is on, else None.

        Raises:
            ConfigError: this stepper cannot record (the message names the key).
        """
        ...

    def video_player(self) -> Callable[..., Any]:
        """What ``RunVideos.record`` plays: the deterministic policy, or the device trainer's ``record_round``."""
        ...

    def start_from(self, path: str) -> str:
        """A new run from the weights at ``path`` (``agent_init_path``); returns the line for the log."""
        ...

    def save_agent(self, directory: str) -> None:
        """Writes the agent's files (the framework agent's ``save`` layout)."""
        ...

    def load_agent(self, directory: str, load_optimizer: bool) -> None:
        """Restores ``save_agent`` output."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything else an exact resume needs but the replay rows, as picklable host values (the loop state's
        entries: counters, RNGs, env states, noise, reward normaliser, the replay's ring index)."""
        ...

    def buffer_state(self) -> dict[str, Any]:
        """The replay rows for a checkpoint."""
        ...

    def load_state_dict(self, state: dict[str, Any], buffer: dict[str, Any] | None) -> None:
        """Restores ``state_dict`` and ``buffer_state`` output (``buffer`` None: the replay starts empty, its
        warm-up again).

        Raises:
            KeyError, TypeError, ValueError: a state that does not fit this run.
        """
        ...

    def close(self) -> None:
        """Releases envs and devices (called once, also after an error)."""
        ...


@dataclass(frozen=True)
class TrainerFactory:
    """How the driver builds a stepper, after the run directory is checked: ``build(cfg, replicas)``.

    Attributes:
        framework: the agent's framework (``"torch"`` / ``"jax"``; the device simulators check it), or None.
    """

    build: Callable[[Config, Replicas], Trainer]
    framework: str | None = None
