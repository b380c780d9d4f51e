"""bench.device: a job started detached writes its log and exit status, and ``wait`` reports them."""

from __future__ import annotations

import pytest

from bench import device


def test_start_then_wait(tmp_path, capsys):
    folder, out = tmp_path / "job", tmp_path / "report"
    assert device.main(["start", str(folder), "--", "report", "--tiny", "--out", str(out)]) == 0
    assert device.main(["wait", str(folder), "--limit", "300"]) == 0
    assert (folder / "job.rc").read_text().strip() == "0" and (out / "README.md").is_file()
    printed = capsys.readouterr().out
    assert "job ended with exit status 0" in printed and f"wrote {out}" in printed


def test_wait_without_a_job_names_the_folder(tmp_path):
    with pytest.raises(SystemExit, match="holds no job.pid"):
        device.main(["wait", str(tmp_path)])
