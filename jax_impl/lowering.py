"""What this JAX offers the kernel backends: the Pallas-Triton lowering's presence and the interpret-mode rule.

JAX 0.11 and 0.12 ship the Pallas Triton backend (`jax.experimental.pallas.triton`) deprecated; a later JAX drops it.
`pallas_triton_missing()` turns its absence into the "pallas" backend's one-line fallback reason, checked before
jax_impl/ops.py (which imports the lowering) is imported, so the other backends keep working.
"""

from __future__ import annotations

import importlib
import os

import jax

__all__ = ["INTERPRET_ENV", "PALLAS_TRITON_MODULE", "interpret_mode", "pallas_triton_missing"]

INTERPRET_ENV = "FLASHSAC_PALLAS_INTERPRET"
PALLAS_TRITON_MODULE = "jax.experimental.pallas.triton"


def interpret_mode() -> bool:
    """True iff FLASHSAC_PALLAS_INTERPRET=1: the Pallas kernels run in Pallas interpret mode (any platform, slow)."""
    return os.environ.get(INTERPRET_ENV, "0") == "1"


def pallas_triton_missing() -> str | None:
    """None if this JAX has the Pallas-Triton lowering, else why not, on one line (the "pallas" fallback reason)."""
    try:
        importlib.import_module(PALLAS_TRITON_MODULE)
    except ImportError as exc:
        why = " ".join(str(exc).split())[:200]
        return (f"jax {jax.__version__} has no Pallas-Triton lowering ({PALLAS_TRITON_MODULE}: {why}); use "
                f"backend='triton' (jax-triton)")
    return None
