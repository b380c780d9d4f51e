"""The JAX agent's persistent compilation cache (agent_jax/compilation_cache.py): where it lives and why, the fallback
when it cannot be created, and a second CLI run of the same config loading its programs from the first run's cache
(its summary line says so)."""

from __future__ import annotations

import os
import re

import pytest

from agent_common.config import load_config
from agent_common.keys import ConfigError
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
    entries = [name for name in os.listdir(cache) if name.endswith("-cache")]
    assert entries
    # JAX's per-entry lock was on: its lock file, and the -atime file its locked writes keep beside each entry
    assert ".lockfile" in os.listdir(cache)
    assert all(name.replace("-cache", "-atime") in os.listdir(cache) for name in entries)
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


def _entry(directory, program: str, stamp: int, size: int = 100) -> str:
    """A JAX cache entry (``<program>-<64 hex>-cache`` and its ``-atime``) last used at ``stamp``; its name."""
    name = f"{program}-{stamp:064x}-cache"
    (directory / name).write_bytes(b"x" * size)
    (directory / name.replace("-cache", "-atime")).write_bytes(b"t")
    os.utime(directory / name, (stamp, stamp))
    return name


def _user_files(directory) -> list[str]:
    """Files that only look like cache entries, or are not: the trim never touches them."""
    (directory / "notes.txt").write_bytes(b"y" * 1000)
    (directory / "results-cache").write_bytes(b"y" * 1000)  # ends in -cache but is no JAX entry name
    os.mkdir(directory / f"jit_dir-{0:064x}-cache")  # a JAX-like name on a directory
    os.symlink(directory / "notes.txt", directory / f"jit_link-{1:064x}-cache")  # and on a symlink
    return ["notes.txt", "results-cache", f"jit_dir-{0:064x}-cache", f"jit_link-{1:064x}-cache"]


def test_trim_removes_least_recently_used_entries_and_nothing_else(tmp_path):
    from agent_jax.compilation_cache import LOCK_FILE, trim_cache

    old, mid, new = (_entry(tmp_path, f"jit_{name}", 1000 + i) for i, name in enumerate(["old", "mid", "new"]))
    user = _user_files(tmp_path)
    assert trim_cache(str(tmp_path), 250) == (1, 100, None)
    kept = [mid, mid.replace("-cache", "-atime"), new, new.replace("-cache", "-atime")]
    assert sorted(os.listdir(tmp_path)) == sorted([*kept, *user, LOCK_FILE])
    assert trim_cache(str(tmp_path), 250) == (0, 0, None)
    assert trim_cache(str(tmp_path), 0) == (2, 200, None)  # every entry; the user's files stay
    assert sorted(os.listdir(tmp_path)) == sorted([*user, LOCK_FILE])
    assert (tmp_path / "notes.txt").read_bytes() == b"y" * 1000


HOLDER = """
import sys
from agent_jax.compilation_cache import enable_persistent_cache
print(enable_persistent_cache(sys.argv[1], 4096), flush=True)
sys.stdin.read()  # keeps the cache in use until the test closes stdin
"""


def test_trim_never_removes_entries_while_another_run_uses_the_cache(tmp_path):
    """One process has the cache in use (enabled, as a training run does); a second one trims: nothing is removed
    until the first one exits, then the trim removes the JAX entries and only them."""
    import subprocess
    import sys

    from agent_jax.compilation_cache import LOCK_FILE, trim_cache

    entries = [_entry(tmp_path, "jit_step", 1000 + i) for i in range(3)]
    (tmp_path / "notes.txt").write_bytes(b"y")
    before = sorted(os.listdir(tmp_path))
    env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = holder.stdout.readline()
        assert line.startswith(f"jax compilation cache at {tmp_path} (cap 4096 MiB;"), holder.stderr.read()[-3000:]
        trim = trim_cache(str(tmp_path), 0)
        assert trim == (0, 0, "a run has the cache in use (another one, or this one)")
        assert sorted(os.listdir(tmp_path)) == sorted({*before, LOCK_FILE})  # every entry still there
    finally:
        holder.stdin.close()
        holder.wait(timeout=120)
    assert holder.returncode == 0, holder.stderr.read()[-3000:]
    assert trim_cache(str(tmp_path), 0) == (3, 300, None)  # the run has exited: the trim runs
    assert sorted(os.listdir(tmp_path)) == sorted(["notes.txt", LOCK_FILE])
    assert not any(name in os.listdir(tmp_path) for name in entries)


