"""``agent.compile_scope=update``: the torch agent's whole update step and its action selection compiled by
``torch.compile`` (Inductor) in a few pieces, replayed inside the agent's own CUDA graphs (``agent_torch.graphs``).

At the CPU-simulator recipe's sizes an eager update is about 500 tiny kernels, and on a GPU their launches, not their
arithmetic, are its cost, even replayed from one CUDA graph. Inductor fuses each piece's elementwise and reduction
work into a few kernels (matrix products stay cuBLAS calls), AOTAutograd compiles each loss's backward the same way,
and the CUDA graph removes the launches' host cost. The pieces (``agent_torch.update.UpdateFunctions``), each
compiled whole (``fullgraph=True``, static shapes):

    actor_loss        the actor's BN-training forward on [s; s'], the frozen critic's forward, the actor loss
    temperature_loss  α·(H − H̄)
    critic_loss       the TD target (a' from the actor, the target critic, the categorical-target op, a Triton
                      kernel Inductor calls in place) and the critic's forward and cross-entropy loss
    finish_critic     the critic's weight projection and the target EMA, fused
    project           the actor's weight projection
    act               action selection

Between them run eagerly (inside the CUDA graph when captured): ``zero_grad``, ``backward`` (which runs each loss's
compiled backward), the gradient all-reduce of data-parallel replicas, and fused Adam (one ATen kernel per network).
The critic-only update reuses the critic pieces of the actor update, so the compiled code is the same for both
variants. The parameters and every state tensor keep their modules, names and layouts (the modules themselves are
never wrapped, so state dicts never gain ``_orig_mod.``): checkpoints, conversions and resume are the eager path's.

Numerics: Inductor fuses and reorders arithmetic (reductions especially), so a compiled update differs from the eager
one by float32 rounding. Random draws are aten's (``fallback_random``): the policy noise is the eager path's for the
same generator state, so the compiled path consumes the random streams exactly as the eager one does and a resumed
run continues exactly (tests/test_compiled_update.py).

Start-up: the pieces compile at their first call, unless ``precompile`` has compiled them already: the agent starts
it on a background thread at construction, on copies of its networks and a dummy batch of the run's shapes, with the
random generators' states restored afterwards, so the compilation overlaps the environment's construction, the
initial evaluation and the random warm-up, and the run is the one without it. Anything that touches the agent's
tensors waits for that thread first (``FlashSACAgent._await_precompile``).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from agent_torch.networks import normalize_parameters
from agent_torch.state import Network
from agent_torch.update import (
    Batch,
    UpdateContext,
    UpdateFunctions,
    actor_action,
    actor_loss,
    critic_loss,
    finish_critic,
    temperature_loss,
)

__all__ = ["BACKEND", "EXTRA_OPTIONS_ENV", "Precompile", "compile_update", "extra_options", "inductor_options"]

log = logging.getLogger(__name__)

BACKEND = os.environ.get("FLASHSAC_TORCH_COMPILE_BACKEND", "inductor")
"""The ``torch.compile`` backend of the pieces: Inductor, or what ``FLASHSAC_TORCH_COMPILE_BACKEND`` names. The CPU
tests use ``aot_eager`` (the same traced and functionalised graphs, run op by op by ATen: the eager numbers, bitwise,
in seconds instead of Inductor's minutes of C++ compilation)."""


EXTRA_OPTIONS_ENV = "FLASHSAC_TORCH_INDUCTOR_OPTIONS"
"""An environment variable of extra Inductor options for the pieces, ``key=value`` pairs separated by commas (values
are Python literals), e.g. ``combo_kernels=True`` (Inductor's horizontal fusion of independent kernels): a lever to
measure (``python -m bench torch-levers``), not a setting the runs need."""


def extra_options(text: str) -> dict[str, Any]:
    """``EXTRA_OPTIONS_ENV``'s value as a dict of Inductor options.

    Raises:
        ValueError: a pair without ``=``, a value that is not a Python literal, or a key Inductor does not have.
    """
    options: dict[str, Any] = {}
    known = torch._inductor.config.get_config_copy()
    for pair in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{EXTRA_OPTIONS_ENV}: expected key=value pairs separated by commas, got {pair!r}")
        if key not in known:
            raise ValueError(f"{EXTRA_OPTIONS_ENV}: Inductor has no option {key!r} (torch._inductor.config)")
        try:
            options[key] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"{EXTRA_OPTIONS_ENV}: the value of {key} must be a Python literal (True, 1, 'x'), "
                             f"got {value.strip()!r}") from None
    return options


def inductor_options(mode: str, extra: str = "") -> dict[str, Any]:
    """Inductor's options for ``mode`` (``default`` or ``max-autotune-no-cudagraphs``): the mode's own options, no
    CUDA graphs of Inductor's (the agent captures its own), aten's random draws (``fallback_random``), then
    ``extra`` (``EXTRA_OPTIONS_ENV``'s format)."""
    options = {} if mode == "default" else dict(torch._inductor.list_mode_options(mode))
    options.update({"triton.cudagraphs": False, "fallback_random": True})
    options.update(extra_options(extra))
    return options


