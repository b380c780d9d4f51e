"""Backend dispatch for the JAX categorical TD target: JAX validation on top of the shared dispatcher.

Backends: "jax" (the jnp reference, always available) and three kernel backends, which `auto` tries among those with
a passing GPU validation entry (shared_spec/dispatch.py: the packaged and the user's validation files), in the
measured order of the call's size band (shared_spec/data/kernel_auto_order.json) or, without one, in AUTO_ORDER:
- "pallas": the Pallas kernel lowered through Pallas's Triton backend (jax_impl/pallas_kernel.py), while JAX ships
  that lowering (jax_impl/ops.py gates it on the jax version and on the lowering's presence);
- "triton": the Triton kernel of triton_kernels/ (the source the torch backend launches) through jaxlib's Triton
  kernel-call handler, an XLA custom call (jax_impl/triton_backend.py);
- "mosaic": the Pallas kernel on the Mosaic GPU backend (jax_impl/mosaic_kernel.py; Hopper and newer, with the Mosaic
  GPU runtime of the JAX CUDA plugin; jax_impl/mosaic_ops.py gates it).

AUTO_ORDER, the order where no measured band applies (B unknown, or no bands file), puts "pallas" first: it is the
kernel measured inside jitted programs on the H200 (its kernel time is within 0.87x-1.04x of the Triton kernel's from
B = 512 to 1M); "triton" runs that Triton kernel's own binary; "mosaic" comes last: one row per warpgroup, its row sums
reduced across four warps (docs/kernel_notes.md, "Speed notes"). `python -m bench kernel-speed --record-order`
measures them and writes the bands.

The backend is decided in Python (outside jit, or at trace time), once per configuration, and a fallback is logged
once; pass the result of `resolve_backend` into jitted code to decide it once, up front. Each kernel's gate runs it
once eagerly on a small input per configuration (a compile or launch failure there is a fallback with the exception
as its reason); an eager call's first launch per input signature is also checked (`Dispatcher.call`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.reference import categorical_td_target_reference
from shared_spec.dispatch import KERNEL_BACKENDS, REFERENCE_BACKENDS, BackendUnavailable, Decision, Dispatcher
from shared_spec.reference import check_gamma, check_shapes
from shared_spec.support import validate_support

__all__ = ["BACKENDS", "DISPATCHER", "KERNEL_DTYPES", "BackendUnavailable", "Decision", "backend_info",
           "categorical_td_target", "dispatch_stats", "reset_dispatch", "resolve_backend"]

KERNEL_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
_KERNEL_DTYPE_NAMES = tuple(jnp.dtype(t).name for t in KERNEL_DTYPES)
_ARG_NAMES = ("next_qs", "next_log_probs", "reward", "terminated", "next_alpha_log_pi")
_Tracer = jax.core.Tracer


def _describe(config: tuple) -> str:
    platform, dtype_name, E, N = config
    return f"platform={platform}, dtype={dtype_name}, E={E}, N={N}"


KERNELS = KERNEL_BACKENDS["jax"]  # ("triton", "pallas", "mosaic")
AUTO_ORDER = ("pallas", "triton", "mosaic")  # auto's preference among validated kernels that can run (see above)

# A configuration is (platform, log-prob dtype name, E, N): what the kernels' gates decide on.
DISPATCHER = Dispatcher(framework="jax", reference=REFERENCE_BACKENDS["jax"], kernels=KERNELS, auto_order=AUTO_ORDER,
                        reference_impl=categorical_td_target_reference, logger="flashsac.jax_impl",
                        describe=_describe)
BACKENDS = DISPATCHER.backends
# The registries (plain dicts; tests and the benchmark harness wrap or replace entries).
IMPLEMENTATIONS: dict[str, Callable[..., jax.Array]] = DISPATCHER.implementations
GATES = DISPATCHER.gates
IMPORT_ERRORS = DISPATCHER.import_errors


def _register_pallas() -> None:
    """Register the fused Pallas kernel; its lowering's absence or an import failure becomes the fallback reason."""
    from jax_impl.lowering import pallas_triton_missing

    missing = pallas_triton_missing()
    if missing is not None:
        DISPATCHER.register_import_error("pallas", missing)
        return
    try:
        from jax_impl.ops import categorical_td_target_pallas, pallas_gate
    except Exception as exc:  # ImportError, or a Pallas/Triton module that fails to initialise
        DISPATCHER.register_import_error("pallas", exc)
        return
    DISPATCHER.register("pallas", categorical_td_target_pallas, pallas_gate)


