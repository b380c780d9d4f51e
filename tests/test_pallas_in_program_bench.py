"""bench/pallas_in_program.py on the CPU (Pallas in interpret mode): every section runs and reports."""

from __future__ import annotations

import functools
import json

import pytest

from bench.pallas_in_program import MATERIALISING_OPS, custom_call_context, main, stablehlo_operand_sources

HLO = """HloModule m
ENTRY %main (p0: f32[2,8,4]) -> f32[8,4] {
  %p0 = f32[2,16,4]{2,1,0} parameter(0)
  %slice.1 = f32[2,8,4]{2,1,0} slice(%p0), slice={[0:2], [8:16], [0:4]}
  %copy.2 = f32[2,8,4]{1,2,0} copy(%slice.1)
  %kernel = f32[8,4]{1,0} custom-call(%copy.2), custom_call_target="__gpu$xla.gpu.triton"
  ROOT %neg = f32[8,4]{1,0} negate(%kernel)
}
"""


def test_custom_call_context_names_the_operands_and_users():
    ctx = custom_call_context(HLO)
    assert ctx["counts"]["copy"] == 1 and ctx["counts"]["custom-call"] == 1 and ctx["counts"]["slice"] == 1
    (call,) = ctx["custom_calls"]
    assert call["operands"] == ["%copy.2 = f32[2,8,4]{1,2,0} copy(%slice.1)"]
    assert call["sources"] == ["copy copy.2"]
    bitcast = HLO.replace("%kernel = f32[8,4]{1,0} custom-call(%copy.2)",
                          "%b = f32[64]{0} bitcast(%copy.2)\n  %kernel = f32[8,4]{1,0} custom-call(%b)")
    assert custom_call_context(bitcast)["custom_calls"][0]["sources"] == ["copy copy.2"]  # through the bitcast
    assert call["users"] == ["ROOT %neg = f32[8,4]{1,0} negate(%kernel)"]


def test_tiny_run_writes_every_section(tmp_path):
    out = tmp_path / "pip"
    code = main(["--out", str(out), "--tiny", "--sizes", "16", "--scan-k", "2", "--update-k", "2", "--repeats", "1"])
    res = json.loads((out / "results.json").read_text())
    assert code == 0, res["errors"]
    (scan,) = res["scan"]
    assert {"jax_dense_us", "pallas_dense_us", "jax_sliced_us", "pallas_sliced_us"} <= set(scan)
    (update,) = res["update"]
    assert update["jax_ms"]["median"] > 0 and update["pallas_ms"]["median"] > 0
    assert {"scan_pallas_sliced_B16", "update_pallas_B16", "update_jax_B16"} <= set(res["hlo"])
    assert (out / "hlo" / "update_pallas_B16.txt").exists() and (out / "results.md").exists()


# The no-copy check of the row-offset form. On this CPU machine the Pallas kernel runs in interpret mode, which
# lowers to ordinary XLA ops (no custom call), and the compiled CUDA program needs a GPU. What can be checked here is
# the program XLA receives: the module lowered for CUDA (StableHLO, with the Triton custom call), in which an operand
# cut by a slice is what XLA copies before the custom call. The compiled HLO is inspected on the GPU by the script
# itself (its `hlo` section).


@pytest.fixture
def cuda_kernel(monkeypatch):
    """The dispatch's "pallas" implementation lowered for the GPU (interpret=False), so a program traced here can be
    lowered for CUDA with the custom call in it (the gate's self-test still runs in interpret mode)."""
    from jax_impl import dispatch, ops

    monkeypatch.setitem(dispatch.IMPLEMENTATIONS, "pallas",
                        functools.partial(ops.categorical_td_target_pallas, interpret=False))


@pytest.mark.usefixtures("cuda_kernel")
def test_row_offset_leaves_no_slice_before_the_custom_call():
    import jax
    import jax.numpy as jnp

    import jax_impl

    B, E, N = 8, 2, 101
    f32 = jnp.float32
    shapes = (jax.ShapeDtypeStruct((E, 2 * B), f32), jax.ShapeDtypeStruct((E, 2 * B, N), f32),
              *[jax.ShapeDtypeStruct((B,), f32)] * 3)

    def target(explicit_slice: bool):
        def f(q, lp, r, d, s):
            if explicit_slice:  # the former form: the rows cut out before the call
                return jax_impl.categorical_td_target(q[:, B:], lp[:, B:], r, d, s, gamma=0.99, backend="pallas",
                                                      strict=True)
            return jax_impl.categorical_td_target(q, lp, r, d, s, gamma=0.99, backend="pallas", strict=True,
                                                  row_offset=B)
        return jax.jit(f).trace(*shapes).lower(lowering_platforms=("cuda",)).as_text()

    (offset_sources,) = stablehlo_operand_sources(target(False))
    (sliced_sources,) = stablehlo_operand_sources(target(True))
    # operands: gamma, q, log-probs, r, d, s (the strides are constants of the kernel)
    assert len(offset_sources) == 6, offset_sources
    assert offset_sources[1:] == ["parameter"] * 5, offset_sources
    assert sliced_sources[1:3] == ["stablehlo.slice"] * 2, sliced_sources  # the check sees a slice when there is one
    assert "stablehlo.slice" not in target(False)


@pytest.mark.usefixtures("cuda_kernel")
def test_agent_update_hands_the_kernel_the_critic_output_itself():
    """In the JAX agent's jitted update (lowered for CUDA), the TD-target custom call reads next_qs and the
    log-probs straight from the target critic's (E, 2B[, K]) outputs: no slice, gather or concatenate between."""
    import jax

    from agent_common.buffer import flat_batch
    from agent_interop.synthetic import make_spaces
    from agent_jax.agent import make_agent
    from agent_jax.update import update_networks_flat
    from bench.common import ACT_DIM, OBS_DIM, recipe_config, synthetic_batches
    from bench.pallas_in_program import TINY_AGENT

    B = 8
    agent = make_agent(recipe_config("jax", "pallas", [f"agent.sample_batch_size={B}", *TINY_AGENT]),
                       *make_spaces(OBS_DIM, ACT_DIM))
    flat = jax.numpy.asarray(flat_batch(synthetic_batches(B, 1)[0]))
    text = update_networks_flat.trace(agent.state, flat, agent.ctx, observation_dim=OBS_DIM,
                                      do_actor_update=False).lower(lowering_platforms=("cuda",)).as_text()
    (sources,) = stablehlo_operand_sources(text)  # one TD-target call per update
    assert len(sources) == 6, sources  # gamma, q, log-probs, r, d, s
    q_source, lp_source = sources[1:3]
    assert q_source not in MATERIALISING_OPS and lp_source not in MATERIALISING_OPS, sources
    assert lp_source == "stablehlo.subtract", sources  # the critic head's log_softmax
