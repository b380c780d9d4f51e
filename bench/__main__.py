"""``python -m bench <job> [options]``: runs the benchmark job ``bench.<module>.main(options)``."""

from __future__ import annotations

import importlib
import sys

JOBS = {"gpu-recipe": "bench.gpu_recipe", "rliable-report": "bench.rliable_report"}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in JOBS:
        print(f"usage: python -m bench <job> [options]; jobs: {', '.join(sorted(JOBS))}", file=sys.stderr)
        return 2
    return int(importlib.import_module(JOBS[args[0]]).main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
