"""Torch agent precision: the fp32 update against golden outputs of commit e5cba09, bf16 / fp16 AMP against fp32 on
the same fixed batches, and the fp16 loss scale's skipped step and backoff on the device (no host read)."""

from __future__ import annotations

import pytest
import torch

from agent_common.config import load_config
from agent_common.keys import ConfigError
from agent_torch.agent import make_agent, resolve_cuda_graph
from agent_torch.amp import DeviceLossScaler, resolve_amp_dtype
from tests.data.make_torch_update_golden import OVERRIDES, PATH, fixed_batches, run, spaces
from tests.host_sync import HostSyncCounter

NETS = ("actor", "critic", "temperature")


@pytest.fixture(scope="module")
def golden() -> list[dict]:
    return torch.load(PATH, weights_only=False)["records"]


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _flat_grad(record: dict, net: str) -> torch.Tensor:
    return torch.cat([g.flatten() for g in record[f"{net}/grad"].values()])


def test_fp32_update_matches_golden_outputs_of_e5cba09(golden):
    # Same maths and operation order as the golden commit. Bitwise on the machine that wrote the file; the tolerance
    # (a few fp32 ulps) only absorbs another CPU's GEMM kernels (oneDNN picks AVX2 / AVX-512 paths by CPU), whose
    # summation order differs. A changed operation (a missing cast, a scaled loss, a skipped step) is far outside it.
    new = run()
    assert len(new) == len(golden) == 2
    for step, (old, got) in enumerate(zip(golden, new, strict=True)):
        assert set(old) == set(got)
        assert old["metrics"].keys() == got["metrics"].keys()
        for name, value in old["metrics"].items():
            assert got["metrics"][name] == pytest.approx(value, rel=1e-5, abs=1e-6), (step, name)
        for group in (k for k in old if k != "metrics"):
            assert old[group].keys() == got[group].keys(), group
            for name, tensor in old[group].items():
                torch.testing.assert_close(got[group][name], tensor, rtol=1e-5, atol=1e-6, msg=f"{step} {group} {name}")


# bf16 keeps 8 significant bits (unit roundoff 2^-9 = 0.2%), fp16 11 (2^-12 = 0.024%), fp32 24. Losses are means
# over the batch of per-row results each a few roundings away from fp32: tolerances 10x the unit roundoff of
# several layers (bf16 2%, fp16 0.2%; measured 0.2% and 0.02%). Gradients pass batch-norm backwards, which subtract
# batch means and amplify the relative error of inner layers (measured: bf16 up to 50% on single hidden-layer
# tensors of the actor, 27% on the actor's whole gradient; fp16 1.3%), so whole-network gradients are compared by
# relative error of the flat vector and its cosine with fp32: a wrong gradient (sign, missing unscale, another
# batch) has relative error >= 1 and cosine near 0 or negative.
TOLERANCES = {
    "bf16": {"loss": 2e-2, "grad_rel": 0.5, "grad_cos": 0.9},
    "fp16": {"loss": 2e-3, "grad_rel": 0.05, "grad_cos": 0.999},
}


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_amp_against_fp32_on_fixed_batches(golden, dtype):
    tol = TOLERANCES[dtype]
    amp = run([*OVERRIDES, "agent.use_amp=true", f"agent.amp_dtype={dtype}"])
    for step, (ref, got) in enumerate(zip(golden, amp, strict=True)):
        for name, value in ref["metrics"].items():
            assert got["metrics"][name] == pytest.approx(value, rel=tol["loss"], abs=1e-4), (dtype, step, name)
        for net in NETS:
            a, b = _flat_grad(got, net), _flat_grad(ref, net)
            assert torch.isfinite(a).all(), (dtype, step, net)  # fp16: unscaled, and the step was not skipped
            rel = float((a - b).norm() / b.norm())
            cos = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
            assert rel <= tol["grad_rel"] and cos >= tol["grad_cos"], (dtype, step, net, rel, cos)
    # autocast did run: the critic's loss is not fp32's bit for bit
    assert amp[0]["metrics"]["critic/loss"] != golden[0]["metrics"]["critic/loss"]


def _agent(overrides=()):
    return make_agent(load_config([*OVERRIDES, *overrides], "torch"), *spaces())


def _state(agent) -> dict[str, torch.Tensor]:
    out = {}
    for net in NETS:
        n = getattr(agent, net)
        for k, v in n.module.state_dict().items():
            out[f"{net}/{k}"] = v.clone()
        for i, state in enumerate(n.optimizer.state.values()):
            for k, v in state.items():
                out[f"{net}/opt{i}/{k}"] = v.clone()
    return out


