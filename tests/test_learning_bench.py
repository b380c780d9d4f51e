"""The learning-evidence runner and its statistics (bench/learning.py), on CPU.

The statistics are checked on numbers with known answers; the runner trains a tiny torch run through the real CLI,
stops it on its wall budget, and finishes it in a second invocation from its checkpoint.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from scipy import stats

from bench.common import bootstrap_ci
from bench.learning import (
    RunSpec,
    analyse,
    collect_run,
    eval_returns,
    iqm,
    load_published,
    main,
    markdown,
    parse_runs,
    run_all,
    run_finished,
    same_as_published,
    train_command,
)


def test_iqm_is_the_mean_of_the_middle_half():
    assert iqm(np.arange(1.0, 9.0)) == pytest.approx(4.5)  # 3, 4, 5, 6
    assert iqm(np.array([0.0, 10.0, 10.0, 1000.0])) == pytest.approx(10.0)  # outliers trimmed
    assert iqm(np.array([[1.0, 2.0, 3.0, 100.0]]), axis=1)[0] == pytest.approx(2.5)


def test_bootstrap_interval_contains_the_point_and_is_stratified():
    rng = np.random.default_rng(0)
    x = rng.normal(10.0, 1.0, size=50)
    point, lo, hi = bootstrap_ci([x], np.mean)
    assert point == pytest.approx(x.mean()) and lo < point < hi
    half = 1.96 * x.std() / np.sqrt(x.size)
    assert lo == pytest.approx(point - half, abs=0.1) and hi == pytest.approx(point + half, abs=0.1)
    assert bootstrap_ci([np.array([3.0])], np.mean) == (3.0, 3.0, 3.0)
    # strata are resampled separately: a constant stratum keeps its weight in every resample
    a, b = np.zeros(4), np.array([0.0, 4.0, 8.0, 12.0])
    _, lo2, hi2 = bootstrap_ci([a, b], np.mean, seed=1)
    assert 0.0 <= lo2 <= hi2 <= 6.0  # never all-b resamples (mean up to 12)


def test_same_as_published():
    pub_range = {"mean": 9815.0, "min": 9685.0, "max": 10100.6, "n": 5}
    close = np.array([9700.0, 9800.0, 9900.0, 10000.0, 9750.0])
    far = np.array([6000.0, 6200.0, 6100.0, 5900.0, 6050.0])
    assert same_as_published(close, pub_range)["p"] > 0.3
    res = same_as_published(far, pub_range)
    assert res["p"] < 1e-4 and "Welch" in res["test"]
    mean_only = {"mean": 2121.0, "min": None, "max": None, "n": 5}
    assert "one-sample" in same_as_published(far / 3, mean_only)["test"]
    # the published spread, where given, replaces the one-sample test: Hopper's 2,121 +- 1,052 (population sd)
    hopper = np.array([3443.0, 2780.0, 3459.0])
    with_sd = same_as_published(hopper, dict(mean_only, std=1052.0))
    assert with_sd["test"] == "Welch t (published sd)"
    assert same_as_published(hopper, mean_only)["p"] < 0.05 < with_sd["p"]
    sd = 1052.0 * np.sqrt(5 / 4)
    assert with_sd["p"] == pytest.approx(stats.ttest_ind_from_stats(hopper.mean(), hopper.std(ddof=1), 3, 2121.0, sd,
                                                                    5, equal_var=False).pvalue)
    assert same_as_published(np.array([1.0]), pub_range)["p"] is None


def test_published_figures_are_committed_with_their_source():
    pub = load_published()
    assert set(pub) == {"HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4"}
    assert pub["HalfCheetah-v4"][100_000] == {"mean": 9815.0, "min": 9685.0, "max": 10100.6, "std": 155.0, "n": 5}
    assert pub["Hopper-v4"][100_000]["std"] == 1052.0 and pub["Hopper-v4"][200_000]["std"] is None
    assert pub["HalfCheetah-v4"][1_000_000]["mean"] == 14465.0
    assert all(len(steps) == 11 for steps in pub.values())  # 0, 100k, ..., 1M


def test_commands_start_then_resume(tmp_path):
    spec = RunSpec("jax", "Hopper-v4", 1000)
    cmd = train_command(spec, str(tmp_path), 100_000, 500.4, ["agent.sample_batch_size=64"])
    assert cmd[1:3] == ["-m", "agent_jax.train"]
    args = cmd[4::2]
    assert "env.env_name=Hopper-v4" in args and "seed=1000" in args and "num_env_steps=100000" in args
    assert not any(a.startswith("agent.buffer_device_type=") for a in args)  # the agent's default loop
    # the learning rate of a published (1M-step) run, not one derived from this run's 100k budget
    assert "agent.learning_rate_decay_step=1000000" in args and "agent.learning_rate_warmup_step=1" in args
    short = train_command(spec, str(tmp_path), 100_000, 500, ["agent.learning_rate_decay_step=7"], 200_000)[4::2]
    assert short.index("agent.learning_rate_decay_step=200000") < short.index("agent.learning_rate_decay_step=7")
    assert f"save_path={spec.run_dir(str(tmp_path))}" in args and args[-2:] == ["max_wall_seconds=500",
                                                                                f"save_path={spec.run_dir(str(tmp_path))}"]
    os.makedirs(spec.run_dir(str(tmp_path)))
    open(os.path.join(spec.run_dir(str(tmp_path)), "config.yaml"), "w").close()
    assert train_command(spec, str(tmp_path), 100_000, 42, [])[4::2] == [
        f"agent_load_path={spec.run_dir(str(tmp_path))}", "max_wall_seconds=42"]


def test_an_agent_started_from_the_other_agents_initial_state(tmp_path):
    # jax-torchinit: the JAX agent from the torch agent's initial state (agent_interop.train), its own run folder
    spec = parse_runs("jax-torchinit:HalfCheetah-v4:1000")[0]
    cmd = train_command(spec, str(tmp_path), 100_000, 60, [])
    assert cmd[1:7] == ["-m", "agent_interop.train", "--agent", "jax", "--init-from", "torch"]
    assert "seed=1000" in cmd and f"save_path={tmp_path}/jax-torchinit/HalfCheetah-v4/seed1000" in cmd
    assert train_command(RunSpec("torch-jaxinit", "Hopper-v4", 0), str(tmp_path), 100_000, 60, [])[3:7] == [
        "--agent", "torch", "--init-from", "jax"]


def _collected_run(root, agent, task, seed, decay, returns):
    d = root / agent / task / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"agent": agent, "task": task, "seed": seed}))
    (d / "config.yaml").write_text(f"seed: {seed}\nagent:\n  learning_rate_decay_step: {decay}\n")
    rows = "".join(f"{k},avg_return,{v}\n" for k, v in returns.items())
    (d / "eval.csv").write_text("env_step,metric,value\n" + rows)


def test_runs_on_another_learning_rate_schedule_are_kept_apart(tmp_path):
    for seed, ret in ((0, 2000.0), (1, 2200.0)):
        _collected_run(tmp_path / "a", "torch", "Hopper-v4", seed, 1_000_000, {0: 10.0, 100_000: ret})
    for seed, ret in ((0, 3400.0), (1, 3000.0), (2, 3200.0)):  # the same seed numbers, another schedule
        _collected_run(tmp_path / "b", "torch", "Hopper-v4", seed, 100_000, {0: 10.0, 100_000: ret})
    res = analyse([str(tmp_path / "b"), str(tmp_path / "a")])
    rows = [r for r in res["rows"] if r["env_step"] == 100_000]
    assert [(r["lr_decay_steps"], r["published_protocol"], r["returns"]) for r in rows] == [
        (1_000_000, True, [2000.0, 2200.0]), (100_000, False, [3400.0, 3000.0, 3200.0])]
    assert [(a["lr_decay_steps"], a["tasks"]) for a in res["aggregate"]] == [(1_000_000, 1), (100_000, 1)]
    text = markdown(res)
    assert "| torch | Hopper-v4 | 100,000 * | 100,000 | 3 |" in text and "Not the published protocol" in text
    assert "| torch | Hopper-v4 | 1,000,000 | 100,000 | 2 |" in text


def test_runs_are_listed_explicitly():
    assert parse_runs("torch:Hopper-v4:0, jax:HalfCheetah-v4:4000") == [RunSpec("torch", "Hopper-v4", 0),
                                                                         RunSpec("jax", "HalfCheetah-v4", 4000)]
    for bad, named in [("tf:Hopper-v4:0", "'tf:Hopper-v4:0'"), ("torch:Hopper-v3:0", "Hopper-v3"),
                       ("torch:Hopper-v4", "'torch:Hopper-v4'"), ("torch:Hopper-v4:x", ":x'"), (",", "','")]:
        with pytest.raises(ValueError, match=re.escape(named)):
            parse_runs(bad)
    with pytest.raises(SystemExit):
        main(["run", "--root", "/nonexistent", "--budget-s", "1", "--runs", "torch:Ant-v4:one"])


TINY = ["num_threads=1", "agent.categorical_target_backend=torch", "agent.actor_hidden_dim=8",
        "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1", "agent.critic_num_blocks=1",
        "agent.sample_batch_size=8", "agent.buffer_min_length=20", "env.max_episode_steps=30", "num_eval_episodes=1",
        "evaluation_per_interaction_step=500", "save_checkpoint_per_interaction_step=500", "agent.device_type=cpu"]


@pytest.mark.slow
def test_runner_continues_an_unfinished_run_and_reports_it(tmp_path):
    root, steps = str(tmp_path / "runs"), 1000
    spec = RunSpec("torch", "Hopper-v4", 3)
    run_dir = spec.run_dir(root)
    # a 3 s budget: the run gets max_wall_seconds=1 (or 2) and stops with a checkpoint long before 1,000 steps
    first = run_all([spec], root, steps, budget_s=3.0, gpus=[""], per_gpu=1, overrides=TINY, min_run_s=1.0,
                    margin_s=1.0)
    log = open(run_dir + ".log").read()
    assert first["runs"][run_dir]["returncode"] == 0 and not first["runs"][run_dir]["finished"], log
    assert os.path.isdir(os.path.join(run_dir, "checkpoints")), log
    second = run_all([spec], root, steps, budget_s=600.0, gpus=[""], per_gpu=1, overrides=TINY, min_run_s=1.0)
    log = open(run_dir + ".log").read()
    assert second["runs"][run_dir]["returncode"] == 0 and second["runs"][run_dir]["finished"], log
    assert "resumed from" in log and log.count("$ ") == 2
    assert run_finished(run_dir, steps) and set(eval_returns(run_dir)) >= {0, steps}
    third = run_all([spec], root, steps, budget_s=600.0, gpus=[""], per_gpu=1, overrides=TINY)
    assert third["runs"] == {}  # nothing left to do

    out = str(tmp_path / "collected")
    assert main(["collect", "--root", root, "--out", out]) == 0
    dest = os.path.join(out, "torch", "Hopper-v4", "seed3")
    assert json.load(open(os.path.join(dest, "run.json")))["seed"] == 3
    assert eval_returns(dest) == eval_returns(run_dir)
    with pytest.raises(ValueError, match="agent"):
        collect_run("tf", run_dir, out)
    res = analyse([out])
    assert [r["env_step"] for r in res["rows"]] == [0]  # published steps only: 0 (no 100k yet)
    assert res["aggregate"] == []  # step 0 is not normalised (published means near zero)
    assert res["rows"][0]["returns"] == [eval_returns(run_dir)[0]]


def test_readme_learning_section_is_current():
    from bench.common import REPO, section_markers
    from bench.learning import markdown, readme_section

    readme = open(os.path.join(REPO, "README.md")).read()
    begin, end = section_markers("learning")
    body = readme.split(begin, 1)[1].split(end, 1)[0]
    m = re.search(r"Generated by `python -m bench\.learning report ([^`]+?) --readme`", body)
    assert m, "README's learning section does not name its command"
    folders = [os.path.join(REPO, f) for f in m.group(1).split()]
    assert body.strip() == readme_section(folders, markdown(analyse(folders))).strip(), (
        "README's learning section is stale: run the command it names")
