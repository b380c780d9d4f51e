"""Runs a user can trust: resume restores the run's config, checkpoints survive crashes, run directories are never
reused, every checkable value is checked before work, and errors name the file and say what to do.

Tiny torch runs in this process (60 env steps, updates from step 30, a checkpoint and an evaluation every 15 steps);
a few CLI calls in a fresh process where the exit status or an environment variable matters.
"""

from __future__ import annotations

import csv
import functools
import os
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest
import torch

from agent_common.cli import Framework, run
from agent_common.config import ConfigError, config_to_yaml, load_config, parse_args
from agent_common.driver import train
from agent_common.host import host_trainer
from agent_common.runs import files as run_files
from agent_common.runs import manifest as run_manifest
from agent_torch.agent import make_agent
from tests.agent_test_utils import REPO

# Names added with these behaviours are imported inside the tests, so that each test runs (and fails for its own
# reason) on code without them.

TINY = [
    "num_threads=1",
    "progress_bar=false",
    "agent.categorical_target_backend=torch",
    "agent.actor_hidden_dim=8",
    "agent.critic_hidden_dim=16",  # not the defaults: a resume that ignores the run's config cannot load it
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=8",
    "agent.buffer_min_length=15",
    "env.max_episode_steps=20",
    "num_eval_episodes=1",
    "num_env_steps=60",
    "evaluation_per_interaction_step=15",
    "save_checkpoint_per_interaction_step=15",
]


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _factory():
    return make_agent


def _cli(argv_overrides: list[str], capsys) -> tuple[int, str, str]:
    argv = [a for o in argv_overrides for a in ("--overrides", o)]
    try:
        code = run(parse_args(argv, "torch", prog="python -m agent_torch.train"), Framework("torch", _factory))
    except SystemExit as exc:  # config errors exit from parse_args
        code = int(exc.code)  # type: ignore[arg-type]
    out = capsys.readouterr()
    return code, out.out, out.err


def _eval_steps(run_dir) -> list[float]:
    with open(os.path.join(run_dir, "eval.csv"), newline="") as f:
        return [float(r["env_step"]) for r in csv.DictReader(f) if r["metric"] == "avg_return"]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """A finished 60-step run: checkpoints step45 and step60 kept (of 15, 30, 45, 60), evaluations every 15."""
    run = tmp_path_factory.mktemp("runs") / "base"
    result = train(load_config([*TINY, f"save_path={run}"], "torch"), host_trainer(make_agent))
    assert result.status == "completed" and result.env_step == 60
    return run


