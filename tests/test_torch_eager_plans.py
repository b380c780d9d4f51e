"""torch_impl's eager plans (one dict lookup per repeat call) and the fast launcher they call, on CPU.

A stand-in JIT function, compiled kernel and driver record what would be launched (as tests/test_triton_launch.py);
the gate lets CPU tensors through to the kernel (TRITON_INTERPRET=1). On the GPU the op's plans are checked bitwise
against JITFunction.run on a GPU."""

import functools
import importlib
import inspect
import logging
from types import FunctionType, SimpleNamespace

import pytest
import torch
from triton.runtime.jit import JITFunction

import torch_impl
from shared_spec import launch_config, make_inputs
from torch_impl import dispatch, ops
from triton_kernels import categorical_td_target_kernel

L = importlib.import_module("triton_kernels.launch")  # the module (the package exports its `launch` function)

NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
PARAMS = list(inspect.signature(categorical_td_target_kernel.fn).parameters)
CONSTEXPRS = ("E", "N", "BLOCK_N", "BR", "RPP", "Q")  # the kernel's last parameters
NC = len(CONSTEXPRS)


class _Compiled:
    function, packed_metadata = "function", "packed"

    def __init__(self):
        self.calls = []

    def run(self, *args):
        self.calls.append(args)

    def launch_metadata(self, grid, stream, *args):
        return ("metadata", grid, stream)


class _Jit(JITFunction):
    def __init__(self):  # no JIT state: it records launches through JITFunction's grid indexing
        self.launches, self.compiled, self.pre_run_hooks = [], _Compiled(), []

    def __getitem__(self, grid):
        def go(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
            return self.compiled
        return go


@pytest.fixture(params=["cpp_guard", "python_check"])
def checks(request, monkeypatch):
    """The plans' tensor checks: the C++ guard, or (python_check) the Python one, as on a torch without it."""
    if request.param == "python_check":
        monkeypatch.setattr(dispatch, "_TENSOR_GUARDS", None)
    return request.param


@pytest.fixture
def gpu(monkeypatch, checks):
    """The GPU's eager path on CPU tensors: launch's fast path on, the stand-in kernel in torch_impl.ops."""
    state = SimpleNamespace(device=0, jit=_Jit())
    monkeypatch.setattr(L, "INTERPRET", False)
    monkeypatch.setattr(L, "driver", SimpleNamespace(active=SimpleNamespace(
        get_current_device=lambda: state.device, get_current_stream=lambda d: 70 + d)))
    monkeypatch.setattr(ops, "categorical_td_target_kernel", state.jit)
    dispatch.reset_dispatch()
    L._COMPILED.clear()
    yield state
    dispatch.reset_dispatch()
    L._COMPILED.clear()


@pytest.fixture
def fresh(checks):
    dispatch.reset_dispatch()
    yield
    dispatch.reset_dispatch()


def _inputs(B=8, N=101, E=2, seed=1) -> dict:
    return {k: torch.from_numpy(v) for k, v in make_inputs(B, N, E, seed=seed).items()}


def _op(t, **kw):
    return torch_impl.categorical_td_target(**t, **dict(dict(gamma=0.99), **kw))


def _bound(t, out, gamma=0.99, min_v=-5.0, max_v=5.0):
    """Every kernel parameter the launch of `t` passes (JITFunction.run's order), constexprs included."""
    q, lp, r, d, s = (t[k] for k in NAMES)
    E, B, N = lp.shape
    inv = (N - 1) / (max_v - min_v)
    cfg = L.kernel_config(B, N, False)
    return (q, *q.stride(), lp, *lp.stride(), r, r.stride(0), d, d.stride(0), s, s.stride(0), out, out.stride(0), B,
            gamma, min_v, inv, E, N, cfg["BLOCK_N"], cfg["BR"], cfg["RPP"], cfg["Q"])


def _same(a, b) -> bool:
    return len(a) == len(b) and all(x is y if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b,
                                                                                                  strict=True))


