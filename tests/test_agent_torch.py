"""PyTorch FlashSAC agent: networks, update maths vs the spec, backend dispatch, NaN guards, checkpoints, seeds."""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import agent_torch.update as update_mod
from agent_common.buffer import ReplayBuffer
from agent_common.config import load_config
from agent_common.driver import train
from agent_common.envs import make_vec_env, step_env
from agent_common.host import host_trainer
from agent_common.normalizer import RewardNormalizer
from agent_common.schedule import warmup_cosine_decay
from agent_torch.agent import FlashSACAgent, compute_path, make_agent, resolve_cuda_graph
from agent_torch.networks import (
    EnsembleUnitBatchNorm,
    EnsembleUnitLinear,
    FlashSACActor,
    FlashSACDoubleCritic,
    UnitBatchNorm,
    UnitLinear,
    UnitRMSNorm,
)
from agent_torch.state import explain_compile_mode, make_network, resolve_compile_mode
from agent_torch.update import critic_target
from shared_spec import CategoricalSupport
from shared_spec.reference import categorical_td_target as spec_target
from tests.agent_test_utils import REPO, assert_nested_equal

SMALL = [
    "num_threads=1",
    "agent.actor_hidden_dim=16",
    "agent.critic_hidden_dim=16",
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=16",
    "agent.categorical_target_backend=torch",
]
OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (17,), np.float64)
ACT_SPACE = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    # agents built with num_threads=1 (2 shared cores: one thread avoids OpenMP contention) must not leak it
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _agent(overrides=(), seed=0) -> FlashSACAgent:
    cfg = load_config(SMALL + [f"seed={seed}"] + list(overrides), "torch")
    return make_agent(cfg, OBS_SPACE, ACT_SPACE)


def _real_batch(batch_size=128, seed=0, steps=400, done_rows=8) -> dict[str, np.ndarray]:
    """A batch from real HalfCheetah transitions (random actions), rewards normalised as in training."""
    envs = make_vec_env("HalfCheetah-v4", 1, seed=seed, max_episode_steps=100)
    envs.reset(seed=seed)
    buffer = ReplayBuffer(17, 6, 1000, 1, 1, 0.99, seed=seed)
    norm = RewardNormalizer(0.99, 5.0)
    obs = envs.reset(seed=seed)[0].astype(np.float32)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        action = rng.uniform(-1, 1, (1, 6)).astype(np.float32)
        res = step_env(envs, action)
        buffer.add(obs, action, res.reward, res.terminated, res.truncated, res.next_observation)
        norm.update(res.reward, res.terminated, res.truncated)
        obs = res.reset_observation
    envs.close()
    batch = buffer.sample(batch_size)
    batch["reward"] = norm.normalize(batch["reward"])
    batch["terminated"][:done_rows] = 1.0  # HalfCheetah never terminates; exercise the d = 1 path too
    return batch


