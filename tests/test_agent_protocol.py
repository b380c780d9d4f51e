"""The loop's agent protocol (``agent_common.protocol``): both agents implement it with the capabilities they declare,
and the check names what a non-conforming agent lacks (also when the loop builds one)."""

from __future__ import annotations

import dataclasses

import pytest

from agent_common.protocol import (
    NO_CAPABILITIES,
    AsyncActingAgent,
    Capabilities,
    DeviceReplayAgent,
    PrecompilingAgent,
    SnapshotAgent,
    check_agent,
    conformance_problems,
)

CAPABILITY_METHODS = {
    "device_replay": ("replay_storage", "step", "take_metrics"),
    "policy_snapshot": ("policy_snapshot",),
    "precompile_step": ("precompile_step",),
    "act_async": ("act_async",),
}


def _agent_classes():
    from agent_jax.agent import FlashSACAgent as JaxAgent
    from agent_torch.agent import FlashSACAgent as TorchAgent

    return {"torch": TorchAgent, "jax": JaxAgent}


def test_capability_methods_are_the_protocols():
    own = {"device_replay": DeviceReplayAgent, "policy_snapshot": SnapshotAgent, "precompile_step": PrecompilingAgent,
           "act_async": AsyncActingAgent}
    assert [f.name for f in dataclasses.fields(Capabilities)] == list(CAPABILITY_METHODS)
    for field, methods in CAPABILITY_METHODS.items():
        assert set(methods) <= set(vars(own[field]))


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_each_agent_implements_the_protocol_and_declares_what_it_has(framework):
    cls = _agent_classes()[framework]
    assert conformance_problems(cls) == []
    check_agent(cls)
    has = {field for field, methods in CAPABILITY_METHODS.items() if all(callable(getattr(cls, m, None))
                                                                         for m in methods)}
    declared = {f.name for f in dataclasses.fields(Capabilities) if getattr(cls.capabilities, f.name)}
    assert declared == has  # a capability it implements is declared (else the loop never uses it)


class _Base:
    capabilities = NO_CAPABILITIES

    def act(self, observation, noise):
        return observation

    def update(self, batch):
        return {}

    def save(self, directory):
        pass

    def load(self, directory, load_optimizer=True):
        pass

    def info(self):
        return {}


def test_a_conforming_minimal_agent():
    assert conformance_problems(_Base) == [] and conformance_problems(_Base()) == []


def test_the_check_names_what_is_missing_or_different():
    class NoCapabilities(_Base):
        capabilities = None  # type: ignore[assignment]

    assert conformance_problems(NoCapabilities) == [
        "NoCapabilities.capabilities: expected an agent_common.protocol.Capabilities, got None"]

    class Declares(_Base):
        capabilities = Capabilities(policy_snapshot=True)

        def load(self, directory):  # no load_optimizer
            pass

    problems = conformance_problems(Declares())
    assert len(problems) == 2
    assert problems[0].startswith("Declares.load: expected parameters load(self, directory: 'str', load_optimizer")
    assert problems[1].startswith("Declares.policy_snapshot: missing (expected policy_snapshot(self)")
    with pytest.raises(TypeError, match="does not implement the loop's agent protocol.*Declares.policy_snapshot"):
        check_agent(Declares())


def test_train_refuses_an_agent_that_does_not_conform(tmp_path):
    from agent_common.config import load_config
    from agent_common.driver import train
    from agent_common.host import host_trainer

    class Half(_Base):
        capabilities = Capabilities(device_replay=True)  # but no replay_storage, step, take_metrics

    cfg = load_config(["env.env_name=Hopper-v4", "num_env_steps=10", "agent.buffer_min_length=5",
                       f"save_path={tmp_path / 'run'}",
                       "progress_bar=false", "logger_type=none"])
    with pytest.raises(TypeError, match="Half.replay_storage: missing.*Half.step: missing.*Half.take_metrics"):
        train(cfg, host_trainer(lambda cfg, obs, act: Half()))
