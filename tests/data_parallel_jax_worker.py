"""Subprocess of tests/test_data_parallel.py: the JAX agent's update on 2 host devices vs 1 device (doubled batch).

Run with XLA_FLAGS=--xla_force_host_platform_device_count=2. Prints one JSON line with the measurements; the test
asserts on them.
"""

from __future__ import annotations

import json
import sys
import tempfile

import gymnasium as gym
import jax
import numpy as np

from agent_common.config import load_config
from agent_jax.agent import FlashSACAgent

OBS_DIM, ACT_DIM, BATCH, UPDATES = 11, 3, 16, 4
TINY = ["agent.actor_hidden_dim=16", "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1",
        "agent.critic_num_blocks=1", f"agent.sample_batch_size={BATCH}", "num_env_steps=1000",
        "agent.device_type=cpu", "agent.categorical_target_backend=jax",
        "agent.actor_update_period=1"]  # every update updates actor, temperature and critic: one executable per run


def _batches(rows: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    for _ in range(UPDATES):
        out.append({
            "observation": rng.normal(size=(rows, OBS_DIM)).astype(np.float32),
            "action": rng.uniform(-1, 1, (rows, ACT_DIM)).astype(np.float32),
            "reward": rng.normal(scale=0.5, size=rows).astype(np.float32),
            "terminated": (rng.uniform(size=rows) < 0.1).astype(np.float32),
            "next_observation": rng.normal(size=(rows, OBS_DIM)).astype(np.float32),
        })
    return out


def _run(num_devices: int, batch_size: int, batches) -> tuple[FlashSACAgent, list[dict[str, float]], list]:
    cfg = load_config([*TINY, f"num_devices={num_devices}", f"agent.sample_batch_size={batch_size}"],
                      framework="jax")
    obs = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    act = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
    agent = FlashSACAgent(cfg, obs, act)
    initial = [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(agent.state.critic.params)]
    metrics = [agent.update(b) for b in batches]
    metrics.append(agent.flush_metrics())
    return agent, metrics[1:], initial


def main() -> None:
    assert len(jax.devices("cpu")) >= 2, jax.devices()
    batches = _batches(2 * BATCH)
    two, m2, _ = _run(2, BATCH, batches)  # 2 devices x BATCH rows = the same 2 x BATCH rows
    one, m1, params0 = _run(1, 2 * BATCH, batches)
    leaves2 = jax.tree_util.tree_leaves(two.state)
    # replicas: every device holds bitwise the same state
    replicas_equal = all(
        all(np.array_equal(np.asarray(s.data), np.asarray(leaf.addressable_shards[0].data)) for s in
            leaf.addressable_shards) for leaf in leaves2)
    devices = sorted({d.id for leaf in leaves2 for d in leaf.sharding.device_set})
    params2 = [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(two.state.critic.params)]
    params1 = [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(one.state.critic.params)]
    with tempfile.TemporaryDirectory() as tmp:  # a checkpoint of the 2-device agent loads back replicated
        two.save(tmp)
        back, _, _ = _run(2, BATCH, [])
        back.load(tmp)
    loaded = jax.tree_util.tree_leaves(back.state)
    round_trip = all(np.array_equal(np.asarray(a), np.asarray(b)) and len(b.sharding.device_set) == 2
                     for a, b in zip(leaves2, loaded, strict=True))
    actions = back.act(batches[0]["observation"][:3], np.zeros((3, ACT_DIM), np.float32))
    print(json.dumps({
        "checkpoint_round_trip": bool(round_trip),
        "act_shape": list(actions.shape),
        "replicas_equal": bool(replicas_equal),
        "devices": devices,
        "max_param_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(params2, params1, strict=True)),
        "max_param_move": max(float(np.max(np.abs(a - b))) for a, b in zip(params1, params0, strict=True)),
        "metrics_2": m2,
        "metrics_1": m1,
        "lr": float(load_config(TINY, framework="jax").agent.learning_rate_peak),
    }))


if __name__ == "__main__":
    main()
    sys.exit(0)
