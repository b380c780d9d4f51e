"""The JAX agent on MJX environments (``env.env_type=mjx``): the CLI end to end through the driver, the device stepper
and ``agent_jax.vector`` (fp16 mixed precision with its loss scale in the scan, 3-step returns), exact resume after a
shorter run and after a wall-clock stop, config errors, the device reward normaliser against the host one, and
SIGTERM.

MJX compiles take tens of seconds on a CPU, so every run here is in this process with one configuration (4
halfcheetah envs, 50-step episodes, tiny networks): the training scan and the evaluation loop compile once (the
programs are cached by the env object, which ``agent_jax.vector`` keeps per configuration) and the later runs reuse
them. Skipped only when the ``mjx`` extra is not installed."""

from __future__ import annotations

import os
import pickle
import signal
import types

import numpy as np
import pytest

pytest.importorskip("brax", reason="the mjx extra is not installed (pip install -e \".[mjx]\")")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from agent_common.device import interaction_steps_per_call  # noqa: E402
from agent_common.driver import StopSignals  # noqa: E402
from agent_common.logger import read_eval_csv  # noqa: E402
from agent_common.normalizer import RewardNormalizer  # noqa: E402
from agent_jax.train import main  # noqa: E402
from agent_jax.vector import normalizer_update  # noqa: E402
from tests.agent_test_utils import assert_nested_equal  # noqa: E402

ENVS, STEPS = 4, 400  # 100 interaction steps; updates from step 16 (64 rows); 2 updates per step
COMMON = ["env.env_type=mjx", "env.env_name=halfcheetah", "env.max_episode_steps=50", f"num_train_envs={ENVS}",
          "num_eval_envs=2", "num_eval_episodes=2", "agent.buffer_min_length=64", "agent.sample_batch_size=32",
          "agent.buffer_max_length=1000", "updates_per_interaction_step=2", "agent.critic_hidden_dim=16",
          "agent.actor_hidden_dim=16", "agent.critic_num_blocks=1", "agent.actor_num_blocks=1",
          "agent.critic_num_bins=11", "logging_per_interaction_step=10", "evaluation_per_interaction_step=50",
          "save_checkpoint_per_interaction_step=50", "agent.learning_rate_warmup_step=0",
          "agent.learning_rate_decay_step=200", "agent.categorical_target_backend=jax", "progress_bar=false",
          "seed=5"]


# The runs and the n-step scan share one configuration beyond COMMON (fp16 AMP, 3-step returns), so the training scan
# compiles once in this module.
FP16_N_STEP = ["agent.use_amp=true", "agent.amp_dtype=fp16", "n_step=3"]


def _argv(*overrides: str) -> list[str]:
    return [arg for value in overrides for arg in ("--overrides", value)]


def _checkpoint(run_dir: str, env_step: int) -> dict[str, object]:
    """A checkpoint's agent files, replay rows and loop state (minus what names the run: config, evaluations)."""
    path = os.path.join(run_dir, "checkpoints", f"step{env_step}")
    out: dict[str, object] = {}
    for root, _, files in os.walk(path):
        for name in files:
            if name.endswith(".pkl"):
                with open(os.path.join(root, name), "rb") as f:
                    out[os.path.relpath(os.path.join(root, name), path)] = pickle.load(f)
    state = out["loop_state.pkl"]
    assert isinstance(state, dict)
    for key in ("config_yaml", "last_eval_return", "last_eval_step"):
        state.pop(key)
    return out


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """The uninterrupted run: its directory and what it printed."""
    run = str(tmp_path_factory.mktemp("mjx") / "full")
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(_argv(*COMMON, *FP16_N_STEP, f"num_env_steps={STEPS}", f"save_path={run}"))
    return run, code, out.getvalue(), err.getvalue()