def test_repeat_calls_run_the_plan_and_pass_every_parameter(gpu, monkeypatch):
    t = _inputs()
    _op(t)  # first call: checks, decision, then JITFunction.run through launch
    assert len(gpu.jit.launches) == 1 and not gpu.jit.compiled.calls
    slow = []
    monkeypatch.setattr(dispatch, "_call", lambda *a: slow.append(1))
    outs = [_op(t), _op(t, gamma=0.5)]
    assert not slow and len(gpu.jit.launches) == 1 and len(gpu.jit.compiled.calls) == 2
    grid, positional, constexprs = gpu.jit.launches[0]
    for call, out, gamma in zip(gpu.jit.compiled.calls, outs, (0.99, 0.5), strict=True):
        assert call[:9] == (grid[0], 1, 1, 70, "function", "packed", None, None, None)
        assert len(call[9:]) == len(PARAMS) and _same(call[9:], _bound(t, out, gamma))
        assert _same(call[9:-NC], (*positional[:13], out, *positional[14:16], gamma, *positional[17:]))
        assert PARAMS[-NC:] == list(CONSTEXPRS) and call[-NC:] == tuple(constexprs[k] for k in CONSTEXPRS)
        assert out.shape == (8, 101) and out.dtype == torch.float32 and out.is_contiguous()


def _offset(t, name, floats):
    """`t` with tensor `name` moved `floats` elements into a larger buffer: same shape and strides, another address."""
    x = t[name]
    buf = torch.zeros(x.numel() + 8, dtype=x.dtype)
    moved = buf[floats:floats + x.numel()].view(x.shape)
    moved.copy_(x)
    return dict(t, **{name: moved})


