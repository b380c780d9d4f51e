"""Backend dispatch for the torch categorical TD target: torch validation on top of the shared dispatcher."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from shared_spec.dispatch import BackendUnavailable, Decision, Dispatcher
from shared_spec.launch_config import kernel_config
from shared_spec.reference import check_gamma, check_shapes
from shared_spec.support import validate_support
from torch_impl.reference import categorical_td_target_reference, support_constants

__all__ = ["BACKENDS", "DISPATCHER", "KERNEL_DTYPES", "BackendUnavailable", "Decision", "backend_info",
           "categorical_td_target", "dispatch_stats", "reset_dispatch", "resolve_backend"]

KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_LOG_PROB_DTYPES = KERNEL_DTYPES + (torch.float64,)
_ARG_NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")


def _describe(config: tuple) -> str:
    device_type, index, dtype, E, N, needs_grad = config
    device = device_type if index is None else f"{device_type}:{index}"
    return f"device={device}, dtype={str(dtype).removeprefix('torch.')}, E={E}, N={N}, needs_grad={needs_grad}"


# A configuration is (device type, device index, log-prob dtype, E, N, needs_grad): what the Triton gate decides on.
DISPATCHER = Dispatcher(framework="torch", reference="torch", kernels=("triton",), auto_order=("triton",),
                        reference_impl=categorical_td_target_reference, logger="flashsac.torch_impl",
                        describe=_describe)
BACKENDS = DISPATCHER.backends
# A decision first made while torch.compile traces a call logs nothing there (Dynamo cannot trace a Logger call; the
# decision is cached and counted as usual), instead of breaking the graph.
torch._dynamo.config.ignore_logging_functions |= {DISPATCHER.log.debug, DISPATCHER.log.info, DISPATCHER.log.warning}
# The registries (plain dicts; tests and the benchmark harness wrap or replace entries).
IMPLEMENTATIONS: dict[str, Callable[..., torch.Tensor]] = DISPATCHER.implementations
GATES = DISPATCHER.gates
IMPORT_ERRORS = DISPATCHER.import_errors


# The Triton backend's eager entry point and its fast launcher lookup (None if triton failed to import).
_TRITON_IMPL: Callable[..., torch.Tensor] | None = None
_EAGER_LAUNCHER: Callable[..., Any] | None = None


def _register_triton() -> None:
    global _TRITON_IMPL, _EAGER_LAUNCHER
    try:
        from torch_impl.ops import categorical_td_target_triton, eager_launcher, triton_gate
    except Exception as exc:  # ImportError, or a triton that fails to initialise: recorded as the fallback reason
        DISPATCHER.register_import_error("triton", exc)
        return
    DISPATCHER.register("triton", categorical_td_target_triton, triton_gate)
    _TRITON_IMPL, _EAGER_LAUNCHER = categorical_td_target_triton, eager_launcher


_register_triton()


def _config(device: torch.device, dtype: torch.dtype, E: int, N: int, needs_grad: bool) -> tuple:
    return (device.type, device.index, dtype, E, N, needs_grad)


def resolve_backend(backend: str = "auto", strict: bool = False, *, device: torch.device | str = "cpu",
                    dtype: torch.dtype = torch.float32, num_bins: int = 101, num_critics: int = 2,
                    needs_grad: bool = False, rows: int | None = None) -> Decision:
    """Decide (once per configuration) which backend runs; log and count a fallback the first time it happens.

    Args:
        backend: "auto" (the Triton kernel where it can run, else torch), "torch" or "triton".
        strict: raise BackendUnavailable instead of falling back.
        device, dtype, num_bins, num_critics: the input configuration (device of the tensors, log-prob dtype, N, E).
        needs_grad: grad mode is on and an input requires grad (the kernel is forward-only).
        rows: the B rows of the calls (e.g. the update's batch): auto then follows the measured order of B's size
            band (shared_spec/dispatch.py); None: the fixed order.

    Returns:
        The Decision (requested, backend that runs, reason).
    """
    DISPATCHER.check_request(backend, strict)
    device = device if isinstance(device, torch.device) else torch.device(device)
    return DISPATCHER.decide(backend, strict, _config(device, dtype, int(num_critics), int(num_bins),
                                                      bool(needs_grad)), None if rows is None else int(rows))


def _validate(args: tuple, min_v: object, max_v: object) -> tuple[torch.device, torch.dtype, int, int]:
    """Every metadata check (no device sync); returns (device, log-prob dtype, E, N) of these inputs."""
    for name, x in zip(_ARG_NAMES, args, strict=True):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if not x.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    dev = args[1].device
    for name, x in zip(_ARG_NAMES, args, strict=True):
        if x.device != dev:
            raise ValueError(f"{name} must be on the same device as next_log_probs ({dev}), got {x.device}")
    if args[1].dtype not in _LOG_PROB_DTYPES:
        raise TypeError(f"next_log_probs must be float32, bfloat16, float16 or float64, got {args[1].dtype}")
    E, _, N = check_shapes(args[0].shape, args[1].shape, args[2].shape, args[3].shape, args[4].shape)
    validate_support(N, min_v, max_v)
    return dev, args[1].dtype, E, N


# Validated input signatures -> (device, dtype, E, N), so a repeat call costs one dict lookup (eager calls only).
_SIGNATURES: dict[tuple, tuple[torch.device, torch.dtype, int, int]] = {}
_MAX_SIGNATURES = 256


def _checked(args: tuple, min_v: object, max_v: object) -> tuple[torch.device, torch.dtype, int, int]:
    """`_validate`, cached per signature: the type, shape, dtype and device of each tensor and the support."""
    q, lp, r, d, s = args
    try:
        sig = (type(q), q.shape, q.dtype, q.device, type(lp), lp.shape, lp.dtype, lp.device,
               type(r), r.shape, r.dtype, r.device, type(d), d.shape, d.dtype, d.device,
               type(s), s.shape, s.dtype, s.device, type(min_v), min_v, type(max_v), max_v)
        hit = _SIGNATURES.get(sig)
    except (AttributeError, TypeError):  # not a tensor, or an unhashable bound: the full checks name the argument
        return _validate(args, min_v, max_v)
    if hit is None:
        hit = _validate(args, min_v, max_v)
        if len(_SIGNATURES) >= _MAX_SIGNATURES:
            _SIGNATURES.clear()
        _SIGNATURES[sig] = hit
    return hit


# Eager plans: per call signature, what a repeat call runs. The signature is everything the checks, the decision and
# the launch read of the call: each tensor's type, shape, strides, dtype, device, address modulo 16 (what Triton
# specialises on) and whether it requires grad, the support bounds with their types, the request and the grad mode. A
# plan is (backend, the registry entry it was built for, the kernel's fast launcher or None, two floats): with the fast
# launcher, the support's fp32 scalars (min_v, 1 / Delta), which it passes to the kernel; else the bounds as floats,
# passed to the entry. A plan is made only after a call of its signature passed every check and its decision (a
# strict request that would fall back raises every time: it never gets a plan), and is used only while the registry
# still holds its entry (tests and the benchmark harness wrap entries). `reset_dispatch` forgets every plan.
#
# The signature is read in two parts: reading its ~40 fields in Python cost 10.1 of the op's 25.6 us per call on the
# H200. The dict key holds the addresses modulo 16, the bounds, the request and the grad mode. Each key holds up to
# _MAX_BUCKET (check, plan) entries, newest first; a call runs the first plan whose check accepts its five tensors.
# The check (`_tensor_check`) compares each tensor's exact Python type, device, dtype, requires_grad, sizes and
# strides, read on every call (in-place resizes and restrides are seen: no tensor identity is cached): for plain
# tensors, dynamo's C++ tensor guard (the device as its dispatch key set, under the thread's dispatch state, and its
# index), ~0.4 us for the five tensors against ~2.5 us in Python; else the same fields read in Python.
_PLANS: dict[tuple, tuple[tuple[Callable[..., bool], tuple], ...]] = {}
_MAX_PLANS = 256  # entries over all keys
_MAX_BUCKET = 8  # entries per key: a call runs at most this many checks
DISPATCHER.add_reset_hook(_PLANS.clear)
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


def _tensor_fields(q, lp, r, d, s) -> tuple:
    """What a plan's check compares, in Python: each tensor's type, shape, strides, dtype, device, requires_grad and
    negative bit (the C++ guard sees the bit in the dispatch key set)."""
    return (type(q), q.shape, q.stride(), q.dtype, q.device, q.requires_grad, q.is_neg(),
            type(lp), lp.shape, lp.stride(), lp.dtype, lp.device, lp.requires_grad, lp.is_neg(),
            type(r), r.shape, r.stride(), r.dtype, r.device, r.requires_grad, r.is_neg(),
            type(d), d.shape, d.stride(), d.dtype, d.device, d.requires_grad, d.is_neg(),
            type(s), s.shape, s.stride(), s.dtype, s.device, s.requires_grad, s.is_neg())


def _python_check(args: tuple) -> Callable[..., bool]:
    """A plan's check in Python: whether five tensors have `args`' `_tensor_fields`."""
    fields = _tensor_fields(*args)
    return lambda q, lp, r, d, s: _tensor_fields(q, lp, r, d, s) == fields


def _guard_rejects_changes(guards: Any) -> bool:
    """Whether this torch's TensorGuards accepts new tensors like the ones it was built on and rejects each change a
    plan must see (sizes, strides, dtype, device type, requires_grad, Python type); on CPU and meta tensors."""
    a, b = torch.zeros(2, 3), torch.zeros(3)
    check = guards(a, b, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
    changed = [(torch.zeros(2, 4), b), (a, torch.zeros(3, 1)), (torch.zeros(3, 2).t(), b), (a, torch.zeros(6)[::2]),
               (a.double(), b), (a, b.to("meta")), (a, torch.zeros(3, requires_grad=True)),
               (torch.nn.Parameter(a, requires_grad=False), b)]
    return check(torch.ones(2, 3), torch.ones(3)) is True and not any(check(*c) for c in changed)


try:  # torch._C._dynamo.guards.TensorGuards (torch.compile's guard on input tensors); else the Python check
    _TENSOR_GUARDS: Any = torch._C._dynamo.guards.TensorGuards
    if not _guard_rejects_changes(_TENSOR_GUARDS):
        _TENSOR_GUARDS = None
except Exception:
    _TENSOR_GUARDS = None


def _tensor_check(args: tuple) -> Callable[..., bool] | None:
    """The check of a new plan for these five validated tensors (None if their fields cannot be read).

    The C++ guard only for five distinct plain torch.Tensor objects: it rejects a repeated object, and it reads the
    strides of every input of its tensors' Python type, where a C++ error aborts the process. Plain tensors with a
    readable address have strides, except nested ones, which `categorical_td_target` keeps from the checks; a
    subclass (its strides may be its own Python) gets the Python check, which also holds its type (the guard holds
    only a type's address)."""
    try:
        if _TENSOR_GUARDS is not None and all(type(x) is torch.Tensor for x in args):
            check = _TENSOR_GUARDS(*args, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
            if check(*args):
                return check
        return _python_check(args)
    except Exception:
        return None


def categorical_td_target(
    next_qs: torch.Tensor,
    next_log_probs: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    next_alpha_log_pi: torch.Tensor,
    *,
    gamma: float,
    min_v: float = -5.0,
    max_v: float = 5.0,
    backend: str = "auto",
    strict: bool = False,
) -> torch.Tensor:
    """FlashSAC's categorical TD target (Bellemare et al. 2017 projection; FlashSAC, arXiv 2604.04539).

    Selects, per row, the target critic with the smaller mean (ties -> the first), moves its atoms to
    clip(r + gamma (1 - d) (z_j - alpha log pi), min_v, max_v) and splits each atom's mass linearly between the two
    neighbouring atoms. See shared_spec/SPEC.md for the exact fp32 operation order and the NaN policy.

    Args:
        next_qs: (E, B) mean value of each target critic at (s', a'); strided views are fine (any input; a
            negative-bit view, `torch._neg_view`, is materialised first).
        next_log_probs: (E, B, N) log-probabilities (float32, bfloat16, float16 or float64).
        reward: (B,) or (B, 1) normalised n-step reward.
        terminated: (B,) or (B, 1) termination flag in {0, 1}.
        next_alpha_log_pi: (B,) or (B, 1) alpha * log pi(a'|s').
        gamma: gamma ** n_step, a Python float in [0, 1].
        min_v, max_v: support bounds.
        backend: "auto", "torch" or "triton".
        strict: raise BackendUnavailable instead of falling back to the torch reference (and re-raise the kernel's
            failure at its first launch).

    Returns:
        (B, N) float32 target probabilities (no gradient).
    """
    q, lp, r, d, s = next_qs, next_log_probs, reward, terminated, next_alpha_log_pi
    if _is_compiling():  # dynamo traces the checks themselves (no cache lookups in the graph)
        return _call(q, lp, r, d, s, gamma, min_v, max_v, backend, strict, None, True)
    try:  # eager: one dict lookup, then the tensors' checks (see _PLANS)
        key = (q.data_ptr() & 15, lp.data_ptr() & 15, r.data_ptr() & 15, d.data_ptr() & 15, s.data_ptr() & 15,
               type(min_v), min_v, type(max_v), max_v, backend, type(strict), strict, _grad_enabled())
        if q.is_nested or lp.is_nested or r.is_nested or d.is_nested or s.is_nested:
            raise TypeError  # no strides (the C++ check would abort): the full checks reject it
        plan = None
        for entry in _PLANS.get(key, ()):  # (check, plan), newest first
            if entry[0](q, lp, r, d, s):
                plan = entry[1]
                break
    except Exception:  # not a tensor, an unhashable bound, no storage: the full checks name the argument
        key = plan = None
    if plan is not None:
        name, impl, fast, a, b = plan
        if IMPLEMENTATIONS.get(name) is impl:
            if type(gamma) is not float or not 0.0 <= gamma <= 1.0:  # checked on every call (cheap)
                gamma = check_gamma(gamma)
            if fast is not None:
                return fast(q, lp, r, d, s, gamma, a, b)
            return impl(q, lp, r, d, s, gamma, a, b)
    return _call(q, lp, r, d, s, gamma, min_v, max_v, backend, strict, key, False)


def _call(q, lp, r, d, s, gamma, min_v, max_v, backend, strict, key: tuple | None, traced: bool) -> torch.Tensor:
    """Every check, the decision and the call, in that order; stores the call's plan under `key` (if not None)."""
    args = (q, lp, r, d, s)
    DISPATCHER.check_request(backend, strict)
    if traced:
        device, dtype, E, N = _validate(args, min_v, max_v)
    else:  # eager: the metadata checks are cached per input signature
        device, dtype, E, N = _checked(args, min_v, max_v)
    if type(gamma) is not float or not 0.0 <= gamma <= 1.0:  # checked on every call (cheap)
        check_gamma(gamma)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or lp.requires_grad or r.requires_grad
                                              or d.requires_grad or s.requires_grad)
    rows = lp.shape[1]  # B: auto's measured band
    decision = DISPATCHER.decide(backend, strict, _config(device, dtype, E, N, needs_grad), rows)  # request checked
    name = decision.backend
    impl = IMPLEMENTATIONS[name]
    lo, hi = float(min_v), float(max_v)
    if not traced and any(x.is_neg() for x in args):
        # A negative-bit view (torch._neg_view, or what conj/neg ops leave) stores -x: the kernel reads raw memory,
        # so it gets the values materialised. Such calls get no plan (rare; every call of them comes here).
        args, key = tuple(x.resolve_neg() for x in args), None
    check = _tensor_check(args) if key is not None else None  # the tensors as this call found them
    config = _config(device, dtype, E, N, needs_grad)
    eager = not traced and not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())
    # The first eager launch per launch configuration (B picks the tiles) is checked: a compile or launch failure
    # falls back to the reference for this configuration (logged, counted; strict re-raises it).
    out = DISPATCHER.call(decision, config, strict, lambda: impl(*args, float(gamma), lo, hi),
                          lambda: IMPLEMENTATIONS["torch"](*args, float(gamma), lo, hi), eager=eager,
                          variant=_launch_variant(args[1]) if eager else (), sync=_sync)
    if DISPATCHER.decide(backend, False, config, rows).backend != name:  # the kernel failed at its first launch
        return out
    if check is not None:
        fast = _EAGER_LAUNCHER(*args) if impl is _TRITON_IMPL and _EAGER_LAUNCHER is not None else None
        if fast is not None:  # the kernel ran through its fast path's first launch: later calls call it directly
            lo, hi = support_constants(N, lo, hi)
        entry = (check, (name, impl, fast, lo, hi))
        if sum(map(len, _PLANS.values())) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = (entry, *_PLANS.get(key, ())[:_MAX_BUCKET - 1])
    return out


def _launch_variant(lp: torch.Tensor) -> tuple:
    """What picks a separately compiled kernel for these log-probs besides the configuration: the launch
    configuration for their B rows, and their strides."""
    E, B, N = lp.shape
    return (tuple(sorted(kernel_config(B, N, False).items())), lp.stride())


def _sync(out: torch.Tensor) -> None:
    """Wait for a first launch on a CUDA device, so that an asynchronous launch error is raised here."""
    if out.is_cuda:
        torch.cuda.synchronize(out.device)


def backend_info(next_log_probs: torch.Tensor | None = None, backend: str = "auto", *,
                 needs_grad: bool = False) -> dict[str, Any]:
    """Which backends can run on this machine's default device and why; with inputs, also the decision for them.

    Never decides, logs or counts a fallback: it reports. Same structure as `jax_impl.backend_info`.

    Args:
        next_log_probs: optional (E, B, N) log-probs; their device, dtype, E and N form the configuration.
        backend: the request the decision is reported for.
        needs_grad: whether the call would need gradients (the kernel is forward-only).

    Returns:
        {"device": the default device ("cuda:0" or "cpu"), "probe": the configuration "backends" was checked for
         (float32 log-probs, E = 2, N = 101 on that device), "backends": {"torch", "triton"}: "available" or the
         reason it cannot run, "decision": None without inputs, else {"requested", "backend", "reason", "config"},
         "decisions": every cached decision, "fallback_count": real fallbacks so far, "interpret": whether the
         Triton kernel runs in the interpreter (TRITON_INTERPRET=1)}.
    """
    default = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    config = None
    if next_log_probs is not None:
        if not isinstance(next_log_probs, torch.Tensor) or next_log_probs.dim() != 3:
            raise ValueError(f"next_log_probs must be an (E, B, N) torch.Tensor, got {type(next_log_probs).__name__}"
                             f" {tuple(getattr(next_log_probs, 'shape', ()))}")
        E, rows, N = next_log_probs.shape
        config = _config(next_log_probs.device, next_log_probs.dtype, E, N, bool(needs_grad))
    ops = _kernel_module()
    return DISPATCHER.info(str(default), _config(default, torch.float32, 2, 101, False), config, backend,
                           rows=None if config is None else int(rows),
                           interpret=bool(ops is not None and ops.INTERPRET))


def _kernel_module() -> Any:
    """torch_impl.ops if the Triton backend imported, else None."""
    if "triton" not in IMPLEMENTATIONS:
        return None
    from torch_impl import ops

    return ops


def dispatch_stats() -> dict[str, int]:
    """Counters for logging: {"fallback_count": number of configurations that fell back}."""
    return DISPATCHER.stats()


def reset_dispatch() -> None:
    """Forget cached decisions, eager plans, validated signatures and counters (tests)."""
    DISPATCHER.reset()  # clears _PLANS too (a reset hook: the plans hold decisions)
    _SIGNATURES.clear()
