"""Trained policies out of checkpoints: the evaluation-only commands replay a tiny run's latest evaluation with the
same return, the exported deterministic actors (TorchScript, jax.export) act as the agents do, the Python policy
API's shapes, sampling and errors."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from tests.agent_test_utils import run_module

TINY = [
    "num_threads=1",
    "deterministic=true",
    "progress_bar=false",
    "logger_type=none",
    "agent.actor_hidden_dim=16",
    "agent.critic_hidden_dim=16",
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=16",
    "agent.buffer_min_length=30",
    "env.max_episode_steps=20",
    "num_eval_episodes=2",
    "evaluation_per_interaction_step=20",
    "num_env_steps=60",
]


def _last_eval_return(run) -> str:
    with open(run / "eval.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] == "avg_return"]
    assert [float(r["env_step"]) for r in rows] == [0.0, 40.0, 60.0]  # evaluations start with the updates
    return rows[-1]["value"]


def _observations(dim: int) -> np.ndarray:
    return np.random.default_rng(7).standard_normal((5, dim)).astype(np.float32)  # (5, O)


@pytest.fixture(scope="module", params=["torch", "jax"])
def trained(request, tmp_path_factory):
    """(framework, run dir, evaluation-only output) of a tiny run of each agent."""
    framework = request.param
    run = tmp_path_factory.mktemp(framework) / "run"
    backend = ["agent.categorical_target_backend=torch"] if framework == "torch" else []
    done = run_module(f"agent_{framework}.train", overrides=TINY + backend + [f"save_path={run}"], cwd=str(run.parent))
    assert done.returncode == 0, done.stderr[-3000:]
    suffix = "pt" if framework == "torch" else "npz"
    evaluated = run_module(f"agent_{framework}.evaluate", str(run), "--episodes", "2", "--replay-last-eval",
                           "--export", str(run / f"actor.{suffix}"), cwd=str(run.parent))
    return framework, run, evaluated


def _module(framework: str):
    if framework == "torch":
        import agent_torch.policy as module
    else:
        import agent_jax.policy as module
    return module


def test_evaluate_replays_the_last_evaluation_and_prints_returns(trained):
    framework, run, evaluated = trained
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    logged = _last_eval_return(run)
    assert f"replayed last evaluation: avg_return={logged} (the run logged {logged}: same)" in evaluated.stdout
    ckpt = run / "checkpoints" / "step60"
    assert f"checkpoint {ckpt} (HalfCheetah-v4, {framework}, deterministic" in evaluated.stdout
    assert "episode 0: return " in evaluated.stdout and "episode 1: return " in evaluated.stdout
    assert "over 2 episodes (seed 0)" in evaluated.stdout


def test_exported_actor_acts_as_the_agent(trained):
    framework, run, evaluated = trained
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    module = _module(framework)
    policy = module.load_policy(str(run))
    exported = module.load_exported(str(run / ("actor.pt" if framework == "torch" else "actor.npz")))
    obs = _observations(policy.observation_dim)
    expected = policy.agent.act(obs, None)  # (5, A)
    np.testing.assert_array_equal(exported(obs), expected)
    np.testing.assert_array_equal(exported(obs[:1]), policy.agent.act(obs[:1], None))  # any batch size


def test_policy_api(trained):
    framework, run, _ = trained
    module = _module(framework)
    policy = module.load_policy(str(run))
    obs = _observations(policy.observation_dim)
    batch = policy(obs)
    assert batch.shape == (5, policy.action_dim) and batch.dtype == np.float32 and np.abs(batch).max() <= 1.0
    single = policy(obs[0])  # one observation -> one action (a batch of one: other matmul kernels, so not bitwise)
    assert single.shape == (policy.action_dim,)
    np.testing.assert_allclose(single, batch[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(single, policy.agent.act(obs[:1], None)[0])
    sampled = [module.load_policy(str(run), deterministic=False, seed=3)(obs) for _ in range(2)]
    np.testing.assert_array_equal(sampled[0], sampled[1])  # seeded
    assert not np.array_equal(sampled[0], batch)
    with pytest.raises(ValueError, match=rf"observation must be \({policy.observation_dim},\) or \(E, "
                                         rf"{policy.observation_dim}\) for HalfCheetah-v4, got \(5, 3\)"):
        policy(obs[:, :3])


def test_evaluate_refuses_a_missing_or_foreign_checkpoint(trained, tmp_path, capsys):
    framework, run, _ = trained
    other = "jax" if framework == "torch" else "torch"
    evaluate = __import__(f"agent_{framework}.evaluate", fromlist=["main"])
    assert evaluate.main([str(tmp_path / "nothing"), "--episodes", "1"]) == 2
    assert f"error: agent_load_path={tmp_path / 'nothing'}: no such directory" in capsys.readouterr().err
    evaluate_other = __import__(f"agent_{other}.evaluate", fromlist=["main"])
    assert evaluate_other.main([str(run), "--episodes", "1"]) == 2
    assert f"was written by the {framework} agent, this is the {other} agent; convert it first" in (
        capsys.readouterr().err)
