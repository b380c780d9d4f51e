"""Triton kernels (no registration or dispatch here: see torch_impl)."""

from triton_kernels.categorical_td_target import G_BAND_MIN, categorical_td_target_kernel, kernel_config

__all__ = ["G_BAND_MIN", "categorical_td_target_kernel", "kernel_config"]