@pytest.fixture()
def run_copy(base_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(base_run, run)
    return run


# ----------------------------------------------------------------------------------------------- checkpoints
def test_periodic_checkpoints_with_buffer_keep_the_newest(base_run):
    """Defaults: a checkpoint every N/10 with its replay buffer and config; the newest keep_checkpoints=2 stay."""
    found = sorted(os.listdir(base_run / "checkpoints"))
    assert found == ["latest", "step45", "step60"]
    for path in (base_run / "checkpoints" / "step45", base_run / "checkpoints" / "step60"):
        assert sorted(os.listdir(path)) == ["COMPLETE", "agent", "config.yaml", "loop_state.pkl", "replay_buffer.pkl"]


def test_resume_restores_the_run_config_and_extending_keeps_the_schedule(run_copy, capsys):
    """The resume line alone works: the run's own widths (not the defaults) are restored; a longer budget keeps
    the LR schedule and intervals of the run unless rederive_schedule_on_resume=true, and says so."""
    cfg = load_config([f"agent_load_path={run_copy}", "num_env_steps=90"], "torch")
    assert cfg.agent.critic_hidden_dim == 16 and cfg.agent.actor_hidden_dim == 8 and cfg.save_path == str(run_copy)
    assert cfg.agent.learning_rate_decay_step == 60 and cfg.logging_per_interaction_step == 1
    assert cfg.evaluation_per_interaction_step == 15  # set explicitly by the run: kept either way
    rederived = load_config([f"agent_load_path={run_copy}", "num_env_steps=200", "rederive_schedule_on_resume=true"])
    assert rederived.agent.learning_rate_decay_step == 200 and rederived.logging_per_interaction_step == 2
    code, out, err = _cli([f"agent_load_path={run_copy}", "num_env_steps=90"], capsys)
    assert code == 0, err
    assert "[completed] env_step=90" in out and "resumed from" in err and "step60" in err
    assert "agent.learning_rate_decay_step=60 (num_env_steps=90 would give 90)" in err


def test_the_printed_resume_line_works_as_printed(tmp_path, capsys):
    """A run stopped early prints ``resume: python -m agent_torch.train --overrides agent_load_path=<run>``; that
    line alone resumes it (the run's non-default widths come from its config.yaml)."""
    code, out, err = _cli([*TINY, "max_wall_seconds=0.001", f"save_path={tmp_path / 'r'}"], capsys)
    assert code == 0 and "[budget]" in out, err
    line = next(x for x in out.splitlines() if x.strip().startswith("resume:")).split("resume:", 1)[1].split()
    assert line == ["python", "-m", "agent_torch.train", "--overrides", f"agent_load_path={tmp_path / 'r'}"]
    code, out, err = _cli([line[4]], capsys)
    assert code == 0 and "resumed from" in err and "[budget]" in out, err


@pytest.mark.parametrize(
    ("override", "fragments"),
    [
        ("env.env_name=Walker2d-v4", ["env.env_name", "Walker2d-v4", "HalfCheetah-v4", "task"]),
        ("agent.critic_hidden_dim=32", ["agent.critic_hidden_dim", "32", "16", "architecture"]),
        ("agent.learning_rate_peak=1e-3", ["agent.learning_rate_peak", "0.001", "0.0003", "update configuration"]),
    ],
)
def test_resume_refuses_a_different_task_architecture_or_update(run_copy, override, fragments, capsys):
    with pytest.raises(ConfigError) as info:
        load_config([f"agent_load_path={run_copy}", override], "torch")
    for fragment in fragments:
        assert fragment in str(info.value)
    code, _, err = _cli([f"agent_load_path={run_copy}", override], capsys)
    assert code == 2 and fragments[0] in err


def test_kill_during_commit_recovers_and_stale_tmp_is_removed(run_copy, capsys):
    """A SIGKILL between the two renames of a re-save leaves step60.old and step60.tmp (both complete) and no
    step60; with checkpoints/latest gone too, the resume still finds the newest checkpoint and cleans up."""
    ckpts = run_copy / "checkpoints"
    os.replace(ckpts / "step60", ckpts / "step60.old")
    shutil.copytree(ckpts / "step60.old", ckpts / "step60.tmp")
    (ckpts / "latest").unlink()
    (ckpts / "step75.tmp").mkdir()  # half-written: no COMPLETE marker
    (ckpts / "step75.tmp" / "loop_state.pkl").write_bytes(b"\x80")
    code, out, err = _cli([f"agent_load_path={run_copy}", "num_env_steps=75"], capsys)
    assert code == 0, err
    assert "restored" in err and "step60" in err and "resumed from" in err
    assert sorted(os.listdir(ckpts)) == ["latest", "step60", "step75"]
    assert "[completed] env_step=75" in out


def test_damaged_newest_checkpoint_falls_back_with_a_warning(run_copy, capsys):
    actor = run_copy / "checkpoints" / "step60" / "agent" / "actor.pt"
    actor.write_bytes(actor.read_bytes()[:100])  # truncated
    code, out, err = _cli([f"agent_load_path={run_copy}"], capsys)
    assert code == 0, err
    assert f"skipping the checkpoint {run_copy / 'checkpoints' / 'step60'}" in err and str(actor) in err
    assert f"resumed from {run_copy / 'checkpoints' / 'step45'}" in err
    assert "[completed] env_step=60" in out
    assert sorted(os.listdir(run_copy / "checkpoints")) == ["damaged", "latest", "step45", "step60"]  # step60 again
    assert os.listdir(run_copy / "checkpoints" / "damaged") == ["step60-checksum"]  # kept aside, not deleted
    assert len((run_copy / "checkpoints" / "step60" / "agent" / "actor.pt").read_bytes()) > 100


def test_missing_buffer_is_an_error_naming_the_file(run_copy, capsys):
    ckpt = run_copy / "checkpoints" / "step60"
    (ckpt / "replay_buffer.pkl").unlink()
    code, _, err = _cli([f"agent_load_path={ckpt}"], capsys)
    assert code == 2
    assert f"{ckpt / 'replay_buffer.pkl'} is missing" in err and "Traceback" not in err
    assert f"agent_load_path={run_copy}" in err  # the next command: the run directory falls back past it
    with pytest.raises(ConfigError, match="replay_buffer.pkl is missing"):
        load_config([f"agent_load_path={ckpt}"], "torch")


def test_unreadable_loop_state_names_the_file(run_copy, capsys):
    ckpt = run_copy / "checkpoints" / "step60"
    (ckpt / "loop_state.pkl").write_bytes(b"")
    code, _, err = _cli([f"agent_load_path={ckpt}"], capsys)
    assert code == 2 and str(ckpt / "loop_state.pkl") in err and "does not match its SHA-256" in err


def test_foreign_checkpoint_points_to_the_converter(run_copy):
    agent_dir = run_copy / "checkpoints" / "step60" / "agent"
    for name in os.listdir(agent_dir):
        os.replace(agent_dir / name, agent_dir / name.replace(".pt", ".pkl"))  # what the JAX agent writes
    run_manifest.write_manifest(str(run_copy / "checkpoints" / "step60"))  # an intact checkpoint of the other
    with pytest.raises(ConfigError) as info:
        load_config([f"agent_load_path={run_copy}"], "torch")
    assert "written by the jax agent" in str(info.value)
    assert "python -m agent_interop.convert jax-to-torch" in str(info.value)


def test_resume_at_the_end_says_nothing_to_train_and_logs_nothing_twice(run_copy, capsys):
    rows = _eval_steps(run_copy)
    code, out, _ = _cli([f"agent_load_path={run_copy}"], capsys)
    assert code == 0
    assert "nothing to train" in out and "last_eval_return=nan" not in out and "checkpoint: None" not in out
    assert str(run_copy / "checkpoints" / "step60") in out
    assert _eval_steps(run_copy) == rows == [0.0, 15.0, 30.0, 45.0, 60.0]


def test_resume_from_an_older_checkpoint_cuts_eval_csv_and_tensorboard_back(run_copy, capsys):
    """After a crash the run resumes from step45: the eval at 60 is done again, once in eval.csv and in
    TensorBoard (the resumed session's start purges the earlier session's later events)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    shutil.rmtree(run_copy / "checkpoints" / "step60")
    code, _, err = _cli([f"agent_load_path={run_copy}"], capsys)
    assert code == 0, err
    assert _eval_steps(run_copy) == [0.0, 15.0, 30.0, 45.0, 60.0]
    acc = EventAccumulator(str(run_copy / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("avg_return")] == [0, 15, 30, 45, 60]


# ----------------------------------------------------------------------------------------------- run directories
def test_fresh_run_never_writes_into_another_run(run_copy, capsys):
    before = {p: os.path.getmtime(os.path.join(run_copy, p)) for p in ("config.yaml", "eval.csv")}
    with pytest.raises(ConfigError, match="already holds a run"):
        train(load_config([*TINY, "seed=1", f"save_path={run_copy}"], "torch"), host_trainer(make_agent))
    code, _, err = _cli([*TINY, "seed=1", f"save_path={run_copy}"], capsys)
    assert code == 2 and f"agent_load_path={run_copy}" in err
    assert {p: os.path.getmtime(os.path.join(run_copy, p)) for p in before} == before


def test_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        train(load_config([*TINY, "num_env_steps=30", f"save_path={tmp_path / 'r'}"]),
              host_trainer(make_agent))
    finally:
        os.umask(old)
    ckpt = tmp_path / "r" / "checkpoints" / "step30"
    assert ckpt.exists()
    for path in (tmp_path / "r" / "config.yaml", tmp_path / "r" / "eval.csv", ckpt / "loop_state.pkl",
                 ckpt / "agent" / "actor.pt"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o644, path


def test_disk_full_says_so_and_removes_the_partial_checkpoint(tmp_path, monkeypatch, capsys):
    real_mkstemp = run_files.tempfile.mkstemp

    def full_disk_for_checkpoints(*args, **kwargs):
        fd, path = real_mkstemp(*args, **kwargs)
        if "checkpoints" in path:
            os.close(fd)
            fd = os.open("/dev/full", os.O_WRONLY)  # every write fails with ENOSPC
        return fd, path

    monkeypatch.setattr(run_files.tempfile, "mkstemp", full_disk_for_checkpoints)
    run = tmp_path / "r"
    with pytest.raises(OSError, match="No space left on device"):
        train(load_config([*TINY, f"save_path={run}"], "torch"), host_trainer(make_agent))
    assert os.listdir(run / "checkpoints") == []  # the half-written step15.tmp is gone
    code, _, err = _cli([*TINY, f"save_path={tmp_path / 'r2'}"], capsys)
    assert code == 1 and "disk full" in err and "checkpoints/step15" in err and "Traceback" not in err


# ----------------------------------------------------------------------------------------------- checked before work
@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("agent.critic_min_v=5", "agent.critic_min_v"),
        ("agent.normalized_G_max=inf", "agent.normalized_G_max"),
        ("updates_per_interaction_step=inf", "updates_per_interaction_step"),
        ("seed=-1", "seed"),
        ("agent.sample_batch_size=100", "agent.sample_batch_size"),  # above buffer_max_length=50
        ("num_env_steps=10", "agent.buffer_min_length"),  # buffer_min_length=15 above the budget: no update
        ("agent_load_path=/nonexistent/run", "agent_load_path"),
    ],
)
def test_bad_values_exit_2_before_any_work(tmp_path, override, key, capsys):
    code, _, err = _cli([*TINY, "agent.buffer_max_length=50", f"save_path={tmp_path / 'r'}", override], capsys)
    assert code == 2 and key in err and "Traceback" not in err
    assert not (tmp_path / "r").exists() or os.listdir(tmp_path / "r") == []


def test_an_error_leaves_no_empty_directories(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default save_path is runs/<group>/<exp>/<env>/seed<seed>-<time> under here
    code, _, err = _cli([*TINY, "agent_load_path=missing"], capsys)
    assert code == 2 and "agent_load_path" in err and os.listdir(tmp_path) == []
    code, _, err = _cli([*TINY, "num_env_steps=10"], capsys)  # found by the run checks, after the config
    assert code == 2 and "agent.buffer_min_length" in err and os.listdir(tmp_path) == []


def test_unusable_save_path_exits_2(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    code, _, err = _cli([*TINY, f"save_path={tmp_path / 'file' / 'run'}"], capsys)
    assert code == 2 and "save_path" in err


def test_strict_backend_that_cannot_run_ends_with_one_line(tmp_path):
    """Pallas without interpret mode cannot run on a CPU: status 2 and one line, not a traceback."""
    env = dict(os.environ, PYTHONPATH=REPO, FLASHSAC_PALLAS_INTERPRET="0", JAX_PLATFORMS="cpu")
    cmd = [sys.executable, "-m", "agent_jax.train"]
    for item in [*TINY, f"save_path={tmp_path / 'r'}", "agent.categorical_target_backend=pallas",
                 "agent.categorical_target_strict=true"]:
        if not item.startswith("agent.categorical_target_backend=torch"):
            cmd += ["--overrides", item]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("config error: agent.categorical_target_backend=pallas")
    assert "Traceback" not in proc.stderr


def test_stored_config_round_trips(tmp_path):
    cfg = load_config([*TINY, f"save_path={tmp_path}"], "torch")
    (tmp_path / "config.yaml").write_text(config_to_yaml(cfg))
    from agent_common.config import build_config
    from agent_common.keys import config_to_dict, flatten
    from agent_common.runs.files import read_config_file

    again = build_config(read_config_file(str(tmp_path / "config.yaml")), "torch")
    assert flatten(config_to_dict(again)) == flatten(config_to_dict(cfg))


# ------------------------------------------------------------------------------------------ device replay resume
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_resume_with_the_device_replay_is_exact(tmp_path, framework):
    """The agents' fused step over device replay rows (torch: agent.buffer_device_type=cuda, here CPU tensors; JAX:
    the default) resumes exactly: 60 steps straight, and the same run resumed from its step-30 checkpoint, end with
    the same agent, replay rows, sampler, noise, normaliser, pending action, metric window and evaluations."""
    from tests.agent_test_utils import assert_nested_equal

    if framework == "torch":
        overrides = [*TINY, "agent.buffer_device_type=cuda", "agent.device_type=cpu"]
        factory = make_agent
        load = functools.partial(torch.load, weights_only=False)
        agent_files = ["actor.pt", "agent_state.pt", "critic.pt", "target_critic.pt", "temperature.pt"]
    else:
        from agent_jax.agent import make_agent as factory  # type: ignore[assignment]

        overrides = [o.replace("backend=torch", "backend=jax") for o in TINY] + ["agent.buffer_max_length=64"]
        load = run_files.load_pickle
        agent_files = ["actor.pkl", "agent_state.pkl", "critic.pkl", "target_critic.pkl", "temperature.pkl"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    result = train(load_config([*overrides, f"save_path={straight}", "keep_checkpoints=4"], framework),
                   host_trainer(factory))
    assert result.status == "completed"
    cfg = load_config([f"agent_load_path={straight / 'checkpoints' / 'step30'}", f"save_path={resumed}"], framework)
    assert cfg.agent.buffer_device_type == ("cuda" if framework == "torch" else "auto")
    again = train(cfg, host_trainer(factory))
    assert again.env_step == 60 and again.evaluations == result.evaluations[-len(again.evaluations):]
    a, b = straight / "checkpoints" / "step60", resumed / "checkpoints" / "step60"
    for name in agent_files:
        state_a, state_b = load(str(a / "agent" / name)), load(str(b / "agent" / name))
        if name.startswith("agent_state"):
            state_a.pop("cuda_rng_state", None), state_b.pop("cuda_rng_state", None)
        assert_nested_equal(state_a, state_b, name)
    loop_a = run_files.load_pickle(str(a / "loop_state.pkl"))
    loop_b = run_files.load_pickle(str(b / "loop_state.pkl"))
    for key in ("noise", "reward_normalizer", "observation", "num_updates", "meter", "next_action", "buffer"):
        assert_nested_equal(loop_a[key], loop_b[key], key)
    assert loop_a["next_action"] is not None
    assert_nested_equal(run_files.load_pickle(str(a / "replay_buffer.pkl")),
                        run_files.load_pickle(str(b / "replay_buffer.pkl")), "replay_buffer")


def test_jax_resume_from_the_warm_up_is_exact(tmp_path, monkeypatch):
    """A JAX run stopped (Ctrl-C) at step 8 of its 15 random-action steps, while its device replay rows are still
    staged on the host, and resumed from that checkpoint ends like the run that was never stopped."""
    import signal

    from agent_common import host
    from agent_jax.agent import make_agent as factory
    from tests.agent_test_utils import assert_nested_equal

    overrides = [o.replace("backend=torch", "backend=jax") for o in TINY] + ["agent.buffer_max_length=64"]
    straight, stopped, resumed = tmp_path / "straight", tmp_path / "stopped", tmp_path / "resumed"
    assert train(load_config([*overrides, f"save_path={straight}"], "jax"), host_trainer(factory)).status == "completed"
    calls = []
    step_env = host.step_env

    def interrupt_at_step_8(envs, action):
        calls.append(1)
        if len(calls) == 8:
            os.kill(os.getpid(), signal.SIGINT)  # the loop's first-press handler: stop after this step, save
        return step_env(envs, action)

    monkeypatch.setattr(host, "step_env", interrupt_at_step_8)
    result = train(load_config([*overrides, f"save_path={stopped}"], "jax"), host_trainer(factory))
    monkeypatch.setattr(host, "step_env", step_env)
    assert result.status == "interrupted" and result.env_step == 8 and result.checkpoint.endswith("step8")
    saved = run_files.load_pickle(os.path.join(result.checkpoint, "replay_buffer.pkl"))
    assert saved["size"] == 8
    again = train(load_config([f"agent_load_path={result.checkpoint}", f"save_path={resumed}"], "jax"),
                  host_trainer(factory))
    assert again.status == "completed" and again.env_step == 60
    a, b = straight / "checkpoints" / "step60", resumed / "checkpoints" / "step60"
    for name in ["actor.pkl", "agent_state.pkl", "critic.pkl", "target_critic.pkl", "temperature.pkl"]:
        assert_nested_equal(run_files.load_pickle(str(a / "agent" / name)),
                            run_files.load_pickle(str(b / "agent" / name)), name)
    for name in ["loop_state.pkl", "replay_buffer.pkl"]:
        state_a = run_files.load_pickle(str(a / name))
        state_b = run_files.load_pickle(str(b / name))
        if name == "loop_state.pkl":
            state_a = {k: state_a[k] for k in ("noise", "reward_normalizer", "observation", "num_updates", "meter",
                                               "next_action", "buffer")}
            state_b = {k: state_b[k] for k in state_a}
        assert_nested_equal(state_a, state_b, name)


# ------------------------------------------------------------------------------------ background initial evaluation
def _scalar_logs(run_dir) -> dict[str, list[tuple[int, float]]]:
    """TensorBoard scalars by tag (the perf/ timings left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]
            if not tag.startswith("perf/")}


