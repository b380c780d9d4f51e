"""Anti-cheat guards: proof that the kernel ran (a counting wrapper around its dispatch registry entry, and on the GPU
its name in the profiler / a Triton custom call in the HLO), fallbacks counted, NaN-poisoned output allocations, and
snapshots that prove the inputs unchanged."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import numpy as np

from bench.harness.frameworks import jax, jax_dispatch, sync, torch, torch_dispatch
from bench.harness.implementations import Impl

__all__ = ["Snapshot", "count_kernel_calls", "exc_text", "fallback_count", "kernel_name_seen", "poisoned_allocations"]


def exc_text(exc: BaseException) -> str:
    """``Type: message``, cut to 600 characters: an exception as a stage's reason."""
    return f"{type(exc).__name__}: {str(exc).strip()[:600]}"


def _registry(framework: str) -> dict:
    return torch_dispatch.IMPLEMENTATIONS if framework == "torch" else jax_dispatch.IMPLEMENTATIONS


@contextlib.contextmanager
def count_kernel_calls(registry: tuple[str, str] | None) -> Iterator[dict]:
    """Wrap the dispatch registry entry (e.g. torch_impl.dispatch.IMPLEMENTATIONS["triton"]) with a call counter for
    the duration of the block; yields {"calls": int, "registered": bool}. Restores the entry afterwards."""
    counter = {"calls": 0, "registered": False}
    if registry is None:
        yield counter
        return
    reg, name = _registry(registry[0]), registry[1]
    original = reg.get(name)
    if original is None:
        yield counter
        return
    counter["registered"] = True

    def counting(*args, **kwargs):
        counter["calls"] += 1
        return original(*args, **kwargs)

    reg[name] = counting
    try:
        yield counter
    finally:
        reg[name] = original


@contextlib.contextmanager
def poisoned_allocations(active: bool) -> Iterator[bool]:
    """NaN-poison every uninitialised torch allocation in the block (torch.empty & co. are NaN-filled while
    deterministic algorithms are on), so a kernel that leaves output rows unwritten produces NaN rows.
    Yields whether poisoning is active (pass False for JAX: pallas_call allocates its own output, there is no out=
    to poison)."""
    if not active:
        yield False
        return
    prev_det = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield True
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = prev_fill
        torch.use_deterministic_algorithms(prev_det, warn_only=prev_warn)


class Snapshot:
    """Exact copies (and short sha256 digests) of every input's whole backing storage, to prove inputs unchanged.

    torch: the whole untyped storage (a view's neighbours included) is copied on its device and compared bytewise.
    JAX arrays are immutable: small ones are still copied to the host and compared, large ones (> 64 MB) are only
    checked for deletion (donation)."""

    LIMIT = 64 * 2**20

    def __init__(self, inputs: dict) -> None:
        self.copies = {k: self._bytes(v) for k, v in inputs.items()}
        self.digests = {k: self._digest(v) for k, v in self.copies.items()}

    @classmethod
    def _bytes(cls, x):
        if isinstance(x, torch.Tensor):
            storage = x.untyped_storage()
            return torch.empty(0, dtype=torch.uint8, device=x.device).set_(storage).clone()
        if getattr(x, "is_deleted", lambda: False)():
            return None
        if x.size * x.dtype.itemsize > cls.LIMIT:
            return "immutable"  # a live JAX array cannot have been written
        return np.asarray(x).copy()

    @classmethod
    def _digest(cls, b) -> str | None:
        if b is None or isinstance(b, str):
            return None
        if isinstance(b, torch.Tensor):
            if b.numel() > cls.LIMIT:
                return None  # compared exactly on the device; hashing GBs on the host is slow
            b = b.cpu().numpy()
        return hashlib.sha256(np.ascontiguousarray(b).view(np.uint8).tobytes()).hexdigest()[:16]

    def changed(self, inputs: dict) -> list[str]:
        """Names of inputs whose storage differs from the snapshot (or that were deleted / donated)."""
        bad = []
        for k, v in inputs.items():
            now, before = self._bytes(v), self.copies[k]
            if now is None or before is None:
                bad.append(k)
            elif isinstance(now, str):
                continue
            elif isinstance(now, torch.Tensor):
                if not torch.equal(now, before):
                    bad.append(k)
            elif not np.array_equal(np.ascontiguousarray(now).view(np.uint8),
                                    np.ascontiguousarray(before).view(np.uint8)):
                bad.append(k)
        return bad


def kernel_name_seen(impl: Impl, inputs: dict, gamma: float) -> dict:
    """GPU-only extra proof that the kernel ran: the Triton kernel in the CUDA profiler (torch), or a Triton custom
    call in the compiled HLO (JAX). Interpreters have neither."""
    try:
        if impl.framework == "torch":
            if not torch.cuda.is_available():
                return {"checked": False, "why": "no CUDA: the Triton interpreter has no profiler kernel names"}
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                sync(impl.call(inputs, gamma))
            names = sorted({e.key for e in prof.key_averages()})
            return {"checked": True, "seen": any("categorical_td_target_kernel" in n for n in names),
                    "kernels": names[:20]}
        if jax.default_backend() == "cpu":
            return {"checked": False, "why": "CPU: Pallas interpret mode lowers to plain HLO (no Triton custom call)"}
        text = jax.jit(lambda a: impl.call(a, gamma)).lower(inputs).as_text()
        return {"checked": True, "seen": "triton" in text.lower() and "custom_call" in text}
    except Exception as exc:  # noqa: BLE001
        return {"checked": False, "why": exc_text(exc)}


def fallback_count(impl: Impl) -> int:
    """The dispatcher's fallback count for the implementation's framework (0 for upstream's code)."""
    if impl.backend is None:
        return 0
    mod = torch_dispatch if impl.framework == "torch" else jax_dispatch
    return int(mod.dispatch_stats()["fallback_count"])
