"""The backend dispatcher shared by torch_impl and jax_impl: registries, decide-once, logged fallbacks, backend_info.

Standard library only. Each framework package creates one `Dispatcher` with its reference, its kernel backends and
the fixed order in which `backend="auto"` prefers them, registers each kernel with its gate, and keeps only its
framework-specific validation and configuration keys.

`auto` chooses, in its order, the first kernel backend that (1) has a passing GPU validation entry and (2) whose gate
accepts the configuration; else the reference. The validation entries ("framework/backend") come from the packaged
`VALIDATION_FILE` (shared_spec/data/kernel_validation.json, installed with the package) merged with the user's own
file (`user_validation_path()`: ${XDG_DATA_HOME:-~/.local/share}/flashsac/kernel_validation.json, written by
`flashsac-validate-kernels` on the user's GPU; its entries win); $FLASHSAC_KERNEL_VALIDATION=<path> replaces both.
The order is measured: where `AUTO_ORDER_FILE` (shared_spec/data/kernel_auto_order.json, written by `python -m bench
kernel-speed --record-order` from a committed kernel-speed run) holds bands for the framework and the call's B rows
are known, auto tries the kernels of B's band, fastest first (a kernel slower than the reference there, or not
measured, is left out); else the framework's fixed order. A kernel without a validation entry runs only when
requested by name. A kernel that raises at its first launch for a configuration (compile or launch failure, caught
where the call runs eagerly: `Dispatcher.call`) makes that configuration fall back to the reference, logged with the
exception and counted; a strict request re-raises the exception.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["AUTO_ORDER_ENV", "AUTO_ORDER_FILE", "KERNEL_BACKENDS", "REFERENCE_BACKENDS", "VALIDATE_COMMAND",
           "VALIDATION_ENV", "VALIDATION_FILE", "BackendUnavailable", "Decision", "Dispatcher", "backend_names",
           "band_label", "load_auto_order", "load_validation", "read_validation", "user_validation_path",
           "validation_path", "validation_paths", "write_json_atomic"]

# The backend names of each framework's dispatcher (torch_impl.dispatch and jax_impl.dispatch build theirs from these,
# and agent_common.keys takes the allowed ``agent.categorical_target_backend`` values from ``backend_names``): the
# one list, readable without importing either framework.
REFERENCE_BACKENDS: dict[str, str] = {"torch": "torch", "jax": "jax"}
KERNEL_BACKENDS: dict[str, tuple[str, ...]] = {"torch": ("triton",), "jax": ("triton", "pallas", "mosaic")}


def backend_names(framework: str) -> tuple[str, ...]:
    """``("auto", reference, *kernels)`` of ``framework``'s dispatcher ("torch" or "jax"): every name its
    ``backend=`` accepts."""
    return ("auto", REFERENCE_BACKENDS[framework], *KERNEL_BACKENDS[framework])

# The installed data (package data of shared_spec, so a wheel holds it): the GPU validation results of the kernels
# and auto's order per size band. FLASHSAC_KERNEL_VALIDATION=<path> reads that file instead of the packaged and the
# user's validation files (tests, or a site's own file); FLASHSAC_KERNEL_AUTO_ORDER=<path> another order file.
DATA_DIR = Path(__file__).resolve().parent / "data"
VALIDATION_FILE = DATA_DIR / "kernel_validation.json"
AUTO_ORDER_FILE = DATA_DIR / "kernel_auto_order.json"
VALIDATION_ENV = "FLASHSAC_KERNEL_VALIDATION"
AUTO_ORDER_ENV = "FLASHSAC_KERNEL_AUTO_ORDER"
VALIDATION_FORMAT = 1
AUTO_ORDER_FORMAT = 1
# The installed command that validates the kernels on this machine's GPU (kernel_validation; pyproject's scripts).
VALIDATE_COMMAND = "flashsac-validate-kernels"
_ENTRY_KEYS = ("gpu", "date", "versions", "result", "passed")
_BAND_KEYS = ("max_B", "order", "source", "gpu", "date")


def user_validation_path(environ: Any = None) -> Path:
    """The user's own validation file: ${XDG_DATA_HOME:-~/.local/share}/flashsac/kernel_validation.json (what
    `flashsac-validate-kernels` writes by default)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "flashsac" / "kernel_validation.json"


