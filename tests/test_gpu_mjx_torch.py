"""bench/gpu_mjx_torch.py on a CPU: the checks run and pass on the CPU path (the GPU is what they are for), and a
broken hand-over is caught. The env configuration is tests/test_agent_torch_mjx.py's (one compilation per process)."""

from __future__ import annotations

import pytest

pytest.importorskip("brax", reason="the mjx extra is not installed (pip install -e \".[mjx]\")")

import torch  # noqa: E402

from bench import gpu_mjx_torch  # noqa: E402
from mjx_envs.env import FAST_COMPILE_ENV  # noqa: E402

TINY = {"num_train_envs": 2, "num_eval_envs": 2, "num_eval_episodes": 2, "env.max_episode_steps": 12,
        "num_env_steps": 200, "agent.buffer_min_length": 8, "agent.buffer_max_length": 30,
        "agent.sample_batch_size": 8, "agent.actor_hidden_dim": 8, "agent.critic_hidden_dim": 8,
        "agent.actor_num_blocks": 1, "agent.critic_num_blocks": 1, "agent.categorical_target_backend": "torch",
        "agent.device_type": "cpu", "num_threads": 1, "seed": 3}


@pytest.fixture(autouse=True)
def _fast_compile_and_threads(monkeypatch):
    monkeypatch.setenv(FAST_COMPILE_ENV, "1")
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_checks_pass_on_the_cpu_path():
    res = gpu_mjx_torch.check(TINY, steps=6)
    assert res["ok"], res["checks"]
    assert set(res["checks"]) == {"rows_equal_env_outputs", "actions_shared_with_jax", "outputs_shared_with_torch",
                                  "metrics_present_and_finite", "no_backend_fallback", "cuda_graphs_captured"}
    assert res["mismatched_steps"] == 0 and res["updates_per_second"] > 0 and res["num_envs"] == 2


def test_stale_rows_are_caught(monkeypatch):
    """A replay that stores the previous step's reward (what a missing stream order could do) fails the check."""
    from agent_torch.on_device import DeviceReplay

    add = DeviceReplay.add
    previous: list[torch.Tensor] = []

    def stale_add(self, observation, action, reward, terminated, truncated, next_observation):
        stale = previous[-1] if previous else reward
        previous.append(reward.clone() + 1.0)
        add(self, observation, action, stale, terminated, truncated, next_observation)

    monkeypatch.setattr(DeviceReplay, "add", stale_add)
    res = gpu_mjx_torch.check(TINY, steps=6)
    assert not res["checks"]["rows_equal_env_outputs"] and not res["ok"] and res["mismatched_steps"] >= 5
