"""The kernel validation command: every kernel backend bit for bit against the torch Triton kernel on this machine's
GPU, recorded where `backend="auto"` reads it (`flashsac-validate-kernels`, `python -m kernel_validation`;
kernel_validation/cli.py says how).

Installed with the package (bench/ is not): the only installed package that imports both frameworks' kernel ops
(`torch_impl`, `jax_impl`), each in its own worker process on a GPU. Modules: `matrix` (the cases, their inputs,
digests and the float64 spec check; numpy only), `backends` (one backend through its public op), `worker` (one
backend over the plan, its records written as it goes), `cli` (the command: workers, merged results, resume, the
validation file).
"""

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """`flashsac-validate-kernels` (kernel_validation.cli.main)."""
    from kernel_validation.cli import main as run

    return run(argv)