def test_cli_run_end_to_end(full_run):
    run, code, out, err = full_run
    assert code == 0, err[-3000:]
    assert "compute path: jax" in err and "MJX: one jitted lax.scan of 10 interaction steps per call" in err
    assert "agent.use_amp=true, agent.amp_dtype=fp16" in err
    assert "first update at env step 80:" in err  # the call of steps 11-20 (64 rows stored after step 18)
    assert out.startswith(f"[completed] env_step={STEPS} ")
    returns = read_eval_csv(os.path.join(run, "eval.csv"))
    assert [step for step, _ in returns] == [0.0, 200.0, 400.0]
    assert all(np.isfinite(value) for _, value in returns)
    lengths = read_eval_csv(os.path.join(run, "eval.csv"), metric="avg_length")
    assert [value for _, value in lengths] == [50.0, 50.0, 50.0]  # halfcheetah never terminates: the time limit
    assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == ["latest", "step200", "step400"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(os.path.join(run, "tb"))
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    for tag in ("critic/loss", "actor/loss", "temperature/value", "avg_return", "perf/env_steps_per_second",
                "perf/updates_per_second", "perf/time_to_first_update_s"):
        assert tag in scalars, tag
    # 83 interaction steps with updates (18..100), 2 each; 3-step rows lag two steps: 98 steps' rows stored
    final = _checkpoint(run, STEPS)
    state = final["loop_state.pkl"]
    assert (state["interaction_step"], state["num_updates"], state["replay_rows"]) == (100, 166, 392)
    assert state["trainer"]["update_step"] == 166
    assert final["replay_buffer.pkl"]["rows"].shape == (392, 2 * 17 + 6 + 3)
    rows = final["replay_buffer.pkl"]["rows"]
    # truncated: the 3-step rows that reach a time limit, from steps 48-50 (limit at 50) and 98 (limit at 100)
    assert np.abs(rows[:, 17:23]).max() <= 1.0 and rows[:, -1].sum() == 4 * ENVS
    # The loss scale lives in the scan's state: every scaled step was finite (166 critic and 83 actor steps), no growth
    # before its 2,000-step interval.
    scaler = final[os.path.join("agent", "agent_state.pkl")]["grad_scaler_state_dict"]
    assert (scaler["scale"], scaler["_growth_tracker"]) == (2.0**16, 166 + 83)


def test_resume_is_bitwise(full_run, tmp_path, capsys):
    """A run that ends at its checkpoint (step 50) and one stopped by max_wall_seconds after its first call (step
    10, still in the warm-up) both continue, resumed, to exactly the uninterrupted run's final state."""
    run, code, _, _ = full_run
    assert code == 0
    short, stopped = str(tmp_path / "short"), str(tmp_path / "stopped")
    assert main(_argv(*COMMON, *FP16_N_STEP, f"num_env_steps={STEPS // 2}", f"save_path={short}")) == 0
    assert main(_argv(*COMMON, *FP16_N_STEP, f"num_env_steps={STEPS}", "max_wall_seconds=1e-6",
                      f"save_path={stopped}")) == 0
    assert "[budget] env_step=40 " in capsys.readouterr().out
    assert main(_argv(f"agent_load_path={short}", f"num_env_steps={STEPS}")) == 0
    assert main(_argv(f"agent_load_path={stopped}", "max_wall_seconds=null")) == 0
    expected = _checkpoint(run, STEPS)
    for resumed in (short, stopped):
        assert_nested_equal(_checkpoint(resumed, STEPS), expected)
        assert read_eval_csv(os.path.join(resumed, "eval.csv")) == read_eval_csv(os.path.join(run, "eval.csv"))


def test_the_step_0_evaluation_is_over_before_the_first_donated_advance(tmp_path, monkeypatch, capsys):
    """The device loop keeps no array across a donated call: its step-0 evaluation reads the carry's actor and has
    returned before the first ``advance`` (``train_steps`` donates the carry, deleting those arrays). An evaluation
    moved onto a thread is held here until the first advance has returned, so it fails this order every time
    instead of reading donated (or newer) parameters now and then."""
    import threading

    from agent_jax.vector import JaxVectorTrainer

    events: list[str] = []
    read: list = []  # the actor parameters the step-0 evaluation read
    advanced = threading.Event()
    real_evaluate, real_advance = JaxVectorTrainer.evaluate, JaxVectorTrainer.advance

    def evaluate(self, num_episodes):
        if threading.current_thread() is not threading.main_thread():
            assert advanced.wait(120), "the loop never advanced"
        if not read:
            read.extend(jax.tree_util.tree_leaves(self.carry.agent.actor.params))
        events.append("evaluate")
        metrics = real_evaluate(self, num_episodes)
        events.append("evaluated")
        return metrics

    def advance(self, num_steps):
        events.append("advance")
        real_advance(self, num_steps)
        advanced.set()

    monkeypatch.setattr(JaxVectorTrainer, "evaluate", evaluate)
    monkeypatch.setattr(JaxVectorTrainer, "advance", advance)
    assert main(_argv(*COMMON, *FP16_N_STEP, "num_env_steps=80", f"save_path={tmp_path / 'run'}")) == 0
    assert "[completed] env_step=80 " in capsys.readouterr().out
    assert events == ["evaluate", "evaluated", "advance", "advance", "evaluate", "evaluated"]
    assert read and all(leaf.is_deleted() for leaf in read)  # the first advance donated what the evaluation read


@pytest.mark.parametrize(("override", "message"), [
    ("agent.buffer_device_type=cpu", "invalid value 'cpu' for 'agent.buffer_device_type': with env.env_type=mjx"),
    ("updates_per_interaction_step=1.5", "must be a whole number with env.env_type=mjx"),
    ("agent.sample_batch_size=128", "the env count cannot fill the first batch"),
])
def test_config_errors_exit_2(override, message, tmp_path, capsys):
    run = tmp_path / "run"
    try:
        code = main(_argv(*COMMON, f"save_path={run}", override))
    except SystemExit as exc:  # errors found while parsing exit from the parser
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not run.exists()


def test_device_normaliser_matches_the_host_one():
    """The scan's float32 reward normaliser follows ``RewardNormalizer``'s rule (float64 there)."""
    rng = np.random.default_rng(0)
    host = RewardNormalizer(0.99, 5.0)
    spec = types.SimpleNamespace(gamma=0.99)
    f32 = jnp.float32
    state = {"ret": jnp.zeros(3, f32), "ret_max": jnp.zeros((), f32), "ret_mean": jnp.zeros((), f32),
             "ret_var": jnp.ones((), f32), "ret_count": jnp.zeros((), f32)}
    step = jax.jit(lambda s, r, d: normalizer_update(types.SimpleNamespace(**s), r, d, spec))
    for _ in range(200):
        reward = rng.normal(1.0, 2.0, 3).astype(np.float32)
        terminated, truncated = rng.random(3) < 0.05, rng.random(3) < 0.02
        host.update(reward, terminated, truncated)
        state = step(state, reward, jnp.asarray(terminated | truncated, f32))
    np.testing.assert_allclose(np.asarray(state["ret"]), host.G, rtol=1e-5)
    for name, value in (("ret_max", host.G_max), ("ret_mean", host.mean), ("ret_var", host.var),
                        ("ret_count", host.count)):
        np.testing.assert_allclose(float(state[name]), value, rtol=1e-4, err_msg=name)


def test_steps_per_call_and_sigterm():
    from agent_common.config import build_config

    def k(**values):
        return interaction_steps_per_call(types.SimpleNamespace(interaction_steps_per_call=None, **values))

    assert (k(logging_per_interaction_step=10), k(logging_per_interaction_step=488),
            k(logging_per_interaction_step=64), k(logging_per_interaction_step=65)) == (10, 61, 64, 33)
    assert interaction_steps_per_call(build_config({"interaction_steps_per_call": 7})) == 7
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested
    assert signal.getsignal(signal.SIGTERM) == before



def test_n_step_rows_of_the_scan_and_their_resume():
    """n_step=3 in the scan: the stored rows are the 3-step sums of the one-step rows (each step's own rows are the
    newest of the in-flight window, which ``buffer_state`` holds), two steps behind; a trainer restored from a
    checkpoint's state and buffer (window included) stores exactly the rows of the uninterrupted one; updates start
    once 64 rows are stored, two steps later than with n_step=1. (fp16 updates, as in the runs above: the rows do
    not depend on the update's precision.)"""
    from agent_common.config import load_config
    from agent_jax.vector import make_vector_trainer

    def trainer():
        return make_vector_trainer(load_config([*COMMON, f"num_env_steps={STEPS}", *FP16_N_STEP], "jax"))

    three, single = trainer(), []
    for step in range(10):  # one step per call (the same executable): each step's one-step rows
        three.advance(1)
        state = three.buffer_state()
        single.append(state["window"][-1])
        if step == 3:
            saved_state, saved_rows = three.state_dict(), state
    assert saved_rows["window"].shape == (2, ENVS, 2 * 17 + 6 + 3)  # the 2 newest steps are in flight
    multi = three.buffer_state()["rows"]
    assert multi.shape == ((10 - 2) * ENVS, 2 * 17 + 6 + 3)
    gamma, reward = 0.99, 17 + 6
    for t in range(8):  # no episode ends in 10 steps (the time limit is 50)
        want = single[t][:, reward] + gamma * single[t + 1][:, reward] + gamma**2 * single[t + 2][:, reward]
        got = multi[t * ENVS:(t + 1) * ENVS]
        np.testing.assert_allclose(got[:, reward], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[:, :reward], single[t][:, :reward])  # observation, action
        np.testing.assert_array_equal(got[:, reward + 2:-1], single[t + 2][:, reward + 2:-1])  # the 3rd next obs
    resumed = trainer()
    resumed.load_state_dict(saved_state)
    resumed.load_buffer_state(saved_rows)
    resumed.advance(6)
    np.testing.assert_array_equal(resumed.buffer_state()["rows"], multi)
    np.testing.assert_array_equal(resumed.buffer_state()["window"], three.buffer_state()["window"])
    three.advance(10)  # 64 rows after the 18th step: updates on steps 18..20, 2 each
    metrics = three.take_metrics()
    assert metrics["critic/loss"][1] == 6 and np.isfinite(metrics["critic/loss"][0])
    assert int(three.carry.update_step) == 6 and three.window_fill() == 2
