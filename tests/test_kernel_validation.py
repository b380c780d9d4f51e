"""The installed kernel validation command (`flashsac-validate-kernels`, kernel_validation/) on the CPU: the interpreted
kernels bitwise through --tiny, a mismatch counted, a backend that cannot run, results written after every record,
--resume, one worker process per backend, and recording into the user's validation file (through an injected
backend: the GPU path without a GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernel_validation import backends, cli, matrix
from kernel_validation.worker import read_records, records_path
from shared_spec import dispatch as sd

REPO = Path(__file__).resolve().parent.parent
ONE_CASE = [dict(B=6, N=11, E=3, kind="nonfinite")]
THREE = [dict(B=6, N=11, E=3, kind="nonfinite"), dict(B=3, N=5, kind="mixed", strided=True),
         dict(B=5, N=11, E=3, kind="random")]


def _results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


@pytest.fixture
def counted(monkeypatch):
    """Counts the torch Triton kernel's calls (and can stop the run at a given call)."""
    from torch_impl import dispatch

    real, calls = dispatch.IMPLEMENTATIONS["triton"], {"n": 0, "stop_at": None}

    def kernel(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == calls["stop_at"]:
            raise KeyboardInterrupt("stopped")
        return real(*args, **kwargs)

    monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "triton", kernel)
    return calls


def test_tiny_run_validates_the_interpreted_kernels_bitwise(tmp_path, capsys):
    every = ",".join(matrix.BACKENDS)
    rc = cli.main(["--tiny", "--out", str(tmp_path), "--backends", every, "--require", every])
    out = capsys.readouterr().out
    assert rc == 0, out
    res = _results(tmp_path)
    assert res["mismatches"] == 0 and res["configurations"] == len(matrix.cases(True)) and res["complete"]
    for b in matrix.BACKENDS:
        assert res["backends"][b]["validated"], res["backends"][b]
    assert all(r["bitwise"] == {"jax/triton": True, "jax/pallas": True, "jax/mosaic": True} for r in res["rows"])
    assert all(r["spec_rows"] == r["B"] and r["spec_ok"] for r in res["rows"])
    assert "| jax/mosaic | True |" in (tmp_path / "results.md").read_text()
    assert "recorded" not in out, "an interpreted run records nothing"


def test_a_one_ulp_difference_fails_loudly_and_its_elements_are_counted(tmp_path, monkeypatch, capsys):
    from jax_impl import dispatch

    monkeypatch.setattr(matrix, "cases", lambda tiny: ONE_CASE)
    real = dispatch.IMPLEMENTATIONS["triton"]

    def off_by_one_ulp(*args, **kwargs):
        out = real(*args, **kwargs)
        return out.at[0, 5].set(np.nextafter(out[0, 5], np.float32(2.0)))

    monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "triton", off_by_one_ulp)
    rc = cli.main(["--tiny", "--out", str(tmp_path), "--backends", "torch/triton,jax/triton"])
    out = capsys.readouterr().out
    assert rc == 1 and "MISMATCH jax/triton" in out and "FAILED: 1 mismatches" in out
    res = _results(tmp_path)
    assert res["rows"][0]["differing"]["jax/triton"] == 1 and not res["backends"]["jax/triton"]["validated"]
    assert res["backends"]["jax/triton"]["result"].startswith("0/1 configurations bitwise equal")


def test_a_required_backend_that_cannot_run_fails(tmp_path, monkeypatch, capsys):
    from jax_impl import dispatch

    monkeypatch.setattr(matrix, "cases", lambda tiny: ONE_CASE)
    monkeypatch.setitem(dispatch.GATES, "pallas", lambda key: "simulated: no Pallas-Triton lowering")
    dispatch.reset_dispatch()
    try:
        rc = cli.main(["--tiny", "--out", str(tmp_path), "--backends", "torch/triton,jax/pallas",
                       "--require", "jax/pallas"])
    finally:
        dispatch.reset_dispatch()
    out = capsys.readouterr().out
    assert rc == 1 and "NOT VALIDATED jax/pallas" in out and "simulated: no Pallas-Triton lowering" in out
    assert "FAILED: required backends not validated: ['jax/pallas']" in out
    res = _results(tmp_path)
    assert res["complete"] and res["backends"]["torch/triton"]["validated"]
    assert "simulated" in res["backends"]["jax/pallas"]["reason"]


