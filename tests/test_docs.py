"""docs/flashsac.md's config-key table lists exactly the keys of the config schema, with their defaults; README.md's
commands name modules, benchmark jobs and config keys that exist, its test command is CI's, its links resolve; every
docs/*.md names only modules and benchmark jobs that exist, and its links resolve."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "flashsac.md"
BEGIN, END = "<!-- config-keys:begin -->", "<!-- config-keys:end -->"
ROW = re.compile(r"^\| `(?P<key>[a-z_.A-Z0-9]+)` \| `(?P<default>[^`]*)` \| (?P<meaning>.+) \|$")


def schema_defaults() -> dict[str, Any]:
    """Every dotted key of ``agent_common.config.Config`` with its default, nested groups flattened."""
    from agent_common.config import Config

    def walk(cls: type, prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            if dataclasses.is_dataclass(default):
                out.update(walk(type(default), f"{prefix}{f.name}."))
            else:
                out[prefix + f.name] = default
        return out

    return walk(Config, "")


def parse_default(text: str) -> Any:
    """The table's YAML-like spelling: null, true / false, numbers (``1_000_000``, ``3e-4``), else a string."""
    if text == "null":
        return None
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def doc_table(text: str) -> dict[str, tuple[str, str]]:
    """{key: (default text, meaning)} from the rows between the table markers; a malformed row raises."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"{DOC.name} needs exactly one {BEGIN} ... {END} block")
    rows = text.split(BEGIN, 1)[1].split(END, 1)[0].strip().splitlines()[2:]  # after the header and the rule
    out: dict[str, tuple[str, str]] = {}
    for line in rows:
        match = ROW.match(line)
        if match is None:
            raise ValueError(f"not a '| `key` | `default` | meaning |' row: {line!r}")
        if match["key"] in out:
            raise ValueError(f"key {match['key']} listed twice")
        out[match["key"]] = (match["default"], match["meaning"])
    return out


def same_default(text: str, value: Any) -> bool:
    parsed = parse_default(text)
    if isinstance(value, float) and not isinstance(value, bool) and isinstance(parsed, int):
        parsed = float(parsed)  # `1` for a float key reads as the same number
    return type(parsed) is type(value) and parsed == value


def table_problems(table: dict[str, tuple[str, str]], want: dict[str, Any]) -> list[str]:
    """Everything in which the doc table and the schema disagree, one line each."""
    problems = [f"missing from the table: {k}" for k in sorted(set(want) - set(table))]
    problems += [f"not in the schema: {k}" for k in sorted(set(table) - set(want))]
    problems += [f"default of {k}: table {table[k][0]!r}, schema {want[k]!r}" for k in sorted(set(want) & set(table))
                 if not same_default(table[k][0], want[k])]
    problems += [f"no meaning given for {k}" for k, (_, meaning) in table.items() if not meaning.strip()]
    return problems


def test_config_table_matches_the_schema():
    problems = table_problems(doc_table(DOC.read_text()), schema_defaults())
    assert not problems, "docs/flashsac.md config table vs agent_common.config:\n" + "\n".join(problems)


def test_table_check_catches_a_drift():
    """Each kind of disagreement is reported (so the test above can fail), and a malformed row raises."""
    want = schema_defaults()
    table = doc_table(DOC.read_text())
    drifted = dict(table)
    del drifted["agent.critic_num_bins"]
    drifted["agent.old_key"] = ("1", "gone")
    drifted["gamma"] = ("0.9", table["gamma"][1])
    drifted["seed"] = ("0.0", table["seed"][1])  # an int key written as a float
    assert table_problems(drifted, want) == [
        "missing from the table: agent.critic_num_bins", "not in the schema: agent.old_key",
        "default of gamma: table '0.9', schema 0.99", "default of seed: table '0.0', schema 0"]
    assert parse_default("1_000_000") == 1_000_000 and parse_default("3e-4") == 3e-4
    assert parse_default("null") is None and parse_default("true") is True and parse_default("auto") == "auto"
    with pytest.raises(ValueError, match="not a"):
        doc_table(DOC.read_text().replace("| `seed` | `0` |", "| seed | 0 |"))


# ------------------------------------------------------------------------------------------------------- README

README = REPO / "README.md"
MODULE = re.compile(r"python3? -m ([A-Za-z_][\w.]*)(?![\w.<])((?: [\w-]+)?)")  # not a pattern: agent_<framework>
OVERRIDE = re.compile(r"--overrides ([\w.]+)=(?!value\b)")  # "key=value" is the syntax, not a key
LINK = re.compile(r"\]\(([^)#:]+)\)")


def bench_jobs() -> set[str]:
    """The keys of ``JOBS`` in bench/__main__.py, read from the source (tests outside test_bench* do not import
    bench)."""
    tree = ast.parse((REPO / "bench" / "__main__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "JOBS" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("bench/__main__.py defines no JOBS")


def command_problems(text: str, base: Path = REPO) -> list[str]:
    """``python -m`` commands naming a module that does not exist or a benchmark job that is not in JOBS; links
    (relative to ``base``) to files that do not exist."""
    problems = []
    jobs = bench_jobs()
    for module, arg in MODULE.findall(text):
        if importlib.util.find_spec(module.split(".")[0]) is None or (
                "." in module and not (REPO / (module.replace(".", "/") + ".py")).is_file()):
            problems.append(f"no module {module}")
        elif module == "bench" and arg.strip() and not arg.strip().startswith("-") and arg.strip() not in jobs:
            problems.append(f"no benchmark job {arg.strip()!r}")
    problems += [f"link to a missing file {p}" for p in LINK.findall(text) if not (base / p).exists()]
    return problems


def readme_problems(text: str) -> list[str]:
    """``command_problems``; config keys that are not in the schema; a test command other than CI's; more than 200
    lines."""
    problems = command_problems(text)
    keys = set(schema_defaults())
    problems += [f"no config key {k}" for k in OVERRIDE.findall(text) if k not in keys]
    ci = re.search(r"python3? -m pytest[^\n]*", (REPO / ".ci" / "run").read_text())
    if ci is None or ci.group(0).replace("python3 ", "python ") not in text:
        problems.append(f"the test command is not CI's ({ci.group(0) if ci else 'none in .ci/run'})")
    if text.count("\n") > 200:
        problems.append(f"{text.count(chr(10))} lines (at most 200)")
    return problems


def test_readme_commands_and_links_exist():
    problems = readme_problems(README.read_text())
    assert not problems, "README.md:\n" + "\n".join(problems)


def test_readme_check_catches_a_broken_command():
    text = README.read_text()
    broken = (text.replace("python -m agent_torch.train", "python -m agent_torch.trian", 1)
              .replace("python -m bench --help", "python -m bench kernels", 1)
              .replace("--overrides seed=", "--overrides sed=", 1)
              .replace("(docs/agents.md)", "(docs/agent.md)", 1)
              .replace("-n 2 --dist loadfile", "-n 4", 1))
    assert readme_problems(broken) == [
        "no module agent_torch.trian", "no benchmark job 'kernels'", "link to a missing file docs/agent.md",
        "no config key sed", "the test command is not CI's (python3 -m pytest -q -n 2 --dist "
        "loadfile)"]
    assert readme_problems(text + "\n" * 200)[-1].endswith("lines (at most 200)")


# --------------------------------------------------------------------------------------------------------- docs/

DOCS = sorted((REPO / "docs").glob("*.md"))


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_docs_commands_and_links_exist(doc):
    problems = command_problems(doc.read_text(), doc.parent)
    assert not problems, f"docs/{doc.name}:\n" + "\n".join(problems)


def test_docs_check_catches_a_removed_module_and_a_broken_link():
    text = (REPO / "docs" / "kernel_notes.md").read_text()
    assert "python -m bench kernel-validate" in text and "(../shared_spec/SPEC.md)" in text
    broken = (text.replace("python -m bench kernel-validate", "python3 -m bench.gpu_bitwise", 1)
              .replace("python -m bench kernel-speed", "python -m bench kernel-sped", 1)
              .replace("(../shared_spec/SPEC.md)", "(shared_spec/SPEC.md)", 1))
    assert command_problems(broken, REPO / "docs") == [
        "no module bench.gpu_bitwise", "no benchmark job 'kernel-sped'", "link to a missing file shared_spec/SPEC.md"]
    assert command_problems("python -m agent_<framework>.train --overrides ...") == []  # a pattern, not a module
