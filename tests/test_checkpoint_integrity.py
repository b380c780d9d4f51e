"""Checkpoints that cannot silently lie: every checkpoint of both agents and both drivers carries a SHA-256 manifest
written last; a damaged file (byte flip, truncation, garbage, deleted, damaged config) is found before anything is
loaded, the damaged checkpoint is moved aside (never deleted) and the newest one that verifies is used, with one line
naming the file. No dead ends after a kill during the first checkpoint; absurd derived values refused before any
work; ``--help`` lists the config; a finished run says how to extend it.

Tiny runs whose warm-up outlasts them, stopped by ``max_wall_seconds`` after their first step (no update or policy
program is compiled, which keeps the JAX runs fast): the stop writes one checkpoint ``step<S>`` with every file of an
agent and the replay buffer. The fault cases add a second verified checkpoint ``step<S+100>`` (a copy of it, with
its manifest) and damage that one; each case costs one verification, one load and one step.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np
import pytest

from agent_common import help, keys
from agent_common.cli import Framework, run
from agent_common.config import ConfigError, build_config, load_config, parse_args
from agent_common.driver import train
from agent_common.host import host_trainer
from simulators import mjx
from tests.test_runs import TINY

NO_UPDATES = ["agent.buffer_min_length=60", "num_eval_episodes=0", "max_wall_seconds=0.001"]
TINY_JAX = [o.replace("categorical_target_backend=torch", "categorical_target_backend=jax") for o in TINY]
_AGENT_FILE = {"torch": ("critic.pt", "actor.pt"), "jax": ("critic.pkl", "actor.pkl")}


def _make_agent(framework: str):
    if framework == "torch":
        from agent_torch.agent import make_agent
    else:
        from agent_jax.agent import make_agent
    return make_agent


def _overrides(framework: str) -> list[str]:
    return [*(TINY if framework == "torch" else TINY_JAX), *NO_UPDATES]


def _cli(framework: str, overrides: list[str], capsys) -> tuple[int, str, str]:
    argv = [a for o in overrides for a in ("--overrides", o)]
    try:
        code = run(parse_args(argv, framework, prog=f"python -m agent_{framework}.train"),
                   Framework(framework, lambda: _make_agent(framework)))
    except SystemExit as exc:
        code = int(exc.code)  # type: ignore[arg-type]
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def base_runs(tmp_path_factory):
    """Per agent: a run stopped after its first steps (checkpoint step<S>) plus step<S+100>, a copy of it (a
    second checkpoint that verifies, newer than step<S>)."""
    runs = {}
    for framework in ("torch", "jax"):
        run = tmp_path_factory.mktemp("runs") / framework
        result = train(load_config([*_overrides(framework), f"save_path={run}"], framework),
                       host_trainer(_make_agent(framework)))
        assert result.status == "budget" and result.env_step < 60
        older = f"step{result.env_step}"
        shutil.copytree(run / "checkpoints" / older, run / "checkpoints" / f"step{result.env_step + 100}")
        runs[framework] = run
    return runs


def _copy(base_runs, framework, tmp_path):
    """A copy of the base run, and its (older, newer) checkpoint directories."""
    run = tmp_path / "run"
    shutil.copytree(base_runs[framework], run)
    steps = sorted(int(n[4:]) for n in os.listdir(run / "checkpoints") if n.startswith("step"))
    return run, run / "checkpoints" / f"step{steps[0]}", run / "checkpoints" / f"step{steps[1]}"


# ----------------------------------------------------------------------------------------------- the manifest
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_every_checkpoint_has_a_manifest_of_all_its_files(base_runs, framework, tmp_path):
    from agent_common.runs.manifest import read_manifest

    for ckpt in _copy(base_runs, framework, tmp_path)[1:]:
        entries = read_manifest(str(ckpt))
        files = sorted(os.path.relpath(os.path.join(r, n), ckpt) for r, _, ns in os.walk(ckpt) for n in ns)
        assert sorted(entries) == [f for f in files if f != "COMPLETE"]
        assert "replay_buffer.pkl" in entries and f"agent/{_AGENT_FILE[framework][0]}" in entries
        for rel, digest in entries.items():  # the sha256sum format: `sha256sum -c COMPLETE` checks it by hand
            assert hashlib.sha256((ckpt / rel).read_bytes()).hexdigest() == digest


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _garbage(path):
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = b"\xa5" * 64
    path.write_bytes(bytes(data))


def _config(path):
    path.write_text("num_env_steps: [unclosed\n")


# (what is damaged, how, the reason in the damaged folder's name, the words of the warning)
FAULTS = [
    ("critic", _flip, "checksum", "does not match its SHA-256"),
    ("actor", _truncate, "checksum", "does not match its SHA-256"),
    ("loop_state.pkl", _garbage, "checksum", "does not match its SHA-256"),
    ("replay_buffer.pkl", os.unlink, "missing", "is missing"),
    ("config.yaml", _config, "checksum", "does not match its SHA-256"),
]


def _target(ckpt, what, framework):
    if what == "critic":
        return ckpt / "agent" / _AGENT_FILE[framework][0]
    if what == "actor":
        return ckpt / "agent" / _AGENT_FILE[framework][1]
    return ckpt / what


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize(("what", "damage", "reason", "words"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_damaged_file_falls_back_to_the_newest_verified_checkpoint(base_runs, framework, what, damage, reason,
                                                                     words, tmp_path, capsys):
    run, older, newer = _copy(base_runs, framework, tmp_path)
    target = _target(newer, what, framework)
    damage(target)
    code, out, err = _cli(framework, [f"agent_load_path={run}"], capsys)
    assert code == 0, err
    lines = [x for x in err.splitlines() if "skipping the checkpoint" in x]
    assert len(lines) == 1 and str(target) in lines[0] and words in lines[0], err
    assert f"resumed from {older} " in err and "[budget]" in out
    kept = run / "checkpoints" / "damaged" / f"{newer.name}-{reason}"
    assert kept.is_dir() and not newer.exists()  # moved aside, not deleted
    assert os.path.exists(kept / os.path.relpath(target, newer)) == (damage is not os.unlink)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_deleted_manifest_and_a_legacy_checkpoint(base_runs, framework, tmp_path, capsys):
    """No manifest in the newest: it is set aside as incomplete; a checkpoint written before manifests (``ok``)
    loads with a warning that it cannot be verified."""
    run, older, newer = _copy(base_runs, framework, tmp_path)
    (newer / "COMPLETE").unlink()
    (older / "COMPLETE").write_text("ok\n")
    code, _, err = _cli(framework, [f"agent_load_path={run}"], capsys)
    assert code == 0, err
    assert "has no manifest" in err and (run / "checkpoints" / "damaged" / f"{newer.name}-incomplete").is_dir()
    assert "written before checkpoints had manifests" in err and f"resumed from {older} " in err


def test_a_legacy_checkpoint_with_a_damaged_config_falls_back(base_runs, tmp_path, capsys):
    """Without manifests, an unreadable config.yaml in the newest checkpoint falls back too (it stopped the run)."""
    run, older, newer = _copy(base_runs, "torch", tmp_path)
    for ckpt in (older, newer):
        (ckpt / "COMPLETE").write_text("ok\n")
    _config(newer / "config.yaml")
    code, _, err = _cli("torch", [f"agent_load_path={run}"], capsys)
    assert code == 0, err
    assert str(newer / "config.yaml") in err and (run / "checkpoints" / "damaged" / f"{newer.name}-unreadable").is_dir()
    assert f"resumed from {older} " in err


def test_mjx_driver_manifest_and_fallback(tmp_path, monkeypatch, capsys):
    """The device stepper (agent_common.device, with the framework-free fake trainer) writes the same manifest
    and falls back the same way."""
    from agent_common.device import device_trainer
    from agent_common.runs.manifest import verify_checkpoint
    from tests.test_vector_loop import BASE, FakeTrainer

    monkeypatch.setattr(mjx, "missing", lambda: [])
    cfg = build_config({**BASE, "save_path": str(tmp_path / "run")}, "jax")
    train(cfg, device_trainer(FakeTrainer, "jax"))
    ckpts = tmp_path / "run" / "checkpoints"
    assert verify_checkpoint(str(ckpts / "step300")) is True
    _flip(ckpts / "step300" / "replay_buffer.pkl")
    resumed = build_config({**BASE, "save_path": str(tmp_path / "run"),
                                   "agent_load_path": str(tmp_path / "run")}, "jax")
    result = train(resumed, device_trainer(FakeTrainer, "jax"))
    err = capsys.readouterr().err
    assert "replay_buffer.pkl does not match its SHA-256" in err and f"resumed from {ckpts / 'step240'}" in err
    assert (ckpts / "damaged" / "step300-checksum").is_dir() and result.env_step == 300


def test_converter_writes_a_new_manifest(base_runs, tmp_path):
    """A converted training checkpoint verifies (its agent files are new, so is its manifest)."""
    from agent_common.runs.manifest import verify_checkpoint
    from agent_interop.convert import main as convert

    out = tmp_path / "jax"
    _, older, _ = _copy(base_runs, "torch", tmp_path)
    assert convert(["torch-to-jax", str(older), str(out),
                    *[a for o in _overrides("torch") for a in ("--overrides", o)]]) == 0
    assert verify_checkpoint(str(out)) is True


# ----------------------------------------------------------------------------------------------- foreign layouts
def _upstream_step(path):
    import torch

    path.mkdir(parents=True)
    for name in ("actor", "critic", "target_critic", "temperature"):
        weights = {"embedder.norm.weight": torch.ones(3)} if name == "actor" else {"log_temp": torch.zeros(1)}
        torch.save({"network_state_dict": weights, "optimizer_state_dict": None, "update_step": 1}, path / f"{name}.pt")
    torch.save({"update_step": 1}, path / "agent_state.pt")


def test_an_upstream_checkpoint_is_named_with_the_conversion_command_and_never_moved(tmp_path, capsys):
    step = tmp_path / "upstream" / "step100"
    _upstream_step(step)
    before = sorted(os.listdir(step))
    for path in (step, tmp_path / "upstream"):
        with pytest.raises(ConfigError) as info:
            load_config([f"agent_load_path={path}"], "torch")
        message = str(info.value)
        assert "upstream FlashSAC" in message and "not a checkpoint of this project" in message
        assert f"python -m agent_interop.convert upstream-to-torch {step}" in message
    # inside a run's checkpoints/ folder it is still never moved aside
    inside = tmp_path / "run" / "checkpoints" / "step100"
    shutil.copytree(step, inside)
    code, _, err = _cli("torch", [f"agent_load_path={tmp_path / 'run'}"], capsys)
    assert code == 2 and "upstream-to-torch" in err
    assert sorted(os.listdir(step)) == before and sorted(os.listdir(inside)) == before


def test_this_projects_agent_directory_is_not_called_foreign(base_runs, tmp_path):
    from agent_common.runs.checkpoints import detect_foreign_layout

    _, older, _ = _copy(base_runs, "torch", tmp_path)
    assert detect_foreign_layout(str(older / "agent")) is None and detect_foreign_layout(str(older)) is None
    assert detect_foreign_layout(str(base_runs["torch"])) is None


# ----------------------------------------------------------------------------------------------- no dead ends
class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no cleanup."""


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_kill_during_the_first_checkpoint_is_no_dead_end(framework, tmp_path, monkeypatch, capsys):
    from agent_common.runs import checkpoints

    run = tmp_path / "run"

    def killed(directory):
        raise _Killed

    monkeypatch.setattr(checkpoints, "write_manifest", killed)  # every file written, the manifest not yet
    overrides = [*_overrides(framework), f"save_path={run}"]  # the budget stop writes the first checkpoint
    with pytest.raises(_Killed):
        _cli(framework, overrides, capsys)
    monkeypatch.undo()
    (run / "checkpoints" / ".latest.abcd1234.tmp").write_text("step")  # a write the kill interrupted
    first = next((run / "checkpoints").glob("step*.tmp"))
    assert (first / "loop_state.pkl").exists() and (run / "config.yaml").exists()
    # the resume has nothing to resume and says how to start over, with the run's own overrides
    code, _, err = _cli(framework, [f"agent_load_path={run}"], capsys)
    assert code == 2 and "nothing to resume" in err and f"{first.name} was interrupted" in err
    command = err.split("Start the run over in place: ", 1)[1].split(" (its files", 1)[0]
    assert command.startswith(f"python -m agent_{framework}.train --overrides save_path={run} "
                              "--overrides overwrite_incomplete=true")
    # a fresh start in it says the same
    code, _, err = _cli(framework, overrides, capsys)
    assert code == 2 and "overwrite_incomplete=true" in err and "rm -r" in err
    # the printed command works as printed; nothing is deleted
    start_over = [x.split("=", 1)[0] + "=" + x.split("=", 1)[1] for x in command.split(" --overrides ")[1:]]
    code, out, err = _cli(framework, start_over, capsys)
    assert code == 0 and "[budget]" in out, err
    kept = run / "incomplete-1"
    assert (kept / "config.yaml").exists() and (kept / "checkpoints" / first.name).is_dir()
    assert (kept / "checkpoints" / ".latest.abcd1234.tmp").exists()  # moved with the rest
    assert list((run / "checkpoints").glob("step*/COMPLETE"))


