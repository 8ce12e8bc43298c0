"""Agreement with Pinocchio, an independent C++ implementation, on URDF trees.

Pinocchio orders joints depth-first, as `load_urdf` does; coordinates are still mapped by joint
name so that the comparison does not rely on that. Tolerance 1e-10 relative: the two are
different algorithms in float64 (CRBA/RNEA/ABA vs. Jacobian sums and autodiff)."""

import jax.numpy as jnp
import numpy as np
import pinocchio as pin  # a required test dependency (PyPI: `pin`): never skip the oracle
import pytest
from helpers import (
    bias_lagrangian,
    forward_dynamics,
    gravity_forces,
    inverse_dynamics,
    mass_matrix,
    regressor,
)

import jaxmb
from jaxmb.models import random_tree_urdf

TREES = [
    pytest.param(dict(n=3, seed=0), id="serial3"),
    pytest.param(dict(n=7, seed=1), id="serial7"),
    pytest.param(dict(n=12, seed=2), id="serial12-prismatic-fixed"),
    pytest.param(dict(n=9, seed=3, branching=True), id="branching9"),
    pytest.param(dict(n=12, seed=4, branching=True, prismatic_every=2), id="branching12"),
]
RTOL = 1e-10


def close(ours, ref, scale_of=None):
    ref = np.asarray(ref)
    scale = max(1.0, np.abs(ref if scale_of is None else scale_of).max())
    np.testing.assert_allclose(np.asarray(ours), ref, rtol=0, atol=RTOL * scale)


@pytest.fixture(scope="module", params=TREES)
def tree(request):
    xml = random_tree_urdf(**request.param)
    model = jaxmb.load_urdf(xml)
    pm = pin.buildModelFromXML(xml)
    names = [pm.names[i] for i in range(1, pm.njoints)]
    perm = np.array([model.coordinate_names.index(nm) for nm in names])  # ours -> pinocchio
    assert sorted(perm.tolist()) == list(range(model.n))
    return model, pm, perm


@pytest.mark.parametrize("seed", range(2))
def test_dynamics_match_pinocchio(tree, seed):
    model, pm, perm = tree
    pd = pm.createData()
    rng = np.random.default_rng(100 + seed)
    q, qd, qdd, tau = rng.normal(size=(4, model.n))
    qp, qdp, qddp, taup = q[perm], qd[perm], qdd[perm], tau[perm]

    M_ref = pin.crba(pm, pd, qp)
    M_ref = np.triu(M_ref) + np.triu(M_ref, 1).T  # crba fills the upper triangle
    close(np.asarray(mass_matrix(model, q))[np.ix_(perm, perm)], M_ref)  # CRBA fast path
    parts = np.asarray(jaxmb.body_mass_matrices(model, q)).sum(0)  # eq. (9)-(10) literally
    close(parts[np.ix_(perm, perm)], M_ref)

    # Pinocchio's nonLinearEffects is C qd + g; jaxmb keeps gravity on the right (Q_e)
    nle = np.asarray(bias_lagrangian(model, q, qd) - gravity_forces(model, q))[perm]
    close(nle, pin.nonLinearEffects(pm, pd, qp, qdp))

    tau_ref = pin.rnea(pm, pd, qp, qdp, qddp)
    close(np.asarray(inverse_dynamics(model, q, qd, qdd))[perm], tau_ref)
    close(np.asarray(inverse_dynamics(model, q, qd, qdd, method="lagrangian"))[perm], tau_ref)

    a_ref = pin.aba(pm, pd, qp, qdp, taup)
    close(np.asarray(forward_dynamics(model, q, qd, jnp.asarray(tau)))[perm], a_ref)


def test_regressor_matches_pinocchio(tree):
    model, pm, perm = tree
    pd = pm.createData()
    rng = np.random.default_rng(5)
    q, qd, qdd = rng.normal(size=(3, model.n))
    Y = np.asarray(regressor(model, q, qd, qdd))
    pi = np.asarray(jaxmb.inertial_parameters(model)).ravel()
    Y_pin = pin.computeJointTorqueRegressor(pm, pd, q[perm], qd[perm], qdd[perm])
    pi_pin = np.concatenate([pm.inertias[i].toDynamicParameters() for i in range(1, pm.njoints)])
    close((Y @ pi)[perm], Y_pin @ pi_pin)


