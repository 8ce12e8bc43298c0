r"""The kinematic tree as index tables, and the two sweeps every recursion over it is made of:

- `scan_down`: parents before children, each frame computed from its parent's value
  (poses, twists, accelerations: the forward passes of Featherstone's algorithms);
- `sweep_up` (and `subtree_sums` on it): children before parents, each frame passing a value
  to its parent (composite inertias, transmitted wrenches, articulated inertias: the backward
  passes).

Each sweep runs one of two ways, chosen from the tree's shape:

- a serial chain, or a tree deeper than ``LEVEL_SWEEP_MAX_DEPTH``: one `jax.lax.scan` over
  the frames (depth first), a program of the same size whatever the number of bodies;
- a shallower tree: depth by depth, every frame of one depth in one vectorised step (its
  parents' values gathered from the depth before, or its children's summed into it), a
  program that grows with the depth alone. Vmapped over states it runs in 0.7-0.9 of the
  depth-first scan's time on random trees of 30 and 100 bodies (depths 8 and 12;
  ``scripts/bench_scaling.py``), whose every step moves one frame's value through a stack of
  rows.

Python loops over the frames (`jaxmb.algorithms.recursive`) instead unroll into a program that grows with
n and compiles in time that grows faster than n (3 s at n = 10, 57 s at n = 60, 216 s at
n = 100, measured on the unrolled mass matrix, bias forces and forward dynamics together).
Under `jax.vmap` over states each step works on the whole batch at once, so a step's fixed
cost is shared by the batch.
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from jaxmb.multibody.model import Model

__all__ = ["Tree", "tree_of", "scan_down", "subtree_sums"]


class Tree(NamedTuple):
    """Static index tables of a model's kinematic tree (numpy; hashable through the model's
    static structure, built once per structure by `tree_of`).

    Attributes:
        parent: ``(nf,)`` parent frame, ``nf`` (the root's slot) for the root's children.
        serial: every frame's parent is the frame before it (the sweeps then carry one value).
        depth: frames on the longest path from the root, the frame included.
        coordinate_frames: ``(nhat,)`` the frame each augmented coordinate drives, when every
            coordinate drives exactly one frame, else None.
        ancestor: ``(nhat, nhat)`` True where coordinate i's frame is coordinate j's frame or one
            of its ancestors (the sparsity of the tree's Gamma_hat, Featherstone 2008 sec. 6.5).
        frame_ancestor: ``(nf, nf)`` the same relation among frames.
        selection: ``(nf, nhat)`` one where frame k is driven by coordinate i.
        preorder: the frames depth first (each frame's subtree right after it).
        from_preorder: its inverse permutation.
        preorder_depth: the depth of each frame in that order (1 for the root's children).
        levels: ``[start, end)`` of the frames at depth 1, 2, ... when each depth's frames are
            contiguous in the frame order (`jaxmb.multibody.model.Model` orders them depth by depth), else
            None.
        level_parent: for each depth, its frames' parents as indices into the depth before
            (zeros at depth 1: the root, as a depth of its own).
    """

    parent: np.ndarray
    serial: bool
    depth: int
    coordinate_frames: np.ndarray | None
    ancestor: np.ndarray
    frame_ancestor: np.ndarray
    selection: np.ndarray
    preorder: np.ndarray
    from_preorder: np.ndarray
    preorder_depth: np.ndarray
    levels: tuple[tuple[int, int], ...] | None
    level_parent: tuple[np.ndarray, ...] | None


@functools.lru_cache(maxsize=256)
def _tree(parent_index: tuple[int, ...], coordinate_index: tuple[int, ...], nhat: int) -> Tree:
    nf = len(parent_index)
    parent = np.array([nf if p < 0 else p for p in parent_index], dtype=np.int32)
    depth_of = np.zeros(nf, dtype=int)
    for k, p in enumerate(parent_index):  # parents come first (Model sorts its frames)
        depth_of[k] = 1 if p < 0 else depth_of[p] + 1
    depth = int(depth_of.max(initial=0))
    serial = all(p == k - 1 for k, p in enumerate(parent_index))
    frames_of = [[k for k, c in enumerate(coordinate_index) if c == i] for i in range(nhat)]
    coordinate_frames = (
        np.array([f[0] for f in frames_of], dtype=np.int32)
        if all(len(f) == 1 for f in frames_of)
        else None
    )
    # ancestor-or-self relation among frames, then among the coordinates' frames
    anc = np.eye(nf, dtype=bool)
    for k, p in enumerate(parent_index):
        if p >= 0:
            anc[:, k] |= anc[:, p]
    if coordinate_frames is not None:
        ancestor = anc[np.ix_(coordinate_frames, coordinate_frames)]
    else:
        ancestor = np.zeros((nhat, nhat), dtype=bool)
        for i, fi in enumerate(frames_of):
            for j, fj in enumerate(frames_of):
                ancestor[i, j] = any(anc[a, b] for a in fi for b in fj)
    selection = np.zeros((nf, nhat))
    for k, c in enumerate(coordinate_index):
        if c >= 0:
            selection[k, c] = 1.0
    children: list[list[int]] = [[] for _ in range(nf + 1)]
    for k, p in enumerate(parent):
        children[p].append(k)
    preorder, todo = [], list(reversed(children[nf]))
    while todo:
        k = todo.pop()
        preorder.append(k)
        todo.extend(reversed(children[k]))
    preorder = np.array(preorder, dtype=np.int32)
    return Tree(
        parent,
        serial,
        depth,
        coordinate_frames,
        ancestor,
        anc,
        selection,
        preorder,
        np.argsort(preorder).astype(np.int32),
        depth_of[preorder].astype(np.int32),
        *_levels_of(depth_of, parent),
    )


def _levels_of(depth_of: np.ndarray, parent: np.ndarray):
    """`Tree.levels` and `Tree.level_parent` (None, None unless each depth is contiguous)."""
    if len(depth_of) == 0 or np.any(np.diff(depth_of) < 0):
        return None, None
    starts = np.searchsorted(depth_of, np.arange(1, depth_of.max() + 2))
    levels = tuple((int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True))
    level_parent = tuple(
        (parent[a:b] - levels[d - 1][0] if d else np.zeros(b - a)).astype(np.int32)
        for d, (a, b) in enumerate(levels)
    )
    return levels, level_parent


def tree_of(model: Model) -> Tree:
    """The index tables of ``model``'s tree (cached per tree structure)."""
    return _tree(model.parent_index, model.coordinate_index, model.n_augmented)


SCAN_UNROLL = 1  # steps per loop iteration of the sweeps (jax.lax.scan's unroll)
# The deepest tree swept depth by depth; a deeper one is scanned depth first. The program grows
# with the depth: forward dynamics by ABA compiled in 2.9 s at depth 5, 4.0 s at 8 and 5.6 s at
# 12 (random trees of 20, 30 and 100 bodies), about 0.3 s a depth, where the depth-first scan
# compiles in 1.4 s at any depth; 12 keeps it within 6 s.
LEVEL_SWEEP_MAX_DEPTH = 12


def by_levels(tree: Tree) -> bool:
    """Whether the sweeps run depth by depth (module docstring)."""
    return not tree.serial and tree.levels is not None and tree.depth <= LEVEL_SWEEP_MAX_DEPTH


def _levels(depth: int, like: Array, level) -> Array:
    """``arange(depth)[:, None, ...] == level``, shaped to broadcast against ``like``."""
    idx = jnp.arange(depth).reshape((depth,) + (1,) * (like.ndim - 1))
    return idx == level


def _preordered(tree: Tree, xs):
    return jax.tree.map(lambda x: x[tree.preorder], xs)


def _original_order(tree: Tree, ys):
    return jax.tree.map(lambda y: y[tree.from_preorder], ys)


def scan_down(tree: Tree, step: Callable, root, xs):
    """Run ``step(parent_value, x_k) -> (value_k, y_k)`` over the frames, parents first;
    ``root`` is the value the root's children see. Returns the stacked ``y``.

    A serial chain is one `jax.lax.scan` carrying the previous frame's value. A shallow tree
    goes depth by depth (`by_levels`). A deeper tree is one scan, depth first, carrying a stack
    of the values on the current path from the root, one row per depth: a frame at depth d
    reads row d - 1 and writes row d. The write is a select over the rows (O(depth) per step,
    fused), not an indexed update: under `jax.vmap` an indexed update lowers to a scatter that
    XLA copies whole at every step (a table of every frame's value cost O(n) per step, 3-5x
    a chain's sweep at 30 bodies)."""
    if tree.serial:
        return jax.lax.scan(step, root, xs, unroll=SCAN_UNROLL)[1]
    if by_levels(tree):
        return _down_by_levels(tree, step, root, xs)
    rows = tree.depth + 1  # row 0 is the root's value
    stack = _broadcast(root, rows)

    def body(stack, x):
        level, x = x
        parent = jax.tree.map(lambda t: jax.lax.dynamic_index_in_dim(t, level - 1, 0, False), stack)
        value, y = step(parent, x)
        put = lambda t, v: jnp.where(_levels(rows, t, level), v[None], t)  # noqa: E731
        return jax.tree.map(put, stack, value), y

    xs = (jnp.asarray(tree.preorder_depth), _preordered(tree, xs))
    return _original_order(tree, jax.lax.scan(body, stack, xs, unroll=SCAN_UNROLL)[1])


def sweep_up(tree: Tree, step: Callable, init, xs):
    """Children before parents: ``step(own_k + sum of what k's children passed up, x_k) ->
    (to_parent_k, y_k)``. Returns the stacked ``y``.

    A serial chain is one reverse `jax.lax.scan`. A shallow tree goes depth by depth from the
    deepest (`by_levels`). A deeper tree is one reverse scan in depth-first order with one
    accumulator row per depth: a frame at depth d takes row d + 1 (what its children passed
    up: every frame at depth d + 1 seen since the row was last taken is its child), clears it,
    and adds what it passes up to row d."""
    if tree.serial:

        def chain(from_child, x):
            own, x = x
            return step(jax.tree.map(jnp.add, own, from_child), x)

        zero = jax.tree.map(lambda a: jnp.zeros(a.shape[1:], a.dtype), init)
        return jax.lax.scan(chain, zero, (init, xs), reverse=True, unroll=SCAN_UNROLL)[1]
    if by_levels(tree):
        return _up_by_levels(tree, step, init, xs)
    rows = tree.depth + 2  # row d + 1 collects depth d's children; row 0 the root's
    acc = jax.tree.map(lambda a: jnp.zeros((rows,) + a.shape[1:], a.dtype), init)

    def body(acc, x):
        level, own, x = x
        below = jax.tree.map(lambda t: jax.lax.dynamic_index_in_dim(t, level + 1, 0, False), acc)
        up, y = step(jax.tree.map(jnp.add, own, below), x)

        def pass_up(t, u):
            t = jnp.where(_levels(rows, t, level + 1), 0.0, t)
            return t + jnp.where(_levels(rows, t, level), u[None], 0.0)

        return jax.tree.map(pass_up, acc, up), y

    xs = (jnp.asarray(tree.preorder_depth), _preordered(tree, init), _preordered(tree, xs))
    ys = jax.lax.scan(body, acc, xs, reverse=True, unroll=SCAN_UNROLL)[1]
    return _original_order(tree, ys)


def _level(xs, level: tuple[int, int]):
    a, b = level
    return jax.tree.map(lambda x: x[a:b], xs)


def _broadcast(root, width: int):
    return jax.tree.map(lambda r: jnp.broadcast_to(r, (width,) + jnp.shape(r)), root)


def _gather(values, idx: np.ndarray):
    return jax.tree.map(lambda v: v[idx], values)


def _sum_into(up, idx: np.ndarray, width: int):
    """``out[i] = sum of up[j] with idx[j] = i`` over ``width`` slots (a scatter-add)."""
    return jax.tree.map(lambda u: jnp.zeros((width,) + u.shape[1:], u.dtype).at[idx].add(u), up)


def _stacked(ys):
    """The per-depth outputs as one ``(nf, ...)`` stack in frame order (depth by depth)."""
    return jax.tree.map(lambda *y: jnp.concatenate(y), *ys)


def _down_by_levels(tree: Tree, step: Callable, root, xs):
    """`scan_down` depth by depth: each depth's parents gathered from the depth before."""
    ys, values = [], _broadcast(root, 1)  # the root as a depth of one frame
    for level, parents in zip(tree.levels, tree.level_parent, strict=True):
        values, y = jax.vmap(step)(_gather(values, parents), _level(xs, level))
        ys.append(y)
    return _stacked(ys)


def _up_by_levels(tree: Tree, step: Callable, init, xs):
    """`sweep_up` depth by depth from the deepest: what a depth passes up is summed onto its
    parents' slots of the depth before (a scatter-add: each parent receives only its own
    children's values, so a failed branch does not reach its siblings' parents)."""
    ys, below = [None] * len(tree.levels), None
    for d in reversed(range(len(tree.levels))):
        level = tree.levels[d]
        acc = _level(init, level)
        if below is not None:
            acc = jax.tree.map(jnp.add, acc, below)
        up, ys[d] = jax.vmap(step)(acc, _level(xs, level))
        if d:
            a, b = tree.levels[d - 1]
            below = _sum_into(up, tree.level_parent[d], b - a)
    return _stacked(ys)


def subtree_sums(tree: Tree, x):
    """``y_k = sum_{d in subtree(k)} x_d`` for a pytree of ``(nf, ...)`` arrays (`sweep_up`
    passing each frame's total on unchanged)."""
    return sweep_up(tree, lambda total, _: (total, total), x, None)
