"""Malformed input across the public surface: each case asserts the error type and that the
message names the field (and, where it helps, what was expected).

Most checks fire before anything is compiled (URDF reading, concrete arguments, simulate's
options), so the module is cheap; one case per traced path checks the run-time route."""

import argparse
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb
import jaxmb.control
from jaxmb.cli import _negative_values, build_parser, main
from jaxmb.io.urdf import UrdfError, UrdfWarning
from jaxmb.simulation import simulate

INERTIAL = (
    '<inertial><mass value="1"/>'
    '<inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial>'
)
LIMIT = '<limit lower="-1" upper="1" effort="10" velocity="1"/>'


def urdf(joint_extra="", *, link_a=INERTIAL, jtype="revolute", robot='name="r"', more=""):
    """A two-link robot whose joint carries ``joint_extra``; pieces replaceable by case."""
    return (
        f'<robot {robot}><link name="base"/><link name="a">{link_a}</link>'
        f'<joint name="j1" type="{jtype}"><parent link="base"/><child link="a"/>'
        f"{joint_extra}</joint>{more}</robot>"
    )


def chain(*joints, links=("base", "a", "b")):
    body = "".join(f'<link name="{n}">{INERTIAL}</link>' for n in links)
    js = "".join(
        f'<joint name="{n}" type="revolute"><parent link="{p}"/><child link="{c}"/>'
        f'<axis xyz="0 0 1"/>{LIMIT}</joint>'
        for n, p, c in joints
    )
    return f'<robot name="r">{body}{js}</robot>'


def test_the_well_formed_robot_loads():
    model = jaxmb.load_urdf(urdf(LIMIT + '<axis xyz="0 0 1"/>'))
    assert model.coordinate_names == ("j1",) and model.body_names == ("a",)


URDF_CASES = [
    # what urdfdom refuses
    ("<robot name='r'><link name='a'></robot>", "malformed XML"),
    ("<model/>", "root element must be <robot>"),
    (urdf(LIMIT, robot=""), "<robot>: has no name"),
    (urdf(LIMIT, robot='name="r" version="2.0"'), r"<robot version>: only URDF 1.0"),
    ('<robot name="r"/>', "<robot>: has no <link>"),
    (urdf(LIMIT, more='<link name="a"/>'), "link 'a' is defined twice"),
    (
        urdf(
            LIMIT,
            more='<link name="b"/><joint name="j1" type="fixed"><parent link="a"/>'
            '<child link="b"/></joint>',
        ),  # fmt: skip
        "joint 'j1' is defined twice",
    ),
    (urdf(LIMIT, jtype="ball"), r"joint 'j1': type must be one of"),
    (urdf(LIMIT).replace(' type="revolute"', ""), r"joint 'j1': type must be one of"),
    (urdf(LIMIT).replace('<joint name="j1"', "<joint"), "<joint>: has no name"),
    (urdf(LIMIT).replace('<parent link="base"/>', ""), r"joint 'j1': has no <parent link"),
    (urdf(LIMIT).replace('<child link="a"/>', "<child/>"), r"joint 'j1': has no <child link"),
    (
        urdf(LIMIT).replace('child link="a"', 'child link="zz"'),
        "joint 'j1' names unknown link 'zz'",
    ),
    (urdf(LIMIT + '<origin xyz="1 2 3 4"/>'), r"joint 'j1' <origin xyz>: expected 3 numbers"),
    (urdf(LIMIT + '<origin xyz="1 2"/>'), r"joint 'j1' <origin xyz>: expected 3 numbers"),
    (urdf(LIMIT + '<origin rpy="0 x 0"/>'), r"joint 'j1' <origin rpy>: expected a decimal"),
    (urdf(LIMIT + '<origin xyz="0 nan 0"/>'), r"joint 'j1' <origin xyz>: expected a decimal"),
    (urdf(LIMIT + '<origin xyz="0 0 1e400"/>'), r"joint 'j1' <origin xyz>: .* not a finite"),
    (urdf(LIMIT + '<axis xyz="0 0"/>'), r"joint 'j1' <axis xyz>: expected 3 numbers"),
    (urdf('<axis xyz="0 0 1"/>'), r"joint 'j1': a revolute joint needs a <limit>"),
    (urdf('<limit lower="0" upper="1" velocity="1"/>'), r"joint 'j1' <limit>: has no effort"),
    (urdf('<limit lower="0" upper="1" effort="1"/>'), r"joint 'j1' <limit>: has no velocity"),
    (urdf(LIMIT.replace('upper="1"', 'upper="one"')), r"joint 'j1' <limit> upper: expected"),
    (urdf(LIMIT + "<dynamics/>"), r"joint 'j1' <dynamics>: needs damping"),
    (urdf(LIMIT + '<dynamics damping="1m"/>'), r"joint 'j1' <dynamics> damping: expected"),
    (urdf(LIMIT + '<safety_controller k_position="1"/>'), r"<safety_controller>: has no k_vel"),
    (urdf(LIMIT + '<calibration rising="x"/>'), r"joint 'j1' <calibration> rising: expected"),
    (urdf(LIMIT + '<mimic multiplier="2"/>'), r"joint 'j1' <mimic>: has no joint"),
    (urdf(LIMIT + '<mimic joint="j0" multiplier="two"/>'), r"<mimic> multiplier: expected"),
    (
        urdf(LIMIT, more='<material name="m"><color rgba="1 0 0 1"/></material>' * 2),
        "<material> 'm' is defined twice",
    ),
    # the tree (urdfdom's initRoot; jaxmb refuses the loops urdfdom lets through)
    (chain(("j1", "base", "a")), r"exactly one root link; found \['base', 'b'\]"),
    (
        chain(("j1", "base", "a"), ("j2", "b", "a")),
        "link 'a' is the child of joints 'j1' and 'j2'",
    ),
    (chain(("j1", "base", "a"), ("j2", "b", "b")), "joint 'j2': its parent and child are the same"),
    (
        chain(
            ("j1", "base", "a"), ("j2", "b", "c"), ("j3", "c", "b"), links=("base", "a", "b", "c")
        ),
        r"links \['b', 'c'\] cannot be reached from the root link 'base'",
    ),
    # what urdfdom keeps truncated but the dynamics need (jaxmb refuses)
    (urdf(LIMIT, link_a="<inertial/>"), r"link 'a' <inertial>: has no <mass>"),
    (urdf(LIMIT, link_a="<inertial><mass/></inertial>"), r"link 'a' <inertial> <mass value>"),
    (
        urdf(LIMIT, link_a='<inertial><mass value="1"/></inertial>'),
        r"link 'a' <inertial>: has no <inertia>",
    ),
    (
        urdf(LIMIT, link_a=INERTIAL.replace(' iyz="0"', "").replace(' izz="0.1"', "")),
        r"link 'a' <inertial> <inertia>: missing attribute\(s\) \['iyz', 'izz'\]",
    ),
    (
        urdf(LIMIT, link_a=INERTIAL.replace('"1"', '"-1"')),
        r"link 'a' <inertial>: mass must be >= 0",
    ),
    (urdf(LIMIT + '<axis xyz="0 0 0"/>'), r"joint 'j1'.*axis must be finite and non-zero"),
    (urdf(LIMIT + '<axis xyz="0 0 1"/>', jtype="floating"), "joint 'j1' has unsupported type"),
    (
        urdf(LIMIT + '<axis xyz="0 0 1"/><mimic joint="j1"/>'),
        r"joint 'j1' <mimic joint='j1'>: mimic joints form a cycle",
    ),
    (urdf(LIMIT, robot='name="r" version="1."'), r"<robot version>: only URDF 1.0"),
]


