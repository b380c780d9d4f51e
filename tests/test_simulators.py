"""The simulator modules (``simulators``): each declares what ``simulators.base.Simulator`` lists, with the types it
says; a host simulator builds its env and snapshots it, a device simulator names the module that builds its envs;
the config takes a simulator's action convention when ``env.rescale_action`` is null; ``--help`` lists them. Nothing
here imports a framework or a simulator's extra."""

from __future__ import annotations

import ast
import importlib.util
import typing
from pathlib import Path

import pytest

from agent_common.config import build_config
from agent_common.help import simulators_help, training_help
from simulators import DEVICE, HOST, SIMULATORS, base, device_env_types, simulator

REPO = Path(__file__).resolve().parent.parent
DECLARED = typing.get_type_hints(base.Simulator)
HOST_HOOKS = ("make", "model_data", "control_timestep", "task_state", "set_task_state")


@pytest.mark.parametrize("name", list(SIMULATORS))
def test_every_simulator_declares_the_protocol(name):
    sim = SIMULATORS[name]
    assert sim.NAME == name and sim.STEPPER in (HOST, DEVICE)
    for attr, kind in DECLARED.items():
        value = getattr(sim, attr)
        origin = typing.get_origin(kind) or kind
        if origin is typing.Union or type(kind).__name__ == "UnionType":
            origin = tuple(typing.get_origin(a) or a for a in typing.get_args(kind))
        assert isinstance(value, origin), (name, attr, value)
    assert sim.TASKS and len(set(sim.TASKS)) == len(sim.TASKS) and set(sim.FRAMEWORKS) <= {"torch", "jax"}
    assert callable(sim.missing) and callable(sim.check)
    if sim.STEPPER == HOST:
        assert all(callable(getattr(sim, hook)) for hook in HOST_HOOKS)
        assert "np_random" in sim.SNAPSHOT_KEYS
    else:
        assert sim.ARRAYS in sim.FRAMEWORKS and importlib.util.find_spec(sim.ENV_MODULE) is not None
        tree = ast.parse(Path(importlib.util.find_spec(sim.ENV_MODULE).origin).read_text())
        assert "make_env" in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_the_declarations_import_nothing_heavy():
    """A declaration module imports only the standard library, numpy and this package at its top (the config
    reads them before any framework); its extra and framework come in function bodies only."""
    for name, sim in SIMULATORS.items():
        tree = ast.parse(Path(sim.__file__).read_text())
        top = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
        modules = {(n.module if isinstance(n, ast.ImportFrom) else n.names[0].name).split(".")[0] for n in top}
        assert modules <= {"__future__", "collections", "typing", "os", "re", "copy", "warnings", "numpy",
                           "simulators"}, (name, modules)


def test_rescale_action_follows_the_simulator_unless_set(monkeypatch):
    for sim in SIMULATORS.values():
        monkeypatch.setattr(sim, "missing", lambda: [])
    for name, sim in SIMULATORS.items():
        values = {"env.env_type": name, "env.env_name": sim.TASKS[0], "save_path": "run"}
        if sim.STEPPER == DEVICE:
            values.update({"num_train_envs": 4, "agent.buffer_min_length": 512, "agent.sample_batch_size": 512})
        framework = sim.FRAMEWORKS[0]
        assert build_config(values, framework).env.rescale_action is sim.RESCALE_ACTION, name
        if sim.RESCALE_ACTION:  # set false explicitly: kept
            assert build_config({**values, "env.rescale_action": False}, framework).env.rescale_action is False


def test_registry_and_help():
    assert device_env_types() == ("mjx", "mujoco_playground", "mjlab")
    assert simulator("dmc") is SIMULATORS["dmc"]
    with pytest.raises(KeyError):
        simulator("isaac")
    text = simulators_help()
    for name, sim in SIMULATORS.items():
        assert f"  {name} " in text and (sim.EXTRA is None or f"(extra: {sim.EXTRA})" in text)
    assert text in training_help()
