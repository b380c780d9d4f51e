"""JAX agent end to end: the real CLI (smoke + exact resume in a fresh process), checkpoints, seeds, config errors."""

from __future__ import annotations

import os
import pickle
import re
import subprocess

import gymnasium as gym
import jax
import numpy as np
import pytest

from agent_common.config import load_config
from agent_common.keys import BACKENDS
from agent_jax.agent import FlashSACAgent
from agent_jax.compilation_cache import jax_cache_env
from agent_jax.train import main
from tests.agent_test_utils import REPO, assert_nested_equal, run_module

OBS_DIM, ACT_DIM, BATCH = 17, 6, 16
OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
ACT_SPACE = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
# Same sizes as tests/test_agent_jax_update.py, so the in-process tests share its compiled update steps.
TINY = ["agent.actor_hidden_dim=16", "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1",
        "agent.critic_num_blocks=1", f"agent.sample_batch_size={BATCH}", "num_env_steps=1000"]

# CLI runs: 160 env steps, updates from step 40, evaluation / checkpoint every 80 steps, 30-step episodes (so
# truncations and final observations occur), buffer saved with each checkpoint (exact resume).
CLI = ["num_env_steps=160", "agent.buffer_min_length=40", "agent.sample_batch_size=16", "agent.actor_hidden_dim=16",
       "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1", "agent.critic_num_blocks=1",
       "env.max_episode_steps=30", "num_eval_episodes=1", "evaluation_per_interaction_step=80",
       "save_checkpoint_per_interaction_step=80", "logging_per_interaction_step=40", "save_buffer=true",
       "agent.categorical_target_backend=jax", "progress_bar=false", "seed=3"]


def _run_cli(overrides: list[str], timeout: float = 240,
             cache_dir: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu")
    if cache_dir is not None:  # the resumed run reuses the first run's executables (compilation dominates on CPU)
        env.update(jax_cache_env(cache_dir))
    return run_module("agent_jax.train", overrides=overrides, env=env, timeout=timeout)


def _load_tree(path: str):
    with open(path, "rb") as f:
        return pickle.load(f)


def _scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(os.path.join(run_dir, "tb"))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# ------------------------------------------------------------------------------------------------- CLI


def test_cli_smoke_and_exact_resume(tmp_path):
    """A: 160 steps straight. B: A's step-80 checkpoint resumed in a fresh process. Step 160 must match bitwise."""
    run_a, run_b = str(tmp_path / "a"), str(tmp_path / "b")
    cache = str(tmp_path / "jax_cache")
    a = _run_cli([*CLI, f"save_path={run_a}"], cache_dir=cache)
    assert a.returncode == 0, a.stderr[-3000:]
    assert "[completed] env_step=160" in a.stdout
    # The compute path is printed once and names the persistent compilation cache; timing in the summary line.
    assert a.stderr.count("compute path: jax") == 1 and f"persistent compilation cache at {cache}" in a.stderr
    assert re.search(r"time_to_first_update=[0-9.]+s steady_updates/s=[0-9.]+", a.stdout), a.stdout
    assert "first update at env step 40:" in a.stderr

    # Smoke: eval at 0 / 80 / 160, finite losses logged under upstream names, backend logged, config saved.
    with open(os.path.join(run_a, "eval.csv")) as f:
        rows = f.read().splitlines()
    assert rows[0] == ",exp_name,env_name,seed,metric,env_step,value"
    eval_steps = [float(r.split(",")[5]) for r in rows[1:] if ",avg_return," in r]
    assert eval_steps == [0.0, 80.0, 160.0]
    scalars = _scalars(run_a)
    for key in ("critic/loss", "critic/max_entropy_bonus", "actor/loss", "actor/entropy", "actor/mean_action",
                "temperature/value", "temperature/loss", "backend/fallback_count", "avg_return"):
        assert key in scalars, f"{key} not logged; got {sorted(scalars)}"
        assert all(np.isfinite(v) for _, v in scalars[key]), key
    # Updates start at step 40. The fused step (the default agent.buffer_device_type=auto) sums its metrics on the
    # device and the loop reads them at each logging step, so the window ending at step 40 (one update) has a loss.
    assert [s for s, _ in scalars["critic/loss"]] == [40, 80, 120, 160]
    assert scalars["backend/fallback_count"][-1][1] == 0.0
    assert [s for s, _ in scalars["perf/time_to_first_update_s"]] == [40]
    assert os.path.exists(os.path.join(run_a, "config.yaml"))
    ckpt_a = os.path.join(run_a, "checkpoints", "step160", "agent")
    assert sorted(os.listdir(ckpt_a)) == ["actor.pkl", "agent_state.pkl", "critic.pkl", "target_critic.pkl",
                                          "temperature.pkl"]

    # Exact resume from step 80 in a fresh process.
    b = _run_cli([*CLI, f"save_path={run_b}", f"agent_load_path={os.path.join(run_a, 'checkpoints', 'step80')}"],
                 cache_dir=cache)
    assert b.returncode == 0, b.stderr[-3000:]
    assert "resumed from" in b.stderr
    ckpt_b = os.path.join(run_b, "checkpoints", "step160", "agent")
    for name in sorted(os.listdir(ckpt_a)):
        assert_nested_equal(_load_tree(os.path.join(ckpt_a, name)), _load_tree(os.path.join(ckpt_b, name)), name)
    state_a = _load_tree(os.path.join(ckpt_a, "agent_state.pkl"))
    assert state_a["update_step"] == 160 - 40 + 1
    loop_a = _load_tree(os.path.join(run_a, "checkpoints", "step160", "loop_state.pkl"))
    loop_b = _load_tree(os.path.join(run_b, "checkpoints", "step160", "loop_state.pkl"))
    for key in ("noise", "reward_normalizer", "observation", "num_updates", "meter", "last_eval_return",
                "next_action"):
        assert_nested_equal(loop_a[key], loop_b[key], key)
    scalars_b = _scalars(run_b)
    for key in ("critic/loss", "actor/loss", "temperature/value", "avg_return"):
        assert scalars_b[key][-1] == scalars[key][-1], key


def test_config_error_exits_nonzero_naming_the_key():
    """The real CLI exits with status 2 and names the bad key, before any training."""
    proc = _run_cli(["agent.sample_batch_sise=64"], timeout=120)
    assert proc.returncode == 2
    assert "agent.sample_batch_sise" in proc.stderr and "agent.sample_batch_size" in proc.stderr


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("agent.sample_batch_size=abc", "agent.sample_batch_size"),
        ("agent.categorical_target_backend=torch", "agent.categorical_target_backend"),
        ("agent.critic_hidden_dim=0", "agent.critic_hidden_dim"),
        ("envv.env_name=Hopper-v4", "envv.env_name"),
        ("gamma=1.5", "gamma"),
    ],
)
def test_config_errors(override, expected, capsys):
    """Unknown keys, wrong types and invalid values exit 2 with a message naming the key (same rules as torch)."""
    with pytest.raises(SystemExit) as exc:
        main(["--overrides", override])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "config error" in err and expected in err