def _register_lazy(name: str, module: str, impl: str, gate: str) -> None:
    """Register kernel backend `name` whose module is imported at its first gate or call (the triton backend imports
    triton and, interpreted, torch): an import failure then becomes that gate's reason."""
    state: dict[str, Any] = {}

    def load() -> Any:
        if "module" not in state:
            try:
                state["module"] = importlib.import_module(module)
            except Exception as exc:  # ImportError, or a module that fails to initialise
                state["module"] = None
                why = " ".join(str(exc).split())[:300]
                state["error"] = f"the {name} backend failed to import ({type(exc).__name__}: {why})"
        return state["module"]

    def lazy_gate(config: tuple) -> str | None:
        mod = load()
        return state["error"] if mod is None else getattr(mod, gate)(config)

    def lazy_impl(*args, **kwargs) -> jax.Array:
        mod = load()
        if mod is None:
            raise RuntimeError(state["error"])
        return getattr(mod, impl)(*args, **kwargs)

    DISPATCHER.register(name, lazy_impl, lazy_gate)


_register_pallas()
_register_lazy("triton", "jax_impl.triton_backend", "categorical_td_target_triton", "triton_gate")
_register_lazy("mosaic", "jax_impl.mosaic_ops", "categorical_td_target_mosaic", "mosaic_gate")


def resolve_backend(backend: str = "auto", strict: bool = False, *, num_bins: int = 101, num_critics: int = 2,
                    dtype: Any = jnp.float32, platform: str | None = None, rows: int | None = None) -> Decision:
    """Decide (once per configuration, in Python, outside jit) which backend runs: "jax" or a kernel.

    Args:
        backend: "auto" (the first validated kernel of AUTO_ORDER that can run, else jax), "jax", "triton",
            "pallas" or "mosaic".
        strict: raise BackendUnavailable instead of falling back.
        num_bins, num_critics, dtype: N, E and the log-prob dtype.
        platform: the JAX platform that will run the op ("cpu", "gpu", ...); default jax.default_backend().
        rows: the B rows of the calls (e.g. the update's batch): auto then follows the measured order of B's size
            band (shared_spec/dispatch.py); None: the fixed order AUTO_ORDER.

    Returns:
        The Decision (requested, backend that runs, reason). The first fallback for a configuration is logged with
        its reason and counted.
    """
    DISPATCHER.check_request(backend, strict)
    dtype_name = dtype if isinstance(dtype, str) else jnp.dtype(dtype).name
    config = (platform or jax.default_backend(), dtype_name, int(num_critics), int(num_bins))
    return DISPATCHER.decide(backend, strict, config, None if rows is None else int(rows))


def _platform(x: object) -> str:
    """The platform of a concrete, committed jax.Array's device; jax.default_backend() otherwise (e.g. a tracer)."""
    if isinstance(x, jax.Array) and not isinstance(x, _Tracer):
        return next(iter(x.devices())).platform
    return jax.default_backend()


def _validate(args: tuple, min_v: object, max_v: object, row_offset: object = None) -> tuple[str, str, int, int]:
    """Every shape, dtype, device and support check; returns resolve_backend's configuration for these inputs."""
    for name, x in zip(_ARG_NAMES, args, strict=True):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{name} must be an array, got {type(x).__name__}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{name} must be a floating-point array, got dtype {x.dtype}")
    dtype_name = jnp.dtype(args[1].dtype).name
    if dtype_name not in _KERNEL_DTYPE_NAMES:
        raise TypeError(f"next_log_probs must be float32, bfloat16 or float16, got {args[1].dtype}")
    E, _, N = check_shapes(*(tuple(x.shape) for x in args), row_offset=row_offset)
    validate_support(N, min_v, max_v)
    devices = {name: x.devices() for name, x in zip(_ARG_NAMES, args, strict=True)
               if isinstance(x, jax.Array) and not isinstance(x, _Tracer)}
    want = devices.get("next_log_probs")
    for name, devs in devices.items():
        if want is not None and devs != want:
            raise ValueError(f"{name} must be on the same device as next_log_probs ({want}), got {devs}")
    return _platform(args[1]), dtype_name, E, N


