"""Validate the kernel backends on this machine's GPU and record the result where `backend="auto"` reads it.

`flashsac-validate-kernels` (or `python -m kernel_validation`; `python -m bench kernel-validate` in a checkout) runs
torch `triton`, JAX `triton` (jaxlib's Triton kernel call), JAX `pallas` (Pallas-Triton) and JAX `mosaic` (Pallas on
Mosaic GPU) over
the adversarial matrix (`kernel_validation.matrix.cases`: every input kind at several B, large B and partial last
programs, N 2 ... 1024, E 1 ... 16, gamma around the band threshold, bf16/fp16 log-probs, strided rows read in place),
each through its public op with a strict backend. The torch Triton kernel is the anchor: every other kernel must give
its bits exactly (NaN rows by position; compared by a SHA-256 of the output's bits), and the anchor's NaN rows and its
first and last 4096 rows of every case must match the float64 spec (SPEC.md). Each backend then repeats one large
case 20 times bit for bit. A mismatch fails the run (exit status 1, "MISMATCH" lines, the differing elements counted);
a backend that cannot run here is reported as not validated with its reason (exit status 1 only if named in
--require).

Each backend runs in its own process, all at once on the one GPU (`--mode in-process`: one after another in this
process, which the CPU's --tiny run and a GPU in exclusive-process compute mode use); each backend compiles once per
launch shape, builds each input once (rows of one master per input kind and shape) and writes each configuration's
record as soon as it has it. DIR/results.json is rewritten (atomically) after every record, so a stopped run keeps
what it checked; `--resume` continues a stopped run in the same DIR, skipping every configuration already recorded
with the same GPU, versions, kernel code and matrix; `--budget SECONDS` stops a run itself (and records the backends
that finished) before a time limit would kill it.

The result of each backend that ran every configuration (passed or not) is then written into a validation file:
by default the user's own (${XDG_DATA_HOME:-~/.local/share}/flashsac/kernel_validation.json), which the dispatcher
reads over the packaged results; `--record` writes the packaged file instead (shared_spec/data/kernel_validation.json
of a checkout: for the project's developers, who commit it), `--record-to PATH` another file, `--no-record` none.
On the CPU, `--tiny` runs three small cases through the interpreters (TRITON_INTERPRET=1, FLASHSAC_PALLAS_INTERPRET=1)
in seconds and records nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kernel_validation import matrix
from kernel_validation.matrix import ANCHOR, BACKENDS

__all__ = ["default_out", "diagnose", "gpu_name", "main", "markdown", "merge", "record_validation"]

RUN_FILES = ("results.json", "results.md", "plan.json", "records", "logs")  # what one run writes under --out
DIAGNOSED = 5  # mismatching (configuration, backend) pairs whose differing elements are counted


def default_out() -> Path:
    """Where results go without --out: <user data dir>/flashsac/kernel-validation (beside the user's validation
    file), so that `--resume` finds a stopped run without being told where."""
    from shared_spec.dispatch import user_validation_path

    return user_validation_path().parent / "kernel-validation"


def gpu_name() -> str | None:
    """The first CUDA GPU's name, or None without one (torch's view)."""
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        return None


def exclusive_gpu() -> bool:
    """Whether the first GPU allows one process at a time (nvidia-smi's compute mode Exclusive_Process): the
    backends then run in this process, one after another."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_mode", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "exclusive" in out.lower()


# ------------------------------------------------------------------------------------------------------ results

def merge(plan: dict, backends: tuple[str, ...], records: dict[str, list[dict]],
          problems: dict[str, str] | None = None) -> dict[str, Any]:
    """The results so far from each backend's records ({backend: [record, ...]}, `worker.read_records`).

    Args:
        problems: {backend: why its worker ended without finishing} (a crashed process).

    Returns:
        {"rows": one per configuration the anchor has run (the case, its spec check, "bitwise": {backend: equal
         to the anchor} for every backend that has run it, "differing": {backend: 0, or the differing elements once
         counted (`diagnose`), else None}, "seconds": {backend: s}), "backends": {backend: {"validated", and
         "result" once it ran every configuration and its repeats, else "reason" or "incomplete"}},
         "determinism": {backend: repeats identical}, "mismatches", "configurations": the plan's, "checked":
         {backend: configurations compared so far}, "complete": every backend finished or cannot run}.
    """
    problems = problems or {}
    n = len(plan["cases"])
    by_case: dict[str, dict[str, dict]] = {}
    unavailable: dict[str, str] = {}
    determinism: dict[str, bool] = {}
    for b in backends:
        by_case[b] = {}
        for r in records.get(b, []):
            if "unavailable" in r:
                unavailable.setdefault(b, r["unavailable"])
            elif "determinism" in r:
                determinism[b] = bool(r["determinism"])
            elif "digest" in r:
                by_case[b][r["case"]] = r
    rows = []
    for case in plan["cases"]:
        key = matrix.case_key(case)
        anchor = by_case.get(ANCHOR, {}).get(key)
        if anchor is None:
            continue
        row = dict(case, **{k: anchor[k] for k in ("nan_rows_match_spec", "max_err_vs_float64", "spec_rows",
                                                   "spec_ok")}, bitwise={}, differing={},
                   seconds={ANCHOR: anchor["seconds"]})
        for b in backends:
            rec = by_case[b].get(key) if b != ANCHOR else None
            if rec is not None:
                same = rec["digest"] == anchor["digest"]
                row["bitwise"][b], row["differing"][b], row["seconds"][b] = same, 0 if same else None, rec["seconds"]
        rows.append(row)
    summary: dict[str, dict[str, Any]] = {}
    for b in backends:
        compared = [r for r in rows if b in r["bitwise"]] if b != ANCHOR else rows
        if b in problems or b in unavailable:
            summary[b] = {"validated": False, "reason": problems.get(b) or unavailable[b]}
        elif b != ANCHOR and ANCHOR in unavailable | problems:
            summary[b] = {"validated": False, "reason": f"the anchor {ANCHOR} could not run, so nothing is compared"}
        elif len(compared) < n or b not in determinism:
            summary[b] = {"validated": False, "incomplete": f"{len(compared)}/{n} configurations checked, repeats "
                                                            f"{'checked' if b in determinism else 'not yet'}"}
        else:
            equal = sum(r["spec_ok"] for r in rows) if b == ANCHOR else sum(r["bitwise"][b] for r in compared)
            what = (f"{equal}/{n} configurations within the float64 spec's bound, NaN rows as the spec" if b == ANCHOR
                    else f"{equal}/{n} configurations bitwise equal to {ANCHOR}")
            summary[b] = {"validated": equal == n and determinism[b],
                          "result": f"{what}, {plan['repeats']} repeats identical: {determinism[b]}"}
    mismatches = sum(not same for r in rows for same in r["bitwise"].values())
    mismatches += sum(not r["spec_ok"] for r in rows) + sum(not ok for ok in determinism.values())
    return {"rows": rows, "backends": summary, "determinism": determinism, "mismatches": int(mismatches),
            "configurations": n, "checked": {b: len([r for r in rows if b in r["bitwise"]]) if b != ANCHOR
                                             else len(rows) for b in backends},
            "complete": all("incomplete" not in s for s in summary.values())}


def diagnose(plan: dict, res: dict, gpu: bool, log=print) -> None:
    """Count the differing elements (NaN rows by position) of the first DIAGNOSED mismatching (configuration,
    backend) pairs of `res` by running the anchor and that backend again on the configuration here (in this
    process); fills the rows' "differing" (-1: other shapes)."""
    from kernel_validation.backends import Runner

    pairs = [(r, b) for r in res["rows"] for b, same in r["bitwise"].items() if not same][:DIAGNOSED]
    if not pairs:
        return
    runners: dict[str, Any] = {}
    inputs = matrix.Inputs([*plan["cases"], plan["determinism"]], [matrix.normalise(r) for r, _ in pairs],
                           prefetch=False)
    try:
        for row, b in pairs:
            case = matrix.normalise(row)
            try:
                for name in (ANCHOR, b):
                    runners.setdefault(name, Runner(name, gpu))
                x = inputs.get(case)
                args = (case["gamma"], case["dtype"], case["strided"])
                want, got = runners[ANCHOR](x, *args), runners[b](x, *args)
                row["differing"][b] = (int((matrix.canonical_bits(want) != matrix.canonical_bits(got)).sum())
                                       if want.shape == got.shape else -1)
            except Exception as exc:  # keep the mismatch; say why it is not counted
                log(f"could not count the differing elements of {b} at {matrix.case_key(case)}: "
                    f"{type(exc).__name__}: {exc}")
    finally:
        inputs.close()


def markdown(res: dict, env: dict) -> str:
    lines = [f"# Kernel validation ({env['device']}, {env['date']})", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()), "",
             f"{res['configurations']} configurations; anchor {ANCHOR}; mismatches: {res['mismatches']}; "
             f"{'complete' if res['complete'] else 'not complete (a stopped run: --resume continues it)'}; "
             f"{env['mode']}, {env['wall_seconds']:.0f} s.", "",
             "| backend | validated | result or reason |", "|---|---|---|"]
    for b, s in res["backends"].items():
        lines.append(f"| {b} | {s['validated']} | {s.get('result') or s.get('reason') or s.get('incomplete')} |")
    bad = [r for r in res["rows"] if not r["spec_ok"] or not all(r["bitwise"].values())]
    if bad:
        lines += ["", "Mismatching configurations:", ""] + [f"- {json.dumps(r)}" for r in bad]
    return "\n".join(lines) + "\n"


