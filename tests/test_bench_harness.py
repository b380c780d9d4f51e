"""The cascaded kernel harness (bench/harness/): the CPU smoke run, and planted bad kernels it must catch.

CPU only: the Triton interpreter and Pallas interpret mode (tests/conftest.py), tiny sizes, no timing assertions.
Each planted kernel is installed where the real one lives (the dispatch registry or the dispatcher's decision), so
the harness evaluates it exactly as it evaluates the real kernel; each must fail the right stage with a clear reason
and block the performance stage.
"""

from __future__ import annotations

import csv
import json
import math
import os

import numpy as np
import pytest
import torch

import jax_impl.dispatch as jax_dispatch
import torch_impl.dispatch as torch_dispatch
from bench import harness as H
from bench.harness import runner
from shared_spec.tolerances import atol_vs_float64

CASE = H.HarnessCase(33, layout="chunk", kind="mixed")  # upstream's layout, every value kind
QUICK = H.RunConfig(seed=7, trials=2, repeats=1, perf_reps=1, smoke=True)
LATER = ("3_determinism", "4_integration", "5_performance", "6_flags")


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setattr(runner, "VERBOSE", False)


def _run_one(tmp_path, impl: str, case: H.HarnessCase = CASE) -> dict:
    res = H.run_harness([case], [impl], str(tmp_path), QUICK)
    (rec,) = res["records"]
    return rec


def _assert_caught(rec: dict, stage: str, needle: str) -> None:
    assert rec["status"] == "failed", rec["status"]
    assert rec["failed_stage"] == stage, (rec["failed_stage"], rec["reason"])
    assert needle in rec["reason"], rec["reason"]
    for later in LATER[LATER.index("3_determinism") if stage == "2_correctness" else 0:]:
        assert rec["stages"][later]["status"] == "blocked", (later, rec["stages"][later])
    assert rec["stages"]["5_performance"].get("median_us") is None


# ------------------------------------------------------------------------------------------------------ smoke run


