"""One backend over a validation plan: each case's output digest (and, for the anchor, its float64 spec check)
appended to the backend's records file as soon as it is known, then the repeat-determinism check.

Run in the validation command's process (`--in-process`, and --tiny) or as its own process, one per backend, all
at once on one GPU: ``python -m kernel_validation.worker --backend jax/pallas --plan DIR/plan.json --records
DIR/records/jax-pallas.jsonl [--gpu] [--resume]``. The records file is JSON lines: a {"header": env} line at each
start, then one line per case ({"case": key, "digest", "shape", "nan_rows", "seconds"[, spec check]} or {"case": key,
"unavailable": why}) and {"determinism": bool, "repeats", "digest"}; a line is flushed as soon as it is written, so
a stopped worker keeps every case it finished. With --resume, a records file whose headers match this process's env
(device, versions, interpreters, plan and kernel code) is continued: its cases are not run again; one that does not
match is renamed *.stale-<n>.jsonl and a new one begun.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# Before JAX initialises (it preallocates most of the GPU otherwise): the other backends' processes share the GPU.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from kernel_validation.matrix import ANCHOR, Inputs, case_key, digest, plan_hash, spec_check  # noqa: E402

__all__ = ["code_hash", "main", "read_records", "records_path", "run_backend"]

CODE_PACKAGES = ("shared_spec", "triton_kernels", "torch_impl", "jax_impl")  # whose source decides the kernels' bits


def records_path(out: str | os.PathLike, backend: str) -> Path:
    """DIR/records/<framework>-<backend>.jsonl."""
    return Path(out) / "records" / (backend.replace("/", "-") + ".jsonl")


def code_hash() -> str:
    """A short hash of the kernels' source (the .py files of CODE_PACKAGES): records of other code are stale."""
    h = hashlib.sha256()
    for package in CODE_PACKAGES:
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(root).rglob("*.py")):
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


def read_records(path: str | os.PathLike) -> tuple[list[dict], list[dict]]:
    """(headers, records) of a records file; a missing file is ([], []). A last line cut short by a stopped writer
    is ignored; any other unreadable line raises ValueError naming the file and the line."""
    path = Path(path)
    if not path.exists():
        return [], []
    lines = path.read_text().split("\n")
    headers, records = [], []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            if i >= len(lines) - 2:  # the last line, half written
                break
            raise ValueError(f"{path}, line {i + 1}: not a JSON record ({exc}); move the file away and run again "
                             f"without --resume") from exc
        (headers if "header" in item else records).append(item.get("header", item))
    return headers, records


def _env(backend: str, device: str, plan: dict) -> dict[str, Any]:
    from kernel_validation.backends import versions

    return {"backend": backend, "device": device, "versions": versions(), "plan": plan_hash(plan),
            "code": code_hash(), "interpret": {k: os.environ.get(k, "0") for k in
                                               ("TRITON_INTERPRET", "FLASHSAC_PALLAS_INTERPRET")}}


def _set_aside(path: Path) -> Path:
    """Rename `path` to the first free <name>.stale-<n>.jsonl beside it (kept, never read again)."""
    n = 1
    while path.with_suffix(f".stale-{n}.jsonl").exists():
        n += 1
    path.rename(path.with_suffix(f".stale-{n}.jsonl"))
    return path.with_suffix(f".stale-{n}.jsonl")


def _resume(path: Path, env: dict, log: Callable[[str], None]) -> tuple[set[str], bool]:
    """The case keys already recorded in `path` by a process of the same `env`, and whether its determinism check
    is; a file of another env is set aside (`_set_aside`)."""
    headers, records = read_records(path)
    if not headers:
        return set(), False
    if all(h == env for h in headers):
        text = path.read_bytes()
        if text and not text.endswith(b"\n"):  # a line cut short by a stopped worker: dropped, then appended to
            path.write_bytes(text[:text.rfind(b"\n") + 1])
        return ({r["case"] for r in records if "digest" in r},
                any("determinism" in r for r in records))
    changed = sorted(k for k in env if any(h.get(k) != env[k] for h in headers))
    stale = _set_aside(path)
    log(f"{env['backend']}: the recorded cases were run with another {', '.join(changed)}: kept as {stale}, "
        f"running every case again")
    return set(), False


