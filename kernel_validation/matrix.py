"""The validation matrix, its inputs and its checks (numpy and shared_spec only: every worker imports this).

A case is a dict {"B", "N", "E", "gamma", "dtype", "strided", "kind"}. Its inputs are rows of a *master*: one
`make_inputs(B_max, N, E, seed, kind)` per (kind, N, E, seed) of the plan, at the largest B any case of the plan reads
from it, built once per process and sliced (the first B rows) for every case that uses it; so every process that runs
a plan sees the same inputs, however many cases it skips.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
from typing import Any

import numpy as np

__all__ = ["ANCHOR", "BACKENDS", "GAMMA", "REPEATS", "SEED", "SPEC_ROWS", "Inputs", "cases", "case_key",
           "determinism_case", "digest", "normalise", "plan_hash", "spec_check"]

ANCHOR = "torch/triton"
BACKENDS = ("torch/triton", "jax/triton", "jax/pallas", "jax/mosaic")
GAMMA = 0.99
SEED = 7  # the matrix's inputs
DETERMINISM_SEED = 11  # the repeated case's inputs
SPEC_ROWS = 4096  # rows checked against the float64 spec at each end of a case (the first and the last)
REPEATS = 20
ROW_ARGS = ("reward", "terminated", "next_alpha_log_pi")


def cases(tiny: bool) -> list[dict]:
    """The case matrix (see `normalise` for the keys and their defaults).

    The full matrix: every input kind (bin edges, clamps, terminated rows, ties, large shifts, NaN/inf rows) at
    B = 1, 127 (odd: a partial program), 512 and 2048; large B (65,536 and 1,048,576, several tiles per program) and
    partial last programs there (65,573, 262,149); N = 2 ... 1024; E = 1, 5, 16; gamma at 0, around the 1/16 band
    threshold, 0.5 and 1; bf16 and fp16 log-probs; strided rows (views into (E, 2B[, N]) buffers, read in place) at
    every size and shape above. `tiny`: three small cases for the CPU interpreters.
    """
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


def normalise(case: dict) -> dict:
    """The case with every key: B, N (101), E (2), gamma (GAMMA), dtype ("float32"), strided (False), kind, seed
    (SEED)."""
    return {"B": int(case["B"]), "N": int(case.get("N", 101)), "E": int(case.get("E", 2)),
            "gamma": float(case.get("gamma", GAMMA)), "dtype": str(case.get("dtype", "float32")),
            "strided": bool(case.get("strided", False)), "kind": str(case["kind"]), "seed": int(case.get("seed", SEED))}


def case_key(case: dict) -> str:
    """A case's identity in the records (its normalised dict as sorted JSON)."""
    return json.dumps(normalise(case), sort_keys=True)


def determinism_case(tiny: bool) -> dict:
    """The case each backend repeats (REPEATS times, 3 when tiny) bit for bit: the largest mixed case of the
    matrix's shapes (tiny: the first tiny case's shape, already compiled)."""
    return normalise(dict(B=19 if tiny else 65536, kind="mixed", seed=DETERMINISM_SEED))


