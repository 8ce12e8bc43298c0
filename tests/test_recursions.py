"""The fast paths of issue 11 against their definitions and against each other: the scan sweeps
(jaxmb.algorithms.tree_dynamics) against the unrolled recursions (jaxmb.algorithms.recursive) and the Jacobian /
Lagrangian definitions; ABA against the Cholesky solve, on trees and through closed-chain maps;
the one-pass terms against the separate public functions; the module factorisation U D U^T;
and program size that does not grow with n. Pinocchio at 100 bodies is in test_pinocchio.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import bias_lagrangian

import jaxmb
from jaxmb.algorithms import terms
from jaxmb.algorithms.udut import modules, udut, udut_inverse_dynamics
from jaxmb.models import random_tree_urdf
from jaxmb.multibody import tree as tree_module

TREES = {
    "serial9": dict(n=9, seed=1),
    "serial14-prismatic-fixed": dict(n=14, seed=2),
    "branching11": dict(n=11, seed=3, branching=True),
    "branching14-prismatic": dict(n=14, seed=4, branching=True, prismatic_every=2),
}
MODELS = {name: jaxmb.load_urdf(random_tree_urdf(**kw)) for name, kw in TREES.items()}


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.abs(a - b).max() / max(1.0, np.abs(b).max())


def state(model, seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.normal(size=model.n)) for _ in range(3)]


def wrench_on_last(model):
    return {model.frames[-1].name: jnp.array([0.3, -0.2, 0.5, 4.0, -2.0, 1.0])}


@pytest.fixture(params=list(MODELS), scope="module")
def tree(request):
    return MODELS[request.param]


def test_scan_and_unrolled_recursions_agree(tree):
    q, qd, qdd = state(tree)
    W = wrench_on_last(tree)
    for fn in (
        lambda c: terms.unchecked_crba(tree, q, choice=c),
        lambda c: terms.unchecked_rnea(tree, q, qd, qdd, wrenches=W, choice=c),
        lambda c: terms.unchecked_rnea(tree, q, qd, qdd, gravity=False, choice=c),
        lambda c: terms.unchecked_forward(tree, q, qd, qdd, W, choice=c, solve="cholesky"),
    ):
        assert rel(jax.jit(fn, static_argnums=0)("scan"), fn("unrolled")) < 1e-12
    # and the scan path against the definitions (eqs. (9)-(13))
    assert (
        rel(
            terms.unchecked_crba(tree, q, choice="scan"),
            jaxmb.mass_matrix(tree, q, method="jacobian"),
        )
        < 1e-12
    )
    h_scan = terms.unchecked_rnea(tree, q, qd, 0 * qd, gravity=False, choice="scan")
    assert rel(h_scan, bias_lagrangian(tree, q, qd)) < 1e-10


def test_scan_regressor_inertias_match_model_inertias(tree):
    """The spatial-inertia override the regressor differentiates gives the model's own result."""
    q, qd, qdd = state(tree, 1)
    M = jaxmb.spatial_inertias(tree)
    ours = terms.unchecked_rnea(tree, q, qd, qdd, inertias=M, choice="scan")
    assert rel(ours, terms.unchecked_rnea(tree, q, qd, qdd, choice="unrolled")) < 1e-12
    Y = jax.jacfwd(
        lambda pi: terms.unchecked_rnea(
            tree, q, qd, qdd, inertias=jaxmb.spatial_inertias_from_parameters(pi), choice="scan"
        )
    )(jnp.zeros((len(tree.bodies), 10)))
    assert rel(Y.reshape(tree.n, -1), jaxmb.regressor(tree, q, qd, qdd)) < 1e-12


def test_aba_matches_cholesky_on_trees(tree):
    q, qd, tau = state(tree, 2)
    W = wrench_on_last(tree)
    aba = terms.unchecked_forward(tree, q, qd, tau, W, solve="aba")
    dense = jaxmb.forward_dynamics(tree, q, qd, tau, W, method="lagrangian")
    assert rel(aba, dense) < 1e-10
    # ABA and RNEA are inverses (Pinocchio's round trip)
    assert rel(jaxmb.inverse_dynamics(tree, q, qd, aba, W), tau) < 1e-10


