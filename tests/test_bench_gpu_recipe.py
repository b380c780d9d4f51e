"""bench/gpu_recipe.py: ``--tiny`` runs the update phase of both agents (``--amps fp16``; every AMP variant's agent
is built in process) and records the upstream phase as skipped without a checkout; arguments are checked; the report
puts the loop against its parts.
(The MJX phases' tiny run compiles MJX programs for minutes on a 2-core CPU: the agents' MJX tests cover the code they
call, and the job's CPU run of every phase is in its closing note.)"""

from __future__ import annotations

import json

import pytest

from bench import gpu_recipe
from bench.__main__ import JOBS


def test_tiny_update_and_upstream_phases(tmp_path):
    """The update phase's child processes for the variants ``--amps`` picks (fp16: the loss scale's variant), and the
    upstream phase skipped without a checkout; the other variants build their agents in the next test."""
    rc = gpu_recipe.main(["--out", str(tmp_path), "--tiny", "--phases", "update,upstream", "--amps", "fp16"])
    assert rc == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["config"]["amps"] == ["fp16"]
    got = {(u["framework"], u["amp"]): u for u in res["update"]}
    assert set(got) == {("jax", "fp16"), ("torch", "fp16")}
    for u in got.values():
        assert u["returncode"] == 0 and u["updates_per_second"] > 0 and u["batch_size"] == 8, u
        assert u["updates_per_call"] == 2  # the recipe's updates per interaction step
        assert "amp_dtype=fp16" in u["compute_path"], u["compute_path"]
    assert "skipped" in res["upstream"] and "--upstream" in res["upstream"]["skipped"]
    md = (tmp_path / "results.md").read_text()
    assert "| torch:fp16 | 0 | 8 |" in md and "| jax:fp16 | 0 | 8 |" in md and "No GPU" in md
    assert JOBS["gpu-recipe"] == "bench.gpu_recipe"


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_every_amp_variant_reaches_the_update_agent(framework):
    """Each AMP variant's keys on the recipe (the update child's config, tiny sizes) give the agent that precision:
    its compute path names the AMP dtype (none with AMP off)."""
    for amp in gpu_recipe.TORCH_AMP:
        cfg, agent = gpu_recipe.update_agent(framework, amp, gpu_recipe._tiny(framework))
        assert int(cfg.agent.sample_batch_size) == 8 and int(cfg.updates_per_interaction_step) == 2
        path = gpu_recipe.compute_path(framework, agent)
        if amp == "off":  # the torch agent says fp32; the JAX agent names no AMP key
            assert "amp_dtype" not in path and ("use_amp=false: fp32" in path if framework == "torch" else
                                                 "use_amp" not in path), path
        else:
            assert f"amp_dtype={amp}" in path, (amp, path)


def test_arguments_are_checked(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gpu_recipe.main(["--out", str(tmp_path), "--phases", "train,warp"])
    assert "--phases: unknown ['warp']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_recipe.main(["--out", str(tmp_path), "--upstream", str(tmp_path)])
    assert "no flash_rl/agents/flashSAC/agent.py there" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_recipe.main(["--out", str(tmp_path), "--learn-frameworks", "jax,tf"])
    assert "--learn-frameworks: expected a comma-separated subset of jax, torch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_recipe.main(["--out", str(tmp_path), "--amps", "fp16,fp8"])
    err = capsys.readouterr().err
    assert "--amps: expected a comma-separated subset of off, bf16, fp16, got ['fp16', 'fp8']" in err
    with pytest.raises(SystemExit):
        gpu_recipe.main(["--tiny"])
    assert "--out DIR is required" in capsys.readouterr().err


def test_report_puts_the_loop_against_its_parts(tmp_path):
    res = {"env": {"gpu": "H200", "date_utc": "today", "command": "python -m bench gpu-recipe"},
           "config": {"tiny": False, "phases": ["train", "env-step", "update"], "envs": [1024],
                      "target_return": 3000.0},
           "train": [{"framework": "torch", "amp": "bf16", "returncode": 0,
                      "runs": [{"num_envs": 1024, "returncode": 0, "steady_env_steps_per_second": 102400.0,
                                "steady_updates_per_second": 200.0}]}],
           "env_step": {"runs": [{"num_envs": 1024, "env_steps_per_second": 204800.0,
                                  "seconds_per_call_median": 0.5, "steps": 100, "compile_s": 30.0}]},
           "update": [{"framework": "torch", "amp": "bf16", "returncode": 0, "batch_size": 2048,
                       "updates_per_second": 400.0, "seconds_per_call": 0.005}],
           "upstream": {"skipped": "no --upstream checkout given"}}
    text = gpu_recipe.report(str(tmp_path), res)
    # loop: 1024 / 102400 = 10 ms; env step alone 0.5 s / 100 = 5 ms; 2 updates 5 ms; parts 10 ms; ratio 1
    assert "| torch:bf16 | 1024 | 10.00 | 5.00 | 5.00 | 10.00 | 1.00 |" in text
    assert "Skipped: no --upstream checkout given" in text and "No GPU" not in text


@pytest.mark.parametrize("num_envs", [256, 1024, 4096])
def test_capture_phase_configs_are_valid_at_the_recipe_env_counts(num_envs):
    """The capture phase's config on the recipe validates at every env count the H200 run uses (its evaluation
    episodes were once the recipe's 50, not a multiple of 1024 evaluation envs)."""
    from agent_common.config import load_config
    from agent_common.recipes import gpu_recipe as recipe

    for amp in ("off", "bf16", "fp16"):
        cfg = load_config([*recipe("halfcheetah", "torch"), *gpu_recipe.capture_overrides(amp, num_envs)], "torch")
        assert cfg.num_eval_envs == num_envs and cfg.num_eval_episodes % cfg.num_eval_envs == 0
