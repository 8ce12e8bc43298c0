"""Aghili (2005)'s projection formulation: identities of eqs. (13)-(32) on the 3-RPR (full row
rank) and the arm in dependent coordinates (a redundant constraint row), the classical route of
Appendix B as an independent reference, drift correction, assembly, jit/vmap/grad."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb
from jaxmb.constraints import projection as pj

RPR = jaxmb.models.rpr3()
ARM = jaxmb.models.series_parallel_3dof_dependent()
ARM_MIN = jaxmb.models.series_parallel_3dof(full=True)
DEG = np.pi / 180


def rpr_states(n, seed=0):
    """Assembled 3-RPR states near the paper's initial pose, with admissible velocities."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        angles = np.array([45, 155, 255]) * DEG + rng.uniform(-0.1, 0.1, 3)
        q = pj.assemble(
            RPR,
            dict(zip(("theta1", "theta3", "theta5"), angles, strict=True)),
            {"theta7": -0.1, "xi2": 0.75, "xi4": 1.2, "xi6": 0.9},
        )
        qd = pj.projector(RPR, q) @ rng.normal(size=7)
        out.append((q, qd))
    return out


def arm_states(n, seed=0):
    """Dependent-coordinate arm states mapped from random minimal states (q, qd)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        qm = np.array([rng.uniform(-3, 3), rng.uniform(-1, 1.5), rng.uniform(0.0, 0.2)])
        qdm = rng.normal(size=3) * np.array([1.0, 1.0, 0.1])
        q = jaxmb.augmented_coordinates(ARM_MIN, qm)
        qd = jaxmb.coordinate_map_jacobian(ARM_MIN, qm) @ qdm
        out.append((q, qd))
    return out


CASES = [("rpr3", RPR, rpr_states(3)), ("arm", ARM, arm_states(3))]


@pytest.mark.parametrize("name,system,states", CASES, ids=[c[0] for c in CASES])
def test_projector_identities(name, system, states):
    for q, qd in states:
        t = pj.projected_terms(system, q, qd)
        np.testing.assert_allclose(t.P @ t.P, t.P, atol=1e-12)
        np.testing.assert_allclose(t.P, t.P.T, atol=1e-12)
        np.testing.assert_allclose(t.A @ t.P, 0.0, atol=1e-12)
        np.testing.assert_allclose(t.A @ qd, 0.0, atol=1e-10)  # admissible states
        dof = {"rpr3": 3, "arm": 3}[name]
        assert round(float(jnp.trace(t.P))) == dof
        # C = dP/dt (eq. 14) against C qd = -A^+ Adot qd (eq. 16)
        Pdot = jax.jvp(lambda x: pj.projector(system, x), (q,), (qd,))[1]
        np.testing.assert_allclose(Pdot @ qd, t.Cqd, rtol=1e-8, atol=1e-10)


def appendix_b(system, q, qd, f):
    """The classical route (Aghili (2005) eqs. (74)-(75)), valid with full-row-rank A only:
    lambda = (A M^-1 A^T)^-1 (A M^-1 (f - h) + Adot qd), qdd = M^-1 (f - h - A^T lambda)."""
    t = pj.projected_terms(system, q, qd)
    Minv = np.linalg.inv(np.asarray(t.M))
    A = np.asarray(t.A)
    Adqd = np.asarray(pj.constraint_bias(system, q, qd))
    g = np.asarray(f - t.h)
    lam = np.linalg.solve(A @ Minv @ A.T, A @ Minv @ g + Adqd)
    return Minv @ (g - A.T @ lam), lam


def test_forward_dynamics_and_constraint_force_match_appendix_b():
    rng = np.random.default_rng(3)
    for q, qd in rpr_states(3, seed=1):
        f = rng.normal(size=7) * 10
        qdd_ref, lam_ref = appendix_b(RPR, q, qd, f)
        for form in pj.INERTIA_FORMS:
            qdd = pj.forward_dynamics(RPR, q, qd, f, inertia=form)
            np.testing.assert_allclose(qdd, qdd_ref, rtol=1e-9, atol=1e-9)
        F = pj.constraint_force(RPR, q, qd, f)  # eq. (32)
        A = pj.constraint_jacobian(RPR, q)
        np.testing.assert_allclose(F, A.T @ lam_ref, rtol=1e-9, atol=1e-9)
        lam, N = pj.lagrange_multipliers(RPR, q, qd, f)
        np.testing.assert_allclose(lam, lam_ref, rtol=1e-9, atol=1e-9)  # unique: full rank
        np.testing.assert_allclose(N, 0.0, atol=1e-12)


def test_redundant_constraint_forces_and_multipliers():
    """The arm's planar closure has a zero third row: A has rank 2 of 3, lambda is unique only up
    to N(A^T) (Remark 4), while the force F is unique and balances eq. (19)."""
    rng = np.random.default_rng(4)
    for q, qd in arm_states(3, seed=2):
        f = jnp.asarray(rng.normal(size=5) * np.array([50, 500, 0, 0, 2000]))
        t = pj.projected_terms(ARM, q, qd)
        qdd = pj.forward_dynamics(ARM, q, qd, f)
        F = pj.constraint_force(ARM, q, qd, f)
        np.testing.assert_allclose(t.M @ qdd + t.h, f - F, rtol=1e-9, atol=1e-6)  # eq. (19)
        np.testing.assert_allclose(t.P @ F, 0.0, atol=1e-6)
        np.testing.assert_allclose(t.A @ qdd, -pj.constraint_bias(ARM, q, qd), atol=1e-8)
        lam, N = pj.lagrange_multipliers(ARM, q, qd, f)
        np.testing.assert_allclose(t.A.T @ lam, F, rtol=1e-9, atol=1e-6)
        assert round(float(jnp.trace(N))) == 1  # one-dimensional homogeneous part
        z = jnp.asarray(rng.normal(size=3))
        np.testing.assert_allclose(t.A.T @ (lam + N @ z), F, rtol=1e-9, atol=1e-6)


def test_constraint_inertia_properties():
    """Theorem 2, Proposition 1 and Remark 3."""
    rng = np.random.default_rng(5)
    for q, qd in rpr_states(2, seed=3):
        t = pj.projected_terms(RPR, q, qd)
        Mc, _ = pj.constraint_inertia(t, "nonsymmetric")
        Ms, _ = pj.constraint_inertia(t, "symmetric")
        skew = Mc - t.M
        np.testing.assert_allclose(skew, -skew.T, atol=1e-12)  # eq. (24)
        z = jnp.asarray(rng.normal(size=7))
        np.testing.assert_allclose(z @ Mc @ z, z @ t.M @ z, rtol=1e-12)
        np.testing.assert_allclose(Ms, Ms.T, atol=1e-12)
        assert float(jnp.linalg.eigvalsh(Ms)[0]) > 0
        np.testing.assert_allclose(qd @ Mc @ qd, qd @ t.M @ qd, rtol=1e-12)  # Remark 3


def test_drift_correction():
    q, qd = rpr_states(1, seed=6)[0]
    same_q, same_qd, moved = pj.correct(RPR, q, qd)
    assert not bool(moved)
    np.testing.assert_array_equal(same_q, q)  # nothing to correct: untouched
    np.testing.assert_array_equal(same_qd, qd)
    rng = np.random.default_rng(7)
    q_bad = q + 1e-3 * rng.normal(size=7)
    qd_bad = qd + 1e-2 * rng.normal(size=7)
    q2, qd2, moved = pj.correct(RPR, q_bad, qd_bad)
    assert bool(moved)
    assert float(jnp.abs(pj.constraint_residual(RPR, q2)).max()) < 1e-12
    np.testing.assert_allclose(pj.constraint_jacobian(RPR, q2) @ qd2, 0.0, atol=1e-12)
    assert float(jnp.linalg.norm(q2 - q_bad)) < 1e-2  # a small, minimum-norm correction


def test_assemble_errors():
    with pytest.raises(ValueError, match=r"fixed names \['bogus'\]"):
        pj.assemble(ARM, {"bogus": 0.0})
    with pytest.raises(ValueError, match="guess"):
        pj.assemble(ARM, {"s": 0.5}, {"nope": 1.0})
    # a cylinder longer than the two triangle sides together (2 L0 = 0.7 m): no assembly
    with pytest.raises(ValueError, match="admit no assembly"):
        pj.assemble(ARM, {"phi": 0.0, "theta": 0.3, "s": 0.9}, {"zeta": -1.0, "alpha": -0.5})
    with pytest.raises(ValueError, match="no convergence in 1 iterations"):
        pj.assemble(ARM, {"phi": 0.0, "theta": 0.3, "s": 0.5}, {"zeta": -1.0}, max_iter=1)
    q = pj.assemble(ARM, {"phi": 0.1, "theta": 0.3, "s": 0.5}, {"zeta": -1.0, "alpha": -0.5})
    np.testing.assert_allclose(
        q, jaxmb.augmented_coordinates(ARM_MIN, jnp.array([0.1, 0.3, 0.075])), atol=1e-10
    )


def test_traced_assembly_failure_raises_or_gives_nan_in_studies():
    """A traced cylinder length that admits no assembly: a run-time error, or, inside
    `failures_as_nan` (as the commands and batched studies trace), NaN for that sample alone,
    with no raising check left in the program for the persistent cache to refuse."""
    from jaxmb.multibody.checks import failures_as_nan

    def at(s):
        return pj.assemble(ARM, {"phi": 0.0, "theta": 0.3, "s": s}, {"zeta": -1.0, "alpha": -0.5})

    lengths = jnp.array([0.5, 0.9])  # 0.9 m: longer than the triangle's sides (0.7 m)
    with pytest.raises(RuntimeError, match="no assembly within"):
        jax.vmap(at)(lengths)
    with failures_as_nan():
        q = jax.vmap(at)(lengths)
        jaxpr = str(jax.make_jaxpr(jax.vmap(at))(lengths))
    assert np.isfinite(q[0]).all() and np.isnan(q[1]).all()
    np.testing.assert_allclose(q[0], at(0.5), atol=1e-12)
    assert "callback" not in jaxpr


def test_constrained_system_errors():
    with pytest.raises(ValueError, match="1-D array"):
        pj.ConstrainedSystem(ARM.model, lambda q: jnp.sum(q))
    with pytest.raises(ValueError, match="must be a jaxmb Model"):
        pj.ConstrainedSystem("arm", lambda q: q)
    with pytest.raises(ValueError, match=r"q: expected shape \(5,\)"):
        pj.projector(ARM, jnp.zeros(3))
    with pytest.raises(ValueError, match="inertia"):
        pj.forward_dynamics(ARM, jnp.zeros(5), jnp.zeros(5), inertia="lagrangian")


def test_vmap_jit_and_gradients():
    states = arm_states(4, seed=8)
    q = jnp.stack([s[0] for s in states])
    qd = jnp.stack([s[1] for s in states])
    f = jnp.tile(jnp.array([10.0, 300.0, 0.0, 0.0, 1500.0]), (4, 1))
    batched = jax.vmap(lambda q, qd, f: pj.forward_dynamics(ARM, q, qd, f))(q, qd, f)
    looped = jnp.stack([pj.forward_dynamics(ARM, *a) for a in zip(q, qd, f, strict=True)])
    np.testing.assert_allclose(batched, looped, rtol=1e-12, atol=1e-12)

    # gradient with respect to the model (a body mass) and the state, against finite differences
    def loss(mass, q):
        system = eqx.tree_at(lambda s: s.model.bodies[4].mass, ARM, mass)
        return jnp.sum(pj.forward_dynamics(system, q, qd[0], f[0]) ** 2)

    g_mass, g_q = jax.grad(loss, argnums=(0, 1))(1.0, q[0])
    d = 1e-6
    fd_mass = (loss(1.0 + d, q[0]) - loss(1.0 - d, q[0])) / (2 * d)
    np.testing.assert_allclose(g_mass, fd_mass, rtol=1e-6)
    fd_q = [
        (loss(1.0, q[0].at[i].add(d)) - loss(1.0, q[0].at[i].add(-d))) / (2 * d) for i in range(5)
    ]
    np.testing.assert_allclose(g_q, fd_q, rtol=1e-5, atol=1e-6 * float(jnp.abs(g_q).max()))