def record_validation(res: dict, path: str | os.PathLike, source: str, gpu: str, versions: dict,
                      date: str) -> dict:
    """Write each backend of `res` that ran every configuration (passed or not) into the validation file at
    `path` (its other entries kept; written atomically); returns the file's content. Backends that could not run
    here, or did not finish, are left as they were. Raises ValueError if the file exists but is not a validation
    file (it is not overwritten)."""
    from shared_spec.dispatch import VALIDATION_FORMAT, load_validation, write_json_atomic

    path = Path(path)
    entries = load_validation(path)
    about = None
    if path.exists():
        about = json.loads(path.read_text()).get("about")
    for b, s in res["backends"].items():
        if "result" not in s:
            continue
        entries[b] = {"gpu": gpu, "date": date, "versions": versions, "result": s["result"],
                      "passed": bool(s["validated"]), "source": source}
    data = {"format": VALIDATION_FORMAT,
            "about": about or "GPU validation results of the kernel backends; backend='auto' chooses only kernels "
                              "with passed=true (shared_spec/dispatch.py). Written by flashsac-validate-kernels on a "
                              "GPU; each entry's source is the run's results.json.",
            "backends": dict(sorted(entries.items()))}
    write_json_atomic(path, data)
    return data


# -------------------------------------------------------------------------------------------------------- running

