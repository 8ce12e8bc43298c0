r"""Module-level block factorisation ``Gamma = U D U^T`` of a tree-type system, and the recursive
forward and inverse dynamics it gives (the seed paper 003 on the decomposition of the generalized
inertia matrix into kinematic modules; its abstract and notation: ``Ū`` block upper triangular,
``D̄`` block diagonal, one block per module).

A *module* is a maximal serial chain of joints: a new module starts at a joint whose parent joint
is the root or has several child joints (the branching points), and otherwise a joint continues its
parent's module. With the modules ordered parents first, block ``(i, j)`` of Gamma is non-zero only
when module i is an ancestor of module j or the other way round (the branch-induced sparsity,
Featherstone 2008 sec. 6.5), and the block ``L^T D L`` factorisation, eliminating modules leaves
first,

    for k = last module .. first:
        for every ancestor module i of k (nearest first):
            L_ki = D_k^{-1} Gamma_ki          (D_k = Gamma_kk as updated so far)
            for every ancestor-or-self j of i:  Gamma_ij -= L_ki^T Gamma_kj

fills in nothing outside that pattern (Featherstone's LTDL, Table 6.3, with blocks for scalars).
Then ``U = L^T`` (block upper triangular, ``U_ik = L_ki^T`` for i an ancestor of k) and ``D`` is
block diagonal, the paper's Ū and D̄: each ``D_k`` is module k's articulated-module inertia
projected on its joints (the Schur complement that remains once its descendants are eliminated).

Solving ``Gamma x = b`` is then two sweeps over the module tree and one block-diagonal solve
(`ModuleFactor.solve`), and ``Gamma x`` the same sweeps run the other way (`ModuleFactor.multiply`),
each O(sum of module sizes times depth) blocks. Loops run over modules in Python: their number is a
fixed property of the tree's branching, not of its size.
"""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxmb.algorithms.terms import gamma_and_rest
from jaxmb.algorithms.tree_dynamics import augmented_state
from jaxmb.multibody.checks import check_all_finite, check_coordinates
from jaxmb.multibody.model import Model
from jaxmb.multibody.tree import tree_of

__all__ = ["modules", "ModuleFactor", "udut", "udut_forward_dynamics", "udut_inverse_dynamics"]


def modules(model: Model) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """The model's modules as tuples of coordinate indices (parents first, each a serial chain),
    and each module's parent module (-1 for the root's)."""
    tree = tree_of(model)
    if model.coordinate_map is not None:
        raise ValueError(
            "udut: the module factorisation is for tree-type systems; a model with a coordinate "
            "map has Gamma = E^T Gamma_hat E, which the map couples across modules"
        )
    if tree.coordinate_frames is None:
        raise ValueError("udut: every coordinate must drive exactly one joint of the tree")
    # the coordinate tree: each coordinate's nearest ancestor joint that has a coordinate
    coord_of_frame = dict(enumerate(model.coordinate_index))
    order = [c for c in model.coordinate_index if c >= 0]  # coordinates, parents first
    parent_coord = {}
    for k, c in enumerate(model.coordinate_index):
        if c < 0:
            continue
        j = model.parent_index[k]
        while j >= 0 and coord_of_frame[j] < 0:
            j = model.parent_index[j]
        parent_coord[c] = -1 if j < 0 else coord_of_frame[j]
    children: dict[int, int] = {}
    for c in order:
        children[parent_coord[c]] = children.get(parent_coord[c], 0) + 1
    module_of: dict[int, int] = {}
    mods: list[list[int]] = []
    parents: list[int] = []
    for c in order:
        p = parent_coord[c]
        if p >= 0 and children[p] == 1:
            module_of[c] = module_of[p]
            mods[module_of[c]].append(c)
        else:
            module_of[c] = len(mods)
            mods.append([c])
            parents.append(-1 if p < 0 else module_of[p])
    return tuple(tuple(m) for m in mods), tuple(parents)


