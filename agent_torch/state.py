"""Network bundle (module + compiled forward + optimizer + LR schedule), the torch twin of a JAX TrainState."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from agent_common.keys import AgentConfig
from agent_common.schedule import warmup_cosine_decay
from agent_torch.networks import normalize_parameters

__all__ = ["Network", "explain_compile_mode", "make_network", "resolve_compile_mode"]


def resolve_compile_mode(cfg: AgentConfig, device: torch.device) -> str:
    """The torch.compile mode to use, or ``"off"`` (``explain_compile_mode`` without the reason)."""
    return explain_compile_mode(cfg, device)[0]


def explain_compile_mode(cfg: AgentConfig, device: torch.device) -> tuple[str, str]:
    """The torch.compile mode to use (or ``"off"``) and why; ``agent.compile_scope`` says what it compiles.

    ``use_compile=false`` or ``compile_mode=off`` -> off; a named mode (``default``, ``reduce-overhead``,
    ``max-autotune``, ...) is used as given. ``auto`` -> off on the CPU (eager). On CUDA, ``auto`` with
    ``compile_scope=networks`` is off too: the fastest path that starts within seconds is no compilation, with the
    update step and action selection captured in CUDA graphs (``agent.use_cuda_graph``, on by default); upstream's
    rule (max-autotune on torch >= 2.9) autotunes GEMM templates for minutes before the first update, and its CUDA
    graphs are what the capture already gives. With ``compile_scope=update``, ``auto`` on CUDA is ``default``: the
    whole update compiled (fused kernels, no autotuning), replayed in the agent's CUDA graphs.
    """
    if not cfg.use_compile:
        return "off", "agent.use_compile=false"
    if cfg.compile_mode == "off":
        return "off", "agent.compile_mode=off"
    if cfg.compile_mode != "auto":
        return cfg.compile_mode, f"agent.compile_mode={cfg.compile_mode} (as configured)"
    if device.type != "cuda":
        return "off", f"agent.compile_mode=auto on {device.type}: eager"
    if cfg.compile_scope == "update":
        return "default", ("agent.compile_mode=auto with agent.compile_scope=update on CUDA: mode default (the "
                           "update's kernels fused by Inductor without autotuning)")
    if cfg.use_cuda_graph:
        return "off", ("agent.compile_mode=auto on CUDA: no torch.compile, CUDA graphs instead (the fastest path "
                       "that starts within seconds; max-autotune autotunes for minutes before its first update, "
                       "choose it with agent.compile_mode=max-autotune)")
    return "off", ("agent.compile_mode=auto on CUDA with agent.use_cuda_graph=false: eager, no CUDA graphs (a "
                   "torch.compile mode starts only after minutes of compilation; choose one with "
                   "agent.compile_mode=<mode>)")


@dataclass
class Network:
    """One trainable network: the module, its (optionally compiled) forward, Adam and the per-network LR schedule.

    Attributes:
        module: the ``nn.Module`` (state dicts are always taken from it, so keys never get ``_orig_mod.``).
        apply: callable used for forward passes (``torch.compile(module)`` or the module itself).
        project_fn: the weight projection when it is compiled (else ``normalize_parameters`` runs eagerly).
        compiled_forward: whether ``apply`` is compiled.
        optimizer: Adam (betas 0.9/0.999, eps 1e-8, no weight decay), or None for the target critic.
        scheduler: ``LambdaLR`` stepped once per optimizer step, or None.
        project: whether ``normalize_parameters`` runs after each optimizer step (actor, critic: yes).
    """

    module: nn.Module
    apply: Callable[..., Any]
    optimizer: torch.optim.Optimizer | None
    scheduler: torch.optim.lr_scheduler.LambdaLR | None
    project: bool
    project_fn: Callable[[], None] | None = None
    graph_safe: bool = False  # Adam is capturable with a device-tensor LR (CUDA-graph capture of the update step)
    compiled_forward: bool = False  # ``apply`` is torch.compile(module) (agent.compile_scope=networks)
    grad_sync: Callable[[], None] | None = None  # averages gradients across replicas (agent_torch.distributed)

    def normalize(self) -> None:
        """Unit-norm weight projection (no-op if ``project`` is False); compiled when the network is compiled."""
        if not self.project:
            return
        if self.project_fn is not None:
            self.project_fn()
        else:
            normalize_parameters(self.module)

    def state_dict(self) -> dict[str, Any]:
        """Upstream per-network checkpoint layout (learning rates as Python floats, whatever the optimizer holds)."""
        return {
            "network_state_dict": self.module.state_dict(),
            "optimizer_state_dict": _lr_floats(self.optimizer.state_dict()) if self.optimizer is not None else None,
            "scheduler_state_dict": _lr_floats(self.scheduler.state_dict()) if self.scheduler is not None else None,
            "update_step": 0,
        }

    def load_state_dict(self, state: dict[str, Any], load_optimizer: bool = True) -> None:
        """Restores ``state_dict()`` output (optimizer and scheduler only if ``load_optimizer``)."""
        self.module.load_state_dict(state["network_state_dict"])
        if load_optimizer and self.optimizer is not None and state["optimizer_state_dict"] is not None:
            self.optimizer.load_state_dict(state["optimizer_state_dict"])
        if load_optimizer and self.scheduler is not None and state["scheduler_state_dict"] is not None:
            self.scheduler.load_state_dict(state["scheduler_state_dict"])
        self.ensure_lr_tensors()

    def ensure_lr_tensors(self) -> None:
        """For a ``graph_safe`` network: learning rates back into device tensors after something wrote floats
        (``load_state_dict``, ``set_schedule_step``); a no-op otherwise."""
        if self.graph_safe and self.optimizer is not None:
            _lr_tensors(self.optimizer)

    @property
    def schedule_step(self) -> int:
        """Optimizer steps the LR schedule has counted (0 before the first step)."""
        if self.scheduler is None:
            raise ValueError("schedule_step: this network has no LR schedule (not trainable)")
        return int(self.scheduler.last_epoch)

    def set_schedule_step(self, step: int) -> None:
        """Puts the LR schedule where ``step`` optimizer steps leave it: the scheduler's counters and last learning
        rates, and each param group's ``lr`` (as floats; ``ensure_lr_tensors`` turns them back into device tensors
        for a ``graph_safe`` network). Adam's own step counts are the optimizer state's, not touched here."""
        if self.scheduler is None or self.optimizer is None:
            raise ValueError("set_schedule_step: this network has no optimizer / LR schedule (not trainable)")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"set_schedule_step: step must be an int >= 0, got {step!r}")
        scheduler = self.scheduler
        lrs = [base_lr * fn(step) for fn, base_lr in zip(scheduler.lr_lambdas, scheduler.base_lrs, strict=True)]
        state = scheduler.state_dict()
        state.update(last_epoch=step, _step_count=step + 1, _last_lr=list(lrs))  # LambdaLR's constructor steps once
        scheduler.load_state_dict(state)
        for group, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr


_LR_KEYS = ("lr", "initial_lr")


def _lr_floats(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of an optimizer / LR-scheduler state dict whose learning rates are floats (portable checkpoints)."""
    out = dict(state)
    if "param_groups" in out:
        out["param_groups"] = [
            {k: float(v) if k in _LR_KEYS and isinstance(v, torch.Tensor) else v for k, v in g.items()}
            for g in out["param_groups"]
        ]
    for key in ("base_lrs", "_last_lr"):
        if key in out:
            out[key] = [float(v) for v in out[key]]
    return out


