"""Test configuration: interpreters on before any kernel module is imported; seeds; shared helpers."""

import os

# Must precede the first `import triton_kernels` / `@triton.jit` (the interpreter flag is read at decoration).
os.environ.setdefault("TRITON_INTERPRET", "1")
# Two host devices, so "wrong device" errors can be tested in JAX on a CPU-only machine. XLA's CPU backend optimisations
# off in the test processes and the children they start (`FAST_XLA_FLAGS`): programs compile faster and run the same
# operations; only where LLVM's passes contract or reorder float operations can a result's last bits differ. Tests
# that compare with bits written by XLA's default compile (the golden outputs) carry the `default_xla` mark and run
# in a child process with XLA's default options (`pytest_pyfunc_call` below).
DEVICE_FLAGS = "--xla_force_host_platform_device_count=2"
FAST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
os.environ.setdefault("XLA_FLAGS", f"{DEVICE_FLAGS} {FAST_XLA_FLAGS}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("FLASHSAC_PALLAS_INTERPRET", "1")
# The JAX agents' persistent compilation cache (agent.compilation_cache_dir=auto reads $JAX_COMPILATION_CACHE_DIR):
# one fresh directory per test process (each xdist worker, inherited by the subprocesses it starts), never the user's
# ~/.cache, so two workers never write, trim or read one directory at once and no earlier run's programs are loaded.
# xdist's workers inherit the controller's environment: a directory a parent test process made (marked by
# FLASHSAC_TEST_JAX_CACHE_DIR) is replaced by one of this process's own.
if os.environ.get("JAX_COMPILATION_CACHE_DIR") in (None, os.environ.get("FLASHSAC_TEST_JAX_CACHE_DIR")):
    import atexit
    import shutil
    import tempfile

    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="flashsac-test-jax-cache-")
    os.environ["FLASHSAC_TEST_JAX_CACHE_DIR"] = os.environ["JAX_COMPILATION_CACHE_DIR"]
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)

# The user's own kernel validation file (${XDG_DATA_HOME:-~/.local/share}/flashsac/kernel_validation.json, which
# flashsac-validate-kernels writes) changes what backend="auto" chooses: the tests and the processes they start read
# an empty data directory of their own instead (made once, by the first test process; its children inherit it).
if os.environ.get("FLASHSAC_TEST_DATA_HOME") is None or (
        os.environ.get("XDG_DATA_HOME") != os.environ["FLASHSAC_TEST_DATA_HOME"]):
    import atexit
    import shutil
    import tempfile

    os.environ["XDG_DATA_HOME"] = os.environ["FLASHSAC_TEST_DATA_HOME"] = tempfile.mkdtemp(prefix="flashsac-test-data-")
    atexit.register(shutil.rmtree, os.environ["XDG_DATA_HOME"], ignore_errors=True)

import gc  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    try:
        import torch

        torch.manual_seed(0)
    except ImportError:
        pass
    yield


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After each test file, drop JAX's compiled programs. XLA's CPU backend maps every executable's code in its own
    memory regions, and JAX's caches keep each one alive: a test process that runs many files reaches the kernel's
    `vm.max_map_count` (65,530 by default), and the next compile then crashes inside XLA. Torn down after the file's
    own module fixtures (autouse fixtures are set up first), so their agents are released too."""
    yield
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
    gc.collect()
    if os.path.exists("/proc/self/maps"):
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
        with open("/proc/self/maps") as f:
            regions = sum(1 for _ in f)
        if regions > 0.75 * limit:  # fail here, naming the cause, rather than segfault inside a later compile
            pytest.fail(f"this test process holds {regions} memory regions after releasing JAX's programs "
                        f"(vm.max_map_count {limit}): something still keeps compiled programs alive", pytrace=False)


@pytest.fixture
def pallas_validated_on_h200(tmp_path, monkeypatch):
    """A validation file of the tests' own (FLASHSAC_KERNEL_VALIDATION): jax/pallas and torch/triton passed on an
    "NVIDIA H200", jax/triton and jax/mosaic absent. The tests of auto's choice among validated and unvalidated
    kernels use it, so they do not depend on what the packaged file records from the latest GPU run. Both
    dispatchers read it afresh (their cached validation is dropped before and after)."""
    from validation_files import validation_entry, write_validation

    from shared_spec.dispatch import VALIDATION_ENV

    path = write_validation(tmp_path / "kernel_validation.json",
                            {"jax/pallas": validation_entry(), "torch/triton": validation_entry()})
    monkeypatch.setenv(VALIDATION_ENV, str(path))

    def reset():
        for name in ("jax_impl.dispatch", "torch_impl.dispatch"):
            if name in sys.modules:
                sys.modules[name].reset_dispatch()

    reset()
    yield path
    reset()


def pytest_configure(config):
    # A crashed xdist worker ends the run, naming its test: pytest-xdist 3.8.0 replaces a crashed worker under
    # --dist loadfile and then waits forever (pytest-dev/pytest-xdist#784, #1323; the fixes are unreleased), which
    # also applies to pytest-timeout's thread method, which ends a hung test's process. `--max-worker-restart N` wins.
    if config.pluginmanager.hasplugin("xdist") and config.getoption("maxworkerrestart", None) is None:
        config.option.maxworkerrestart = 0
    config.addinivalue_line("markers", "default_xla: compares with what XLA's default compile produced (bits, "
                                       "program counts); runs in a child process with XLA's default options when "
                                       "this one has FAST_XLA_FLAGS")


def pytest_pyfunc_call(pyfuncitem):
    """A `default_xla` test in a process compiling with `FAST_XLA_FLAGS`: run it in a child pytest whose XLA has its
    default options (and its own compilation cache directory); its result is this test's."""
    flags = os.environ.get("XLA_FLAGS", "")
    if pyfuncitem.get_closest_marker("default_xla") is None or FAST_XLA_FLAGS not in flags:
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # the cache: see the top
    env["XLA_FLAGS"] = flags.replace(FAST_XLA_FLAGS, "").strip()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", pyfuncitem.nodeid],
                          cwd=str(pyfuncitem.config.rootpath), env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"{pyfuncitem.nodeid}, run in a child process with XLA's default options, failed:\n"
                    f"{proc.stdout[-6000:]}{proc.stderr[-2000:]}", pytrace=False)
    return True
