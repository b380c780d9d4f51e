"""PyTorch implementation of FlashSAC's categorical TD target: the torch reference and the fused Triton kernel."""

from torch_impl.dispatch import (
    BACKENDS,
    BackendUnavailable,
    Decision,
    backend_info,
    categorical_td_target,
    dispatch_stats,
    reset_dispatch,
    resolve_backend,
)
from torch_impl.reference import categorical_td_target_reference

__all__ = [
    "BACKENDS",
    "BackendUnavailable",
    "Decision",
    "backend_info",
    "categorical_td_target",
    "categorical_td_target_reference",
    "dispatch_stats",
    "reset_dispatch",
    "resolve_backend",
]
