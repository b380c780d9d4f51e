"""Evaluation videos: deterministic episodes of the policy on rendering envs of their own, written as MP4 files.

A ``VideoRecorder`` exists only when ``record_video`` is on (``recording_on``): a run without it builds no rendering
env and no OpenGL context. The recorder's envs are separate from the training and evaluation envs (upstream's
"record" env), seeded with ``seed + i``, so recording changes neither the training nor the evaluation returns.

Each video holds ``max(num_record_episodes // num_record_envs, 1)`` rounds; in a round every one of the
``num_record_envs`` envs plays one episode, side by side (an env that has finished keeps its last frame until all
have). A frame is rendered before each action (upstream's ``record_video``), so an episode of L steps gives L frames,
and a video is capped at ``MAX_FRAMES`` frames. A gymnasium task is filmed through its own ``render`` from its
tracking camera (``track``); a DMC task (dm_control through shimmy) or a MyoSuite task with ``MujocoCamera``
(gymnasium's offscreen renderer on the task's physics) from ``tracking_camera``: the first camera that follows a
body's centre of mass, else the task's first camera. Headless rendering needs ``MUJOCO_GL=egl`` (a GPU) or
``MUJOCO_GL=osmesa`` (Debian: ``libosmesa6``).

The recorder's schedule and its envs' states are part of a run's checkpoint (``RunVideos.state_dict``), so a resumed
run records at the same interaction steps, from the same env states, as the run that was not interrupted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import mujoco
import numpy as np

from agent_common.envs import HOST_ENV_TYPES, make_env
from agent_common.keys import Config, ConfigError
from simulators import simulator

__all__ = ["MAX_FRAMES", "RECORDING_ENV_TYPES", "TRACKING_CAMERA", "MujocoCamera", "RunVideos", "VectorRecorder",
           "VideoRecorder", "read_video_frames", "recording_on", "run_videos", "tracking_camera", "write_mp4"]

MAX_FRAMES = 1000
"""Most frames in one video (upstream's ``video_length``)."""

TRACKING_CAMERA = "track"
"""The camera gym-MuJoCo models define to follow the agent's torso."""

RECORDING_ENV_TYPES: tuple[str, ...] = HOST_ENV_TYPES
"""The env types ``VideoRecorder`` films (the host simulators)."""


def recording_on(cfg: Config) -> bool:
    """Whether ``cfg`` records evaluation videos: ``record_video`` with at least one env and one episode."""
    return bool(cfg.record_video) and cfg.num_record_envs > 0 and cfg.num_record_episodes > 0


def _use_tracking_camera(env: object) -> str | None:
    """Points the env's renderer at the tracking camera where the model has one; returns the camera's name."""
    base = env.unwrapped  # type: ignore[attr-defined]
    camera = mujoco.mj_name2id(base.model, mujoco.mjtObj.mjOBJ_CAMERA, TRACKING_CAMERA)
    if camera < 0:
        return None
    base.mujoco_renderer.camera_id = camera
    base.mujoco_renderer.camera_name = None
    return TRACKING_CAMERA


def tracking_camera(model: mujoco.MjModel) -> int:
    """The camera that follows the agent: the one named ``track``, else the first whose mode follows a body's centre
    of mass (``mjCAMLIGHT_TRACKCOM``: cheetah, walker, hopper, humanoid, quadruped, swimmer, fish, dog), else the
    model's first camera (a fixed view of a task whose agent stays in place), else -1 (MuJoCo's free camera)."""
    named = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, TRACKING_CAMERA)
    if named >= 0:
        return int(named)
    follows = np.flatnonzero(np.asarray(model.cam_mode) == int(mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM))
    if len(follows):
        return int(follows[0])
    return 0 if model.ncam > 0 else -1