def test_every_backend_of_the_dispatcher_is_a_valid_config_value():
    """``agent.categorical_target_backend`` takes every name jax_impl's dispatcher knows (the kernels by name fall back
    to the jnp reference where they cannot run, as the dispatcher decides)."""
    from jax_impl import dispatch

    assert BACKENDS["jax"] == dispatch.DISPATCHER.backends
    assert "triton" in BACKENDS["jax"]
    for name in dispatch.DISPATCHER.backends:
        cfg = load_config([*TINY, f"agent.categorical_target_backend={name}"], "jax")
        assert cfg.agent.categorical_target_backend == name
    agent = FlashSACAgent(load_config([*TINY, "agent.categorical_target_backend=triton"], "jax"), OBS_SPACE, ACT_SPACE)
    selected = agent.info()["backend/selected"]
    assert "requested triton" in selected and selected.split()[0] in dispatch.DISPATCHER.backends


# ------------------------------------------------------------------------------------------------- in process


def _batch(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "observation": rng.standard_normal((BATCH, OBS_DIM)).astype(np.float32),
        "action": rng.uniform(-1, 1, (BATCH, ACT_DIM)).astype(np.float32),
        "reward": rng.standard_normal(BATCH).astype(np.float32),
        "terminated": (rng.random(BATCH) < 0.2).astype(np.float32),
        "truncated": np.zeros(BATCH, np.float32),
        "next_observation": rng.standard_normal((BATCH, OBS_DIM)).astype(np.float32),
    }


def _agent(seed: int, *extra: str) -> FlashSACAgent:
    return FlashSACAgent(load_config([*TINY, f"seed={seed}", *extra], framework="jax"), OBS_SPACE, ACT_SPACE)


def _rollout(agent: FlashSACAgent, num_updates: int = 3) -> tuple[list[np.ndarray], list[dict[str, float]]]:
    obs = _batch(100)["observation"][:2]  # (2, O)
    noise = np.random.default_rng(5).standard_normal((2, ACT_DIM)).astype(np.float32)  # (2, A)
    actions, metrics = [agent.act(obs, noise), agent.act(obs, None)], []
    for i in range(num_updates):
        metrics.append(agent.update(_batch(i)))
        actions.append(agent.act(obs, noise))
    metrics.append(agent.flush_metrics())
    return actions, metrics


