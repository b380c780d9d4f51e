"""Builds the wheel and checks it installed outside the checkout: ``python .ci/check_wheel.py``.

1. The checkout's files (``git ls-files``: tracked, and untracked ones git does not ignore) are copied to a temporary
   folder and the wheel is built there (``pip wheel --no-deps --no-build-isolation``: this environment's setuptools;
   the checkout gets no build/ folder).
2. A fresh venv made with ``--system-site-packages`` (torch, JAX and the rest come from this environment: nothing is
   installed again) gets the wheel with ``--no-deps --ignore-installed`` (this environment also holds the checkout's
   editable install, which must not stand in for the wheel).
3. From another directory, with ``python -I`` (neither the working directory, PYTHONPATH nor the user site on
   sys.path) and an empty XDG_DATA_HOME (no user validation file): every installed package imports from the venv's
   site-packages, not the checkout; ``torch_impl.backend_info()`` and ``jax_impl.backend_info()`` read the packaged
   validation entries (torch/triton, jax/pallas) from the installed shared_spec/data/kernel_validation.json, and the
   packaged auto-order bands.
4. The installed validation command: ``flashsac-validate-kernels --help``, and ``python -m kernel_validation --tiny
   --backends torch/triton`` (the interpreted Triton kernel on three small cases), beside
5. a tiny training run, ``python -m agent_torch.train --recipe smoke`` for 300 env steps, both from that directory.

Exit 0 when everything passes, 1 naming each problem; the seconds each step took are printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN = ["-m", "agent_torch.train", "--recipe", "smoke", "--overrides", "num_env_steps=300", "--overrides",
         "agent.buffer_min_length=250", "--overrides", "num_eval_episodes=1"]
# Run inside the venv from another directory: where each package comes from and what backend_info() reads.
PROBE = """
import importlib, json, sys, sysconfig
packages = json.loads(sys.argv[1])
report = {"site": sysconfig.get_paths()["purelib"],
          "files": {p: importlib.import_module(p).__file__ for p in packages}}
import jax_impl, torch_impl
from shared_spec import dispatch
t, j = torch_impl.backend_info(), jax_impl.backend_info()
report.update(validation_file=str(dispatch.VALIDATION_FILE), validation_files=t["validation_files"],
              torch=t["validated"], jax=j["validated"], bands={"torch": t["auto_bands"], "jax": j["auto_bands"]})
