"""The JAX agent's persistent compilation cache (agent_jax/compilation_cache.py): where it lives and why, the fallback
when it cannot be created, and a second CLI run of the same config loading its programs from the first run's cache
(its summary line says so)."""

from __future__ import annotations

import os
import re

import pytest

from agent_common.config import load_config
from agent_common.schema import ConfigError
from agent_jax.compilation_cache import CACHE_ENV, default_cache_dir, resolve_cache_dir
from tests.agent_test_utils import REPO, run_module

CLI = ["num_env_steps=60", "agent.buffer_min_length=30", "agent.sample_batch_size=8", "agent.actor_hidden_dim=8",
       "agent.critic_hidden_dim=8", "agent.actor_num_blocks=1", "agent.critic_num_blocks=1",
       "env.max_episode_steps=30", "num_eval_episodes=1", "evaluation_per_interaction_step=60",
       "save_checkpoint_per_interaction_step=60", "logging_per_interaction_step=30",
       "agent.categorical_target_backend=jax", "progress_bar=false", "seed=1"]
SUMMARY = re.compile(r"jax compilation cache (\S+): (\d+) programs loaded from the cache, (\d+) compiled and stored")


def test_cache_directory_resolution():
    assert resolve_cache_dir("off", {}) == (None, "agent.compilation_cache_dir=off")
    assert resolve_cache_dir("/x/y", {CACHE_ENV: "/env"})[0] == "/x/y"  # the config key wins
    assert resolve_cache_dir("auto", {CACHE_ENV: "/env"}) == ("/env", f"${CACHE_ENV}")
    assert resolve_cache_dir("auto", {"XDG_CACHE_HOME": "/xdg"})[0] == "/xdg/flashsac/jax"
    assert default_cache_dir({}) == os.path.join(os.path.expanduser("~"), ".cache", "flashsac", "jax")
    with pytest.raises(ValueError, match="auto, off or a directory"):
        resolve_cache_dir("", {})
    with pytest.raises(ConfigError, match="agent.compilation_cache_max_mb"):
        load_config(["agent.compilation_cache_max_mb=0"], "jax")
    assert load_config([], "jax").agent.compilation_cache_dir == "auto"  # on by default


def _run(tmp_path, name: str, cache: str):
    env = {"PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu", CACHE_ENV: ""}
    return run_module("agent_jax.train", overrides=[*CLI, f"save_path={tmp_path / name}",
                                                     f"agent.compilation_cache_dir={cache}"], env=env, timeout=300)


def test_second_run_loads_its_programs_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _run(tmp_path, "first", str(cache))
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"jax compilation cache at {cache} (cap 4096 MiB" in first.stderr
    path, loaded, compiled = SUMMARY.search(first.stdout).groups()
    # the first run compiles its programs (a program it builds twice, e.g. from two call sites, it loads back once)
    assert path == str(cache) and int(compiled) > 0
    assert any(name.endswith("-cache") for name in os.listdir(cache))
    second = _run(tmp_path, "second", str(cache))
    assert second.returncode == 0, second.stderr[-3000:]
    _, loaded2, compiled2 = SUMMARY.search(second.stdout).groups()
    # every program of the same config comes from the cache
    assert int(compiled2) == 0 and int(loaded2) == int(loaded) + int(compiled)


def test_unwritable_cache_dir_turns_the_cache_off_once_with_a_warning(tmp_path, caplog):
    import jax

    from agent_jax.compilation_cache import CacheCounter, enable_persistent_cache

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    saved = {k: getattr(jax.config, k) for k in ("jax_enable_compilation_cache", "jax_compilation_cache_dir")}
    try:
        line = enable_persistent_cache(str(blocker / "cache"), 16)
        assert line.startswith(f"jax compilation cache off (cannot create {blocker / 'cache'}")
        assert "set agent.compilation_cache_dir=<writable directory> or off" in caplog.text
        assert CacheCounter().summary() == "jax compilation cache: off"
        assert blocker.read_text() == "not a directory"  # nothing of the user's replaced
    finally:
        for key, value in saved.items():
            jax.config.update(key, value)


def test_trim_removes_least_recently_used_entries_and_nothing_else(tmp_path):
    from agent_jax.compilation_cache import trim_cache

    for i, name in enumerate(["old", "mid", "new"]):
        entry = tmp_path / f"jit_{name}-cache"
        entry.write_bytes(b"x" * 100)
        (tmp_path / f"jit_{name}-atime").write_bytes(b"t")
        os.utime(entry, (1000 + i, 1000 + i))
    (tmp_path / "notes.txt").write_bytes(b"y" * 1000)  # not a cache entry: never touched
    assert trim_cache(str(tmp_path), 250) == (1, 100)
    assert sorted(os.listdir(tmp_path)) == ["jit_mid-atime", "jit_mid-cache", "jit_new-atime", "jit_new-cache",
                                            "notes.txt"]
    assert trim_cache(str(tmp_path), 250) == (0, 0)