def test_fp16_overflow_skips_the_step_and_lowers_the_scale_on_the_device():
    agent = _agent(["agent.use_amp=true", "agent.amp_dtype=fp16"])
    scaler = agent.scaler
    assert isinstance(scaler, DeviceLossScaler)
    flats = [agent._flat_batch(b) for b in fixed_batches()]
    agent._apply_update(flats[0])  # a normal first step: optimizer state exists
    assert float(scaler.found_inf) == 0.0 and float(scaler.scale) == 2.0**16
    actor_bn = {k: v.clone() for k, v in agent.actor.module.state_dict().items() if "running" in k}
    before = _state(agent)
    scaler.scale.fill_(2.0**127)  # loss * scale overflows fp32 (any loss above 2): every gradient becomes inf
    agent.update_step = 0  # an actor step: actor, then critic, each scaled and each skipped
    with HostSyncCounter() as syncs:
        agent._apply_update(flats[1])
    assert syncs.total == 0, dict(syncs.counts)  # decisions, skip and backoff without a host read
    assert float(scaler.found_inf) == 1.0
    assert float(scaler.scale) == 2.0**125  # backed off twice (x0.5 after the actor's step, x0.5 after the critic's)
    assert int(scaler.growth_tracker) == 0
    after = _state(agent)
    # skipped: Adam's moments and step counts of actor and critic bitwise unchanged; their parameters only went
    # through the unit-norm projection again (idempotent up to rounding: a few ulps), the actor's BN running
    # statistics saw the forward (as with torch's GradScaler); the unscaled temperature stepped
    for key in before:
        net = key.split("/")[0]
        if net == "temperature":
            continue
        if "/opt" in key:
            assert torch.equal(before[key], after[key]), key
        elif "running" not in key and "num_batches" not in key:
            torch.testing.assert_close(after[key], before[key], rtol=0, atol=1e-6, msg=key)
    assert not torch.equal(before["temperature/log_temp"], after["temperature/log_temp"])
    assert not torch.equal(actor_bn["input_bn.running_mean"], agent.actor.module.state_dict()["input_bn.running_mean"])
    # the next step with a sane scale updates again (parameters move by far more than rounding) and the finite
    # counter grows
    scaler.scale.fill_(2.0**10)
    agent._apply_update(flats[0])
    assert float(scaler.found_inf) == 0.0 and int(scaler.growth_tracker) == 1
    moved = _state(agent)
    assert float((moved["critic/embed.weight"] - after["critic/embed.weight"]).abs().max()) > 1e-5
    assert not torch.equal(moved["critic/opt0/step"], after["critic/opt0/step"])


def test_scale_grows_after_growth_interval_and_state_dict_round_trips():
    scaler = DeviceLossScaler(torch.device("cpu"), init_scale=8.0, growth_interval=2)
    param = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([param], lr=0.1, fused=True)
    for _ in range(2):
        opt.zero_grad()
        scaler.scale_loss(param.sum()).backward()
        scaler.step(opt, [param])
    assert float(scaler.scale) == 16.0 and int(scaler.growth_tracker) == 0
    assert torch.equal(param.grad, torch.ones(3))  # unscaled in place
    state = scaler.state_dict()
    ref = torch.amp.GradScaler("cpu", init_scale=16.0, growth_interval=2).state_dict()
    assert set(state) == set(ref) and state["scale"] == ref["scale"]  # GradScaler's checkpoint layout
    other = DeviceLossScaler(torch.device("cpu"))
    other.load_state_dict(state)
    assert other.state_dict() == state
    with pytest.raises(ValueError, match="lacks"):
        other.load_state_dict({"growth_factor": 2.0})
    with pytest.raises(TypeError, match="fused Adam"):
        scaler.step(torch.optim.SGD([param], lr=0.1), [param])


def test_amp_dtype_resolution_and_config():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_amp_dtype(False, "fp16", cuda)[0] is None
    assert resolve_amp_dtype(True, "auto", cuda)[0] == torch.float16  # upstream's use_amp
    assert resolve_amp_dtype(True, "auto", cpu)[0] == torch.bfloat16
    assert resolve_amp_dtype(True, "bf16", cuda)[0] == torch.bfloat16
    assert resolve_amp_dtype(True, "fp16", cpu)[0] == torch.float16
    with pytest.raises(ValueError, match="auto, bf16 or fp16"):
        resolve_amp_dtype(True, "fp8", cpu)
    with pytest.raises(ConfigError, match="agent.amp_dtype"):
        load_config(["agent.amp_dtype=fp8"], "torch")
    assert _agent(["agent.use_amp=true", "agent.amp_dtype=bf16"]).scaler is None
    assert "fp16" in _agent(["agent.use_amp=true", "agent.amp_dtype=fp16"]).compute_path


@pytest.mark.parametrize("amp", [[], ["agent.use_amp=true"], ["agent.use_amp=true", "agent.amp_dtype=bf16"]])
def test_amp_keeps_cuda_graphs_on(amp):
    on, reason = resolve_cuda_graph(load_config(amp, "torch"), torch.device("cuda"), "off")
    assert on, reason
    assert ("AMP" in reason) == bool(amp)


def test_fp16_agent_checkpoint_keeps_the_loss_scale(tmp_path):
    agent = _agent(["agent.use_amp=true", "agent.amp_dtype=fp16"])
    agent.scaler.scale.fill_(1024.0)
    agent.scaler.growth_tracker.fill_(7)
    agent.save(str(tmp_path))
    other = _agent(["agent.use_amp=true", "agent.amp_dtype=fp16"])
    scale_tensor = other.scaler.scale
    other.load(str(tmp_path))
    assert other.scaler.scale is scale_tensor  # in place: a captured graph keeps reading it
    assert float(other.scaler.scale) == 1024.0 and int(other.scaler.growth_tracker) == 7
