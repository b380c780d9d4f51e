"""`python -m bench kernel-speed`: the --tiny run (the interpreted kernels on the CPU; the times mean nothing), its
subprocess isolation, and the parsing of the two profilers' traces into kernel device time."""

from __future__ import annotations

import json

import pytest

from bench import kernel_speed as ks

JAX_NAMES = {"jax/jax", "jax/triton", "jax/pallas", "jax/mosaic"}


def test_tiny_run_times_every_backend_and_checks_the_bits(tmp_path, capsys):
    assert ks.main(["--tiny", "--out", str(tmp_path), "--backends", "jax,triton,pallas,mosaic", "--bitwise"]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    (row,) = res["sizes"].values()
    assert set(row["us"]) == JAX_NAMES | {"torch/triton"}
    assert res["unavailable"] == {}
    assert row["floor_us"] == pytest.approx(ks.floor_bytes(8, 11, 2, 4) / res["bandwidth"]["bytes_per_s"] * 1e6)
    assert all(row["vs_floor"][n] == pytest.approx(row["us"][n] / row["floor_us"]) for n in row["us"])
    assert row["vs_jax"]["jax/jax"] == 1.0 and set(row["vs_jax"]) == JAX_NAMES
    # The CPU's interpreters launch no GPU kernels: the profiles ran and found none.
    assert set(row["device_us"]) == JAX_NAMES | {"torch/triton"} and set(row["device_us"].values()) == {None}
    assert row["command_buffers"] == dict.fromkeys(JAX_NAMES, 0) and row["scan_step_us"] > 0 and row["scan_sum_us"] > 0
    assert set(res["bitwise"]) == JAX_NAMES - {"jax/jax"}
    for b in res["bitwise"].values():  # the timed shape and its row-offset form, against the torch kernel's outputs
        assert b["equal"] == b["compared"] == 2 and not b["skipped"]
    assert list(res["reference_spec_ok"].values()) == [True, True]
    text = (tmp_path / "results.md").read_text()
    assert "| 8 |" in text and "jax/mosaic: 2/2 cases bitwise equal" in text


def test_isolated_parts_and_a_failing_worker(tmp_path):
    """Each implementation in its own process (the GPU default): torch first, the inputs it made shared."""
    assert ks.main(["--tiny", "--isolate", "--out", str(tmp_path), "--backends", "jax"]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    (row,) = res["sizes"].values()
    assert set(row["us"]) == {"jax/jax", "torch/triton"} and set(res["part_seconds"]) == {"torch", "jax"}
    assert res["unavailable"] == {} and row["scan_sum_us"] > 0
    cfg = {"refs": str(tmp_path), "deadline": 0.0, "hard_deadline": 0.0}
    got = ks._spawn("pallas", ["--tiny", "--out", str(tmp_path), "--sizes", "0"], cfg, log=lambda s: None)
    assert got["sizes"] == {} and got["unavailable"]["jax/pallas"].startswith("worker exited 2: ")


def _jax_trace(kernels: list[tuple[str, float]]) -> list[dict]:
    """A jax.profiler Chrome trace as XLA's exporter writes it: the GPU's process with a stream line (the CUPTI kernel
    records) and derived lines that repeat them, and the host's process."""
    events = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
              {"ph": "M", "pid": 1, "tid": 13, "name": "thread_name", "args": {"name": "Stream #13(Compute)"}},
              {"ph": "M", "pid": 1, "tid": 101, "name": "thread_name", "args": {"name": "XLA Ops"}},
              {"ph": "M", "pid": 701, "name": "process_name", "args": {"name": "/host:CPU"}},
              {"ph": "X", "pid": 701, "tid": 5, "ts": 0.0, "dur": 50.0, "name": "PjitFunction(op)"},
              {"ph": "X", "pid": 1, "tid": 13, "ts": 1.0, "dur": 9.0, "name": "MemcpyH2D"}]
    for i, (name, dur) in enumerate(kernels):
        events += [{"ph": "X", "pid": 1, "tid": 13, "ts": 10.0 * i, "dur": dur, "name": name},
                   {"ph": "X", "pid": 1, "tid": 101, "ts": 10.0 * i, "dur": dur, "name": name}]
    return events


def test_kernel_device_time_from_the_profilers_traces():
    launches = [("categorical_td_target", 4.0), ("loop_convert_fusion", 1.0), ("categorical_td_target", 6.0),
                ("loop_convert_fusion", 1.0), ("categorical_td_target", 5.0), ("loop_convert_fusion", 1.5)]
    events = ks.jax_kernel_events(_jax_trace(launches))
    assert events == launches  # the stream's kernels only: no copies, no derived lines, no host events
    got = ks.summarize_kernels(events, calls=3)
    assert got["device_us"] == 5.0 and got["program_us"] == pytest.approx(18.5 / 3)
    assert got["kernels"] == {"categorical_td_target": 1.0, "loop_convert_fusion": 1.0}
    # Without process and thread names: XLA's numbering (GPU processes and stream lines below 100).
    bare = [e for e in _jax_trace(launches) if e["ph"] != "M"]
    assert [n for n, _ in ks.jax_kernel_events(bare)] == [n for n, _ in launches]
    # The jnp reference has no kernel of that name: a call's device time is all of its kernels.
    ref = ks.summarize_kernels([("reduce_fusion", 3.0), ("loop_fusion", 2.0)], calls=1)
    assert ref["device_us"] == ref["program_us"] == 5.0
    assert ks.summarize_kernels([], calls=4)["device_us"] is None
    torch_trace = [{"ph": "X", "cat": "kernel", "name": "categorical_td_target_kernel", "dur": 2.5},
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 4.0},
                   {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "dur": 1.0}]
    assert ks.torch_kernel_events(torch_trace) == [("categorical_td_target_kernel", 2.5)]


def test_profile_plan_rotates_inputs_out_of_l2():
    for B in (512, 2048, 65536, 1_048_576):
        sets, calls = ks._profile_plan(B, 101, 2, 4)
        set_bytes = 2 * B * 101 * 4 + B * 101 * 4 + 5 * B * 4
        assert sets >= 2 and ks.PROFILE_CALLS[0] <= calls <= ks.PROFILE_CALLS[1] and sets <= calls
        assert (sets - 1) * set_bytes >= ks.ROTATE_BYTES or sets == calls  # other sets between two uses of one


def test_floor_bytes_and_bad_arguments(tmp_path):
    assert ks.floor_bytes(2, 101, 2, 2) == 2 * 101 * 2 + 2 * 101 * 4 + 2 * 2 * 4 + 3 * 2 * 4
    for bad in (["--backends", "jax,cuda"], ["--sizes", "8,x"], ["--sizes", "0"]):
        with pytest.raises(SystemExit):
            ks.main(["--tiny", "--out", str(tmp_path), *bad])
