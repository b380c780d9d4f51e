"""Backend dispatch for the torch categorical TD target: validation, backend choice, one-time logged fallback."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from shared_spec.reference import check_gamma, check_shapes
from shared_spec.support import validate_support
from torch_impl.reference import categorical_td_target_reference, compile_safe_cache

__all__ = ["BACKENDS", "KERNEL_DTYPES", "BackendUnavailable", "Decision", "backend_info", "categorical_td_target",
           "dispatch_stats", "reset_dispatch", "resolve_backend"]

log = logging.getLogger("flashsac.torch_impl")

BACKENDS = ("auto", "torch", "triton")
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_ARG_NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")


class BackendUnavailable(RuntimeError):
    """A requested kernel backend cannot run these inputs here (raised in strict mode instead of a fallback)."""


@dataclass(frozen=True)
class Decision:
    """Which backend runs for one input configuration, and why."""

    requested: str
    backend: str
    reason: str


# Registry of runnable implementations (plain module-level dicts, filled at import; see torch_impl/ops.py).
IMPLEMENTATIONS: dict[str, Callable[..., torch.Tensor]] = {"torch": categorical_td_target_reference}
# name -> callable(key) returning None if the backend can run inputs with this key, else the reason it cannot.
GATES: dict[str, Callable[[tuple], str | None]] = {}
_decisions: dict[tuple, Decision] = {}
_stats = {"fallback_count": 0}


def _gate_reason(name: str, key: tuple) -> str | None:
    if name not in IMPLEMENTATIONS:
        return f"the {name} backend failed to import ({_IMPORT_ERRORS.get(name, 'not registered')})"
    gate = GATES.get(name)
    return gate(key) if gate is not None else None


_IMPORT_ERRORS: dict[str, str] = {}


def _register_triton() -> None:
    try:
        from torch_impl.ops import categorical_td_target_triton, triton_gate
    except Exception as exc:  # ImportError, or a triton that fails to initialise: recorded as the fallback reason
        _IMPORT_ERRORS["triton"] = f"{type(exc).__name__}: {exc}"
        return
    IMPLEMENTATIONS["triton"] = categorical_td_target_triton
    GATES["triton"] = triton_gate


def _config_key(device: torch.device, dtype: torch.dtype, E: int, N: int, needs_grad: bool) -> tuple:
    return (device.type, device.index, dtype, E, N, needs_grad)


def resolve_backend(backend: str = "auto", strict: bool = False, *, device: torch.device | str = "cpu",
                    dtype: torch.dtype = torch.float32, num_bins: int = 101, num_critics: int = 2,
                    needs_grad: bool = False) -> Decision:
    """Decide (once per configuration) which backend runs; log and count a fallback the first time it happens.

    Args:
        backend: "auto" (the Triton kernel where it can run, else torch), "torch" or "triton".
        strict: raise BackendUnavailable instead of falling back.
        device, dtype, num_bins, num_critics: the input configuration (device of the tensors, log-prob dtype, N, E).
        needs_grad: grad mode is on and an input requires grad (the kernel is forward-only).

    Returns:
        The Decision (requested, backend that runs, reason).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not isinstance(strict, bool):
        raise TypeError(f"strict must be a bool, got {type(strict).__name__} {strict!r}")
    key = (backend, strict) + _config_key(torch.device(device), dtype, num_critics, num_bins, needs_grad)
    hit = _decisions.get(key)
    if hit is not None:
        return hit
    if backend == "torch":
        decision = Decision(backend, "torch", "requested")
    else:
        reason = _gate_reason("triton", key[2:])
        if reason is None:
            decision = Decision(backend, "triton", "requested" if backend == "triton" else "auto: kernel available")
        elif strict:
            raise BackendUnavailable(f"backend={backend!r} with strict=True: the triton kernel cannot run: {reason}")
        else:
            decision = Decision(backend, "torch", f"fallback from triton: {reason}")
            _stats["fallback_count"] += 1
            (log.warning if backend == "triton" else log.info)(
                "categorical_td_target: %s (device=%s, dtype=%s, E=%d, N=%d); using the torch reference",
                decision.reason, device, dtype, num_critics, num_bins)
    _decisions[key] = decision
    return decision