@pytest.mark.parametrize("name", ["arm_full", "crane"])
def test_aba_through_a_closed_chain_map(name):
    """ABA on the augmented tree plus the constraint step equals Gamma^-1 with Gamma = E^T Gh E:
    the full arm maps 3 minimal to 5 augmented coordinates (two constraints)."""
    if name == "arm_full":
        model, q = jaxmb.models.series_parallel_3dof(full=True), jnp.array([0.1, 0.5, 0.13])
    else:
        model, q = jaxmb.models.lift_tilt_crane(), jnp.array([0.7, -0.1])
    rng = np.random.default_rng(3)
    qd, tau = (jnp.asarray(rng.normal(size=model.n)) for _ in range(2))
    W = {model.frames[-1].name: jnp.array([0.1, 0.2, -0.3, 40.0, 10.0, -20.0])}
    aba = jaxmb.forward_dynamics(model, q, qd, tau, W, method="aba")
    dense = jaxmb.forward_dynamics(model, q, qd, tau, W, method="lagrangian")
    assert rel(aba, dense) < 1e-10
    assert jnp.abs(aba).max() > 1e-3  # a non-trivial state


def test_one_pass_terms_equal_the_public_functions(tree):
    q, qd, qdd = state(tree, 4)
    name = tree.frames[-1].name
    W = wrench_on_last(tree)
    t = jaxmb.dynamics_terms(tree, q, qd, W)
    assert rel(t.Gamma, jaxmb.mass_matrix(tree, q, method="jacobian")) < 1e-12
    assert rel(t.h, bias_lagrangian(tree, q, qd)) < 1e-10
    assert rel(t.Q_g, jaxmb.gravity_forces(tree, q, method="jacobian")) < 1e-12
    assert rel(t.Q_w, jaxmb.wrench_forces(tree, q, name, W[name])) < 1e-12
    assert rel(t.inverse(qdd), jaxmb.inverse_dynamics(tree, q, qd, qdd, W)) < 1e-12
    assert rel(t.forward(qdd), jaxmb.forward_dynamics(tree, q, qd, qdd, W)) < 1e-10


def test_one_pass_terms_through_the_arm_map(arm_full):
    q, qd = jnp.array([0.2, 0.4, 0.1]), jnp.array([0.3, -0.5, 0.05])
    for choice in ("unrolled", "scan"):
        t = terms.unchecked_terms(arm_full, q, qd, choice=choice)
        assert rel(t.Gamma, jaxmb.mass_matrix(arm_full, q, method="jacobian")) < 1e-12
        assert rel(t.h, bias_lagrangian(arm_full, q, qd)) < 1e-10
        assert rel(t.Q_g, jaxmb.gravity_forces(arm_full, q)) < 1e-12


def test_choices_by_size_and_bad_choices():
    small, big = MODELS["serial9"], jaxmb.load_urdf(random_tree_urdf(30, 0))
    assert terms.recursion(small) == "unrolled" and terms.recursion(big) == "scan"
    assert terms.solver(small) == "cholesky" and terms.solver(big) == "aba"
    with pytest.raises(ValueError, match="recursion: expected one of"):
        terms.recursion(small, "loops")
    with pytest.raises(ValueError, match="solver: expected one of"):
        terms.solver(small, "lu")
    with pytest.raises(ValueError, match="method: expected one of"):
        jaxmb.forward_dynamics(small, *state(small), method="featherstone")


@pytest.fixture
def depth_first(monkeypatch):
    """Every branching tree swept by the depth-first scan instead of depth by depth."""
    monkeypatch.setattr(tree_module, "LEVEL_SWEEP_MAX_DEPTH", 0)


def _sweeps_by_loops(model: jaxmb.Model, x: np.ndarray):
    """What the two sweep tests compute, by plain loops over the parent table: a product down
    the path from the root (``value_k = value_parent @ x_k``) and, up the tree, each frame
    passing ``tanh`` of its own value plus its children's (both nonlinear, so an order mixed up
    or a child lost or counted twice changes the result)."""
    nf = len(model.frames)
    down = np.zeros_like(x)
    for k, p in enumerate(model.parent_index):
        down[k] = (np.eye(3) if p < 0 else down[p]) @ x[k]
    acc, up = x.copy(), np.zeros_like(x)
    for k in reversed(range(nf)):
        up[k] = np.tanh(acc[k])
        if model.parent_index[k] >= 0:
            acc[model.parent_index[k]] += up[k]
    return down, up


def _sweeps(model: jaxmb.Model, x):
    t = tree_module.tree_of(model)
    down = tree_module.scan_down(t, lambda P, xk: (P @ xk, P @ xk), jnp.eye(3), x)
    up = tree_module.sweep_up(t, lambda acc, _: (jnp.tanh(acc), jnp.tanh(acc)), x, None)
    return down, up


