"""`python -m bench kernel-validate` is the installed validation command with the benchmark jobs' conventions: --out
required, nothing recorded without --record / --record-to (tests/test_kernel_validation.py tests the command)."""

from __future__ import annotations

import json

import pytest

from bench import kernel_validate as kv
from kernel_validation import matrix

ONE_CASE = [dict(B=6, N=11, E=3, kind="nonfinite")]


def test_the_job_runs_the_command_and_records_nothing_by_default(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(matrix, "cases", lambda tiny: ONE_CASE)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert kv.main(["--tiny", "--out", str(tmp_path / "run"), "--backends", "torch/triton"]) == 0
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["complete"] and res["backends"]["torch/triton"]["validated"]
    assert res["env"]["argv"][0] == "python -m bench kernel-validate"
    assert not (tmp_path / "data").exists(), "no validation file written"
    assert "recorded" not in capsys.readouterr().out


def test_the_job_needs_out_and_a_gpu_to_record(tmp_path):
    for bad in ([], ["--tiny", "--record", "--out", str(tmp_path)], ["--out", str(tmp_path), "--backends", "jax/x"]):
        with pytest.raises(SystemExit):
            kv.main(bad)
