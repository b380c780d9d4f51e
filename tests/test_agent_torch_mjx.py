"""The torch agent on MJX environments (agent_torch/vector.py): zero-copy DLPack hand-over in the training loop,
exact resume of the trainer's state, deterministic evaluation, the CLI end to end (run, bitwise resume, config
errors); one halfcheetah compilation (2 envs) for the whole module.

Skipped only when the ``mjx`` extra is not installed (``pip install -e ".[mjx]"``; CI installs it).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

pytest.importorskip("brax", reason="the mjx extra is not installed (pip install -e \".[mjx]\")")

import torch  # noqa: E402

from agent_common.config import build_config  # noqa: E402
from agent_torch import vector  # noqa: E402
from simulators import torch_view  # noqa: E402
from tests.host_sync import HostSyncCounter  # noqa: E402

TINY = {"env.env_type": "mjx", "env.env_name": "halfcheetah", "num_train_envs": 2, "num_eval_envs": 2,
        "num_eval_episodes": 2, "env.max_episode_steps": 12, "num_env_steps": 200, "agent.buffer_min_length": 8,
        "agent.buffer_max_length": 30, "agent.sample_batch_size": 8, "agent.actor_hidden_dim": 8,
        "agent.critic_hidden_dim": 8, "agent.actor_num_blocks": 1, "agent.critic_num_blocks": 1,
        "agent.categorical_target_backend": "torch", "agent.device_type": "cpu", "num_threads": 1, "seed": 3}


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _trainer(**extra):
    return vector.make_vector_trainer(build_config({**TINY, **extra}, "torch"))


def test_dlpack_hands_over_without_copies(monkeypatch):
    """Every action reaches JAX as a view of the torch tensor, every step output reaches torch as a view of the
    JAX array (equal data pointers), through the warm-up and the policy steps."""
    handed, viewed = [], []
    from_torch, step_to_torch = torch_view.from_torch, torch_view.step_to_torch

    def spy_from_torch(tensor):
        array = from_torch(tensor)
        handed.append((tensor.data_ptr(), array.unsafe_buffer_pointer()))
        return array

    def spy_step_to_torch(out):
        views = step_to_torch(out)
        for name, tensor in views._asdict().items():
            viewed.append((name, tensor.data_ptr(), getattr(out, name).unsafe_buffer_pointer()))
        return views

    monkeypatch.setattr(torch_view, "from_torch", spy_from_torch)
    monkeypatch.setattr(torch_view, "step_to_torch", spy_step_to_torch)
    trainer = _trainer()
    trainer.advance(6)  # 4 warm-up steps (8 rows), then policy steps with updates
    assert trainer.agent.update_step == 3
    assert len(handed) == 6 and all(t == j for t, j in handed), handed
    assert len(viewed) == 6 * 5 and all(t == j for _, t, j in viewed), viewed
    assert trainer.obs.data_ptr() == [ptr for name, ptr, _ in viewed if name == "obs"][-1]  # the next step's input
    stored = trainer.replay.rows()[-2:]  # the last step's rows: obs, action, reward, terminated, next obs, truncated
    np.testing.assert_array_equal(stored[:, -18:-1], trainer.obs.numpy())  # no episode ended: next obs = obs
    assert trainer.train_env.env.jit_step._cache_size() == 1  # the committed state and actions: one compilation


def test_resume_continues_bitwise():
    """State, rows and agent saved after a run of steps, loaded into a new trainer: the next steps, the rows, the
    metrics and an evaluation are the same as the first trainer's."""
    import tempfile

    first = _trainer()
    first.advance(7)
    first.take_metrics()
    with tempfile.TemporaryDirectory() as directory:
        first.save_agent(directory)
        state = pickle.loads(pickle.dumps(first.state_dict()))
        rows = pickle.loads(pickle.dumps(first.buffer_state()))
        first.advance(15)  # wraps the 30-row ring
        want = (first.take_metrics(), first.buffer_state()["rows"], first.obs.clone(), first.evaluate(2))
        second = _trainer()
        second.load_agent(directory, True)
        second.load_state_dict(state)
        second.load_buffer_state(rows)
    second.advance(15)
    got = (second.take_metrics(), second.buffer_state()["rows"], second.obs.clone(), second.evaluate(2))
    assert got[0] == want[0] and len(got[0]) == 7
    np.testing.assert_array_equal(got[1], want[1])
    assert torch.equal(got[2], want[2])
    assert got[3] == want[3]
    assert second.train_env.env is first.train_env.env  # the env (and its compilation) is cached per process
    with pytest.raises(ValueError, match="trainer state: expected the torch agent's"):
        second.load_state_dict({**state, "framework": "jax"})