def test_inertial_parameters_match_pinocchio_for_unmerged_bodies():
    """Pinocchio merges fixed-joint children into their parent; compare a tree without them."""
    xml = random_tree_urdf(6, 11, fixed_every=0)
    model, pm = jaxmb.load_urdf(xml), pin.buildModelFromXML(xml)
    ours = np.asarray(jaxmb.inertial_parameters(model))
    for i in range(1, pm.njoints):
        k = model.body_names.index(pm.frames[pm.getFrameId(f"link{i}")].name)
        np.testing.assert_allclose(ours[k], pm.inertias[i].toDynamicParameters(), atol=1e-12)


def test_frame_pose_and_jacobian_match_pinocchio(tree):
    model, pm, perm = tree
    pd = pm.createData()
    q = np.random.default_rng(9).normal(size=model.n)
    pin.computeJointJacobians(pm, pd, q[perm])
    pin.updateFramePlacements(pm, pd)
    for frame in [f.name for f in model.frames][-3:]:
        fid = pm.getFrameId(frame)
        T_ref = pd.oMf[fid].homogeneous
        np.testing.assert_allclose(jaxmb.frame_pose(model, q, frame), T_ref, atol=1e-12)
        J_ref = pin.getFrameJacobian(pm, pd, fid, pin.ReferenceFrame.LOCAL)  # [v; omega]
        J = np.asarray(jaxmb.frame_jacobian(model, q, frame))[:, perm]
        np.testing.assert_allclose(J, np.vstack([J_ref[3:], J_ref[:3]]), atol=1e-12)


LARGE = [
    pytest.param(dict(n=100, seed=21), id="serial100-prismatic-fixed"),
    pytest.param(dict(n=100, seed=22, branching=True), id="branching100-prismatic-fixed"),
    pytest.param(dict(n=60, seed=23, branching=True, prismatic_every=2), id="branching60"),
]


@pytest.mark.parametrize("kw", LARGE)
def test_large_trees_match_pinocchio(kw):
    """Trees of up to 100 bodies (and their fixed links), on the default paths: the scan sweeps
    for the mass matrix, bias forces, gravity and inverse dynamics, ABA for forward dynamics."""
    xml = random_tree_urdf(**kw)
    model = jaxmb.load_urdf(xml)
    assert (
        jaxmb.algorithms.terms.recursion(model) == "scan"
        and jaxmb.algorithms.terms.solver(model) == "aba"
    )
    pm = pin.buildModelFromXML(xml)
    pd = pm.createData()
    names = [pm.names[i] for i in range(1, pm.njoints)]
    perm = np.array([model.coordinate_names.index(nm) for nm in names])
    rng = np.random.default_rng(5)
    q, qd, qdd, tau = rng.normal(size=(4, model.n))
    qp, qdp, qddp, taup = q[perm], qd[perm], qdd[perm], tau[perm]
    M_ref = pin.crba(pm, pd, qp)
    M_ref = np.triu(M_ref) + np.triu(M_ref, 1).T
    close(np.asarray(mass_matrix(model, q))[np.ix_(perm, perm)], M_ref)
    close(np.asarray(inverse_dynamics(model, q, qd, qdd))[perm], pin.rnea(pm, pd, qp, qdp, qddp))
    g_ref = pin.computeGeneralizedGravity(pm, pd, qp)
    close(-np.asarray(gravity_forces(model, q, method="rnea"))[perm], g_ref)
    h_ref = pin.nonLinearEffects(pm, pd, qp, qdp) - g_ref
    close(np.asarray(jaxmb.bias_forces(model, q, qd))[perm], h_ref)
    a_ref = pin.aba(pm, pd, qp, qdp, taup)
    # forward dynamics: Gamma's conditioning (1e6 on these chains) scales the round-off
    cond = np.linalg.cond(M_ref)
    ours = np.asarray(forward_dynamics(model, q, qd, tau))[perm]
    np.testing.assert_allclose(ours, a_ref, rtol=0, atol=1e-14 * cond * np.abs(a_ref).max())