@pytest.mark.parametrize("xml, message", URDF_CASES)
def test_malformed_urdf_is_refused_naming_the_element(xml, message):
    with pytest.raises(UrdfError, match=message):
        jaxmb.load_urdf(xml)


def test_urdf_errors_are_value_errors_and_name_the_file(tmp_path):
    path = tmp_path / "bad.urdf"
    path.write_text(urdf('<axis xyz="0 0 1"/>'))
    with pytest.raises(ValueError, match=r"URDF '.*bad\.urdf': joint 'j1'"):
        jaxmb.load_urdf(path)
    with pytest.raises(UrdfError, match="no such file"):
        jaxmb.load_urdf(tmp_path / "missing.urdf")
    with pytest.raises(UrdfError, match="expected a path or URDF text, got int"):
        jaxmb.load_urdf(3)


def test_explicit_zero_mass_is_a_massless_frame_and_merges():
    tool = (
        '<link name="tool"><inertial><mass value="0"/><inertia ixx="0" ixy="0" ixz="0" iyy="0" '
        'iyz="0" izz="0"/></inertial></link><joint name="t" type="fixed"><parent link="a"/>'
        '<child link="tool"/><origin xyz="0 0 1"/></joint>'
    )
    model = jaxmb.load_urdf(urdf(LIMIT + '<axis xyz="0 0 1"/>', more=tool))
    assert model.body_names == ("a",) and "tool" in model.frame_names


def test_mesh_only_urdf_warns_that_its_joints_move_no_mass():
    mesh = '<visual><geometry><mesh filename="a.stl"/></geometry></visual>'
    with pytest.warns(UrdfWarning, match=r"joints \['j1'\] move no mass"):
        model = jaxmb.load_urdf(urdf(LIMIT + '<axis xyz="0 0 1"/>', link_a=mesh))
    assert model.bodies == ()


def test_non_physical_inertia_warns_naming_link_and_condition():
    rod = INERTIAL.replace('ixx="0.1"', 'ixx="0.5"')  # 0.1 + 0.1 < 0.5
    xml = urdf(LIMIT + '<axis xyz="0 0 1"/>', link_a=rod)
    with pytest.warns(UrdfWarning, match=r"link 'a' <inertial>: inertia violates triangle"):
        jaxmb.load_urdf(xml)
    with pytest.raises(UrdfError, match=r"link 'a' <inertial>.*triangle.*strict=True"):
        jaxmb.load_urdf(xml, strict=True)
    # round-off in a published file is no violation: the tolerance is absolute, kg m^2
    tiny = INERTIAL.replace('ixx="0.1"', 'ixx="-1e-20"').replace('"0.1"', '"1e-8"')
    jaxmb.load_urdf(urdf(LIMIT + '<axis xyz="0 0 1"/>', link_a=tiny.replace('"1"', '"0.01"')))


def test_load_urdf_arguments_are_validated():
    xml = urdf(LIMIT + '<axis xyz="0 0 1"/>')
    for kw, message in (
        (dict(inertia_tolerance=float("nan")), "inertia_tolerance must be a finite number >= 0"),
        (dict(inertia_tolerance=-1.0), "inertia_tolerance must be a finite number >= 0"),
        # under the test suite's runtime type checking a TypeError names the parameter first
        (dict(strict="yes"), "strict must be True or False|parameter 'strict'"),
        (dict(mimic=None), "mimic must be True or False|parameter 'mimic'"),
    ):
        with pytest.raises((ValueError, TypeError), match=message):
            jaxmb.load_urdf(xml, **kw)


def test_zero_mass_with_rotational_inertia_is_reported():
    rotor = INERTIAL.replace('value="1"', 'value="0"')
    xml = urdf(LIMIT + '<axis xyz="0 0 1"/>', link_a=rotor)
    with pytest.warns(UrdfWarning, match=r"link 'a' <inertial>: inertia violates mass > 0"):
        model = jaxmb.load_urdf(xml)
    assert not model.body("a").physical
    with pytest.raises(UrdfError, match=r"link 'a' <inertial>: .*mass > 0.*strict=True"):
        jaxmb.load_urdf(xml, strict=True)


