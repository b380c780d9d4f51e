"""Backend dispatch for the JAX categorical TD target; decided in Python, outside jit, and logged once."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.reference import categorical_td_target_reference
from shared_spec.reference import check_gamma, check_shapes
from shared_spec.support import validate_support

__all__ = ["BACKENDS", "KERNEL_DTYPES", "BackendUnavailable", "Decision", "backend_info", "categorical_td_target",
           "dispatch_stats", "reset_dispatch", "resolve_backend"]

log = logging.getLogger("flashsac.jax_impl")

BACKENDS = ("auto", "jax", "pallas")
KERNEL_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
_ARG_NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")


class BackendUnavailable(RuntimeError):
    """A requested kernel backend cannot run here (raised in strict mode instead of a fallback)."""


@dataclass(frozen=True)
class Decision:
    """Which backend runs for one input configuration, and why."""

    requested: str
    backend: str
    reason: str


# name -> callable(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, gamma, min_v, max_v)
IMPLEMENTATIONS: dict[str, Callable[..., jax.Array]] = {"jax": categorical_td_target_reference}
# name -> callable(key) returning None if the backend can run this configuration, else the reason it cannot.
GATES: dict[str, Callable[[tuple], str | None]] = {}
IMPORT_ERRORS: dict[str, str] = {}
_decisions: dict[tuple, Decision] = {}
_stats = {"fallback_count": 0}


def _gate_reason(name: str, key: tuple) -> str | None:
    if name not in IMPLEMENTATIONS:
        return f"the {name} backend failed to import ({IMPORT_ERRORS.get(name, 'not registered')})"
    gate = GATES.get(name)
    return gate(key) if gate is not None else None


def _register_pallas() -> None:
    """Register the fused Pallas kernel; an import failure becomes the fallback reason (IMPORT_ERRORS)."""
    try:
        from jax_impl.pallas_kernel import categorical_td_target_pallas, pallas_gate
    except Exception as exc:  # ImportError, or a Pallas/Triton module that fails to initialise
        IMPORT_ERRORS["pallas"] = f"{type(exc).__name__}: {exc}"
        return
    IMPLEMENTATIONS["pallas"] = categorical_td_target_pallas
    GATES["pallas"] = pallas_gate


_register_pallas()


def resolve_backend(backend: str = "auto", strict: bool = False, *, num_bins: int = 101, num_critics: int = 2,
                    dtype=jnp.float32, platform: str | None = None) -> str:
    """Decide (once per configuration, in Python, outside jit) which backend runs: "jax" or "pallas".

    Args:
        backend: "auto" (the Pallas kernel where it can run, else jax), "jax" or "pallas".
        strict: raise BackendUnavailable instead of falling back.
        num_bins, num_critics, dtype: N, E and the log-prob dtype.
        platform: the JAX platform that will run the op ("cpu", "gpu", ...); default jax.default_backend().

    Returns:
        The backend name that runs. The first fallback for a configuration is logged with its reason and counted.
    """
    return _decide(backend, strict, num_bins, num_critics, dtype, platform).backend


def _decide(backend, strict, num_bins, num_critics, dtype, platform) -> Decision:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not isinstance(strict, bool):
        raise TypeError(f"strict must be a bool, got {type(strict).__name__} {strict!r}")
    platform = platform or jax.default_backend()
    key = (backend, strict, platform, jnp.dtype(dtype).name, int(num_critics), int(num_bins))
    hit = _decisions.get(key)
    if hit is not None:
        return hit
    if backend == "jax":
        decision = Decision(backend, "jax", "requested")
    else:
        reason = _gate_reason("pallas", key[2:])
        if reason is None:
            decision = Decision(backend, "pallas", "requested" if backend == "pallas" else "auto: kernel available")
        elif strict:
            raise BackendUnavailable(f"backend={backend!r} with strict=True: the pallas kernel cannot run: {reason}")
        else:
            decision = Decision(backend, "jax", f"fallback from pallas: {reason}")
            _stats["fallback_count"] += 1
            (log.warning if backend == "pallas" else log.info)(
                "categorical_td_target: %s (platform=%s, dtype=%s, E=%d, N=%d); using the jax reference",
                decision.reason, platform, key[3], num_critics, num_bins)
    _decisions[key] = decision
    return decision


def _validate(args: tuple, gamma: object, min_v: object, max_v: object) -> None:
    for name, x in zip(_ARG_NAMES, args, strict=True):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{name} must be an array, got {type(x).__name__}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{name} must be a floating-point array, got dtype {x.dtype}")
    if jnp.dtype(args[1].dtype) not in [jnp.dtype(t) for t in KERNEL_DTYPES]:
        raise TypeError(f"next_log_probs must be float32, bfloat16 or float16, got {args[1].dtype}")
    check_shapes(*(tuple(x.shape) for x in args))
    validate_support(args[1].shape[2], min_v, max_v)
    if not isinstance(gamma, jax.core.Tracer):
        if isinstance(gamma, jax.Array | np.ndarray):
            if gamma.shape != ():
                raise ValueError(f"gamma must be a scalar, got shape {gamma.shape}")
            gamma = float(gamma)
        check_gamma(gamma)
    devices = {name: x.devices() for name, x in zip(_ARG_NAMES, args, strict=True)
               if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer)}
    want = devices.get("next_log_probs")
    for name, devs in devices.items():
        if want is not None and devs != want:
            raise ValueError(f"{name} must be on the same device as next_log_probs ({want}), got {devs}")


def categorical_td_target(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, *, gamma,
                          min_v: float = -5.0, max_v: float = 5.0, backend: str = "auto",
                          strict: bool = False) -> jax.Array:
    """FlashSAC's categorical TD target in JAX (Bellemare et al. 2017 projection; FlashSAC, arXiv 2604.04539).

    Usable inside `jax.jit` (the backend is chosen in Python at trace time; pass the result of `resolve_backend`
    to choose it once, outside jit). See shared_spec/SPEC.md for the operation order and the NaN policy.

    Args:
        next_qs: (E, B). next_log_probs: (E, B, N) float32/bfloat16/float16.
        reward, terminated, next_alpha_log_pi: (B,) or (B, 1).
        gamma: gamma ** n_step (Python float or traced scalar; changing it never recompiles the kernel).
        min_v, max_v: static support bounds.
        backend: "auto", "jax" or "pallas".
        strict: raise BackendUnavailable instead of falling back to the jax reference.

    Returns:
        (B, N) float32 target probabilities under stop_gradient.
    """
    args = (next_qs, next_log_probs, reward, terminated, next_alpha_log_pi)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    _validate(args, gamma, min_v, max_v)
    E, _, N = next_log_probs.shape
    name = resolve_backend(backend, strict, num_bins=N, num_critics=E, dtype=next_log_probs.dtype)
    if isinstance(gamma, jax.core.Tracer) or name != "jax":
        return IMPLEMENTATIONS[name](*args, gamma, float(min_v), float(max_v))
    return _jitted_reference(*args, jnp.float32(gamma), float(min_v), float(max_v))


_jitted_reference = jax.jit(categorical_td_target_reference, static_argnums=(6, 7))


def backend_info(num_bins: int = 101, num_critics: int = 2, dtype=jnp.float32, backend: str = "auto") -> dict:
    """Which backends can run, which one runs for this configuration, and why.

    Returns:
        {"platform", "backends": {name: "available" or the reason it cannot run}, "pallas_interpret": whether the
         Pallas kernel runs in interpret mode (FLASHSAC_PALLAS_INTERPRET=1), "decision", "decisions",
         "fallback_count"}.
    """
    platform = jax.default_backend()
    key = (platform, jnp.dtype(dtype).name, num_critics, num_bins)
    d = _decide(backend, False, num_bins, num_critics, dtype, platform)
    return {"platform": platform,
            "backends": {"jax": "available", "pallas": _gate_reason("pallas", key) or "available"},
            "pallas_interpret": os.environ.get("FLASHSAC_PALLAS_INTERPRET", "0") == "1",
            "decision": dict(d.__dict__),
            "decisions": [dict(v.__dict__, key=str(k)) for k, v in _decisions.items()],
            "fallback_count": _stats["fallback_count"]}


def dispatch_stats() -> dict:
    """Counters for logging: {"fallback_count": number of configurations that fell back}."""
    return {"fallback_count": _stats["fallback_count"]}


def reset_dispatch() -> None:
    """Forget cached decisions and counters (tests)."""
    _decisions.clear()
    _stats["fallback_count"] = 0