@pytest.mark.parametrize("sweep", ["by depth", "depth first"])
@pytest.mark.parametrize("n, seed", [(11, 3), (40, 31)])
def test_sweeps_match_loops_over_the_parent_table(n, seed, sweep, monkeypatch):
    if sweep == "depth first":
        monkeypatch.setattr(tree_module, "LEVEL_SWEEP_MAX_DEPTH", 0)
    model = jaxmb.load_urdf(random_tree_urdf(n, seed, branching=True))
    t = tree_module.tree_of(model)
    assert t.depth > 3 and tree_module.by_levels(t) == (sweep == "by depth")
    x = np.random.default_rng(n).normal(size=(len(model.frames), 3, 3)) / 2
    for ours, loops in zip(_sweeps(model, jnp.asarray(x)), _sweeps_by_loops(model, x), strict=True):
        assert rel(ours, loops) < 1e-13
    # and vmapped over states, as the dynamics run them
    xs = jnp.stack([x, 0.5 * x])
    down, up = jax.vmap(lambda x: _sweeps(model, x))(xs)
    assert rel(down[1], _sweeps_by_loops(model, 0.5 * x)[0]) < 1e-13
    assert rel(up[1], _sweeps_by_loops(model, 0.5 * x)[1]) < 1e-13


def test_levels_need_each_depth_contiguous():
    """The depth-by-depth tables: slices and parent indices for frames ordered depth by depth
    (as `jaxmb.Model` orders them); none for an order that interleaves depths."""
    # frames 0, 1 at depth 1 (under the root, slot 4); 2, 3 under frame 1; 4 under frame 0
    levels, parents = tree_module._levels_of(np.array([1, 1, 2, 2, 2]), np.array([5, 5, 1, 1, 0]))
    assert levels == ((0, 2), (2, 5))
    assert [p.tolist() for p in parents] == [[0, 0], [1, 1, 0]]
    assert tree_module._levels_of(np.array([1, 2, 1]), np.array([3, 0, 3])) == (None, None)


def test_depth_first_sweeps_give_the_same_dynamics(depth_first):
    """The dynamics on the depth-first scan (trees deeper than LEVEL_SWEEP_MAX_DEPTH) against
    the definitions, as test_scan_and_unrolled_recursions_agree checks them by depth."""
    tree = MODELS["branching14-prismatic"]
    assert not tree_module.by_levels(tree_module.tree_of(tree))
    q, qd, qdd = state(tree, 5)
    W = wrench_on_last(tree)
    assert rel(terms.unchecked_crba(tree, q, choice="scan"), jaxmb.mass_matrix(tree, q)) < 1e-12
    rnea = terms.unchecked_rnea(tree, q, qd, qdd, wrenches=W, choice="scan")
    assert rel(rnea, terms.unchecked_rnea(tree, q, qd, qdd, wrenches=W, choice="unrolled")) < 1e-12
    aba = terms.unchecked_forward(tree, q, qd, rnea, W, solve="aba")
    assert rel(aba, qdd) < 1e-10


def _program_size(n: int, branching: bool, seed: int = 7) -> int:
    model = jaxmb.load_urdf(random_tree_urdf(n, seed, branching=branching))
    q = jnp.zeros(model.n)
    jaxpr = jax.make_jaxpr(
        lambda q: terms.unchecked_forward(model, q, q, q, choice="scan", solve="aba")
    )(q)
    jaxpr2 = jax.make_jaxpr(lambda q: terms.unchecked_terms(model, q, q, choice="scan").Gamma)(q)
    return len(jaxpr.jaxpr.eqns) + len(jaxpr2.jaxpr.eqns)


@pytest.mark.parametrize("branching", [False, True])
def test_program_size_does_not_grow_with_n(branching, depth_first):
    """What makes compile time flat: the traced program of the scan path (ABA and the one-pass
    terms) has the same number of operations at 20 and at 100 bodies (the unrolled path's grows
    with n; compile times themselves are measured by scripts/bench_scaling.py)."""
    assert _program_size(100, branching) == _program_size(20, branching)


def test_program_by_depth_grows_with_depth_alone():
    """Swept depth by depth, the program grows with the tree's depth, not with n: the same at
    40 and at 100 bodies on trees of depth 12 (seeds picked for that depth), and bounded, since
    trees deeper than LEVEL_SWEEP_MAX_DEPTH are scanned."""
    depths = [
        tree_module.tree_of(jaxmb.load_urdf(random_tree_urdf(n, s, branching=True))).depth
        for n, s in ((40, 31), (100, 6))
    ]
    assert depths == [12, 12]
    assert _program_size(40, True, seed=31) == _program_size(100, True, seed=6)
    deep = tree_module.tree_of(jaxmb.load_urdf(random_tree_urdf(100, 2, branching=True)))
    assert deep.depth == 13 and not tree_module.by_levels(deep)


def test_gradient_through_scan_and_aba_matches_finite_differences():
    model = jaxmb.load_urdf(random_tree_urdf(26, 5, branching=True))
    q, qd, tau = state(model, 6)

    def loss(scale):
        return jnp.sum(jaxmb.forward_dynamics(model, q * scale, qd, tau) ** 2)

    g = jax.grad(loss)(1.0)
    eps = 1e-6
    fd = (loss(1.0 + eps) - loss(1.0 - eps)) / (2 * eps)
    assert abs(g - fd) < 1e-6 * max(1.0, abs(fd))


