"""Counting host synchronisations in torch code (a test helper).

``HostSyncCounter`` is a ``TorchDispatchMode`` that records every ATen op that makes the host wait for the device:
``_local_scalar_dense`` (``.item()``, ``float(t)``, ``bool(t)``, ``int(t)``), ``is_nonzero``, ``nonzero`` (its
output shape depends on values), ``equal``, and copies from a non-CPU device to the CPU (``_to_copy`` / ``copy_``).
On the CPU a device-to-host copy cannot be told from any other copy, so the reads that bypass the dispatcher on CPU
tensors -- ``Tensor.tolist``, ``Tensor.numpy`` and ``Tensor.__array__`` -- are patched to be recorded as well (on a
GPU each is a device-to-host copy). The same counter thus flags the CPU run of a hot path for every host read it
would do on a GPU.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostSyncCounter"]

_SYNC_OPS = {"_local_scalar_dense", "is_nonzero", "nonzero", "equal", "item"}
_HOST_READS = ("tolist", "numpy", "__array__")


def _device_of(x: Any) -> torch.device | None:
    return x.device if isinstance(x, torch.Tensor) else None


class HostSyncCounter(TorchDispatchMode):
    """``with HostSyncCounter() as c: ...`` then ``c.counts`` ({op name: calls}) and ``c.total``."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self._saved: dict[str, Any] = {}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in _SYNC_OPS:
            self.counts[name] += 1
        elif name == "_to_copy" and args:
            src, dst = _device_of(args[0]), kwargs.get("device")
            if src is not None and src.type != "cpu" and dst is not None and torch.device(dst).type == "cpu":
                self.counts["device_to_host_copy"] += 1
        elif name == "copy_" and len(args) >= 2:
            dst, src = _device_of(args[0]), _device_of(args[1])
            if src is not None and dst is not None and src.type != "cpu" and dst.type == "cpu":
                self.counts["device_to_host_copy"] += 1
        return func(*args, **kwargs)

    def __enter__(self) -> HostSyncCounter:
        for attr in _HOST_READS:
            original = getattr(torch.Tensor, attr)
            self._saved[attr] = original

            def recording(tensor, *args, _attr=attr, _original=original, **kwargs):  # noqa: ANN001, ANN202
                self.counts[f"Tensor.{_attr}"] += 1
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, attr, recording)
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            for attr, original in self._saved.items():
                setattr(torch.Tensor, attr, original)
            self._saved.clear()
