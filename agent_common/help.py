"""``--help`` for the training command, built from the declarations: every config key of ``agent_common.keys`` with
its type, default and meaning, grouped by the sections the keys open; the simulators (``simulators.SIMULATORS``);
the named recipes (``agent_common.recipes``)."""

from __future__ import annotations

from agent_common.keys import KNOWN_KEYS, field_default, field_help, field_type
from agent_common.recipes import recipes_help
from simulators import SIMULATORS

__all__ = ["config_help", "field_docs", "simulators_help", "training_help"]


def field_docs() -> dict[str, tuple[str, str]]:
    """Every key's (section, one-line meaning): a key's section is the last one opened before it in its group
    (top-level, ``env``, ``agent``), empty before the group's first."""
    docs: dict[str, tuple[str, str]] = {}
    group, section = None, ""
    for name in KNOWN_KEYS:
        this_group = name.split(".")[0] if "." in name else ""
        if this_group != group:
            group, section = this_group, ""
        opens, meaning = field_help(name)
        section = opens or section
        docs[name] = (section, meaning)
    return docs


def _default_text(name: str) -> str:
    value = field_default(name)
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def config_help() -> str:
    """Every config key with its type, default and meaning, grouped (top-level, ``env.*``, ``agent.*``, then the
    sections the keys open)."""
    out = ["config keys (--overrides KEY=VALUE; type = default, meaning):"]
    heading = None
    for name, (section, meaning) in field_docs().items():
        group = name.split(".")[0] if "." in name else "top-level"
        title = f"{group}: {section}" if section else group
        if title != heading:
            out += ["", title]
            heading = title
        base, nullable = field_type(name)
        kind = f"{base}{'|null' if nullable else ''} = {_default_text(name)}"
        out.append(f"  {name:<40} {kind:<22} {meaning}".rstrip())
    return "\n".join(out)


def simulators_help() -> str:
    """The simulators (``env.env_type``) with what each is and its pip extra."""
    width = max(map(len, SIMULATORS))
    lines = ["simulators (env.env_type; env.env_name: one of its tasks):"]
    for name, sim in SIMULATORS.items():
        extra = f" (extra: {sim.EXTRA})" if sim.EXTRA else ""
        lines.append(f"  {name:<{width}}  {sim.SUMMARY.replace('`', '')}{extra}")
    return "\n".join(lines)


def training_help() -> str:
    """The epilog of the training command's ``--help``: simulators, recipes, then every key."""
    return "\n\n".join([simulators_help(), recipes_help(), config_help()])
