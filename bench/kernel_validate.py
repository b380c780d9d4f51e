"""Validation of every kernel backend: torch `triton`, JAX `triton` (jax-triton), JAX `pallas` (Pallas-Triton) and
JAX `mosaic` (Pallas on Mosaic GPU: Hopper and newer, with the JAX CUDA plugin's Mosaic GPU runtime) over the
adversarial input kinds and the size matrix (B from 1 to 1M, N from 2 to 1024, E from 1 to 16,
float32/bfloat16/float16 log-probs, gamma at and around the band threshold, strided rows read in place), each
through its public op with a strict backend. The torch Triton kernel's output is the anchor: every
other kernel must give its bits exactly (NaN rows by position), and the anchor's NaN rows and first 4096 rows must
match the float64 spec (SPEC.md). Each kernel also repeats one large case 20 times bit for bit. Any mismatch fails
the job (exit status 1, "MISMATCH" lines); a backend that cannot run here is reported as not validated with its
reason (exit status 1 only if named in --require).

GPU (the H200 run; jax-triton from its wheel, jax_triton-0.3.1-py3-none-any.whl, installed first):

    pip install --no-deps jax_triton-0.3.1-py3-none-any.whl
    python -m bench kernel-validate --out bench/results/<gpu>-<date>-kernel-validation --record

--record writes each backend's result (passed or not, GPU, date, versions, this run's results.json) into
bench/results/kernel-validation/validated.json (or --record-to PATH), which `backend="auto"` reads: a kernel is
chosen by auto only once it has a passing entry. --record needs a GPU. On the CPU, `--tiny` runs a few small cases
with the interpreters (TRITON_INTERPRET=1, FLASHSAC_PALLAS_INTERPRET=1) in seconds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from typing import Any

import numpy as np

__all__ = ["BACKENDS", "cases", "gpu_name", "main", "record_validation", "run", "versions"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANCHOR = "torch/triton"
BACKENDS = ("torch/triton", "jax/triton", "jax/pallas", "jax/mosaic")
GAMMA = 0.99
NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
SPEC_ROWS = 4096
REPEATS = 20


def cases(tiny: bool) -> list[dict]:
    """The case matrix: dicts with B, kind and optionally N, E, gamma, dtype, strided (defaults N 101, E 2, gamma
    0.99, float32, contiguous)."""
    if tiny:
        return [dict(B=19, kind="nonfinite"), dict(B=4, N=2, E=16, gamma=0.0625 - 1e-6, kind="mixed"),
                dict(B=5, N=33, E=3, dtype="bfloat16", strided=True, kind="nonfinite")]
    from shared_spec import KINDS

    out = [dict(B=B, kind=k) for B in (1, 127, 512, 2048) for k in KINDS]
    out += [dict(B=65536, kind=k) for k in ("random", "peaked", "mixed", "nonfinite")]
    out += [dict(B=1_048_576, kind=k) for k in ("random", "peaked")]
    out += [dict(B=65536 + 37, kind="nonfinite"), dict(B=262_144 + 5, kind="mixed")]  # a partial last program
    out += [dict(B=2048, N=n, kind=k) for n in (2, 51, 256, 1024) for k in ("mixed", "nonfinite")]
    out += [dict(B=65536, N=1024, kind="mixed")]
    out += [dict(B=2048, E=e, kind=k) for e in (1, 5, 16) for k in ("mixed", "nonfinite")]
    out += [dict(B=2048, gamma=g, kind="mixed") for g in (0.0, 0.0625 - 1e-6, 0.0625, 0.0625 + 1e-6, 0.5, 1.0)]
    out += [dict(B=2048, dtype=dt, kind=k) for dt in ("bfloat16", "float16") for k in ("mixed", "nonfinite")]
    out += [dict(B=2048, strided=True, kind=k) for k in ("mixed", "nonfinite")]
    out += [dict(B=65536, strided=True, kind="random"), dict(B=100_003, strided=True, kind="nonfinite")]
    out += [dict(B=B, strided=True, kind="mixed") for B in (1, 127, 512)]
    out += [dict(B=512, strided=True, N=n, kind="nonfinite") for n in (2, 51, 1024)]
    out += [dict(B=512, strided=True, E=e, kind="mixed") for e in (1, 5, 16)]
    out += [dict(B=512, strided=True, dtype=dt, kind="mixed") for dt in ("bfloat16", "float16")]
    return out


def _bits(a: np.ndarray) -> np.ndarray:
    """The output's bits with every NaN as one pattern (NaN rows are compared by position)."""
    return np.where(np.isnan(a), np.int32(-1), a.view(np.int32))