def test_precompile_runs_the_step_compilation_in_the_background():
    trainer = _trainer()
    trainer.precompile()  # a step on zero actions, its result dropped
    trainer.evaluate(2)  # what the driver runs meanwhile
    trainer.advance(1)  # waits for it
    assert trainer.train_env.env.jit_step._cache_size() == 1
    fresh = _trainer()
    fresh.advance(1)
    np.testing.assert_array_equal(trainer.replay.rows(), fresh.replay.rows())  # the state did not move
    trainer.close()


def test_evaluation_is_deterministic_and_counts_episodes():
    trainer = _trainer(**{"num_eval_episodes": 4})
    trainer.advance(5)
    result = trainer.evaluate(4)  # 2 rounds of 2 envs, 12-step episodes (halfcheetah never terminates)
    assert result["avg_length"] == 12.0 and np.isfinite(result["avg_return"])
    assert set(result) == {"avg_return", "avg_length", "avg_success_once", "avg_success_end"}
    assert trainer.evaluate(0) == {}
    again = _trainer(**{"num_eval_episodes": 4})
    again.advance(5)
    assert again.evaluate(4) == result
    trainer.load_buffer_state(None)  # a checkpoint without rows: an empty replay, a new warm-up
    assert (len(trainer.replay), trainer.replay.can_sample()) == (0, False)


def test_evaluation_returns_equal_those_of_the_per_step_evaluation_of_e5cba09():
    """The batched evaluation (one fused accumulate-and-act call per step) gives the returns that the per-step
    evaluation of commit e5cba09 gave on the same run (values printed by that commit's ``evaluate`` for this
    config, seed 3: two calls, the eval key advancing in between; run by that commit's test file with this test in
    this place, on the mujoco / mujoco-mjx 3.11.0, brax 0.14.2 stack: the cached envs carry state between the file's
    tests); host reads: the all-done flag every 16 steps and the returns once. Bitwise on the machine that printed
    them; the tolerance (2e-3 relative) absorbs another CPU's GEMM kernels over 5 updates and 12 policy steps (an
    AVX2 EPYC gave -3.21037 for -3.21196, 5e-4), while a changed evaluation (another key, episode count or action)
    moves a 12-step return by far more."""
    trainer = _trainer(**{"num_eval_episodes": 4})
    trainer.advance(5)
    with HostSyncCounter() as syncs:
        first = trainer.evaluate(4)  # 2 rounds of 12 steps: no flag read (< 16 steps), one read of the returns
    assert first["avg_return"] == pytest.approx(-3.2119641080498695, rel=2e-3)
    assert first["avg_length"] == 12.0
    assert trainer.evaluate(2)["avg_return"] == pytest.approx(-1.7746288888156414, rel=2e-3)
    assert dict(syncs.counts) == {"Tensor.numpy": 2}, dict(syncs.counts)


def test_host_sync_counter_catches_an_inserted_item(monkeypatch):
    """Positive control of the sync count below: one ``.item()`` per replay insert is caught, once per step."""
    trainer = _trainer()
    trainer.advance(5)
    add = trainer.replay.add

    def add_and_read(*args):
        add(*args)
        args[2].sum().item()  # the reward read back: a host synchronisation

    monkeypatch.setattr(trainer.replay, "add", add_and_read)
    with HostSyncCounter() as syncs:
        trainer.advance(2)
    assert syncs.counts == {"_local_scalar_dense": 2}, dict(syncs.counts)


@pytest.mark.parametrize("amp", [{}, {"agent.use_amp": True, "agent.amp_dtype": "fp16"},
                                 {"agent.use_amp": True, "agent.amp_dtype": "bf16"}], ids=["fp32", "fp16", "bf16"])