def _set_aside_previous(out: Path) -> Path | None:
    """Move a previous run's files in `out` (RUN_FILES) into out/previous-<UTC time>/ (kept, not read)."""
    found = [name for name in RUN_FILES if (out / name).exists()]
    if not found:
        return None
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    dest = out / f"previous-{stamp}"
    n = 1
    while dest.exists():
        n, dest = n + 1, out / f"previous-{stamp}-{n}"
    dest.mkdir(parents=True)
    for name in found:
        shutil.move(str(out / name), str(dest / name))
    return dest


class _Progress:
    """Prints each new record as one line (with its comparison, when the anchor's record is in)."""

    def __init__(self, plan: dict, log) -> None:
        self.n = len(plan["cases"])
        self.counts: dict[str, int] = {}
        self.anchor: dict[str, str] = {}
        self.log = log

    def __call__(self, backend: str, r: dict) -> None:
        if "unavailable" in r:
            self.log(f"{backend:13} NOT VALIDATED: {r['unavailable']}")
            return
        if "determinism" in r:
            self.log(f"{backend:13} {r['repeats']} repeats identical: {r['determinism']}")
            return
        i = self.counts[backend] = self.counts.get(backend, 0) + 1
        if backend == ANCHOR:
            self.anchor[r["case"]] = r["digest"]
            status = "ok" if r["spec_ok"] else "MISMATCH float64-spec"
            extra = f" err64 {r['max_err_vs_float64']:.2e}"
        else:
            want = self.anchor.get(r["case"])
            status = "recorded" if want is None else "ok" if want == r["digest"] else f"MISMATCH {backend}"
            extra = ""
        self.log(f"{backend:13} {i:3}/{self.n} {status:10}{extra} {r['seconds']:7.2f}s {r['case']}")


def _read_all(out: Path, backends: tuple[str, ...]) -> dict[str, list[dict]]:
    from kernel_validation.worker import read_records, records_path

    return {b: read_records(records_path(out, b))[1] for b in backends}


class _BudgetSpent(Exception):
    """--budget's time is up: the run stops where it is (its records kept, --resume continues it)."""