class ModuleFactor(eqx.Module):
    r"""``Gamma = U D U^T = L^T D L`` at module level (module docstring).

    Attributes:
        modules: coordinate indices of each module (static).
        parents: each module's parent module, -1 for the root's (static).
        D: each module's diagonal block ``D_k`` (``n_k x n_k``, symmetric positive definite).
        L: ``{(k, i): L_ki}`` for every module k and ancestor module i (``n_k x n_i``).
    """

    modules: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    parents: tuple[int, ...] = eqx.field(static=True)
    D: tuple[Array, ...]  # n_k x n_k each
    L: dict

    def _ancestors(self, k: int) -> list[int]:
        out, i = [], self.parents[k]
        while i >= 0:
            out.append(i)
            i = self.parents[i]
        return out

    def _blocks(self, x: Array) -> list[Array]:
        return [x[np.asarray(m)] for m in self.modules]

    def _join(self, parts: list[Array]) -> Array:
        n = sum(len(m) for m in self.modules)
        out = jnp.zeros(n, parts[0].dtype)
        for m, part in zip(self.modules, parts, strict=True):
            out = out.at[np.asarray(m)].set(part)
        return out

    def solve(self, b: Float[ArrayLike, " n"]) -> Float[Array, " n"]:
        r"""$\Gamma^{-1} b$: $y = U^{-1} b$ leaves first, $z = D^{-1} y$, $x = U^{-\top} z$ root
        first (the recursive module-level inverse)."""
        y = self._blocks(jnp.asarray(b))
        for k in reversed(range(len(self.modules))):  # U y = b: descendants are done first
            for i in self._ancestors(k):
                y[i] = y[i] - self.L[k, i].T @ y[k]
        z = [jnp.linalg.solve(D, yk) for D, yk in zip(self.D, y, strict=True)]
        for k in range(len(self.modules)):  # U^T x = z: ancestors are done first
            for i in self._ancestors(k):
                z[k] = z[k] - self.L[k, i] @ z[i]
        return self._join(z)

    def multiply(self, x: Float[ArrayLike, " n"]) -> Float[Array, " n"]:
        r"""$\Gamma x = U D U^\top x$ by the same sweeps."""
        xs = self._blocks(jnp.asarray(x))
        w = [
            xs[k] + sum((self.L[k, i] @ xs[i] for i in self._ancestors(k)), 0.0)
            for k in range(len(self.modules))
        ]
        u = [D @ wk for D, wk in zip(self.D, w, strict=True)]
        y = list(u)
        for k in range(len(self.modules)):
            for i in self._ancestors(k):
                y[i] = y[i] + self.L[k, i].T @ u[k]
        return self._join(y)

    def matrices(self) -> tuple[Float[Array, "n n"], Float[Array, "n n"]]:
        """The dense ``(U, D)`` (for inspection and tests)."""
        n = sum(len(m) for m in self.modules)
        dtype = self.D[0].dtype
        U, D = jnp.eye(n, dtype=dtype), jnp.zeros((n, n), dtype)
        for k, m in enumerate(self.modules):
            D = D.at[np.ix_(m, m)].set(self.D[k])
            for i in self._ancestors(k):
                U = U.at[np.ix_(self.modules[i], m)].set(self.L[k, i].T)
        return U, D


def udut(model: Model, Gamma: Float[Array, "n n"]) -> ModuleFactor:
    """Factor a tree-type model's ``Gamma`` module by module (module docstring)."""
    mods, parents = modules(model)
    idx = [np.asarray(m) for m in mods]
    H = {}  # the blocks on the pattern: (i, j) with j an ancestor-or-self of i
    anc = []
    for k in range(len(mods)):
        a, i = [], parents[k]
        while i >= 0:
            a.append(i)
            i = parents[i]
        anc.append(a)
        for j in [k] + a:
            H[k, j] = Gamma[np.ix_(idx[k], idx[j])]
    L = {}
    for k in reversed(range(len(mods))):
        for i in anc[k]:
            A = jnp.linalg.solve(H[k, k], H[k, i])  # L_ki = D_k^{-1} Gamma_ki
            for j in [i] + anc[i]:
                H[i, j] = H[i, j] - A.T @ H[k, j]
            L[k, i] = A
    return ModuleFactor(mods, parents, tuple(H[k, k] for k in range(len(mods))), L)


def udut_forward_dynamics(
    model: Model,
    q: Float[Array, " n"],
    qd: Float[Array, " n"],
    tau: Float[Array, " n"],
    wrenches=None,
) -> Float[Array, " n"]:
    r"""$\ddot q = \Gamma^{-1}(Q_e + Q_a - h)$ with $\Gamma^{-1}$ by the module factorisation
    (inputs checked by the caller, `jaxmb.forward_dynamics(method="udut")`)."""
    Gamma, rest = gamma_and_rest(model, augmented_state(model, q, qd), wrenches)
    return udut(model, Gamma).solve(tau - rest)


def udut_inverse_dynamics(
    model: Model,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    wrenches=None,
) -> Float[Array, " n"]:
    r"""$Q_a = U D U^\top \ddot q + h - Q_e$ (eq. (13) through the factor)."""
    q, qd, qdd = check_all_finite(
        {
            "q": check_coordinates(model, q, finite=False),
            "qd": check_coordinates(model, qd, "qd", finite=False),
            "qdd": check_coordinates(model, qdd, "qdd", finite=False),
        }
    )
    Gamma, rest = gamma_and_rest(model, augmented_state(model, q, qd), wrenches)
    return udut(model, Gamma).multiply(qdd) + rest
