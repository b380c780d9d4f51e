"""`python -m bench report --tiny --out DIR`: README.md's Results tables and the results index, built from the
committed results and written outside the repository."""

from __future__ import annotations

import json

from bench.__main__ import main


def test_tiny_run(tmp_path):
    out = tmp_path / "report"
    assert main(["report", "--tiny", "--out", str(out)]) == 0
    readme, index = (out / "README.md").read_text(), (out / "results.md").read_text()
    for title in ("Kernel against upstream's functions", "Agents", "Learning against published returns",
                  "Agents on MJX"):
        assert f"### {title}\n" in readme
    assert "| 1,048,576 |" in readme and "| torch | HalfCheetah-v4 | 5 |" in readme
    for job in ("kernel", "agents", "vs-upstream", "mjx", "learning", "harness"):
        assert f"| {job} |" in index
    assert "| vs-upstream | [`vs-upstream/`](vs-upstream/) |" in index
    assert "| 1,048,576 | " in readme and "Against upstream's own `train.py`, time to first update" in readme
    assert json.loads((out / "results.json").read_text())["index"] == index
