"""``agent.compile_scope=update`` (agent_torch/compiled.py): the torch agent's update and acting compiled in pieces.

On the CPU the pieces compile with the ``aot_eager`` backend: Dynamo's and AOTAutograd's graphs (the same traced,
functionalised forward and backward graphs Inductor receives), run op by op by ATen, so the compiled agent must
compute the eager agent's numbers bitwise, and the structure (no graph breaks, the background precompilation and its
cache hits, checkpoints, resume) is tested in seconds. Inductor's fused kernels change the rounding; its comparison
with eager (``test_inductor_update_matches_eager_within_rounding``) runs on a CUDA machine, or on the CPU with
``FLASHSAC_TEST_INDUCTOR_CPU=1`` (Inductor's C++ backend: several minutes of compilation on 2 cores).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import agent_torch.compiled as compiled
from agent_common.config import load_config
from agent_common.keys import ConfigError
from agent_torch.agent import FlashSACAgent, compute_path, make_agent
from agent_torch.state import explain_compile_mode
from tests.data import make_fused_update_golden as golden_run

COMPILED = ["agent.compile_scope=update", "agent.compile_mode=default"]


@pytest.fixture(scope="module", autouse=True)
def _aot_eager_backend():
    """Every agent of this file compiles with aot_eager (unless a test asks for Inductor); Dynamo's caches are
    dropped before and after, so no other test file sees these compiled functions."""
    torch._dynamo.reset()
    backend, compiled.BACKEND = compiled.BACKEND, "aot_eager"
    threads = torch.get_num_threads()
    yield
    compiled.BACKEND = backend
    torch.set_num_threads(threads)
    torch._dynamo.reset()


def _agent(extra=(), seed: int = 0) -> FlashSACAgent:
    overrides = [o for o in golden_run.TORCH_OVERRIDES if not o.startswith("seed=")]
    return make_agent(load_config([*overrides, f"seed={seed}", *extra], "torch"), *golden_run.spaces())


def _state(agent: FlashSACAgent) -> dict[str, np.ndarray]:
    """Every network's state dict and Adam state, as numpy, keyed as in a checkpoint."""
    out = {}
    for name in ("actor", "critic", "target_critic", "temperature"):
        net = getattr(agent, name)
        for key, value in net.state_dict()["network_state_dict"].items():
            out[f"{name}/{key}"] = value.detach().cpu().numpy().copy()
        if net.optimizer is not None:
            for i, state in net.optimizer.state_dict()["state"].items():
                for key, value in state.items():
                    out[f"{name}/optimizer/{i}/{key}"] = value.detach().cpu().numpy().copy()
    return out


def test_scope_config_is_validated_and_named_in_the_compute_path():
    with pytest.raises(ConfigError, match=r"agent.compile_scope.*'networks', 'update'|Allowed values: networks"):
        load_config(["agent.compile_scope=graph"], "torch")
    for mode in ("reduce-overhead", "max-autotune"):
        with pytest.raises(ConfigError, match=f"'{mode}' for 'agent.compile_mode'.*own CUDA graphs"):
            load_config(["agent.compile_scope=update", f"agent.compile_mode={mode}"], "torch")
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    update = load_config(["agent.compile_scope=update"], "torch").agent
    assert explain_compile_mode(update, cpu)[0] == "off"  # auto on the CPU: eager
    mode, reason = explain_compile_mode(update, cuda)
    assert mode == "default" and "compile_scope=update" in reason
    assert explain_compile_mode(load_config([], "torch").agent, cuda)[0] == "off"  # the networks scope: unchanged
    assert _agent(["agent.overlap_critic_step=true"]).cuda_graph_reason.endswith(
        "agent.overlap_critic_step needs the CUDA graphs: off")  # CPU: nothing to overlap
    line = compute_path(cuda, mode, reason, True, "captured", compile_scope="update")
    assert "torch.compile mode=default over the whole update and acting" in line
    assert compiled.inductor_options("default") == {"triton.cudagraphs": False, "fallback_random": True}
    assert compiled.inductor_options("max-autotune-no-cudagraphs")["max_autotune"] is True
    assert compiled.inductor_options("default", "combo_kernels=True, compile_threads=4") == {
        "triton.cudagraphs": False, "fallback_random": True, "combo_kernels": True, "compile_threads": 4}
    for bad, fragment in (("combo_kernels", "key=value"), ("no_such_option=1", "no option 'no_such_option'"),
                          ("combo_kernels=yes", "Python literal")):
        with pytest.raises(ValueError, match=fragment):
            compiled.extra_options(bad)