def test_enable_trims_only_when_no_run_has_the_cache_in_use(tmp_path, caplog):
    """In one process: the first enable trims and then holds the directory; a second enable of it (a second agent
    of the same process) does not trim, and says so once."""
    import logging

    import jax

    from agent_jax.compilation_cache import enable_persistent_cache

    _entry(tmp_path, "jit_big", 1000, size=3 * 2**20)
    _entry(tmp_path, "jit_small", 2000, size=10)
    saved = {k: getattr(jax.config, k) for k in ("jax_enable_compilation_cache", "jax_compilation_cache_dir",
                                                 "jax_compilation_cache_max_size")}
    try:
        with caplog.at_level(logging.INFO, logger="agent_jax.compilation_cache"):
            first = enable_persistent_cache(str(tmp_path), 1)
            assert "removed 1 least recently used programs" in first
            assert "removed the 1 least recently used programs (3.0 MiB)" in caplog.text
            _entry(tmp_path, "jit_big2", 3000, size=3 * 2**20)
            second = enable_persistent_cache(str(tmp_path), 1)
        assert "not trimmed: a run has the cache in use" in second
        assert caplog.text.count("not trimmed to agent.compilation_cache_max_mb=1") == 1
        assert f"jit_big2-{3000:064x}-cache" in os.listdir(tmp_path)
    finally:
        for key, value in saved.items():
            jax.config.update(key, value)


def test_jax_entry_lock_is_on_and_entries_without_atime_get_one(tmp_path, caplog, monkeypatch):
    """JAX locks each entry read and write only with a size cap: the cap it gets is never reached (JAX never evicts).
    An entry written without JAX's lock (no -atime file) gets one from its modification time; a foreign *-cache file
    leaves JAX's lock off, with a warning naming it."""
    import jax

    from agent_jax.compilation_cache import enable_persistent_cache

    monkeypatch.delenv("JAX_COMPILATION_CACHE_MAX_SIZE", raising=False)
    name = _entry(tmp_path, "jit_legacy", 1234)
    os.remove(tmp_path / name.replace("-cache", "-atime"))
    kept = _entry(tmp_path, "jit_kept", 2000)
    saved = {k: getattr(jax.config, k) for k in ("jax_enable_compilation_cache", "jax_compilation_cache_dir",
                                                 "jax_compilation_cache_max_size")}
    try:
        enable_persistent_cache(str(tmp_path), 16)
        assert jax.config.jax_compilation_cache_max_size >= 2**62  # JAX's lock on, its eviction never
        atime = tmp_path / name.replace("-cache", "-atime")
        assert int.from_bytes(atime.read_bytes(), "little") == 1234 * 10**9
        assert os.stat(atime).st_mtime == 1234  # the trim still sees it as used at 1234
        assert (tmp_path / kept.replace("-cache", "-atime")).read_bytes() == b"t"  # an existing one is kept
        (tmp_path / "results-cache").write_bytes(b"y")
        enable_persistent_cache(str(tmp_path), 16)
        assert jax.config.jax_compilation_cache_max_size == -1
        assert f"JAX's per-entry lock is off ({tmp_path / 'results-cache'} is not a JAX cache entry" in caplog.text
        assert (tmp_path / "results-cache").read_bytes() == b"y"
    finally:
        for key, value in saved.items():
            jax.config.update(key, value)
