"""Stage 0: the run's environment record (``bench.common.environment``) with what the harness adds: the torch
device, TF32 / determinism / interpreter flags, CUDA facts and clocks, JAX's devices, both dispatchers' backends."""

from __future__ import annotations

import os

from bench.common import command_output, environment
from bench.harness.frameworks import JAX_IMPORT_ERROR, jax, jax_impl, torch, torch_device, torch_impl
from bench.harness.guards import exc_text

__all__ = ["env_info"]


def env_info() -> dict:
    """Stage 0: versions, device, git SHA, clocks (if readable), TF32 / determinism / interpreter flags."""
    info = environment()
    info.update({"TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
                 "FLASHSAC_PALLAS_INTERPRET": os.environ.get("FLASHSAC_PALLAS_INTERPRET"),
                 "FLASHSAC_ALLOW_UNTESTED_JAX": os.environ.get("FLASHSAC_ALLOW_UNTESTED_JAX"),
                 "torch_device": str(torch_device()),
                 "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                 "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                 "torch_backends": torch_impl.backend_info()["backends"]})
    if torch.cuda.is_available():
        info.update(gpu=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)),
                    cuda=torch.version.cuda,
                    clocks=command_output(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem",
                                           "--format=csv,noheader"]))
    if JAX_IMPORT_ERROR is None:
        try:
            info.update(jax_backend=jax.default_backend(), jax_devices=[str(d) for d in jax.devices()],
                        jax_backends=jax_impl.backend_info()["backends"])
        except Exception as exc:  # noqa: BLE001
            info["jax_error"] = exc_text(exc)
    else:
        info["jax_error"] = JAX_IMPORT_ERROR
    return info