_register_triton()


def _validate(args: tuple, gamma: object, min_v: object, max_v: object) -> None:
    # Metadata only (no sync): this runs before every call, so it is kept lean.
    dev = args[1].device if isinstance(args[1], torch.Tensor) else None
    for name, x in zip(_ARG_NAMES, args, strict=True):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if not x.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
        if x.device != dev:
            raise ValueError(f"{name} must be on the same device as next_log_probs ({dev}), got {x.device}")
    if args[1].dtype not in _LOG_PROB_DTYPES:
        raise TypeError(f"next_log_probs must be float32, bfloat16, float16 or float64, got {args[1].dtype}")
    check_shapes(args[0].shape, args[1].shape, args[2].shape, args[3].shape, args[4].shape)
    _check_support(args[1].shape[2], min_v, max_v)
    if type(gamma) is not float or not 0.0 <= gamma <= 1.0:
        check_gamma(gamma)


_LOG_PROB_DTYPES = KERNEL_DTYPES + (torch.float64,)
_check_support = compile_safe_cache(validate_support)


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
        next_qs: (E, B) mean value of each target critic at (s', a'); strided views are fine.
        next_log_probs: (E, B, N) log-probabilities (float32, bfloat16, float16 or float64).
        reward: (B,) or (B, 1) normalised n-step reward.
        terminated: (B,) or (B, 1) termination flag in {0, 1}.
        next_alpha_log_pi: (B,) or (B, 1) alpha * log pi(a'|s').
        gamma: gamma ** n_step, a Python float in [0, 1].
        min_v, max_v: support bounds.
        backend: "auto", "torch" or "triton".
        strict: raise BackendUnavailable instead of falling back to the torch reference.

    Returns:
        (B, N) float32 target probabilities (no gradient).
    """
    args = (next_qs, next_log_probs, reward, terminated, next_alpha_log_pi)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    _validate(args, gamma, min_v, max_v)
    E, _, N = next_log_probs.shape
    needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in args)
    decision = resolve_backend(backend, strict, device=next_log_probs.device, dtype=next_log_probs.dtype,
                               num_bins=N, num_critics=E, needs_grad=needs_grad)
    return IMPLEMENTATIONS[decision.backend](*args, float(gamma), float(min_v), float(max_v))


def backend_info(next_log_probs: torch.Tensor | None = None, backend: str = "auto", *,
                 needs_grad: bool = False) -> dict:
    """Which backends are importable, which one runs for inputs like `next_log_probs`, and why.

    Returns:
        {"backends": {name: availability reason or "available"}, "decision": Decision as dict or None,
         "decisions": every cached decision, "fallback_count": int}.
    """
    probe = _config_key(torch.device("cuda" if torch.cuda.is_available() else "cpu"), torch.float32, 2, 101, False)
    info = {"backends": {"torch": "available",
                         "triton": _gate_reason("triton", probe) or "available"},
            "decision": None,
            "decisions": [d.__dict__ | {"key": str(k)} for k, d in _decisions.items()],
            "fallback_count": _stats["fallback_count"]}
    if next_log_probs is not None:
        E, _, N = next_log_probs.shape
        d = resolve_backend(backend, False, device=next_log_probs.device, dtype=next_log_probs.dtype, num_bins=N,
                            num_critics=E, needs_grad=needs_grad)
        info["decision"] = dict(d.__dict__)
    return info


def dispatch_stats() -> dict:
    """Counters for logging: {"fallback_count": number of configurations that fell back}."""
    return {"fallback_count": _stats["fallback_count"]}


def reset_dispatch() -> None:
    """Forget cached decisions and counters (tests)."""
    _decisions.clear()
    _stats["fallback_count"] = 0