print("PROBE " + json.dumps(report, default=str))
"""
EXPECTED = {"torch": "triton", "jax": "pallas"}  # a kernel of each framework with a packaged, passing entry


def installed_packages(pyproject: dict) -> list[str]:
    """The top-level packages pyproject installs (its ``packages.find`` include patterns without the ``*``)."""
    return [p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]


def installed_problems(report: dict, checkout: str | os.PathLike) -> list[str]:
    """What is wrong with the probe's `report` of an installed wheel: a package imported from anywhere but the
    venv's site-packages (the checkout, say), a validation file outside it, a packaged entry that backend_info()
    does not show as read from the installed file, no auto-order bands."""
    site = os.path.realpath(report["site"])
    problems = []
    for package, file in report["files"].items():
        where = os.path.realpath(file or "")
        if not where.startswith(site + os.sep):
            inside = " (the checkout)" if where.startswith(os.path.realpath(checkout) + os.sep) else ""
            problems.append(f"{package} imports from {file}{inside}, not the wheel in {site}")
    packaged = os.path.realpath(report["validation_file"])
    if not packaged.startswith(site + os.sep):
        problems.append(f"the packaged validation file is {report['validation_file']}, outside {site}")
    if not report["validation_files"] or os.path.realpath(report["validation_files"][0]) != packaged:
        problems.append(f"backend_info() reads {report['validation_files']}, not the packaged file first")
    for framework, kernel in EXPECTED.items():
        entry = report[framework].get(kernel)
        if not isinstance(entry, dict):
            problems.append(f"{framework}_impl.backend_info() has no validation entry for {kernel}: {entry}")
        elif os.path.realpath(entry.get("file", "")) != packaged or entry.get("passed") is not True:
            problems.append(f"{framework}_impl.backend_info()'s {kernel} entry is not the packaged passing one: "
                            f"{entry}")
        if not report["bands"].get(framework):
            problems.append(f"{framework}_impl.backend_info() shows no packaged auto-order bands")
    return problems


def _copy_sources(dest: Path) -> None:
    """The checkout's files (git: tracked and untracked-but-not-ignored; without git: all but caches) into `dest`."""
    try:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                                capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__"))
        return
    for rel in filter(None, listed):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def main() -> int:
    started = time.monotonic()
    times: dict[str, float] = {}
    problems: list[str] = []
    packages = installed_packages(tomllib.loads((REPO / "pyproject.toml").read_text()))
    with tempfile.TemporaryDirectory(prefix="flashsac-wheel-") as tmp:
        tmp = Path(tmp)
        src, dist, venv, away = tmp / "src", tmp / "dist", tmp / "venv", tmp / "elsewhere"
        for d in (src, away, tmp / "xdg"):
            d.mkdir()
        _copy_sources(src)
        t0 = time.monotonic()
        built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                      str(dist), str(src)])
        times["build"] = time.monotonic() - t0
        wheels = sorted(dist.glob("*.whl"))
        if built.returncode != 0 or len(wheels) != 1:
            print(f"wheel check: the wheel does not build:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}")
            return 1
        t0 = time.monotonic()
        made = _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
        python = venv / "bin" / "python"
        installed = made if made.returncode else _run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", str(wheels[0])])
        times["venv + install"] = time.monotonic() - t0
        if made.returncode or installed.returncode:
            print(f"wheel check: the venv or the install failed:\n{made.stderr[-3000:]}\n{installed.stderr[-3000:]}")
            return 1
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "FLASHSAC_KERNEL_VALIDATION", "FLASHSAC_KERNEL_AUTO_ORDER")}
        env.update(XDG_DATA_HOME=str(tmp / "xdg"), JAX_PLATFORMS="cpu")
        t0 = time.monotonic()
        probe = _run([str(python), "-I", "-c", PROBE, json.dumps(packages)], cwd=away, env=env, timeout=600)
        times["probe"] = time.monotonic() - t0
        line = next((x for x in probe.stdout.splitlines() if x.startswith("PROBE ")), None)
        if probe.returncode or line is None:
            problems.append(f"the installed packages do not import:\n{probe.stderr[-3000:]}")
        else:
            problems += installed_problems(json.loads(line[len("PROBE "):]), REPO)
        helped = _run([str(venv / "bin" / "flashsac-validate-kernels"), "--help"], cwd=away, env=env, timeout=300)
        if helped.returncode or "--resume" not in helped.stdout:
            problems.append(f"flashsac-validate-kernels --help failed:\n{helped.stderr[-2000:]}")
        t0 = time.monotonic()  # the tiny validation and the training run side by side (two cores)
        jobs = {"validation": subprocess.Popen(
                    [str(python), "-I", "-m", "kernel_validation", "--tiny", "--backends", "torch/triton", "--out",
                     str(tmp / "validation")], cwd=away, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    text=True),
                "training": subprocess.Popen([str(python), "-I", *TRAIN], cwd=away, env=env,
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)}
        for name, job in jobs.items():
            out, _ = job.communicate(timeout=900)
            if job.returncode != 0:
                problems.append(f"the installed {name} run failed (exit status {job.returncode}):\n{out[-3000:]}")
        times["validation + training"] = time.monotonic() - t0
        if not problems and json.loads((tmp / "validation" / "results.json").read_text())["complete"] is not True:
            problems.append("the installed tiny validation did not complete")
        if not problems and not list((away / "runs").rglob("COMPLETE")):
            problems.append(f"the training run wrote no complete checkpoint under {away / 'runs'}")
    print("wheel check: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
          + f"; {time.monotonic() - started:.0f} s in all")
    for p in problems:
        print(f"wheel check: {p}")
    print("wheel check " + ("FAILED" if problems else "passed: the installed wheel reads its packaged validation "
                                                      "and trains outside the checkout"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
