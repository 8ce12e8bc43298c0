"""Every URDF of `example-robot-data` (a test dependency) that Pinocchio loads, loaded by
`load_urdf` and checked against Pinocchio: mass matrix, bias forces and gravity (one pass of
`jaxmb.dynamics_terms`) and forward dynamics, coordinates matched by joint name; mimic joints
against Pinocchio's unconstrained model reduced by the mimic rules read here from the XML.

The functions are compiled for every tree: their sweeps are `lax.scan` loops from 17 frames on, so
compiling one of up to 101 joints takes a few seconds, about a tenth of evaluating it eagerly
(op by op, every operation is compiled for its shapes, which change with the tree). The compiled
code is dropped after each test: 69 trees of executables would approach the kernel's
memory-map limit."""

import glob
import importlib.metadata
import os
import warnings
import xml.etree.ElementTree as ET

import equinox as eqx
import jax
import numpy as np
import pinocchio as pin
import pytest

import jaxmb
from jaxmb.io.urdf import UrdfError, UrdfWarning

_DIST = importlib.metadata.distribution("example-robot-data")
ROBOTS = os.fspath(_DIST.locate_file("cmeel.prefix/share/example-robot-data/robots"))
FILES = sorted(glob.glob(os.path.join(ROBOTS, "**", "*.urdf"), recursive=True))


def test_the_robots_are_there():
    assert len(FILES) >= 60, ROBOTS