def test_smoke_run_writes_a_complete_report(tmp_path):
    """`python -m bench harness --tiny` (in process): every implementation x case, JSON/CSV/markdown/PNG, fast_p."""
    out = tmp_path / "smoke"
    assert H.main(["--tiny", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    n_impl, n_case = len(H.IMPLEMENTATIONS), len(H.SMOKE_CASES)
    assert len(res["records"]) == n_impl * n_case
    assert res["env"]["TRITON_INTERPRET"] == "1" and res["env"]["torch"] == torch.__version__
    for rec in res["records"]:
        assert set(H.STAGES) <= set(rec["stages"]), rec["stages"].keys()
        if rec["status"] == "skipped":  # only upstream on NaN inputs (it has no NaN policy)
            assert rec["stages"]["1_compile"]["expected_skip"] and rec["impl"].startswith("upstream")
            assert rec["params"]["kind"] == "nonfinite"
        else:
            assert rec["status"] == "passed", (rec["impl"], rec["case"], rec["reason"])
            assert rec["stages"]["5_performance"]["timer"] == "cpu_wallclock"
    kernels = [r for r in res["records"] if r["role"] == "kernel"]
    assert {r["impl"] for r in kernels} == {"triton", "pallas"}
    assert all(t["kernel_calls"] >= 1 for r in kernels for t in r["stages"]["2_correctness"]["trials"])
    assert all(t["output_poisoned"] for r in res["records"] if r["impl"] == "triton"
               for t in r["stages"]["2_correctness"]["trials"])
    # fast_p: fast_0 is the correctness rate; rates are monotone in p.
    for name, s in res["fast_p"].items():
        assert s["fast_0"] == pytest.approx(s["correct"] / s["cases_evaluated"]), name
        rates = [s[f"fast_{p:g}"] for p in H.FAST_P]
        assert rates == sorted(rates, reverse=True), (name, rates)
    assert set(res["fast_p_eager_baseline"]) == set(res["fast_p"]) == set(res["fast_p_device"])
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == n_impl * n_case and tuple(rows[0]) == H.CSV_FIELDS
    md = (out / "results.md").read_text()
    assert "fast_p vs the compiled upstream reference" in md and "NOT kernel performance" in md
    assert md.count("\n| triton | B") == n_case
    lines = (out / "stages.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["stage"] == "0_environment"
    assert len(lines) == 1 + n_impl * n_case * len(H.STAGES)
    assert (out / "speedup.png").stat().st_size > 1000


def test_fast_p_summary_arithmetic():
    """fast_p on synthetic records: correct AND faster by > p over every evaluated case; geomean over correct."""
    def rec(name, correct=True, speedup=None, skip=False):
        ok = {"status": "passed"}
        stages = {s: dict(ok) for s in ("1_compile", "2_correctness", "3_determinism", "4_integration")}
        if not correct:
            stages["2_correctness"] = {"status": "failed"}
        if skip:
            stages["1_compile"] = {"status": "skipped", "expected_skip": True}
        stages["6_flags"] = {"speedup_vs_upstream_compiled": speedup}
        return {"impl": name, "stages": stages}

    records = [rec("k", speedup=3.0), rec("k", speedup=1.1), rec("k", speedup=0.5), rec("k", correct=False),
               rec("k"), rec("k", skip=True)]
    s = H.fast_p_summary(records)["k"]
    assert (s["cases_evaluated"], s["cases_skipped"], s["correct"], s["cases_without_baseline_time"]) == (5, 1, 4, 1)
    assert (s["fast_0"], s["fast_1"], s["fast_1.2"], s["fast_2"]) == (0.8, 0.4, 0.2, 0.2)
    assert s["geomean_speedup"] == pytest.approx(math.exp(np.mean(np.log([3.0, 1.1, 0.5]))))


def test_fast_p_on_device_time_uses_graph_replay_for_torch_implementations():
    """Device-time fast_p: a torch kernel slower by direct call (host launch overhead) but faster under CUDA-graph
    replay counts as faster; a JAX implementation keeps its own (already device-time) speedup."""
    def rec(name, framework, direct, graph):
        stages = {s: {"status": "passed"} for s in ("1_compile", "2_correctness", "3_determinism", "4_integration")}
        stages["6_flags"] = {"speedup_vs_upstream_compiled": direct, "speedup_vs_upstream_compiled_cudagraph": graph}
        return {"impl": name, "framework": framework, "stages": stages}

    records = [rec("t", "torch", 0.8, 2.5), rec("t", "torch", 1.5, 3.0), rec("j", "jax", 1.3, None)]
    assert H.fast_p_summary(records)["t"]["fast_2"] == 0.0
    device = H.fast_p_summary(records, device_time=True)
    assert (device["t"]["fast_1"], device["t"]["fast_2"]) == (1.0, 1.0)
    assert device["t"]["geomean_speedup"] == pytest.approx(math.sqrt(2.5 * 3.0))
    assert device["j"]["fast_1.2"] == 1.0
    with pytest.raises(ValueError, match="device_time"):
        H.fast_p_summary(records, H.EAGER_BASELINE, device_time=True)


# ------------------------------------------------------------------------------------------------- planted kernels


@pytest.mark.parametrize("impl", ["triton", "pallas"])
def test_catches_a_wrong_kernel(tmp_path, monkeypatch, impl):
    """Output shifted by one atom on every other row: correctness fails on the max abs error."""
    reg = torch_dispatch.IMPLEMENTATIONS if impl == "triton" else jax_dispatch.IMPLEMENTATIONS
    real = reg[impl]

    def shifted(*args, **kwargs):
        out = real(*args, **kwargs)
        if impl == "triton":
            out[1::2] = torch.roll(out[1::2], 1, dims=1)
            return out
        return out.at[1::2].set(np.roll(np.asarray(out[1::2]), 1, axis=1))

    monkeypatch.setitem(reg, impl, shifted)
    rec = _run_one(tmp_path, impl)
    _assert_caught(rec, "2_correctness", "max abs error")
    assert rec["stages"]["2_correctness"]["trials"][0]["kernel_calls"] >= 1  # it did run: the values are wrong


def test_catches_a_kernel_that_writes_only_part_of_the_output(tmp_path, monkeypatch):
    """Half the rows never written: the NaN-poisoned output buffer exposes them (without poisoning, recycled memory
    can hold a previous correct answer)."""
    real = torch_dispatch.IMPLEMENTATIONS["triton"]

    def half(*args, **kwargs):
        full = real(*args, **kwargs)
        out = torch.empty_like(full)  # uninitialised, like the real launch's torch.empty
        out[: full.shape[0] // 2] = full[: full.shape[0] // 2]
        return out

    monkeypatch.setitem(torch_dispatch.IMPLEMENTATIONS, "triton", half)
    rec = _run_one(tmp_path, "triton")
    _assert_caught(rec, "2_correctness", "rows left unwritten")
    trial = rec["stages"]["2_correctness"]["trials"][0]
    assert trial["output_poisoned"] and trial["rows_nan_where_spec_finite"] >= CASE.B // 2 - 3


def test_catches_a_kernel_that_modifies_its_inputs(tmp_path, monkeypatch):
    """Zeroes the reward in place before computing (a reference recomputed afterwards from the same tensors would
    agree): the input snapshot catches it."""
    real = torch_dispatch.IMPLEMENTATIONS["triton"]

    def mutating(next_qs, next_log_probs, reward, *rest):
        reward.zero_()
        return real(next_qs, next_log_probs, reward, *rest)

    monkeypatch.setitem(torch_dispatch.IMPLEMENTATIONS, "triton", mutating)
    rec = _run_one(tmp_path, "triton")
    _assert_caught(rec, "2_correctness", "modified its inputs: reward")
    assert rec["stages"]["2_correctness"]["trials"][0]["inputs_changed"] == ["reward"]


@pytest.mark.parametrize("impl", ["triton", "pallas"])
def test_catches_a_silent_fallback(tmp_path, monkeypatch, impl):
    """The dispatcher claims the kernel but runs the reference: correct values, but the counting wrapper around the
    registered kernel never fires."""
    if impl == "triton":  # the torch op asks its dispatcher directly (resolve_backend is the public query)
        monkeypatch.setattr(torch_dispatch.DISPATCHER, "decide",
                            lambda backend, strict, config, rows=None: torch_dispatch.Decision(backend, "torch",
                                                                                               "requested"))
    else:
        monkeypatch.setattr(jax_dispatch, "resolve_backend",
                            lambda backend="auto", strict=False, **kw: jax_dispatch.Decision(backend, "jax",
                                                                                            "requested"))
    rec = _run_one(tmp_path, impl)
    _assert_caught(rec, "2_correctness", "the kernel never ran")
    c2 = rec["stages"]["2_correctness"]
    assert all(t["kernel_calls"] == 0 for t in c2["trials"])
    assert c2["max_abs_error_finite_rows"] <= atol_vs_float64(CASE.N)  # the values alone would have passed


def test_expected_skip_is_a_result_not_a_crash(tmp_path, monkeypatch):
    """A kernel that cannot run here (simulated: no GPU) is recorded as an expected skip, excluded from fast_p."""
    torch_dispatch.reset_dispatch()
    monkeypatch.setitem(torch_dispatch.GATES, "triton", lambda key: "simulated: no CUDA device")
    try:
        res = H.run_harness([CASE], ["triton"], str(tmp_path), QUICK)
    finally:
        torch_dispatch.reset_dispatch()
    (rec,) = res["records"]
    assert rec["status"] == "skipped" and rec["failed_stage"] == "1_compile"
    assert rec["stages"]["1_compile"]["expected_skip"] and "simulated: no CUDA device" in rec["reason"]
    assert all(rec["stages"][s]["status"] == "blocked" for s in ("2_correctness",) + LATER)
    assert res["fast_p"]["triton"]["cases_evaluated"] == 0
    assert os.path.exists(tmp_path / "results.md")


def test_pairs_past_the_time_budget_are_reported_not_run(tmp_path):
    """--budget-s: pairs not started are listed as not_run (never silently dropped) and excluded from fast_p."""
    res = H.run_harness([CASE], ["torch", "triton"], str(tmp_path), H.RunConfig(budget_s=0.0))
    assert [r["status"] for r in res["records"]] == ["not_run", "not_run"]
    assert all(s["cases_evaluated"] == 0 and s["cases_skipped"] == 1 for s in res["fast_p"].values())
    assert "time budget" in (tmp_path / "results.md").read_text()


def test_jax_speedups_use_the_baselines_device_time():
    # JAX rows are device time (a jitted loop); the torch baselines' direct calls are host-bound, so the JAX rows
    # must be compared with the baselines' CUDA-graph time (else every JAX row looks > 10x faster).
    from bench.harness import apply_flags

    def rec(impl, framework, median, graph=None):
        perf = {"status": "passed", "median_us": median}
        if graph is not None:
            perf["cudagraph_median_us"] = graph
        return {"impl": impl, "case": "c", "framework": framework, "stages": {"5_performance": perf}}

    records = [rec("upstream_compiled", "torch", 200.0, 8.0), rec("upstream_eager", "torch", 400.0, 40.0),
               rec("triton", "torch", 50.0, 2.0), rec("torch", "torch", 1000.0, 100.0),
               rec("jax", "jax", 10.0), rec("pallas", "jax", 4.0)]
    apply_flags(records, lambda _: None)
    by = {r["impl"]: r["stages"]["6_flags"] for r in records}
    assert by["triton"]["speedup_vs_upstream_compiled"] == 4.0  # 200 / 50: direct vs direct
    assert by["pallas"]["speedup_vs_upstream_compiled"] == 2.0  # 8 / 4: device vs device
    assert by["pallas"]["speedup_vs_framework_reference"] == 2.5  # 10 / 4
    assert by["pallas"]["status"] == "passed" and not by["pallas"]["reasons"]
