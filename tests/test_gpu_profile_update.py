"""bench.gpu_profile_update's summary of Nsight Compute's raw CSV (the profiling itself needs the GPU)."""

import pytest

from bench.gpu_profile_update import summarize, summarize_trace

NCU_CSV = '''==PROF== Connected to process 1234 (/usr/bin/python3)
==PROF== Profiling "fusion_12": 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","gpu__time_duration.sum"
"","","","","","","","nsecond"
"0","1234","python3","vm","fusion_12","1","7","2,000"
"1","1234","python3","vm","gemm_kernel","1","7","10,000"
"2","1234","python3","vm","fusion_12","1","7","4,000"
"3","1234","python3","vm","gemm_kernel","1","7","6,000"
==PROF== Disconnected from process 1234
'''


def test_summary_per_update_and_top_kernels(tmp_path):
    path = tmp_path / "ncu.csv"
    path.write_text(NCU_CSV)
    text = summarize(str(path), updates=2)
    assert "4 kernels over 2 updates: 2 kernels and 11.0 us of kernel time per update" in text
    lines = [line for line in text.splitlines() if line.startswith("| `")]
    assert lines[0] == "| `gemm_kernel` | 1 | 8.0 | 72.7 % |"  # sorted by total time
    assert lines[1] == "| `fusion_12` | 1 | 3.0 | 27.3 % |"


def test_summary_refuses_output_without_kernels(tmp_path):
    path = tmp_path / "ncu.csv"
    path.write_text("==PROF== No kernels were profiled.\n")
    with pytest.raises(ValueError, match="no ncu CSV header"):
        summarize(str(path), updates=2)


def _trace(tmp_path, events):
    import gzip
    import json

    folder = tmp_path / "plugins" / "profile" / "run"
    folder.mkdir(parents=True)
    with gzip.open(folder / "vm.trace.json.gz", "wt") as f:
        json.dump({"displayTimeUnit": "ns", "traceEvents": events}, f)
    return str(tmp_path)


def test_trace_summary_counts_stream_kernels_once(tmp_path):
    # the device process holds the kernels on its "Stream" threads and XLA's derived op lines, which repeat them
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
            {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "name": "thread_name", "pid": 2, "tid": 7, "args": {"name": "Stream #7(Compute)"}},
            {"ph": "M", "name": "thread_name", "pid": 2, "tid": 9, "args": {"name": "XLA Ops"}}]
    kernels = [{"ph": "X", "pid": 2, "tid": 7, "name": n, "ts": ts, "dur": d}
               for n, ts, d in (("gemm", 0.0, 6.0), ("fusion", 10.0, 2.0), ("gemm", 20.0, 4.0), ("fusion", 30.0, 2.0))]
    derived = [dict(k, tid=9) for k in kernels]
    host = [{"ph": "X", "pid": 1, "tid": 3, "name": "PjitFunction", "ts": 0.0, "dur": 40.0}]
    text = summarize_trace(_trace(tmp_path, meta + kernels + derived + host), updates=2)
    assert "4 kernels over 2 updates: 2 kernels, 7.0 us of kernel time and 16.0 us of device span" in text
    assert "(busy 44 %)" in text
    assert "| `gemm` | 1 | 5.0 | 71.4 % |" in text


def test_cpu_trace_of_real_updates_is_refused_clearly(tmp_path, monkeypatch):
    # the real recording path (the JAX agent's updates under jax.profiler.trace), on CPU: no device kernels
    import bench.common as common
    import bench.gpu_profile_update as gp

    real = common.synthetic_jax_agent
    monkeypatch.setattr(common, "synthetic_jax_agent", lambda batch_size, backend: real(32, backend))
    assert gp.main(["--framework", "jax", "--backend", "jax", "--warmup", "1", "--updates", "2",
                    "--jax-trace", str(tmp_path)]) == 0
    with pytest.raises(ValueError, match="no kernel events on a device stream"):
        summarize_trace(str(tmp_path), updates=2)


def test_kernel_profile_summary_reads_metrics_units_and_top_stalls(tmp_path):
    from bench.gpu_ncu_kernel import summary

    path = tmp_path / "ncu_kernel.csv"
    path.write_text(
        '"ID","Kernel Name","gpu__time_duration.sum","launch__registers_per_thread",'
        '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",'
        '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",'
        '"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"\n'
        '"","","usecond","register/thread","","",""\n'
        '"0","_categorical_td_target_kernel","519.20","64","4.5","0.25","1.5"\n')
    text = summary(str(path), stalls=2)
    assert "## _categorical_td_target_kernel (ID 0)" in text
    assert "- duration: 519.20 usecond" in text and "- registers/thread: 64 register/thread" in text
    stalls = [line for line in text.splitlines() if "stall" in line]
    assert stalls == ["- stall long_scoreboard: 4.50 cycles per issued instruction",
                      "- stall wait: 1.50 cycles per issued instruction"]  # the two largest, largest first


def test_kernel_profile_rejects_unknown_backends_before_any_work():
    from bench.gpu_ncu_kernel import main

    with pytest.raises(SystemExit) as exc:
        main(["--backends", "triton,cuda"])
    assert exc.value.code == 2
