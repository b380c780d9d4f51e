"""The import contract between the repository's packages, checked on the source (an AST walk, nothing imported).

Packages import downward only (docs/agents.md, "Layout"):

    shared_spec  <-  triton_kernels  <-  torch_impl  <-  agent_torch  \
                                     <-  jax_impl    <-  agent_jax    -  agent_interop  <-  bench
    shared_spec  <-  simulators  <-  agent_common    <-  agent_torch, agent_jax       /
    torch_impl, jax_impl  <-  kernel_validation  <-  bench

* ``ALLOWED`` lists, per package, the repository packages it may import; everything else is forbidden. So the two
  frameworks meet only in ``agent_interop`` and ``kernel_validation`` (``torch_impl`` / ``jax_impl``,
  ``agent_torch`` / ``agent_jax`` never import each other), kernels and the spec never import implementations or
  agents, implementations never import agents, and only ``bench`` itself and the tests of ``bench`` import
  ``bench``.
* ``FORBIDDEN_THIRD_PARTY`` keeps each package off the other framework: the spec and ``agent_common`` import
  neither torch nor JAX nor triton (numpy is the spec's float64 ground truth; ``agent_common`` may use omegaconf,
  gymnasium and the like), the torch side imports no JAX, the JAX side no torch.
* Tests import ``bench`` only in ``tests/test_bench*.py`` (``BENCH_TEST_FILES``).
* No module imports another module's private name (``from x import _y``, a single leading underscore) or a private
  submodule of a package it is not part of (``import x._y`` from outside ``x``). Third-party private modules
  (``torch._dynamo``) are outside this project's contract and not checked.

Every import counts wherever it is written: at the top, inside a function (the lazy imports this project uses to
keep the other framework unloaded), under ``TYPE_CHECKING``, or as ``importlib.import_module("literal")``.
"""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

SPEC_LAYER = {"shared_spec"}
KERNEL_LAYER = SPEC_LAYER | {"triton_kernels"}
ALLOWED: dict[str, set[str]] = {
    "shared_spec": set(),
    "triton_kernels": SPEC_LAYER,
    "torch_impl": KERNEL_LAYER,
    "jax_impl": KERNEL_LAYER,  # the Pallas kernel may share the Triton kernel's pure-Python launch configuration
    "simulators": SPEC_LAYER,  # one module per simulator; the device ones' envs (JAX, torch) imported on use only
    "agent_common": SPEC_LAYER | {"simulators"},
    "agent_torch": KERNEL_LAYER | {"torch_impl", "agent_common", "simulators"},
    "agent_jax": SPEC_LAYER | {"jax_impl", "agent_common", "simulators"},
    "agent_interop": KERNEL_LAYER | {"torch_impl", "jax_impl", "agent_common", "simulators", "agent_torch",
                      "agent_jax"},
    # the kernel validation command: both frameworks' ops (each in its own worker process), no agent
    "kernel_validation": KERNEL_LAYER | {"torch_impl", "jax_impl"},
}
ALLOWED["bench"] = set(ALLOWED) | {"bench"}
ALLOWED["tests"] = ALLOWED["bench"] | {"tests"}  # bench only in BENCH_TEST_FILES
PACKAGES = tuple(p for p in ALLOWED if p != "tests")  # the repository's packages (bench is not installed)

JAX_STACK = {"jax", "jaxlib", "flax", "optax"}
NO_FRAMEWORK = {"torch", "triton"} | JAX_STACK
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "shared_spec": NO_FRAMEWORK,
    "agent_common": NO_FRAMEWORK,
    "triton_kernels": JAX_STACK,
    "torch_impl": JAX_STACK,
    "agent_torch": JAX_STACK,
    "jax_impl": {"torch"},
    "agent_jax": {"torch"},
}

BENCH_TEST_FILES = ("test_bench*.py",)
"""Test files that test ``bench`` (one per benchmark job) and so may import it; every other file under tests/ may
not."""

SKIPPED_DIRS = {"__pycache__", "results"}  # bench/results holds measured data, not code