def test_compiled_update_is_the_eager_update_bitwise_and_precompiled():
    """The golden run (3 updates: actor, critic only, actor) compiled equals the eager run bitwise: the pieces hold
    the eager operations, the background precompilation restores the random generators, and it leaves nothing to
    compile: the updates and both kinds of action hit its compiled code."""
    eager = golden_run.run_torch()
    counters = torch._dynamo.utils.counters
    agent = _agent(COMPILED)
    assert agent._precompile is not None and "over the whole update and acting" in agent.compute_path
    agent._await_precompile()
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 7  # actor, temperature, critic, finish_critic, projection, act with and without noise
    got = golden_run.run_torch([*golden_run.TORCH_OVERRIDES, *COMPILED])
    assert counters["stats"]["unique_graphs"] == graphs  # another agent of the same shapes: compiled code reused
    assert set(got) == set(eager)
    differ = [k for k in eager if not np.array_equal(got[k], eager[k])]
    assert not differ, differ
    obs = np.random.default_rng(0).standard_normal((1, golden_run.OBS_DIM)).astype(np.float32)
    noise = np.zeros((1, golden_run.ACT_DIM), np.float32)
    eager_agent = _agent()
    assert np.array_equal(agent.act(obs, noise), eager_agent.act(obs, noise))
    assert np.array_equal(agent.act(obs, None), eager_agent.act(obs, None))
    assert counters["stats"]["unique_graphs"] == graphs
    # the modules are never wrapped: checkpoint keys are the eager agent's (no ``_orig_mod.``)
    for name in ("actor", "critic", "target_critic", "temperature"):
        keys = list(getattr(agent, name).state_dict()["network_state_dict"])
        assert keys == list(getattr(eager_agent, name).state_dict()["network_state_dict"])
        assert not any("_orig_mod" in k for k in keys)


def test_compiled_resume_is_exact_and_checkpoints_load_either_way(tmp_path):
    batches = golden_run.fixed_batches(5)
    agent = _agent(COMPILED)
    for batch in batches[:3]:
        agent.update(batch)
    agent.save(str(tmp_path / "ckpt"))
    rng = torch.get_rng_state()
    straight = [agent.update(batch) for batch in batches[3:]]
    resumed = _agent(COMPILED, seed=7)  # another seed: everything must come from the checkpoint
    torch.randn(10)
    resumed.load(str(tmp_path / "ckpt"))
    assert torch.equal(torch.get_rng_state(), rng)
    assert [resumed.update(batch) for batch in batches[3:]] == straight
    a, b = _state(agent), _state(resumed)
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    # an eager agent continues the compiled agent's checkpoint (and aot_eager computes its numbers): same layout
    eager = _agent(seed=3)
    eager.load(str(tmp_path / "ckpt"))
    assert [eager.update(batch) for batch in batches[3:]] == straight
    e = _state(eager)
    assert all(np.array_equal(a[k], e[k]) for k in a)


U32 = 2.0**-24  # float32 unit roundoff


def _distance_over_bound(got: np.ndarray, ref: np.ndarray, start: np.ndarray) -> float:
    """‖got − ref‖ over its bound 1e-3·‖ref − start‖ + 64·u·‖ref‖: a thousandth of how far the run moved the tensor,
    plus a few units of float32 rounding of the tensor itself (for tensors that barely move: the EMA target, BN
    running statistics)."""
    got, ref, start = (x.astype(np.float64) for x in (got, ref, start))
    bound = 1e-3 * np.linalg.norm(ref - start) + 64 * U32 * np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / max(bound, 1e-30))


INDUCTOR = torch.cuda.is_available() or os.environ.get("FLASHSAC_TEST_INDUCTOR_CPU") == "1"


@pytest.mark.skipif(not INDUCTOR, reason="Inductor's C++ compile takes minutes here: FLASHSAC_TEST_INDUCTOR_CPU=1 "
                                         "(or a CUDA machine) runs it")
def test_inductor_update_matches_eager_within_rounding(monkeypatch):
    """Inductor fuses and reorders float32 arithmetic (BN statistics, row norms, log-softmax sums), so the golden run
    compiled by Inductor differs from eager by rounding: a reordered sum of n terms moves by a few n·u relative at
    worst (u = 2^-24; n ≤ 2B·K = 3,232 here), typically √n·u. Metrics: within rtol 1e-4. Parameters, BN statistics
    and Adam moments: the distance from eager is at most 1e-3 of the distance the three updates moved them (Adam can
    turn a rounding-level change of a near-zero gradient into a full ±lr step of one element, so an element-wise bound
    would be lr; a norm-wise one sees a wrong operation, which moves them by O(1) of that distance), plus 64 units of
    float32 rounding of the tensor's own norm (the EMA target moves by less than its own rounding in three updates).
    BN running statistics: element-wise within 16 u at scale max(|value|, 1), since the activations they average are
    O(1) (unit-norm rows on normalised inputs) and a batch mean near 0 is a cancellation, whose rounding is that of
    its O(1) terms, not of its own size (observed: at most 1.3e-9 on means of ~1e-6, one ulp on variances)."""
    monkeypatch.setattr(compiled, "BACKEND", "inductor")
    device = ["agent.device_type=cuda", "agent.use_cuda_graph=true"] if torch.cuda.is_available() else []
    start = {}
    eager = golden_run.run_torch([*golden_run.TORCH_OVERRIDES, *device])
    got = golden_run.run_torch([*golden_run.TORCH_OVERRIDES, *device, *COMPILED])
    agent = make_agent(load_config([*golden_run.TORCH_OVERRIDES, *device], "torch"), *golden_run.spaces())
    for name in ("actor", "critic", "target_critic", "temperature"):
        for key, value in getattr(agent, name).module.state_dict().items():
            start[f"{name}/{key}"] = value.detach().cpu().numpy()
    assert set(got) == set(eager)
    worst = {}
    for key, ref in eager.items():
        if key.startswith("metrics/"):
            np.testing.assert_allclose(got[key], ref, rtol=1e-4, atol=1e-6, err_msg=key)
        elif "running_" in key:  # BN statistics of O(1) activations: rounding at scale 1 (a mean may cancel to ~0)
            assert np.all(np.abs(got[key] - ref) <= 16 * U32 * np.maximum(np.abs(ref), 1.0)), key
        elif key in start and ref.dtype.kind == "f" and not np.array_equal(ref, start[key]):
            worst[key] = _distance_over_bound(got[key], ref, start[key])
        elif "/optimizer/" in key and ref.dtype.kind == "f" and ref.size > 1:
            worst[key] = _distance_over_bound(got[key], ref, np.zeros_like(ref))  # moments start at zero
    assert len(worst) > 50 and max(worst.values()) <= 1.0, sorted(worst.items(), key=lambda kv: -kv[1])[:5]