class MujocoCamera:
    """Renders one ``MjData`` of ``model`` from ``tracking_camera(model)`` with gymnasium's ``OffScreenViewer`` (the
    renderer of the gymnasium tasks, which picks its OpenGL backend from ``MUJOCO_GL`` when it is built).

    Args:
        model: the MuJoCo model.
        data: the state to film (read at every ``render``).
        size: frame width and height in pixels (at most the model's offscreen buffer, ``vis.global_.offwidth`` ×
            ``offheight``: 640 × 480 in the DMC suite).

    Raises:
        ConfigError: ``size`` exceeds the model's offscreen buffer.

    Attributes:
        camera: the camera's name (``"free"`` for -1, ``"camera<id>"`` for an unnamed one).
    """

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, size: int) -> None:
        from gymnasium.envs.mujoco.mujoco_rendering import OffScreenViewer

        limit = (int(model.vis.global_.offwidth), int(model.vis.global_.offheight))
        if size > min(limit):
            raise ConfigError(f"record_size={size} is larger than the model's offscreen buffer {limit[0]}x{limit[1]}: "
                              f"set record_size <= {min(limit)}")
        self.camera_id = tracking_camera(model)
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, self.camera_id) if self.camera_id >= 0 else "free"
        self.camera = name or f"camera{self.camera_id}"
        self.viewer = OffScreenViewer(model, data, size, size)

    def render(self) -> np.ndarray:
        """The current frame, (size, size, 3) uint8."""
        return np.asarray(self.viewer.render("rgb_array", self.camera_id), dtype=np.uint8)

    def close(self) -> None:
        self.viewer.close()


def render_error(what: str, exc: Exception) -> ConfigError:
    """The one-line error for a renderer that failed to start (``what``: the task's name and a space, or empty),
    naming the OpenGL backend setting and the next step."""
    backend = os.environ.get("MUJOCO_GL", "<unset: glfw, which needs a display>")
    return ConfigError(
        f"record_video=true cannot render {what}with MUJOCO_GL={backend} ({type(exc).__name__}: "
        f"{' '.join(str(exc).split())[:200]}). Set MUJOCO_GL=egl (GPU) or MUJOCO_GL=osmesa (apt-get install "
        "libosmesa6), or record_video=false"
    )


