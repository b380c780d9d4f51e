"""The backend dispatcher shared by torch_impl and jax_impl: registries, decide-once, logged fallbacks, backend_info.

Standard library only. Each framework package creates one `Dispatcher` with its reference, its kernel backends and
the order in which `backend="auto"` prefers them, registers each kernel with its gate, and keeps only its
framework-specific validation and configuration keys.

`auto` chooses, in that order, the first kernel backend that (1) has a passing GPU validation result committed in
`VALIDATION_FILE` (bench/results/kernel-validation/validated.json, written by `python -m bench kernel-validate` on a
GPU) and (2) whose gate accepts the configuration; else the reference. A kernel without a validation result runs only
when requested by name. A kernel that raises at its first launch for a configuration (compile or launch failure,
caught where the call runs eagerly: `Dispatcher.call`) makes that configuration fall back to the reference, logged
with the exception and counted; a strict request re-raises the exception.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["KERNEL_BACKENDS", "REFERENCE_BACKENDS", "VALIDATION_ENV", "VALIDATION_FILE", "BackendUnavailable",
           "Decision", "Dispatcher", "backend_names", "load_validation"]

# The backend names of each framework's dispatcher (torch_impl.dispatch and jax_impl.dispatch build theirs from these,
# and agent_common.keys takes the allowed ``agent.categorical_target_backend`` values from ``backend_names``): the
# one list, readable without importing either framework.
REFERENCE_BACKENDS: dict[str, str] = {"torch": "torch", "jax": "jax"}
KERNEL_BACKENDS: dict[str, tuple[str, ...]] = {"torch": ("triton",), "jax": ("triton", "pallas", "mosaic")}


def backend_names(framework: str) -> tuple[str, ...]:
    """``("auto", reference, *kernels)`` of ``framework``'s dispatcher ("torch" or "jax"): every name its
    ``backend=`` accepts."""
    return ("auto", REFERENCE_BACKENDS[framework], *KERNEL_BACKENDS[framework])

# The committed GPU validation results (one entry per "framework/backend"); FLASHSAC_KERNEL_VALIDATION=<path> reads
# another file (tests, or a site's own validation run).
VALIDATION_FILE = Path(__file__).resolve().parents[1] / "bench" / "results" / "kernel-validation" / "validated.json"
VALIDATION_ENV = "FLASHSAC_KERNEL_VALIDATION"
VALIDATION_FORMAT = 1
_ENTRY_KEYS = ("gpu", "date", "versions", "result", "passed")


class BackendUnavailable(RuntimeError):
    """A requested kernel backend cannot run these inputs here (raised in strict mode instead of a fallback)."""


@dataclass(frozen=True)
class Decision:
    """Which backend runs for one input configuration, and why.

    Attributes:
        requested: the `backend=` argument ("auto", the reference's name or a kernel's name).
        backend: the backend that runs (the reference or a kernel).
        reason: "requested", "auto: <kernel> validated on <gpu>, available", "fallback from <kernel>: <why>" or
            "fallback from auto: <kernel>: <why>; ..." (every kernel of the auto order with its reason).
    """

    requested: str
    backend: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        """{"requested", "backend", "reason"} (JSON-friendly)."""
        return asdict(self)


Gate = Callable[[tuple], "str | None"]


def validation_path() -> Path:
    """The validation file this process reads: $FLASHSAC_KERNEL_VALIDATION, else VALIDATION_FILE."""
    env = os.environ.get(VALIDATION_ENV)
    return Path(env) if env else VALIDATION_FILE


def load_validation(path: str | os.PathLike | None = None) -> dict[str, dict[str, Any]]:
    """The GPU validation entries {"framework/backend": {"gpu", "date", "versions", "result", "passed", ...}}.

    A missing file is no entry (every kernel unvalidated). Raises ValueError naming the file and what is wrong if it
    is not a validation file of format VALIDATION_FORMAT.
    """
    path = Path(path) if path is not None else validation_path()
    if not path.exists():
        return {}
    fix = "regenerate it with `python -m bench kernel-validate --out DIR` on a GPU, or restore it with git"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a JSON validation file ({exc}); {fix}") from exc
    if not isinstance(data, dict) or data.get("format") != VALIDATION_FORMAT or not isinstance(
            data.get("backends"), dict):
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: expected {{'format': {VALIDATION_FORMAT}, 'backends': {{...}}}}, got format "
                         f"{got!r}; {fix}")
    for name, entry in data["backends"].items():
        missing = [k for k in _ENTRY_KEYS if not isinstance(entry, dict) or k not in entry]
        if "/" not in name or missing:
            raise ValueError(f"{path}: entry {name!r} must be 'framework/backend' with keys {_ENTRY_KEYS}, missing "
                             f"{missing}; {fix}")
    return dict(data["backends"])


class Dispatcher:
    """One reference and several kernel backends; decides once per configuration which runs, and why.

    A configuration is a hashable tuple built by the framework package (device, log-prob dtype, E, N, ...); each
    kernel's gate receives it and returns None if the kernel can run it, else a one-line reason. Decisions are cached
    per (requested backend, configuration) and logged once: a fallback as a warning when a kernel was requested by
    name, as info for "auto", and counted; any other decision at debug level. A strict request that would fall back
    raises BackendUnavailable instead.

    The registries are plain dicts, public so that tests and the benchmark harness can wrap or replace an entry:
    `implementations` (name -> callable), `gates` (name -> gate), `import_errors` (name -> why it failed to import).

    Args:
        framework: "torch" or "jax" (the key prefix in the validation file).
        reference: the reference backend's name ("torch", "jax"); always available.
        kernels: the kernel backends' names ("triton"; "triton", "pallas").
        auto_order: the kernels `auto` tries, first preferred (a subset of `kernels`).
        reference_impl: the reference implementation.
        logger: the logger that reports fallbacks ("flashsac.torch_impl", "flashsac.jax_impl").
        describe: configuration -> a short text for messages ("device=cpu, dtype=float32, E=2, N=101").
    """

    def __init__(self, *, framework: str, reference: str, kernels: tuple[str, ...], auto_order: tuple[str, ...],
                 reference_impl: Callable[..., Any], logger: str, describe: Callable[[tuple], str]) -> None:
        if not set(auto_order) <= set(kernels):
            raise ValueError(f"auto_order {auto_order} must name kernels of {kernels}")
        if framework in KERNEL_BACKENDS and (reference, tuple(kernels)) != (REFERENCE_BACKENDS[framework],
                                                                            KERNEL_BACKENDS[framework]):
            raise ValueError(f"the {framework} dispatcher's backends ({reference!r}, {tuple(kernels)}) differ from "
                             f"shared_spec.dispatch.REFERENCE_BACKENDS / KERNEL_BACKENDS "
                             f"({REFERENCE_BACKENDS[framework]!r}, {KERNEL_BACKENDS[framework]}): name a backend there")
        self.framework = framework
        self.reference = reference
        self.kernels = tuple(kernels)
        self.auto_order = tuple(auto_order)
        self.backends = ("auto", reference, *self.kernels)
        self.implementations: dict[str, Callable[..., Any]] = {reference: reference_impl}
        self.gates: dict[str, Gate] = {}
        self.import_errors: dict[str, str] = {}
        self.log = logging.getLogger(logger)
        self._describe = describe
        self._decisions: dict[tuple[str, Hashable], Decision] = {}
        self._failed: dict[tuple[str, Hashable], str] = {}  # (kernel, configuration) -> its first launch's error
        self._launched: set[tuple] = set()  # (kernel, configuration, variant) whose first launch passed
        self._fallback_count = 0
        self._runtime_failures = 0
        self._validation: dict[str, dict] | str | None = None  # entries, or why the file cannot be read
        self._reset_hooks: list[Callable[[], None]] = []

    # ----------------------------------------------------------------------------------------------- registration

    def register(self, name: str, impl: Callable[..., Any], gate: Gate | None = None) -> None:
        """Make backend `name` runnable through `impl`, where `gate` (if given) allows it."""
        if name not in self.backends:
            raise ValueError(f"unknown backend {name!r}: expected one of {self.backends[1:]}")
        self.implementations[name] = impl
        if gate is not None:
            self.gates[name] = gate
        self.import_errors.pop(name, None)

    def add_reset_hook(self, hook: Callable[[], None]) -> None:
        """Call `hook` whenever `reset` forgets the decisions (a framework's caches built on them)."""
        self._reset_hooks.append(hook)

    def register_import_error(self, name: str, exc: BaseException | str) -> None:
        """Record why backend `name` could not be imported (or is absent); it becomes the fallback reason."""
        self.import_errors[name] = exc if isinstance(exc, str) else f"{type(exc).__name__}: {_one_line(exc)}"

    # ---------------------------------------------------------------------------------------------------- queries

    def check_request(self, backend: object, strict: object) -> None:
        """Raise ValueError/TypeError naming the argument if `backend` or `strict` is not valid."""
        if backend not in self.backends:
            raise ValueError(f"backend must be one of {self.backends}, got {backend!r}")
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be a bool, got {type(strict).__name__} {strict!r}")

    def validation(self) -> dict[str, dict]:
        """This framework's validation entries by backend name (read once; `reset` reads the file again)."""
        if self._validation is None:
            try:
                entries = load_validation()
                prefix = f"{self.framework}/"
                self._validation = {k.removeprefix(prefix): v for k, v in entries.items() if k.startswith(prefix)}
            except ValueError as exc:
                self._validation = str(exc)
                self.log.warning("categorical_td_target: %s; auto uses no kernel until it is fixed", exc)
        return self._validation if isinstance(self._validation, dict) else {}

    def unvalidated(self, name: str) -> str | None:
        """Why `auto` may not choose kernel `name` (no passing GPU validation result), or None if it may."""
        entries = self.validation()
        if isinstance(self._validation, str):
            return f"the validation file cannot be read ({self._validation})"
        entry = entries.get(name)
        if entry is None:
            return (f"no GPU validation result for {self.framework}/{name} in {validation_path()} (auto picks only "
                    f"validated kernels; request backend={name!r} by name, or validate it: python -m bench "
                    f"kernel-validate on a GPU)")
        if entry.get("passed") is not True:
            return f"its GPU validation failed ({entry.get('gpu')}, {entry.get('date')}: {entry.get('result')})"
        return None

    def unavailable(self, name: str, config: tuple) -> str | None:
        """Why backend `name` cannot run `config` here, or None if it can."""
        if name not in self.implementations:
            return f"the {name} backend failed to import ({self.import_errors.get(name, 'not registered')})"
        failed = self._failed.get((name, config))
        if failed is not None:
            return failed
        gate = self.gates.get(name)
        return gate(config) if gate is not None else None

    def _evaluate(self, backend: str, config: tuple) -> tuple[Decision, bool]:
        """(decision, whether it is a fallback), without caching, logging or counting."""
        if backend == self.reference:
            return Decision(backend, self.reference, "requested"), False
        if backend != "auto":
            reason = self.unavailable(backend, config)
            if reason is None:
                return Decision(backend, backend, "requested"), False
            return Decision(backend, self.reference, f"fallback from {backend}: {reason}"), True
        reasons = []
        for name in self.auto_order:
            reason = self.unvalidated(name) or self.unavailable(name, config)
            if reason is None:
                gpu = self.validation()[name].get("gpu")
                return Decision(backend, name, f"auto: {name} validated on {gpu}, available"), False
            reasons.append(f"{name}: {reason}")
        return Decision(backend, self.reference, "fallback from auto: " + "; ".join(reasons)), True

    def decide(self, backend: str, strict: bool, config: tuple) -> Decision:
        """The backend that runs `config` for the request `backend` (validated by `check_request`).

        Cached per (backend, config): a repeat call is one dict lookup. The first fallback is logged and counted.

        Raises:
            BackendUnavailable: strict and the kernel (requested by name), or every kernel of the auto order,
                cannot run.
        """
        decision = self._decisions.get((backend, config))
        if decision is None:
            decision, fallback = self._evaluate(backend, config)
            if fallback and strict:  # not cached: a later non-strict call still logs and counts its fallback
                raise self._unavailable_error(decision)
            if fallback:
                self._fallback_count += 1
                (self.log.info if backend == "auto" else self.log.warning)(
                    "categorical_td_target: %s (%s); using the %s reference", decision.reason,
                    self._describe(config), self.reference)
            else:  # every other decision is logged once too, at debug level
                self.log.debug("categorical_td_target: backend=%r runs %s: %s (%s)", backend, decision.backend,
                               decision.reason, self._describe(config))
            self._decisions[(backend, config)] = decision
        elif strict and decision.backend == self.reference and backend != self.reference:
            raise self._unavailable_error(decision)
        return decision

    def _unavailable_error(self, decision: Decision) -> BackendUnavailable:
        if decision.requested == "auto":
            reason = decision.reason.removeprefix("fallback from auto: ")
            return BackendUnavailable(f"backend='auto' with strict=True: no kernel backend can run: {reason}")
        reason = decision.reason.removeprefix(f"fallback from {decision.requested}: ")
        return BackendUnavailable(f"backend={decision.requested!r} with strict=True: the {decision.requested} kernel "
                                  f"cannot run: {reason}")

    # ------------------------------------------------------------------------------------------ runtime failures

    def call(self, decision: Decision, config: tuple, strict: bool, run_kernel: Callable[[], Any],
             run_reference: Callable[[], Any], *, eager: bool, variant: Hashable = (),
             sync: Callable[[Any], Any] | None = None) -> Any:
        """Run `decision`'s backend: `run_reference()` for the reference, else `run_kernel()`.

        The first eager launch of a kernel per (configuration, variant) is checked: `run_kernel()` and `sync(out)`
        (which must raise any asynchronous launch error) run inside try/except. If they raise, strict re-raises the
        exception; else the configuration falls back to the reference for every request (`record_failure`: logged
        with the exception, counted once) and `run_reference()` is returned. Launches inside captured graphs or traced
        programs (`eager=False`) are not checked here: their failure is that program's (a framework's gate can
        probe the kernel eagerly at decision time).

        Args:
            variant: what else picks a separately compiled kernel (e.g. the launch configuration for B rows).
        """
        name = decision.backend
        if name == self.reference:
            return run_reference()
        key = (name, config, variant)
        if not eager or key in self._launched:
            return run_kernel()
        try:
            out = run_kernel()
            if sync is not None:
                sync(out)
        except Exception as exc:
            if strict:
                raise
            self.record_failure(name, config, exc)
            return run_reference()
        self._launched.add(key)
        return out

    def record_failure(self, name: str, config: tuple, exc: BaseException) -> str:
        """Kernel `name` raised `exc` at its first launch for `config`: every request that chose it for `config`
        (cached or later) falls back to the reference. Logged once with the exception, counted once. Returns the
        fallback reason."""
        reason = f"runtime failure at its first launch: {type(exc).__name__}: {_one_line(exc)}"
        self._failed[(name, config)] = reason
        self._fallback_count += 1
        self._runtime_failures += 1
        self.log.warning("categorical_td_target: the %s kernel failed at its first launch (%s): %s: %s; using the %s "
                         "reference for this configuration", name, self._describe(config), type(exc).__name__,
                         _one_line(exc), self.reference, exc_info=exc)
        for (request, cfg), decision in list(self._decisions.items()):
            if cfg == config and decision.backend == name:
                self._decisions[(request, cfg)] = Decision(request, self.reference, f"fallback from {name}: {reason}")
        for request in {"auto", name}:  # later requests of this configuration: decided, not logged or counted again
            self._decisions.setdefault((request, config),
                                       Decision(request, self.reference, f"fallback from {name}: {reason}"))
        return reason

    # ---------------------------------------------------------------------------------------------------- reports

    def info(self, device: str, probe: tuple, config: tuple | None = None, backend: str = "auto",
             **extra: Any) -> dict[str, Any]:
        """The `backend_info()` structure, identical in both frameworks. Never decides, logs or counts anything.

        Args:
            device: the default device/platform the availability is reported for ("cpu", "cuda:0", "gpu").
            probe: the configuration the availability is checked for (fp32 log-probs, E = 2, N = 101 on `device`).
            config: the inputs' configuration, if inputs were given; then "decision" is the decision for them.
            backend: the request the decision is reported for.
            extra: framework-specific facts (e.g. "interpret": whether a kernel runs interpreted).

        Returns:
            {"device", "probe": the probe configuration as text, "backends": {name: "available" or why not},
             "auto_order": the kernels auto tries, first preferred, "validated": {kernel: its validation entry, or
             why auto may not choose it}, "decision": None without inputs, else {"requested", "backend", "reason",
             "config"}, "decisions": every cached decision as {"requested", "backend", "reason", "config"},
             "fallback_count": the number of configurations that fell back so far (runtime failures included),
             "runtime_failures": kernels that failed at a first launch, **extra}.
        """
        decision = None
        if config is not None:
            self.check_request(backend, False)
            cached = self._decisions.get((backend, config))
            d = cached if cached is not None else self._evaluate(backend, config)[0]
            decision = dict(d.as_dict(), config=self._describe(config))
        entries = self.validation()
        return {
            "device": device,
            "probe": self._describe(probe),
            "backends": {name: self.unavailable(name, probe) or "available" for name in self.backends[1:]},
            "auto_order": list(self.auto_order),
            "validated": {name: entries[name] if self.unvalidated(name) is None else self.unvalidated(name)
                          for name in self.kernels},
            "decision": decision,
            "decisions": [dict(d.as_dict(), config=self._describe(cfg)) for (_, cfg), d in self._decisions.items()],
            "fallback_count": self._fallback_count,
            "runtime_failures": self._runtime_failures,
            **extra,
        }

    def stats(self) -> dict[str, int]:
        """{"fallback_count": configurations that fell back (each counted once), "runtime_failures": of them, those
        whose kernel failed at its first launch}."""
        return {"fallback_count": self._fallback_count, "runtime_failures": self._runtime_failures}

    def reset(self) -> None:
        """Forget cached decisions, first-launch results, counters and the validation file (tests), and whatever
        the reset hooks cache on them."""
        self._decisions.clear()
        self._failed.clear()
        self._launched.clear()
        self._fallback_count = 0
        self._runtime_failures = 0
        self._validation = None
        for hook in self._reset_hooks:
            hook()


def _one_line(exc: BaseException, limit: int = 400) -> str:
    """The exception's message on one line, at most `limit` characters."""
    return " ".join(str(exc).split())[:limit]