@functools.cache
def _compiled(mode: str, backend: str, extra: str) -> UpdateFunctions:
    options = inductor_options(mode, extra) if backend == "inductor" else None
    compile_fn = functools.partial(torch.compile, fullgraph=True, dynamic=False, backend=backend, options=options)
    return UpdateFunctions(
        actor_loss=compile_fn(actor_loss),
        temperature_loss=compile_fn(temperature_loss),
        critic_loss=compile_fn(critic_loss),
        finish_critic=compile_fn(finish_critic),
        project=compile_fn(normalize_parameters),
        act=compile_fn(actor_action),
    )


def compile_update(mode: str) -> UpdateFunctions:
    """The update's pieces compiled with ``mode`` (``agent.compile_mode``: default or max-autotune-no-cudagraphs) and
    ``EXTRA_OPTIONS_ENV``'s options, if set.

    One set per mode, backend and options in a process: the compiled code of a piece is kept per function and guarded
    on the structure of its arguments (modules, shapes, constants), not on their identity, so every agent of one
    configuration (and ``Precompile``'s copies of its networks) runs the same compiled code."""
    return _compiled(mode, BACKEND, os.environ.get(EXTRA_OPTIONS_ENV, ""))


def _copy(net: Network, project: Callable[[torch.nn.Module], None] | None) -> Network:
    """A copy of ``net`` for compiling: its own module (the same structure and tensor metadata, so the compiled code
    serves the original), no optimizer, schedule or gradient sync."""
    module = copy.deepcopy(net.module)
    return dataclasses.replace(net, module=module, apply=module, optimizer=None, scheduler=None, grad_sync=None,
                               project_fn=None if project is None else functools.partial(project, module))


class Precompile:
    """Compiles every piece of ``pieces`` on a background thread, on copies of the networks (taken here, on the
    caller's thread) and a dummy flat batch of ``batch_shape`` split by ``split`` as the agent splits its batches,
    then acting on ``(num_envs, O)`` observations with and without noise; ``wait`` joins it and re-raises its
    error. The CPU and ``device``'s random generators are restored when it ends, and the agent's own tensors are
    never touched, so a run that waits for it before using its random generators or its networks is bitwise the
    run without it.

    Args:
        pieces: the compiled update (``compile_update``).
        networks: the agent's actor, critic, target critic and temperature.
        ctx: the update's constants.
        split: the agent's flat batch -> ``Batch``.
        batch_shape: (B, 2O + A + 2).
        act_shape: (E, O) observations, (E, A) noise.
        device: the agent's device.
    """

    def __init__(self, pieces: UpdateFunctions, networks: tuple[Network, Network, Network, Network],
                 ctx: UpdateContext, split: Callable[[torch.Tensor], Batch], batch_shape: tuple[int, int],
                 act_shape: tuple[tuple[int, int], tuple[int, int]], device: torch.device) -> None:
        actor, critic, target, temperature = networks
        self._nets = (_copy(actor, pieces.project if actor.project_fn is not None else None), _copy(critic, None),
                      _copy(target, None), _copy(temperature, None))
        self._args = (pieces, ctx, split, batch_shape, act_shape, device)
        self._error: BaseException | None = None
        self.seconds: float | None = None
        self._thread = threading.Thread(target=self._run, name="flashsac-torch-precompile", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pieces, ctx, split, batch_shape, act_shape, device = self._args
        actor, critic, target, temperature = self._nets
        t0 = time.perf_counter()
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                if device.type == "cuda":
                    torch.cuda.set_device(device)
                b = split(torch.zeros(batch_shape, dtype=torch.float32, device=device))
                loss, info = pieces.actor_loss(actor, critic, temperature, b, ctx)
                loss.float().backward()
                loss, _ = pieces.temperature_loss(temperature, info["actor/entropy"], ctx)
                loss.backward()
                actor.normalize()
                loss, _ = pieces.critic_loss(actor, critic, target, temperature, b, ctx)
                loss.float().backward()
                pieces.finish_critic(critic, target, ctx.tau)
                (obs_shape, noise_shape) = act_shape
                obs = torch.zeros(obs_shape, dtype=torch.float32, device=device)
                with torch.no_grad():
                    pieces.act(actor.module, obs, None)
                    pieces.act(actor.module, obs, torch.zeros(noise_shape, dtype=torch.float32, device=device))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
        except BaseException as error:  # raised on the agent's thread by ``wait``
            self._error = error
        finally:
            self.seconds = time.perf_counter() - t0
            self._nets = ()
            self._args = ()

    def wait(self) -> None:
        """Blocks until the compilation has finished; re-raises its error (once)."""
        self._thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise RuntimeError(f"compiling the update (agent.compile_scope=update) failed: {error}") from error
