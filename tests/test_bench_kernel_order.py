"""`python -m bench kernel-speed --record-order`: auto's order per size band, derived from a kernel-speed results.json
(a synthetic one here) and read back by the dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

from bench import kernel_speed as ks
from shared_spec import dispatch as sd

REPO = Path(__file__).resolve().parent.parent


def _results(sizes: dict[int, dict[str, float]], unavailable: dict | None = None) -> dict:
    return {"sizes": {str(B): {"us": us} for B, us in sizes.items()}, "unavailable": unavailable or {},
            "env": {"device": "NVIDIA H100 80GB HBM3", "date": "2026-12-07 10:00:00 UTC"}}


RESULTS = _results({
    512: {"jax/jax": 17.0, "jax/pallas": 8.0, "jax/triton": 32.0, "jax/mosaic": 13.0, "torch/triton": 2.2},
    2048: {"jax/jax": 44.0, "jax/pallas": 8.8, "jax/triton": 35.0, "jax/mosaic": 24.0, "torch/triton": 3.0},
    4096: {"jax/jax": 80.0, "jax/pallas": 10.0, "jax/triton": 36.0, "jax/mosaic": 30.0, "torch/triton": 4.1},
    65536: {"jax/jax": 1013.0, "jax/pallas": 47.8, "jax/triton": 45.3, "jax/mosaic": 512.0, "torch/triton": 30.4},
    1048576: {"jax/jax": 14522.0, "jax/pallas": 569.0, "jax/triton": 582.0, "torch/triton": 409.0}},
    unavailable={"mosaic": "BackendUnavailable: no Hopper GPU"})


def test_bands_group_the_sizes_that_share_an_order_and_leave_out_slower_than_the_reference():
    data = ks.derive_auto_order(RESULTS, "bench/results/kernel-speed/h100/results.json")
    jax = data["frameworks"]["jax"]["bands"]
    assert [(b["max_B"], b["order"]) for b in jax] == [
        (512, ["pallas", "mosaic"]), (4096, ["pallas", "mosaic", "triton"]), (65536, ["triton", "pallas", "mosaic"]),
        (None, ["pallas", "triton"])]
    assert jax[0]["excluded"] == {"triton": "slower than the jax reference at B = 512 (32.0 vs 17.0 us)"}
    assert jax[1]["excluded"] == {} and set(jax[1]["us"]) == {"2048", "4096"}, "one band for two sizes"
    assert jax[3]["excluded"] == {"mosaic": "not timed (BackendUnavailable: no Hopper GPU)"}
    assert jax[0]["us"]["512"] == {"pallas": 8.0, "triton": 32.0, "mosaic": 13.0, "jax": 17.0}
    assert all((b["source"], b["gpu"], b["date"]) == ("bench/results/kernel-speed/h100/results.json",
                                                      "NVIDIA H100 80GB HBM3", "2026-12-07") for b in jax)
    torch = data["frameworks"]["torch"]["bands"]
    assert [(b["max_B"], b["order"], b["excluded"]) for b in torch] == [(None, ["triton"], {})]


def test_record_order_writes_a_file_the_dispatcher_reads(tmp_path, monkeypatch, capsys):
    run = tmp_path / "speed"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(RESULTS))
    target = tmp_path / "order.json"
    monkeypatch.chdir(tmp_path)
    assert ks.main(["--out", "speed", "--order-only", "--order-to", str(target)]) == 0
    out = capsys.readouterr().out
    assert "jax    4096<B<=65536: triton, pallas, mosaic" in out and f"written to {target}" in out
    bands = sd.load_auto_order(target)
    assert [b["label"] for b in bands["jax"]] == ["B<=512", "512<B<=4096", "4096<B<=65536", "B>65536"]
    assert bands["jax"][0]["source"] == "speed/results.json"
    assert ks.main(["--out", "missing", "--order-only", "--order-to", str(target)]) == 2
    assert "no kernel-speed results" in capsys.readouterr().out
    (run / "results.json").write_text(json.dumps(_results({512: {}})))
    before = target.read_text()
    assert ks.main(["--out", "speed", "--order-only", "--order-to", str(target)]) == 2
    assert "no kernel has a 'us' time" in capsys.readouterr().out and target.read_text() == before


def test_the_packaged_order_is_derived_from_the_committed_kernel_speed_run():
    """shared_spec/data/kernel_auto_order.json is what --record-order makes of the results it names."""
    packaged = json.loads(sd.AUTO_ORDER_FILE.read_text())
    (source,) = {b["source"] for spec in packaged["frameworks"].values() for b in spec["bands"]}
    res = json.loads((REPO / source).read_text())
    assert ks.derive_auto_order(res, source) == packaged