class _Runner:
    """Runs one backend's public op on numpy inputs (torch tensors or JAX arrays on the default device)."""

    def __init__(self, backend: str, gpu: bool):
        self.framework, self.name = backend.split("/")
        self.gpu = gpu
        if self.framework == "torch":
            import torch

            import torch_impl

            self.torch, self.op = torch, torch_impl.categorical_td_target
        else:
            import jax
            import jax.numpy as jnp

            import jax_impl

            self.jax, self.jnp, self.op = jax, jnp, jax_impl.categorical_td_target

    def __call__(self, x: dict[str, np.ndarray], gamma: float, dtype: str, strided: bool) -> np.ndarray:
        B = x["reward"].shape[0]
        if self.framework == "torch":
            torch = self.torch
            dev = "cuda" if self.gpu else "cpu"
            if strided:  # upstream's x.chunk(2, dim=1)[1]: views into (E, 2B[, N]) buffers with a decoy first half
                t = {}
                for k, v in x.items():
                    axis = 1 if v.ndim >= 2 else 0
                    full = np.ascontiguousarray(np.concatenate([np.flip(v, axis), v], axis=axis))
                    t[k] = torch.from_numpy(full).to(dev).chunk(2, dim=axis)[1]
            else:
                t = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in x.items()}
            t["next_log_probs"] = t["next_log_probs"].to(getattr(torch, dtype))
            out = self.op(**t, gamma=gamma, backend=self.name, strict=True)
            return out.cpu().numpy()
        jnp = self.jnp
        j, rows = {k: jnp.asarray(v) for k, v in x.items()}, {}
        if strided:  # the whole (E, 2B[, N]) arrays, their second half read in place
            for k in ("next_qs", "next_log_probs"):
                j[k] = jnp.asarray(np.ascontiguousarray(np.concatenate([np.flip(x[k], 1), x[k]], axis=1)))
            rows = {"row_offset": B}
        j["next_log_probs"] = j["next_log_probs"].astype(getattr(jnp, dtype))
        return np.asarray(self.jax.device_get(self.op(**j, gamma=gamma, backend=self.name, strict=True, **rows)))


def _spec_check(x: dict, got: np.ndarray, gamma: float, dtype: str) -> tuple[bool, float]:
    """(NaN rows as the float64 spec's, max abs error of the first SPEC_ROWS rows vs the spec) on the inputs the
    kernels saw (log-probs rounded to their dtype)."""
    import ml_dtypes

    from shared_spec import reference as R

    m = min(x["reward"].shape[0], SPEC_ROWS)
    xs = {k: (v[:, :m] if k in ("next_qs", "next_log_probs") else v[:m]) for k, v in x.items()}
    if dtype != "float32":
        xs["next_log_probs"] = xs["next_log_probs"].astype(getattr(ml_dtypes, dtype) if dtype == "bfloat16"
                                                          else np.float16).astype(np.float32)
    ref = R.categorical_td_target(**xs, gamma=gamma)
    nan_ok = bool(np.array_equal(np.isnan(ref), np.isnan(got[:m])))
    ok = ~np.isnan(ref)
    err = float(np.abs(got[:m][ok] - ref[ok]).max()) if ok.any() else 0.0
    return nan_ok, err