# Validated input signatures -> their configuration, so a repeat call costs one dict lookup.
_SIGNATURES: dict[tuple, tuple[str, str, int, int]] = {}
_MAX_SIGNATURES = 256


def _signature(args: tuple, min_v: object, max_v: object, row_offset: object = None) -> tuple | None:
    """Everything `_validate` reads, as a hashable key (the sharding stands for the devices); None if not arrays."""
    try:
        key: list = [type(min_v), min_v, type(max_v), max_v, type(row_offset), row_offset]
        for x in args:
            key += (type(x), x.shape, x.dtype, None if isinstance(x, _Tracer) else getattr(x, "sharding", None))
        return tuple(key)
    except AttributeError:  # not an array: the full validation names the argument
        return None


def _checked_config(args: tuple, min_v: object, max_v: object,
                    row_offset: object = None) -> tuple[str, str, int, int]:
    sig = _signature(args, min_v, max_v, row_offset)
    try:
        hit = _SIGNATURES.get(sig) if sig is not None else None
    except TypeError:  # an unhashable argument: the full validation names it
        sig = hit = None
    if hit is None:
        hit = _validate(args, min_v, max_v, row_offset)
        if sig is not None:
            if len(_SIGNATURES) >= _MAX_SIGNATURES:
                _SIGNATURES.clear()
            _SIGNATURES[sig] = hit
    return hit


def _check_gamma(gamma: object) -> None:
    if isinstance(gamma, _Tracer) or (type(gamma) is float and 0.0 <= gamma <= 1.0):
        return  # a traced gamma outside [0, 1] makes NaN rows (SPEC.md section 6)
    if isinstance(gamma, jax.Array | np.ndarray):
        if gamma.shape != ():
            raise ValueError(f"gamma must be a scalar, got shape {gamma.shape}")
        gamma = float(gamma)
    check_gamma(gamma)


def categorical_td_target(next_qs, next_log_probs, reward, terminated, next_alpha_log_pi, *, gamma,
                          min_v: float = -5.0, max_v: float = 5.0, backend: str = "auto",
                          strict: bool = False, row_offset: int | None = None) -> jax.Array:
    """FlashSAC's categorical TD target in JAX (Bellemare et al. 2017 projection; FlashSAC, arXiv 2604.04539).

    Usable inside `jax.jit` (the backend is chosen in Python at trace time; pass `resolve_backend(...).backend`
    to choose it once, outside jit). See shared_spec/SPEC.md for the operation order and the NaN policy.

    Args:
        next_qs: (E, B). next_log_probs: (E, B, N) float32/bfloat16/float16.
        reward, terminated, next_alpha_log_pi: (B,) or (B, 1).
        gamma: gamma ** n_step (Python float or traced scalar; changing it never recompiles the kernel).
        min_v, max_v: static support bounds.
        backend: "auto", "jax", "triton", "pallas" or "mosaic" (jax_impl/dispatch.py's module docstring).
        strict: raise BackendUnavailable instead of falling back to the jax reference (and re-raise a kernel's
            failure at its first launch).
        row_offset: None, or the row-offset form (SPEC.md section 1): a static int >= 0; next_qs (E, R) and
            next_log_probs (E, R, N) hold R >= row_offset + B rows (B = the rows of reward) and the target reads
            rows [row_offset, row_offset + B). The Pallas kernel reads them in place (no slice, hence no copy,
            before its custom call); the jnp reference slices them inside the program, where XLA fuses the slice.

    Returns:
        (B, N) float32 target probabilities under stop_gradient.
    """
    args = (next_qs, next_log_probs, reward, terminated, next_alpha_log_pi)
    DISPATCHER.check_request(backend, strict)
    # The metadata checks are cached per input signature; gamma is checked on every call (it is cheap).
    platform, dtype_name, E, N = _checked_config(args, min_v, max_v, row_offset)
    _check_gamma(gamma)
    decision = resolve_backend(backend, strict, num_bins=N, num_critics=E, dtype=dtype_name, platform=platform,
                               rows=int(args[2].shape[0]))
    # The row offset is passed on only when given, so an implementation registered with the five-array signature
    # (a test's or the harness's wrapper) still serves the plain form.
    rows = {} if row_offset is None else {"row_offset": int(row_offset)}
    lo, hi = float(min_v), float(max_v)
    traced = isinstance(gamma, _Tracer) or any(isinstance(x, _Tracer) for x in args)

    def reference() -> jax.Array:
        if isinstance(gamma, _Tracer):
            return IMPLEMENTATIONS["jax"](*args, gamma, lo, hi, **rows)
        return _jitted_reference(*args, jnp.float32(gamma), lo, hi, **rows)

    def kernel() -> jax.Array:
        return IMPLEMENTATIONS[decision.backend](*args, gamma, lo, hi, **rows)

    # An eager call's first launch per input signature is checked (a traced call was probed by the kernel's gate).
    variant = (tuple(args[1].shape), tuple(args[0].shape), tuple(args[2].shape), row_offset)
    return DISPATCHER.call(decision, (platform, dtype_name, E, N), strict, kernel, reference, eager=not traced,
                           variant=variant, sync=jax.block_until_ready)


