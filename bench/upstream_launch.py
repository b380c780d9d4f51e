"""Runs upstream FlashSAC's own ``train.py`` in this process, optionally with one dtype fix applied at import time.

    python -m bench.upstream_launch [--dtype-fix] <upstream checkout>/train.py --overrides key=value ...

Without ``--dtype-fix`` this is the same as ``python <checkout>/train.py ...``: ``sys.argv[0]`` is the script (upstream
places its ``models/`` folder next to it) and the checkout is first on ``sys.path``. With ``--dtype-fix``, the
categorical TD-target function of upstream's update module (``flash_rl.agents.flashSAC.update``,
``_compute_categorical_td_target``) is replaced, as soon as ``train.py`` imports that module (an import hook, so
nothing is imported before ``train.py`` sets its thread-count environment variables), by a wrapper that casts the
reward, done and entropy arguments to the dtype of the target log-probs and then calls upstream's function unchanged.
On torch 2.11 with gymnasium 1.x and numpy 2 the rewards reach that function as float64, and its ``scatter_add_``
into a float32 tensor fails at the first update ("Expected self.dtype to be equal to src.dtype"). The launcher says on
stderr that it applied the fix. Nothing of upstream's code is copied here: the wrapper only converts arguments.
"""

from __future__ import annotations

import argparse
import functools
import importlib.abc
import importlib.machinery
import os
import runpy
import sys
import types
from collections.abc import Callable
from typing import Any

__all__ = ["FIX_FUNCTION", "FIX_MODULE", "PatchOnImport", "apply_dtype_fix", "cast_like_log_probs", "main"]

FIX_MODULE = "flash_rl.agents.flashSAC.update"
FIX_FUNCTION = "_compute_categorical_td_target"
FIX_LINE = (f"upstream_launch: --upstream-dtype-fix applied: {FIX_MODULE}.{FIX_FUNCTION} now casts reward, done and "
            "actor_entropy to the target log-probs' dtype before upstream's own code runs")


def cast_like_log_probs(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(target_log_probs, reward, done, actor_entropy, *rest)`` with the three per-row tensors cast to
    ``target_log_probs.dtype`` first (positional or keyword, upstream's argument names)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        names = ("target_log_probs", "reward", "done", "actor_entropy")
        bound = dict(zip(names, args, strict=False))
        bound.update({k: kwargs.pop(k) for k in names if k in kwargs})
        missing = [n for n in names if n not in bound]
        if missing:
            raise TypeError(f"{FIX_FUNCTION}: the dtype fix expects arguments {names}, missing {missing}")
        dtype = bound["target_log_probs"].dtype
        for name in names[1:]:
            bound[name] = bound[name].to(dtype)
        return fn(*(bound[n] for n in names), *args[len(names):], **kwargs)

    return wrapper


def apply_dtype_fix(module: types.ModuleType) -> None:
    """Wraps the TD-target function of upstream's (just imported) update module and says so on stderr.

    Raises:
        RuntimeError: the function is not where upstream keeps it (another upstream layout).
    """
    fn = getattr(module, FIX_FUNCTION, None)
    if fn is None:
        raise RuntimeError(f"--upstream-dtype-fix: {FIX_MODULE} has no {FIX_FUNCTION}: this upstream layout is not "
                           "the one the fix targets; run without the fix")
    setattr(module, FIX_FUNCTION, cast_like_log_probs(fn))
    print(FIX_LINE, file=sys.stderr, flush=True)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` entry that lets the other finders locate ``FIX_MODULE`` and applies ``apply_dtype_fix``
    right after the module's own code has run."""

    def __init__(self) -> None:
        self.applied = False

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != FIX_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module = self._patched(spec.loader.exec_module)  # type: ignore[method-assign]
                return spec
        return None

    def _patched(self, exec_module: Any) -> Any:
        def run_then_fix(module: types.ModuleType) -> None:
            exec_module(module)
            apply_dtype_fix(module)
            self.applied = True

        return run_then_fix


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.upstream_launch", description=__doc__.split("\n")[0])
    ap.add_argument("--dtype-fix", action="store_true", help="wrap upstream's TD-target function (see the module doc)")
    ap.add_argument("train_py", help="path of upstream's train.py")
    args, rest = ap.parse_known_args(argv)
    train_py = os.path.abspath(args.train_py)
    if not os.path.isfile(train_py):
        ap.error(f"train_py: expected upstream's train.py, got {args.train_py!r} (no such file)")
    sys.argv = [train_py, *rest]
    sys.path.insert(0, os.path.dirname(train_py))
    hook = PatchOnImport() if args.dtype_fix else None
    if hook is not None:
        sys.meta_path.insert(0, hook)
    runpy.run_path(train_py, run_name="__main__")
    if hook is not None and not hook.applied:
        raise RuntimeError(f"--upstream-dtype-fix: train.py never imported {FIX_MODULE}; the fix was not applied")


if __name__ == "__main__":
    main()