CHANGES = {
    "rows": lambda t: _inputs(B=9),
    "atoms": lambda t: _inputs(N=51),
    "critics": lambda t: _inputs(E=3),
    "lp_strides": lambda t: dict(t, next_log_probs=t["next_log_probs"].transpose(1, 2).contiguous().transpose(1, 2)),
    "q_strides": lambda t: dict(t, next_qs=t["next_qs"].t().contiguous().t()),
    "reward_stride": lambda t: dict(t, reward=torch.stack([t["reward"], t["reward"]], 1)[:, 0]),
    "lp_dtype": lambda t: dict(t, next_log_probs=t["next_log_probs"].to(torch.bfloat16)),
    "q_dtype": lambda t: dict(t, next_qs=t["next_qs"].double()),
    "lp_alignment": lambda t: _offset(t, "next_log_probs", 1),
    "terminated_alignment": lambda t: _offset(t, "terminated", 2),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_signature_never_reuses_a_stale_plan(gpu, change):
    t = _offset(_offset(_inputs(), "next_log_probs", 4), "terminated", 4)  # 16-byte aligned views (4 floats in)
    assert t["next_log_probs"].data_ptr() % 16 == 0 and t["terminated"].data_ptr() % 16 == 0
    _op(t), _op(t)
    t2 = CHANGES[change](t)
    out = _op(t2)
    assert len(gpu.jit.launches) == 2, "a new signature launches through JITFunction.run"
    _, positional, constexprs = gpu.jit.launches[1]
    assert _same(positional, _bound(t2, out)[:-NC])
    _op(t2), _op(t)
    calls = gpu.jit.compiled.calls
    assert len(gpu.jit.launches) == 2 and len(calls) == 3
    assert _same(calls[1][9:-NC], _bound(t2, calls[1][9 + 13])[:-NC])  # the new plan: t2's strides, pointers
    assert _same(calls[2][9:], _bound(t, calls[2][9 + 13]))  # the old plan is still t's


def _moved(x, floats):
    """`x` (in place) onto a new storage, `floats` elements in: same shape and strides, another address."""
    buf = torch.zeros(x.numel() + 8, dtype=x.dtype)
    buf[floats:floats + x.numel()].copy_(x.reshape(-1))
    return x.set_(buf.untyped_storage(), floats, x.shape, x.stride())


IN_PLACE = {  # the same tensor objects, changed in place into another valid signature
    "lp_as_strided": lambda t: t["next_log_probs"].as_strided_((2, 8, 101), (808, 1, 8)),
    "q_set_strides": lambda t: t["next_qs"].set_(torch.zeros(8, 2).untyped_storage(), 0, (2, 8), (1, 2)),
    "terminated_resize": lambda t: t["terminated"].resize_(8, 1),
    "reward_alignment": lambda t: _moved(_moved(t["reward"], 4), 1),
    "q_dtype": lambda t: setattr(t["next_qs"], "data", t["next_qs"].double()),
}


@pytest.mark.parametrize("change", list(IN_PLACE))
def test_an_in_place_change_of_the_same_tensors_never_reuses_a_stale_plan(gpu, change, monkeypatch):
    t = _offset(_inputs(), "reward", 4)  # reward 16-byte aligned: _moved(.., 1) changes its alignment
    t = {k: v.clone() for k, v in t.items()}  # own (resizable) storages
    _op(t), _op(t)
    IN_PLACE[change](t)
    slow = []
    real = dispatch._call
    monkeypatch.setattr(dispatch, "_call", lambda *a: slow.append(1) or real(*a))
    for _ in range(2):
        launches, calls = len(gpu.jit.launches), len(gpu.jit.compiled.calls)
        out = _op(t)
        assert slow == [1], "the changed tensors are checked once, then their own plan runs"
        if len(gpu.jit.launches) > launches:  # a new launch signature: through JITFunction.run
            assert _same(gpu.jit.launches[-1][1], _bound(t, out)[:-NC])
        else:
            assert len(gpu.jit.compiled.calls) == calls + 1 and _same(gpu.jit.compiled.calls[-1][9:], _bound(t, out))


def test_an_in_place_resize_to_a_bad_shape_raises_with_a_warm_plan(gpu):
    t = {k: v.clone() for k, v in _inputs().items()}
    _op(t), _op(t)
    t["reward"].resize_(9)
    with pytest.raises(ValueError) as warm:
        _op(t)
    dispatch.reset_dispatch()
    with pytest.raises(ValueError) as cold:
        _op(t)
    assert str(warm.value) == str(cold.value) and len(gpu.jit.compiled.calls) == 1


class _Sub(torch.Tensor):
    pass


def test_a_tensor_subclass_gets_its_own_plan(gpu, monkeypatch):
    t = _inputs()
    _op(t), _op(t)
    sub = dict(t, reward=t["reward"].as_subclass(_Sub))
    slow = []
    real = dispatch._call
    monkeypatch.setattr(dispatch, "_call", lambda *a: slow.append(1) or real(*a))
    _op(sub), _op(sub), _op(t)
    assert slow == [1]
    (bucket,) = dispatch._PLANS.values()
    assert len(bucket) == 2 and isinstance(bucket[0][0], FunctionType), "a subclass: the Python check"


def test_a_tensor_passed_twice_gets_a_plan(gpu, monkeypatch):
    t = _inputs()
    alias = dict(t, next_alpha_log_pi=t["reward"])  # TensorGuards requires distinct objects: the Python check
    out = _op(alias)
    slow = []
    real = dispatch._call
    monkeypatch.setattr(dispatch, "_call", lambda *a: slow.append(1) or real(*a))
    out = _op(alias)
    assert not slow and _same(gpu.jit.compiled.calls[-1][9:], _bound(alias, out))
    (bucket,) = dispatch._PLANS.values()
    assert isinstance(bucket[0][0], FunctionType)


def test_plain_tensors_are_checked_by_the_cpp_guard():
    assert dispatch._TENSOR_GUARDS is not None, "TensorGuards failed its self-check: plans are checked in Python"
    dispatch.reset_dispatch()
    try:
        _op(_inputs(5, 11), backend="torch")
        (bucket,) = dispatch._PLANS.values()
        assert not isinstance(bucket[0][0], FunctionType)
    finally:
        dispatch.reset_dispatch()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_another_device_index_never_reuses_a_plan(fresh):
    t0 = {k: v.to("cuda:0") for k, v in _inputs(5, 11).items()}
    _op(t0, backend="torch"), _op(t0, backend="torch")
    with pytest.raises(ValueError, match="same device"):
        _op(dict(t0, next_qs=t0["next_qs"].to("cuda:1")), backend="torch")
    t1 = {k: v.to("cuda:1") for k, v in t0.items()}
    assert _op(t1, backend="torch").device == torch.device("cuda:1") and _entries() == 2
    assert _op(t0, backend="torch").device == torch.device("cuda:0") and _entries() == 2


def test_a_new_shape_with_the_launch_signature_of_a_plan_reuses_its_binary(gpu, monkeypatch):
    t = _inputs()
    _op(t), _op(t)
    column = dict(t, reward=t["reward"][:, None])  # (B, 1): rows still at stride(0) = 1, the same launch
    slow = []
    real = dispatch._call
    monkeypatch.setattr(dispatch, "_call", lambda *a: slow.append(1) or real(*a))
    _op(column), _op(column)
    assert slow == [1], "the op checks the new shape once"
    assert len(gpu.jit.launches) == 1 and len(gpu.jit.compiled.calls) == 3


def test_another_tensor_device_gets_its_own_plan(gpu, caplog):
    t = _inputs()
    _op(t), _op(t)
    meta = {k: v.to("meta") for k, v in t.items()}
    with caplog.at_level(logging.INFO, logger="flashsac.torch_impl"):
        outs = [_op(meta) for _ in range(3)]  # the gate refuses meta tensors: the reference runs, logged once
    assert all(o.device.type == "meta" for o in outs)
    assert len([r for r in caplog.records if "runs CPU tensors only, got meta" in r.getMessage()]) == 1
    assert _op(t).device.type == "cpu" and len(gpu.jit.compiled.calls) == 2 and len(gpu.jit.launches) == 1


def test_another_current_device_or_pre_run_hooks_go_through_jit_run(gpu):
    t = _inputs()
    _op(t), _op(t)
    gpu.device = 1  # another current CUDA device: its own binary, first through JITFunction.run
    _op(t)
    assert len(gpu.jit.launches) == 2 and len(gpu.jit.compiled.calls) == 1
    _op(t)  # then through launch's fast launcher for device 1, on device 1's stream
    assert len(gpu.jit.launches) == 2 and len(gpu.jit.compiled.calls) == 2 and gpu.jit.compiled.calls[1][3] == 71
    gpu.device = 0
    _op(t)
    assert len(gpu.jit.compiled.calls) == 3 and gpu.jit.compiled.calls[2][3] == 70
    gpu.jit.pre_run_hooks.append(lambda *a, **k: None)  # JITFunction.add_pre_run_hook: JITFunction.run runs them
    _op(t)
    gpu.device = 1
    _op(t)
    assert len(gpu.jit.launches) == 4 and len(gpu.jit.compiled.calls) == 3


def test_an_output_alignment_other_than_the_first_launch_goes_through_jit_run(gpu):
    t = _inputs()
    _op(t)
    args = tuple(t[k] for k in NAMES)
    odd = torch.empty(8 * 101 + 1)[1:].view(8, 101)  # what the first launch's output would have been: misaligned
    cfg = L.kernel_config(8, 101, False)
    constexprs = L.kernel_constexprs(gpu.jit, cfg, 2, 101)
    fast = L._fast(gpu.jit, gpu.jit.compiled, 0, None, constexprs, cfg["num_warps"], (8,), odd, *args)
    fast(*args, 0.99, -5.0, 10.0)  # allocates an aligned output: not the specialisation the closure holds
    assert len(gpu.jit.launches) == 2 and not gpu.jit.compiled.calls


def test_a_wrapped_registry_entry_is_called_while_it_is_registered(gpu, monkeypatch):
    t = _inputs()
    _op(t), _op(t)
    real, seen = dispatch.IMPLEMENTATIONS["triton"], []
    monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "triton", lambda *a: seen.append(a[5:]) or real(*a))
    _op(t), _op(t, gamma=0.5)
    assert seen == [(0.99, -5.0, 5.0), (0.5, -5.0, 5.0)]
    assert len(gpu.jit.compiled.calls) == 3  # the wrapper's calls launch through launch()'s fast path
    monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "triton", real)
    _op(t), _op(t)
    assert len(seen) == 2 and len(gpu.jit.compiled.calls) == 5 and len(gpu.jit.launches) == 1


