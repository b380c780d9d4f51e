"""README's Performance section is generated from the committed H200 results (bench/report.py)."""

import glob
import json
import os

from bench.report import section


def test_section_lists_every_measured_batch_size():
    folders = sorted(glob.glob("bench/results/h200-*"))
    assert folders, "no committed H200 results"
    text = section(folders[-1])
    timing = json.load(open(os.path.join(folders[-1], "triton", "results.json")))["timing"]
    for r in timing:
        assert f"| {r['B']} | {r['upstream_compiled_direct_us']:.1f} |" in text
    readme = open("README.md").read()
    assert text in readme, "README's Performance section is stale: run python -m bench.report"
