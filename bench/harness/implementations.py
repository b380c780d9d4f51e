"""What the harness evaluates: the references, upstream's path (eager and compiled: the baselines) and the kernels,
each called through its framework's dispatcher in strict mode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bench.harness.frameworks import jax_dispatch, torch, torch_dispatch

__all__ = ["IMPLEMENTATIONS", "Impl"]


@dataclass
class Impl:
    """One implementation under evaluation.

    call(inputs, gamma) runs it on framework inputs (a dict of the five arrays) and returns the (B, N) output.
    kernel_registry: (framework, name) of the dispatch registry entry whose calls prove that the kernel ran.
    deterministic: predicate on the torch device type: whether bitwise repeats are *required* (scatter-based torch
    references on CUDA use atomics, as upstream: recorded, not required).
    poison_output: NaN-poison uninitialised torch allocations during correctness calls. Off for the compiled
    upstream path: dynamo guards on the deterministic-algorithms flag, so toggling it recompiles the baseline (and
    upstream allocates its output with zeros_like anyway).
    """

    name: str
    framework: str
    role: str  # "reference" | "baseline" | "kernel"
    description: str
    call: Callable[[dict, float], object]
    backend: str | None = None  # the dispatcher backend name (torch_impl / jax_impl), None for upstream
    kernel_registry: tuple[str, str] | None = None
    nan_policy: bool = True
    deterministic: Callable[[str], bool] = field(default=lambda device_type: True)
    poison_output: bool = True


def _torch_call(backend: str) -> Callable[[dict, float], torch.Tensor]:
    def call(t: dict, gamma: float) -> torch.Tensor:
        return torch_dispatch.categorical_td_target(**t, gamma=gamma, backend=backend, strict=True)
    return call


def _jax_call(backend: str) -> Callable[[dict, float], object]:
    def call(t: dict, gamma: float):
        return jax_dispatch.categorical_td_target(**t, gamma=gamma, backend=backend, strict=True)
    return call


_UPSTREAM: dict[str, tuple] = {}


def _upstream_call(compiled: bool) -> Callable[[dict, float], torch.Tensor]:
    """Upstream's select + compute pair (bench/upstream.py). bf16/fp16 log-probs are upcast to fp32 first: upstream
    computes the target in the log-prob dtype, which is not a like-for-like baseline (the cast is timed with it)."""
    key = "compiled" if compiled else "eager"

    def call(t: dict, gamma: float) -> torch.Tensor:
        from bench import upstream

        if key not in _UPSTREAM:
            _UPSTREAM[key] = upstream.compiled() if compiled else upstream.eager()
        lp = t["next_log_probs"]
        lp = lp if lp.dtype == torch.float32 else lp.float()
        return upstream.upstream_target(*_UPSTREAM[key], t["next_qs"], lp, t["reward"], t["terminated"],
                                        t["next_alpha_log_pi"], gamma)
    return call


def _cpu_only(device_type: str) -> bool:
    return device_type == "cpu"


IMPLEMENTATIONS: dict[str, Impl] = {
    "torch": Impl("torch", "torch", "reference", "torch eager reference (torch_impl backend 'torch')",
                  _torch_call("torch"), backend="torch", deterministic=_cpu_only),
    "upstream_eager": Impl("upstream_eager", "torch", "baseline", "upstream FlashSAC path, eager (bench.upstream)",
                           _upstream_call(False), nan_policy=False, deterministic=_cpu_only),
    "upstream_compiled": Impl("upstream_compiled", "torch", "baseline",
                              "upstream FlashSAC path under default-mode torch.compile (the fast_p baseline)",
                              _upstream_call(True), nan_policy=False, deterministic=_cpu_only, poison_output=False),
    "triton": Impl("triton", "torch", "kernel", "fused Triton kernel (torch_impl backend 'triton', strict)",
                   _torch_call("triton"), backend="triton", kernel_registry=("torch", "triton")),
    "jax": Impl("jax", "jax", "reference", "jitted jnp reference (jax_impl backend 'jax')", _jax_call("jax"),
                backend="jax"),
    "pallas": Impl("pallas", "jax", "kernel", "fused Pallas kernel (jax_impl backend 'pallas', strict)",
                   _jax_call("pallas"), backend="pallas", kernel_registry=("jax", "pallas")),
}
