"""bench.gpu_profile_update's summary of Nsight Compute's raw CSV (the profiling itself needs the GPU)."""

import pytest

from bench.gpu_profile_update import summarize

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