def _load(path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = jaxmb.load_urdf(path, **kw)
    assert all(issubclass(w.category, UrdfWarning) for w in caught), [
        str(w.message) for w in caught
    ]
    return model, [str(w.message) for w in caught]


def _pinocchio_state(pm, model, q, qd):
    """Pinocchio's (q, v) for ours, and P with v_pin = P qd (joints matched by name)."""
    qp, P = np.zeros(pm.nq), np.zeros((pm.nv, model.n))
    for jid in range(1, pm.njoints):
        joint, k = pm.joints[jid], model.coordinate_names.index(pm.names[jid])
        if joint.nq == 2:  # continuous joint: (cos, sin)
            qp[joint.idx_q : joint.idx_q + 2] = np.cos(q[k]), np.sin(q[k])
        else:
            qp[joint.idx_q] = q[k]
        P[joint.idx_v, k] = 1.0
    return qp, P


@pytest.fixture(autouse=True)
def _free_compiled_code():
    yield
    jax.clear_caches()


@eqx.filter_jit
def _terms(model, q, qd):
    t = jaxmb.dynamics_terms(model, q, qd)
    return t.Gamma, t.h, t.Q_g


@eqx.filter_jit
def _terms_and_forward(model, q, qd, tau):
    # one program per tree (compiling the four public functions one by one took twice as long)
    return *_terms(model, q, qd), jaxmb.forward_dynamics(model, q, qd, tau)


def _ours(model, q, qd, tau):
    """Gamma, h and Q_g from the one pass of `jaxmb.dynamics_terms` (the sweeps behind
    `mass_matrix`, `bias_forces` and `gravity_forces`, each checked against Pinocchio on random
    trees in tests/test_pinocchio.py) and `forward_dynamics`, or its error where it refuses."""
    try:
        return tuple(np.asarray(x) for x in _terms_and_forward(model, q, qd, tau))
    except RuntimeError as err:  # equinox's error: Gamma singular
        return *(np.asarray(x) for x in _terms(model, q, qd)), str(err)


def _close(ours, ref, what, condition=1.0):
    # float64 between two recursive implementations: round-off grows with the tree's size, and
    # a solve with Gamma amplifies it by Gamma's condition number (iCub reaches 1e8 and more)
    scale = max(1.0, np.abs(ref).max(initial=0.0))
    tol = max(1e-10, 1e-12 * condition) * scale
    np.testing.assert_allclose(ours, ref, rtol=0, atol=tol, err_msg=what)


def _reference(pm, qp, vp, tau_p):
    pd = pm.createData()
    M = pin.crba(pm, pd, qp)
    M = np.triu(M) + np.triu(M, 1).T
    nle = pin.nonLinearEffects(pm, pd, qp, vp)
    g = pin.computeGeneralizedGravity(pm, pd, qp)
    return M, nle - g, g, pd


@pytest.mark.parametrize("path", FILES, ids=lambda p: os.path.relpath(p, ROBOTS))
def test_matches_pinocchio(path):
    try:
        pm = pin.buildModelFromUrdf(path)
    except (ValueError, RuntimeError):
        with pytest.raises(UrdfError):  # what urdfdom refuses, we refuse (ur3.urdf: no name)
            jaxmb.load_urdf(path)
        return
    model, messages = _load(path, mimic=False)
    assert model.n == pm.nv
    # fixed-joint children merged into their moving parent, as Pinocchio does: the moving mass
    # agrees, and no body is massless
    np.testing.assert_allclose(
        sum(float(b.mass) for b in model.bodies),
        sum(pm.inertias[j].mass for j in range(1, pm.njoints)),
        rtol=1e-12,
    )
    assert all(float(b.mass) > 0 for b in model.bodies)
    if model.n == 0:
        return
    rng = np.random.default_rng(len(os.path.relpath(path, ROBOTS)))  # same state everywhere
    q, qd, tau = rng.uniform(-1, 1, (3, model.n))
    qp, P = _pinocchio_state(pm, model, q, qd)
    M_ref, h_ref, g_ref, pd = _reference(pm, qp, P @ qd, P @ tau)
    M, h, g, a = _ours(model, q, qd, tau)
    _close(M, P.T @ M_ref @ P, "mass matrix")
    _close(h, P.T @ h_ref, "bias forces")
    _close(g, -P.T @ g_ref, "gravity (Q_g; Pinocchio's g is on the left-hand side)")
    if any("move no mass" in m for m in messages):
        assert "not positive definite" in a  # said at load, refused at forward dynamics
    else:
        a_ref = P.T @ pin.aba(pm, pd, qp, P @ qd, P @ tau)
        _close(a, a_ref, "forward dynamics", np.linalg.cond(M))


def _mimic_rules(path):
    """{joint: (followed joint, multiplier, offset)} read from the XML, chains resolved."""
    root = ET.parse(path).getroot()
    rules, names = {}, {j.get("name") for j in root.iter("joint")}
    for j in root.iter("joint"):
        m = j.find("mimic")
        if m is not None and m.get("joint") in names:
            rules[j.get("name")] = (
                m.get("joint"),
                float(m.get("multiplier", 1)),
                float(m.get("offset", 0)),
            )

    def resolve(name):
        if name not in rules:
            return name, 1.0, 0.0
        target, a, b = rules[name]
        root_, a2, b2 = resolve(target)
        return root_, a * a2, a * b2 + b

    return {name: resolve(name) for name in rules}


MIMIC_FILES = [p for p in FILES if ET.parse(p).getroot().find("joint/mimic") is not None]


@pytest.mark.parametrize("path", MIMIC_FILES, ids=lambda p: os.path.relpath(p, ROBOTS))
def test_mimic_joints_are_coupled(path):
    """With mimic joints coupled (the default), Gamma = E^T Gamma_free E, h = E^T h_free and
    Q_g = E^T Q_g,free with the constant E of the rules, Gamma_free from Pinocchio's model
    of independent joints."""
    pm = pin.buildModelFromUrdf(path)
    free, _ = _load(path, mimic=False)
    model, messages = _load(path)
    rules = _mimic_rules(path)
    assert set(model.coordinate_names) == set(free.coordinate_names) - set(rules)
    E, offset = np.zeros((free.n, model.n)), np.zeros(free.n)
    for i, name in enumerate(free.coordinate_names):
        src, a, b = rules.get(name, (name, 1.0, 0.0))
        E[i, model.coordinate_names.index(src)], offset[i] = a, b
    rng = np.random.default_rng(1)
    q, qd, tau = rng.uniform(-1, 1, (3, model.n))
    qhat, qhatd = E @ q + offset, E @ qd
    qp, P = _pinocchio_state(pm, free, qhat, qhatd)
    M_ref, h_ref, g_ref, _ = _reference(pm, qp, P @ qhatd, P @ (E @ tau))
    M, h, g, a = _ours(model, q, qd, tau)
    _close(M, E.T @ P.T @ M_ref @ P @ E, "mass matrix")  # E constant: no Edot qd term
    _close(h, E.T @ P.T @ h_ref, "bias forces")
    _close(g, -E.T @ P.T @ g_ref, "gravity")
    M_ref = E.T @ P.T @ M_ref @ P @ E
    if any("move no mass" in m for m in messages):
        assert "not positive definite" in a  # said at load, refused at forward dynamics
    else:  # Pinocchio's ABA has no mimic joints: solve its reduced Gamma
        a_ref = np.linalg.solve(
            M_ref, tau - E.T @ P.T @ (h_ref + g_ref)
        )  # Pinocchio: M a + nle = tau
        _close(a, a_ref, "forward dynamics", np.linalg.cond(M))


def test_non_physical_inertia_warns_or_refuses():
    pr2 = next(p for p in FILES if p.endswith("pr2.urdf"))
    _, messages = _load(pr2)
    assert any(
        m.startswith("link 'sensor_mount_link' <inertial>: inertia violates triangle inequality")
        for m in messages
    ), messages
    with pytest.raises(UrdfError, match="link 'sensor_mount_link'.*strict=True"):
        jaxmb.load_urdf(pr2, strict=True)