# ----------------------------------------------------------------------------------------------------- networks
def test_parameter_counts_match_upstream():
    atoms = CategoricalSupport(101, -5.0, 5.0).atoms()

    def count(module: torch.nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    assert count(FlashSACActor(17, 6, 2, 128)) == 268_590
    assert count(FlashSACDoubleCritic(23, 2, 256, atoms)) == 2_171_686
    assert count(FlashSACActor(376, 17, 2, 128)) == 318_098
    assert count(FlashSACDoubleCritic(393, 2, 256, atoms)) == 2_362_606


def _assert_projected(module: torch.nn.Module):
    checked = 0
    for sub in module.modules():
        if isinstance(sub, UnitLinear | EnsembleUnitLinear):
            norms = sub.weight.norm(dim=-1)
            torch.testing.assert_close(norms, torch.ones_like(norms), atol=1e-5, rtol=0)
            checked += 1
        elif isinstance(sub, UnitBatchNorm | EnsembleUnitBatchNorm):
            sq = (sub.weight**2 + sub.bias**2).sum(dim=-1)
            torch.testing.assert_close(sq, torch.full_like(sq, sub.weight.shape[-1]), rtol=1e-5, atol=1e-4)
            checked += 1
        elif isinstance(sub, UnitRMSNorm):
            assert sub.weight.norm().item() == pytest.approx(math.sqrt(sub.weight.shape[-1]), rel=1e-5)
            checked += 1
    assert checked > 5


def test_weight_projection_after_every_step_and_heads():
    agent = _agent()
    batch = _real_batch(16)
    for _ in range(3):
        agent.update(batch)
    _assert_projected(agent.actor.module)
    _assert_projected(agent.critic.module)
    # the paper-era actor heads are UnitLinear (projected); their biases and the critic bias are not projected
    assert isinstance(agent.actor.module.mean_head, UnitLinear)
    assert agent.actor.module.mean_bias.abs().sum() > 0  # trained, free bias
    # the target critic is never re-projected after the EMA: a lerp of unit rows has norm <= 1
    norms = agent.target_critic.module.embed.weight.norm(dim=-1)
    assert torch.all(norms <= 1.0 + 1e-6) and torch.any(norms < 1.0 - 1e-7)


def test_actor_log_prob_and_action_range():
    torch.manual_seed(0)
    actor = FlashSACActor(17, 6, 1, 16)
    obs = torch.randn(64, 17)
    mean, std = actor.get_mean_and_std(obs, training=False)  # (64, 6)
    assert torch.all(std >= math.exp(-10) * 0.999) and torch.all(std <= math.exp(2) * 1.001)
    torch.manual_seed(1)
    action, log_prob = actor(obs, training=False)
    torch.manual_seed(1)
    eps = torch.randn(64, 6)
    u = (mean + std * eps).double()
    # log(1 - tanh(u)^2) = -2 log cosh(u), exact in float64 for |u| < 700 (a naive fp32 form saturates)
    log_det = -2.0 * torch.log(torch.cosh(u))
    expected = (torch.distributions.Normal(mean.double(), std.double()).log_prob(u) - log_det).sum(-1)
    torch.testing.assert_close(log_prob.double(), expected, atol=1e-3, rtol=1e-4)
    assert torch.all(action.abs() <= 1.0)


def test_upstream_actor_head():
    """agent.actor_head=upstream: log σ in [-5, 0], N(0, 1e-3²) / zero head init, heads never projected, actions
    scaled to the bounds with the log-prob corrected by Σ ln range; the paper head keeps [-10, 2] and tanh(u)."""
    low, high = np.array([-2, -1, 0, -3, -1, -0.5], np.float32), np.array([2, 1, 4, 1, 3, 0.5], np.float32)
    torch.manual_seed(0)
    actor = FlashSACActor(17, 6, 1, 16, head="upstream", action_low=low, action_high=high)
    assert torch.count_nonzero(actor.log_std_head.weight) == 0
    assert 5e-4 < float(actor.mean_head.weight.std()) < 2e-3
    mean_w = actor.mean_head.weight.detach().clone()
    actor.mean_head.weight.data.mul_(3.0)
    from agent_torch.networks import normalize_parameters

    normalize_parameters(actor)
    torch.testing.assert_close(actor.mean_head.weight.detach(), 3.0 * mean_w, rtol=0, atol=0)  # not projected
    assert not any(n.startswith(("mean_head", "log_std_head")) and "weight" not in n
                   for n in actor.state_dict())  # same names as the paper head, bounds are not state
    assert set(actor.state_dict()) == set(FlashSACActor(17, 6, 1, 16).state_dict())
    obs = torch.randn(64, 17)
    _, std = actor.get_mean_and_std(obs, training=False)
    torch.testing.assert_close(std, torch.full_like(std, math.exp(-2.5)))  # zero log-std head: raw = 0
    actor.log_std_bias.data.fill_(50.0)
    assert torch.allclose(actor.get_mean_and_std(obs, False)[1], torch.ones(64, 6))  # log σ max 0
    actor.log_std_bias.data.fill_(-50.0)
    assert torch.allclose(actor.get_mean_and_std(obs, False)[1], torch.full((64, 6), math.exp(-5.0)))
    actor.log_std_bias.data.fill_(0.3)
    paper = FlashSACActor(17, 6, 1, 16)
    paper.load_state_dict(actor.state_dict())
    torch.manual_seed(1)
    action, log_prob = actor(obs, training=False)
    torch.manual_seed(1)
    _, paper_log_prob = paper(obs, training=False)
    torch.manual_seed(1)
    mean, std = actor.get_mean_and_std(obs, False)
    u = mean + std * torch.randn(64, 6)
    bias, scale = torch.as_tensor((high + low) / 2), torch.as_tensor((high - low) / 2)
    torch.testing.assert_close(action, bias + scale * torch.tanh(u))
    assert torch.all(action >= torch.as_tensor(low)) and torch.all(action <= torch.as_tensor(high))
    # the paper head on the same weights has another log σ range, so its log-prob differs beyond the range term
    assert not torch.allclose(log_prob + float(np.log(scale).sum()), paper_log_prob, atol=1e-2)
    expected = (torch.distributions.Normal(mean.double(), std.double()).log_prob(u.double())
                + 2.0 * torch.log(torch.cosh(u.double()))).sum(-1) - float(np.log(scale.double()).sum())
    torch.testing.assert_close(log_prob.double(), expected, atol=1e-3, rtol=1e-4)
    with pytest.raises(ValueError, match="high < low"):
        FlashSACActor(17, 6, 1, 16, head="upstream", action_low=high, action_high=low)
    with pytest.raises(ValueError, match="expected one of"):
        FlashSACActor(17, 6, 1, 16, head="paper-era")


def test_upstream_head_agent_acts_within_the_env_bounds():
    space = gym.spaces.Box(np.array([-2, 0, -1, -1, -1, -1], np.float32), np.array([0, 4, 1, 1, 1, 1], np.float32))
    cfg = load_config([*SMALL, "agent.device_type=cpu", "agent.actor_head=upstream"], "torch")
    agent = FlashSACAgent(cfg, OBS_SPACE, space)
    actions = agent.act(np.random.default_rng(0).standard_normal((8, 17)).astype(np.float32), None)
    np.testing.assert_allclose(actions[:, :2], [[-1.0, 2.0]] * 8, atol=0.1)  # mean ~ 0: the centre of the box
    with pytest.raises(Exception, match="actor_head"):
        load_config([*SMALL, "agent.actor_head=wide"], "torch")


# ----------------------------------------------------------------------------------------------------- target
def test_critic_target_matches_spec_reference_on_real_batch(monkeypatch):
    """The op's output inside a real update equals shared_spec's float64 reference on the same inputs."""
    agent = _agent(
        [
            "agent.actor_hidden_dim=128",
            "agent.critic_hidden_dim=256",
            "agent.actor_num_blocks=2",
            "agent.critic_num_blocks=2",
        ]
    )
    batch = _real_batch(128)
    for _ in range(4):  # move the networks away from their initialisation
        agent.update(batch)
    calls = []
    original = update_mod.categorical_td_target

    def recording(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(([a.detach().clone() for a in args], kwargs, out.clone()))
        return out

    monkeypatch.setattr(update_mod, "categorical_td_target", recording)
    tbatch = agent.to_batch(batch)
    target_before = copy.deepcopy(agent.target_critic.module)
    torch.manual_seed(5)
    probs, alpha_log_pi, next_actions = critic_target(
        agent.actor, agent.target_critic, agent.temperature, tbatch, agent.ctx
    )
    ((args, kwargs, out),) = calls
    next_qs, next_log_probs, reward, terminated, next_alpha_log_pi = args
    assert next_qs.shape == (2, 128) and next_log_probs.shape == (2, 128, 101) and probs.shape == (128, 101)
    assert kwargs["gamma"] == pytest.approx(0.99) and (kwargs["min_v"], kwargs["max_v"]) == (-5.0, 5.0)
    assert kwargs["backend"] == "torch"
    # inputs are the second half of the target critic's joint [(s, a); (s', a')] forward in BN-training mode
    obs_all = torch.cat([tbatch.observation, tbatch.next_observation])
    act_all = torch.cat([tbatch.action, next_actions])
    with torch.no_grad():
        q_ref, lp_ref = target_before(obs_all, act_all, training=True)
    torch.testing.assert_close(next_qs, q_ref[:, 128:], atol=0, rtol=0)
    torch.testing.assert_close(next_log_probs, lp_ref[:, 128:], atol=0, rtol=0)
    torch.testing.assert_close(reward, tbatch.reward, atol=0, rtol=0)
    torch.testing.assert_close(terminated, tbatch.terminated, atol=0, rtol=0)
    assert torch.all(next_alpha_log_pi == alpha_log_pi)
    # and the target equals the float64 spec reference
    ref = spec_target(*(a.double().numpy() for a in args), gamma=0.99, min_v=-5.0, max_v=5.0)
    np.testing.assert_allclose(probs.numpy(), ref, atol=2e-5, rtol=0)
    assert np.abs(probs.sum(-1).numpy() - 1.0).max() < 1e-5
    # terminated rows are a two-hot of the clipped reward
    for row in range(8):
        r = float(np.clip(batch["reward"][row], -5, 5))
        b = (r + 5.0) / 0.1
        lo = int(math.floor(b))
        assert probs[row, lo].item() + (probs[row, lo + 1].item() if lo < 100 else 0.0) == pytest.approx(1.0, abs=1e-5)


def test_truncation_bootstraps_termination_does_not():
    """R10: the target of a terminated row ignores s'; a truncated (terminated = 0) row depends on s'."""
    agent = _agent()
    batch = _real_batch(16, done_rows=0)
    batch["terminated"][0] = 1.0  # row 0 terminated, row 1 truncated (stored with terminated = 0)
    batch["truncated"][1] = 1.0
    other = {k: v.copy() for k, v in batch.items()}
    other["next_observation"][:2] += 3.0

    def target(b):
        torch.manual_seed(0)
        return critic_target(agent.actor, agent.target_critic, agent.temperature, agent.to_batch(b), agent.ctx)[0]

    t1, t2 = target(batch), target(other)
    # the terminated row is a two-hot of r either way (only the summation order of the moved mass differs)
    torch.testing.assert_close(t1[0], t2[0], atol=1e-6, rtol=0)
    assert int((t1[0] > 1e-6).sum()) <= 2
    assert (t1[1] - t2[1]).abs().max() > 1e-3


# ----------------------------------------------------------------------------------------------------- update
def test_update_order_metric_names_and_target_ema():
    agent = _agent()
    batch = _real_batch(16)
    actor_before = [p.detach().clone() for p in agent.actor.module.parameters()]
    m0 = agent.update(batch)
    assert set(m0) == {
        "actor/loss",
        "actor/entropy",
        "actor/mean_action",
        "temperature/value",
        "temperature/loss",
        "critic/loss",
        "critic/max_entropy_bonus",
    }
    assert list(m0)[:5] == [
        "actor/loss",
        "actor/entropy",
        "actor/mean_action",
        "temperature/value",
        "temperature/loss",
    ]  # actor -> temperature -> critic
    assert m0["temperature/value"] == pytest.approx(0.01)
    assert any(not torch.equal(a, b) for a, b in zip(actor_before, agent.actor.module.parameters(), strict=True))
    actor_mid = [p.detach().clone() for p in agent.actor.module.parameters()]
    target_before = [p.detach().clone() for p in agent.target_critic.module.parameters()]
    m1 = agent.update(batch)  # update_step 1: critic only (actor_update_period = 2)
    assert set(m1) == {"critic/loss", "critic/max_entropy_bonus"}
    assert all(torch.equal(a, b) for a, b in zip(actor_mid, agent.actor.module.parameters(), strict=True))
    for old, new, online in zip(
        target_before, agent.target_critic.module.parameters(), agent.critic.module.parameters(), strict=True
    ):
        torch.testing.assert_close(new, old + 0.01 * (online - old), atol=1e-6, rtol=0)
    assert "actor/loss" in agent.update(batch)
    assert agent.update_step == 3
    # LR schedule: one scheduler step per optimizer step of that network
    assert agent.critic.scheduler.last_epoch == 3 and agent.actor.scheduler.last_epoch == 2
    a = agent.cfg.agent

    def lr(t: int) -> float:
        return warmup_cosine_decay(
            t,
            a.learning_rate_init,
            a.learning_rate_peak,
            a.learning_rate_end,
            a.learning_rate_warmup_step,
            a.learning_rate_decay_step,
        )

    assert agent.critic.optimizer.param_groups[0]["lr"] == lr(3)
    assert agent.actor.optimizer.param_groups[0]["lr"] == lr(2)
    assert agent.temperature.optimizer.param_groups[0]["lr"] == lr(2)


def test_amp_on_cpu_runs_finite():
    agent = _agent(["agent.use_amp=true"])
    batch = _real_batch(16)
    for _ in range(2):
        metrics = agent.update(batch)
    assert all(math.isfinite(v) for v in metrics.values())


def test_compile_mode_resolution():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_compile_mode(load_config([], "torch").agent, cpu) == "off"
    assert resolve_compile_mode(load_config([], "torch").agent, cuda) == "off"  # CUDA graphs instead (below)
    assert resolve_compile_mode(load_config(["agent.use_compile=false"], "torch").agent, cuda) == "off"
    assert resolve_compile_mode(load_config(["agent.compile_mode=default"], "torch").agent, cpu) == "default"
    assert resolve_compile_mode(load_config(["agent.compile_mode=off"], "torch").agent, cuda) == "off"


@pytest.mark.parametrize(
    ("overrides", "mode", "fragment", "graphs"),
    [
        ([], "off", "CUDA graphs instead", True),
        (["agent.use_cuda_graph=false"], "off", "with agent.use_cuda_graph=false: eager", False),
        (["agent.use_amp=true"], "off", "CUDA graphs instead", True),
        (["agent.compile_mode=max-autotune"], "max-autotune", "agent.compile_mode=max-autotune (as configured)",
         False),
        (["agent.compile_mode=reduce-overhead"], "reduce-overhead", "as configured", False),
        (["agent.compile_mode=default"], "default", "as configured", True),
        (["agent.compile_mode=default", "agent.use_compile=false"], "off", "agent.use_compile=false", True),
    ],
)
def test_auto_compile_mode_on_cuda_is_cuda_graphs_and_names_the_reason(overrides, mode, fragment, graphs):
    cuda = torch.device("cuda")
    cfg = load_config(overrides, "torch")
    got, reason = explain_compile_mode(cfg.agent, cuda)
    assert got == mode and fragment in reason, reason
    on, graph_reason = resolve_cuda_graph(cfg, cuda, got)
    assert on == graphs  # the default config on CUDA: no compile, CUDA graphs
    line = compute_path(cuda, got, reason, on, graph_reason)
    assert reason in line and graph_reason in line and ("CUDA graphs on" in line) == graphs


def test_cuda_graph_resolution_names_the_reason():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    cfg = load_config([], "torch")
    on = resolve_cuda_graph(cfg, cuda, "off")
    assert on == (True, "update step and action selection captured (compile_mode=off)")
    assert resolve_cuda_graph(cfg, cuda, "default")[0]
    assert resolve_cuda_graph(cfg, cpu, "off") == (False, "device cpu (CUDA graphs need CUDA)")
    assert resolve_cuda_graph(load_config(["agent.use_amp=true"], "torch"), cuda, "off") == (
        True, "update step and action selection captured (compile_mode=off, AMP fp16)")
    assert "max-autotune" in resolve_cuda_graph(cfg, cuda, "max-autotune")[1]
    off = resolve_cuda_graph(load_config(["agent.use_cuda_graph=false"], "torch"), cuda, "off")
    assert off == (False, "agent.use_cuda_graph=false")
    agent = _agent()  # CPU: eager, and says why
    assert agent.graphs is None and agent.cuda_graph_reason.startswith("device cpu")


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_tensor_learning_rates_follow_the_schedule_and_save_as_floats():
    # the CUDA-graph mode keeps each LR in a device tensor that the scheduler fills in place (a captured optimizer
    # step reads it); checked here on CPU with the same optimizer/scheduler code (capturable Adam needs CUDA to step)
    cfg = load_config(SMALL + ["num_env_steps=100", "agent.learning_rate_warmup_step=0"], "torch")
    net = make_network(torch.nn.Linear(3, 2), cfg.agent, torch.device("cpu"))
    lr_tensor = torch.tensor(float(net.optimizer.param_groups[0]["lr"]))
    net.optimizer.param_groups[0]["lr"] = lr_tensor
    expected = []
    for step in range(1, 4):
        net.scheduler.step()
        expected.append(warmup_cosine_decay(step, cfg.agent.learning_rate_init, cfg.agent.learning_rate_peak,
                                            cfg.agent.learning_rate_end, int(cfg.agent.learning_rate_warmup_step),
                                            int(cfg.agent.learning_rate_decay_step)))
        assert net.optimizer.param_groups[0]["lr"] is lr_tensor  # filled in place, never replaced
        assert lr_tensor.item() == pytest.approx(expected[-1], rel=1e-6)
    state = net.state_dict()
    assert isinstance(state["optimizer_state_dict"]["param_groups"][0]["lr"], float)
    assert all(isinstance(v, float) for v in state["scheduler_state_dict"]["_last_lr"])
    assert isinstance(net.optimizer.param_groups[0]["lr"], torch.Tensor)  # the live optimizer is untouched
    fresh = make_network(torch.nn.Linear(3, 2), cfg.agent, torch.device("cpu"))
    fresh.load_state_dict(state)
    fresh.scheduler.step()
    net.scheduler.step()
    assert float(fresh.optimizer.param_groups[0]["lr"]) == pytest.approx(lr_tensor.item(), rel=1e-6)


# ----------------------------------------------------------------------------------------------------- NaN guards
@pytest.mark.parametrize("key", ["observation", "reward", "next_observation"])
def test_nan_in_batch_raises_instead_of_propagating(key):
    agent = _agent()
    batch = _real_batch(16)
    batch[key][3] = np.nan
    with pytest.raises(FloatingPointError, match="non-finite"):
        agent.update(batch)


def test_nan_from_env_raises():
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TransformReward(gym.make("HalfCheetah-v4"), lambda r: float("nan"))],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    envs.reset(seed=0)
    with pytest.raises(FloatingPointError, match="reward"):
        step_env(envs, np.zeros((1, 6), np.float32))
    envs.close()


# ----------------------------------------------------------------------------------------------------- backends
_BACKEND_SCRIPT = """
import json, logging, sys
import gymnasium as gym, numpy as np
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from agent_common.config import load_config
from agent_torch.agent import make_agent
obs, act = gym.spaces.Box(-np.inf, np.inf, (17,)), gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
out = {}
for backend in ("triton", "auto", "torch"):
    cfg = load_config(["agent.actor_hidden_dim=8", "agent.critic_hidden_dim=8",
                       f"agent.categorical_target_backend={backend}"], "torch")
    out[backend] = make_agent(cfg, obs, act).info()
try:
    make_agent(load_config(["agent.actor_hidden_dim=8", "agent.critic_hidden_dim=8",
                            "agent.categorical_target_backend=triton",
                            "agent.categorical_target_strict=true"], "torch"), obs, act)
    out["strict"] = "no error"
except Exception as exc:
    out["strict"] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(out))
"""


def test_backend_fallback_reason_logged_and_strict_raises_at_construction():
    """R7: triton on CPU without the interpreter falls back once with a logged reason; strict fails early."""
    import json

    env = dict(os.environ, TRITON_INTERPRET="0")
    proc = subprocess.run(
        [sys.executable, "-c", _BACKEND_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["triton"]["backend/selected"].startswith("torch (requested triton: fallback")
    assert "CUDA" in out["triton"]["backend/selected"] or "cuda" in out["triton"]["backend/selected"]
    assert out["triton"]["backend/fallback_count"] >= 1
    assert out["auto"]["backend/selected"].startswith("torch (requested auto")
    assert out["torch"]["backend/selected"] == "torch (requested torch: requested)"
    assert out["strict"].startswith("BackendUnavailable")
    assert "fallback from triton" in proc.stderr  # the reason is logged


def _triton_interpretable() -> bool:
    try:
        from torch_impl import resolve_backend

        return resolve_backend("triton", False, device="cpu").backend == "triton"
    except Exception:
        return False


@pytest.mark.skipif(not _triton_interpretable(), reason="triton kernel not runnable here (needs TRITON_INTERPRET=1)")
def test_triton_backend_update_matches_torch_backend():
    """R2 on CPU: the interpreted Triton kernel gives the same critic target and loss as the torch reference."""
    batch = _real_batch(32)
    results = {}
    for backend in ("torch", "triton"):
        agent = _agent([f"agent.categorical_target_backend={backend}", "agent.categorical_target_strict=true"])
        torch.manual_seed(0)
        probs = critic_target(agent.actor, agent.target_critic, agent.temperature, agent.to_batch(batch), agent.ctx)[0]
        torch.manual_seed(1)
        results[backend] = (probs, agent.update(batch))
    torch.testing.assert_close(results["triton"][0], results["torch"][0], atol=2e-5, rtol=0)
    for key, value in results["torch"][1].items():
        assert results["triton"][1][key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


# ----------------------------------------------------------------------------------------------------- checkpoints
def _all_state(agent: FlashSACAgent) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, net in agent._networks().items():
        out[name] = net.state_dict()
    out["update_step"] = agent.update_step
    return out


def test_policy_snapshot_owns_its_copy_of_the_actor():
    """``policy_snapshot()`` acts with an actor of its own: in-place writes to the agent's actor parameters and BN
    statistics (what its updates and CUDA-graph replays do) never reach it, so the background step-0 evaluation
    keeps the step-0 policy. Its actions are those ``act(obs, None)`` gave when it was taken (bitwise on the CPU in
    fp32, the CPU fp32 rounding of the same policy on a GPU)."""
    agent = _agent()
    obs = np.random.default_rng(3).standard_normal((3, 17)).astype(np.float32)
    before = agent.act(obs, None)
    policy = agent.policy_snapshot()
    with torch.no_grad():
        for tensor in [*agent.actor.module.parameters(), *agent.actor.module.buffers()]:
            if tensor.is_floating_point():
                tensor.add_(0.5)
    assert not np.array_equal(agent.act(obs, None), before)
    if agent.device.type == "cpu":
        np.testing.assert_array_equal(policy(obs), before, strict=True)
    else:
        np.testing.assert_allclose(policy(obs), before, rtol=1e-5, atol=1e-5)


def test_checkpoint_round_trip(tmp_path):
    agent = _agent(seed=0)
    batch = _real_batch(16)
    for _ in range(3):
        agent.update(batch)
    rng_at_save = torch.get_rng_state()
    agent.save(str(tmp_path / "agent"))
    assert sorted(os.listdir(tmp_path / "agent")) == [
        "actor.pt",
        "agent_state.pt",
        "critic.pt",
        "target_critic.pt",
        "temperature.pt",
    ]
    fresh = _agent(seed=123)
    torch.randn(100)  # move the global torch RNG away from the saved state
    fresh.load(str(tmp_path / "agent"))
    assert torch.equal(torch.get_rng_state(), rng_at_save)
    assert_nested_equal(_all_state(agent), _all_state(fresh))
    obs = batch["observation"][:4]
    assert np.array_equal(agent.act(obs, None), fresh.act(obs, None))
    noise = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    assert np.array_equal(agent.act(obs, noise), fresh.act(obs, noise))
    # the next (stochastic) update is identical from the same RNG state
    torch.set_rng_state(rng_at_save)
    m_agent = agent.update(batch)
    torch.set_rng_state(rng_at_save)
    assert m_agent == fresh.update(batch)
    assert_nested_equal(_all_state(agent), _all_state(fresh))


def _record_factory(log: list):
    def factory(cfg, obs_space, act_space):
        agent = make_agent(cfg, obs_space, act_space)
        act, upd = agent.act, agent.update
        agent.act = lambda o, n: log.append(("act", act(o, n).copy())) or log[-1][1]
        agent.update = lambda b: log.append(("update", upd(b))) or log[-1][1]
        return agent

    return factory


def _tiny_run(tmp_path, name, seed, extra=()):
    cfg = load_config(
        SMALL
        + [
            f"seed={seed}",
            "num_env_steps=60",
            "agent.buffer_min_length=30",
            "num_eval_episodes=0",
            "progress_bar=false",
            "logger_type=none",
            "save_buffer=true",
            f"save_path={tmp_path / name}",
        ]
        + list(extra),
        "torch",
    )
    log: list = []
    result = train(cfg, host_trainer(_record_factory(log)))
    buffer = __import__("agent_common.runs.files", fromlist=["load_pickle"]).load_pickle(
        os.path.join(result.checkpoint, "replay_buffer.pkl")
    )
    return log, buffer


def test_same_seed_same_actions_and_losses_different_seed_differs(tmp_path):
    """R5: warm-up actions (seeded RNG), policy actions and losses repeat for a seed and change with it."""
    log_a, buf_a = _tiny_run(tmp_path, "a", seed=0)
    log_b, buf_b = _tiny_run(tmp_path, "b", seed=0)
    log_c, buf_c = _tiny_run(tmp_path, "c", seed=1)
    assert len(log_a) == len(log_b) and sum(k == "update" for k, _ in log_a) == 31
    for (ka, va), (kb, vb) in zip(log_a, log_b, strict=True):
        assert ka == kb
        assert np.array_equal(va, vb) if ka == "act" else va == vb
    assert np.array_equal(buf_a["action"], buf_b["action"]) and np.array_equal(buf_a["reward"], buf_b["reward"])
    assert not np.array_equal(buf_a["action"][:30], buf_c["action"][:30])  # warm-up actions depend on the seed

    def first_update(log: list) -> dict:
        return next(v for k, v in log if k == "update")

    assert first_update(log_a)["critic/loss"] != first_update(log_c)["critic/loss"]
