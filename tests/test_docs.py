"""docs/flashsac.md's config-key table lists exactly the keys of the config schema, with their defaults."""

from __future__ import annotations

import dataclasses
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
