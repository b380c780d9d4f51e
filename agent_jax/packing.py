"""A pytree of arrays held as a few flat buffers, so that a jitted call takes a handful of arguments, not hundreds.

Dispatching a jitted function costs host time per argument leaf (flattening, donation bookkeeping, one new output
array per leaf). The agent's state has 175 leaves at the recipe's sizes, which made the per-env-step call
(``agent_jax.step.env_step``) cost more host time than the device work it dispatches. ``pack`` concatenates the leaves
of each dtype into one flat buffer; ``unpack`` slices them back out. Both are plain jnp code, so the step program
unpacks its argument and packs its result inside the one compiled program, where XLA fuses the slices into their
consumers. The values are never changed: ``unpack(pack(tree))`` is ``tree`` bitwise.

Leaves that a mode keeps apart stay arrays of their own: ``"matrices"`` keeps the weight matrices of the networks
(their ``params`` and ``target_params`` leaves of two or more dimensions), which matmuls read as they are and would
otherwise read through a copy of the slice; ``"all"`` packs every leaf.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["MODES", "Layout", "PackedTree", "Parts", "from_parts", "host_unpack", "pack", "pack_like", "packed",
           "parts", "unpack", "unpacked"]

MODES: tuple[str, ...] = ("all", "matrices")


class _Entry(NamedTuple):
    group: int  # index into the flat buffers, or -1 for a leaf kept apart
    offset: int  # element offset in its buffer, or the index among the kept-apart leaves
    shape: tuple[int, ...]
    dtype: str


class Layout(NamedTuple):
    """Where each leaf of a tree lives in a ``PackedTree`` (hashable: it is the pytree's static part)."""

    treedef: Any
    entries: tuple[_Entry, ...]
    group_dtypes: tuple[str, ...]
    group_sizes: tuple[int, ...]
    mode: str


@jax.tree_util.register_pytree_node_class
class PackedTree:
    """A tree's leaves as one flat buffer per dtype (``buffers``) plus the leaves kept apart (``separate``).

    Attributes:
        buffers: one 1-D array per dtype group, in ``layout.group_dtypes`` order.
        separate: the leaves the mode keeps apart, in tree order.
        layout: the static description that ``unpack`` rebuilds the tree from.
    """

    def __init__(self, buffers: tuple[Any, ...], separate: tuple[Any, ...], layout: Layout) -> None:
        self.buffers = tuple(buffers)
        self.separate = tuple(separate)
        self.layout = layout

    def tree_flatten(self) -> tuple[tuple[tuple[Any, ...], tuple[Any, ...]], Layout]:
        return (self.buffers, self.separate), self.layout

    @classmethod
    def tree_unflatten(cls, layout: Layout, children: tuple[tuple[Any, ...], tuple[Any, ...]]) -> PackedTree:
        return cls(children[0], children[1], layout)


def _kept_apart(path: tuple[Any, ...], leaf: Any, mode: str) -> bool:
    if mode == "all":
        return False
    names = [str(getattr(k, "name", getattr(k, "key", k))) for k in path]
    return np.ndim(leaf) >= 2 and ("params" in names or "target_params" in names) and "opt_state" not in names


def _layout(tree: Any, mode: str) -> Layout:
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    with_path, treedef = jax.tree_util.tree_flatten_with_path(tree)
    dtypes: list[str] = []
    sizes: list[int] = []
    entries: list[_Entry] = []
    num_apart = 0
    for path, leaf in with_path:
        shape, dtype = tuple(int(d) for d in np.shape(leaf)), str(jnp.result_type(leaf))
        if _kept_apart(path, leaf, mode):
            entries.append(_Entry(-1, num_apart, shape, dtype))
            num_apart += 1
            continue
        if dtype not in dtypes:
            dtypes.append(dtype)
            sizes.append(0)
        group = dtypes.index(dtype)
        entries.append(_Entry(group, sizes[group], shape, dtype))
        sizes[group] += int(np.prod(shape, dtype=np.int64))
    return Layout(treedef, tuple(entries), tuple(dtypes), tuple(sizes), mode)


def pack_like(tree: Any, layout: Layout) -> PackedTree:
    """``tree`` packed with an existing ``layout`` (inside a jitted program: the result has the argument's layout).

    Raises:
        ValueError: ``tree``'s structure or a leaf's shape or dtype differs from the layout's.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if treedef != layout.treedef:
        raise ValueError(f"tree: structure differs from the layout's: got {treedef}, expected {layout.treedef}")
    parts: list[list[Any]] = [[] for _ in layout.group_dtypes]
    separate: list[Any] = []
    for leaf, entry in zip(leaves, layout.entries, strict=True):
        if tuple(np.shape(leaf)) != entry.shape or str(jnp.result_type(leaf)) != entry.dtype:
            raise ValueError(f"tree: a leaf is {np.shape(leaf)} {jnp.result_type(leaf)}, the layout expects "
                             f"{entry.shape} {entry.dtype}")
        if entry.group < 0:
            separate.append(leaf)
        else:
            parts[entry.group].append(jnp.ravel(leaf))
    buffers = tuple(jnp.concatenate(p) if len(p) > 1 else p[0] for p in parts)
    return PackedTree(buffers, tuple(separate), layout)


def pack(tree: Any, mode: str = "matrices") -> PackedTree:
    """``tree`` as a ``PackedTree`` (see the module doc for ``mode``)."""
    return pack_like(tree, _layout(tree, mode))


def _unflatten(layout: Layout, buffers: Any, separate: Any, take: Any) -> Any:
    """The tree of ``layout`` with each packed leaf ``take(buffer, start, stop).reshape(shape)``."""
    leaves = []
    for entry in layout.entries:
        if entry.group < 0:
            leaves.append(separate[entry.offset])
            continue
        size = int(np.prod(entry.shape, dtype=np.int64))
        leaves.append(take(buffers[entry.group], entry.offset, entry.offset + size).reshape(entry.shape))
    return jax.tree_util.tree_unflatten(layout.treedef, leaves)


def unpack(packed_tree: PackedTree) -> Any:
    """The tree a ``PackedTree`` holds (slices and reshapes of its buffers; bitwise the packed values)."""
    return _unflatten(packed_tree.layout, packed_tree.buffers, packed_tree.separate, jax.lax.slice_in_dim)


def host_unpack(packed_tree: PackedTree) -> Any:
    """The tree a ``PackedTree`` holds, as numpy arrays: one device-to-host copy of the buffers, sliced on the host.

    Bitwise ``jax.device_get(unpacked(packed_tree))``, without compiling or running a device program (a checkpoint
    of a packed state costs no compilation).
    """
    buffers, separate = jax.device_get((packed_tree.buffers, packed_tree.separate))
    return _unflatten(packed_tree.layout, [np.asarray(b) for b in buffers], [np.asarray(x) for x in separate],
                      lambda buf, start, stop: buf[start:stop])


class Parts(NamedTuple):
    """How to rebuild a subtree from a few arrays (``parts``; hashable: a jitted function takes it as static).

    Attributes:
        treedef: the subtree's structure.
        sources: per leaf, (index of the array it is in, start, stop, shape); start -1: the whole array.
    """

    treedef: Any
    sources: tuple[tuple[int, int, int, tuple[int, ...]], ...]


def parts(tree: Any, select: Any) -> tuple[tuple[Any, ...], Parts]:
    """The arrays that hold ``select(tree)`` and the recipe that rebuilds it from them (``from_parts``).

    For a ``PackedTree``: the flat buffers and the kept-apart leaves that the subtree's leaves live in (a call then
    passes a few arrays instead of every leaf; the buffers' unused parts are not read). For any other tree: the
    subtree's own leaves.

    Args:
        tree: a ``PackedTree``, or the tree itself.
        select: tree -> subtree (e.g. ``lambda s: (s.actor.params, s.actor.batch_stats)``); attribute and item
            access only (it also runs on a tree of leaf indices).
    """
    if not isinstance(tree, PackedTree):
        leaves, treedef = jax.tree_util.tree_flatten(select(tree))
        return tuple(leaves), Parts(treedef, tuple((i, -1, -1, ()) for i in range(len(leaves))))
    layout = tree.layout
    indices, treedef = jax.tree_util.tree_flatten(
        select(jax.tree_util.tree_unflatten(layout.treedef, list(range(len(layout.entries))))))
    arrays: list[Any] = []
    where: dict[tuple[int, int], int] = {}  # (group, or -1 with the kept-apart index) -> position in ``arrays``
    sources = []
    for index in indices:
        entry = layout.entries[index]
        source = (entry.group, entry.offset if entry.group < 0 else 0)
        if source not in where:
            where[source] = len(arrays)
            arrays.append(tree.separate[entry.offset] if entry.group < 0 else tree.buffers[entry.group])
        if entry.group < 0:
            sources.append((where[source], -1, -1, entry.shape))
        else:
            size = int(np.prod(entry.shape, dtype=np.int64))
            sources.append((where[source], entry.offset, entry.offset + size, entry.shape))
    return tuple(arrays), Parts(treedef, tuple(sources))


def from_parts(arrays: Any, recipe: Parts, take: Any = jax.lax.slice_in_dim) -> Any:
    """The subtree ``parts`` described: each leaf a whole array, or ``take(array, start, stop)`` reshaped (jnp slices
    by default, which XLA fuses into their consumers; numpy slicing on the host with ``lambda a, i, j: a[i:j]``)."""
    leaves = [arrays[i] if start < 0 else take(arrays[i], start, stop).reshape(shape)
              for i, start, stop, shape in recipe.sources]
    return jax.tree_util.tree_unflatten(recipe.treedef, leaves)


@functools.partial(jax.jit, static_argnames=("mode",))
def packed(tree: Any, mode: str) -> PackedTree:
    """Jitted ``pack``: new buffers on the tree's devices (the tree itself is left as it is)."""
    return pack(tree, mode)


unpacked = jax.jit(unpack)
"""Jitted ``unpack``: new arrays (the packed buffers are left as they are)."""