def test_interaction_steps_do_not_synchronise_with_the_host(amp):
    """Warm-up steps and policy steps with their updates (AMP off, fp16 with the device loss scale, bf16): no
    ``.item()``, ``nonzero``, value-dependent branch or device-to-host read on the hot path (the CPU run of the
    code the GPU runs; CUDA-graph replays replace the eager calls there)."""
    trainer = _trainer(**{"updates_per_interaction_step": 2, **amp})
    with HostSyncCounter() as syncs:
        trainer.advance(3)  # warm-up: 6 rows < 8
        trainer.advance(3)  # policy actions, 2 updates per step
    assert trainer.agent.update_step == 2 * 3
    assert syncs.total == 0, dict(syncs.counts)
    metrics = trainer.take_metrics()  # the one read-back, outside the hot path
    assert metrics["critic/loss"][1] == 6 and np.isfinite(metrics["critic/loss"][0])


# ------------------------------------------------------------------------------------------------ the CLI
def _cli_overrides(**extra):
    """The tiny config as --overrides (the env shape of ``TINY``: the compiled env is reused), explicit schedules so
    that runs of different lengths share them."""
    values = {**TINY, "learning_rate_warmup_step": 5, "learning_rate_decay_step": 200,
              "evaluation_per_interaction_step": 10, "metrics_per_interaction_step": 10,
              "logging_per_interaction_step": 5, "save_checkpoint_per_interaction_step": 10,
              "progress_bar": False, **extra}
    values = {("agent." + k if k.startswith("learning_rate") else k): v for k, v in values.items()}
    argv = []
    for key, value in values.items():
        argv += ["--overrides", f"{key}={'null' if value is None else value}"]
    return argv


def _main(argv):
    from agent_torch.train import main

    return main(argv)


def test_cli_trains_and_resumes_exactly(tmp_path, capsys):
    """``python -m agent_torch.train`` with env.env_type=mjx: a run of 60 interaction steps, and a run stopped at 30
    then resumed to 60, end with the same evaluations, networks and replay rows."""
    from agent_common.logger import read_eval_csv

    whole, split = tmp_path / "whole", tmp_path / "split"
    assert _main(_cli_overrides(num_env_steps=120, save_path=whole)) == 0
    out = capsys.readouterr()
    assert "[completed] env_step=120" in out.out and "time_to_first_update=" in out.out
    assert "compute path: torch" in out.err and "MJX envs: jitted JAX step" in out.err
    assert (whole / "tb").is_dir() and (whole / "config.yaml").is_file()
    assert _main(_cli_overrides(num_env_steps=60, save_path=split)) == 0
    assert _main(_cli_overrides(num_env_steps=120, save_path=split, agent_load_path=split)) == 0
    assert "resumed from" in capsys.readouterr().err
    evals = read_eval_csv(str(whole / "eval.csv"))
    assert [s for s, _ in evals] == [0, 20, 40, 60, 80, 100, 120]
    assert read_eval_csv(str(split / "eval.csv")) == evals
    final = "checkpoints/step120"
    for name in ("actor.pt", "critic.pt", "target_critic.pt", "temperature.pt"):
        a = torch.load(whole / final / "agent" / name, weights_only=False)
        b = torch.load(split / final / "agent" / name, weights_only=False)
        for key, value in a["network_state_dict"].items():
            assert torch.equal(value, b["network_state_dict"][key]), (name, key)
    rows = [pickle.loads((run / final / "replay_buffer.pkl").read_bytes())["rows"] for run in (whole, split)]
    np.testing.assert_array_equal(rows[0], rows[1])
    assert rows[0].shape == (30, 2 * 17 + 6 + 3)


@pytest.mark.parametrize(("override", "message"), [
    ("agent.sample_batch_size=9", "'agent.sample_batch_size'"),  # 2 envs fill 8 rows by the first update
    ("env.env_name=HalfCheetah-v4", "'env.env_name'"),
    ("num_eval_episodes=3", "'num_eval_episodes'"),
    ("agent.device_type=cuda" if not torch.cuda.is_available() else "agent.device_type=mps",
     "for 'agent.device_type'"),
    ("agent.buffer_device_type=cpu", "invalid value 'cpu' for 'agent.buffer_device_type': with env.env_type=mjx the "
                                     "torch agent keeps the replay rows on its device"),
])
def test_cli_config_errors_exit_2(override, message, tmp_path, capsys):
    run = tmp_path / "run"
    try:
        code = _main([*_cli_overrides(save_path=run), "--overrides", override])
    except SystemExit as exc:  # errors of the command line itself (parse_args) exit from inside
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not run.exists()  # nothing written