def _run_processes(out: Path, plan_path: Path, backends: tuple[str, ...], gpu: bool, resume: bool, on_change,
                   progress: _Progress, deadline: float | None) -> dict[str, str]:
    """One worker process per backend, all at once; `on_change()` after new records; at `deadline`
    (time.monotonic()) the workers still running are stopped. Returns {backend: why its process failed}."""
    from kernel_validation.worker import records_path

    (out / "logs").mkdir(parents=True, exist_ok=True)
    procs, logs = {}, {}
    for b in backends:
        logs[b] = out / "logs" / (b.replace("/", "-") + ".log")
        cmd = [sys.executable, "-m", "kernel_validation.worker", "--backend", b, "--plan", str(plan_path),
               "--records", str(records_path(out, b)), *(["--gpu"] if gpu else []), *(["--resume"] if resume else [])]
        with open(logs[b], "a") as f:
            procs[b] = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    seen: dict[str, int] = dict.fromkeys(backends, 0)
    stopped: list[str] = []  # by the budget: incomplete, not failed
    try:
        while True:
            running = any(p.poll() is None for p in procs.values())
            records = _read_all(out, backends)
            new = False
            for b in backends:
                for r in records[b][seen[b]:]:
                    progress(b, r)
                    new = True
                seen[b] = len(records[b])
            if new:
                on_change()
            if not running:
                break
            if deadline is not None and time.monotonic() > deadline:
                stopped += [b for b, p in procs.items() if p.poll() is None]
                print(f"--budget spent: stopping {', '.join(stopped)} (their records are kept; --resume continues)")
                for b in stopped:
                    procs[b].terminate()
                    procs[b].wait()
                on_change()
                break
            time.sleep(0.5)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
    problems = {}
    for b, p in procs.items():
        if p.wait() != 0 and b not in stopped:
            tail = logs[b].read_text()[-3000:] if logs[b].exists() else ""
            problems[b] = f"its worker process exited with status {p.returncode} (log: {logs[b]})"
            print(f"{b}: {problems[b]}; the log ends:\n{tail}")
    return problems