_jitted_reference = jax.jit(categorical_td_target_reference, static_argnums=(6, 7), static_argnames=("row_offset",))


def backend_info(next_log_probs: Any = None, backend: str = "auto") -> dict[str, Any]:
    """Which backends can run on this machine's default platform and why; with inputs, also the decision for them.

    Never decides, logs or counts a fallback: it reports. Same structure as `torch_impl.backend_info`.

    Args:
        next_log_probs: optional (E, B, N) log-probs (an array, or anything with shape and dtype); their platform,
            dtype, E and N form the configuration.
        backend: the request the decision is reported for.

    Returns:
        {"device": the default platform ("gpu" or "cpu"), "probe": the configuration "backends" was checked for
         (float32 log-probs, E = 2, N = 101 on that platform), "backends": {"jax", "triton", "pallas", "mosaic"}:
         "available" or the reason it cannot run, "auto_order", "validated": {kernel: its GPU validation entry or
         why auto may not choose it}, "decision": None without inputs, else {"requested", "backend", "reason",
         "config"}, "decisions": every cached decision, "fallback_count": real fallbacks so far,
         "runtime_failures", "interpret": whether the Pallas kernels run in interpret mode
         (FLASHSAC_PALLAS_INTERPRET=1)}.
    """
    default = jax.default_backend()
    config = None
    if next_log_probs is not None:
        shape = tuple(getattr(next_log_probs, "shape", ()))
        if len(shape) != 3 or not hasattr(next_log_probs, "dtype"):
            raise ValueError(f"next_log_probs must be an (E, B, N) array, got {type(next_log_probs).__name__} "
                             f"{shape}")
        config = (_platform(next_log_probs), jnp.dtype(next_log_probs.dtype).name, shape[0], shape[2])
    return DISPATCHER.info(default, (default, "float32", 2, 101), config, backend,
                           rows=None if config is None else int(shape[1]), interpret=_interpreted())


def _interpreted() -> bool:
    """Whether the Pallas kernels run in interpret mode (FLASHSAC_PALLAS_INTERPRET=1)."""
    from jax_impl.lowering import interpret_mode

    return interpret_mode()


def dispatch_stats() -> dict[str, int]:
    """Counters for logging: {"fallback_count": number of configurations that fell back}."""
    return DISPATCHER.stats()


def reset_dispatch() -> None:
    """Forget cached decisions, validated signatures and counters (tests)."""
    DISPATCHER.reset()
    _SIGNATURES.clear()