def run(backends: tuple[str, ...], tiny: bool, gpu: bool, log=print) -> dict[str, Any]:
    """Every case through every backend; returns {"rows", "backends": {backend: summary}, "mismatches"}."""
    from shared_spec import make_inputs
    from shared_spec.tolerances import atol_vs_float64

    runners, unavailable = {}, {}
    for b in (ANCHOR, *[b for b in backends if b != ANCHOR]):
        try:
            runners[b] = _Runner(b, gpu)
        except Exception as exc:  # the framework itself does not import
            unavailable[b] = f"{type(exc).__name__}: {exc}"
    rows, mismatches = [], 0
    for case in cases(tiny):
        B, N, E = case["B"], case.get("N", 101), case.get("E", 2)
        gamma, dtype, kind = case.get("gamma", GAMMA), case.get("dtype", "float32"), case["kind"]
        strided = bool(case.get("strided"))
        x = make_inputs(B, N, E, seed=7, kind=kind)
        t0 = time.time()
        outs: dict[str, np.ndarray] = {}
        for b, runner in runners.items():
            if b in unavailable:
                continue
            try:
                outs[b] = runner(x, gamma, dtype, strided)
            except Exception as exc:  # BackendUnavailable (strict), or the kernel's own failure
                if b == ANCHOR:
                    raise
                unavailable[b] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"
                log(f"NOT VALIDATED {b}: {unavailable[b]}")
        anchor = outs[ANCHOR]
        nan_ok, err = _spec_check(x, anchor, gamma, dtype)
        row = dict(case, N=N, E=E, gamma=gamma, dtype=dtype, strided=strided, nan_rows_match_spec=nan_ok,
                   max_err_vs_float64=err, spec_ok=nan_ok and err <= atol_vs_float64(N), bitwise={}, differing={})
        for b, out in outs.items():
            if b == ANCHOR:
                continue
            same = out.shape == anchor.shape and bool(np.array_equal(_bits(out), _bits(anchor)))
            row["bitwise"][b] = same
            row["differing"][b] = 0 if same else int((_bits(out) != _bits(anchor)).sum()) if (
                out.shape == anchor.shape) else -1
        row["seconds"] = round(time.time() - t0, 2)
        bad = [b for b, same in row["bitwise"].items() if not same]
        mismatches += len(bad) + (not row["spec_ok"])
        rows.append(row)
        status = "ok" if not bad and row["spec_ok"] else "MISMATCH " + ",".join(bad + ([] if row["spec_ok"] else
                                                                                       ["float64-spec"]))
        log(f"{status:10} err64 {err:.2e} {row['seconds']:6.2f}s {json.dumps(case)}")
    # Determinism: the largest case of the matrix, REPEATS times through each backend.
    big = dict(B=19 if tiny else 65536, kind="mixed")  # tiny: the first case's shapes (compiled already)
    x = make_inputs(big["B"], 101, 2, seed=11, kind="mixed")
    determinism = {}
    for b, runner in runners.items():
        if b in unavailable:
            continue
        first = _bits(runner(x, GAMMA, "float32", False))
        determinism[b] = all(np.array_equal(first, _bits(runner(x, GAMMA, "float32", False)))
                             for _ in range(3 if tiny else REPEATS))
        mismatches += not determinism[b]
    summary = {}
    for b in backends:
        if b in unavailable:
            summary[b] = {"validated": False, "reason": unavailable[b]}
            continue
        compared = [r for r in rows if b in r["bitwise"]] if b != ANCHOR else rows
        equal = sum(r["bitwise"][b] for r in compared) if b != ANCHOR else sum(r["spec_ok"] for r in rows)
        passed = equal == len(compared) == len(rows) and determinism.get(b, False)
        what = (f"{equal}/{len(rows)} configurations bitwise equal to {ANCHOR}" if b != ANCHOR else
                f"{equal}/{len(rows)} configurations within the float64 spec's bound, NaN rows as the spec")
        summary[b] = {"validated": passed, "result": f"{what}, {REPEATS if not tiny else 3} repeats identical: "
                                                    f"{determinism.get(b)}"}
    return {"rows": rows, "backends": summary, "determinism": determinism, "mismatches": int(mismatches),
            "configurations": len(rows)}


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("torch", "triton", "jax", "jaxlib", "jax-triton"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def gpu_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        return None


def record_validation(res: dict, path: str, source: str, gpu: str, versions: dict, date: str) -> dict:
    """Write each validated-or-failed backend of `res` into the validation file at `path` (others kept); returns
    the file's content. Backends that could not run here are left as they were."""
    from shared_spec.dispatch import VALIDATION_FORMAT, load_validation

    entries = load_validation(path) if os.path.exists(path) else {}
    for b, s in res["backends"].items():
        if "result" not in s:
            continue
        entries[b] = {"gpu": gpu, "date": date, "versions": versions, "result": s["result"],
                      "passed": bool(s["validated"]), "source": source}
    data = {"format": VALIDATION_FORMAT,
            "about": "GPU validation results of the kernel backends; backend='auto' chooses only kernels listed here "
                     "with passed=true (shared_spec/dispatch.py). Written by `python -m bench kernel-validate --out "
                     "DIR --record` on a GPU.",
            "backends": dict(sorted(entries.items()))}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    return data


def _markdown(res: dict, env: dict) -> str:
    lines = [f"# Kernel validation ({env['device']}, {env['date']})", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()), "",
             f"{res['configurations']} configurations; anchor {ANCHOR}; mismatches: {res['mismatches']}.", "",
             "| backend | validated | result or reason |", "|---|---|---|"]
    for b, s in res["backends"].items():
        lines.append(f"| {b} | {s['validated']} | {s.get('result', s.get('reason', ''))} |")
    bad = [r for r in res["rows"] if not r["spec_ok"] or not all(r["bitwise"].values())]
    if bad:
        lines += ["", "Mismatching configurations:", ""] + [f"- {json.dumps(r)}" for r in bad]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench kernel-validate", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for results.json and results.md")
    p.add_argument("--tiny", action="store_true", help="a few small cases on the CPU with the interpreters")
    p.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated subset of {BACKENDS}")
    p.add_argument("--require", default="", help="backends that must run here (else exit status 1)")
    p.add_argument("--record", action="store_true", help="write the results into the validation file (GPU only)")
    p.add_argument("--record-to", default=None, help="the validation file --record writes (default: the committed "
                                                     "bench/results/kernel-validation/validated.json)")
    args = p.parse_args(argv)
    backends = tuple(b for b in args.backends.split(",") if b)
    require = tuple(b for b in args.require.split(",") if b)
    bad = [b for b in (*backends, *require) if b not in BACKENDS]
    if bad or not backends:
        p.error(f"--backends/--require must name backends of {BACKENDS}, got {bad or args.backends!r}")
    if args.tiny:  # before the kernels' modules are imported: the interpreters read these at import
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("FLASHSAC_PALLAS_INTERPRET", "1")
    gpu = gpu_name()
    if args.record and (args.tiny or gpu is None):
        p.error("--record writes GPU validation results: it needs a CUDA GPU and no --tiny (an interpreted run "
                "validates nothing on a GPU)")
    if not args.tiny and gpu is None:
        p.error("no CUDA GPU here: run with --tiny on the CPU")
    os.makedirs(args.out, exist_ok=True)
    env = {"device": gpu or "cpu (interpreters)", "versions": versions(), "argv": sys.argv,
           "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")}
    res = run(backends, args.tiny, gpu is not None)
    res["env"] = env
    path = os.path.join(args.out, "results.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1, default=str)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(_markdown(res, env))
    if args.record:
        from shared_spec.dispatch import VALIDATION_FILE

        target = args.record_to or str(VALIDATION_FILE)
        record_validation(res, target, os.path.relpath(os.path.abspath(path), REPO), gpu, env["versions"],
                          env["date"][:10])
        print(f"recorded into {target}")
    missing = [b for b in require if not res["backends"][b].get("validated")]
    for b, s in res["backends"].items():
        print(f"{b:14} validated={s['validated']!s:5} {s.get('result', s.get('reason', ''))}")
    if res["mismatches"]:
        print(f"FAILED: {res['mismatches']} mismatches (results.json)")
    if missing:
        print(f"FAILED: required backends not validated: {missing}")
    return 1 if res["mismatches"] or missing else 0


if __name__ == "__main__":
    sys.exit(main())