def write_mp4(path: str, frames: np.ndarray, fps: int) -> str:
    """Writes (T, H, W, 3) uint8 frames as an H.264 MP4 (imageio-ffmpeg) atomically; returns ``path``."""
    import imageio.v2 as imageio  # the video extra

    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) == 0:
        raise ValueError(f"frames must be (T>0, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp.mp4"
    writer = imageio.get_writer(tmp, fps=fps, codec="libx264", macro_block_size=1, quality=7,
                                ffmpeg_log_level="error")
    try:
        for frame in frames:
            writer.append_data(frame)
    finally:
        writer.close()
    os.replace(tmp, path)
    return path


def read_video_frames(path: str) -> np.ndarray:
    """Decodes an MP4 into (T, H, W, 3) uint8 frames (for checks and tests)."""
    import imageio.v2 as imageio

    reader = imageio.get_reader(path)
    try:
        return np.stack([np.asarray(frame) for frame in reader])
    finally:
        reader.close()


class VideoRecorder:
    """Deterministic evaluation episodes on ``num_envs`` rendering envs, written to ``<out_dir>/*.mp4``.

    Args:
        env_name: the task (``env.env_name``).
        num_envs: envs filmed side by side.
        seed: env ``i`` is seeded with ``seed + i`` at its first reset.
        rescale_action: as ``make_env``.
        max_episode_steps: as ``make_env``.
        size: frame width and height of one env, in pixels.
        out_dir: where the MP4 files go (created on the first write).
        max_frames: most frames in one video.
        env_type: one of ``RECORDING_ENV_TYPES``.

    Raises:
        ConfigError: no OpenGL backend can render here (the message says which ``MUJOCO_GL`` to set), or ``size``
            exceeds a DMC model's offscreen buffer.

    Attributes:
        camera: the camera filmed (``"track"`` for a gymnasium task that has it, None for its default free camera;
            ``MujocoCamera.camera`` for a DMC task).
        fps: frames per second of the videos (real time: 1 / the env's control step).
        seconds: wall time spent recording and encoding so far.
    """

    def __init__(self, env_name: str, num_envs: int, seed: int, rescale_action: bool, max_episode_steps: int | None,
                 size: int, out_dir: str, max_frames: int = MAX_FRAMES, env_type: str = "mujoco") -> None:
        if num_envs < 1 or max_frames < 1:
            raise ValueError(f"num_envs and max_frames must be >= 1, got {num_envs}, {max_frames}")
        if env_type not in RECORDING_ENV_TYPES:
            raise ValueError(f"env_type: expected one of {', '.join(RECORDING_ENV_TYPES)}, got {env_type!r}")
        start = time.perf_counter()
        self.out_dir = out_dir
        self.max_frames = max_frames
        gym_render = bool(simulator(env_type).RENDERS_ITSELF)
        self.envs = [make_env(env_name, seed + i, rescale_action, max_episode_steps, i, env_type=env_type,
                              render_size=size if gym_render else None)
                     for i in range(num_envs)]
        self.cameras: list[MujocoCamera] = []
        self._observations = [np.asarray(env.reset(seed=seed + i)[0], dtype=np.float32)
                              for i, env in enumerate(self.envs)]
        try:
            if gym_render:
                self.camera = _use_tracking_camera(self.envs[0])
                for env in self.envs[1:]:
                    _use_tracking_camera(env)
            else:
                for env in self.envs:
                    self.cameras.append(MujocoCamera(*env.model_data(), size))
                self.camera = self.cameras[0].camera
            self._frame(0)  # creates the OpenGL context now, before any training work
        except ConfigError:
            self.close()
            raise
        except Exception as exc:  # noqa: BLE001  any backend failure becomes one line naming the setting
            self.close()
            raise render_error(f"{env_name} ", exc) from None
        self.fps = max(1, round(1.0 / self.envs[0].control_timestep()))
        self.seconds = time.perf_counter() - start

    @classmethod
    def from_config(cls, cfg: Config, run_dir: str) -> VideoRecorder:
        """The recorder ``cfg`` asks for, writing to ``<run_dir>/videos``."""
        env = cfg.env
        return cls(env.env_name, cfg.num_record_envs, cfg.seed, env.rescale_action, env.max_episode_steps,
                   cfg.record_size, os.path.join(run_dir, "videos"), env_type=env.env_type)

    def _frame(self, i: int) -> np.ndarray:
        """Env ``i``'s current frame, (H, W, 3) uint8."""
        if self.cameras:
            return self.cameras[i].render()
        return np.asarray(self.envs[i].render(), dtype=np.uint8)

    def state_dict(self) -> dict[str, object]:
        """The envs' snapshots (``EnvSnapshot``) and the observations the next round starts from."""
        return {"envs": [env.get_snapshot() for env in self.envs],
                "observations": [obs.copy() for obs in self._observations]}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restores ``state_dict`` output of a recorder with as many envs.

        Raises:
            ValueError: a different env count.
        """
        snapshots, observations = list(state["envs"]), list(state["observations"])  # type: ignore[call-overload]
        if len(snapshots) != len(self.envs) or len(observations) != len(self.envs):
            raise ValueError(f"the recorder state has {len(snapshots)} envs, this run records {len(self.envs)} "
                             "(num_record_envs)")
        for env, snapshot in zip(self.envs, snapshots, strict=True):
            env.set_snapshot(snapshot)
        self._observations = [np.asarray(obs, dtype=np.float32) for obs in observations]

    def record(self, act: Callable[[np.ndarray], np.ndarray], num_episodes: int) -> tuple[np.ndarray, list[float]]:
        """Plays ``max(num_episodes // num_envs, 1)`` rounds with ``act`` ((n, O) float32 -> (n, A)).

        Returns:
            (frames, returns): (T, H, n*W, 3) uint8 frames, T <= ``max_frames``, and each finished episode's return
            (an episode cut by the frame cap is not counted).
        """
        start = time.perf_counter()
        n = len(self.envs)
        frames: list[np.ndarray] = []
        returns: list[float] = []
        for _ in range(max(num_episodes // n, 1)):
            if len(frames) >= self.max_frames:
                break
            obs = np.stack(self._observations)  # (n, O)
            done = np.zeros(n, dtype=bool)
            ret = np.zeros(n, dtype=np.float64)
            last: list[np.ndarray] = [np.empty(0)] * n
            while not done.all() and len(frames) < self.max_frames:
                for i in np.flatnonzero(~done):
                    last[i] = self._frame(i)  # (H, W, 3)
                frames.append(np.concatenate(last, axis=1))  # (H, n*W, 3)
                action = np.asarray(act(obs), dtype=np.float32)  # (n, A)
                for i in np.flatnonzero(~done):
                    o, r, terminated, truncated, _ = self.envs[i].step(action[i])
                    obs[i] = np.asarray(o, dtype=np.float32)
                    ret[i] += float(r)
                    done[i] = bool(terminated or truncated)
            if done.all():
                returns.extend(ret.tolist())
            self._observations = [np.asarray(env.reset()[0], dtype=np.float32) for env in self.envs]
        self.seconds += time.perf_counter() - start
        return np.stack(frames), returns

    def write(self, frames: np.ndarray, name: str) -> str:
        """Encodes ``frames`` to ``<out_dir>/<name>.mp4``; returns the path."""
        start = time.perf_counter()
        path = write_mp4(os.path.join(self.out_dir, f"{name}.mp4"), frames, self.fps)
        self.seconds += time.perf_counter() - start
        return path

    def close(self) -> None:
        """Closes the renderers and the envs (and their OpenGL contexts)."""
        for camera in self.cameras:
            camera.close()
        self.cameras = []
        for env in self.envs:
            env.close()
        self.envs = []


class VectorRecorder:
    """Evaluation videos of the device env types (``env.env_type=mjx`` / ``mujoco_playground``): the trainer plays a
    round of the deterministic policy on copies of its evaluation envs (``record_round``) and hands over the joint
    positions of the filmed envs only; here they pose the task's ``MjModel`` in one host ``MjData``
    (``mj_forward``), filmed env by env by ``MujocoCamera``. Round ``k`` of the run starts from the trainer's
    recording key folded with ``k``, so the rounds counter (``state_dict``) is the recorder's whole state.

    Args:
        model: the task's ``MjModel`` (``trainer.recording_model()``).
        dt: seconds per env step (the videos play in real time).
        num_envs: envs filmed side by side (the first ``num_envs`` evaluation envs).
        size: frame width and height of one env, in pixels.
        out_dir: where the MP4 files go.
        max_frames: most frames in one video.

    Raises:
        ConfigError: no OpenGL backend can render here, or ``size`` exceeds the model's offscreen buffer.
    """

    def __init__(self, model: mujoco.MjModel, dt: float, num_envs: int, size: int, out_dir: str,
                 max_frames: int = MAX_FRAMES) -> None:
        if num_envs < 1 or max_frames < 1:
            raise ValueError(f"num_envs and max_frames must be >= 1, got {num_envs}, {max_frames}")
        start = time.perf_counter()
        self.out_dir, self.max_frames, self.num_envs = out_dir, max_frames, num_envs
        self.model = model
        self.data = mujoco.MjData(model)
        mujoco.mj_forward(model, self.data)
        self.cameras: list[MujocoCamera] = []
        try:
            self.cameras.append(MujocoCamera(model, self.data, size))
            self.cameras[0].render()  # creates the OpenGL context now, before any training work
        except ConfigError:
            self.close()
            raise
        except Exception as exc:  # noqa: BLE001  any backend failure becomes one line naming the setting
            self.close()
            raise render_error("", exc) from None
        self.camera = self.cameras[0].camera
        self.fps = max(1, round(1.0 / float(dt)))
        self.rounds = 0
        self.seconds = time.perf_counter() - start

    @classmethod
    def from_trainer(cls, cfg: Config, run_dir: str, trainer: object) -> VectorRecorder:
        """The recorder ``cfg`` asks for, filming ``trainer``'s task, writing to ``<run_dir>/videos``."""
        model, dt = trainer.recording_model()  # type: ignore[attr-defined]
        return cls(model, dt, cfg.num_record_envs, cfg.record_size, os.path.join(run_dir, "videos"))

    def _render(self, qpos: np.ndarray) -> np.ndarray:
        """The frame of the task posed at (nq,) ``qpos``."""
        self.data.qpos[:] = qpos
        mujoco.mj_forward(self.model, self.data)
        return self.cameras[0].render()

    def record(self, play: Callable[[int, int, int], dict[str, np.ndarray]], num_episodes: int
               ) -> tuple[np.ndarray, list[float]]:
        """Plays ``max(num_episodes // num_envs, 1)`` rounds with ``play`` (the trainer's ``record_round``).

        Returns:
            (frames, returns) as ``VideoRecorder.record``.
        """
        start = time.perf_counter()
        n = self.num_envs
        frames: list[np.ndarray] = []
        returns: list[float] = []
        for _ in range(max(num_episodes // n, 1)):
            if len(frames) >= self.max_frames:
                break
            out = play(n, self.max_frames - len(frames), self.rounds)
            self.rounds += 1
            qpos, alive = np.asarray(out["qpos"]), np.asarray(out["alive"], bool)  # (T, n, nq), (T, n)
            last: list[np.ndarray] = [np.empty(0)] * n
            for t in range(int(alive.any(axis=1).sum())):  # an env that ended stays ended: a prefix of the rounds
                for i in np.flatnonzero(alive[t]):
                    last[i] = self._render(qpos[t, i])  # (H, W, 3)
                frames.append(np.concatenate(last, axis=1))  # (H, n*W, 3)
            finished = np.asarray(out["finished"], bool)
            if finished.all():
                returns.extend(np.asarray(out["returns"], np.float64).tolist())
        self.seconds += time.perf_counter() - start
        return np.stack(frames), returns

    def write(self, frames: np.ndarray, name: str) -> str:
        """Encodes ``frames`` to ``<out_dir>/<name>.mp4``; returns the path."""
        start = time.perf_counter()
        path = write_mp4(os.path.join(self.out_dir, f"{name}.mp4"), frames, self.fps)
        self.seconds += time.perf_counter() - start
        return path

    def state_dict(self) -> dict[str, object]:
        """The rounds played (the next round's key)."""
        return {"rounds": self.rounds}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restores ``state_dict`` output."""
        self.rounds = int(state["rounds"])  # type: ignore[call-overload]

    def close(self) -> None:
        """Closes the renderer (and its OpenGL context)."""
        for camera in self.cameras:
            camera.close()
        self.cameras = []


class RunVideos:
    """The training loop's videos: one at the start, one every ``recording_per_interaction_step`` and one at the
    end (upstream's schedule), each written to ``<run>/videos/eval_step<env_step>.mp4`` and sent to the logger.

    Attributes:
        written: the MP4 paths written by this process.
        last_step: the interaction step of the run's latest video (-1 before the first).
        num_videos: the videos the run has written, resumed parts included.
    """

    def __init__(self, cfg: Config, run_dir: str, trainer: object = None) -> None:
        self.created = time.perf_counter()
        self.recorder: VideoRecorder | VectorRecorder = (
            VideoRecorder.from_config(cfg, run_dir) if trainer is None
            else VectorRecorder.from_trainer(cfg, run_dir, trainer))
        self.episodes = cfg.num_record_episodes
        self.every = cfg.recording_per_interaction_step
        self.written: list[str] = []
        self.last_step = -1
        self.num_videos = 0

    def state_dict(self) -> dict[str, object]:
        """What a checkpoint keeps (the loop state's ``videos``): the schedule's position (``last_step``,
        ``num_videos``) and the recorder's env states."""
        return {"last_step": self.last_step, "num_videos": self.num_videos, "recorder": self.recorder.state_dict()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restores ``state_dict`` output.

        Raises:
            KeyError: an entry is missing. ValueError: a different ``num_record_envs``.
        """
        self.recorder.load_state_dict(state["recorder"])  # type: ignore[arg-type]
        self.last_step = int(state["last_step"])  # type: ignore[call-overload]
        self.num_videos = int(state["num_videos"])  # type: ignore[call-overload]

    def due(self, interaction_step: int, interval: int) -> bool:
        """Whether a video is due at ``interaction_step`` (every ``interval`` steps)."""
        return interaction_step % interval == 0 and interaction_step != self.last_step

    def record(self, act: Callable[..., object], interaction_step: int, env_step: int, logger: object) -> str:
        """Records, writes and logs one video; returns a line saying where.

        Args:
            act: the deterministic policy (the gymnasium / DMC recorder), or the trainer's ``record_round`` (the
                device env types).
        """
        frames, returns = self.recorder.record(act, self.episodes)  # type: ignore[arg-type]
        path = self.recorder.write(frames, f"eval_step{env_step:09d}")
        self.written.append(path)
        self.last_step = interaction_step
        self.num_videos += 1
        start = time.perf_counter()
        logger.log_video("video", path, frames, self.recorder.fps, env_step)  # type: ignore[attr-defined]
        self.recorder.seconds += time.perf_counter() - start  # the TensorBoard GIF / W&B upload counts too
        mean = f", return {np.mean(returns):.1f}" if returns else ""
        return f"video {path} ({len(frames)} frames{mean})"

    def summary(self) -> str:
        """The cost line: videos written and the share of the wall time since the recorder was built (the run's
        setup after it, training, evaluations) spent building it, recording, encoding and logging the videos."""
        wall = time.perf_counter() - self.created
        share = 100.0 * self.recorder.seconds / max(wall, 1e-9)
        return (f"videos: {len(self.written)} in {self.recorder.out_dir}, {self.recorder.seconds:.1f} s rendering, "
                f"encoding and logging = {share:.1f}% of the run's {wall:.1f} s since the recorder was built")

    def close(self) -> None:
        """Closes the recorder's envs."""
        self.recorder.close()


def run_videos(cfg: Config, run_dir: str, trainer: object = None) -> RunVideos | None:
    """The run's ``RunVideos`` when ``recording_on(cfg)``; None (no renderer, no rendering env) otherwise.

    Args:
        trainer: None for the host stepper; a device simulator's ``DeviceTrainer`` (its ``recording_model``
            and ``record_round``).
    """
    return RunVideos(cfg, run_dir, trainer) if recording_on(cfg) else None
