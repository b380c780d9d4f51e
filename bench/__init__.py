"""Benchmarks: `python -m bench <job>` (the jobs are listed in bench/__main__.py), their committed results in
bench/results/, and the cascaded kernel evaluation harness (bench/harness/)."""
