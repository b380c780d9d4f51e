"""The eager op's own Python host time on a CPU-only machine: the path up to (and excluding) the kernel launch.

    TRITON_INTERPRET=1 python3 -m bench.host_overhead_cpu [--B 512] [--calls 2000] [--rounds 15]

The eager fast path is what runs on the GPU: `triton_kernels.launch` with INTERPRET off, a stand-in driver (device 0,
stream 0: C builtins, so they cost what Triton's C stream lookup costs) and a stand-in JIT function whose compiled
kernel's launcher is a C no-op (`"".format`). The inputs are CPU tensors (B, N = 101, E = 2, fp32), so torch.empty is
the CPU allocator's, not the CUDA caching allocator's (bench/gpu_checks.py's eager_host_time itemises the GPU host
time). Each round times every variant as a loop of `calls` calls (wall time / calls), rounds interleaved; the report
is the median over rounds. Works on any revision of the op (it patches only names that exist since the fast path).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace

NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
GAMMA = 0.99


def _stand_ins():
    """A JITFunction subclass whose first launch returns a compiled kernel with a C no-op launcher."""
    from triton.runtime.jit import JITFunction

    class Compiled:
        function, packed_metadata = 0, 0
        run = "".format  # accepts any positional arguments, does nothing: the launch itself is excluded

        def launch_metadata(self, grid, stream, *args):
            return None

    class Jit(JITFunction):
        def __init__(self):  # no JIT state
            self.compiled, self.pre_run_hooks, self.launches = Compiled(), [], 0

        def __getitem__(self, grid):
            def first_launch(*args, **kwargs):
                self.launches += 1
                return self.compiled
            return first_launch

    return Jit()


def measure(B: int = 512, calls: int = 2000, rounds: int = 15) -> dict:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the gate lets CPU tensors through to the kernel backend
    from torch_impl import dispatch, ops

    L = importlib.import_module("triton_kernels.launch")
    jit = _stand_ins()
    saved = L.INTERPRET, L.driver, ops.categorical_td_target_kernel
    L.INTERPRET = False  # the GPU's fast path
    L.driver = SimpleNamespace(active=SimpleNamespace(get_current_device=int, get_current_stream=abs))
    ops.categorical_td_target_kernel = jit
    dispatch.reset_dispatch()
    L._COMPILED.clear()
    try:
        return _timed(jit, B, calls, rounds)
    finally:  # the real kernel, driver and caches back (tests run this in their process)
        L.INTERPRET, L.driver, ops.categorical_td_target_kernel = saved
        dispatch.reset_dispatch()
        L._COMPILED.clear()


def _timed(jit, B: int, calls: int, rounds: int) -> dict:
    import torch

    import torch_impl
    from shared_spec import make_inputs
    from torch_impl import dispatch
    from torch_impl.reference import support_constants

    L = importlib.import_module("triton_kernels.launch")
    t = {k: torch.from_numpy(v) for k, v in make_inputs(B, 101, 2, seed=0).items()}
    args = tuple(t[k] for k in NAMES)
    mv, inv_delta = support_constants(101, -5.0, 5.0)
    op = torch_impl.categorical_td_target
    launch = L.launch
    q, lp, r, d, s = args
    real = dispatch.IMPLEMENTATIONS["triton"]
    noop = lambda *a: None  # one object: the op's eager plan for it is reused (a new lambda would be a new entry)

    def dispatch_only() -> object:  # as bench/gpu_checks.py's: the kernel's registry entry replaced by a no-op
        dispatch.IMPLEMENTATIONS["triton"] = noop
        try:
            return op(q, lp, r, d, s, gamma=GAMMA)
        finally:
            dispatch.IMPLEMENTATIONS["triton"] = real

    variants = {
        "op_auto": lambda: op(q, lp, r, d, s, gamma=GAMMA),
        "op_auto_no_grad": lambda: op(q, lp, r, d, s, gamma=GAMMA),  # timed under torch.no_grad(), as the agent
        "op_triton_strict": lambda: op(q, lp, r, d, s, gamma=GAMMA, backend="triton", strict=True),
        "bare_launch": lambda: launch(jit, q, lp, r, d, s, GAMMA, mv, inv_delta),
        "dispatch_only": dispatch_only,
        "torch_empty_output": lambda: torch.empty((B, 101), dtype=torch.float32, device=lp.device),
        "torch_empty_sizes_as_args": lambda: torch.empty(B, 101, dtype=torch.float32, device=lp.device),
        "empty_python_call": lambda: None,
    }
    no_grad = {"op_auto_no_grad"}
    for fn in variants.values():
        for _ in range(50):
            fn()
    assert jit.launches == 1, f"the fast path did not engage ({jit.launches} JIT launches)"
    per_round: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            with torch.no_grad() if name in no_grad else contextlib.nullcontext():
                t0 = time.perf_counter_ns()
                for _ in range(calls):
                    fn()
                per_round[name].append((time.perf_counter_ns() - t0) / calls / 1e3)
    res = {name: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v)}
           for name, v in per_round.items()}
    return {"B": B, "calls": calls, "rounds": rounds, "jit_launches": jit.launches, "us": res}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=512)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = measure(a.B, a.calls, a.rounds)
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        for name, v in res["us"].items():
            print(f"{name:<26} median {v['median_us']:6.2f} us  (min {v['min_us']:6.2f}, max {v['max_us']:6.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