def run_backend(backend: str, plan: dict, path: str | os.PathLike, *, gpu: bool, resume: bool,
                log: Callable[[str], None] = print, on_record: Callable[[str, dict], None] | None = None,
                inputs: Inputs | None = None) -> None:
    """Run `backend` over `plan` ({"cases", "determinism", "repeats"}), appending its records to `path`.

    A backend that cannot run a case (it does not import, its gate refuses, its kernel raises) gets one
    {"case", "unavailable"} record and stops there. `on_record(backend, record)` is called after each record is
    written (the command's progress in --in-process mode). `inputs`: the plan's inputs, shared by the backends run
    one after another in one process (else built here).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_header = True

    def write(item: dict) -> None:
        nonlocal write_header
        with open(path, "a") as f:
            if write_header:
                f.write(json.dumps({"header": env}) + "\n")
                write_header = False
            f.write(json.dumps(item) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if on_record is not None and "header" not in item:
            on_record(backend, item)

    def order(done: set[str], determinism_done: bool) -> list[dict]:
        return [c for c in plan["cases"] if case_key(c) not in done] + (
            [] if determinism_done else [plan["determinism"]])

    # The inputs start building now, while the framework imports: for the cases the records file lacks (whose env
    # is checked once the framework tells the device).
    _, recorded = read_records(path) if resume else ([], [])
    guess = order({r["case"] for r in recorded if "digest" in r}, any("determinism" in r for r in recorded))
    shared = inputs is not None
    inputs = inputs if shared else Inputs([*plan["cases"], plan["determinism"]], guess)
    try:
        from kernel_validation.backends import Runner

        runner = Runner(backend, gpu)
        device = runner.device()
    except Exception as exc:  # the framework itself does not import
        if not shared:
            inputs.close()
        env = _env(backend, "unknown", plan)
        if not resume and path.exists():
            _set_aside(path)
        write({"case": None, "unavailable": f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"})
        return
    env = _env(backend, device, plan)
    done, determinism_done = _resume(path, env, log) if resume else (set(), False)
    if not resume and path.exists():  # not continued: kept beside, not read
        _set_aside(path)
    if not shared and order(done, determinism_done) != guess:  # the records were another env's: every case runs
        inputs.close()
        inputs = Inputs([*plan["cases"], plan["determinism"]], order(done, determinism_done))
    todo = [c for c in plan["cases"] if case_key(c) not in done]
    try:
        for case in todo:
            x = inputs.get(case)
            t0 = time.perf_counter()
            try:
                out = runner(x, case["gamma"], case["dtype"], case["strided"])
            except Exception as exc:  # BackendUnavailable (strict), or the kernel's own failure
                why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"
                log(f"NOT VALIDATED {backend}: {why}")
                write({"case": case_key(case), "unavailable": why})
                return
            record = {"case": case_key(case), "digest": digest(out), "shape": list(out.shape),
                      "nan_rows": int(np.isnan(out).all(axis=1).sum()),
                      "seconds": round(time.perf_counter() - t0, 3)}
            if backend == ANCHOR:
                record.update(spec_check(x, out, case["gamma"], case["dtype"]))
            write(record)
        if not determinism_done:
            case = plan["determinism"]
            x = inputs.get(case)
            digests = [digest(runner(x, case["gamma"], case["dtype"], case["strided"]))
                       for _ in range(plan["repeats"] + 1)]
            write({"determinism": len(set(digests)) == 1, "repeats": plan["repeats"], "digest": digests[0],
                   "case": case_key(case)})
    finally:
        if not shared:
            inputs.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernel_validation.worker", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", required=True)
    p.add_argument("--plan", required=True, help="the plan.json the validation command wrote")
    p.add_argument("--records", required=True, help="this backend's records file (JSON lines)")
    p.add_argument("--gpu", action="store_true", help="run on the GPU (else the CPU interpreters)")
    p.add_argument("--resume", action="store_true")
    args = p.parse_args(argv)
    plan = json.loads(Path(args.plan).read_text())
    run_backend(args.backend, plan, args.records, gpu=args.gpu, resume=args.resume,
                log=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
