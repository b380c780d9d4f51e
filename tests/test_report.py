"""README's Performance section is generated from the committed H200 results (bench/report.py)."""

import glob
import json
import os

from bench.report import agents_section, section


def test_section_lists_every_measured_batch_size():
    folders = sorted(f for f in glob.glob("bench/results/h200-*") if os.path.exists(f"{f}/triton/results.json"))
    assert folders, "no committed H200 kernel results"
    text = section(folders[-1])
    timing = json.load(open(os.path.join(folders[-1], "triton", "results.json")))["timing"]
    for r in timing:
        assert f"| {r['B']} | {r['upstream_compiled_direct_us']:.1f} |" in text
    readme = open("README.md").read()
    assert text in readme, "README's Performance section is stale: run python -m bench.report"


def test_agents_section_reports_the_committed_runs():
    folders = sorted(os.path.dirname(os.path.dirname(p)) for p in
                     glob.glob("bench/results/h200-*/agent_torch_halfcheetah_seed0/summary.json"))
    assert folders, "no committed H200 agent runs"
    text = agents_section(folders[-1])
    summary = json.load(open(f"{folders[-1]}/agent_torch_halfcheetah_seed0/summary.json"))
    assert f"| {summary['final_return']:,.0f} |" in text
    assert text in open("README.md").read(), "README's Performance section is stale: run python -m bench.report"
