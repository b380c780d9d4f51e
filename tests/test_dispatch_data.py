"""The dispatcher's installed data: the packaged validation file merged with the user's own (each entry naming its
file; $FLASHSAC_KERNEL_VALIDATION replacing both; a damaged file naming itself and its fix), and auto's measured
order per size band (the decision names the band; no bands file: the fixed order)."""

from __future__ import annotations

import json
import logging
import tomllib
from pathlib import Path

import pytest
from validation_files import validation_entry as _entry
from validation_files import write_validation as _write

from shared_spec import dispatch as sd
from shared_spec.dispatch import Decision, Dispatcher

REPO = Path(__file__).resolve().parent.parent


def _dispatcher(kernels=("a", "b", "c"), order=("a", "b", "c"), gates=None) -> Dispatcher:
    d = Dispatcher(framework="fw", reference="ref", kernels=kernels, auto_order=order, reference_impl=lambda: "ref",
                   logger="flashsac.test_dispatch_data", describe=str)
    for name in kernels:
        d.register(name, lambda n=name: n, (gates or {}).get(name))
    return d


@pytest.fixture
def user_home(tmp_path, monkeypatch):
    """An empty user data directory; no $FLASHSAC_KERNEL_VALIDATION; no auto-order bands for "fw"."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv(sd.VALIDATION_ENV, raising=False)
    monkeypatch.delenv(sd.AUTO_ORDER_ENV, raising=False)
    return tmp_path / "data" / "flashsac" / "kernel_validation.json"


def test_the_validation_results_are_package_data_with_both_frameworks_entries():
    assert sd.VALIDATION_FILE == REPO / "shared_spec" / "data" / "kernel_validation.json"
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "data/*.json" in data["package-data"]["shared_spec"], "a wheel must contain shared_spec/data"
    assert data["packages"]["find"]["include"].count("kernel_validation*") == 1
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"][sd.VALIDATE_COMMAND] == (
        "kernel_validation.cli:main")
    entries = sd.load_validation(sd.VALIDATION_FILE)
    assert entries["torch/triton"]["passed"] and entries["jax/pallas"]["passed"]
    for entry in entries.values():  # each entry's evidence is committed
        assert (REPO / entry["source"]).is_file(), entry["source"]
    assert not (REPO / "bench" / "results" / "kernel-validation" / "validated.json").exists()


def test_user_file_is_merged_over_the_packaged_one_and_each_entry_names_its_file(user_home, monkeypatch):
    assert sd.user_validation_path() == user_home
    assert sd.user_validation_path({"HOME": "/h"}).parts[-4:] == (".local", "share", "flashsac",
                                                                  "kernel_validation.json")
    assert sd.validation_paths() == [sd.VALIDATION_FILE, user_home]
    packaged = sd.load_validation(sd.VALIDATION_FILE)
    _write(user_home, {"jax/pallas": _entry(passed=False, gpu="NVIDIA RTX 4090"), "fw/a": _entry()})
    merged = sd.read_validation()
    assert merged["jax/pallas"]["gpu"] == "NVIDIA RTX 4090" and merged["jax/pallas"]["file"] == str(user_home)
    assert merged["torch/triton"] == dict(packaged["torch/triton"], file=str(sd.VALIDATION_FILE))
    d = _dispatcher()
    assert d.decide("auto", False, ("gpu",)) == Decision("auto", "a", "auto: a validated on NVIDIA H200, available")
    info = d.info("gpu", ("gpu",))
    assert info["validated"]["a"]["file"] == str(user_home)
    assert info["validation_files"] == [str(sd.VALIDATION_FILE), str(user_home)]
    assert str(user_home) in info["validated"]["b"] and sd.VALIDATE_COMMAND in info["validated"]["b"]
    jax = Dispatcher(framework="jax", reference="jax", kernels=sd.KERNEL_BACKENDS["jax"], auto_order=("pallas",),
                     reference_impl=lambda: 0, logger="flashsac.test_dispatch_data", describe=str)
    jax.register("pallas", lambda: 1)
    assert "its GPU validation failed (NVIDIA RTX 4090" in jax.unvalidated("pallas"), "the user's own result wins"
    assert str(user_home) in jax.unvalidated("pallas")
    monkeypatch.setenv(sd.VALIDATION_ENV, str(_write(user_home.parent / "site.json", {"fw/b": _entry()})))
    assert sd.validation_paths() == [user_home.parent / "site.json"], "the variable replaces both files"
    d.reset()
    assert d.decide("auto", False, ("gpu",)).backend == "b" and "fw/a" not in sd.read_validation()


def test_a_damaged_user_file_names_itself_and_the_fix(user_home, caplog):
    user_home.parent.mkdir(parents=True)
    user_home.write_text("{cut sho")
    with pytest.raises(ValueError) as err:
        sd.read_validation()
    assert str(user_home) in str(err.value) and sd.VALIDATE_COMMAND in str(err.value) and "move it away" in str(
        err.value)
    d = _dispatcher()
    with caplog.at_level(logging.WARNING, logger="flashsac.test_dispatch_data"):
        decision = d.decide("auto", False, ("gpu",))
    assert decision.backend == "ref" and str(user_home) in decision.reason and "move it away" in decision.reason
    assert any(str(user_home) in r.getMessage() for r in caplog.records)


def _bands(path: Path, bands: list[dict], framework: str = "fw") -> Path:
    for band in bands:
        band.setdefault("source", "bench/results/kernel-speed/x/results.json")
        band.setdefault("gpu", "NVIDIA H100")
        band.setdefault("date", "2026-12-07")
    path.write_text(json.dumps({"format": 1, "frameworks": {framework: {"bands": bands}}}))
    return path


def test_auto_follows_the_measured_order_of_the_calls_band(user_home, tmp_path, monkeypatch, caplog):
    _write(user_home, {"fw/a": _entry(), "fw/b": _entry(), "fw/c": _entry()})
    monkeypatch.setenv(sd.AUTO_ORDER_ENV, str(_bands(tmp_path / "order.json", [
        {"max_B": 100, "order": ["b", "a"], "excluded": {"c": "slower than the ref reference at B = 64"}},
        {"max_B": None, "order": ["c"], "excluded": {"a": "not timed"}}])))
    refused = set()
    d = _dispatcher(gates={n: (lambda cfg, n=n: "busy" if n in refused else None) for n in "abc"})
    src = "bench/results/kernel-speed/x/results.json (NVIDIA H100, 2026-12-07)"
    assert d.decide("auto", False, ("gpu",), 64).reason == (
        f"auto: b validated on NVIDIA H200, available, fastest in band B<=100 by {src}")
    assert d.decide("auto", False, ("gpu",), 1 << 20).backend == "c"
    assert d.decide("auto", False, ("gpu",)).backend == "a", "B unknown: the fixed order"
    refused.add("b")
    d.reset()
    assert d.decide("auto", False, ("gpu",), 100).reason == (
        f"auto: a validated on NVIDIA H200, available, 2nd fastest in band B<=100 by {src}")
    refused.add("c")
    with caplog.at_level(logging.INFO, logger="flashsac.test_dispatch_data"):
        decision = d.decide("auto", False, ("gpu",), 101)
    assert decision == Decision("auto", "ref", "fallback from auto: c: busy; a: not timed in band B>100 by "
                                                "bench/results/kernel-speed/x/results.json; b: not in its order in "
                                                "band B>100 by bench/results/kernel-speed/x/results.json")
    info = d.info("gpu", ("gpu",), ("gpu",), "auto", rows=7)
    assert info["decision"]["backend"] == "a" and "band B<=100" in info["decision"]["reason"]
    assert [(b["band"], b["order"]) for b in info["auto_bands"]] == [("B<=100", ["b", "a"]), ("B>100", ["c"])]
    assert d.decide("b", False, ("gpu",), 64).backend == "ref", "a request by name ignores the bands"
    assert sd.band_label(None, None) == "every B" and sd.band_label(512, 2048) == "512<B<=2048"


@pytest.mark.parametrize("bands, needle", [
    ([{"max_B": None, "order": ["z"]}], "names ['z']"),
    ([{"max_B": 8, "order": ["a"]}], "null only in the last"),
    ([{"max_B": 8, "order": ["a"]}, {"max_B": 4, "order": ["b"]}, {"max_B": None, "order": []}], "increasing"),
    ([{"order": ["a"]}], "missing ['max_B']"),
])
def test_a_bad_bands_file_is_logged_and_auto_keeps_its_fixed_order(user_home, tmp_path, monkeypatch, caplog, bands,
                                                                    needle):
    _write(user_home, {"fw/a": _entry(), "fw/b": _entry()})
    path = _bands(tmp_path / "order.json", bands)
    monkeypatch.setenv(sd.AUTO_ORDER_ENV, str(path))
    d = _dispatcher()
    with caplog.at_level(logging.WARNING, logger="flashsac.test_dispatch_data"):
        assert d.decide("auto", False, ("gpu",), 4) == Decision("auto", "a",
                                                                "auto: a validated on NVIDIA H200, available")
    (record,) = [r for r in caplog.records if str(path) in r.getMessage()]
    assert needle in record.getMessage() and "kernel-speed" in record.getMessage()


def test_the_packaged_bands_drive_both_frameworks_dispatchers(user_home):
    bands = sd.load_auto_order(sd.AUTO_ORDER_FILE)
    assert set(bands) == {"torch", "jax"}
    for framework, kernels in sd.KERNEL_BACKENDS.items():
        for band in bands[framework]:
            assert set(band["order"]) | set(band["excluded"]) <= set(kernels)
            assert (REPO / band["source"]).is_file(), band["source"]