def test_a_non_physical_body_can_still_be_reconfigured():
    rod = INERTIAL.replace('ixx="0.1"', 'ixx="0.5"')
    with pytest.warns(UrdfWarning):
        model = jaxmb.load_urdf(urdf(LIMIT + '<axis xyz="0 0 1"/>', link_a=rod))
    heavier = jaxmb.replace_body(model, "a", mass=2.0)
    assert float(heavier.body("a").mass) == 2.0 and not heavier.body("a").physical


MIMIC_CHAIN = (
    '<robot name="m"><link name="base"/>'
    + "".join(f'<link name="{n}">{INERTIAL}</link>' for n in "abcd")
    + '<joint name="ja" type="revolute"><parent link="base"/><child link="a"/>'
    f'<axis xyz="0 0 1"/>{LIMIT}</joint>'
    '<joint name="jb" type="revolute"><parent link="a"/><child link="b"/><origin xyz="0.5 0 0"/>'
    f'<axis xyz="0 1 0"/>{LIMIT}<mimic joint="ja" multiplier="2" offset="0.1"/></joint>'
    '<joint name="jc" type="prismatic"><parent link="b"/><child link="c"/><origin xyz="0.5 0 0"/>'
    f'<axis xyz="1 0 0"/>{LIMIT}<mimic joint="jb" multiplier="-0.5" offset="0.2"/></joint>'
    '<joint name="jd" type="revolute"><parent link="c"/><child link="d"/><origin xyz="0 0 0.3"/>'
    f'<axis xyz="1 0 0"/>{LIMIT}<mimic joint="tool"/></joint>'
    '<joint name="tool" type="fixed"><parent link="base"/><child link="t"/></joint>'
    '<link name="t"/></robot>'
)