@dataclass(frozen=True)
class Violation:
    path: str  # relative to the walked root
    line: int
    rule: str  # "arrow", "framework", "bench-in-tests", "private-name", "private-module"
    detail: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.rule}] {self.detail}"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(root: Path, path: Path) -> tuple[str, ...]:
    parts = path.relative_to(root).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(tree: ast.AST, package: tuple[str, ...]) -> list[tuple[int, tuple[str, ...], tuple[str, ...]]]:
    """(line, module path, imported names) for every import; relative imports resolved against ``package``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, tuple(a.name.split(".")), ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else ()
            module = (*base, *(node.module.split(".") if node.module else ()))
            out.append((node.lineno, module, tuple(a.name for a in node.names)))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
            out.append((node.lineno, tuple(node.args[0].value.split(".")), ()))
    return out


def _is_submodule(root: Path, module: tuple[str, ...], name: str) -> bool:
    where = root.joinpath(*module)
    return (where / f"{name}.py").is_file() or (where / name / "__init__.py").is_file()


def find_violations(root: Path) -> list[Violation]:
    """Every import in the ``ALLOWED`` packages under ``root`` that breaks the contract (see the module doc)."""
    found: list[Violation] = []
    for top in ALLOWED:
        base = root / top
        if not base.is_dir():
            continue
        test_modules = {p.stem for p in base.glob("*.py")} if top == "tests" else set()
        for path in sorted(base.rglob("*.py")):
            if SKIPPED_DIRS & set(path.relative_to(root).parts):
                continue
            rel = path.relative_to(root).as_posix()
            own = _module_name(root, path)
            package = own if path.name == "__init__.py" else own[:-1]

            def report(line: int, rule: str, detail: str, rel: str = rel) -> None:
                found.append(Violation(rel, line, rule, detail))

            for line, module, names in _imports(ast.parse(path.read_text(), filename=rel), package):
                if not module:
                    continue
                if top == "tests" and module[0] in test_modules:  # a helper next to the tests, on pytest's path
                    module = ("tests", *module)
                target = module[0]
                dotted = ".".join(module)
                if target in ALLOWED:  # a repository package
                    if target != top and target not in ALLOWED[top]:
                        report(line, "arrow", f"{top} must not import {target} ({dotted}); {top} may import "
                                              f"{sorted(ALLOWED[top]) or 'no repository package'}")
                    elif top == "tests" and target == "bench" and not any(
                            fnmatch.fnmatch(path.name, pattern) for pattern in BENCH_TEST_FILES):
                        report(line, "bench-in-tests", f"{path.name} imports {dotted}, but only tests of bench "
                                                       f"({', '.join(BENCH_TEST_FILES)}) may import bench")
                    for i, part in enumerate(module):
                        owner = module[:i]
                        if _is_private(part) and own[:len(owner)] != owner:
                            report(line, "private-module", f"imports the private module {dotted} from outside "
                                                           f"{'.'.join(owner)}")
                            break
                    for name in names:
                        if not _is_private(name) or module == own:
                            continue
                        if not _is_submodule(root, module, name):
                            report(line, "private-name", f"imports the private name {name} from {dotted}")
                        elif own[:len(module)] != module:
                            report(line, "private-module", f"imports the private module {dotted}.{name} from "
                                                           f"outside {dotted}")
                elif target in FORBIDDEN_THIRD_PARTY.get(top, ()):
                    report(line, "framework", f"{top} must not import {target} ({dotted})")
    return found


# ---------------------------------------------------------------------------------------------------------------
# the repository
# ---------------------------------------------------------------------------------------------------------------


def test_repository_keeps_the_import_contract():
    violations = find_violations(REPO)
    assert not violations, "import contract broken:\n" + "\n".join(map(str, violations))


NOT_INSTALLED = ("bench", "tests")
"""Run from a checkout (``python -m bench``, ``python -m pytest``), never installed into site-packages."""


def test_every_package_is_classified_and_installed():
    """A new top-level package must get its place in ``ALLOWED`` (and so in the README's layout table), and every
    package but ``NOT_INSTALLED`` is in pyproject's ``packages.find`` include list, which matches none of those."""
    on_disk = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert on_disk <= set(PACKAGES), f"unclassified packages: {sorted(on_disk - set(PACKAGES))}"
    assert set(PACKAGES) <= on_disk, f"classified but missing: {sorted(set(PACKAGES) - on_disk)}"
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    missing = [p for p in PACKAGES if p not in NOT_INSTALLED and not any(fnmatch.fnmatch(p, i) for i in include)]
    assert not missing, f"pyproject.toml [tool.setuptools.packages.find] include lacks {missing}"
    installed = [p for p in NOT_INSTALLED for sub in (p, f"{p}.results")
                 if any(fnmatch.fnmatch(sub, i) for i in include)]
    assert not installed, f"pyproject.toml [tool.setuptools.packages.find] include installs {installed}"


# ---------------------------------------------------------------------------------------------------------------
# the walker itself: planted imports in a temporary tree
# ---------------------------------------------------------------------------------------------------------------


def _plant(root: Path, files: dict[str, str]) -> None:
    for top in ALLOWED:
        (root / top).mkdir(parents=True, exist_ok=True)
        if top != "tests":
            (root / top / "__init__.py").write_text("")
    for rel, source in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


BROKEN = [
    ("agent_torch/agent.py", "import agent_jax.agent\n", "arrow"),
    ("agent_jax/update.py", "def f():\n    from agent_torch import update\n", "arrow"),
    ("torch_impl/ops.py", "from jax_impl import categorical_td_target\n", "arrow"),
    ("jax_impl/ops.py", "import torch_impl.dispatch as d\n", "arrow"),
    ("triton_kernels/launch.py", "from torch_impl import ops\n", "arrow"),
    ("shared_spec/cases.py", "from agent_common import config\n", "arrow"),
    ("torch_impl/dispatch.py", "from agent_torch.agent import FlashSACAgent\n", "arrow"),
    ("agent_common/loop.py", "from agent_interop import convert\n", "arrow"),
    ("agent_interop/parity.py", "from bench.common import recipe\n", "arrow"),
    ("shared_spec/reference.py", "import importlib\nm = importlib.import_module('torch_impl.reference')\n", "arrow"),
    ("agent_common/config.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n",
     "framework"),
    ("agent_common/buffer.py", "import jax.numpy as jnp\n", "framework"),
    ("agent_common/noise.py", "from flax import linen\n", "framework"),
    ("agent_common/schedule.py", "import optax\n", "framework"),
    ("shared_spec/support.py", "import triton.language as tl\n", "framework"),
    ("torch_impl/reference.py", "import jax\n", "framework"),
    ("jax_impl/reference.py", "def f():\n    import torch\n", "framework"),
    ("agent_jax/networks.py", "import torch.nn\n", "framework"),
    ("agent_torch/networks.py", "from jax import numpy\n", "framework"),
    ("tests/test_agent_torch.py", "from bench.agents import recipe\n", "bench-in-tests"),
    ("tests/agent_test_utils.py", "import bench.kernel\n", "bench-in-tests"),
    ("tests/test_report.py", "from bench.report import main\n", "bench-in-tests"),
    ("tests/test_agents_bench.py", "from bench import agents\n", "bench-in-tests"),
    ("tests/test_agent_parity.py", "def f():\n    import bench\n", "bench-in-tests"),
    ("agent_interop/parity.py", "from agent_interop.torch_jax import _as_numpy\n", "private-name"),
    ("tests/test_agent_torch.py", "from agent_torch.state import _lr_tensors, Network\n", "private-name"),
    ("bench/report.py", "from bench.harness import _fast_p_table\n", "private-name"),
    ("tests/test_x.py", "from agent_test_utils import _helper\n", "private-name"),
    ("agent_jax/agent.py", "from agent_common import _impl\n", "private-module"),
    ("bench/report.py", "from .harness import _report\n", "private-module"),
    ("bench/report.py", "from bench.harness._report import table\n", "private-module"),
    ("bench/report.py", "import bench.harness._report\n", "private-module"),
]


@pytest.mark.parametrize(("rel", "source", "rule"), BROKEN, ids=[f"{r}:{p}" for p, _, r in BROKEN])
def test_walker_catches_a_planted_forbidden_import(tmp_path, rel, source, rule):
    # private submodules and a private helper for the planted imports to point at; the planted file wins
    targets = {"agent_common/_impl.py": "", "bench/harness/__init__.py": "", "bench/harness/_report.py": "",
               "tests/agent_test_utils.py": "def _helper(): pass\n"}
    _plant(tmp_path, {**targets, rel: source})
    violations = find_violations(tmp_path)
    assert [(v.path, v.rule) for v in violations] == [(rel, rule)], violations
    import_line = source.count("\n", 0, source.rfind("import")) + 1  # each planted source's last import
    assert violations[0].line == import_line


def test_walker_accepts_the_allowed_imports(tmp_path):
    _plant(tmp_path, {
        "agent_torch/agent.py": "import numpy\nfrom agent_common.buffer import flat_batch\nfrom torch_impl import "
                                "categorical_td_target\nfrom shared_spec import CategoricalSupport\nimport torch\n",
        "agent_jax/agent.py": "from jax_impl import resolve_backend\nimport jax, flax, optax\nfrom . import update\n",
        "agent_interop/convert.py": "def f():\n    import agent_torch.agent, agent_jax.agent\n    import torch, jax\n",
        "jax_impl/pallas_kernel.py": "from triton_kernels.config import kernel_config\nfrom . import _gate\n",
        "jax_impl/_gate.py": "from jax_impl.pallas_kernel import __doc__\n",
        "shared_spec/reference.py": "import numpy as np\nfrom shared_spec.support import CategoricalSupport\n",
        "agent_common/config.py": "import omegaconf\nimport gymnasium\n",
        "bench/harness/__init__.py": "from bench.harness._stages import run\nfrom ._stages import helper\n",
        "bench/harness/_stages.py": "from bench.harness import _cases\n",
        "bench/harness/_cases.py": "",
        "bench/kernel.py": "import torch._dynamo\nfrom agent_interop.parity import op_parity\n",
        "tests/test_bench_harness.py": "from bench import harness\n",
        "tests/test_bench_agents.py": "import bench.agents\n",
        "tests/test_bench_kernel.py": "from bench.__main__ import main\n",
        "tests/test_agent_parity.py": "from agent_interop.torch_jax import torch_to_jax\nfrom tests.agent_test_utils "
                                      "import run_module\nfrom agent_test_utils import REPO\n",
        "tests/agent_test_utils.py": "REPO = '.'\ndef run_module(): pass\n",
    })
    assert find_violations(tmp_path) == []


# ---------------------------------------------------------------------------------------------------------------
# no import circles between modules
# ---------------------------------------------------------------------------------------------------------------


def module_graph(root: Path, top: str) -> dict[str, set[str]]:
    """Module -> the modules of package ``top`` it imports (every import, lazy ones too; ``from pkg import name``
    counts as importing the submodule ``pkg.name`` where there is one, else ``pkg`` itself)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((root / top).rglob("*.py")):
        if SKIPPED_DIRS & set(path.relative_to(root).parts):
            continue
        own = _module_name(root, path)
        package = own if path.name == "__init__.py" else own[:-1]
        edges = graph.setdefault(".".join(own), set())
        for _, module, names in _imports(ast.parse(path.read_text(), filename=str(path)), package):
            if not module or module[0] != top:
                continue
            subs = [(*module, name) for name in names if _is_submodule(root, module, name)]
            for target in subs or [module]:
                if target != own:
                    edges.add(".".join(target))
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


@pytest.mark.parametrize("top", PACKAGES)
def test_no_import_circle_between_modules(top):
    cycles = import_cycles(module_graph(REPO, top))
    assert not cycles, f"import circles in {top}: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_catches_a_planted_circle(tmp_path):
    _plant(tmp_path, {
        "agent_common/loop.py": "from agent_common.run import TrainResult\n"
                                "def cli():\n    from agent_common.vector_loop import train_vector\n",
        "agent_common/vector_loop.py": "from agent_common import run\n",
        "agent_common/run.py": "import agent_common.schema\n",
        "agent_common/schema.py": "",
    })
    assert import_cycles(module_graph(tmp_path, "agent_common")) == []
    (tmp_path / "agent_common/schema.py").write_text("def f():\n    from agent_common import loop\n")
    assert import_cycles(module_graph(tmp_path, "agent_common")) == [
        ["agent_common.loop", "agent_common.run", "agent_common.schema", "agent_common.vector_loop"]]