def _held_evaluation(monkeypatch, release_at_step: int) -> dict[str, object]:
    """Holds the background evaluation until the loop calls its ``release_at_step``-th env step; returns what it saw:
    whether it ran off the main thread and the env steps the loop had called when it began and ended."""
    import threading
    import time

    from agent_common import host

    seen: dict[str, object] = {}
    steps = [0]
    release = threading.Event()
    real_step_env, real_evaluate = host.step_env, host.evaluate

    def counting_step_env(envs, action):
        steps[0] += 1
        if steps[0] == release_at_step:
            release.set()
        return real_step_env(envs, action)

    def held_evaluate(act, envs, num_episodes):
        if threading.current_thread() is threading.main_thread():
            return real_evaluate(act, envs, num_episodes)
        assert release.wait(60), "the loop never reached the step that releases the evaluation"
        seen.update(background=True, began=steps[0])

        def slow_act(observation):
            time.sleep(0.002)  # the loop goes on meanwhile
            return act(observation)

        metrics = real_evaluate(slow_act, envs, num_episodes)
        seen["ended"] = steps[0]
        return metrics

    monkeypatch.setattr(host, "step_env", counting_step_env)
    monkeypatch.setattr(host, "evaluate", held_evaluate)
    return seen


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_background_initial_evaluation_equals_the_sequential_run(tmp_path, monkeypatch, framework):
    """The step-0 evaluation on its background thread, held until training is under way (after 5 updates, which
    change the actor its host-side policy snapshot was copied from: JAX donates the state's buffers, torch updates
    in place), gives the run of the evaluation first: the same evaluations, eval.csv (the step-0 row first),
    TensorBoard scalars, checkpoints and loop state."""
    from agent_common import driver
    from tests.agent_test_utils import assert_nested_equal

    if framework == "torch":
        overrides, factory, release_at = list(TINY), make_agent, 20
        load = functools.partial(torch.load, weights_only=False)
    else:
        from agent_jax.agent import make_agent as factory  # type: ignore[assignment]

        overrides = [o.replace("backend=torch", "backend=jax") for o in TINY] + ["agent.buffer_max_length=64"]
        release_at, load = 20, run_files.load_pickle
    overrides += ["num_eval_episodes=2", "evaluation_per_interaction_step=30",
                  "save_checkpoint_per_interaction_step=30"]
    first, background = tmp_path / "first", tmp_path / "background"
    monkeypatch.setattr(driver, "BACKGROUND_INITIAL_EVALUATION", False)
    expected = train(load_config([*overrides, f"save_path={first}"], framework), host_trainer(factory))
    monkeypatch.setattr(driver, "BACKGROUND_INITIAL_EVALUATION", True)
    seen = _held_evaluation(monkeypatch, release_at)
    result = train(load_config([*overrides, f"save_path={background}"], framework), host_trainer(factory))
    assert seen["background"] and seen["began"] >= release_at
    assert result.evaluations == expected.evaluations and [s for s, _ in result.evaluations] == [0, 30, 60]
    assert (result.last_eval_return, result.last_eval_step) == (expected.last_eval_return, expected.last_eval_step)
    assert (background / "eval.csv").read_text() == (first / "eval.csv").read_text()
    assert _eval_steps(background) == [0.0, 30.0, 60.0]
    assert _scalar_logs(background) == _scalar_logs(first)
    for step in ("step30", "step60"):
        a, b = first / "checkpoints" / step, background / "checkpoints" / step
        for name in sorted(os.listdir(a / "agent")):
            state_a, state_b = load(str(a / "agent" / name)), load(str(b / "agent" / name))
            assert_nested_equal(state_a, state_b, f"{step}/{name}")
        loop_a = run_files.load_pickle(str(a / "loop_state.pkl"))
        loop_b = run_files.load_pickle(str(b / "loop_state.pkl"))
        loop_a.pop("config_yaml"), loop_b.pop("config_yaml")  # names the run directory
        assert_nested_equal(loop_a, loop_b, f"{step}/loop_state")


