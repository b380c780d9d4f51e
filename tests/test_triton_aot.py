"""The Triton kernel compiles for the H200 (sm_90) on this CPU machine: no spills (docs/kernel_notes.md)."""

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("args", [["--N", "2", "101", "1024", "4096"], ["--N", "101", "--E", "3", "--dtype", "bf16"],
                                  ["--N", "51", "--dtype", "fp16"],
                                  ["--N", "101", "1024", "--rpp", "1", "2", "16"]])  # tiles per program (SPEC.md 8)
def test_compiles_for_sm90_without_spills(args):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the JIT, not the interpreter
    out = subprocess.run([sys.executable, "-m", "triton_kernels.aot", "--arch", "90", *args], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    reports = [json.loads(line) for line in out.stdout.splitlines()]
    assert reports
    for r in reports:
        assert r["cubin_bytes"] > 0
        assert r["spill_bytes"] == 0, r
        assert r["registers"] <= 128, r  # keeps occupancy: the pinned config runs many resident warps per SM
        # One barrier: the block barrier around the probabilities staged in the output row (SPEC.md 8).
        assert r["barriers"] <= 1, r
    if "--rpp" in args:
        assert [r["RPP"] for r in reports] == [1, 2, 16] * 2
        # At most 64 registers at N = 101 with the tile loop too: an SM still holds 32 one-warp programs.
        assert all(r["registers"] <= 64 for r in reports if r["N"] == 101), reports


def test_baseline_rpp_kernel_with_one_tile_is_the_one_tile_kernel():
    """The tile-loop baseline kernel file (bench/baselines/categorical_td_target_rpp.py, main's kernel before the
    instruction cut) compiles with RPP = 1 to the SASS of the kernel before the tile loop
    (bench/baselines/categorical_td_target_v2.py), instruction for instruction (sm_90a), for one-warp and multi-warp
    rows: the baselines are the kernels they say they are. (The package kernel's own code is the instruction cut's;
    tests/test_kernel_bitwise.py checks its bits against both files.)"""
    code = (
        "import importlib.util, sys\n"
        "from triton_kernels.aot import compile_kernel, sass_text\n"
        "def load(name):\n"
        "    spec = importlib.util.spec_from_file_location(name, f'bench/baselines/categorical_td_target_{name}.py')\n"
        "    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "    return mod.categorical_td_target_kernel\n"
        "v2, rpp = load('v2'), load('rpp')\n"
        "for n, e, dt in ((101, 2, 'fp32'), (256, 3, 'bf16')):\n"
        "    a = sass_text(compile_kernel(n, e, lp_dtype=dt, RPP=1, kernel=rpp)[0])\n"
        "    b = sass_text(compile_kernel(n, e, lp_dtype=dt, kernel=v2)[0])\n"
        "    print(n, len(a.splitlines()), a == b)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split() for line in out.stdout.splitlines()]
    assert len(rows) == 2 and all(int(r[1]) > 100 and r[2] == "True" for r in rows), out.stdout