def test_cli_strict_backend_that_cannot_run_exits_2(monkeypatch, tmp_path, capsys):
    """A strict target backend the agent cannot run (no GPU) is a config error of the trainer's factory."""
    from torch_impl import BackendUnavailable

    def unavailable(*args):
        raise BackendUnavailable("triton needs a CUDA device")

    monkeypatch.setattr(vector, "make_agent", unavailable)
    run = tmp_path / "run"
    code = _main([*_cli_overrides(save_path=run), "--overrides", "agent.categorical_target_backend=triton",
                  "--overrides", "agent.categorical_target_strict=true"])
    assert code == 2
    err = capsys.readouterr().err
    assert "config error: agent.categorical_target_backend=triton with agent.categorical_target_strict=true cannot " \
           "run here: triton needs a CUDA device" in err
    assert not run.exists()


def test_n_step_window_runs_without_host_syncs_and_resumes_bitwise():
    """n_step=3: the interaction steps stay free of host synchronisations, two steps are in flight, and a trainer
    restored from the state and the buffer (window included) continues exactly as the first one, across episode
    ends (the time limit is 12) and the ring's wrap."""
    import tempfile

    first = _trainer(n_step=3)
    with HostSyncCounter() as syncs:
        first.advance(7)  # 5 stored steps (10 rows): updates from the 6th step
    assert syncs.total == 0, dict(syncs.counts)
    assert len(first.replay) == 10 and first.agent.update_step == 2
    first.take_metrics()
    with tempfile.TemporaryDirectory() as directory:
        first.save_agent(directory)
        state = pickle.loads(pickle.dumps(first.state_dict()))
        rows = pickle.loads(pickle.dumps(first.buffer_state()))
        assert rows["window"].shape == (2, 2, 2 * 17 + 6 + 3)
        first.advance(15)
        want = (first.take_metrics(), first.buffer_state(), first.obs.clone())
        second = _trainer(n_step=3)
        second.load_agent(directory, True)
        second.load_state_dict(state)
        second.load_buffer_state(rows)
    second.advance(15)
    got = (second.take_metrics(), second.buffer_state(), second.obs.clone())
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1]["rows"], want[1]["rows"])
    np.testing.assert_array_equal(got[1]["window"], want[1]["window"])
    assert torch.equal(got[2], want[2])
    assert want[1]["rows"][:, -1].sum() > 0  # a truncation was stored
    assert second.window_fill() == 2


def test_n_step_window_restarts_when_the_envs_start_new_episodes(capsys):
    """Envs whose state the checkpoint does not hold (mjlab) start new episodes on resume: the saved window's steps
    would run into them, so it restarts empty, with a warning, and the next rows come 2 steps later."""
    first = _trainer(n_step=3)
    first.advance(4)
    state, rows = first.state_dict(), first.buffer_state()
    second = _trainer(n_step=3)
    second.train_env.exact_state = False  # as simulators.mjlab_env's envs
    second.load_state_dict(state)
    second.load_buffer_state(rows)
    assert "saved n-step window (2, 2, 43) is not resumed" in capsys.readouterr().err
    assert second.window_fill() == 0 and len(second.replay) == 4
    second.advance(2)
    assert len(second.replay) == 4 and second.window_fill() == 2
    second.advance(1)
    assert len(second.replay) == 6


def test_cli_run_with_n_step_3(tmp_path, capsys):
    """``python -m agent_torch.train`` with n_step=3: rows are stored from the 3rd interaction step, so the first
    update is at step 6 (8 rows); the driver's count of rows and updates equals the trainer's, and the checkpoint
    holds the in-flight window."""
    run = tmp_path / "run"
    assert _main(_cli_overrides(num_env_steps=40, n_step=3, save_path=run)) == 0
    assert "[completed] env_step=40" in capsys.readouterr().out
    final = run / "checkpoints" / "step40"
    state = pickle.loads((final / "loop_state.pkl").read_bytes())
    assert (state["replay_rows"], state["num_updates"]) == (30, 15)  # 18 stored steps (the ring holds 30); 6..20
    buffer = pickle.loads((final / "replay_buffer.pkl").read_bytes())
    assert buffer["rows"].shape == (30, 2 * 17 + 6 + 3) and buffer["window"].shape == (2, 2, 2 * 17 + 6 + 3)
    assert torch.load(final / "agent" / "agent_state.pt", weights_only=False)["update_step"] == 15  # the trainer's