def test_a_stopped_run_keeps_what_it_checked_and_resume_runs_only_the_rest(tmp_path, monkeypatch, counted, capsys):
    monkeypatch.setattr(matrix, "cases", lambda tiny: THREE)
    args = ["--tiny", "--out", str(tmp_path), "--backends", "torch/triton"]
    assert cli.main([*args, "--budget", "0"]) == 1 and "--budget spent" in capsys.readouterr().out
    res = _results(tmp_path)  # written after the first configuration, whole
    assert len(res["rows"]) == 1 and not res["complete"]
    assert res["backends"]["torch/triton"] == {"validated": False,
                                               "incomplete": "1/3 configurations checked, repeats not yet"}
    path = records_path(tmp_path, "torch/triton")
    with open(path, "a") as f:
        f.write('{"case": "half a li')  # what a worker stopped mid-write leaves
    counted.update(n=0, stop_at=2)
    with pytest.raises(KeyboardInterrupt):  # a kill while the third configuration runs
        cli.main([*args, "--resume"])
    assert len(_results(tmp_path)["rows"]) == 2 and counted["n"] == 2
    counted.update(n=0, stop_at=None)
    assert cli.main([*args, "--resume"]) == 0
    assert counted["n"] == 1 + 4, "the missing configuration and the repeats (1 + 3), nothing else"
    res = _results(tmp_path)
    assert res["complete"] and len(res["rows"]) == 3 and res["backends"]["torch/triton"]["validated"]
    counted["n"] = 0
    assert cli.main([*args, "--resume"]) == 0 and counted["n"] == 0, "a complete run resumes to nothing"
    assert _results(tmp_path)["rows"] == res["rows"]

    # records of other versions (or another GPU, kernel code, matrix) are kept aside and not trusted
    headers, _ = read_records(path)
    lines = path.read_text().splitlines()
    lines[0] = json.dumps({"header": dict(headers[0], versions={"torch": "0.0"})})
    path.write_text("\n".join(lines) + "\n")
    assert cli.main([*args, "--resume"]) == 0 and counted["n"] == 3 + 4
    assert path.with_suffix(".stale-1.jsonl").exists() and "kept as" in capsys.readouterr().out
    # a new run without --resume moves the previous run's files aside
    counted["n"] = 0
    assert cli.main(args) == 0 and counted["n"] == 3 + 4
    (previous,) = tmp_path.glob("previous-*")
    assert (previous / "results.json").exists() and (previous / "records").is_dir()