def plan_hash(plan: dict) -> str:
    """A short hash of a plan's cases and determinism case: records of another plan read other inputs."""
    text = json.dumps([plan["cases"], plan["determinism"]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _master_key(case: dict) -> tuple[str, int, int, int]:
    return case["kind"], case["N"], case["E"], case["seed"]


class Inputs:
    """Each case's numpy inputs, sliced from its master (built once, in a background thread ahead of use, and
    released after its last use).

    Args:
        plan_cases: every case of the plan (normalised): the masters' sizes come from all of them.
        order: the cases this process will ask for, in order (the plan's minus those already recorded): what to build
            ahead and when to release.
        prefetch: build the next masters in a background thread (numpy releases the GIL in the large operations).
        keep: never release a master (one Inputs serves several backends in turn, each asking for every case).
    """

    def __init__(self, plan_cases: list[dict], order: list[dict] | None = None, prefetch: bool = True,
                 keep: bool = False) -> None:
        self.rows: dict[tuple, int] = {}
        for case in plan_cases:
            key = _master_key(case)
            self.rows[key] = max(self.rows.get(key, 0), case["B"])
        order = plan_cases if order is None else order
        self.queue: list[tuple] = list(dict.fromkeys(_master_key(c) for c in order))  # first-use order
        self.last: dict[tuple, int] = {_master_key(c): i for i, c in enumerate(order)}
        self.calls = 0
        self.keep = keep
        self.futures: dict[tuple, concurrent.futures.Future] = {}
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="inputs") if prefetch else None
        self._ahead()  # the first masters start now (while the caller imports its framework)

    def _build(self, key: tuple) -> dict[str, np.ndarray]:
        from shared_spec import make_inputs

        kind, N, E, seed = key
        return make_inputs(self.rows[key], N, E, seed=seed, kind=kind)

    def _submit(self, key: tuple) -> concurrent.futures.Future:
        if key not in self.futures:
            if self.pool is not None:
                self.futures[key] = self.pool.submit(self._build, key)
            else:
                done: concurrent.futures.Future = concurrent.futures.Future()
                done.set_result(self._build(key))
                self.futures[key] = done
        return self.futures[key]

    def get(self, case: dict) -> dict[str, np.ndarray]:
        """The five arrays of `case` (normalised): its master's first B rows, contiguous."""
        key = _master_key(case)
        if key not in self.rows:
            raise KeyError(f"case {case_key(case)} is not in this plan")
        master = self._submit(key).result()
        B = case["B"]
        if B == self.rows[key]:
            x = dict(master)
        else:
            x = {k: np.ascontiguousarray(v[:B] if k in ROW_ARGS else v[:, :B]) for k, v in master.items()}
        if self.last.get(key) == self.calls and not self.keep:
            self.futures.pop(key, None)  # its last use: release it
        self.calls += 1
        self._ahead()
        return x

    def _ahead(self) -> None:
        """Start building the next masters of the order (two at most pending) while the current case runs."""
        if self.pool is None:
            return
        ahead = [k for k in self.queue if self.last[k] >= self.calls and k not in self.futures]
        for k in ahead[:max(0, 2 - sum(not f.done() for f in self.futures.values()))]:
            self._submit(k)

    def close(self) -> None:
        self.futures.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


def canonical_bits(out: np.ndarray) -> np.ndarray:
    """The output's bits with every NaN as one pattern (NaN rows are compared by position)."""
    out = np.asarray(out, dtype=np.float32)
    return np.where(np.isnan(out), np.int32(-1), out.view(np.int32))


def digest(out: np.ndarray) -> str:
    """SHA-256 of the output's shape and canonical bits: equal digests are equal outputs, bit for bit."""
    bits = np.ascontiguousarray(canonical_bits(out))
    h = hashlib.sha256(repr(tuple(bits.shape)).encode())
    h.update(bits.tobytes())
    return h.hexdigest()


def spec_check(x: dict[str, np.ndarray], got: np.ndarray, gamma: float, dtype: str) -> dict[str, Any]:
    """The output against the float64 spec (SPEC.md) on the inputs the kernels saw (log-probs rounded to their
    dtype), over its first and last SPEC_ROWS rows at once (every row when B <= 2 SPEC_ROWS).

    Returns:
        {"nan_rows_match_spec": NaN rows exactly the spec's, "max_err_vs_float64": the largest absolute error of the
         other values, "spec_rows": rows checked, "spec_ok": both within atol_vs_float64(N)}.
    """
    import ml_dtypes

    from shared_spec import reference as R
    from shared_spec.tolerances import atol_vs_float64

    B, N = got.shape
    rows = np.arange(B) if B <= 2 * SPEC_ROWS else np.r_[0:SPEC_ROWS, B - SPEC_ROWS:B]
    xs = {k: (v[rows] if k in ROW_ARGS else v[:, rows]) for k, v in x.items()}
    if dtype != "float32":
        lp_type = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
        xs["next_log_probs"] = xs["next_log_probs"].astype(lp_type).astype(np.float32)
    ref = R.categorical_td_target(**xs, gamma=gamma)
    out = got[rows]
    nan_ok = bool(np.array_equal(np.isnan(ref), np.isnan(out)))
    ok = ~np.isnan(ref)
    err = float(np.abs(out[ok] - ref[ok]).max()) if ok.any() else 0.0
    return {"nan_rows_match_spec": nan_ok, "max_err_vs_float64": err, "spec_rows": int(rows.size),
            "spec_ok": nan_ok and err <= atol_vs_float64(N)}