def test_overwrite_incomplete_refuses_a_run_with_a_checkpoint(base_runs, tmp_path, capsys):
    run, older, newer = _copy(base_runs, "torch", tmp_path)
    before = sorted(os.listdir(run / "checkpoints"))
    code, _, err = _cli("torch", [*TINY, f"save_path={run}", "overwrite_incomplete=true"], capsys)
    assert code == 2 and "holds a complete checkpoint" in err and f"agent_load_path={run}" in err
    assert sorted(os.listdir(run / "checkpoints")) == before


def test_stale_temporary_files_are_cleaned_on_the_next_start(base_runs, tmp_path, capsys):
    run, _, _ = _copy(base_runs, "torch", tmp_path)
    stale = [run / "checkpoints" / ".latest.k2j4h5g6.tmp", run / ".eval.csv.a1b2c3d4.tmp"]
    for path in stale:
        path.write_text("half")
    code, _, err = _cli("torch", [f"agent_load_path={run}"], capsys)
    assert code == 0, err
    for path in stale:
        assert not path.exists() and f"removed the stale temporary file {path}" in err


def test_a_resume_from_an_older_checkpoint_keeps_the_newer_aside(base_runs, tmp_path, capsys):
    run, older, newer = _copy(base_runs, "torch", tmp_path)
    code, _, err = _cli("torch", [f"agent_load_path={older}"], capsys)
    assert code == 0, err
    assert (run / "checkpoints" / "set_aside" / newer.name / "COMPLETE").exists() and "newer than the checkpoint" in err


