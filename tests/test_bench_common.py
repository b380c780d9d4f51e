"""bench.common, the library under the bench scripts: timed blocks, interleaving, repeated inputs, the environment
record and the recipe's configs (CPU, no agents built)."""

from __future__ import annotations

import numpy as np
import pytest

from agent_common.config import ConfigError
from bench import common
from shared_spec import make_inputs


def test_block_seconds_syncs_before_the_first_and_after_the_last_call():
    events = []

    def call(i):
        events.append(("call", i))
        return f"out{i}"

    seconds = common.block_seconds(call, 3, lambda out: events.append(("sync", out)))
    assert events == [("sync", None), ("call", 0), ("call", 1), ("call", 2), ("sync", "out2")]
    assert seconds >= 0
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        common.block_seconds(call, 0, lambda out: None)


def test_interleaved_blocks_runs_every_variant_in_turn_and_drops_the_warm_up():
    order = []

    def block(name):
        def run(n):
            order.append((name, n))
            return float(len(order))
        return run

    raw = common.interleaved_blocks({"a": block("a"), "b": block("b")}, repeats=2, iters=5, warmup_iters=1)
    assert order == [("a", 1), ("b", 1), ("a", 5), ("b", 5), ("a", 5), ("b", 5)]
    assert raw == {"a": [3.0, 5.0], "b": [4.0, 6.0]}  # the warm-up results (1.0, 2.0) are not recorded
    order.clear()
    assert common.interleaved_blocks({"a": block("a")}, repeats=1, iters=2) == {"a": [1.0]} and order == [("a", 2)]


def test_repeated_inputs_repeat_one_generated_block():
    small = common.repeated_inputs(5, "mixed", seed=3)
    for k, v in make_inputs(5, seed=3, kind="mixed").items():
        np.testing.assert_array_equal(small[k], v)
    big = common.repeated_inputs(10, "mixed", seed=3, block=4)
    block = make_inputs(4, seed=3, kind="mixed")
    rows = np.arange(10) % 4
    np.testing.assert_array_equal(big["next_log_probs"], block["next_log_probs"][:, rows])
    np.testing.assert_array_equal(big["next_qs"], block["next_qs"][:, rows])
    np.testing.assert_array_equal(big["reward"], block["reward"][rows])
    assert big["next_log_probs"].shape == (2, 10, 101)


def test_environment_records_versions_command_and_git():
    import torch

    env = common.environment()
    assert env["torch"] == torch.__version__ and env["numpy"] == np.__version__
    assert set(env) >= {"date_utc", "command", "python", "platform", "cpu_count", "git_sha", "git_dirty", "gpu"}
    assert env["git_sha"] is None or len(env["git_sha"]) == 40


def test_recipe_config_comes_from_the_config_schema_and_overrides_win():
    cfg = common.recipe_config("jax", "pallas", ["agent.sample_batch_size=64"])
    assert cfg.env.env_name == "HalfCheetah-v4" and cfg.num_env_steps == 100_000
    assert cfg.agent.categorical_target_backend == "pallas" and cfg.agent.categorical_target_strict
    assert cfg.agent.sample_batch_size == 64 and cfg.agent.learning_rate_decay_step == 100_000
    torch_cfg = common.recipe_config("torch", "triton")
    assert torch_cfg.agent.use_cuda_graph and not torch_cfg.agent.use_compile
    with pytest.raises(ConfigError, match="categorical_target_backend"):
        common.recipe_config("jax", "triton")  # a torch backend is no JAX backend