def test_background_initial_evaluation_outlives_the_first_donated_update_on_2_devices(tmp_path, monkeypatch):
    """The JAX agent with its state replicated over 2 host devices (conftest): the step-0 evaluation, held on its
    thread until the first update has returned (which donates the very actor arrays its snapshot was copied from),
    then acts with the step-0 policy, bitwise as before the update, and the run completes. A snapshot sharing a
    buffer with the state fails here with "Buffer has been deleted or donated"."""
    import threading

    import jax

    from agent_common import driver, host
    from agent_jax.agent import make_agent as jax_agent

    assert len(jax.devices()) >= 2, "needs 2 JAX devices (XLA_FLAGS=--xla_force_host_platform_device_count=2)"
    updated = threading.Event()
    donated: list = []  # the actor's leaves when the first update is called
    seen: dict[str, object] = {}
    real_evaluate = host.evaluate

    def factory(cfg, observation_space, action_space):
        agent = jax_agent(cfg, observation_space, action_space)
        real_update = agent.update

        def update(batch):
            leaves = agent.actor_leaves()[0]
            metrics = real_update(batch)
            if not updated.is_set():
                donated.extend(leaves)
                updated.set()  # the first update has been dispatched: its donated inputs are gone
            return metrics

        agent.update = update
        return agent

    def held_evaluate(act, envs, num_episodes):
        if threading.current_thread() is threading.main_thread():
            return real_evaluate(act, envs, num_episodes)
        probe = np.linspace(-1, 1, 2 * envs.single_observation_space.shape[0], dtype=np.float32).reshape(2, -1)
        before = act(probe)
        assert updated.wait(120), "the loop never ran its first update"
        seen["after"] = act(probe)  # (2, A), the snapshot's policy after the donation
        seen["before"] = before
        return real_evaluate(act, envs, num_episodes)

    monkeypatch.setattr(driver, "BACKGROUND_INITIAL_EVALUATION", True)
    monkeypatch.setattr(host, "evaluate", held_evaluate)
    overrides = [o.replace("backend=torch", "backend=jax") for o in TINY] + [
        "num_devices=2", "num_env_steps=18", "evaluation_per_interaction_step=18", "agent.actor_update_period=1",
        "save_checkpoint_per_interaction_step=18", f"save_path={tmp_path / 'run'}"]  # one update program
    result = train(load_config(overrides, "jax"), host_trainer(factory))
    assert result.status == "completed" and [step for step, _ in result.evaluations] == [0, 18]
    assert donated and all(leaf.is_deleted() for leaf in donated)  # the evaluation ran after the donation
    np.testing.assert_array_equal(seen["after"], seen["before"], strict=True)


