"""README.md's Results tables and bench/results/README.md are what `python -m bench report` builds from the committed
results (run as a command: tests outside tests/test_bench*.py do not import bench)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.agent_test_utils import REPO


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", "report", "--check", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=REPO))


def test_readme_results_are_current():
    res = _check()
    assert res.returncode == 0, res.stderr


def test_a_changed_number_is_stale(tmp_path):
    text = open(f"{REPO}/README.md").read()
    head, section = text.split("<!-- results:begin -->")
    changed = re.sub(r"\*\*(\d+)\.(\d)\*\*", lambda m: f"**{int(m.group(1)) + 1}.{m.group(2)}**", section, count=1)
    assert changed != section
    readme = tmp_path / "README.md"
    readme.write_text(head + "<!-- results:begin -->" + changed)
    res = _check("--readme", str(readme))
    assert res.returncode == 1 and f"{readme} is stale" in res.stderr
