"""`python -m bench vs-upstream` on CPU against a fake upstream checkout (the smoke test is its --tiny run): a tiny
train.py that prints a tqdm bar and writes TensorBoard events like upstream's trainer, and an update module whose
TD-target function fails on float64 rewards the way upstream's does on torch 2.11 / gymnasium 1.x / numpy 2 (so the
opt-in dtype fix is exercised for real)."""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from bench import vs_upstream
from bench.upstream_launch import cast_like_log_probs

FAKE_TRAIN = '''
import argparse
import sys
import time
from datetime import datetime

assert "flash_rl.agents.flashSAC.update" not in sys.modules  # the dtype fix must not import anything before this
import torch
import tqdm
from torch.utils.tensorboard import SummaryWriter

from flash_rl.agents.flashSAC import update

try:  # --upstream-site: a package at upstream's own pin, first on this row's path
    import upstream_pin_probe
    print("upstream site:", upstream_pin_probe.NAME)
except ImportError:
    pass

ap = argparse.ArgumentParser()
ap.add_argument("--overrides", action="append", default=[])
cfg = dict(o.split("=", 1) for o in ap.parse_args().overrides)
n, m = int(cfg["num_env_steps"]), int(cfg["agent.buffer_min_length"])
mode = "eager" if cfg.get("agent.use_compile") == "false" else cfg.get("agent.compile_mode", "auto")
first_update_s = {"eager": 0.05, "default": 1.0}.get(mode, 1000.0)  # auto: "autotunes" past any limit
stamp = datetime.now().strftime("%m%d_%H%M%S")
writer = SummaryWriter(f"runs/test/FlashSAC/{cfg['env.env_name']}_seed{cfg['seed']}_{stamp}")
print("Using the environment's default (1000) since `max_episode_steps` is not provided.")
writer.add_scalar("avg_return", -300.0, global_step=0)
for step in tqdm.tqdm(range(1, n + 1), smoothing=0.1, mininterval=0.05):
    time.sleep(0.0005)  # an env step
    if step >= m:
        if step == m:
            time.sleep(first_update_s)  # compilation
        log_probs = torch.log_softmax(torch.zeros(4, 11), dim=-1)
        reward = torch.ones(4, dtype=torch.float64)  # what gymnasium hands over on this stack
        update._compute_categorical_td_target(target_log_probs=log_probs, reward=reward, done=torch.zeros_like(reward),
                                              actor_entropy=torch.zeros(4), gamma=0.99, num_bins=11, min_v=-5.0,
                                              max_v=5.0)
        time.sleep(0.02)  # an update (long enough for several bar refreshes after the first update)
time.sleep(0.2)  # the final evaluation
writer.add_scalar("avg_return", 123.5, global_step=n)
writer.close()
'''

FAKE_UPDATE = '''
import torch


def _compute_categorical_td_target(target_log_probs, reward, done, actor_entropy, gamma, num_bins, min_v, max_v):
    target = torch.zeros_like(target_log_probs)
    src = (reward.reshape(-1, 1) + gamma * (1.0 - done.reshape(-1, 1)) - actor_entropy.reshape(-1, 1)).expand(
        -1, num_bins)
    return target.scatter_add_(1, torch.zeros_like(target, dtype=torch.long), src * target_log_probs.exp())
'''


@pytest.fixture(scope="module")
def fake_upstream(tmp_path_factory):
    root = tmp_path_factory.mktemp("upstream")
    (root / "train.py").write_text(textwrap.dedent(FAKE_TRAIN))
    pkg = root / "flash_rl" / "agents" / "flashSAC"
    pkg.mkdir(parents=True)
    for d in (root / "flash_rl", root / "flash_rl" / "agents", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "update.py").write_text(textwrap.dedent(FAKE_UPDATE))
    return root


def _args(upstream, out, rows, *extra):
    return ["--upstream", str(upstream), "--out", str(out), "--rows", rows, "--device", "cpu",
            "--num-env-steps", "300", "--buffer-min-length", "150", *extra]