def _lr_tensors(optimizer: torch.optim.Optimizer) -> None:
    """Each group's LR as a 0-d fp32 device tensor, so a captured optimizer step reads the LR that the scheduler
    writes in place (``LRScheduler`` fills tensor LRs); ``initial_lr`` and the scheduler's base LRs stay floats."""
    device = optimizer.param_groups[0]["params"][0].device
    for group in optimizer.param_groups:
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)


def _lr_lambda(step: int, cfg: AgentConfig) -> float:
    return warmup_cosine_decay(
        step,
        cfg.learning_rate_init,
        cfg.learning_rate_peak,
        cfg.learning_rate_end,
        int(cfg.learning_rate_warmup_step or 0),
        int(cfg.learning_rate_decay_step or 1),
    )


def make_network(
    module: nn.Module,
    cfg: AgentConfig,
    device: torch.device,
    trainable: bool = True,
    project: bool = True,
    compile_mode: str = "off",
    graph_safe: bool = False,
) -> Network:
    """Builds a ``Network`` around ``module`` (moved to ``device``).

    The optimizer's base LR is 1.0 and ``LambdaLR`` returns the absolute LR from ``warmup_cosine_decay``, so the
    LR equals the schedule value exactly.

    Args:
        module: the network.
        cfg: agent config (LR schedule keys).
        device: target device.
        trainable: create Adam + scheduler.
        project: run ``normalize_parameters`` after each step.
        compile_mode: ``"off"`` or a torch.compile mode.
        graph_safe: capturable Adam with a device-tensor LR (CUDA only), for CUDA-graph capture of the update.

    Returns:
        The bundle.
    """
    module = module.to(device)
    apply: Callable[..., Any] = module
    project_fn: Callable[[], None] | None = None
    if compile_mode != "off":
        apply = torch.compile(module, mode=compile_mode)
        if project:
            # as upstream, the projection is compiled too (default mode: in-place parameter updates, no CUDA graphs)
            project_fn = torch.compile(functools.partial(normalize_parameters, module), mode="default")
    optimizer = None
    scheduler = None
    if trainable:
        optimizer = torch.optim.Adam(
            module.parameters(),
            lr=1.0,
            betas=(0.9, 0.999),
            eps=1e-8,
            fused=True,
            capturable=graph_safe,
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, functools.partial(_lr_lambda, cfg=cfg))
        if graph_safe:
            _lr_tensors(optimizer)  # after the scheduler is built: its base LRs stay floats
    return Network(
        module=module,
        apply=apply,
        optimizer=optimizer,
        scheduler=scheduler,
        project=project,
        project_fn=project_fn,
        graph_safe=graph_safe and trainable,
        compiled_forward=compile_mode != "off",
    )
