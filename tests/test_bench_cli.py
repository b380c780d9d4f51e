"""`python -m bench`: --help lists every job with its module's one-line summary; an unknown job exits 2 naming it."""

from __future__ import annotations

from bench.__main__ import JOBS, main


def test_help_lists_every_job(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for job in JOBS:
        assert f"\n  {job} " in out
    assert "Kernel timings: the fused Triton and Pallas kernels" in out


def test_unknown_job_exits_2(capsys):
    assert main(["kernels"]) == 2
    assert "unknown job 'kernels'; expected one of kernel, agents" in capsys.readouterr().err
    assert main([]) == 2
