"""The modules a training run's configuration passes through, from the command line to the first update.

``python -m bench.config_path [--framework torch|jax] [--out DIR]`` runs a tiny CPU training run in this process
(``python -m agent_<framework>.train --recipe smoke`` with a few hundred env steps, no evaluation) under
``sys.settrace`` and records every call into a function of this repository's packages that receives the configuration
as an argument: the argv list, a list of ``key=value`` override strings, a mapping of config values, or a ``Config``
/ ``EnvConfig`` / ``AgentConfig``. It stops at the agent's first update (the first call of ``update``, ``step`` or
``advance`` of an agent or vector trainer module) and prints the modules in call order, consecutive calls into the
same module counted once (a "step"), and how many steps return to a module the configuration had already left: for
every such call, and for the calls that hand the configuration on (those another configuration-carrying call is made
from; the lookups the path ends in, such as reading one key, left out). ``--out`` also writes ``results.json`` and
``results.md``.

It reads only the interpreter's call events, so it runs unchanged on an older checkout of this repository (copy the
file there and run it from that checkout's root), which is how the before/after lists are compared."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from typing import Any

PACKAGES = ("agent_common", "agent_torch", "agent_jax", "agent_interop", "mjx_envs", "simulators", "shared_spec",
            "torch_impl", "jax_impl", "triton_kernels")
CONFIG_CLASSES = ("Config", "EnvConfig", "AgentConfig")
FIRST_UPDATE = {"update", "step", "advance"}
AGENT_MODULES = ("agent_torch.agent", "agent_jax.agent", "agent_torch.vector", "agent_jax.vector",
                 "agent_torch.trainer", "agent_jax.trainer")


class _FirstUpdate(BaseException):  # noqa: N818 - a stop signal, not an error
    """Raised into the agent's first update call: the trace ends there."""


def _module_of(filename: str, root: str) -> str | None:
    path = os.path.abspath(filename)
    if not path.startswith(root + os.sep) or not path.endswith(".py"):
        return None
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    rel = rel.removesuffix(".__init__")
    return rel if rel.split(".")[0] in PACKAGES else None


def _is_config(value: Any) -> bool:
    cls = type(value)
    if cls.__name__ in CONFIG_CLASSES and cls.__module__.startswith("agent_common"):
        return True
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return any(v.startswith("--") or "=" in v for v in value)
    if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
        return any(k.split(".")[0] in ("env", "agent", "seed", "num_env_steps", "save_path") for k in value)
    return False


def trace(framework: str, workdir: str) -> list[tuple[str, str, int]]:
    """(module, function, index of the nearest configuration-carrying caller or -1) of every configuration-carrying
    call from ``main(argv)`` to the first update."""
    root = os.path.abspath(os.getcwd())
    calls: list[tuple[str, str, int]] = []
    live: dict[int, int] = {}  # id of a running configuration-carrying frame -> its index in calls
    argv = ["--recipe", "smoke", "--overrides", "num_env_steps=400", "--overrides", "agent.buffer_min_length=200",
            "--overrides", "agent.sample_batch_size=32", "--overrides", "num_eval_episodes=0",
            "--overrides", "progress_bar=false", "--overrides", f"save_path={workdir}/run"]

    def on_return(frame: Any, event: str, arg: Any) -> Any:
        if event == "return":
            live.pop(id(frame), None)
        return on_return

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        module = _module_of(frame.f_code.co_filename, root)
        if module is None:
            return None
        name = frame.f_code.co_name
        if name in FIRST_UPDATE and module in AGENT_MODULES:
            sys.settrace(None)
            raise _FirstUpdate
        code = frame.f_code
        params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if not any(_is_config(frame.f_locals.get(p)) for p in params if p != "self"):
            return None
        parent, caller = -1, frame.f_back
        while caller is not None and parent < 0:
            parent = live.get(id(caller), -1)
            caller = caller.f_back
        live[id(frame)] = len(calls)
        calls.append((module, name, parent))
        frame.f_trace_lines = False
        return on_return

    main = __import__(f"agent_{framework}.train", fromlist=["main"]).main
    sys.settrace(tracer)
    try:
        main(argv)
    except _FirstUpdate:
        pass
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    return calls


def summarise(calls: list[tuple[str, str, int]]) -> dict[str, Any]:
    """The module steps of ``calls`` (consecutive calls into one module counted once), how many return to a module
    already left, and the calls in order (consecutive calls of one function counted once, with their number)."""
    steps: list[str] = []
    for module, _, _ in calls:
        if not steps or steps[-1] != module:
            steps.append(module)
    seen: set[str] = set()
    returns = 0
    for module in steps:
        returns += module in seen
        seen.add(module)
    counts = {m: steps.count(m) - 1 for m in dict.fromkeys(steps) if steps.count(m) > 1}
    runs: list[list[Any]] = []
    for module, function, _ in calls:
        name = f"{module}.{function}"
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return {"modules": list(dict.fromkeys(steps)), "steps": steps, "num_modules": len(seen), "num_steps": len(steps),
            "returns": returns, "returns_per_module": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
            "calls": [name if n == 1 else f"{name} x{n}" for name, n in runs]}


def hands_on(calls: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """The calls that hand the configuration on: those some other configuration-carrying call is made from (the
    lookups it ends in, such as reading one key or freezing the dataclass, left out)."""
    parents = {parent for _, _, parent in calls}
    return [call for index, call in enumerate(calls) if index in parents]


def _line(title: str, result: dict[str, Any]) -> str:
    per_module = ", ".join(f"{m} {n}" for m, n in result["returns_per_module"].items())
    return (f"{title}: {result['num_steps']} steps through {result['num_modules']} modules; {result['returns']} of "
            f"them return to a module already left ({per_module or 'none'})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.config_path", description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "jax"), default="torch")
    parser.add_argument("--out", help="directory for results.json and results.md")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRITON_INTERPRET", "1")
    with tempfile.TemporaryDirectory(prefix="config_path-") as workdir:
        calls = trace(args.framework, workdir)
    every, passing = summarise(calls), summarise(hands_on(calls))
    text = "\n".join([f"# python -m agent_{args.framework}.train: the command line to the first update", "",
                      _line("calls that hand the configuration on", passing), "", " -> ".join(passing["steps"]), "",
                      _line("every call that receives it", every), "", " -> ".join(every["steps"]), "",
                      "calls in order: " + ", ".join(every["calls"])])
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"framework": args.framework, "hands_on": passing, "every_call": every}, f, indent=1)
        with open(os.path.join(args.out, "results.md"), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
