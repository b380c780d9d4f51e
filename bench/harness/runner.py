"""The run: every implementation x case through stages 1-5 (a stage runs only if the ones before it passed), then
stage 6 over all records and the report; every stage record is appended to ``stages.jsonl`` as it completes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bench.harness.cases import HarnessCase
from bench.harness.environment import env_info
from bench.harness.guards import exc_text
from bench.harness.implementations import IMPLEMENTATIONS, Impl
from bench.harness.report import write_report
from bench.harness.scoring import BASELINE, EAGER_BASELINE, apply_flags, fast_p_summary
from bench.harness.stages import (
    stage_compile,
    stage_correctness,
    stage_determinism,
    stage_integration,
    stage_performance,
    stage_record,
)

__all__ = ["STAGES", "VERBOSE", "RunConfig", "dynamo_settings", "evaluate_pair", "log", "run_harness"]

STAGES = ("1_compile", "2_correctness", "3_determinism", "4_integration", "5_performance", "6_flags")
VERBOSE = True  # progress lines on stdout (tests turn them off)


def log(msg: str) -> None:
    """Progress line on stdout when VERBOSE."""
    if VERBOSE:
        print(msg, flush=True)


@dataclass
class RunConfig:
    """Knobs of one harness run (CLI flags)."""

    seed: int = 0
    trials: int = 3
    repeats: int = 5
    perf_reps: int = 10
    budget_s: float | None = None
    smoke: bool = False


def evaluate_pair(impl: Impl, case: HarnessCase, cfg: RunConfig, emit: Callable[[dict], None]) -> dict:
    """Run stages 1-5 for one implementation x case; each stage's record is emitted as soon as it completes.
    A stage runs only if every stage before it passed; otherwise it is recorded as "blocked" (with the cause)."""
    rec = {"impl": impl.name, "framework": impl.framework, "role": impl.role, "case": case.id,
           "params": dataclasses.asdict(case), "stages": {}}
    plan = [("1_compile", lambda: stage_compile(impl, case, cfg.seed)),
            ("2_correctness", lambda: stage_correctness(impl, case, cfg.seed, cfg.trials)),
            ("3_determinism", lambda: stage_determinism(impl, case, cfg.seed, cfg.repeats)),
            ("4_integration", lambda: stage_integration(impl, case, cfg.seed)),
            ("5_performance", lambda: stage_performance(impl, case, cfg.seed, cfg.perf_reps))]
    stopped: tuple[str, dict] | None = None
    for name, fn in plan:
        if stopped is not None:
            cause = f"{stopped[0]} {stopped[1]['status']}: " + "; ".join(stopped[1]["reasons"])[:500]
            r = stage_record("blocked", [cause])
        else:
            t0 = time.perf_counter()
            try:
                r = fn()
            except Exception as exc:  # noqa: BLE001  a crash inside a stage is that stage's failure
                r = stage_record("failed", [f"stage raised {exc_text(exc)}"], traceback=traceback.format_exc()[-2000:])
            r["seconds"] = round(time.perf_counter() - t0, 4)
            if r["status"] != "passed":
                stopped = (name, r)
        rec["stages"][name] = r
        emit({"impl": impl.name, "case": case.id, "stage": name, **r})
    if stopped is None:
        rec.update(status="passed", failed_stage=None, reason=None)
    else:
        rec.update(status="skipped" if stopped[1]["status"] == "skipped" else "failed", failed_stage=stopped[0],
                   reason="; ".join(stopped[1]["reasons"])[:1000])
    return rec



@contextlib.contextmanager
def dynamo_settings() -> Iterator[dict]:
    """Within the block, let the compiled paths recompile for every shape/layout of the matrix (recompile_limit 64,
    default 8) and make hitting the limit an error: by default dynamo would silently run the baseline eagerly from
    then on. Yields the settings in force; restores the previous ones afterwards."""
    import torch._dynamo.config as dynamo_config

    wanted = {"recompile_limit": 64, "accumulated_recompile_limit": 1024, "fail_on_recompile_limit_hit": True}
    wanted = {k: v for k, v in wanted.items() if hasattr(dynamo_config, k)}
    previous = {k: getattr(dynamo_config, k) for k in wanted}
    for name, value in wanted.items():
        setattr(dynamo_config, name, value)
    try:
        yield dict(wanted)
    finally:
        for name, value in previous.items():
            setattr(dynamo_config, name, value)


def run_harness(cases: list[HarnessCase], impl_names: list[str] | tuple[str, ...], out_dir: str,
                cfg: RunConfig | None = None) -> dict:
    """Evaluate every implementation x case through the stages and write the report under `out_dir`.

    Returns:
        {"env", "config", "cases", "records", "fast_p", "fast_p_device", "fast_p_eager_baseline", "flags", "seconds"}.
    """
    cfg = cfg or RunConfig()
    unknown = [n for n in impl_names if n not in IMPLEMENTATIONS]
    if unknown:
        raise ValueError(f"unknown implementations {unknown}; choose from {tuple(IMPLEMENTATIONS)}")
    os.makedirs(out_dir, exist_ok=True)
    t_start = time.perf_counter()
    stages_path = os.path.join(out_dir, "stages.jsonl")
    env = env_info()
    with open(stages_path, "w") as f:
        f.write(json.dumps({"stage": "0_environment", "status": "passed", **env}, default=str) + "\n")

    def emit(record: dict) -> None:
        with open(stages_path, "a") as fh:
            fh.write(json.dumps(record, default=str) + "\n")

    records = []
    with dynamo_settings() as dynamo_cfg:
        env["dynamo_config"] = dynamo_cfg
        for case in cases:
            for name in impl_names:
                impl = IMPLEMENTATIONS[name]
                if cfg.budget_s is not None and time.perf_counter() - t_start > cfg.budget_s:
                    r = {"impl": name, "framework": impl.framework, "role": impl.role, "case": case.id,
                         "params": dataclasses.asdict(case), "status": "not_run", "failed_stage": None,
                         "reason": f"time budget of {cfg.budget_s:.0f} s exhausted",
                         "stages": {"1_compile": stage_record("not_run", ["time budget exhausted"])}}
                    emit({"impl": name, "case": case.id, "stage": "1_compile", **r["stages"]["1_compile"]})
                else:
                    r = evaluate_pair(impl, case, cfg, emit)
                records.append(r)
                perf = r["stages"].get("5_performance", {})
                log(f"  {name:<18} {case.id:<52} {r['status']:<8} "
                    + (f"{perf['median_us']:.1f} us ({perf['timer'][:24]})" if perf.get("status") == "passed"
                       else f"{r['failed_stage'] or ''} {str(r['reason'] or '')[:110]}"))
    apply_flags(records, emit)
    result = {"env": env, "config": dataclasses.asdict(cfg), "implementations": {
        n: {"framework": IMPLEMENTATIONS[n].framework, "role": IMPLEMENTATIONS[n].role,
            "description": IMPLEMENTATIONS[n].description} for n in impl_names},
        "cases": [c.id for c in cases], "records": records,
        "fast_p": fast_p_summary(records, BASELINE), "fast_p_device": fast_p_summary(records, device_time=True),
        "fast_p_eager_baseline": fast_p_summary(records, EAGER_BASELINE),
        "flags": [{"impl": r["impl"], "case": r["case"], "flags": r["stages"]["6_flags"]["reasons"]}
                  for r in records if r["stages"].get("6_flags", {}).get("status") == "flagged"],
        "seconds": round(time.perf_counter() - t_start, 2)}
    write_report(out_dir, result)
    return result

