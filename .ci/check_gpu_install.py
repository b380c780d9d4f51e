"""Checks that the GPU install line resolves, from package metadata only: ``python .ci/check_gpu_install.py``.

On Linux x86_64 the package index's torch is the CUDA build, which pins the triton it was built with (torch 2.13.0:
triton 3.7.1), while the CPU build requires none. So CI, on the CPU build, cannot see whether ``pip install -e
".[mjx]"`` resolves on a GPU machine. This script asks pip's resolver, for the GPU machine's platform
(glibc 2.35 manylinux wheels, ``--python-version 3.12``), with ``--dry-run`` and ``--use-feature=fast-deps``
(each wheel's metadata read through HTTP range requests: nothing installed, no wheel downloaded whole). For each torch
minor version that pyproject's torch range admits (its newest release):

1. ``torch==V`` without dependencies: its metadata, and from it the triton it requires, which the project's triton
   range must admit;
2. for the newest torch (what ``pip install`` picks): the project's dependencies and the ``mjx`` extra
   (pyproject.toml), torch left out, plus ``triton==<its pin>``, must resolve together; for the older ones, their
   triton pin must have a wheel.

torch's CUDA libraries (``nvidia-*``, ``cuda-*``) are not resolved: the package index CI reaches does not hold them
all. Exit 0 when every resolution succeeds, 1 naming the torch version and printing pip's error otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
GLIBC = 35  # the GPU machine's glibc 2.35: every manylinux wheel up to it installs there
PLATFORM = f"manylinux_2_{GLIBC}_x86_64"
PLATFORM_TAGS = [f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC, 16, -1)] + ["manylinux2014_x86_64"]
PYTHON = "3.12"


def project_requirements(pyproject: dict, extras: tuple[str, ...] = ("mjx",)) -> list[Requirement]:
    """pyproject's ``[project] dependencies`` and the given extras, as requirements."""
    project = pyproject["project"]
    items = list(project["dependencies"])
    for extra in extras:
        items += project["optional-dependencies"][extra]
    return [Requirement(item) for item in items]


def torch_minors(spec: SpecifierSet, newest_known: Version) -> list[str]:
    """``==X.Y.*`` for each torch minor X.Y that ``spec`` admits, from its lower bound up to ``newest_known``'s
    minor (the newest release in the range, which pip picks without a pin)."""
    lows = [Version(s.version) for s in spec if s.operator in (">=", "==", "~=")]
    if not lows:
        raise ValueError(f"torch {spec}: expected a lower bound (>=)")
    low = min(lows)
    out = []
    for minor in range(low.minor, newest_known.minor + 1):
        candidate = Version(f"{low.major}.{minor}.0")
        if spec.contains(candidate) or minor == newest_known.minor:
            out.append(f"=={low.major}.{minor}.*")
    return out


def triton_pin(requires_dist: list[str]) -> str | None:
    """The ``triton`` requirement of a torch wheel's metadata (``==3.7.1``), or None when it requires none."""
    for item in requires_dist:
        req = Requirement(item)
        if req.name == "triton":
            return str(req.specifier)
    return None


def _pip(args: list[str], report: str) -> tuple[int, str, dict | None]:
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--no-cache-dir",
           "--use-feature=fast-deps", "--only-binary=:all:", *[f"--platform={tag}" for tag in PLATFORM_TAGS],
           "--python-version", PYTHON,
           "--implementation", "cp", "--target", os.path.join(os.path.dirname(report), "target"), "--report",
           report, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    data = json.loads(Path(report).read_text()) if proc.returncode == 0 and os.path.exists(report) else None
    errors = "\n".join(line for line in proc.stderr.splitlines() if "fast-deps" not in line)
    return proc.returncode, errors, data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pyproject", default=str(REPO / "pyproject.toml"))
    args = ap.parse_args(argv)
    requirements = project_requirements(tomllib.loads(Path(args.pyproject).read_text()))
    torch = next(r for r in requirements if r.name == "torch")
    rest = [str(r) for r in requirements if r.name not in ("torch", "triton")]
    triton = next((r for r in requirements if r.name == "triton"), None)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        code, err, newest = _pip(["--no-deps", f"torch{torch.specifier}"], os.path.join(tmp, "newest.json"))
        if code != 0 or newest is None:
            print(f"GPU install check: torch{torch.specifier} does not resolve for {PLATFORM}, Python {PYTHON}:\n{err}")
            return 1
        minors = torch_minors(torch.specifier, Version(newest["install"][0]["metadata"]["version"]))
        pins: dict[str, str | None] = {}
        for minor in minors:
            code, err, found = _pip(["--no-deps", f"torch{torch.specifier},{minor}"],
                                    os.path.join(tmp, f"torch{minor.strip('=.*')}.json"))
            if code != 0 or found is None:
                print(f"GPU install check: no torch{minor} in torch{torch.specifier}:\n{err}")
                return 1
            meta = found["install"][0]["metadata"]
            pins[meta["version"]] = pin = triton_pin(meta.get("requires_dist", []))
            if pin is not None and triton is not None and not triton.specifier.contains(pin.lstrip("=")):
                print(f"GPU install check: torch {meta['version']} (CUDA build) requires triton{pin}, outside the "
                      f"project's {triton}")
                return 1
        for number, (version, pin) in enumerate(reversed(pins.items())):
            # the newest torch (what pip picks) with every dependency; the older ones' triton wheel alone
            pinned = [] if pin is None else [f"triton{pin}"]
            args = [*rest, *pinned] if number == 0 else ["--no-deps", *pinned]
            if not args or args == ["--no-deps"]:
                continue
            code, err, _ = _pip(args, os.path.join(tmp, f"deps{version}.json"))
            if code != 0:
                print(f"GPU install check: torch {version} (CUDA build; requires triton{pin}) does not resolve "
                      f"{'with the project' + chr(39) + 's dependencies' if number == 0 else ''} for {PLATFORM}, "
                      f"Python {PYTHON}:\n{err}")
                return 1
            what = "with the project's dependencies and the mjx extra" if number == 0 else "(its wheel exists)"
            print(f"torch {version}: triton{pin or ' (none)'} resolves {what} ({PLATFORM}, Python {PYTHON})")
    print(f"GPU install check passed in {time.monotonic() - started:.0f} s (metadata only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
