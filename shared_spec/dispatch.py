"""The backend dispatcher shared by torch_impl and jax_impl: registries, decide-once, logged fallbacks, backend_info.

Standard library only. Each framework package creates one `Dispatcher`, registers its reference, its kernel and the
kernel's gate, and keeps only its framework-specific validation and configuration keys.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["BackendUnavailable", "Decision", "Dispatcher"]


class BackendUnavailable(RuntimeError):
    """A requested kernel backend cannot run these inputs here (raised in strict mode instead of a fallback)."""


@dataclass(frozen=True)
class Decision:
    """Which backend runs for one input configuration, and why.

    Attributes:
        requested: the `backend=` argument ("auto", the reference's name or the kernel's name).
        backend: the backend that runs (the reference or the kernel).
        reason: "requested", "auto: kernel available", or "fallback from <kernel>: <why it cannot run>".
    """

    requested: str
    backend: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        """{"requested", "backend", "reason"} (JSON-friendly)."""
        return asdict(self)


Gate = Callable[[tuple], "str | None"]


class Dispatcher:
    """One reference and one kernel backend; decides once per configuration which runs, and why.

    A configuration is a hashable tuple built by the framework package (device, log-prob dtype, E, N, ...); the
    kernel's gate receives it and returns None if the kernel can run it, else a one-line reason. Decisions are cached
    per (requested backend, configuration). The first fallback for a configuration is logged (a warning when the
    kernel was requested by name, info for "auto") and counted; a strict request raises BackendUnavailable instead.

    The registries are plain dicts, public so that tests and the benchmark harness can wrap or replace an entry:
    `implementations` (name -> callable), `gates` (name -> gate), `import_errors` (name -> why it failed to import).

    Args:
        reference: the reference backend's name ("torch", "jax"); always available.
        kernel: the kernel backend's name ("triton", "pallas").
        reference_impl: the reference implementation.
        logger: the logger that reports fallbacks ("flashsac.torch_impl", "flashsac.jax_impl").
        describe: configuration -> a short text for messages ("device=cpu, dtype=float32, E=2, N=101").
    """

    def __init__(self, *, reference: str, kernel: str, reference_impl: Callable[..., Any], logger: str,
                 describe: Callable[[tuple], str]) -> None:
        self.reference = reference
        self.kernel = kernel
        self.backends = ("auto", reference, kernel)
        self.implementations: dict[str, Callable[..., Any]] = {reference: reference_impl}
        self.gates: dict[str, Gate] = {}
        self.import_errors: dict[str, str] = {}
        self.log = logging.getLogger(logger)
        self._describe = describe
        self._decisions: dict[tuple[str, Hashable], Decision] = {}
        self._fallback_count = 0
        self._reset_hooks: list[Callable[[], None]] = []

    # ----------------------------------------------------------------------------------------------- registration

    def register(self, name: str, impl: Callable[..., Any], gate: Gate | None = None) -> None:
        """Make backend `name` runnable through `impl`, where `gate` (if given) allows it."""
        self.implementations[name] = impl
        if gate is not None:
            self.gates[name] = gate
        self.import_errors.pop(name, None)

    def add_reset_hook(self, hook: Callable[[], None]) -> None:
        """Call `hook` whenever `reset` forgets the decisions (a framework's caches built on them)."""
        self._reset_hooks.append(hook)

    def register_import_error(self, name: str, exc: BaseException) -> None:
        """Record why backend `name` could not be imported; it becomes the fallback reason."""
        self.import_errors[name] = f"{type(exc).__name__}: {exc}"

    # ---------------------------------------------------------------------------------------------------- queries

    def check_request(self, backend: object, strict: object) -> None:
        """Raise ValueError/TypeError naming the argument if `backend` or `strict` is not valid."""
        if backend not in self.backends:
            raise ValueError(f"backend must be one of {self.backends}, got {backend!r}")
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be a bool, got {type(strict).__name__} {strict!r}")

    def unavailable(self, name: str, config: tuple) -> str | None:
        """Why backend `name` cannot run `config` here, or None if it can."""
        if name not in self.implementations:
            return f"the {name} backend failed to import ({self.import_errors.get(name, 'not registered')})"
        gate = self.gates.get(name)
        return gate(config) if gate is not None else None

    def _evaluate(self, backend: str, config: tuple) -> tuple[Decision, bool]:
        """(decision, whether it is a fallback), without caching, logging or counting."""
        if backend == self.reference:
            return Decision(backend, self.reference, "requested"), False
        reason = self.unavailable(self.kernel, config)
        if reason is None:
            why = "requested" if backend == self.kernel else "auto: kernel available"
            return Decision(backend, self.kernel, why), False
        return Decision(backend, self.reference, f"fallback from {self.kernel}: {reason}"), True

    def decide(self, backend: str, strict: bool, config: tuple) -> Decision:
        """The backend that runs `config` for the request `backend` (validated by `check_request`).

        Cached per (backend, config): a repeat call is one dict lookup. The first fallback is logged and counted.

        Raises:
            BackendUnavailable: strict and the kernel (requested by name or by "auto") cannot run.
        """
        decision = self._decisions.get((backend, config))
        if decision is None:
            decision, fallback = self._evaluate(backend, config)
            if fallback and strict:  # not cached: a later non-strict call still logs and counts its fallback
                raise self._unavailable_error(backend, decision)
            if fallback:
                self._fallback_count += 1
                (self.log.warning if backend == self.kernel else self.log.info)(
                    "categorical_td_target: %s (%s); using the %s reference", decision.reason,
                    self._describe(config), self.reference)
            self._decisions[(backend, config)] = decision
        elif strict and decision.backend != self.kernel and backend != self.reference:
            raise self._unavailable_error(backend, decision)
        return decision

    def _unavailable_error(self, backend: str, decision: Decision) -> BackendUnavailable:
        reason = decision.reason.removeprefix(f"fallback from {self.kernel}: ")
        return BackendUnavailable(f"backend={backend!r} with strict=True: the {self.kernel} kernel cannot run: "
                                  f"{reason}")

    def info(self, device: str, probe: tuple, config: tuple | None = None, backend: str = "auto",
             **extra: Any) -> dict[str, Any]:
        """The `backend_info()` structure, identical in both frameworks. Never decides, logs or counts anything.

        Args:
            device: the default device/platform the availability is reported for ("cpu", "cuda:0", "gpu").
            probe: the configuration the availability is checked for (fp32 log-probs, E = 2, N = 101 on `device`).
            config: the inputs' configuration, if inputs were given; then "decision" is the decision for them.
            backend: the request the decision is reported for.
            extra: framework-specific facts (e.g. "interpret": whether the kernel runs interpreted).

        Returns:
            {"device", "probe": the probe configuration as text, "backends": {name: "available" or why not},
             "decision": None without inputs, else {"requested", "backend", "reason", "config"},
             "decisions": every cached decision as {"requested", "backend", "reason", "config"},
             "fallback_count": the number of configurations that fell back so far, **extra}.
        """
        decision = None
        if config is not None:
            self.check_request(backend, False)
            cached = self._decisions.get((backend, config))
            d = cached if cached is not None else self._evaluate(backend, config)[0]
            decision = dict(d.as_dict(), config=self._describe(config))
        return {
            "device": device,
            "probe": self._describe(probe),
            "backends": {name: self.unavailable(name, probe) or "available" for name in self.backends[1:]},
            "decision": decision,
            "decisions": [dict(d.as_dict(), config=self._describe(cfg)) for (_, cfg), d in self._decisions.items()],
            "fallback_count": self._fallback_count,
            **extra,
        }

    def stats(self) -> dict[str, int]:
        """{"fallback_count": the number of configurations that fell back (each counted once)}."""
        return {"fallback_count": self._fallback_count}

    def reset(self) -> None:
        """Forget cached decisions and counters (tests), and whatever the reset hooks cache on them."""
        self._decisions.clear()
        self._fallback_count = 0
        for hook in self._reset_hooks:
            hook()
