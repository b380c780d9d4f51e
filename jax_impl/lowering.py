"""What this JAX offers the kernel backends: the Pallas-Triton lowering's presence and the interpret-mode rule.

JAX 0.11 and 0.12 ship the Pallas Triton backend (`jax.experimental.pallas.triton`) deprecated; a later JAX drops it.
`pallas_triton_missing()` turns its absence into the "pallas" backend's one-line fallback reason, checked before
jax_impl/ops.py (which imports the lowering) is imported, so the other backends keep working.

`jax_version_reason()` is the Pallas kernels' version gate: a JAX outside the tested range is refused unless
FLASHSAC_ALLOW_UNTESTED_JAX=1, which lets the kernel's first-use self-test decide (the way to validate a new JAX).
"""

from __future__ import annotations

import importlib
import logging
import os

import jax

__all__ = ["ALLOW_UNTESTED_JAX_ENV", "INTERPRET_ENV", "PALLAS_TRITON_MODULE", "interpret_mode", "jax_version_reason",
           "pallas_triton_missing"]

log = logging.getLogger("flashsac.jax_impl")

INTERPRET_ENV = "FLASHSAC_PALLAS_INTERPRET"
ALLOW_UNTESTED_JAX_ENV = "FLASHSAC_ALLOW_UNTESTED_JAX"
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
                f"backend='triton' (the Triton kernel through jaxlib's Triton kernel call)")
    return None


def jax_version_reason(version: str, tested: tuple[str, ...], kernel: str) -> str | None:
    """None if the Pallas kernel `kernel` may run on JAX `version`, else the one-line fallback reason.

    A version whose string starts with one of `tested` runs. Any other runs only with FLASHSAC_ALLOW_UNTESTED_JAX=1
    (logged as a warning on every gate call, once per configuration), its self-test then deciding.
    """
    if str(version).startswith(tested):
        return None
    listed = ", ".join(t + "x" for t in tested)
    if os.environ.get(ALLOW_UNTESTED_JAX_ENV, "0") == "1":
        log.warning("categorical_td_target %s: jax %s is outside the tested range (%s); running it because "
                    "%s=1 (its self-test decides)", kernel, version, listed, ALLOW_UNTESTED_JAX_ENV)
        return None
    return (f"jax {version} is outside the tested range ({listed}); set {ALLOW_UNTESTED_JAX_ENV}=1 to run the "
            f"{kernel} kernel's self-test on it anyway")
