"""The benchmark entry point: `python -m bench <job> [options]` runs `bench.<job_name>.main(options)`."""

from __future__ import annotations

import importlib
import sys

JOBS = {
    "kernel-validate": "bench.kernel_validate",
    "kernel-speed": "bench.kernel_speed",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in JOBS:
        print(f"usage: python -m bench <job> [options]; jobs: {', '.join(JOBS)}", file=sys.stderr)
        return 2
    return int(importlib.import_module(JOBS[argv[0]]).main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
