"""agent_common: config, envs, noise, reward normaliser, n-step buffer, LR schedule, logger, checkpoints, plot."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from agent_common.buffer import BATCH_KEYS, ReplayBuffer
from agent_common.config import config_to_yaml, load_config, parse_args
from agent_common.envs import evaluate, get_env_states, make_vec_env, set_env_states, step_env
from agent_common.keys import ConfigError, target_entropy
from agent_common.logger import CSV_HEADER, AverageMeter, RunLogger, UpdateTimeline, launch_time, read_eval_csv
from agent_common.noise import ZetaNoise, truncated_zeta_cdf
from agent_common.normalizer import RewardNormalizer
from agent_common.runs.checkpoints import commit_checkpoint_dir, latest_checkpoint, resolve_checkpoint
from agent_common.runs.files import atomic_pickle, atomic_write, load_pickle
from agent_common.schedule import warmup_cosine_decay

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------------------------------- config
def test_config_defaults_are_upstream_cpu_sim_recipe():
    cfg = load_config([], "torch")
    assert cfg.env.env_name == "HalfCheetah-v4" and cfg.env.rescale_action
    assert cfg.num_env_steps == 1_000_000 and cfg.num_train_envs == 1 and cfg.env.num_train_envs == 1
    a = cfg.agent
    assert (a.sample_batch_size, a.buffer_min_length, a.buffer_max_length) == (512, 10_000, 1_000_000)
    assert a.use_amp is False and a.buffer_device_type == "auto" and cfg.updates_per_interaction_step == 1
    assert (a.critic_num_bins, a.critic_min_v, a.critic_max_v) == (101, -5.0, 5.0)
    assert (a.gamma, a.n_step, a.seed) == (0.99, 1, 0)
    assert (a.actor_update_period, a.critic_target_update_tau, a.temp_initial_value) == (2, 0.01, 0.01)
    assert (a.learning_rate_warmup_step, a.learning_rate_decay_step) == (1, 1_000_000)
    assert cfg.evaluation_per_interaction_step == 100_000 and cfg.logging_per_interaction_step == 10_000
    # periodic checkpoints with their replay buffer by default (exactly resumable after a crash), newest 2 kept
    assert cfg.save_checkpoint_per_interaction_step == 100_000 and cfg.save_buffer and cfg.keep_checkpoints == 2
    assert a.categorical_target_backend == "auto" and a.categorical_target_strict is False


def test_config_overrides_yaml_values_and_derived_fields():
    cfg = load_config(
        [
            "num_env_steps=2_000",
            "agent.sample_batch_size=64",
            "seed=7",
            "env=mujoco",
            "agent=flashSAC",
            "agent.normalized_G_max=10",
            "save_path=null",
            "agent.categorical_target_backend=triton",
            "agent.categorical_target_strict=true",
        ],
        "torch",
    )
    assert cfg.num_env_steps == 2000 and cfg.agent.sample_batch_size == 64 and cfg.agent.seed == 7
    assert (cfg.agent.critic_min_v, cfg.agent.critic_max_v) == (-10.0, 10.0)
    assert cfg.evaluation_per_interaction_step == 200 and cfg.logging_per_interaction_step == 20
    assert cfg.agent.learning_rate_decay_step == 2000
    assert cfg.save_path is not None and "HalfCheetah-v4" in cfg.save_path and "seed7" in cfg.save_path
    assert cfg.agent.categorical_target_strict is True
    assert "sample_batch_size: 64" in config_to_yaml(cfg)


def test_config_is_frozen():
    cfg = load_config([], "jax")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.agent.sample_batch_size = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("overrides", "framework", "fragments"),
    [
        (["agent.sampel_batch_size=3"], "torch", ["agent.sampel_batch_size", "agent.sample_batch_size"]),
        (["nonsense=1"], "torch", ["nonsense"]),
        (["agent.sample_batch_size=abc"], "torch", ["agent.sample_batch_size", "int"]),
        (
            ["agent.categorical_target_backend=pallas"],
            "torch",
            ["agent.categorical_target_backend", "auto, torch, triton"],
        ),
        (["agent.categorical_target_backend=torch"], "jax",
         ["agent.categorical_target_backend", "auto, jax, triton, pallas", "(framework jax)"]),
        (["env.env_name=Pendulum-v1"], "torch", ["env.env_name", "HalfCheetah-v4", "Humanoid-v4"]),
        (["agent.compile_mode=fast"], "torch", ["agent.compile_mode", "max-autotune", "off"]),
        (["agent.buffer_min_length=0"], "torch", ["agent.buffer_min_length"]),
        (["agent.sample_batch_size=0"], "torch", ["agent.sample_batch_size", ">= 1"]),
        (["env=dmc"], "torch", ["env", "mujoco"]),
        (["agent.gamma=0.9"], "torch", ["agent.gamma", "gamma"]),
        (["agent.categorical_target_strict=maybe"], "torch", ["agent.categorical_target_strict"]),
        (["seed"], "torch", ["seed", "key=value"]),
    ],
)
def test_config_errors_name_the_key(overrides, framework, fragments):
    with pytest.raises(ConfigError) as info:
        load_config(overrides, framework)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_parse_args_repeatable_overrides_and_exit_code(capsys):
    cfg = parse_args(["--overrides", "seed=3", "--overrides", "env.env_name=Hopper-v4"], framework="torch")
    assert cfg.seed == 3 and cfg.env.env_name == "Hopper-v4"
    with pytest.raises(SystemExit) as info:
        parse_args(["--overrides", "agent.bogus=1"], framework="torch")
    assert info.value.code == 2
    assert "agent.bogus" in capsys.readouterr().err


def test_target_entropy_matches_spec():
    cfg = load_config([], "torch").agent
    assert target_entropy(cfg, -np.ones(6), np.ones(6)) == pytest.approx(-2.869, abs=1e-3)
    assert target_entropy(cfg, -np.ones(17), np.ones(17)) == pytest.approx(-8.129, abs=1e-3)
    assert target_entropy(cfg, -np.ones(3), np.ones(3)) == pytest.approx(-1.435, abs=1e-3)
    # native Humanoid bounds [-0.4, 0.4] add sum(log 0.4)
    assert target_entropy(cfg, -0.4 * np.ones(17), 0.4 * np.ones(17)) == pytest.approx(
        -8.129 + 17 * math.log(0.4), abs=1e-3
    )


# ----------------------------------------------------------------------------------------------------- envs
def test_vec_env_truncation_returns_final_obs_and_flags():
    envs = make_vec_env("HalfCheetah-v4", 1, seed=0, max_episode_steps=5)
    envs.reset(seed=0)
    flags = []
    for t in range(7):
        res = step_env(envs, np.full((1, 6), 0.5, dtype=np.float32))
        flags.append((res.terminated[0], res.truncated[0]))
        if t == 4:
            # SameStep autoreset: the policy sees the reset obs, the buffer gets the true final obs
            assert res.truncated[0] == 1.0 and res.terminated[0] == 0.0
            assert not np.allclose(res.next_observation, res.reset_observation)
            assert np.array_equal(res.next_observation[0], np.asarray(res.info["final_obs"][0], np.float32))
        else:
            assert np.array_equal(res.next_observation, res.reset_observation)
    assert flags[4] == (0.0, 1.0) and all(f == (0.0, 0.0) for i, f in enumerate(flags) if i != 4)
    envs.close()


def test_vec_env_termination_is_flagged():
    envs = make_vec_env("Hopper-v4", 1, seed=0)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(1000):
        res = step_env(envs, rng.uniform(-1, 1, (1, 3)).astype(np.float32))
        if res.terminated[0]:
            assert res.truncated[0] == 0.0
            assert np.array_equal(res.next_observation[0], np.asarray(res.info["final_obs"][0], np.float32))
            break
    else:
        pytest.fail("Hopper never terminated under random actions")
    envs.close()


def test_env_snapshot_restores_exact_trajectory():
    envs = make_vec_env("HalfCheetah-v4", 1, seed=1, max_episode_steps=8)
    envs.reset(seed=1)
    rng = np.random.default_rng(1)
    for _ in range(5):
        step_env(envs, rng.uniform(-1, 1, (1, 6)).astype(np.float32))
    snap = get_env_states(envs)
    actions = rng.uniform(-1, 1, (10, 1, 6)).astype(np.float32)
    first = [step_env(envs, a) for a in actions]  # crosses a truncation + reset (uses the env RNG)
    set_env_states(envs, snap)
    second = [step_env(envs, a) for a in actions]
    for x, y in zip(first, second, strict=True):
        assert np.array_equal(x.next_observation, y.next_observation) and np.array_equal(x.reward, y.reward)
        assert np.array_equal(x.truncated, y.truncated)
    envs.close()


def test_rescale_action_and_evaluate():
    envs = make_vec_env("Humanoid-v4", 1, seed=0, max_episode_steps=3)
    space = envs.single_action_space
    assert np.all(space.low == -1.0) and np.all(space.high == 1.0) and space.dtype == np.float32
    envs.reset(seed=0)
    out = evaluate(lambda obs: np.zeros((1, 17), np.float32), envs, num_episodes=2)
    assert out["avg_length"] <= 3.0 and math.isfinite(out["avg_return"])
    assert set(out) == {"avg_return", "avg_length", "avg_success_once", "avg_success_end"}
    envs.close()


# ----------------------------------------------------------------------------------------------------- noise
def test_truncated_zeta_pmf_matches_spec():
    cdf = truncated_zeta_cdf(2.0, 16)
    pmf = np.diff(np.concatenate([[0.0], cdf]))
    assert pmf[:4] == pytest.approx([0.631, 0.158, 0.070, 0.039], abs=1e-3)
    assert pmf[15] == pytest.approx(0.0025, abs=1e-4)
    assert float(np.sum(pmf * np.arange(1, 17))) == pytest.approx(2.13, abs=0.01)


def test_zeta_noise_holds_noise_for_sampled_lengths_and_round_trips():
    noise = ZetaNoise(num_envs=2, action_dim=3, mu=2.0, k_max=16, seed=0)
    draws = [noise.sample() for _ in range(4000)]
    runs, current = [], 1
    for prev, cur in zip(draws, draws[1:], strict=False):
        if np.array_equal(prev, cur):
            current += 1
        else:
            runs.append(current)
            current = 1
    runs = np.array(runs)
    assert runs.max() <= 16 and abs(runs.mean() - 2.13) < 0.15 and abs(np.mean(runs == 1) - 0.631) < 0.05
    state = noise.state_dict()
    a = [noise.sample() for _ in range(50)]
    other = ZetaNoise(2, 3, 2.0, 16, seed=99)
    other.load_state_dict(state)
    b = [other.sample() for _ in range(50)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(ZetaNoise(2, 3, 2.0, 16, seed=1).sample(), ZetaNoise(2, 3, 2.0, 16, seed=2).sample())


# ----------------------------------------------------------------------------------------------------- normaliser
def test_reward_normalizer_hand_computed():
    norm = RewardNormalizer(gamma=0.5, normalized_G_max=5.0)
    norm.update(np.array([2.0]), np.array([0.0]), np.array([0.0]))  # G = 2
    assert norm.G.tolist() == [2.0] and norm.G_max == 2.0
    assert norm.mean == 2.0 and norm.var == pytest.approx(1e-4)  # upstream quirk: (1e-4 + 0) / 1
    norm.update(np.array([1.0]), np.array([0.0]), np.array([0.0]))  # G = 0.5*2 + 1 = 2
    assert norm.G.tolist() == [2.0] and norm.count == 2.0
    norm.update(np.array([-3.0]), np.array([1.0]), np.array([0.0]))  # terminal step: G restarts at r = -3
    assert norm.G.tolist() == [-3.0] and norm.G_max == 3.0
    # mean of {2, 2, -3}; M2 recursion as in docs/flashsac.md
    var2 = 1e-4 * (1 + 1e-4) / 2  # after the 2nd update (delta 0)
    delta = -3.0 - 2.0
    m2 = var2 * (2 + 1e-4) + delta**2 * 2 * 1 / 3
    assert norm.mean == pytest.approx(2.0 + delta / 3) and norm.var == pytest.approx(m2 / 3)
    scale = max(math.sqrt(norm.var + 1e-8), 3.0 / 5.0)
    assert norm.normalize(np.array([1.0, -2.0])) == pytest.approx(np.array([1.0, -2.0]) / scale, rel=1e-6)
    assert norm.normalize(np.array([1.0])).dtype == np.float32
    fresh = RewardNormalizer(0.5, 5.0)
    fresh.load_state_dict(norm.state_dict())
    assert fresh.scale() == norm.scale()
    assert RewardNormalizer(0.5, 5.0, enabled=False).normalize(np.array([7.0]))[0] == 7.0


def test_reward_normalizer_bounds_largest_return_by_g_max():
    norm = RewardNormalizer(gamma=0.99, normalized_G_max=5.0)
    for _ in range(2000):
        norm.update(np.array([10.0]), np.array([0.0]), np.array([0.0]))
    # G approaches 1000 and std(G) is small: the G_max term dominates so |normalised return| <= 5
    assert norm.scale() == pytest.approx(norm.G_max / 5.0)
    assert abs(norm.G[0] / norm.scale()) <= 5.0 + 1e-9


# ----------------------------------------------------------------------------------------------------- buffer
def _fill(buffer: ReplayBuffer, rewards, dones_term, dones_trunc):
    for t, (r, d, u) in enumerate(zip(rewards, dones_term, dones_trunc, strict=True)):
        buffer.add(
            np.full((1, 2), t, np.float32),
            np.full((1, 1), t, np.float32),
            np.array([r], np.float32),
            np.array([d], np.float32),
            np.array([u], np.float32),
            np.full((1, 2), t + 100, np.float32),
        )


def test_n_step_buffer_cuts_window_at_done():
    buffer = ReplayBuffer(2, 1, max_length=100, min_length=1, n_step=3, gamma=0.5, seed=0)
    _fill(buffer, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0], [0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0])
    assert len(buffer) == 4  # the n-1 newest steps are still in flight
    # start 0: r0 + 0.5 r1, cut at the termination at t=1 (its flags and next obs are carried)
    assert buffer.reward[0] == pytest.approx(1.0 + 0.5 * 2.0) and buffer.terminated[0] == 1.0
    assert buffer.next_observation[0, 0] == 101
    # start 1: terminal itself
    assert buffer.reward[1] == pytest.approx(2.0) and buffer.terminated[1] == 1.0
    # start 2: 4 + 0.5*8 + 0.25*16, window ends at the truncation at t=4 (bootstraps from its final obs)
    assert buffer.reward[2] == pytest.approx(4 + 4 + 4) and buffer.truncated[2] == 1.0
    assert buffer.terminated[2] == 0.0 and buffer.next_observation[2, 0] == 104
    # start 3: 8 + 0.5*16, cut at t=4
    assert buffer.reward[3] == pytest.approx(16.0) and buffer.next_observation[3, 0] == 104


def test_buffer_sampling_seeded_wraps_and_round_trips():
    buffer = ReplayBuffer(2, 1, max_length=8, min_length=4, n_step=1, gamma=0.99, seed=3)
    assert not buffer.can_sample()
    _fill(buffer, list(range(11)), [0] * 11, [0] * 11)
    assert len(buffer) == 8 and buffer.can_sample() and buffer.index == 3
    assert sorted(buffer.reward.tolist()) == [float(x) for x in range(3, 11)]  # oldest rows overwritten
    state = buffer.state_dict()
    batch = buffer.sample(32)
    assert set(batch) == set(BATCH_KEYS) and batch["observation"].shape == (32, 2)
    assert all(v.dtype == np.float32 for v in batch.values())
    other = ReplayBuffer(2, 1, max_length=8, min_length=4, n_step=1, gamma=0.99, seed=42)
    other.load_state_dict(state)
    batch2 = other.sample(32)
    assert all(np.array_equal(batch[k], batch2[k]) for k in BATCH_KEYS)


def test_buffer_rejects_non_finite():
    buffer = ReplayBuffer(2, 1, max_length=8, min_length=1, n_step=1, gamma=0.99, seed=0)
    with pytest.raises(FloatingPointError, match="reward"):
        _fill(buffer, [float("nan")], [0], [0])
    with pytest.raises(FloatingPointError, match="observation"):
        buffer.add(np.array([[np.inf, 0]]), np.zeros((1, 1)), np.zeros(1), np.zeros(1), np.zeros(1), np.zeros((1, 2)))
    assert len(buffer) == 0


# ----------------------------------------------------------------------------------------------------- schedule
def test_warmup_cosine_decay():
    kw = dict(init_value=3e-4, peak_value=3e-4, end_value=1.5e-4, warmup_steps=1, decay_steps=1_000_000)
    assert warmup_cosine_decay(0, **kw) == 3e-4
    assert warmup_cosine_decay(1, **kw) == pytest.approx(3e-4)
    assert warmup_cosine_decay(1_000_000, **kw) == 1.5e-4 and warmup_cosine_decay(2_000_000, **kw) == 1.5e-4
    # actor / temperature stop mid-schedule (~495k of ~990k steps): ≈ 2.26e-4 (docs/flashsac.md)
    assert warmup_cosine_decay(495_000, **kw) == pytest.approx(2.26e-4, abs=5e-7)
    assert warmup_cosine_decay(990_000, **kw) == pytest.approx(1.50e-4, abs=1e-7)
    assert warmup_cosine_decay(5, 0.0, 1.0, 0.0, 10, 20) == pytest.approx(0.5)


# ----------------------------------------------------------------------------------------------------- logger
def test_logger_writes_tensorboard_csv_and_config(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = RunLogger(str(tmp_path), "FlashSAC", "HalfCheetah-v4", 3, "seed: 3\n")
    logger.log_scalars({"critic/loss": 1.5, "actor/loss": -0.5}, 100)
    logger.log_eval({"avg_return": 12.5, "avg_length": 1000.0, "avg_success_once": 0.0, "avg_success_end": 0.0}, 200)
    logger.log_text("backend/selected", "torch (requested torch: requested)", 0)
    logger.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    assert {"critic/loss", "actor/loss", "avg_return", "avg_length"} <= set(acc.Tags()["scalars"])
    assert acc.Scalars("avg_return")[0].step == 200 and acc.Scalars("avg_return")[0].value == 12.5
    assert {"config", "backend/selected"} <= set(acc.Tags()["tensors"])
    lines = (tmp_path / "eval.csv").read_text().splitlines()
    assert lines[0] == ",".join(CSV_HEADER)
    assert lines[1].split(",") == ["0", "FlashSAC", "HalfCheetah-v4", "3", "avg_return", "200.0", "12.5"]
    assert read_eval_csv(str(tmp_path / "eval.csv")) == [(200.0, 12.5)]
    assert (tmp_path / "config.yaml").read_text() == "seed: 3\n"
    # reopening (resume) appends with a continuing index
    logger = RunLogger(str(tmp_path), "FlashSAC", "HalfCheetah-v4", 3, "seed: 3\n", use_tensorboard=False)
    logger.log_eval({"avg_return": 13.0}, 300)
    logger.close()
    lines = (tmp_path / "eval.csv").read_text().splitlines()
    assert lines[-1].startswith("2,FlashSAC") and len(lines) == 4


def test_average_meter_round_trip():
    meter = AverageMeter()
    meter.update({"a": 1.0, "b": 2.0})
    meter.update({"a": 3.0})
    assert meter.averages() == {"a": 2.0, "b": 2.0}
    other = AverageMeter()
    other.load_state_dict(meter.state_dict())
    assert other.averages() == meter.averages()


# ----------------------------------------------------------------------------------------------------- checkpoint
def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    path = str(tmp_path / "x.pkl")
    atomic_pickle(path, {"v": 1})

    def boom(f):
        f.write(b"partial")
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(path, boom)
    assert load_pickle(path) == {"v": 1}
    assert os.listdir(tmp_path) == ["x.pkl"]  # no temp file left behind


def test_checkpoint_dir_commit_and_resolve(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(FileNotFoundError):
        resolve_checkpoint(str(run))
    for step in (10, 20):
        tmp = run / "checkpoints" / f"step{step}.tmp"
        tmp.mkdir(parents=True)
        atomic_pickle(str(tmp / "loop_state.pkl"), {"step": step})
        commit_checkpoint_dir(str(tmp), str(run / "checkpoints" / f"step{step}"))
    assert latest_checkpoint(str(run)).endswith("step20")
    assert resolve_checkpoint(str(run)).endswith("step20")
    assert resolve_checkpoint(str(run / "checkpoints" / "step10")).endswith("step10")
    (run / "config.yaml").write_text(config_to_yaml(load_config([f"save_path={run}"], "torch")))
    assert load_config([f"agent_load_path={run}/checkpoints/step10"], "torch").save_path == str(run)


# ----------------------------------------------------------------------------------------------------- plot
def test_plot_command_writes_png(tmp_path):
    logger = RunLogger(str(tmp_path), "FlashSAC", "HalfCheetah-v4", 0, "", use_tensorboard=False)
    for step, value in ((0, -300.0), (100, 50.0), (200, 400.0)):
        logger.log_eval({"avg_return": value}, step)
    logger.close()
    reference = "/work/shared/reference/flashsac_published_returns.csv"
    cmd = [sys.executable, "-m", "agent_common.plot", str(tmp_path)]
    if os.path.exists(reference):
        cmd += ["--reference", reference]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    png = tmp_path / "learning_curve.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_agent_common_imports_no_framework():
    code = (
        "import sys, agent_common, agent_common.driver, agent_common.plot, agent_common.envs; "
        "bad = [m for m in ('torch', 'jax', 'tensorflow') if m in sys.modules]; assert not bad, bad"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_update_timeline_first_update_and_steady_rate():
    """Time to first update counts from launch; the steady rate skips the slow first update (a compile) and uses
    the last half of the time after it; memory stays bounded over a long run."""
    tl = UpdateTimeline(launch=100.0, max_samples=8)
    assert math.isnan(tl.time_to_first_update) and math.isnan(tl.steady_rate())
    assert tl.record(130.0, 1, seconds=20.0)  # the first update: 20 s of compilation, done 30 s after launch
    assert tl.time_to_first_update == 30.0 and tl.first_seconds == 20.0
    assert math.isnan(tl.steady_rate())  # one update: no rate yet
    # then 10 updates/s for 10 s, 100 updates/s for the next 10 s: the last half runs at 100/s
    t, n = 130.0, 1
    for rate in (10, 100):
        for _ in range(10 * rate):
            t, n = t + 1.0 / rate, n + 1
            assert not tl.record(t, n)
    assert abs(tl.steady_rate(0.5) - 100.0) < 1.5
    assert 10 < tl.steady_rate(1.0) < 100  # the whole time after the first update
    assert len(tl._times) <= 8 + 1 and tl._times[0] == 130.0  # bounded; the first sample stays
    with pytest.raises(ValueError, match="fraction"):
        tl.steady_rate(0.0)
    assert launch_time() <= time.monotonic()
