"""The update of both agents against golden outputs of commit 2b3c4af (``tests/data/make_fused_update_golden.py``),
the batched weight projection against the per-layer one, and the number of operations per update (torch ATen ops
that launch work, JAX compiled HLO programs) at the recipe's network sizes (``tests/op_count.py``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from tests.data import make_fused_update_golden as golden_run
from tests.host_sync import HostSyncCounter

# Losses are compared relatively, arrays element-wise. The update's maths and the order of every element's
# operations are those of the golden commit: on the machine that wrote the files the results are bitwise equal
# (max difference 0). The tolerance only absorbs another CPU's GEMM kernels (oneDNN / Eigen / XLA pick AVX2 / AVX-512
# paths by CPU, whose summation order differs), as tests/test_agent_torch_amp.py does: every element within
# (RTOL, ATOL), except at most OUTLIERS of an array's elements within 10x that (Adam's step on a gradient element
# near zero can differ by a sizeable fraction of the learning rate when its rounding differs). Measured on an AVX2 EPYC
# (no AVX-512): one element of 413 arrays past (RTOL, ATOL), at 1.39x (the JAX actor's blocks_1 fc1 weight, 1 of
# 1,024); every other array within 0.25x. A changed operation (a skipped projection, a wrong EMA, a step on the wrong
# batch) moves values by orders of magnitude more, and in most of an array's elements.
RTOL, ATOL, OUTLIERS = 1e-5, 1e-6, 0.005


def _compare(golden: dict[str, np.ndarray], new: dict[str, np.ndarray]) -> None:
    assert set(golden) == set(new), sorted(set(golden) ^ set(new))
    for name, expected in golden.items():
        got = new[name]
        assert got.shape == expected.shape and got.dtype == expected.dtype, name
        np.testing.assert_allclose(got, expected, rtol=10 * RTOL, atol=10 * ATOL, err_msg=name)
        outside = ~np.isclose(got, expected, rtol=RTOL, atol=ATOL)
        assert outside.mean() <= OUTLIERS, (name, f"{int(outside.sum())} of {outside.size} elements past "
                                                  f"rtol={RTOL}, atol={ATOL}")


def _load(path: str) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def test_torch_update_matches_golden_outputs_of_2b3c4af():
    _compare(_load(golden_run.TORCH_PATH), golden_run.run_torch())


@pytest.mark.default_xla
def test_jax_update_matches_golden_outputs_of_2b3c4af():
    _compare(_load(golden_run.JAX_PATH), golden_run.run_jax())


@pytest.mark.parametrize("head", ["paper", "upstream"])
def test_batched_projection_equals_the_per_layer_projection_bitwise(head):
    from agent_torch.networks import FlashSACActor, FlashSACDoubleCritic, normalize_parameters

    torch.manual_seed(3)
    nets = [FlashSACActor(17, 6, 2, 16, head=head), FlashSACDoubleCritic(23, 2, 16, torch.linspace(-5, 5, 101))]
    for net in nets:
        with torch.no_grad():
            for p in net.parameters():
                p.mul_(1.0 + 0.5 * torch.rand_like(p)).add_(0.01 * torch.randn_like(p))  # off the unit sphere
        before = {k: v.clone() for k, v in net.state_dict().items()}
        copied = copy.deepcopy(net)
        with torch.no_grad():
            for sub in copied.modules():
                if sub is not copied and hasattr(sub, "normalize_parameters"):
                    sub.normalize_parameters()  # the per-layer projection
        normalize_parameters(net)
        moved = 0
        for name, value in net.state_dict().items():
            assert torch.equal(value, copied.state_dict()[name]), name
            moved += not torch.equal(value, before[name])
        assert moved >= 10  # the projection did change the parameters


def _recipe_batch() -> dict[str, np.ndarray]:
    return {k: v[:8] for k, v in golden_run.fixed_batches(1)[0].items()}


# Operations per update at the recipe's sizes, batch 8, CPU (python -m tests.op_count prints them). Before the
# batched projection and the shared concatenations (commit 2b3c4af): torch 609 / 326 kernel ops (actor update /
# critic-only update). A change that adds operations to the update fails here; lower the numbers when it removes some.
TORCH_MAX_KERNEL_OPS = {"actor": 523, "critic_only": 282}


def test_torch_update_kernel_ops_at_most_the_recorded_count():
    from agent_common.config import load_config
    from agent_torch.agent import make_agent
    from tests.op_count import RECIPE, torch_update_counts

    threads = torch.get_num_threads()
    try:
        agent = make_agent(load_config([*RECIPE, "agent.categorical_target_backend=torch"], "torch"),
                           *golden_run.spaces())
        counts = torch_update_counts(agent, _recipe_batch())
        flat = agent._flat_batch(_recipe_batch())
        with HostSyncCounter() as syncs:
            agent._apply_update(flat)
    finally:
        torch.set_num_threads(threads)
    for name, limit in TORCH_MAX_KERNEL_OPS.items():
        c = counts[name]
        assert c.total_kernels <= limit, (name, c.total_kernels, dict(c.kernels.most_common()))
    assert syncs.total == 0, dict(syncs.counts)  # no host read inside an update
    # the projection runs batched: one clamp for all row norms and one rsqrt for all joint groups per network
    actor = counts["actor"].kernels
    assert actor["_foreach_clamp_min_"] == 2 and actor["_foreach_rsqrt_"] == 2 and actor["rsqrt"] <= 5
    assert actor["cat"] == 5  # [s; s'] once per update, [a; a'] once (target and critic share it)


# The JAX update is one XLA program per variant already (update_networks_flat); its compiled HLO at the recipe's
# sizes on the CPU, actor update (2b3c4af and now): 712 instructions that run (656 fusions, 43 copies, 13 dots).
JAX_MAX_PROGRAMS, JAX_MAX_FUSIONS = 712, 656


@pytest.mark.default_xla  # counted from XLA's default compile
def test_jax_update_hlo_programs_at_most_the_recorded_count():
    from agent_common.config import load_config
    from agent_jax.agent import make_agent
    from tests.op_count import RECIPE, jax_update_counts

    agent = make_agent(load_config([*RECIPE, "agent.categorical_target_backend=jax"], "jax"), *golden_run.spaces())
    counts = jax_update_counts(agent, _recipe_batch(), variants=("actor",))["actor"]
    assert counts["programs"] <= JAX_MAX_PROGRAMS and counts["fusions"] <= JAX_MAX_FUSIONS, counts
    assert counts["by_opcode"].get("while", 0) == 0 and counts["by_opcode"].get("conditional", 0) == 0  # one program
