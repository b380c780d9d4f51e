"""Names and nested trees shared by the converter and the parity harness.

agent_jax uses agent_torch's module and parameter names and PyTorch's ``(out, in)`` weight layout, so the two
agents' states correspond by name alone: the torch state-dict name ``blocks.1.fc2.weight`` is the flax variable
path ``("blocks_1", "fc2", "weight")``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["flatten_tree", "jax_path_to_torch_name", "named_arrays", "torch_name_to_jax_path", "unflatten_tree"]


def torch_name_to_jax_path(name: str) -> tuple[str, ...]:
    """agent_torch state-dict name -> flax variable path: ``blocks.1.fc2.weight`` -> ("blocks_1", "fc2", "weight").

    A numeric component (an ``nn.ModuleList`` index) joins the name before it with ``_``, as linen names list
    members; every other component is kept.
    """
    path: list[str] = []
    for part in name.split("."):
        if part.isdigit() and path:
            path[-1] = f"{path[-1]}_{part}"
        else:
            path.append(part)
    return tuple(path)


def jax_path_to_torch_name(path: tuple[str, ...]) -> str:
    """Inverse of ``torch_name_to_jax_path``: ("blocks_1", "fc2", "weight") -> ``blocks.1.fc2.weight``."""
    parts: list[str] = []
    for part in path:
        head, sep, tail = part.rpartition("_")
        parts.extend([head, tail] if sep and head and tail.isdigit() else [part])
    return ".".join(parts)


def flatten_tree(tree: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Nested mapping (flax state-dict form) -> {path: leaf}; a non-mapping is one leaf at ``prefix``."""
    if isinstance(tree, Mapping):
        out: dict[tuple[str, ...], Any] = {}
        for key, value in tree.items():
            out.update(flatten_tree(value, (*prefix, str(key))))
        return out
    return {prefix: tree}


def unflatten_tree(flat: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    """Inverse of ``flatten_tree``: {path: leaf} -> nested dicts."""
    out: dict[str, Any] = {}
    for path, leaf in flat.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = leaf
    return out


def named_arrays(tree: Any) -> dict[str, np.ndarray]:
    """A flax collection (params, batch_stats, Adam moments; on any device) -> {torch name: numpy array}."""
    import flax.serialization
    import jax

    flat = flatten_tree(flax.serialization.to_state_dict(jax.device_get(tree)))
    return {jax_path_to_torch_name(path): np.asarray(leaf) for path, leaf in flat.items()}
