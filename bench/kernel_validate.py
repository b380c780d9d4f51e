"""Validation of every kernel backend (torch `triton`, JAX `triton`, `pallas`, `mosaic`) bitwise against the torch
Triton kernel over the adversarial matrix, and the float64 spec: the installed command `flashsac-validate-kernels`
(kernel_validation/cli.py) as a benchmark job.

GPU, recording into the packaged validation file
(shared_spec/data/kernel_validation.json, which `backend="auto"` reads; commit it with the run's folder):

    python -m bench kernel-validate --out bench/results/kernel-validation/<gpu>-<date> --record

As the command, but --out is required and nothing is recorded without --record / --record-to. `--resume` continues a
stopped run in the same --out. On the CPU, `--tiny` runs three small cases with the interpreters in seconds.
"""

from __future__ import annotations

import sys

from kernel_validation.backends import versions
from kernel_validation.cli import gpu_name
from kernel_validation.cli import main as validate

__all__ = ["gpu_name", "main", "versions"]


def main(argv: list[str] | None = None) -> int:
    return validate(argv, prog="python -m bench kernel-validate", bench=True)


if __name__ == "__main__":
    sys.exit(main())