def test_a_stop_while_the_initial_evaluation_runs_waits_for_it(tmp_path, monkeypatch, capsys):
    """A run stopped (Ctrl-C) at its third step, while the step-0 evaluation still runs in the background, waits for
    it: the checkpoint holds its result and the eval env after it, as when it runs first."""
    import signal
    import threading
    import time

    from agent_common import driver, host
    from tests.agent_test_utils import assert_nested_equal

    calls, stopping = [], threading.Event()
    real_step_env, real_evaluate = host.step_env, host.evaluate

    def interrupt_at_step_3(envs, action):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)  # the loop's first-press handler: stop after this step, save
            stopping.set()
        return real_step_env(envs, action)

    def slow_evaluate(act, envs, num_episodes):
        assert threading.current_thread() is not threading.main_thread()
        assert stopping.wait(30)
        time.sleep(0.5)  # still running when the loop stops
        return real_evaluate(act, envs, num_episodes)

    monkeypatch.setattr(host, "step_env", interrupt_at_step_3)
    monkeypatch.setattr(driver, "BACKGROUND_INITIAL_EVALUATION", False)
    expected = train(load_config([*TINY, f"save_path={tmp_path / 'first'}"], "torch"), host_trainer(make_agent))
    calls.clear()
    monkeypatch.setattr(driver, "BACKGROUND_INITIAL_EVALUATION", True)
    monkeypatch.setattr(host, "evaluate", slow_evaluate)
    capsys.readouterr()
    result = train(load_config([*TINY, f"save_path={tmp_path / 'background'}"], "torch"), host_trainer(make_agent))
    assert "waiting for the initial evaluation to finish" in capsys.readouterr().err
    assert result.status == expected.status == "interrupted" and result.env_step == expected.env_step == 3
    assert result.evaluations == expected.evaluations and result.evaluations[0][0] == 0
    loop_a = run_files.load_pickle(os.path.join(expected.checkpoint, "loop_state.pkl"))
    loop_b = run_files.load_pickle(os.path.join(result.checkpoint, "loop_state.pkl"))
    assert loop_b["last_eval_step"] == 0 and loop_b["last_eval_return"] == expected.evaluations[0][1]["avg_return"]
    loop_a.pop("config_yaml"), loop_b.pop("config_yaml")
    assert_nested_equal(loop_a, loop_b, "loop_state")
    assert _eval_steps(tmp_path / "background") == [0.0]