def main(argv: list[str] | None = None, *, prog: str = "flashsac-validate-kernels", bench: bool = False) -> int:
    """The command (`bench`: as the benchmark job `python -m bench kernel-validate`: --out required, nothing
    recorded without --record/--record-to)."""
    from shared_spec.dispatch import VALIDATION_FILE, load_validation, user_validation_path

    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=bench, default=None,
                   help="directory for results.json, results.md and the records" + (
                       "" if bench else f" (default: {default_out()})"))
    p.add_argument("--tiny", action="store_true", help="three small cases on the CPU with the interpreters")
    p.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated subset of {BACKENDS}")
    p.add_argument("--require", default="", help="backends that must validate here (else exit status 1)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out: configurations recorded "
                                                         "with the same GPU, versions, kernel code and matrix are "
                                                         "not run again")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--record", action="store_true", help=f"record into the packaged file ({VALIDATION_FILE}; "
                                                             f"developers, in a checkout)")
    where.add_argument("--record-to", default=None, metavar="PATH", help="record into this validation file")
    where.add_argument("--no-record", action="store_true", help="record nothing" + (
        "" if bench else f" (default: the user's file {user_validation_path()})"))
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop after this many seconds, keeping every record (--resume continues), and record the "
                        "backends that finished")
    p.add_argument("--mode", choices=("processes", "in-process"), default=None,
                   help="one process per backend at once (default on a GPU), or one after another in this process "
                        "(default with --tiny, and on a GPU in exclusive-process compute mode)")
    args = p.parse_args(argv)
    backends = tuple(b for b in args.backends.split(",") if b)
    require = tuple(b for b in args.require.split(",") if b)
    bad = [b for b in (*backends, *require) if b not in BACKENDS]
    if bad or not backends:
        p.error(f"--backends/--require must name backends of {BACKENDS}, got {bad or args.backends!r}")
    if ANCHOR not in backends:
        backends = (ANCHOR, *backends)  # every comparison needs it
    if not set(require) <= set(backends):
        p.error(f"--require {args.require}: every required backend must be in --backends {args.backends}")
    if args.tiny:  # before the kernels' modules are imported: the interpreters read these at import
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("FLASHSAC_PALLAS_INTERPRET", "1")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before JAX initialises: torch shares the GPU
    gpu = None if args.tiny else gpu_name()
    target = (str(VALIDATION_FILE) if args.record else args.record_to if args.record_to else
              None if args.no_record or bench or args.tiny else str(user_validation_path()))
    if (args.record or args.record_to) and args.tiny:
        p.error("--record/--record-to write GPU validation results: an interpreted --tiny run validates nothing on "
                "a GPU")
    if not args.tiny and gpu is None:
        p.error("no CUDA GPU here: run with --tiny on the CPU (the interpreters)")
    if target is not None:
        try:
            load_validation(target)  # a damaged file stops the run before any work, not after it
        except ValueError as exc:
            p.error(str(exc))
        folder = Path(target).absolute().parent
        while not folder.exists():
            folder = folder.parent
        if not os.access(folder, os.W_OK):
            p.error(f"cannot write the validation file {target} (permissions): --record-to PATH another file")
    mode = args.mode or ("in-process" if args.tiny or exclusive_gpu() else "processes")
    out = Path(args.out) if args.out else default_out()
    out.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        moved = _set_aside_previous(out)
        if moved is not None:
            print(f"a previous run's files in {out} moved to {moved} (--resume continues a run instead)")
    cases = [matrix.normalise(c) for c in matrix.cases(args.tiny)]
    plan = {"cases": cases, "determinism": matrix.determinism_case(args.tiny),
            "repeats": 3 if args.tiny else matrix.REPEATS, "tiny": bool(args.tiny)}
    plan_path = out / "plan.json"
    plan_path.write_text(json.dumps(plan, indent=1) + "\n")
    from kernel_validation.backends import versions
    from shared_spec.dispatch import write_json_atomic

    started = time.perf_counter()
    env = {"device": gpu or "cpu (interpreters)", "versions": versions(),
           "argv": [prog, *(sys.argv[1:] if argv is None else argv)],
           "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"), "mode": mode,
           "plan": matrix.plan_hash(plan), "wall_seconds": 0.0}
    problems: dict[str, str] = {}

    def write_results(records: dict[str, list[dict]] | None = None) -> dict:
        res = merge(plan, backends, records if records is not None else _read_all(out, backends), problems)
        env["wall_seconds"] = round(time.perf_counter() - started, 1)
        res["env"] = env
        write_json_atomic(out / "results.json", res)
        (out / "results.md").write_text(markdown(res, env))
        return res

    progress = _Progress(plan, print)
    print(f"validating {', '.join(backends)} on {env['device']}: {len(cases)} configurations, {mode}; results in {out}")
    deadline = None if args.budget is None else time.monotonic() + args.budget
    if mode == "processes":
        problems.update(_run_processes(out, plan_path, backends, gpu is not None, args.resume, write_results,
                                       progress, deadline))
    else:
        from kernel_validation.worker import records_path, run_backend

        def on_record(backend: str, record: dict) -> None:
            progress(backend, record)
            write_results()
            if deadline is not None and time.monotonic() > deadline:
                raise _BudgetSpent

        every = [*plan["cases"], plan["determinism"]]
        inputs = matrix.Inputs(every, every, keep=True)  # built once for all the backends
        try:
            for b in backends:
                run_backend(b, plan, records_path(out, b), gpu=gpu is not None, resume=args.resume,
                            on_record=on_record, inputs=inputs)
        except _BudgetSpent:
            print(f"--budget spent after {args.budget:.0f} s: stopped (the records are kept; --resume continues)")
        finally:
            inputs.close()
    res = write_results()
    diagnose(plan, res, gpu is not None)
    res["env"]["wall_seconds"] = round(time.perf_counter() - started, 1)
    write_json_atomic(out / "results.json", res)
    (out / "results.md").write_text(markdown(res, env))
    for r in res["rows"]:
        bad = [b for b, same in r["bitwise"].items() if not same] + ([] if r["spec_ok"] else ["float64-spec"])
        if bad:
            print(f"MISMATCH {','.join(bad)} differing {r['differing']} {matrix.case_key(r)}")
    for b, s in res["backends"].items():
        print(f"{b:14} validated={s['validated']!s:5} {s.get('result') or s.get('reason') or s.get('incomplete')}")
    if target is not None and gpu is not None:
        results = (out / "results.json").resolve()
        source = (str(results.relative_to(Path.cwd().resolve())) if results.is_relative_to(Path.cwd().resolve())
                  else str(results))
        record_validation(res, target, source, gpu, env["versions"], env["date"][:10])
        recorded = [b for b, s in res["backends"].items() if "result" in s]
        print(f"recorded {', '.join(recorded) or 'nothing (no backend ran every configuration)'} into {target}")
    elif target is None and not args.tiny:
        print("recorded nothing (" + ("--record or --record-to PATH records" if bench else "--no-record") + ")")
    missing = [b for b in require if not res["backends"][b].get("validated")]
    if res["mismatches"]:
        print(f"FAILED: {res['mismatches']} mismatches ({out / 'results.json'})")
    if missing:
        print(f"FAILED: required backends not validated: {missing}")
    if not res["complete"]:
        checked = ", ".join(f"{b} {n}/{res['configurations']}" for b, n in res["checked"].items())
        print(f"NOT COMPLETE: configurations checked: {checked}; continue with --resume --out {out}")
    anchor_failed = "reason" in res["backends"][ANCHOR]
    if anchor_failed:
        print(f"FAILED: the anchor {ANCHOR} could not run: {res['backends'][ANCHOR]['reason']}")
    return 1 if res["mismatches"] or missing or not res["complete"] or anchor_failed else 0
