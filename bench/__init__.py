"""Benchmarks, GPU validation scripts and the cascaded kernel evaluation harness."""
