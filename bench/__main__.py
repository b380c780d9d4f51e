"""``python -m bench <job> [options]``: the benchmark jobs. ``python -m bench --help`` lists them; ``python -m bench
<job> --help`` gives a job's options. Every job takes ``--out DIR`` (raw ``results.json`` and a short ``results.md``)
and ``--tiny`` (a CPU run of seconds to a minute that tests the job; its numbers are not performance)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

JOBS = {
    "kernel": "bench.kernel",
    "agents": "bench.agents",
    "vs-upstream": "bench.vs_upstream",
    "mjx": "bench.mjx",
    "learning": "bench.learning",
    "harness": "bench.harness",
    "report": "bench.report",
    "kernel-validate": "bench.kernel_validate",
    "kernel-speed": "bench.kernel_speed",
    "gpu-recipe": "bench.gpu_recipe",
    "rliable-report": "bench.rliable_report",
    "breakdown": "bench.breakdown",
    "torch-levers": "bench.torch_levers",
    "jax-speed": "bench.jax_speed",
}


def summary(module: str) -> str:
    """The first line of ``module``'s docstring, read without importing it (a job imports torch or JAX)."""
    import ast

    spec = importlib.util.find_spec(module)
    path = spec.origin if spec and spec.origin else ""
    with open(path) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def usage() -> str:
    lines = ["usage: python -m bench <job> [options]     (python -m bench <job> --help: the job's options)", "",
             "jobs:"]
    lines += [f"  {name:<12} {summary(module)}" for name, module in JOBS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    job, rest = argv[0], argv[1:]
    if job not in JOBS:
        print(f"python -m bench: unknown job {job!r}; expected one of {', '.join(JOBS)}\n\n{usage()}", file=sys.stderr)
        return 2
    if "--tiny" in rest:  # CPU: the kernels' interpreters, read when the kernel modules are imported
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("FLASHSAC_PALLAS_INTERPRET", "1")
    sys.argv = [f"python -m bench {job}", *rest]
    return int(importlib.import_module(JOBS[job]).main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