def test_tqdm_timing_reads_the_first_update_and_the_steady_rate_off_the_bar():
    # random steps at 1000/s until 100, a 5 s compile in step 100, then 10 updates/s, then 100 updates/s
    samples = [(0.1 * i, 100 * i // 10) for i in range(10)] + [(6.0, 101)]
    samples += [(6.0 + 0.1 * k, 101 + k) for k in range(1, 101)] + [(16.0 + 0.01 * k, 201 + k) for k in range(1, 1001)]
    got = vs_upstream.tqdm_timing(samples, first_update_step=100)
    assert got["time_to_first_update_s"] == 6.0 and got["first_update_s"] == pytest.approx(6.0 - 0.9)
    assert got["steady_updates_per_second"] == pytest.approx(100.0, rel=0.05)
    none = vs_upstream.tqdm_timing(samples[:10], first_update_step=100)  # stopped during the compile
    assert all(math.isnan(v) for v in none.values())


@pytest.mark.parametrize(("rows", "fragment"), [("", "at least one row"), ("upstream:fast", "upstream:<mode>"),
                                                ("jax:default", "no compile mode"), ("torch,torch", "twice"),
                                                ("pytorch", "expected upstream:<mode>")])
def test_bad_rows_are_named(rows, fragment):
    with pytest.raises(ValueError, match="--rows") as err:
        vs_upstream.parse_rows(rows)
    assert fragment in str(err.value)


def test_bad_arguments_exit_2_naming_the_argument(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        vs_upstream.main(_args(tmp_path / "nowhere", tmp_path / "out", "upstream:eager"))
    assert exc.value.code == 2 and "--upstream" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        vs_upstream.main(["--rows", "torch", "--num-env-steps", "100", "--buffer-min-length", "100"])
    assert exc.value.code == 2 and "--buffer-min-length" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        vs_upstream.main(["--rows", "torch", "--upstream-site", str(tmp_path / "no-site")])
    assert exc.value.code == 2 and "--upstream-site" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_dtype_fix_casts_by_keyword_and_position():
    torch = pytest.importorskip("torch")
    seen = []
    fixed = cast_like_log_probs(lambda lp, r, d, e, *rest, **kw: seen.append((r.dtype, d.dtype, e.dtype, rest, kw)))
    lp = torch.zeros(2, 3, dtype=torch.float32)
    fixed(lp, torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64), torch.zeros(2), 0.99, k=1)
    fixed(target_log_probs=lp, reward=torch.ones(2, dtype=torch.float64), done=torch.zeros(2),
          actor_entropy=torch.zeros(2, dtype=torch.float64), gamma=0.9)
    assert seen == [(torch.float32,) * 3 + ((0.99,), {"k": 1}), (torch.float32,) * 3 + ((), {"gamma": 0.9})]


def test_tiny_run_against_a_fake_upstream(fake_upstream, tmp_path, capsys):
    """`python -m bench vs-upstream --tiny` with the dtype fix: upstream eager and this project's torch agent (tiny,
    CPU); every row's time to first update, steady rate, wall time and final return in results.json / results.md."""
    from bench.__main__ import main

    out = tmp_path / "vs"
    rc = main(["vs-upstream", "--tiny", "--upstream", str(fake_upstream), "--out", str(out), "--upstream-dtype-fix"])
    assert rc == 0, capsys.readouterr()
    res = json.loads((out / "results.json").read_text())
    rows = {r["row"]: r for r in res["rows"]}
    assert list(rows) == ["torch", "upstream:eager"] and all(r["ok"] for r in rows.values()), rows
    assert res["complete"] and res["config"]["upstream_dtype_fix"] and res["config"]["device"] == "cpu"
    up = rows["upstream:eager"]
    assert up["dtype_fix"] and up["final_eval_return"] == 123.5 and 0 < up["time_to_first_update_s"] < up["wall_s"]
    assert 10 < up["steady_updates_per_second"] < 55  # 20 ms of sleep per update
    assert "upstream_launch: --upstream-dtype-fix applied" in (out / up["log"]).read_text()
    r = rows["torch"]
    assert 0 < r["first_update_s"] < r["time_to_first_update_s"] < r["wall_s"], r
    # the steady rate is the CLI's own (its closing line); with 30 tiny updates on a loaded CPU its window can be
    # empty (nan), which the CLI prints as such: the row must carry the number the line printed
    assert "steady_updates/s=" in (out / r["log"]).read_text() and math.isfinite(r["final_eval_return"])
    assert r["steady_updates_per_second"] > 0 or math.isnan(r["steady_updates_per_second"])
    assert "agent_torch.train" in r["command"] and "agent.critic_hidden_dim=8" in r["command"]
    md = (out / "results.md").read_text()
    assert "upstream train.py, agent.use_compile=false (with the dtype fix)" in md and "--upstream-dtype-fix" in md
    assert md.count("| completed |") == 2 and "python -m bench vs-upstream --tiny" in md


def test_without_the_fix_upstream_fails_at_its_first_update_and_a_limit_stops_a_row(fake_upstream, tmp_path):
    out = tmp_path / "vs"
    rc = vs_upstream.main(_args(fake_upstream, out, "upstream:eager,upstream:auto", "--time-limit", "8",
                                "--runs-dir", str(tmp_path / "elsewhere")))
    assert rc == 1
    res = json.loads((out / "results.json").read_text())
    eager, auto = res["rows"]
    assert auto["limit_s"] == 8 and (tmp_path / "elsewhere" / "upstream-auto").is_dir()
    assert eager["returncode"] not in (0, "timeout") and "dtype" in eager["error"] and not eager["dtype_fix"]
    assert auto["returncode"] == "timeout" and math.isnan(auto["time_to_first_update_s"])
    assert math.isnan(auto["final_eval_return"])  # only the evaluation before training was logged
    md = (out / "results.md").read_text()
    assert "failed (exit" in md and "stopped at the 8 s limit, before its first update" in md
    assert "--upstream-dtype-fix" not in md.split("|---|")[0]  # no claim of a fix that did not run


def test_rows_past_the_budget_are_not_run(fake_upstream, tmp_path):
    out = tmp_path / "vs"
    assert vs_upstream.main(_args(fake_upstream, out, "upstream:eager", "--budget-s", "5")) == 1
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    assert row["returncode"] == "not run" and not row["ok"] and not (out / "logs").exists()
    assert "| not run: the --budget-s of 5 s was spent |" in (out / "results.md").read_text()


def test_race_headline_is_the_slower_rows_best_and_each_rows_time_to_it():
    rows = [{"row": "torch", "return_curve": [[10.0, 0, -5.0], [40.0, 1e5, 300.0], [70.0, 2e5, 650.0]]},
            {"row": "upstream:eager", "return_curve": [[30.0, 0, -4.0], [200.0, 1e5, 320.0], [400.0, 2e5, 310.0]]},
            {"row": "jax", "return_curve": []}]  # no evaluation: not in the race
    headline = vs_upstream.race(rows)
    assert headline["slower"] == "upstream:eager" and headline["target_return"] == 320.0
    assert headline["seconds_to_target"] == {"torch": 70.0, "upstream:eager": 200.0}
    assert vs_upstream.race(rows[:1]) is None


def test_tiny_race_records_return_curves_against_wall_clock(fake_upstream, tmp_path, capsys):
    """--eval-every: this project's row evaluates every 20 interaction steps and stops itself before the limit; both
    rows carry their evaluations against seconds since launch; the headline and race.png are written."""
    from bench.__main__ import main

    out, site = tmp_path / "race", tmp_path / "site"
    site.mkdir()
    (site / "upstream_pin_probe.py").write_text("NAME = 'pinned'\n")
    rc = main(["vs-upstream", "--tiny", "--upstream", str(fake_upstream), "--out", str(out), "--upstream-dtype-fix",
               "--eval-every", "20", "--upstream-site", str(site)])
    assert rc == 0, capsys.readouterr()
    res = json.loads((out / "results.json").read_text())
    rows = {r["row"]: r for r in res["rows"]}
    assert "max_wall_seconds=280" in rows["torch"]["command"]
    assert "evaluation_per_interaction_step=20" in rows["upstream:eager"]["command"]
    assert "upstream site: pinned" in (out / rows["upstream:eager"]["log"]).read_text()
    steps = [s for _t, s, _v in rows["torch"]["return_curve"]]
    assert steps[0] == 0 and steps[-1] == 60 and len(steps) >= 3, steps  # the start, the end and between
    assert [(s, v) for _t, s, v in rows["upstream:eager"]["return_curve"]] == [(0, -300.0), (60, 123.5)]
    for r in rows.values():
        times = [t for t, _s, _v in r["return_curve"]]
        assert 0 < times[0] and times == sorted(times) and times[-1] < r["wall_s"]
    assert res["race"]["target_return"] == min(res["race"]["best_return"].values())
    assert set(res["race"]["seconds_to_target"]) == {"torch", "upstream:eager"}
    md = (out / "results.md").read_text()
    assert "Race: every row had the same 300 s" in md and (out / "race.png").stat().st_size > 1000


def test_playground_recipe_in_both_trainers_keys():
    import argparse

    a = argparse.Namespace(recipe="playground", env="CheetahRun", seed=0, num_env_steps=5_120_000,
                           buffer_min_length=100_000, num_eval_episodes=10, eval_every=488, time_limit=480.0,
                           device="cuda", overrides=[], upstream_overrides=[])
    ours = dict(o.split("=", 1) for o in vs_upstream.project_overrides(a, vs_upstream.Row("torch"), "/tmp/r"))
    assert (ours["env.env_type"], ours["env.env_name"], ours["num_train_envs"], ours["agent.sample_batch_size"],
            ours["updates_per_interaction_step"], ours["gamma"], ours["agent.use_amp"]) == (
        "mujoco_playground", "CheetahRun", "1024", "2048", "2", "0.97", "true")
    assert (ours["evaluation_per_interaction_step"], ours["save_checkpoint_per_interaction_step"],
            ours["max_wall_seconds"], ours["agent.buffer_min_length"], ours["num_eval_envs"]) == (
        "488", "5000", "460", "100000", "10")
    assert "agent.use_amp" not in dict(o.split("=", 1) for o in vs_upstream.project_overrides(
        a, vs_upstream.Row("jax"), "/tmp/r"))
    up = dict(o.split("=", 1) for o in vs_upstream.upstream_overrides(a, vs_upstream.Row("upstream:eager")))
    assert (up["env"], up["env.env_name"], up["num_train_envs"], up["agent.sample_batch_size"],
            up["updates_per_interaction_step"], up["gamma"], up["agent.asymmetric_observation"],
            up["evaluation_per_interaction_step"], up["agent.use_compile"], up["num_eval_envs"]) == (
        "mujoco_playground", "CheetahRun", "1024", "2048", "2", "0.97", "false", "488", "false", "10")
