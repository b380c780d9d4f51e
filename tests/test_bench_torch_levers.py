"""`python -m bench torch-levers --tiny`: the torch agent's compilation levers side by side on the CPU, and the
report (one variant: the compiled ones are tests/test_compiled_update.py's, whose compilation takes a minute here)."""

from __future__ import annotations

import json
import math

import pytest

from bench.__main__ import main
from bench.torch_levers import VARIANT_PARTS


def test_tiny_run(tmp_path):
    out = tmp_path / "levers"
    assert main(["torch-levers", "--tiny", "--variants", "graph", "--first-update-variants", "graph",
                 "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    graph = res["variants"]["graph"]
    assert list(graph["ms"]) == list(VARIANT_PARTS)
    assert all(len(v) == 1 and math.isfinite(v[0]) and v[0] > 0 for v in graph["ms"].values())
    for key in ("first_update", "first_update_warm"):  # empty compiler caches, then the caches that run filled
        first = graph[key]
        assert first["returncode"] == 0 and 0 < first["time_to_first_update_s"] < first["wall_s"]
    assert "agent.use_compile=false" in res["config"]["overrides"]["graph"]
    assert "| graph |" in (out / "results.md").read_text()


def test_bad_variants_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["torch-levers", "--tiny", "--out", "unused", "--variants", "graph,jit"])
    assert exc.value.code == 2 and "--variants" in capsys.readouterr().err