# --- module-level U D U^T -------------------------------------------------------------------


def test_module_decomposition_of_a_gripper():
    """A four-DoF gripper (a wrist joint, then two fingers of two joints each: the paper's
    example) splits into the wrist module and one module per finger."""
    from jaxmb import Body, Frame, Model

    def body(name):
        return Body(name, name, mass=1.0, com=[0.05, 0.0, 0.0], inertia=jnp.eye(3) * 0.01)

    frames = [
        Frame("wrist", joint="revolute", axis=[0, 0, 1], coordinate="w"),
        Frame(
            "a1",
            "wrist",
            translation=[0.1, 0.05, 0],
            joint="revolute",
            axis=[0, 1, 0],
            coordinate="a1",
        ),
        Frame(
            "a2", "a1", translation=[0.1, 0, 0], joint="revolute", axis=[0, 1, 0], coordinate="a2"
        ),
        Frame(
            "b1",
            "wrist",
            translation=[0.1, -0.05, 0],
            joint="revolute",
            axis=[0, 1, 0],
            coordinate="b1",
        ),
        Frame(
            "b2", "b1", translation=[0.1, 0, 0], joint="revolute", axis=[0, 1, 0], coordinate="b2"
        ),
    ]
    model = Model(frames, [body(f.name) for f in frames])
    mods, parents = modules(model)
    names = [tuple(model.coordinate_names[c] for c in m) for m in mods]
    assert names == [("w",), ("a1", "a2"), ("b1", "b2")] and parents == (-1, 0, 0)
    q = jnp.array([0.3, -0.4, 0.8, 0.2, -1.1])
    G = jaxmb.mass_matrix(model, q)
    U, D = udut(model, G).matrices()
    assert rel(U @ D @ U.T, G) < 1e-12
    # the two fingers do not couple through U: their off-diagonal block is zero
    a, b = list(mods[1]), list(mods[2])
    assert np.all(np.asarray(U)[np.ix_(a, b)] == 0) and np.all(np.asarray(U)[np.ix_(b, a)] == 0)
    assert np.abs(np.asarray(U)[np.ix_([0], a + b)]).max() > 1e-3  # the wrist couples to both


@pytest.mark.parametrize("name", ["branching11", "branching14-prismatic", "serial9"])
def test_udut_reconstructs_gamma_and_solves(name):
    model = MODELS[name]
    q, qd, qdd = state(model, 8)
    G = jaxmb.mass_matrix(model, q, method="jacobian")
    factor = udut(model, G)
    U, D = factor.matrices()
    mods, parents = modules(model)
    assert rel(U @ D @ U.T, G) < 1e-12
    # U is unit block upper triangular with the tree's pattern, D block diagonal and SPD
    block = np.zeros(model.n, dtype=int)
    for k, m in enumerate(mods):
        block[list(m)] = k
    ancestors = {k: set() for k in range(len(mods))}
    for k in range(len(mods)):
        i = parents[k]
        while i >= 0:
            ancestors[k].add(i)
            i = parents[i]
    Un, Dn = np.asarray(U), np.asarray(D)
    for r in range(model.n):
        for c in range(model.n):
            bi, bk = block[r], block[c]
            if bi != bk and bi not in ancestors[bk]:
                assert Un[r, c] == 0 and Dn[r, c] == 0
            if bi != bk:
                assert Dn[r, c] == 0
    assert np.allclose(Un[np.diag_indices(model.n)], 1.0)
    for Dk in factor.D:
        assert np.linalg.eigvalsh(np.asarray(Dk)).min() > 0
    b = qdd
    assert rel(factor.solve(b), jnp.linalg.solve(G, b)) < 1e-12
    assert rel(factor.multiply(b), G @ b) < 1e-12
    W = wrench_on_last(model)
    assert (
        rel(
            jaxmb.forward_dynamics(model, q, qd, b, W, method="udut"),
            jaxmb.forward_dynamics(model, q, qd, b, W, method="cholesky"),
        )
        < 1e-12
    )
    assert (
        rel(
            udut_inverse_dynamics(model, q, qd, qdd, W),
            jaxmb.inverse_dynamics(model, q, qd, qdd, W),
        )
        < 1e-12
    )


def test_udut_refuses_closed_chains(arm):
    with pytest.raises(ValueError, match="tree-type systems"):
        jaxmb.forward_dynamics(
            arm, jnp.array([0.1, 0.5, 0.13]), jnp.zeros(3), jnp.zeros(3), method="udut"
        )