def test_an_error_in_the_background_initial_evaluation_surfaces(tmp_path, monkeypatch):
    """The step-0 evaluation's exception is raised by ``train`` in the main thread, with its own type and message,
    at the start of the loop's next step (it fails during the loop's second env step, which waits for that)."""
    import threading
    import time

    from agent_common import driver, host

    stepping, failed, calls = threading.Event(), threading.Event(), []
    real_step_env = host.step_env

    def broken_evaluate(act, envs, num_episodes):
        assert stepping.wait(30)
        act(envs.reset()[0])  # the policy runs off the main thread
        failed.set()
        raise ValueError("the evaluation env broke")

    def step_env(envs, action):
        calls.append(1)
        if len(calls) == 2:
            stepping.set()
            assert failed.wait(30)
            time.sleep(0.2)  # the thread has ended
        return real_step_env(envs, action)

    monkeypatch.setattr(driver, "BACKGROUND_INITIAL_EVALUATION", True)
    monkeypatch.setattr(host, "evaluate", broken_evaluate)
    monkeypatch.setattr(host, "step_env", step_env)
    with pytest.raises(ValueError, match="the evaluation env broke"):
        train(load_config([*TINY, f"save_path={tmp_path / 'r'}"], "torch"), host_trainer(make_agent))
    assert len(calls) == 2 and not (tmp_path / "r" / "checkpoints").exists()
