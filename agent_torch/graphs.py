"""CUDA-graph capture of the torch agent's update step and action selection (project key ``agent.use_cuda_graph``).

Upstream reaches CUDA graphs through ``torch.compile`` (reduce-overhead / max-autotune cudagraph trees). On a host
where one kernel launch costs 10-40 us, an eager FlashSAC update (hundreds of small kernels) is launch-bound, and
max-autotune spends minutes autotuning before the first update. ``GraphCache`` instead captures a whole Python
function -- the full update step (forwards, backwards, fused capturable Adam, weight projection, EMA) or the action
selection -- into one ``torch.cuda.CUDAGraph`` per variant, after a few eager warm-up calls on a side stream (lazy
optimizer state and cuBLAS workspaces are created there), and replays it with new inputs copied into its static
input tensors. Random draws inside a graph use PyTorch's graph-safe Philox offsets, so each replay draws fresh noise.

What must hold for a captured function (the agent's code keeps to it): no host synchronisation, no Python-side
decisions that depend on tensor values, every tensor it reads either a static input or module/optimizer state that
is only ever updated in place, and Python scalars that change between calls (learning rates) held in device
tensors. The caller invalidates the cache (``clear``) whenever it replaces such state, e.g. on checkpoint load.
Mixed precision keeps to it as well: bf16 autocast needs no scaler, and the fp16 loss scale, its inf check and the
skipped step live on the device (``agent_torch.amp.DeviceLossScaler``); autocast's weight cache is off in a graph.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from agent_common.keys import Config

__all__ = ["GraphCache", "resolve_cuda_graph"]


def resolve_cuda_graph(cfg: Config, device: torch.device, compile_mode: str) -> tuple[bool, str]:
    """Whether the update step and action selection run as captured CUDA graphs, and why (``agent.use_cuda_graph``).

    On only with CUDA and no torch.compile mode that brings its own CUDA graphs (reduce-overhead, max-autotune*):
    compile_mode=default is captured as well, and with ``agent.compile_scope=update`` max-autotune-no-cudagraphs too
    (the compiled update's kernels replayed in the agent's graphs). AMP (bf16, or fp16 with the device loss scale)
    is captured too.
    """
    a = cfg.agent
    if not a.use_cuda_graph:
        return False, "agent.use_cuda_graph=false"
    if device.type != "cuda":
        return False, f"device {device.type} (CUDA graphs need CUDA)"
    capturable = ("off", "default", "max-autotune-no-cudagraphs") if a.compile_scope == "update" else ("off", "default")
    if compile_mode not in capturable:
        return False, f"compile_mode={compile_mode} captures its own CUDA graphs"
    amp = f", AMP {'fp16' if a.amp_dtype == 'auto' else a.amp_dtype}" if a.use_amp else ""  # auto on CUDA: fp16
    return True, f"update step and action selection captured (compile_mode={compile_mode}{amp})"


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]
    output: Any


class GraphCache:
    """Per-key lazily captured CUDA graphs of ``fn(*inputs)``.

    The first ``warmup`` calls of a key run ``fn`` eagerly on a side stream; the next call captures ``fn`` on copies
    of its inputs (nothing executes during capture) and replays the graph; every later call copies the new inputs
    into the static ones and replays. The returned output is the graph's static output: read or copy it before the
    next call of the same key.

    Args:
        warmup: eager calls per key before its capture (>= 1).
        capture_error_mode: ``torch.cuda.graph``'s mode: ``"thread_local"`` when other threads make CUDA calls
            during a capture (the NCCL process group's watchdog, under data parallel), else ``"global"``.
    """

    def __init__(self, warmup: int = 3, capture_error_mode: str = "global") -> None:
        if warmup < 1:
            raise ValueError(f"warmup must be >= 1, got {warmup}")
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise ValueError(f"capture_error_mode must be global, thread_local or relaxed, got {capture_error_mode!r}")
        self.warmup = warmup
        self.capture_error_mode = capture_error_mode
        self._graphs: dict[Hashable, _Captured] = {}
        self._calls: dict[Hashable, int] = {}
        self._stream: torch.cuda.Stream | None = None

    def __len__(self) -> int:
        return len(self._graphs)

    def clear(self) -> None:
        """Drops every graph (and restarts the warm-up count): call after replacing state the graphs read."""
        self._graphs.clear()
        self._calls.clear()

    def __call__(self, key: Hashable, fn: Callable[..., Any], *inputs: torch.Tensor) -> Any:
        entry = self._graphs.get(key)
        if entry is None:
            calls = self._calls.get(key, 0)
            self._calls[key] = calls + 1
            if self._stream is None:
                self._stream = torch.cuda.Stream()
            current = torch.cuda.current_stream()
            self._stream.wait_stream(current)
            if calls < self.warmup:
                with torch.cuda.stream(self._stream):
                    output = fn(*inputs)
                current.wait_stream(self._stream)
                return output
            static = tuple(x.clone() for x in inputs)
            graph = torch.cuda.CUDAGraph()
            mode = {} if self.capture_error_mode == "global" else {"capture_error_mode": self.capture_error_mode}
            with torch.cuda.graph(graph, stream=self._stream, **mode):
                output = fn(*static)
            entry = self._graphs[key] = _Captured(graph, static, output)
        else:
            for dst, src in zip(entry.inputs, inputs, strict=True):
                dst.copy_(src, non_blocking=True)
        entry.graph.replay()
        return entry.output