def test_read_records_ignores_a_half_written_last_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"header": {"backend": "x"}}\n{"case": "a", "digest": "d"}\n{"case": "b", "dig')
    assert read_records(path) == ([{"backend": "x"}], [{"case": "a", "digest": "d"}])
    path.write_text('{"header": {}}\nnot json\n{"case": "a"}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_records(path)


def test_each_backend_runs_in_its_own_worker_process(tmp_path, monkeypatch, counted, capsys):
    monkeypatch.setattr(matrix, "cases", lambda tiny: ONE_CASE)  # the plan file carries it to the workers
    rc = cli.main(["--tiny", "--mode", "processes", "--out", str(tmp_path), "--backends", "torch/triton"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert counted["n"] == 0, "the kernel ran in the worker process, not here"
    res = _results(tmp_path)
    assert res["complete"] and res["env"]["mode"] == "processes" and res["backends"]["torch/triton"]["validated"]
    assert json.loads((tmp_path / "plan.json").read_text())["cases"] == [matrix.normalise(c) for c in ONE_CASE]
    assert (tmp_path / "logs" / "torch-triton.log").exists()
    headers, records = read_records(records_path(tmp_path, "torch/triton"))
    assert headers[0]["device"] == "cpu (interpreters)" and len(records) == 2
    assert "torch/triton    1/1 ok" in out


def test_a_worker_process_that_dies_is_reported_with_its_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(matrix, "cases", lambda tiny: ONE_CASE)
    crash = tmp_path / "crash.sh"
    crash.write_text("#!/bin/sh\necho 'worker: boom'\nexit 3\n")
    crash.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(crash))  # what the command starts its workers with
    rc = cli.main(["--tiny", "--mode", "processes", "--out", str(tmp_path / "run"), "--backends", "torch/triton"])
    out = capsys.readouterr().out
    assert rc == 1 and "worker: boom" in out and "exited with status 3" in out
    reason = _results(tmp_path / "run")["backends"]["torch/triton"]["reason"]
    assert "exited with status 3" in reason and "torch-triton.log" in reason


def test_merge_says_what_each_backend_lacks():
    plan = {"cases": [matrix.normalise(c) for c in THREE], "determinism": matrix.determinism_case(True),
            "repeats": 3}
    keys = [matrix.case_key(c) for c in plan["cases"]]
    spec = {"nan_rows_match_spec": True, "max_err_vs_float64": 1e-7, "spec_rows": 6, "spec_ok": True}
    anchor = [dict(case=k, digest=f"d{i}", seconds=0.1, **spec) for i, k in enumerate(keys)] + [
        {"determinism": True, "repeats": 3}]
    records = {"torch/triton": anchor,
               "jax/pallas": [{"case": keys[0], "digest": "d0", "seconds": 0.2},
                              {"case": keys[1], "digest": "other", "seconds": 0.2}],
               "jax/triton": [{"case": keys[0], "unavailable": "no jax-triton"}]}
    res = cli.merge(plan, ("torch/triton", "jax/pallas", "jax/triton", "jax/mosaic"), records,
                    {"jax/mosaic": "its worker process exited with status 1"})
    assert res["backends"]["torch/triton"]["validated"] and res["checked"]["jax/pallas"] == 2
    assert res["backends"]["jax/pallas"] == {"validated": False,
                                             "incomplete": "2/3 configurations checked, repeats not yet"}
    assert res["backends"]["jax/triton"] == {"validated": False, "reason": "no jax-triton"}
    assert "exited with status 1" in res["backends"]["jax/mosaic"]["reason"]
    assert res["mismatches"] == 1 and res["rows"][1]["bitwise"] == {"jax/pallas": False}
    assert res["rows"][1]["differing"] == {"jax/pallas": None} and not res["complete"]
    records["jax/pallas"] += [{"case": keys[2], "digest": "d2", "seconds": 0.1}, {"determinism": True, "repeats": 3}]
    res = cli.merge(plan, ("torch/triton", "jax/pallas"), records)
    assert res["complete"] and res["backends"]["jax/pallas"] == {
        "validated": False, "result": "2/3 configurations bitwise equal to torch/triton, 3 repeats identical: True"}
    res = cli.merge(plan, ("torch/triton", "jax/pallas"), {"torch/triton": [{"case": None, "unavailable": "x"}]})
    assert "the anchor torch/triton could not run" in res["backends"]["jax/pallas"]["reason"]


class _FakeGPU:
    """Stands in for a backend on a GPU: the float64 reference's output in fp32 (the spec check passes, every
    backend agrees), on a device named FAKE GPU."""

    def __init__(self, backend: str, gpu: bool) -> None:
        assert gpu, "the command must run the backends on the GPU it found"
        self.backend = backend

    def device(self) -> str:
        return "FAKE GPU"

    def __call__(self, x: dict, gamma: float, dtype: str, strided: bool) -> np.ndarray:
        from shared_spec.reference import categorical_td_target

        return categorical_td_target(**x, gamma=gamma).astype(np.float32)


def test_a_gpu_run_records_into_the_users_file_which_auto_reads(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv(sd.VALIDATION_ENV, raising=False)
    monkeypatch.setattr(matrix, "cases", lambda tiny: ONE_CASE)
    monkeypatch.setattr(matrix, "determinism_case", lambda tiny: matrix.normalise(dict(B=5, kind="mixed", seed=11)))
    monkeypatch.setattr(matrix, "REPEATS", 2)
    monkeypatch.setattr(cli, "gpu_name", lambda: "FAKE GPU")
    monkeypatch.setattr(backends, "Runner", _FakeGPU)
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["--mode", "in-process", "--out", "run", "--backends", "torch/triton,jax/mosaic"])
    out = capsys.readouterr().out
    assert rc == 0, out
    user = tmp_path / "data" / "flashsac" / "kernel_validation.json"
    assert f"recorded torch/triton, jax/mosaic into {user}" in out
    entries = sd.read_validation()
    assert entries["jax/mosaic"]["gpu"] == "FAKE GPU" and entries["jax/mosaic"]["passed"] is True
    assert entries["jax/mosaic"]["file"] == str(user) and entries["jax/mosaic"]["source"] == "run/results.json"
    assert entries["jax/mosaic"]["versions"] == backends.versions()
    assert entries["jax/pallas"]["file"] == str(sd.VALIDATION_FILE), "the packaged entries stay under the user's"
    # --record-to another file keeps that file's other entries; --no-record writes nothing
    other = tmp_path / "site.json"
    other.write_text(json.dumps({"format": 1, "about": "a site", "backends": {"jax/pallas": {
        "gpu": "G", "date": "d", "versions": {}, "result": "r", "passed": True}}}))
    assert cli.main(["--mode", "in-process", "--out", "run2", "--backends", "torch/triton", "--record-to",
                     str(other)]) == 0
    data = json.loads(other.read_text())
    assert set(data["backends"]) == {"jax/pallas", "torch/triton"} and data["about"] == "a site"
    before = user.read_text()
    assert cli.main(["--mode", "in-process", "--out", "run3", "--backends", "torch/triton", "--no-record"]) == 0
    assert user.read_text() == before


def test_bad_command_lines_and_a_damaged_validation_file_stop_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "gpu_name", lambda: None)
    for bad in (["--backends", "jax/cuda"], ["--tiny", "--record"], ["--tiny", "--record-to", "x.json"],
                ["--tiny", "--backends", "torch/triton", "--require", "jax/pallas"], []):
        with pytest.raises(SystemExit):
            cli.main(["--out", str(tmp_path), *bad])
    assert "no CUDA GPU here: run with --tiny" in capsys.readouterr().err
    damaged = tmp_path / "damaged.json"
    damaged.write_text('{"format": 1, "backends": {"triton": {}}}')
    monkeypatch.setattr(cli, "gpu_name", lambda: "FAKE GPU")
    with pytest.raises(SystemExit):
        cli.main(["--out", str(tmp_path / "run"), "--record-to", str(damaged)])
    err = capsys.readouterr().err
    assert str(damaged) in err and "must be 'framework/backend'" in err and not (tmp_path / "run").exists()


def test_inputs_are_built_once_per_master_and_sliced(monkeypatch):
    import shared_spec

    built = []
    real = shared_spec.make_inputs
    monkeypatch.setattr(shared_spec, "make_inputs", lambda *a, **k: built.append((a, k)) or real(*a, **k))
    plan = [matrix.normalise(c) for c in (dict(B=7, kind="mixed"), dict(B=3, kind="mixed", strided=True),
                                          dict(B=5, N=11, kind="mixed"), dict(B=2, kind="random"))]
    inputs = matrix.Inputs(plan, prefetch=True)
    got = [inputs.get(c) for c in plan]
    inputs.close()
    assert sorted(a for a, _ in built) == [(2, 101, 2), (5, 11, 2), (7, 101, 2)], "one per (kind, N, E, seed)"
    whole = real(7, 101, 2, seed=matrix.SEED, kind="mixed")
    for name, value in got[1].items():
        want = whole[name][:3] if name in matrix.ROW_ARGS else whole[name][:, :3]
        assert value.flags.c_contiguous and np.array_equal(value, want, equal_nan=True)
    assert np.array_equal(got[0]["next_log_probs"], whole["next_log_probs"], equal_nan=True)
    assert not inputs.futures, "every master released after its last use"


def test_spec_check_reads_both_ends_of_a_large_case(monkeypatch):
    monkeypatch.setattr(matrix, "SPEC_ROWS", 4)
    from shared_spec import make_inputs
    from shared_spec.reference import categorical_td_target

    x = make_inputs(20, 11, 2, seed=3, kind="nonfinite")
    out = categorical_td_target(**x, gamma=0.9).astype(np.float32)
    check = matrix.spec_check(x, out, 0.9, "float32")
    assert check["spec_ok"] and check["nan_rows_match_spec"] and check["spec_rows"] == 8
    bad = out.copy()
    bad[-1] += 0.01  # the last row: only a check of both ends sees it
    assert not matrix.spec_check(x, bad, 0.9, "float32")["spec_ok"]
    bad = out.copy()
    bad[10] += 0.01  # the middle: beyond the rows checked
    assert matrix.spec_check(x, bad, 0.9, "float32")["spec_ok"]


def test_the_installed_command_and_module_exist():
    out = subprocess.run([sys.executable, "-m", "kernel_validation", "--help"], capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert out.returncode == 0 and "--resume" in out.stdout and "kernel_validation.json" in out.stdout