# ----------------------------------------------------------------------------------------------- derived values
@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("num_env_steps=1e20", "num_env_steps", "int64"),
        ("num_env_steps=1e18", "num_env_steps", "would never come"),
        ("save_checkpoint_per_interaction_step=1e17", "save_checkpoint_per_interaction_step", "never come"),
        ("agent.learning_rate_peak=1e308", "agent.learning_rate_peak", "float32"),
        ("agent.learning_rate_peak=5", "agent.learning_rate_peak", "diverge"),
        ("agent.learning_rate_warmup_rate=1e30", "agent.learning_rate_warmup_rate", "int64"),
        ("agent.buffer_max_length=1e15", "agent.buffer_max_length", "GiB"),
        ("agent.critic_hidden_dim=10000000", "agent.critic_hidden_dim", "GiB"),
        ("agent.normalized_G_max=1e300", "agent.normalized_G_max", "float32"),
    ],
)
def test_absurd_derived_values_are_refused_naming_the_key(override, key, words, tmp_path, capsys):
    overrides = [*TINY, override, f"save_path={tmp_path / 'r'}"]
    if override.startswith("save_checkpoint"):
        overrides.append("num_env_steps=1e17")
    with pytest.raises(ConfigError) as info:
        load_config(overrides, "torch")
    assert f"'{key}'" in str(info.value) and words in str(info.value)
    code, _, err = _cli("torch", overrides, capsys)
    assert code == 2 and key in err and not (tmp_path / "r").exists()  # before any work


