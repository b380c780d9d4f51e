"""triton_kernels.launch's eager fast path, on CPU: a stand-in JIT function and driver record what would be launched.

On the GPU the fast path is checked bitwise against JITFunction.run on a GPU."""

import importlib
import inspect
from types import SimpleNamespace

import pytest
import torch
from triton.runtime.jit import JITFunction

from shared_spec import make_inputs
from triton_kernels import categorical_td_target_kernel

L = importlib.import_module("triton_kernels.launch")  # the module (the package exports its `launch` function)

NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")


class _Compiled:
    function, packed_metadata = "function", "packed"

    def __init__(self):
        self.calls = []

    def run(self, *args):
        self.calls.append(args)

    def launch_metadata(self, grid, stream, *args):
        return ("metadata", grid, stream)


class _Jit(JITFunction):
    def __init__(self):  # no JIT state: it only records launches through JITFunction's grid indexing
        self.launches, self.compiled = [], _Compiled()

    def __getitem__(self, grid):
        def go(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
            return self.compiled
        return go


@pytest.fixture
def gpu_like(monkeypatch):
    monkeypatch.setattr(L, "INTERPRET", False)
    monkeypatch.setattr(L, "driver", SimpleNamespace(active=SimpleNamespace(get_current_device=lambda: 0,
                                                                            get_current_stream=lambda d: 77)))
    L._COMPILED.clear()
    yield
    L._COMPILED.clear()


def _inputs(B, N=101, E=2):
    return [torch.from_numpy(v) for v in (make_inputs(B, N, E, seed=1)[k] for k in NAMES)]


def test_repeat_signature_calls_the_compiled_launcher_with_every_parameter(gpu_like):
    jit, args = _Jit(), _inputs(8)
    L.launch(jit, *args, 0.99, -5.0, 10.0)
    L.launch(jit, *args, 0.99, -5.0, 10.0)
    assert len(jit.launches) == 1 and len(jit.compiled.calls) == 1
    grid, positional, constexprs = jit.launches[0]
    call = jit.compiled.calls[0]
    assert call[:9] == (grid[0], 1, 1, 77, "function", "packed", None, None, None)  # no profiler hooks attached
    bound = call[9:]
    params = list(inspect.signature(categorical_td_target_kernel.fn).parameters)
    assert params[-6:] == ["E", "N", "BLOCK_N", "BR", "RPP", "Q"]
    assert len(bound) == len(params) and params[-6:] == list(constexprs)[:6]
    assert bound[-6:] == tuple(constexprs[k] for k in params[-6:])
    same = [a is b if isinstance(a, torch.Tensor) else a == b for a, b in zip(bound[:-6], positional, strict=True)]
    assert all(same[:13]) and all(same[15:])  # the output tensor (13) is a new allocation each call
    assert bound[14] == positional[14]


@pytest.mark.parametrize("change", ["rows", "misaligned", "dtype", "atoms", "config", "tiles", "another_kernel"])
def test_a_new_signature_goes_through_jit_run(gpu_like, change):
    jit, args = _Jit(), _inputs(16)
    L.launch(jit, *args, 0.99, -5.0, 10.0)
    config, launcher = None, jit
    if change == "rows":
        args = _inputs(17)
    elif change == "misaligned":  # log-prob rows start one float later: address not a multiple of 16 bytes
        big = _inputs(16, N=102)[1]
        args[1] = big[..., 1:]
    elif change == "dtype":
        args[1] = args[1].to(torch.bfloat16)
    elif change == "atoms":
        args = _inputs(16, N=51)
    elif change == "config":
        config = {"BR": 4, "num_warps": 4}
    elif change == "tiles":
        config = {"RPP": 2}
    else:
        launcher = _Jit()
    L.launch(launcher, *args, 0.99, -5.0, 10.0, config=config)
    assert len(launcher.launches) == (1 if launcher is not jit else 2) and not launcher.compiled.calls


def test_fast_false_and_wrapped_launchers_always_go_through_jit_run(gpu_like):
    jit, args = _Jit(), _inputs(8)
    for _ in range(2):
        L.launch(jit, *args, 0.99, -5.0, 10.0, fast=False)
    assert len(jit.launches) == 2 and not jit.compiled.calls
    calls = []

    class Wrapped:  # like torch.library.wrap_triton(kernel): not a JITFunction
        def __getitem__(self, grid):
            return lambda *a, **k: calls.append(grid)

    for _ in range(2):
        L.launch(Wrapped(), *args, 0.99, -5.0, 10.0)
    assert len(calls) == 2


def test_profiler_hooks_get_the_launch_metadata(gpu_like, monkeypatch):
    from triton import knobs

    chain = knobs.HookChain()
    chain.add(lambda metadata: None)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", chain)
    jit, args = _Jit(), _inputs(8)
    for _ in range(2):
        L.launch(jit, *args, 0.99, -5.0, 10.0)
    call = jit.compiled.calls[0]
    assert call[6] == ("metadata", (8,), 77) and call[7] is chain and call[8] is knobs.runtime.launch_exit_hook


def test_a_compiled_kernel_without_the_launcher_api_is_never_cached(gpu_like):
    jit, args = _Jit(), _inputs(8)
    jit.compiled = object()  # what JITFunction.run returns in a Triton whose compiled kernels look different
    for _ in range(2):
        L.launch(jit, *args, 0.99, -5.0, 10.0)
    assert len(jit.launches) == 2 and not L._COMPILED


@pytest.mark.parametrize("B,config,programs,rpp", [
    (8, None, 8, 1),  # small B: one row per program
    (1 << 20, None, (1 << 20) // 8, 4),  # large B, pinned: row pairs at 4 tiles per program
    (1 << 20, {"BR": 1, "RPP": 16}, (1 << 20) // 16, 16),  # one row a tile, 16 tiles per program
    (1 << 20, {"BR": 1, "RPP": 1}, 1 << 20, 1),  # RPP = 1: the one-tile kernel
    (37, {"BR": 2, "RPP": 4}, 5, 4),  # ceil(37 / 8)
])
def test_grid_is_rows_over_tile_rows_times_tiles(gpu_like, monkeypatch, B, config, programs, rpp):
    jit = _Jit()  # shapes only: stride-0 inputs and an empty stand-in output, no B x N allocation
    monkeypatch.setattr(L, "torch", SimpleNamespace(empty=lambda *a, **k: torch.empty(0), float32=torch.float32))
    args = [torch.zeros(1).expand(2, B), torch.zeros(101).expand(2, B, 101), *(torch.zeros(1).expand(B)
                                                                            for _ in range(3))]
    L.launch(jit, *args, 0.99, -5.0, 10.0, config=config)
    (grid, _, constexprs), = jit.launches
    assert grid == (programs,) and constexprs["RPP"] == rpp
    assert constexprs["Q"] == (16 if constexprs["BR"] == 2 else 32)  # slot tiles follow BR (one warp)


def test_a_kernel_without_rpp_gets_one_tile_per_program(gpu_like):
    class OldJit(_Jit):  # a baseline kernel file: the signature before the RPP (and Q) parameter
        arg_names = [n for n in categorical_td_target_kernel.arg_names if n not in ("RPP", "Q")]

    jit, args = OldJit(), _inputs(8)
    for _ in range(2):  # the second launch goes through the fast path
        L.launch(jit, *args, 0.99, -5.0, 10.0)
    (grid, _, constexprs), = jit.launches
    assert grid == (8,) and "RPP" not in constexprs
    assert len(jit.compiled.calls[0][9:]) == len(OldJit.arg_names)
    with pytest.raises(ValueError, match="RPP"):
        L.launch(jit, *args, 0.99, -5.0, 10.0, config={"RPP": 2})


def test_a_kernel_without_q_runs_its_own_slot_tiles(gpu_like):
    class CutJit(_Jit):  # tests/kernel_baselines/categorical_td_target_cut2.py: RPP, no Q
        arg_names = [n for n in categorical_td_target_kernel.arg_names if n != "Q"]

    jit, args = CutJit(), _inputs(8)
    L.launch(jit, *args, 0.99, -5.0, 10.0, config={"BR": 1, "RPP": 2})
    (grid, _, constexprs), = jit.launches
    assert grid == (4,) and constexprs["RPP"] == 2 and "Q" not in constexprs
    with pytest.raises(ValueError, match="no Q parameter"):
        L.launch(jit, *args, 0.99, -5.0, 10.0, config={"Q": 16})


def test_a_fast_launcher_built_for_one_rpp_is_never_reused_for_another(gpu_like):
    jit, args = _Jit(), _inputs(37)
    for rpp in (1, 1, 4, 4, 1, 4):  # same inputs, tiles per program switched back and forth
        L.launch(jit, *args, 0.99, -5.0, 10.0, config={"RPP": rpp})
    assert [(grid, constexprs["RPP"]) for grid, _, constexprs in jit.launches] == [((37,), 1), ((10,), 4)]
    # the repeats: each through the fast launcher of its own RPP (the grid and the RPP parameter, the last but one,
    # follow it)
    assert [(call[0], call[-2]) for call in jit.compiled.calls] == [(37, 1), (10, 4), (37, 1), (10, 4)]
    L.fast_launcher(jit, *args)(*args, 0.99, -5.0, 10.0)  # the pinned configuration's (RPP 1 at B = 37)
    assert jit.compiled.calls[-1][0] == 37 and jit.compiled.calls[-1][-2] == L.kernel_config(37, 101, False)["RPP"]


def test_a_kernel_without_rpp_keeps_one_tile_per_program_under_a_pinned_rpp(gpu_like, monkeypatch):
    """A pinned RPP > 1 (large B) never reaches a kernel without the parameter, on any path: the first
    launch, its fast launcher, and the fast launcher's way back through `launch` on another current device."""
    class OldJit(_Jit):
        arg_names = [n for n in categorical_td_target_kernel.arg_names if n not in ("RPP", "Q")]

    pinned = L.kernel_config(8, 101, False)
    monkeypatch.setattr(L, "_config", lambda B, N, interpret: dict(pinned, RPP=4))
    state = SimpleNamespace(device=0)
    monkeypatch.setattr(L, "driver", SimpleNamespace(active=SimpleNamespace(
        get_current_device=lambda: state.device, get_current_stream=lambda d: 77)))
    jit, new, args = OldJit(), _Jit(), _inputs(8)
    L.launch(jit, *args, 0.99, -5.0, 10.0)  # JITFunction.run
    fast = L.fast_launcher(jit, *args)
    fast(*args, 0.99, -5.0, 10.0)
    assert len(jit.compiled.calls[0][9:]) == len(OldJit.arg_names) and jit.compiled.calls[0][0] == 8
    state.device = 1
    fast(*args, 0.99, -5.0, 10.0)  # another current device: back through launch, no ValueError
    assert [(grid, "RPP" in constexprs) for grid, _, constexprs in jit.launches] == [((8,), False), ((8,), False)]
    L.launch(new, *args, 0.99, -5.0, 10.0)  # a kernel with the parameter gets the pinned RPP 4
    (grid, _, constexprs), = new.launches
    assert grid == (2,) and constexprs["RPP"] == 4

def test_takes_reads_a_real_jit_functions_parameters():
    """A real JITFunction (not the stand-in) of the baseline kernel files has no RPP (v2) or no Q (cut2) parameter;
    Triton 3.6's JITFunction carries a `kernel` attribute of its own (None), which must not be taken for
    wrap_triton's."""
    spec = importlib.util.spec_from_file_location("baseline_v2_for_test",
                                                  "tests/kernel_baselines/categorical_td_target_v2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    baseline = JITFunction(mod.categorical_td_target_kernel.fn)  # also under TRITON_INTERPRET=1
    ours = JITFunction(categorical_td_target_kernel.fn)
    assert "RPP" not in baseline.arg_names and not L._takes(baseline, "RPP")
    assert L._takes(ours, "RPP") and L._takes(SimpleNamespace(kernel=ours), "RPP")
    assert not L._takes(SimpleNamespace(kernel=baseline), "RPP")  # wrap_triton's wrapper of the baseline
    spec = importlib.util.spec_from_file_location("baseline_cut2_for_test",
                                                  "tests/kernel_baselines/categorical_td_target_cut2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cut2 = JITFunction(mod.categorical_td_target_kernel.fn)
    assert L._takes(cut2, "RPP") and not L._takes(cut2, "Q") and L._takes(ours, "Q")