def test_same_seed_same_actions_and_losses():
    """Same seed -> identical actions and losses; another seed -> different ones. Metrics lag one update."""
    actions_a, metrics_a = _rollout(_agent(0))
    actions_b, metrics_b = _rollout(_agent(0))
    for x, y in zip(actions_a, actions_b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert metrics_a == metrics_b
    assert metrics_a[0] == {} and set(metrics_a[1]) >= {"critic/loss", "actor/loss"}
    assert "actor/loss" not in metrics_a[2]  # update 1 is a critic-only step (actor_update_period 2)
    assert all(np.isfinite(v) for m in metrics_a for v in m.values())
    actions_c, metrics_c = _rollout(_agent(1))
    assert not np.array_equal(actions_a[0], actions_c[0])
    assert metrics_a[1]["critic/loss"] != metrics_c[1]["critic/loss"]
    assert np.all(np.abs(actions_a[0]) <= 1.0)


def test_policy_snapshot_keeps_the_policy_it_was_taken_from():
    """``policy_snapshot()`` acts bitwise as ``act(obs, None)`` did when it was taken, also after updates, which
    donate the state's buffers and change the actor (the loop's background initial evaluation relies on it; with
    the state on 2 devices: tests/test_runs.py)."""
    agent = _agent(0)
    agent.update(_batch(7))  # the first update packs the state (new buffers); later ones donate the packed buffers
    agent.flush_metrics()
    obs = _batch(9)["observation"][:3]
    before = agent.act(obs, None)
    leaves, _ = agent.actor_leaves()
    policy = agent.policy_snapshot()
    for i in range(2):
        agent.update(_batch(i))
    agent.flush_metrics()
    assert all(leaf.is_deleted() for leaf in leaves)  # the updates donated what the snapshot was taken from
    assert not np.array_equal(agent.act(obs, None), before)
    np.testing.assert_array_equal(policy(obs), before)
    np.testing.assert_array_equal(agent.policy_snapshot()(obs), agent.act(obs, None))


def _layouts() -> dict[str, object]:
    """Placements of the default backend's devices: each device alone, and over two devices (when there are two)
    replicated and split along axis 0."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices()
    out: dict[str, object] = {f"device {d.id}": d for d in devices[:2]}
    if len(devices) >= 2:
        mesh = Mesh(np.array(devices[:2]), ("d",))
        out["replicated over 2"] = NamedSharding(mesh, PartitionSpec())
        out["sharded over 2"] = NamedSharding(mesh, PartitionSpec("d"))
    return out


def test_host_copies_own_their_memory_on_every_layout():
    """``host_copies`` shares no buffer with its source on any layout of the default backend's devices (GPUs where
    JAX runs on them; here 2 host devices, conftest), and still reads its values once the source is deleted (as a
    donating update deletes it)."""
    from agent_jax.agent import host_copies

    layouts = _layouts()
    if jax.default_backend() == "cpu":  # conftest's 2 host devices: the replicated layout is the one that aliased
        assert "replicated over 2" in layouts, f"expected 2 host devices, got layouts {sorted(layouts)}"
    for name, placement in layouts.items():
        values = [np.arange(24, dtype=np.float32).reshape(4, 6), np.asarray([3, -1], np.int32)]
        sources = [jax.device_put(v, placement) for v in values]
        copies = host_copies(sources)
        shared = ({s.data.unsafe_buffer_pointer() for a in sources for s in a.addressable_shards}
                  & {s.data.unsafe_buffer_pointer() for a in copies for s in a.addressable_shards})
        assert not shared, f"{name}: the copies share buffers with their source"
        for source in sources:
            source.delete()
        for copy, value in zip(copies, values, strict=True):
            assert copy.devices() == {jax.devices("cpu")[0]}, name
            np.testing.assert_array_equal(np.asarray(copy), value, err_msg=name, strict=True)


def test_checkpoint_round_trip(tmp_path):
    """save -> load into an agent built with another seed restores every array, the counters, the key and the
    pending metrics; both then continue identically. Optimiser state is optional; mismatched shapes are named."""
    agent = _agent(0)
    for i in range(3):
        agent.update(_batch(i))
    agent.save(str(tmp_path / "ckpt"))
    other = _agent(7)
    other.load(str(tmp_path / "ckpt"))
    flat_a = jax.tree_util.tree_leaves_with_path(agent.state)
    flat_b = jax.tree_util.tree_leaves(other.state)
    assert len(flat_a) == len(flat_b)
    for (path, x), y in zip(flat_a, flat_b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path))
    assert other.update_step == agent.update_step == 3
    obs = _batch(9)["observation"][:3]
    np.testing.assert_array_equal(agent.act(obs, None), other.act(obs, None))
    for i in range(3, 5):
        assert agent.update(_batch(i)) == other.update(_batch(i))
    assert agent.flush_metrics() == other.flush_metrics()
    np.testing.assert_array_equal(np.asarray(agent.state.critic.target_params["head_bias"]),
                                  np.asarray(other.state.critic.target_params["head_bias"]))

    fresh = _agent(7)
    fresh.load(str(tmp_path / "ckpt"), load_optimizer=False)
    assert int(fresh.state.critic.step) == 0
    saved_critic = _load_tree(str(tmp_path / "ckpt" / "critic.pkl"))
    np.testing.assert_array_equal(np.asarray(fresh.state.critic.params["head_bias"]),
                                  saved_critic["params"]["head_bias"])
    assert int(saved_critic["step"]) == 3 and int(fresh.state.actor.step) == 0

    wider = _agent(0, "agent.critic_hidden_dim=32")
    with pytest.raises(ValueError, match="checkpoint entry 'critic/.*has shape"):
        wider.load(str(tmp_path / "ckpt"))