def test_a_non_finite_loss_names_likely_causes_and_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    from agent_common import host

    real = host.step_env

    def poisoned(envs, action):
        result = real(envs, action)
        if poisoned.calls >= 35:
            raise FloatingPointError("non-finite critic/loss at update step 20")
        poisoned.calls += 1
        return result

    poisoned.calls = 0
    monkeypatch.setattr(host, "step_env", poisoned)
    code, _, err = _cli("torch", [*TINY, f"save_path={tmp_path / 'r'}"], capsys)
    assert code == 1 and "Traceback" not in err
    assert "non-finite critic/loss" in err and "agent.learning_rate_peak=0.0003" in err and "reward scale" in err
    assert f"Last good checkpoint: {tmp_path / 'r' / 'checkpoints' / 'step30'}" in err
    assert f"agent_load_path={tmp_path / 'r'}" in err


# ----------------------------------------------------------------------------------------------- help and summary
def test_help_lists_every_key_with_type_default_and_meaning(capsys):
    with pytest.raises(SystemExit) as info:
        parse_args(["--help"], "torch", prog="python -m agent_torch.train")
    assert info.value.code == 0
    text = capsys.readouterr().out
    docs = help.field_docs()
    for key in keys.KNOWN_KEYS:
        line = next(x for x in text.splitlines() if x.split() and x.split()[0] == key)
        assert docs[key][1] and docs[key][1].split()[0] in line, key
    assert "agent.learning_rate_peak" in text and "float = 0.0003" in text and "agent: replay buffer" in text