def test_compiled_agent_converts_to_jax_and_back_bitwise():
    """torch (compiled) -> JAX -> a differently seeded compiled torch agent: every tensor, Adam moment and step count
    comes back, and the next update is the source's (the layouts are the eager agent's)."""
    from agent_interop.torch_jax import jax_to_torch, torch_to_jax
    from agent_jax.agent import make_agent as make_jax

    overrides = [o for o in golden_run.JAX_OVERRIDES if not o.startswith("seed=")]
    batches = golden_run.fixed_batches(3)
    source = _agent(COMPILED)
    for batch in batches[:2]:
        source.update(batch)
    jax_agent = make_jax(load_config([*overrides, "seed=5"], "jax"), *golden_run.spaces())
    torch_to_jax(source, jax_agent)
    dest = _agent(COMPILED, seed=7)
    jax_to_torch(jax_agent, dest)
    a, b = _state(source), _state(dest)
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    rng = torch.get_rng_state()
    expected = source.update(batches[2])
    torch.set_rng_state(rng)
    assert dest.update(batches[2]) == expected


def _device_run(extra: list[str], steps: int = 12) -> tuple[list[np.ndarray], dict, dict[str, np.ndarray]]:
    """``steps`` times: one update without a host read (``device_updates``, as the device replay runs them), then an
    action on a new observation; the actions, the summed metrics and the final state."""
    agent = _agent(["agent.device_type=cuda", "agent.categorical_target_backend=auto", "deterministic=true", *extra])
    rng = np.random.default_rng(0)
    actions = []
    for batch in golden_run.fixed_batches(steps):
        flat = agent._flat_batch(batch)
        agent.device_updates(1, lambda flat=flat: flat)
        obs = rng.standard_normal((1, golden_run.OBS_DIM)).astype(np.float32)
        noise = rng.standard_normal((1, golden_run.ACT_DIM)).astype(np.float32)
        actions.append(agent.act(obs, noise))
    return actions, agent.take_metrics(), _state(agent)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (streams, CUDA graphs, Inductor's kernels)")
@pytest.mark.parametrize("scope", ["networks", "update"])
def test_graphs_and_overlapped_critic_step_are_the_eager_run_bitwise_on_a_gpu(monkeypatch, scope):
    """On a GPU: the eager update, its CUDA-graph replay, and the replay as two graphs with each action overlapping
    the critic part (``agent.overlap_critic_step``) give bitwise the same actions, metrics and state (the same
    kernels on the same tensors; an action that read the actor before its step finished, or a step that rewrote it
    under an action, would not). ``update``: the same with the Inductor-compiled update."""
    monkeypatch.setattr(compiled, "BACKEND", "inductor")
    base = COMPILED if scope == "update" else []
    flags = (torch.are_deterministic_algorithms_enabled(), torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    try:  # deterministic=true sets these for the process: restored for the tests after this one
        runs = {name: _device_run([*base, *extra]) for name, extra in (
            ("eager", ["agent.use_cuda_graph=false"]), ("graph", []), ("overlap", ["agent.overlap_critic_step=true"]))}
    finally:
        torch.use_deterministic_algorithms(flags[0])
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
         torch.backends.cudnn.deterministic) = flags[1:]
    eager = runs.pop("eager")
    for name, (actions, metrics, state) in runs.items():
        assert all(np.array_equal(a, b) for a, b in zip(actions, eager[0], strict=True)), name
        assert metrics == eager[1], name
        assert all(np.array_equal(state[k], eager[2][k]) for k in state), name