def test_mimic_chains_compose_and_a_fixed_target_is_independent():
    """jb = 2 ja + 0.1 and jc = -0.5 jb + 0.2 = -ja + 0.15 (the composition written out by
    hand); jd follows a fixed joint, so it stays independent with a warning (Pinocchio's
    default loads such a file)."""
    with pytest.warns(UrdfWarning, match=r"joint 'jd' <mimic joint='tool'>: that joint is not"):
        model = jaxmb.load_urdf(MIMIC_CHAIN)
    free = jaxmb.load_urdf(MIMIC_CHAIN, mimic=False)
    assert model.coordinate_names == ("ja", "jd") and free.coordinate_names == (
        "ja",
        "jb",
        "jc",
        "jd",
    )
    E = np.array([[1.0, 0.0], [2.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    offset = np.array([0.0, 0.1, 0.15, 0.0])
    q, qd = np.array([0.3, -0.4]), np.array([0.7, 0.2])
    qhat = E @ q + offset
    np.testing.assert_allclose(jaxmb.augmented_coordinates(model, q), qhat, atol=1e-15)
    with jax.disable_jit():  # a small eager check: no compilation
        np.testing.assert_allclose(
            jaxmb.mass_matrix(model, q), E.T @ jaxmb.mass_matrix(free, qhat) @ E, atol=1e-12
        )
        np.testing.assert_allclose(
            jaxmb.bias_forces(model, q, qd, method="rnea"),
            E.T @ jaxmb.bias_forces(free, qhat, E @ qd, method="rnea"),
            atol=1e-12,
        )


# -- non-finite states and domains -----------------------------------------------------------

ARM = jaxmb.models.series_parallel_3dof()
Q, ZERO = jnp.array([0.1, 0.35, 0.1]), jnp.zeros(3)
NAN3, INF3 = jnp.array([jnp.nan, 0.3, 0.1]), jnp.array([jnp.inf, 0.0, 0.0])
RPR = jaxmb.models.rpr3()
BAD_WRENCH = {"F3": jnp.array([0, 0, 0, 0, jnp.nan, 0.0])}
CRANE = jaxmb.models.lift_tilt_crane_plant()
Y0 = CRANE.initial_state(jnp.array(jaxmb.models.crane.WAYPOINTS["A"]), jnp.zeros(2))
Y_BAD_P = {
    **Y0,
    "actuators": {**Y0["actuators"], "lift": {**Y0["actuators"]["lift"], "p_a": jnp.nan}},
}
CHAIN = jaxmb.models.crane.crane_chain(CRANE.model)
CONTROLLER = jaxmb.control.RobustController(ARM, 1.0, 30.0, 50.0, 1e-4)

STATE_CASES = [
    (lambda: jaxmb.mass_matrix(ARM, NAN3), "q: must be finite"),
    (lambda: jaxmb.body_mass_matrices(ARM, NAN3), "q: must be finite"),
    (lambda: jaxmb.gravity_forces(ARM, INF3), "q: must be finite"),
    (lambda: jaxmb.bias_forces(ARM, Q, INF3), "qd: must be finite"),
    (lambda: jaxmb.inverse_dynamics(ARM, Q, ZERO, NAN3), "qdd: must be finite"),
    (lambda: jaxmb.forward_dynamics(ARM, Q, INF3, ZERO), "qd: must be finite"),
    (lambda: jaxmb.forward_dynamics(ARM, Q, ZERO, NAN3), "tau: must be finite"),
    (lambda: jaxmb.forward_dynamics(ARM, Q, ZERO, ZERO, BAD_WRENCH), "wrench on frame 'F3'"),
    (lambda: jaxmb.wrench_forces(ARM, Q, "F3", BAD_WRENCH["F3"]), "wrench: must be finite"),
    (lambda: jaxmb.frame_jacobian(ARM, NAN3, "F3"), "q: must be finite"),
    (lambda: jaxmb.constraints.projection.forward_dynamics(RPR, jnp.full(7, jnp.nan), jnp.zeros(7)), "q: must"),
    (lambda: jaxmb.constraints.projection.forward_dynamics(RPR, jnp.ones(7), jnp.ones(7),
                                                           jnp.full(7, jnp.inf)), "f: must"),
    (lambda: CRANE.vector_field(0.0, Y0, jnp.array([jnp.nan, 0.0])), "command: must be finite"),
    (lambda: CRANE.vector_field(0.0, Y_BAD_P, jnp.zeros(2)), "actuator 'lift' state 'p_a': must"),
    (lambda: jaxmb.vdc.actuator_forces(CHAIN, Y0["q"], INF3[:2], jnp.zeros(2)), "qd: must"),
    (lambda: CONTROLLER(0.0, Q, ZERO, (NAN3, ZERO, ZERO)), "desired q_d: must be finite"),
    (lambda: jaxmb.vdc.required_forces(CHAIN, *[Y0["q"]] * 4, jnp.eye(6), BAD_WRENCH["F3"]), "F_D_r: must"),
    (lambda: jaxmb.constraints.projection.assemble(RPR, {"theta1": math.nan}), "assemble: fixed 'theta1': must"),
    (lambda: jaxmb.mass_matrix(ARM, jnp.zeros(2)), r"q: expected shape \(3,\)"),
    (lambda: jaxmb.Body("b", "F1", 1.0, [0.0, 0.0], np.eye(3)), r"body 'b': com: expected shape"),
    (lambda: jaxmb.Frame("f", translation=[1.0, 2.0]), r"frame 'f': translation: expected shape"),
]  # fmt: skip


@pytest.mark.parametrize("call, message", STATE_CASES)
def test_non_finite_and_misshaped_input_is_refused_at_entry(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- the public API's types (issue 29, point 4) -----------------------------------------------


def test_wrong_types_are_refused_at_the_public_boundary():
    """Issue 29, point 4: a wrong type raises TypeError, a wrong value ValueError, each naming
    the argument and what it expects, before anything traces (no raw AttributeError or JAX
    dtype error from deep inside). One row per argument and kind of mistake, in
    tests/api_type_cases.py; run as a user runs them, in a process without the test suite's
    runtime type checker (which would answer first, in its own words)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("api_type_cases.py")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rows passed" in run.stdout, run.stdout


def test_lists_and_integers_are_taken_as_arrays_at_the_boundary():
    """The boundary converts what it accepts: a list of floats or an integer array for q gives
    the same mass matrix as the float array (a plain list used to fail inside the trace)."""
    M = jaxmb.mass_matrix(ARM, jnp.array([0.1, 0.35, 0.1]))
    np.testing.assert_array_equal(jaxmb.mass_matrix(ARM, [0.1, 0.35, 0.1]), M)
    two = jaxmb.load_urdf(chain(("j1", "base", "a"), ("j2", "a", "b")))
    np.testing.assert_array_equal(
        jaxmb.mass_matrix(two, [1, 0]), jaxmb.mass_matrix(two, jnp.array([1.0, 0.0]))
    )
    W = {"F3": [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]}
    np.testing.assert_array_equal(
        jaxmb.forward_dynamics(ARM, Q, ZERO, ZERO, W),
        jaxmb.forward_dynamics(ARM, Q, ZERO, ZERO, {"F3": jnp.asarray(W["F3"])}),
    )


def test_traced_non_finite_input_is_refused_at_run_time():
    two = jaxmb.load_urdf(chain(("j1", "base", "a"), ("j2", "a", "b")))
    qs = jnp.array([[0.1, 0.2], [jnp.nan, 0.2]])
    with pytest.raises(RuntimeError, match="q: must be finite"):
        jax.vmap(jaxmb.mass_matrix, in_axes=(None, 0))(two, qs)
    with (
        jaxmb.multibody.checks.failures_as_nan()
    ):  # batched studies: the bad row is NaN, the good one not
        M = jax.vmap(jaxmb.mass_matrix, in_axes=(None, 0))(two, qs)
    assert np.isfinite(M[0]).all() and np.isnan(M[1]).any()


def _rotation(angle, axis):
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


ROTATIONS = {
    "proper": _rotation(0.7, [1, 2, 3]),
    "within round-off": _rotation(0.7, [1, 2, 3]) * (1 + 1e-12),
    "skewed": _rotation(0.7, [1, 2, 3]) + 1e-5 * np.eye(3)[::-1],
    "reflection": np.diag([1.0, 1.0, -1.0]),
    "nan": np.where(np.eye(3) > 0, np.nan, 0.0),
    "inf": np.diag([1.0, np.inf, 1.0]),
    "overflowing": np.full((3, 3), 1e200),
}
INERTIAS = {
    "realisable": np.diag([1.0, 2.0, 2.5]),
    "thin rod": np.diag([0.0, 1.0, 1.0]),
    "triangle violated": np.diag([1.0, 1.0, 3.0]),
    "negative moment": np.diag([-0.1, 1.0, 1.0]),
    "asymmetric": np.array([[1.0, 0.1, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.5]]),
    "nan": np.diag([1.0, np.nan, 1.0]),
    "overflowing": np.full((3, 3), 1e200),
}


@pytest.mark.parametrize(
    "predicate, cases",
    [
        (jaxmb.multibody.model.rotation_improper, ROTATIONS),
        (jaxmb.multibody.model.inertia_unrealisable, INERTIAS),
        (jaxmb.multibody.checks.not_finite, {**ROTATIONS, **INERTIAS}),
        (jaxmb.multibody.checks.not_positive, {**ROTATIONS, **INERTIAS, "inf": np.array(np.inf)}),
    ],
)
def test_constructor_predicates_agree_in_numpy_and_in_jax(predicate, cases):
    """`checked` runs a constructor's predicate in NumPy on concrete values and in JAX on
    traced ones (`array_namespace`): both verdicts agree, and on the cases meant to pass and
    fail (the names say which)."""
    for name, x in cases.items():
        with np.errstate(all="ignore"):  # as `checked` calls it
            on_host = predicate(x)
        assert isinstance(on_host, np.ndarray | np.bool_), name  # no JAX operation ran
        np.testing.assert_array_equal(on_host, np.asarray(jax.jit(predicate)(jnp.asarray(x))))
        if predicate.__name__ in ("rotation_improper", "inertia_unrealisable"):
            good = name in ("proper", "within round-off", "realisable", "thin rod")
            assert bool(on_host) is not good, name


def test_concrete_checks_compile_nothing():
    """A frame and a body built from concrete values compile no program: their checks run in
    NumPy (XLA's compiles, counted after JAX's caches are dropped; `jit(stage)` is JAX moving
    a host array to the device). Each check compiled its predicate, and a frame's axis its
    normalisation, at every process's first use of a shape: some fifty compiles and 1.3 s of
    loading the crane's machine file."""
    from helpers import backend_compiles

    jax.clear_caches()
    with backend_compiles() as compiled:
        frame = jaxmb.Frame("a", "S", rotation=_rotation(0.3, [0, 0, 1]), translation=[0, 0, 1],
                            joint="revolute", axis=[0, 2, 2], coordinate="q_a")  # fmt: skip
        body = jaxmb.Body("b", "a", 2.0, [0.1, 0, 0], INERTIAS["realisable"])
    assert set(compiled) <= {"jit(stage)"}, compiled
    np.testing.assert_allclose(frame.axis, [0, 2**-0.5, 2**-0.5], rtol=1e-15)
    assert isinstance(body.inertia, jax.Array) and body.inertia.dtype == jnp.float64
    with pytest.raises(ValueError, match="frame 'a': rotation must be a finite proper rotation"):
        jaxmb.Frame("a", "S", rotation=ROTATIONS["reflection"])
    with pytest.raises(ValueError, match="body 'b': inertia"):
        jaxmb.Body("b", "a", 2.0, [0.1, 0, 0], INERTIAS["triangle violated"])
    # overflow inside a check is a refusal, not NumPy's warning (an error under pytest) nor
    # its linear algebra's exception: JAX's inf and NaN failed the same checks
    with pytest.raises(ValueError, match="frame 'a': rotation"):
        jaxmb.Frame("a", "S", rotation=ROTATIONS["overflowing"])
    with pytest.raises(ValueError, match="body 'b': inertia"):
        jaxmb.Body("b", "a", 2.0, [0.1, 0, 0], np.diag([1.5e308] * 3))


def _infinite_parameter_cases():
    from jaxmb.actuators.hydraulics import BAR, Cylinder, StribeckFriction, Valve
    from jaxmb.constraints.impact import Particle
    from jaxmb.models.series_parallel import TriangleLoop
    from jaxmb.simulation import QuinticWaypoints

    inf = math.inf
    return [
        (lambda: jaxmb.Body("b", "a", inf, [0.1, 0, 0], INERTIAS["realisable"]),
         "body 'b': mass must be > 0 and finite"),
        (lambda: Cylinder(inf, 5e-4, 0.5, 1e-4, 1e-4, 1e9), "Cylinder: area_a"),
        (lambda: Cylinder(1e-3, 5e-4, 0.5, 1e-4, 1e-4, 1e9, c_int=inf), "Cylinder: c_int"),
        # a datasheet's zero pressure drop made every flow coefficient infinite, and the plant's
        # first flow NaN
        (lambda: Valve.from_datasheet(1e-3, 0.0, 180 * BAR, 2 * BAR),
         "Valve.from_datasheet: dp_nom must be > 0 and finite; got 0.0"),
        (lambda: Valve.from_datasheet(inf, 35 * BAR, 180 * BAR, 2 * BAR), "from_datasheet: q_nom"),
        (lambda: jaxmb.vdc.RigidBody(mass=inf), "RigidBody: mass"),
        (lambda: StribeckFriction(100.0, 150.0, 0.01, 10.0, inf), "StribeckFriction: v_eps"),
        (lambda: TriangleLoop(L0=inf), "TriangleLoop: L0"),
        (lambda: Particle(inf, [0, 0, 0], [0, 0, 0]), "Particle.mass"),
        (lambda: QuinticWaypoints([[0.0], [1.0]], segment_time=inf), "segment_time"),
        (lambda: jaxmb.control.RobustController(jaxmb.models.series_parallel_3dof(), 1.0, inf,
                                                50.0, 1e-4), "RobustController.K"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(11))
def test_infinite_parameters_are_refused_by_name(case):
    """Parameters documented as "> 0 and finite" refuse +inf at construction (their checks were
    ``~(x > 0)``, which +inf passes), naming the parameter."""
    make, message = _infinite_parameter_cases()[case]
    with pytest.raises(
        ValueError, match=message if "got" in message else f"{message}.*got \\[?inf"
    ):
        make()


def test_arm_domain_matches_its_docstring():
    """``-l0 < delta < 2 L0 - l0``: delta = -0.5 m (a negative cylinder length) is refused."""
    with pytest.raises(RuntimeError, match="delta is outside the triangle's domain -l0 < delta"):
        jaxmb.augmented_coordinates(ARM, jnp.array([0.1, 0.35, -0.5]))


# -- simulate's options ----------------------------------------------------------------------


def _pd(t, q, qd, desired):
    return 100.0 * (desired[0] - q) - 20.0 * qd


def _ref(t):
    return jnp.array([0.1, 0.35, 0.1]) + 0.0 * t


TS = jnp.linspace(0.0, 0.1, 3)
SIM_CASES = [
    (dict(ts=jnp.array([0.1, 0.05, 0.0])), r"strictly increasing \(s\); ts\[0\] = 0.1 is followed"),
    (dict(ts=jnp.array([0.0, 0.0])), "ts must be finite and strictly increasing"),
    (dict(ts=jnp.array([0.0, jnp.nan, 1.0])), "ts must be finite and strictly increasing"),
    (dict(ts=jnp.array([0.0])), "ts must be 1-D with at least 2 times"),
    (dict(rtol=-1e-6), "rtol must be > 0"),
    (dict(atol=0.0), "atol must be > 0"),
    (dict(rtol=math.nan), "rtol must be > 0"),
    (dict(qd0=jnp.array([0.0, jnp.nan, 0.0])), "qd0: must be finite"),
    (dict(dtmin=-1.0), "dtmin must be > 0"),
    (dict(controller=lambda t, q, qd, d: jnp.zeros(2)), r"controller returns shape \(2,\)"),
    (
        dict(reference=lambda t: jnp.zeros((2, 3))),
        r"reference returns shape \(2, 3\), expected shape \(3,\)",
    ),
    (
        dict(reference=lambda t: jnp.zeros(2)),  # the controller needs q_d of 3
        r"controller fails .*q_d of shape \(2,\)",
    ),
    (
        dict(reference=lambda t: jnp.zeros(1)),
        r"reference returns shape \(1,\), expected shape \(3,\)",
    ),
    (dict(controller=lambda t, q, qd, d: d[0][:2] - q), r"controller fails .*q_d of shape \(3,\)"),
    (dict(solver="rk5"), "solver must be one of"),
    (dict(max_steps=0), "max_steps must be >= 1"),
    (dict(fixed_step=-1e-3), "fixed_step must be > 0"),
]


@pytest.mark.parametrize("override, message", SIM_CASES)
def test_simulate_validates_before_integrating(override, message):
    kw = dict(controller=_pd, reference=_ref, q0=Q, qd0=ZERO, ts=TS)
    kw.update(override)
    with pytest.raises(ValueError, match=message):
        simulate(ARM, kw.pop("controller"), kw.pop("reference"), kw.pop("q0"), kw.pop("qd0"),
                 kw.pop("ts"), **kw)  # fmt: skip


# -- the command line ------------------------------------------------------------------------


def test_cli_checks_the_output_folder_before_computing(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for argv in (
        ["simulate", "--out", str(blocker / "sub")],
        ["simulate", "--machine", "crane", "--out", str(blocker)],
    ):
        with pytest.raises(SystemExit, match="--out: cannot write to"):
            main(argv)


def test_cli_accepts_negative_numbers_as_values():
    assert _negative_values(["simulate", "--eps", "-1e-4", "--K", "-30,60,30", "--quiet"]) == [
        "simulate", "--eps=-1e-4", "--K=-30,60,30", "--quiet"
    ]  # fmt: skip
    args = build_parser().parse_args(_negative_values(["state", "--q", "-0.1,0.35,0.1"]))
    assert isinstance(args, argparse.Namespace) and args.q == "-0.1,0.35,0.1"
    with pytest.raises(SystemExit, match="--eps: expected positive gains, got '-1e-4'"):
        main(["simulate", "--eps", "-1e-4", "--no-plots"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["identify", "log.csv", "--model", "arm", "--cutoff", "-5"],
            "--cutoff: expected a frequency > 0",
        ),
        (
            ["identify", "log.csv", "--model", "arm", "--stride", "0"],
            "--stride: expected an integer >= 1",
        ),
        (["identify", "nope.csv", "--model", "arm"], "no such log file 'nope.csv'"),
        (
            ["identify", "log.csv", "--model", "crane", "--cpu-devices", "0"],
            "--cpu-devices: expected an integer >= 1, got 0",
        ),
        (
            ["identify", "log.csv", "--model", "crane", "--segment-time", "-1"],
            "--segment-time: expected a duration > 0 s",
        ),
        (
            [
                "identify",
                "data/kr300/kr300_traj_A.parquet",
                "--model",
                "kr300",
                "--leakage",
                "--segment-time",
                "2",
            ],
            "--leakage, --segment-time: only for a hydraulic machine's output error",
        ),
        # issue 29: an option of the other identification route is refused, not ignored
        (
            [
                "identify",
                "data/synthetic_crane/synthetic_crane_payload_excitation.parquet",
                "--model",
                "crane",
                "--method",
                "wls",
                "--terms",
                "viscous",
                "--gear-ratios",
                "q1=2",
            ],
            "--method, --terms, --gear-ratios/--torque-constants: only for the regressor route "
            "of a rigid robot; model 'crane' is a hydraulic machine",
        ),
        (
            [
                "identify",
                "data/kr300/kr300_traj_A.parquet",
                "--model",
                "kr300",
                "--mechanics",
                "fixed",
            ],
            "--mechanics: only for a hydraulic machine's output error",
        ),
        (
            [
                "identify",
                "data/kr300/kr300_traj_A.parquet",
                "--model",
                "kr300",
                "--gear-ratios",
                "q1=100,q9=2",
            ],
            r"--gear-ratios: unknown coordinate\(s\) \['q9'\]; the model's coordinates are "
            r"\['q1', 'q2', 'q3', 'q4', 'q5', 'q6'\]",
        ),
        # --cutoff applies to both routes (a hydraulic machine's stage 1 filters too), and is
        # checked against the log's sampling rate before anything is filtered
        (
            ["identify", "data/kr300/kr300_traj_A.parquet", "--model", "kr300", "--cutoff", "200"],
            r"--cutoff: expected below the Nyquist frequency of kr300_traj_A\.parquet "
            r"\(fs/2 = 125 Hz: 2501 samples over 10 s\), got 200 Hz",
        ),
        (
            [
                "identify",
                "data/synthetic_crane/synthetic_crane_payload_excitation.parquet",
                "--model",
                "crane",
                "--cutoff",
                "600",
            ],
            r"--cutoff: expected below the Nyquist frequency of "
            r"synthetic_crane_payload_excitation\.parquet \(fs/2 = 500 Hz: 40001 samples over 40 s\), "
            r"got 600 Hz",
        ),
        (["simulate", "--t-final", "nan"], "--t-final: expected a duration > 0 s, got nan"),
        (["state", "--q", "0.1,nan,0.1"], "--q: expected 3 finite numbers"),
        (["montecarlo", "x.toml", "--samples", "-3"], "--samples: expected an integer >= 1"),
    ],
)
def test_cli_arguments_are_validated(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(argv)


def test_equinox_errors_are_runtime_errors():
    """What the run-time route raises is a RuntimeError (documented in STYLE.md)."""
    f = eqx.filter_jit(lambda x: jaxmb.multibody.checks.check_finite(x, "x"))
    with pytest.raises(RuntimeError, match="x: must be finite"):
        f(jnp.array([jnp.nan]))


_TUNE_CONFIG = "data/montecarlo_section_iv.toml"


def _tune_table(text: str, edit) -> str:
    """The shipped tune configuration with its [tune] table edited: ``edit`` maps the table's
    lines to new lines (None: the table removed)."""
    head, sep, table = text.partition("\n[tune]\n")
    assert sep, "the shipped configuration has a [tune] table"
    lines = edit(table.splitlines())
    return head + ("" if lines is None else "\n[tune]\n" + "\n".join(lines) + "\n")


def _set_key(key, value):
    def edit(lines):
        kept = [x for x in lines if not x.startswith(f"{key} =")]
        return [*kept, f"{key} = {value}"]

    return edit


@pytest.mark.parametrize(
    "edit, options, message",
    [
        (lambda lines: None, [], r"no \[tune\] table: `jaxmb tune` reads its settings there"),
        (lambda lines: None, ["--steps", "3"], r"no \[tune\] table"),  # not made up by --steps
        (_set_key("learning_rate", "-0.1"), [], r"\[tune\] learning_rate: expected a finite "
         r"number > 0, got -0.1"),
        (_set_key("steps", "0"), [], r"\[tune\] steps: expected an integer >= 1, got 0"),
        (lambda lines: lines, ["--steps", "0"], r"\[tune\] steps: expected an integer >= 1, got 0"),
        (_set_key("samples", "2.5"), [], r"\[tune\] samples: expected an integer >= 1, got 2.5"),
        (_set_key("validation_samples", "true"), [], r"\[tune\] validation_samples: expected an "
         r"integer >= 1, got True"),
        (_set_key("t_final", "nan"), [], r"\[tune\] t_final: expected a duration > 0 s, got nan"),
        (_set_key("stepz", "3"), [], r"\[tune\]: unknown key\(s\) \['stepz'\] for scenario "
         r"'section_iv'; expected some of"),
        (_set_key("initial", "3"), [], r"\[tune\] initial: expected a table of gains, got 3"),
    ],
)  # fmt: skip
def test_tune_configurations_are_checked_before_anything_runs(tmp_path, edit, options, message):
    """Issue 29: a tune configuration's [tune] table is present, has no unknown keys, and each
    setting its type and range; a refusal names the key and leaves no output folder."""
    from pathlib import Path

    cfg = tmp_path / "tune.toml"
    cfg.write_text(_tune_table(Path(_TUNE_CONFIG).read_text(), edit))
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=message):
        main(["tune", str(cfg), "--out", str(out), "--quiet", *options])
    assert not out.exists()


_KR300_A = "data/kr300/kr300_traj_A.parquet"
_CRANE_LOG = "data/synthetic_crane/synthetic_crane_payload_excitation.parquet"


def _gap(t):
    keep = np.ones(t.size, bool)
    keep[t.size // 3 : t.size // 3 + 100] = False  # 100 samples lost in transmission
    return keep, t


def _jitter(t):
    return np.ones(t.size, bool), t + np.random.default_rng(0).normal(0.0, 0.05, t.size) * (
        t[1] - t[0]
    )


def _repeated(t):
    t = t.copy()
    t[50] = t[49]
    return np.ones(t.size, bool), t


def _gaps_every_second(t):
    keep = np.ones(t.size, bool)
    for k in range(250, t.size, 250):  # 5 samples (20 ms at 250 Hz) lost every second
        keep[k : k + 5] = False
    return keep, t


@pytest.mark.parametrize(
    "source, model, role, defect, extra, message",
    [
        (_KR300_A, "kr300", "fit", _gap, ["--resample", "off"], r"bad\.parquet: column 't': not "
         r"uniformly sampled \(2401 samples at a median interval of 0\.004 s; 1 gap\(s\), the "
         r"longest 0\.404 s from t = 3\.328 s\).*drop --resample off.*--resample auto, the "
         r"default.*--window"),
        (_KR300_A, "kr300", "validate", _jitter, ["--resample", "off"], r"bad\.parquet: column "
         r"'t': not uniformly sampled \(2501 samples .*time stamps jittered by up to"),
        (_KR300_A, "kr300", "fit", _gaps_every_second, [], r"bad\.parquet: column 't': no "
         r"gap-free stretch of at least 1\.2 s between the 9 gap\(s\) longer than 0\.01 s"),
        (_KR300_A, "kr300", "fit", _repeated, [], r"bad\.parquet: log has 1 problem:\n- column 't': "
         r"duplicated time stamp at index 50"),
        (_CRANE_LOG, "crane", "validate", _gap, [], r"bad\.parquet: column 't': not uniformly "
         r"sampled \(39901 samples at a median interval of 0\.001 s; 1 gap\(s\)"),
        (_CRANE_LOG, "crane", "fit", _jitter, [], r"bad\.parquet: column 't': not uniformly "
         r"sampled .*jittered"),
        (_CRANE_LOG, "crane", "fit", _jitter, ["--resample", "auto"], r"--resample: only for the "
         r"regressor route"),
    ],
)  # fmt: skip
def test_logs_with_gaps_jitter_or_repeated_times_are_refused_up_front(
    tmp_path, source, model, role, defect, extra, message
):
    """Issue 29, point 3: a fit or --validate log with a gap, jittered time stamps or a
    repeated time is refused before anything compiles, naming the file and the counts, and
    nothing is written, where it cannot be used: the hydraulic route's, the regressor route's
    with --resample off, or one whose gaps leave no stretch long enough to filter (issue 31:
    the regressor route splits and resamples the rest itself)."""
    import shutil
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    keep, t = defect(table["t"].to_numpy())
    table = table.set_column(0, "t", pa.array(t)).filter(pa.array(keep))
    bad = tmp_path / "bad.parquet"
    pq.write_table(table, bad)
    shutil.copy(Path(source).with_suffix(".json"), bad.with_suffix(".json"))
    fit, others = (str(bad), []) if role == "fit" else (source, ["--validate", str(bad)])
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=message):
        main(["identify", fit, "--model", model, "--out", str(out), "--quiet", *others, *extra])
    assert not out.exists()


_GAINS = {"scenario": "section_iv", "gains": {"K": [300.0, 300.0, 300.0]}}


@pytest.mark.parametrize(
    "files, argv, message",
    [
        ({"p.json": "{oops"}, ["simulate", "--machine", "crane", "--params", "{p.json}"],
         r"--params: .*p\.json is not JSON"),
        ({"p.json": {"parameters": {"cylinder.lift.zzz": 1.0}}},
         ["simulate", "--machine", "crane", "--params", "{p.json}"],
         r"--params: .*p\.json is not a jaxmb parameter file \(format != 'jaxmb-params'\)"),
        ({"p.json": {"format": "jaxmb-params", "version": 1, "model": "crane", "bodys": {}}},
         ["simulate", "--machine", "crane", "--params", "{p.json}"],
         r"--params: .*p\.json: unknown key\(s\) \['bodys'\]; a parameter file has \['bodies', "),
        ({"p.json": {"format": "jaxmb-params", "version": 1, "model": "crane",
                     "hydraulics": {"valve.boom.c_pa": 1e-8}}},
         ["simulate", "--machine", "crane", "--params", "{p.json}"],
         r"--params: hydraulics: .*no actuator 'boom'"),
        ({"g.json": "{oops"}, ["simulate", "--gains", "{g.json}"],
         r"gains file '.*g\.json': cannot read JSON"),
        ({"g.json": {**_GAINS, "scenario": "crane"}}, ["simulate", "--gains", "{g.json}"],
         r"gains file .*g\.json: expected \{'scenario': 'section_iv', 'gains': \{...\}\}, got "
         r"scenario 'crane'"),
        ({"g.json": {**_GAINS, "gains": {"K": [300.0, 300.0]}}}, ["simulate", "--gains", "{g.json}"],
         r"gains file .*g\.json: RobustController\.K: expected shape \(3,\), got \(2,\)"),
        ({"g.json": {**_GAINS, "gains": {"K": [-1.0, 2.0, 3.0]}}}, ["simulate", "--gains", "{g.json}"],
         r"gains file .*g\.json: RobustController\.K: must be > 0"),
        ({"g.json": {**_GAINS, "gains": {"Kp": [1.0, 2.0, 3.0]}}}, ["simulate", "--gains", "{g.json}"],
         r"gains file .*g\.json: unknown key\(s\) \['Kp'\]"),
        ({"c.csv": "t,u_lift\n0,0\n1,1\n"},
         ["simulate", "--machine", "crane", "--commands", "{c.csv}"],
         r"--commands: .*c\.csv: missing column\(s\) \['u_tilt'\]; the header is \['t', 'u_lift'\]"),
        ({"s.toml": "[study]\nscenario = 'section_iv'\n[foo]\nx = 1\n"}, ["montecarlo", "{s.toml}"],
         r"config .*s\.toml: unknown key\(s\) \['foo'\]; expected some of \['controller', "),
        ({"v.csv": "t,q1,q2,q3,q4,q5,q6\n" + "".join(  # joint angles but no forces
            f"{k * 0.004}" + f",{math.sin(0.01 * k)}" * 6 + "\n" for k in range(100))},
         ["identify", _KR300_A, "--model", "kr300", "--validate", "{v.csv}"],
         r"v\.csv: log: no generalized force for coordinate 'q1': expected column 'tau_q1'"),
        ({}, ["identify", _KR300_A, "--model", "kr300", "--window", "50,60"],
         r"--window: kr300_traj_A\.parquet: no samples in \[50\.0, 60\.0\] s; the log spans "
         r"\[0\.0, 9\.99"),
        ({}, ["identify", _KR300_A, "--model", "kr300", "--window", "5,2"],
         r"--window: expected T0,T1 with T0 < T1, got '5,2'"),
    ],
)  # fmt: skip
def test_input_files_and_options_are_checked_before_anything_runs(tmp_path, files, argv, message):
    """Issue 29, point 1: each input file's content (parameters, gains, commands, study
    configuration) and each option against its log is checked before anything compiles; the
    message names the file or option and what was expected, and no output folder is left."""
    import json

    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content)
        (tmp_path / name).write_text(text)
    argv = [str(tmp_path / a[1:-1]) if a[1:-1] in files else a for a in argv]
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=message):
        main([*argv, "--out", str(out), "--quiet"])
    assert not out.exists()