def validation_path() -> Path:
    """The validation file of the shipped entries: $FLASHSAC_KERNEL_VALIDATION if set, else the packaged
    VALIDATION_FILE."""
    env = os.environ.get(VALIDATION_ENV)
    return Path(env) if env else VALIDATION_FILE


def validation_paths() -> list[Path]:
    """The validation files this process reads, later ones winning per entry: [$FLASHSAC_KERNEL_VALIDATION] if set,
    else [the packaged VALIDATION_FILE, the user's file]."""
    env = os.environ.get(VALIDATION_ENV)
    return [Path(env)] if env else [VALIDATION_FILE, user_validation_path()]


def _fix(path: Path) -> str:
    """How to repair a damaged file at `path` (the packaged, the user's or the environment's file)."""
    if os.environ.get(VALIDATION_ENV) and Path(os.environ[VALIDATION_ENV]) == path:
        return f"fix the file or unset {VALIDATION_ENV}"
    if path == user_validation_path():
        return (f"move it away and validate again on this GPU: {VALIDATE_COMMAND} (it writes {path}), or delete it "
                f"to use only the packaged results")
    if path == AUTO_ORDER_FILE or (os.environ.get(AUTO_ORDER_ENV) and Path(os.environ[AUTO_ORDER_ENV]) == path):
        return ("regenerate it with `python -m bench kernel-speed --out DIR --record-order` on a GPU, restore it "
                "with git, or reinstall the package")
    return (f"regenerate it with `{VALIDATE_COMMAND} --record` on a GPU (a checkout), restore it with git, or "
            f"reinstall the package")


