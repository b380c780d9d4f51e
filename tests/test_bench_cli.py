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


def test_results_record_the_command_as_typed_and_an_upstream_folder_is_never_given_this_repos_commit(
        tmp_path, monkeypatch):
    import subprocess
    import sys

    from bench.common import REPO, environment, upstream_commit

    monkeypatch.setattr(sys, "argv", ["python -m bench kernel", "--out", "x"])  # as bench/__main__.py sets it
    assert environment()["command"] == "python -m bench kernel --out x"
    monkeypatch.setattr(sys, "argv", ["bench/kernel.py", "--tiny"])
    assert environment()["command"] == f"{sys.executable} bench/kernel.py --tiny"
    # A copy of upstream's code inside this working tree (no .git of its own) is not this repository's commit.
    assert upstream_commit(f"{REPO}/bench") == "not a git checkout"
    assert upstream_commit(str(tmp_path)) == "not a git checkout"
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert upstream_commit(str(tmp_path)) == head
