"""Evaluation videos beyond gymnasium: DMC tasks filmed from their tracking camera, no renderer with recording off,
and the recorder's state across a resume (the resumed run records at the same steps, the same frames, as the run
that was not interrupted). Needs the dmc extra and libOSMesa (skipped without them)."""

from __future__ import annotations

import ctypes.util
import os

import pytest

pytest.importorskip("dm_control")
pytest.importorskip("shimmy")
pytestmark = pytest.mark.skipif(ctypes.util.find_library("OSMesa") is None,
                                reason="needs libOSMesa (apt-get install libosmesa6) for MUJOCO_GL=osmesa")

import numpy as np  # noqa: E402

from agent_common.config import load_config  # noqa: E402
from agent_common.driver import train  # noqa: E402
from agent_common.host import host_trainer  # noqa: E402
from agent_common.runs import files as run_files  # noqa: E402
from tests.agent_test_utils import assert_nested_equal  # noqa: E402

TINY = [
    "env.env_type=dmc",
    "env.env_name=cheetah-run",
    "num_threads=1",
    "progress_bar=false",
    "logger_type=none",
    "agent.categorical_target_backend=torch",
    "agent.actor_hidden_dim=8",
    "agent.critic_hidden_dim=16",
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=8",
    "agent.buffer_min_length=15",
    "agent.buffer_max_length=64",
    "env.max_episode_steps=20",
    "num_eval_episodes=1",
    "num_env_steps=60",
    "evaluation_per_interaction_step=30",
    "save_checkpoint_per_interaction_step=30",
    "keep_checkpoints=2",
]
RECORD = ["record_video=true", "record_size=32", "recording_per_interaction_step=30"]


def test_tracking_camera_follows_the_agent_where_the_task_has_one():
    import mujoco
    from dm_control import suite

    from agent_common.video import tracking_camera

    for domain, task, camera in (("cheetah", "run", "side"), ("humanoid", "run", "back"),
                                 ("cartpole", "swingup", "fixed")):
        model = suite.load(domain, task).physics.model.ptr
        assert mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, tracking_camera(model)) == camera


def test_dmc_recording_off_never_creates_a_renderer(tmp_path, monkeypatch):
    from gymnasium.envs.mujoco import mujoco_rendering

    from agent_common import video
    from agent_torch.agent import make_agent

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
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    short = ["num_env_steps=20", "evaluation_per_interaction_step=20", "save_checkpoint_per_interaction_step=20"]
    assert train(load_config([*TINY, *short, f"save_path={tmp_path / 'off'}"], "torch"),
                 host_trainer(make_agent)).status == "completed"
    assert created == {"viewer": 0, "recorder": 0}
    assert not (tmp_path / "off" / "videos").exists()
    # the positive control: the same run recording builds one recorder and its viewer
    assert train(load_config([*TINY, *short, *RECORD, f"save_path={tmp_path / 'on'}"], "torch"),
                 host_trainer(make_agent)).status == "completed"
    assert created == {"viewer": 1, "recorder": 1}
    assert sorted(os.listdir(tmp_path / "on" / "videos")) == ["eval_step000000000.mp4", "eval_step000000020.mp4"]


def test_dmc_videos_and_a_resumed_run_records_the_same_steps_and_frames(tmp_path, monkeypatch, capsys):
    """A DMC run writes a video at steps 0, 30 and 60, each an MP4 of one 20-step evaluation episode (20 frames)
    filmed by the cheetah's tracking camera; resumed from its step-30 checkpoint it writes only the step-60 video,
    frame for frame the same, and its step-60 checkpoint holds the same recorder state; resumed from the finished
    run's last checkpoint it records nothing again."""
    from agent_common.video import read_video_frames
    from agent_torch.agent import make_agent

    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    straight, resumed, end = tmp_path / "straight", tmp_path / "resumed", tmp_path / "end"
    assert train(load_config([*TINY, *RECORD, f"save_path={straight}"], "torch"),
                 host_trainer(make_agent)).status == "completed"
    names = sorted(os.listdir(straight / "videos"))
    assert names == ["eval_step000000000.mp4", "eval_step000000030.mp4", "eval_step000000060.mp4"]
    frames = {name: read_video_frames(str(straight / "videos" / name)) for name in names}
    for name in names:
        assert frames[name].shape == (20, 32, 32, 3) and frames[name].std() > 0, name
    assert not np.array_equal(frames[names[0]], frames[names[1]])  # the episodes differ: envs continue
    err = capsys.readouterr().err
    assert "videos: 3 in" in err

    train(load_config([f"agent_load_path={straight / 'checkpoints' / 'step30'}", f"save_path={resumed}"], "torch"),
          host_trainer(make_agent))
    assert sorted(os.listdir(resumed / "videos")) == [names[2]]
    np.testing.assert_array_equal(read_video_frames(str(resumed / "videos" / names[2])), frames[names[2]])
    a = run_files.load_pickle(str(straight / "checkpoints" / "step60" / "loop_state.pkl"))
    b = run_files.load_pickle(str(resumed / "checkpoints" / "step60" / "loop_state.pkl"))
    assert a["videos"]["last_step"] == 60 and a["videos"]["num_videos"] == 3
    assert_nested_equal(a["videos"], b["videos"], "videos")

    train(load_config([f"agent_load_path={straight / 'checkpoints' / 'step60'}", f"save_path={end}"], "torch"),
          host_trainer(make_agent))
    assert not (end / "videos").exists() or os.listdir(end / "videos") == []
