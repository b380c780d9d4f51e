"""Triton kernels and their host-side launch (no registration or dispatch here: see torch_impl)."""

from shared_spec.launch_config import kernel_config
from triton_kernels.categorical_td_target import G_BAND_MIN, categorical_td_target_kernel
from triton_kernels.launch import INTERPRET, launch

__all__ = ["G_BAND_MIN", "INTERPRET", "categorical_td_target_kernel", "kernel_config", "launch"]