def test_a_misspelled_key_shows_only_the_closest_matches():
    with pytest.raises(ConfigError) as info:
        load_config(["agent.learning_rate_peek=1e-3"], "torch")
    message = str(info.value)
    assert "Did you mean: agent.learning_rate_peak" in message and "--help" in message
    assert sum(key in message for key in keys.KNOWN_KEYS) <= 3
    with pytest.raises(ConfigError, match="Did you mean: agent.learning_rate_peak"):
        load_config(["learning_rate_peak=1e-3"], "torch")  # the group left out


def test_a_finished_run_prints_how_to_extend_it(tmp_path, capsys):
    run = tmp_path / "r"
    code, out, err = _cli("torch", [*TINY, f"save_path={run}", "num_env_steps=30"], capsys)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.strip().startswith("extend:"))
    command = line.split("extend:", 1)[1].split("  (", 1)[0].split()
    assert command[:3] == ["python", "-m", "agent_torch.train"]
    overrides = [x for x in command[3:] if x != "--overrides"]
    assert overrides == [f"agent_load_path={run}", "num_env_steps=60"]
    code, out, err = _cli("torch", overrides, capsys)
    assert code == 0 and "[completed] env_step=60" in out, err
    assert np.isfinite(float(out.split("last_eval_return=", 1)[1].split()[0]))
