"""Packaging, offline: pyproject's ranges admit the torch/triton pairs the project runs on, constraints/ci.txt pins
every dependency inside them, .ci/run installs with it and checks the GPU install line, and that check's pure parts
(which torch versions, which triton pin) work on known metadata. The resolution itself needs the package index:
``python .ci/check_gpu_install.py``."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _check_module(name: str = "check_gpu_install"):
    spec = importlib.util.spec_from_file_location(name, REPO / ".ci" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ci_extras() -> tuple[str, ...]:
    """The extras .ci/run installs (``-e ".[dev,mjx,...]"``)."""
    match = re.search(r'-c constraints/ci\.txt -e "\.\[([a-z,_-]+)\]"', (REPO / ".ci" / "run").read_text())
    assert match, ".ci/run does not install the project with constraints/ci.txt"
    return tuple(match.group(1).split(","))


def _requirements(extras: tuple[str, ...] | None = None) -> dict[str, Requirement]:
    extras = _ci_extras() if extras is None else extras
    project = PYPROJECT["project"]
    items = list(project["dependencies"]) + [i for e in extras for i in project["optional-dependencies"][e]]
    return {Requirement(i).name: Requirement(i) for i in items}


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints" / "ci.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints/ci.txt: {line!r} is not name==version"
            pins[name.strip()] = version.strip()
    return pins


# (torch, the triton its CUDA wheel on the package index requires): the pairs the range must admit
TESTED = [("2.11.0", "3.6.0"), ("2.12.0", "3.7.0"), ("2.13.0", "3.7.1")]


@pytest.mark.parametrize(("torch", "triton"), TESTED)
def test_ranges_admit_each_tested_torch_and_its_triton(torch, triton):
    reqs = _requirements()
    assert reqs["torch"].specifier.contains(torch)
    assert reqs["triton"].specifier.contains(triton)
    assert reqs["triton"].marker is not None and reqs["triton"].marker.evaluate({"platform_system": "Linux"})
    assert not reqs["triton"].marker.evaluate({"platform_system": "Darwin"})  # no triton wheels off Linux


def test_ranges_exclude_untested_versions():
    reqs = _requirements()
    assert not reqs["torch"].specifier.contains("2.14.0") and not reqs["torch"].specifier.contains("2.10.0")
    assert not reqs["jax"].specifier.contains("0.12.0") and reqs["jax"].specifier.contains("0.11.2")


def test_constraints_pin_every_dependency_inside_its_range():
    reqs, pins = _requirements(), _constraints()
    assert set(pins) == set(reqs), f"unpinned: {sorted(set(reqs) - set(pins))}; extra: {sorted(set(pins) - set(reqs))}"
    outside = {name: pins[name] for name, req in reqs.items() if not req.specifier.contains(pins[name])}
    assert not outside, f"constraints/ci.txt pins outside pyproject's ranges: {outside}"


def test_ci_installs_with_the_constraints_and_checks_the_gpu_line_and_the_wheel():
    run = (REPO / ".ci" / "run").read_text()
    assert {"dev", "mjx"} <= set(_ci_extras())
    assert run.index("constraints/ci.txt") < run.index(".ci/check_gpu_install.py") < run.index("pytest")
    assert run.index("constraints/ci.txt") < run.index(".ci/check_wheel.py") < run.index("pytest")


def _wheel_report(site: str, packaged: str) -> dict:
    entry = {"gpu": "NVIDIA H100", "passed": True, "file": packaged}
    return {"site": site, "files": {p: f"{site}/{p}/__init__.py" for p in ("shared_spec", "kernel_validation")},
            "validation_file": packaged, "validation_files": [packaged, "/home/u/.local/share/flashsac/x.json"],
            "torch": {"triton": entry}, "jax": {"pallas": entry, "mosaic": "no GPU validation result"},
            "bands": {"torch": [{"band": "every B"}], "jax": [{"band": "B<=512"}]}}


def test_wheel_check_finds_the_checkout_standing_in_for_the_wheel_and_unread_package_data(tmp_path):
    check = _check_module("check_wheel")
    assert {"shared_spec", "kernel_validation", "agent_torch"} <= set(check.installed_packages(PYPROJECT))
    site, checkout = str(tmp_path / "venv" / "site-packages"), str(tmp_path / "checkout")
    packaged = f"{site}/shared_spec/data/kernel_validation.json"
    assert check.installed_problems(_wheel_report(site, packaged), checkout) == []
    shadowed = _wheel_report(site, f"{checkout}/shared_spec/data/kernel_validation.json")
    shadowed["files"]["shared_spec"] = f"{checkout}/shared_spec/__init__.py"
    problems = check.installed_problems(shadowed, checkout)
    assert problems == [
        f"shared_spec imports from {checkout}/shared_spec/__init__.py (the checkout), not the wheel in {site}",
        f"the packaged validation file is {checkout}/shared_spec/data/kernel_validation.json, outside {site}"]
    unread = _wheel_report(site, packaged)
    unread["torch"]["triton"] = dict(unread["torch"]["triton"], file="/home/u/.local/share/flashsac/x.json")
    unread["jax"]["pallas"] = "no GPU validation result for jax/pallas"
    unread["bands"]["jax"] = []
    assert [p.split(" ")[0] for p in check.installed_problems(unread, checkout)] == [
        "torch_impl.backend_info()'s", "jax_impl.backend_info()", "jax_impl.backend_info()"]


def test_gpu_check_picks_each_minor_and_reads_the_triton_pin():
    check = _check_module()
    assert check.torch_minors(SpecifierSet(">=2.11,<2.14"), Version("2.13.0")) == ["==2.11.*", "==2.12.*", "==2.13.*"]
    assert check.torch_minors(SpecifierSet(">=2.11,<2.14"), Version("2.12.1")) == ["==2.11.*", "==2.12.*"]
    with pytest.raises(ValueError, match="expected a lower bound"):
        check.torch_minors(SpecifierSet("<2.14"), Version("2.13.0"))
    cuda_wheel = ['nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"', "filelock",
                  'triton==3.7.1; platform_system == "Linux" and python_version < "3.15"']
    assert check.triton_pin(cuda_wheel) == "==3.7.1"
    assert check.triton_pin(["filelock", "sympy>=1.13.3"]) is None  # the CPU wheel
    names = [r.name for r in check.project_requirements(PYPROJECT)]
    assert {"torch", "triton", "jax", "brax", "mujoco-mjx"} <= set(names) and "pytest" not in names