def test_support_bounds_are_part_of_the_plan(gpu):
    t = _inputs()
    for _ in range(2):
        a = _op(t)
        b = _op(t, min_v=-10.0, max_v=10.0)
    calls = gpu.jit.compiled.calls
    assert len(gpu.jit.launches) == 1 and len(calls) == 3  # one binary: the bounds are runtime scalars
    assert _same(calls[1][9:], _bound(t, a)) and _same(calls[2][9:], _bound(t, b, min_v=-10.0, max_v=10.0))


def _bad_cases():
    def update(**kw):
        return lambda t: dict(t, **{k: f(t) for k, f in kw.items()})

    return {
        "short_reward": (update(reward=lambda t: t["reward"][:3]), {}),
        "1d_next_qs": (update(next_qs=lambda t: t["next_qs"][0]), {}),
        "long_log_probs": (update(next_log_probs=lambda t: t["next_log_probs"].long()), {}),
        "bool_terminated": (update(terminated=lambda t: t["terminated"].bool()), {}),
        "meta_reward": (update(reward=lambda t: t["reward"].to("meta")), {}),
        # no sizes nor strides (the plans' C++ check would abort the process): torch's RuntimeError, warm or cold
        "nested_reward": (update(reward=lambda t: torch.nested.nested_tensor([t["reward"][:2], t["reward"][2:]])), {}),
        "nested_next_qs": (update(next_qs=lambda t: torch.nested.as_nested_tensor(t["next_qs"])), {}),
        "numpy_next_qs": (update(next_qs=lambda t: t["next_qs"].numpy()), {}),
        "one_atom": (update(next_log_probs=lambda t: t["next_log_probs"][..., :1]), {}),
        "gamma_high": (None, dict(gamma=1.5)),
        "gamma_str": (None, dict(gamma="0.9")),
        "gamma_nan": (None, dict(gamma=float("nan"))),
        "bounds": (None, dict(min_v=2.0, max_v=1.0)),
        "bound_list": (None, dict(min_v=[1.0])),
        "bound_bool": (None, dict(min_v=True)),
        "backend": (None, dict(backend="cuda")),
        "strict_one": (None, dict(strict=1)),  # == True and hashes alike: the plans' key holds the type too
        "strict_zero": (None, dict(strict=0)),
        "strict_none": (None, dict(strict=None)),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_inputs_raise_the_same_error_with_a_warm_plan(gpu, case):
    mutate, kwargs = _bad_cases()[case]
    t = _inputs(4, 11)
    bad = mutate(t) if mutate else t

    def error():
        with pytest.raises(RuntimeError if case.startswith("nested") else (TypeError, ValueError)) as info:
            _op(bad, **kwargs)
        return type(info.value), str(info.value)

    cold = error()
    dispatch.reset_dispatch()
    _op(t), _op(t), _op(t, strict=True)  # plans for the good inputs (the bad ones differ in one argument)
    launches, calls = len(gpu.jit.launches), len(gpu.jit.compiled.calls)
    assert error() == cold
    assert (len(gpu.jit.launches), len(gpu.jit.compiled.calls)) == (launches, calls), "raised before any launch"
    if mutate is None:  # the good inputs' plan still runs
        _op(t)
        assert len(gpu.jit.compiled.calls) == calls + 1


def test_fallback_logged_once_strict_raises_every_time_and_reset_forgets(fresh, monkeypatch, caplog):
    monkeypatch.setattr(ops, "INTERPRET", False)  # CPU tensors: the kernel needs CUDA
    t = _inputs(6)
    with caplog.at_level(logging.INFO, logger="flashsac.torch_impl"):
        for _ in range(3):
            _op(t, backend="triton")
        for _ in range(2):
            with pytest.raises(torch_impl.BackendUnavailable, match="needs CUDA"):
                _op(t, backend="triton", strict=True)
        _op(t, backend="triton")
    assert len([r for r in caplog.records if "needs CUDA" in r.getMessage()]) == 1
    assert torch_impl.dispatch_stats()["fallback_count"] == 1
    assert all(key[-3:-1] != (bool, True) for key in dispatch._PLANS), "a strict fallback never gets a plan"
    caplog.clear()
    dispatch.reset_dispatch()
    assert not dispatch._PLANS
    with caplog.at_level(logging.INFO, logger="flashsac.torch_impl"):
        _op(t, backend="triton")
    assert len(caplog.records) == 1 and torch_impl.dispatch_stats()["fallback_count"] == 1


@pytest.mark.parametrize("name", NAMES)
def test_grad_mode_and_requires_grad_are_part_of_the_plan(fresh, name):
    t = _inputs(5, 11)
    _op(t, backend="triton", strict=True), _op(t, backend="triton", strict=True)
    t[name].requires_grad_(True)
    with pytest.raises(torch_impl.BackendUnavailable, match="requires grad"):
        _op(t, backend="triton", strict=True)
    assert not _op(t, backend="triton").requires_grad  # the reference, stop-gradient
    with torch.no_grad():
        _op(t, backend="triton", strict=True)  # no grad needed: the kernel


def _entries() -> int:
    return sum(map(len, dispatch._PLANS.values()))


def test_plans_are_bounded(fresh, monkeypatch):
    monkeypatch.setattr(dispatch, "_MAX_PLANS", 2)
    for B in (3, 4, 5, 6):
        _op(_inputs(B, 11), backend="torch")
        assert 1 <= _entries() <= 2


def test_a_key_holds_its_newest_plans(fresh, monkeypatch):
    """Signatures that differ only in the tensors share a key: at most _MAX_BUCKET plans, newest first."""
    monkeypatch.setattr(dispatch, "_MAX_BUCKET", 2)
    ts = [_inputs(B, 11) for B in (3, 4, 5)]
    for t in ts:
        _op(t, backend="torch")
    (bucket,) = dispatch._PLANS.values()
    assert len(bucket) == 2 and [check(*(ts[2][k] for k in NAMES)) for check, _ in bucket] == [True, False]
    slow = []
    real = dispatch._call
    monkeypatch.setattr(dispatch, "_call", lambda *a: slow.append(1) or real(*a))
    _op(ts[1], backend="torch"), _op(ts[2], backend="torch")
    assert not slow
    _op(ts[0], backend="torch")  # dropped: checked again
    assert slow == [1]


def test_traced_calls_make_no_plan(fresh):
    t = _inputs(5, 11)
    torch._dynamo.reset()
    fn = torch.compile(lambda **kw: torch_impl.categorical_td_target(**kw, gamma=0.9, backend="torch"),
                       backend="eager", fullgraph=True)
    out = fn(**t)
    assert not dispatch._PLANS
    assert torch.equal(out.nan_to_num(-1.0), _op(t, gamma=0.9, backend="torch").nan_to_num(-1.0))
    assert len(dispatch._PLANS) == 1


def test_the_direct_c_launch_passes_what_tritons_cuda_launcher_passes(gpu, monkeypatch):
    """Triton 3.6's CudaLauncher.__call__ (the real one) on a stand-in C launch, against the fast launcher's direct
    call of that C launch: the same arguments."""
    from triton.backends.nvidia.driver import CudaLauncher as Real

    assert L._DIRECT_LAUNCH, "the installed Triton is 3.6"

    class CudaLauncher:  # the name the fast launcher checks; __call__ is Triton's
        __call__ = Real.__call__
        num_ctas, global_scratch_size, profile_scratch_size, global_scratch_align, profile_scratch_align = 1, 0, 0, 1, 1
        launch_cooperative_grid, launch_pdl = False, True

        def __init__(self):
            self.calls = []

        def launch(self, *args):
            self.calls.append(args)

    launcher = CudaLauncher()
    gpu.jit.compiled.run = launcher
    t = _inputs()
    _op(t)
    out_direct = _op(t)  # the fast launcher calls launcher.launch itself
    monkeypatch.setattr(L, "_DIRECT_LAUNCH", False)
    dispatch.reset_dispatch()
    L._COMPILED.clear()
    _op(t)
    out_call = _op(t)  # the fast launcher calls the launcher: Triton's __call__ calls launch
    assert len(launcher.calls) == 2
    direct, via_call = launcher.calls
    assert direct[:13] == via_call[:13] == (8, 1, 1, 70, "function", False, True, None, None, "packed", None, None,
                                            None)
    assert _same(direct[13:], _bound(t, out_direct)) and _same(via_call[13:], _bound(t, out_call))


def test_fast_launcher_lookup(gpu, monkeypatch):
    t = _inputs()
    args = tuple(t[k] for k in NAMES)
    assert L.fast_launcher(gpu.jit, *args) is None  # not launched yet
    L.launch(gpu.jit, *args, 0.99, -5.0, 10.0)
    fast = L.fast_launcher(gpu.jit, *args)
    out = fast(*args, 0.5, -5.0, 10.0)
    assert _same(gpu.jit.compiled.calls[0][9:], _bound(t, out, 0.5))
    assert L.fast_launcher(_Jit(), *args) is None  # another kernel
    monkeypatch.setattr(L, "INTERPRET", True)
    assert L.fast_launcher(gpu.jit, *args) is None


def test_the_launch_signature_holds_the_tensors_device(gpu):
    """Inputs on another device than a launched signature's (same current device): their own output device."""
    t = _inputs()
    args = tuple(t[k] for k in NAMES)
    L.launch(gpu.jit, *args, 0.99, -5.0, 10.0)
    meta = tuple(a.to("meta") for a in args)
    out = L.launch(gpu.jit, *meta, 0.99, -5.0, 10.0)
    assert out.device.type == "meta" and len(gpu.jit.launches) == 2
    assert L.fast_launcher(gpu.jit, *meta) is not L.fast_launcher(gpu.jit, *args)


def test_plans_pass_the_pinned_tiles_per_program(gpu, monkeypatch):
    """With RPP > 1 pinned (the rule's cap once the GPU sweep sets it), each call signature's plan launches with its
    own RPP and grid: B = 8 at 4 tiles per program, B = 4 at 2, interleaved, never one for the other."""
    monkeypatch.setattr(launch_config, "GPU_MAX_RPP", 16)
    monkeypatch.setattr(launch_config, "GPU_MIN_PROGRAMS", 2)
    monkeypatch.setattr(L, "_config", functools.lru_cache(maxsize=256)(L.kernel_config))  # no cached pinned configs
    t8, t4 = _inputs(8), _inputs(4)
    assert (L._config(8, 101, False)["RPP"], L._config(4, 101, False)["RPP"]) == (4, 2)
    for _ in range(3):
        a, b = _op(t8), _op(t4)
    assert [(grid, kw["RPP"]) for grid, _, kw in gpu.jit.launches] == [((2,), 4), ((2,), 2)]
    calls = gpu.jit.compiled.calls
    assert [(c[0], c[-2]) for c in calls] == [(2, 4), (2, 2), (2, 4), (2, 2)]  # (grid, RPP: the last but one)
    assert _same(calls[2][9:], _bound(t8, a)) and _same(calls[3][9:], _bound(t4, b))


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_negative_bit_view_is_read_as_its_values(fresh, backend):
    # torch._neg_view stores -x under a bit the kernel cannot see in raw memory: the op materialises such inputs,
    # and a warm plan of plain tensors (their C++ guard sees the bit as a dispatch key, the Python check reads it)
    # never takes one
    t = _inputs(7, 11)
    plain = _op(t, backend=backend).nan_to_num(-1.0)
    _op(t, backend=backend)
    for name in NAMES:
        neg = dict(t, **{name: (-t[name]).clone()._neg_view()})
        assert neg[name].is_neg() and torch.equal(neg[name], t[name])
        for _ in range(2):
            assert torch.equal(_op(neg, backend=backend).nan_to_num(-1.0), plain), name
    assert torch.equal(_op(t, backend=backend).nan_to_num(-1.0), plain)
