"""Evaluation videos (``record_video``) and the W&B logger (``logger_type=wandb``): the MP4 files a tiny run writes
and their frame counts, TensorBoard's video images, an offline W&B run's scalars, config and videos, no renderer at
all with recording off, and the config checks."""

from __future__ import annotations

import ctypes.util
import glob
import os
import re

import pytest

from agent_common.config import ConfigError, build_config, parse_overrides
from agent_common.keys import loggers
from tests.agent_test_utils import run_module

TINY = [
    "num_threads=1",
    "progress_bar=false",
    "agent.categorical_target_backend=torch",
    "agent.actor_hidden_dim=16",
    "agent.critic_hidden_dim=16",
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=16",
    "agent.buffer_min_length=30",
    "env.env_name=Hopper-v4",
    "env.max_episode_steps=20",
    "num_eval_episodes=1",
    "num_env_steps=60",
]
needs_osmesa = pytest.mark.skipif(ctypes.util.find_library("OSMesa") is None,
                                  reason="needs libOSMesa (apt-get install libosmesa6) for MUJOCO_GL=osmesa")


def test_logger_type_and_recording_keys_are_checked():
    assert loggers(build_config(parse_overrides(["logger_type=tensorboard,wandb"]))) == ("tensorboard", "wandb")
    assert loggers(build_config(parse_overrides(["logger_type=none"]))) == ()
    for bad in ("tensorbord", "none,wandb", "wandb,"):
        with pytest.raises(ConfigError, match="invalid value .* for 'logger_type'. Allowed values: tensorboard, "
                                              "wandb, none"):
            build_config(parse_overrides([f"logger_type={bad}"]))
    with pytest.raises(ConfigError, match="record_size.*must be even"):
        build_config(parse_overrides(["record_size=63"]))
    with pytest.raises(ConfigError, match="num_record_episodes.*must be an integer >= 0"):
        build_config(parse_overrides(["num_record_episodes=-1"]))


def test_recording_off_never_creates_a_renderer(tmp_path, monkeypatch):
    """With record_video=false no recorder and no OpenGL viewer is ever built; the same run with record_video=true
    builds them (so the counters do see a renderer when there is one)."""
    from gymnasium.envs.mujoco import mujoco_rendering

    from agent_common import video
    from agent_torch.train import main

    created = {"viewer": 0, "recorder": 0}
    viewer_init = mujoco_rendering.OffScreenViewer.__init__
    recorder_init = video.VideoRecorder.__init__

    def count_viewer(self, *args, **kwargs):
        created["viewer"] += 1
        viewer_init(self, *args, **kwargs)

    def count_recorder(self, *args, **kwargs):
        created["recorder"] += 1
        recorder_init(self, *args, **kwargs)

    monkeypatch.setattr(mujoco_rendering.OffScreenViewer, "__init__", count_viewer)
    monkeypatch.setattr(video.VideoRecorder, "__init__", count_recorder)
    args = [a for item in TINY + ["num_env_steps=40", "logger_type=none"] for a in ("--overrides", item)]
    assert main([*args, "--overrides", f"save_path={tmp_path / 'off'}"]) == 0
    assert created == {"viewer": 0, "recorder": 0}
    assert not (tmp_path / "off" / "videos").exists()
    if ctypes.util.find_library("OSMesa") is None:
        pytest.skip("the positive control needs libOSMesa (apt-get install libosmesa6)")
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    on = [a for item in ("record_video=true", "record_size=32", f"save_path={tmp_path / 'on'}")
          for a in ("--overrides", item)]
    assert main([*args, *on]) == 0
    assert created["recorder"] == 1 and created["viewer"] >= 1
    assert len(os.listdir(tmp_path / "on" / "videos")) == 2  # the start and the end


@needs_osmesa
def test_tiny_run_writes_videos_to_disk_tensorboard_and_offline_wandb(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from agent_common.video import read_video_frames

    run = tmp_path / "run"
    overrides = TINY + ["record_video=true", "record_size=48", "num_record_envs=2", "num_record_episodes=2",
                        "recording_per_interaction_step=30", "logger_type=tensorboard,wandb", f"save_path={run}"]
    env = {"MUJOCO_GL": "osmesa", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    done = run_module("agent_torch.train", overrides=overrides, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    names = sorted(os.listdir(run / "videos"))
    assert names == ["eval_step000000000.mp4", "eval_step000000030.mp4", "eval_step000000060.mp4"]
    for name in names:
        frames = read_video_frames(str(run / "videos" / name))
        assert frames.shape == (20, 48, 96, 3)  # 20-step episodes, two envs side by side
        assert frames.std() > 0  # a rendered scene, not a blank image
        assert f"video {run / 'videos' / name} (20 frames, return " in done.stderr
    assert "videos: 3 in" in done.stderr and "% of the run's" in done.stderr
    acc = EventAccumulator(str(run / "tb"), size_guidance={"images": 0})
    acc.Reload()
    assert [e.step for e in acc.Images("video")] == [0, 30, 60]
    offline = glob.glob(str(run / "wandb" / "offline-run-*"))
    assert len(offline) == 1
    assert len(glob.glob(os.path.join(offline[0], "files", "media", "videos", "*.mp4"))) == 3
    with open(glob.glob(os.path.join(offline[0], "run-*.wandb"))[0], "rb") as f:
        records = f.read()
    for needle in (b"critic/loss", b"avg_return", b"env_step", b"record_video", b"media/videos/"):
        assert needle in records, needle
    assert (run / "wandb_run_id").read_text().strip() in os.path.basename(offline[0])


def test_jax_compute_path_names_every_device_of_a_data_parallel_run(tmp_path):
    overrides = [o for o in TINY if not o.startswith("agent.categorical")] + [
        "num_devices=2", "num_env_steps=40", "logger_type=none", f"save_path={tmp_path / 'run'}"]
    done = run_module("agent_jax.train", overrides=overrides, cwd=str(tmp_path),
                      env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stderr.splitlines() if x.startswith("compute path: "))
    devices = re.search(r" on 2 devices of 1 process \(data parallel, batch split along the mesh\): (\S+), (\S+): jit",
                        line)
    assert devices and devices.group(1) != devices.group(2), line


def test_a_renderer_that_cannot_start_is_one_line_naming_the_setting(monkeypatch):
    from agent_common.video import render_error

    monkeypatch.setenv("MUJOCO_GL", "egl")
    err = render_error("HalfCheetah-v4 ", RuntimeError("no EGL\ndisplay"))
    assert str(err).startswith("record_video=true cannot render HalfCheetah-v4 with MUJOCO_GL=egl (RuntimeError: no "
                               "EGL display). Set MUJOCO_GL=egl (GPU) or MUJOCO_GL=osmesa")
    assert "\n" not in str(err) and str(render_error("", ValueError("x"))).startswith("record_video=true cannot "
                                                                                       "render with MUJOCO_GL=egl")