def _read_json(path: Path, what: str, fmt: int, key: str) -> dict | None:
    """The JSON object at `path` (None if there is no file), checked for {"format": fmt, key: {...}}."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a JSON {what} file ({exc}); {_fix(path)}") from exc
    if not isinstance(data, dict) or data.get("format") != fmt or not isinstance(data.get(key), dict):
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: expected {{'format': {fmt}, '{key}': {{...}}}}, got format {got!r}; {_fix(path)}")
    return data


def load_validation(path: str | os.PathLike | None = None) -> dict[str, dict[str, Any]]:
    """The GPU validation entries of one file {"framework/backend": {"gpu", "date", "versions", "result", "passed",
    ...}}; `path` defaults to the last of `validation_paths()`.

    A missing file is no entry. Raises ValueError naming the file, what is wrong and how to fix it, if it is not a
    validation file of format VALIDATION_FORMAT.
    """
    path = Path(path) if path is not None else validation_paths()[-1]
    data = _read_json(path, "validation", VALIDATION_FORMAT, "backends")
    if data is None:
        return {}
    for name, entry in data["backends"].items():
        missing = [k for k in _ENTRY_KEYS if not isinstance(entry, dict) or k not in entry]
        if "/" not in name or missing:
            raise ValueError(f"{path}: entry {name!r} must be 'framework/backend' with keys {_ENTRY_KEYS}, missing "
                             f"{missing}; {_fix(path)}")
    return dict(data["backends"])


def read_validation() -> dict[str, dict[str, Any]]:
    """Every validation entry this process uses: `validation_paths()` merged in order (a later file's entry replaces
    an earlier one's), each entry with "file": the file it came from. Raises ValueError (`load_validation`)."""
    merged: dict[str, dict[str, Any]] = {}
    for path in validation_paths():
        for name, entry in load_validation(path).items():
            merged[name] = dict(entry, file=str(path))
    return merged


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write `data` as indented JSON to `path` through a temporary file in the same folder and a rename, so a reader
    (or a stopped writer) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")
    os.replace(tmp, path)


def auto_order_path() -> Path:
    """The auto-order file this process reads: $FLASHSAC_KERNEL_AUTO_ORDER, else AUTO_ORDER_FILE."""
    env = os.environ.get(AUTO_ORDER_ENV)
    return Path(env) if env else AUTO_ORDER_FILE


def band_label(low: int | None, high: int | None) -> str:
    """A band's B range as text: "B<=512", "512<B<=2048", "B>2048", or "every B"."""
    if low is None:
        return f"B<={high}" if high is not None else "every B"
    return f"{low}<B<={high}" if high is not None else f"B>{low}"


def load_auto_order(path: str | os.PathLike | None = None) -> dict[str, list[dict[str, Any]]]:
    """auto's measured order per size band: {framework: [band, ...]} with bands in increasing B, each {"max_B": its
    largest B (None for the last band: every larger B), "order": kernel names fastest first, "excluded": {kernel:
    why it is left out}, "source": the kernel-speed results.json it comes from, "gpu", "date", "label"}; `path`
    defaults to `auto_order_path()`. A missing file is no band. Raises ValueError naming the file if it is not an
    auto-order file of format AUTO_ORDER_FORMAT."""
    path = Path(path) if path is not None else auto_order_path()
    data = _read_json(path, "auto-order", AUTO_ORDER_FORMAT, "frameworks")
    if data is None:
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for framework, spec in data["frameworks"].items():
        bands = spec.get("bands") if isinstance(spec, dict) else None
        if not isinstance(bands, list) or not bands:
            raise ValueError(f"{path}: framework {framework!r} needs a non-empty list 'bands'; {_fix(path)}")
        low, checked = None, []
        for i, band in enumerate(bands):
            missing = [k for k in _BAND_KEYS if not isinstance(band, dict) or k not in band]
            last = i == len(bands) - 1
            high = band.get("max_B") if isinstance(band, dict) else None
            if missing or not isinstance(band["order"], list) or not all(isinstance(n, str) for n in band["order"]) \
                    or (high is None) != last or (high is not None and (not isinstance(high, int) or high < 1 or (
                        low is not None and high <= low))):
                raise ValueError(f"{path}: band {i} of {framework!r} must have keys {_BAND_KEYS} (missing {missing}), "
                                 f"an 'order' list of kernel names and 'max_B' increasing, null only in the last "
                                 f"band; got {band!r}; {_fix(path)}")
            checked.append(dict(band, excluded=dict(band.get("excluded") or {}), label=band_label(low, high)))
            low = high
        out[framework] = checked
    return out


def _ordinal(i: int) -> str:
    """0 -> "fastest", 1 -> "2nd fastest", ..."""
    return "fastest" if i == 0 else f"{i + 1}{({2: 'nd', 3: 'rd'}).get(i + 1, 'th')} fastest"


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


class Dispatcher:
    """One reference and several kernel backends; decides once per configuration which runs, and why.

    A configuration is a hashable tuple built by the framework package (device, log-prob dtype, E, N, ...); each
    kernel's gate receives it and returns None if the kernel can run it, else a one-line reason. Decisions are cached
    per (requested backend, configuration, and for "auto" the size band of the call's B rows) and logged once: a
    fallback as a warning when a kernel was requested by name, as info for "auto", and counted; any other decision
    at debug level. A strict request that would fall back
    raises BackendUnavailable instead.

    The registries are plain dicts, public so that tests and the benchmark harness can wrap or replace an entry:
    `implementations` (name -> callable), `gates` (name -> gate), `import_errors` (name -> why it failed to import).

    Args:
        framework: "torch" or "jax" (the key prefix in the validation file).
        reference: the reference backend's name ("torch", "jax"); always available.
        kernels: the kernel backends' names ("triton"; "triton", "pallas").
        auto_order: the kernels `auto` tries, first preferred (a subset of `kernels`), where no measured band applies
            (no auto-order file, no bands for `framework`, or B unknown).
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
        self._decisions: dict[tuple[str, Hashable, str | None], Decision] = {}  # (request, config, band label)
        self._failed: dict[tuple[str, Hashable], str] = {}  # (kernel, configuration) -> its first launch's error
        self._launched: set[tuple] = set()  # (kernel, configuration, variant) whose first launch passed
        self._fallback_count = 0
        self._runtime_failures = 0
        self._validation: dict[str, dict] | str | None = None  # entries, or why a file cannot be read
        self._bands: list[dict[str, Any]] | None = None  # auto's measured bands for this framework ([] if none)
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
        """This framework's validation entries by backend name, each with the "file" it came from (read once;
        `reset` reads the files again)."""
        if self._validation is None:
            try:
                entries = read_validation()
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
            return f"a validation file cannot be read ({self._validation})"
        entry = entries.get(name)
        if entry is None:
            files = " or ".join(str(p) for p in validation_paths())
            return (f"no GPU validation result for {self.framework}/{name} in {files} (auto picks only validated "
                    f"kernels; request backend={name!r} by name, or validate it on this GPU: {VALIDATE_COMMAND})")
        if entry.get("passed") is not True:
            return (f"its GPU validation failed ({entry.get('gpu')}, {entry.get('date')}: {entry.get('result')}; "
                    f"{entry.get('file')})")
        return None

    def bands(self) -> list[dict[str, Any]]:
        """auto's measured size bands for this framework (`load_auto_order`; [] if none or the file cannot be read,
        which is logged once; read once, `reset` reads it again). A band naming a kernel this dispatcher does not
        have is an error of the file."""
        if self._bands is None:
            try:
                bands = load_auto_order().get(self.framework, [])
                for band in bands:
                    unknown = [n for n in (*band["order"], *band["excluded"]) if n not in self.kernels]
                    if unknown:
                        raise ValueError(f"{auto_order_path()}: band {band['label']} of {self.framework!r} names "
                                         f"{unknown}, not kernels of {self.kernels}; {_fix(auto_order_path())}")
                self._bands = bands
            except ValueError as exc:
                self._bands = []
                self.log.warning("categorical_td_target: %s; auto uses its fixed order %s", exc, self.auto_order)
        return self._bands

    def band(self, rows: int | None) -> dict[str, Any] | None:
        """The measured band that holds B = `rows` (the first whose max_B >= rows), or None (B unknown, or no
        bands)."""
        if rows is None:
            return None
        for band in self.bands():
            if band["max_B"] is None or rows <= band["max_B"]:
                return band
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

    def _evaluate(self, backend: str, config: tuple, band: dict[str, Any] | None = None) -> tuple[Decision, bool]:
        """(decision, whether it is a fallback), without caching, logging or counting; `band`: auto's measured band
        for the call's B (None: the fixed order)."""
        if backend == self.reference:
            return Decision(backend, self.reference, "requested"), False
        if backend != "auto":
            reason = self.unavailable(backend, config)
            if reason is None:
                return Decision(backend, backend, "requested"), False
            return Decision(backend, self.reference, f"fallback from {backend}: {reason}"), True
        reasons = []
        order = self.auto_order if band is None else tuple(band["order"])
        for i, name in enumerate(order):
            reason = self.unvalidated(name) or self.unavailable(name, config)
            if reason is None:
                why = f"auto: {name} validated on {self.validation()[name].get('gpu')}, available"
                if band is not None:
                    why += (f", {_ordinal(i)} in band {band['label']} by {band['source']} ({band['gpu']}, "
                            f"{band['date']})")
                return Decision(backend, name, why), False
            reasons.append(f"{name}: {reason}")
        if band is not None:  # the kernels the band leaves out, with why
            for name in (*self.auto_order, *self.kernels):
                if name not in order and not any(r.startswith(f"{name}: ") for r in reasons):
                    why = band["excluded"].get(name, "not in its order")
                    reasons.append(f"{name}: {why} in band {band['label']} by {band['source']}")
        return Decision(backend, self.reference, "fallback from auto: " + "; ".join(reasons)), True

    def _key(self, backend: str, config: tuple, rows: int | None) -> tuple[tuple, dict[str, Any] | None]:
        """(the decision cache key, auto's band): "auto" is decided per band of B; a request by name, per
        configuration."""
        band = self.band(rows) if backend == "auto" else None
        return (backend, config, None if band is None else band["label"]), band

    def decide(self, backend: str, strict: bool, config: tuple, rows: int | None = None) -> Decision:
        """The backend that runs `config` for the request `backend` (validated by `check_request`); `rows`: the
        call's B, which picks auto's measured band (None: the fixed order).

        Cached per (backend, config, band): a repeat call is one dict lookup. The first fallback is logged and
        counted.

        Raises:
            BackendUnavailable: strict and the kernel (requested by name), or every kernel of the auto order,
                cannot run.
        """
        key, band = self._key(backend, config, rows)
        decision = self._decisions.get(key)
        if decision is None:
            decision, fallback = self._evaluate(backend, config, band)
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
            self._decisions[key] = decision
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
        for (request, cfg, band), decision in list(self._decisions.items()):
            if cfg == config and decision.backend == name:
                self._decisions[(request, cfg, band)] = Decision(request, self.reference,
                                                                 f"fallback from {name}: {reason}")
        for request in {"auto", name}:  # later requests of this configuration: decided, not logged or counted again
            self._decisions.setdefault((request, config, None),
                                       Decision(request, self.reference, f"fallback from {name}: {reason}"))
        return reason

    # ---------------------------------------------------------------------------------------------------- reports

    def info(self, device: str, probe: tuple, config: tuple | None = None, backend: str = "auto",
             rows: int | None = None, **extra: Any) -> dict[str, Any]:
        """The `backend_info()` structure, identical in both frameworks. Never decides, logs or counts anything.

        Args:
            device: the default device/platform the availability is reported for ("cpu", "cuda:0", "gpu").
            probe: the configuration the availability is checked for (fp32 log-probs, E = 2, N = 101 on `device`).
            config: the inputs' configuration, if inputs were given; then "decision" is the decision for them.
            backend: the request the decision is reported for.
            rows: the inputs' B, which picks auto's measured band.
            extra: framework-specific facts (e.g. "interpret": whether a kernel runs interpreted).

        Returns:
            {"device", "probe": the probe configuration as text, "backends": {name: "available" or why not},
             "auto_order": the kernels auto tries, first preferred, where no measured band applies, "auto_bands":
             the measured bands [{"band", "order", "excluded", "source", "gpu", "date"}] ([] without any),
             "validation_files": the validation files read, later ones winning, "validated": {kernel: its validation
             entry with the "file" it came from, or why auto may not choose it}, "decision": None without inputs,
             else {"requested", "backend", "reason", "config"}, "decisions": every cached decision as
             {"requested", "backend", "reason", "config"},
             "fallback_count": the number of configurations that fell back so far (runtime failures included),
             "runtime_failures": kernels that failed at a first launch, **extra}.
        """
        decision = None
        if config is not None:
            self.check_request(backend, False)
            key, band = self._key(backend, config, rows)
            cached = self._decisions.get(key)
            d = cached if cached is not None else self._evaluate(backend, config, band)[0]
            decision = dict(d.as_dict(), config=self._describe(config))
        entries = self.validation()
        return {
            "device": device,
            "probe": self._describe(probe),
            "backends": {name: self.unavailable(name, probe) or "available" for name in self.backends[1:]},
            "auto_order": list(self.auto_order),
            "auto_bands": [{"band": b["label"], "order": list(b["order"]), "excluded": dict(b["excluded"]),
                            "source": b["source"], "gpu": b["gpu"], "date": b["date"]} for b in self.bands()],
            "validation_files": [str(p) for p in validation_paths()],
            "validated": {name: entries[name] if self.unvalidated(name) is None else self.unvalidated(name)
                          for name in self.kernels},
            "decision": decision,
            "decisions": [dict(d.as_dict(), config=self._describe(cfg)) for (_, cfg, _), d in self._decisions.items()],
            "fallback_count": self._fallback_count,
            "runtime_failures": self._runtime_failures,
            **extra,
        }

    def stats(self) -> dict[str, int]:
        """{"fallback_count": configurations that fell back (each counted once), "runtime_failures": of them, those
        whose kernel failed at its first launch}."""
        return {"fallback_count": self._fallback_count, "runtime_failures": self._runtime_failures}

    def reset(self) -> None:
        """Forget cached decisions, first-launch results, counters, the validation files and the auto-order bands
        (tests), and whatever the reset hooks cache on them."""
        self._decisions.clear()
        self._failed.clear()
        self._launched.clear()
        self._fallback_count = 0
        self._runtime_failures = 0
        self._validation = None
        self._bands = None
        for hook in self._reset_hooks:
            hook()


def _one_line(exc: BaseException, limit: int = 400) -> str:
    """The exception's message on one line, at most `limit` characters."""
    return " ".join(str(exc).split())[:limit]
