"""The update-speed benchmark on CPU (the figures themselves need the H200): bench.gpu_update_compare runs end to end
on tiny batches with the reference backends, and its summary is what its raw timings say."""

import json
import statistics

import pytest

from bench import gpu_update_compare


def test_compare_interleaves_both_agents_and_pairs_the_ratio(tmp_path):
    assert gpu_update_compare.main(["--torch-backends", "torch", "--jax-backends", "jax", "--batch-size", "32",
                                    "--repeats", "2", "--iters", "2", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "compare.json").read_text())
    raw = result["raw_ms"]
    assert set(raw) == {"torch/torch", "jax/jax"} and all(len(v) == 2 for v in raw.values())
    assert all(t > 0 for v in raw.values() for t in v)
    for name, times in raw.items():
        assert result["update_ms"][name] == pytest.approx(statistics.median(times))
    ratios = [j / t for j, t in zip(raw["jax/jax"], raw["torch/torch"], strict=True)]
    assert result["ratio"]["pair"] == "jax/jax / torch/torch"
    assert result["ratio"]["per_repeat"] == pytest.approx(ratios)
    assert result["batch_size"] == 32 and "cpu" in result["jax_device"].lower()
