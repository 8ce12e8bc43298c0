"""Model construction: validation errors name the field; reconfiguration is local."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import body_mass_matrices, mass_matrix

import jaxmb
from jaxmb import Body, Frame, Model

I3 = np.eye(3)


def two_link(**body_kw):
    frames = [
        Frame("L1", joint="revolute", axis=[0, 0, 1], coordinate="q1"),
        Frame(
            "L2", "L1", translation=[1, 0, 0], joint="prismatic", axis=[1, 0, 0], coordinate="q2"
        ),
    ]
    kw = dict(name="boom", frame="L2", mass=2.0, com=[0.5, 0, 0], inertia=0.1 * I3)
    kw.update(body_kw)
    return Model(frames, [Body("base", "L1", 1.0, [0, 0, 0], I3), Body(**kw)])


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(mass=0.0), "body 'boom': mass"),
        (dict(mass=-1.0), "body 'boom': mass"),
        (dict(mass=np.nan), "body 'boom': mass"),
        (dict(com=[0, np.inf, 0]), "body 'boom': com must be finite"),
        (dict(com=[0, 0]), r"body 'boom': com: expected shape \(3,\)"),
        (
            dict(inertia=[[1, 0.5, 0], [0, 1, 0], [0, 0, 1]]),
            "body 'boom': inertia",
        ),  # not symmetric
        (dict(inertia=np.diag([1.0, -1.0, 1.0])), "body 'boom': inertia"),  # not PD
        (dict(inertia=np.diag([1.0, 1.0, 3.0])), "body 'boom': inertia"),  # 1 + 1 < 3: triangle
        (dict(inertia=np.diag([1.0, np.nan, 1.0])), "body 'boom': inertia"),
        (dict(inertia=np.eye(2)), r"body 'boom': inertia: expected shape \(3, 3\)"),
        (dict(frame="nowhere"), "body 'boom': unknown frame 'nowhere'"),
    ],
)
def test_body_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        two_link(**kw)


def test_frame_validation():
    with pytest.raises(ValueError, match="frame 'L1': axis must be finite and non-zero"):
        Frame("L1", joint="revolute", axis=[0, 0, 0], coordinate="q1")
    with pytest.raises(ValueError, match="frame 'L1': a revolute joint needs an axis"):
        Frame("L1", joint="revolute", coordinate="q1")
    with pytest.raises(ValueError, match="frame 'L1': joint must be one of"):
        Frame("L1", joint="spherical", axis=[1, 0, 0], coordinate="q1")
    with pytest.raises(ValueError, match="frame 'L1': rotation must be a finite proper rotation"):
        Frame("L1", rotation=np.diag([1.0, 1.0, -1.0]))
    with pytest.raises(ValueError, match="frame 'L1': rotation must be a finite proper rotation"):
        Frame("L1", rotation=2 * I3)
    with pytest.raises(ValueError, match="frame 'L1': translation must be finite"):
        Frame("L1", translation=[0, np.nan, 0])
    with pytest.raises(ValueError, match="frame 'L1': a fixed frame takes no coordinate"):
        Frame("L1", coordinate="q1")
    with pytest.raises(ValueError, match="reserved for the inertial frame"):
        Frame("S")
    f = Frame("L1", joint="revolute", axis=[0, 0, 2.0], coordinate="q1")
    np.testing.assert_allclose(f.axis, [0, 0, 1])  # normalised


def test_model_validation():
    a = Frame("A", joint="revolute", axis=[0, 0, 1], coordinate="q1")
    body = Body("b", "A", 1.0, [0, 0, 0], I3)
    with pytest.raises(ValueError, match="frame 'B': unknown parent 'X'"):
        Model([a, Frame("B", "X")], [body])
    with pytest.raises(ValueError, match="duplicate frame names"):
        Model([a, a], [body])
    with pytest.raises(ValueError, match="duplicate body names"):
        Model([a], [body, body])
    with pytest.raises(ValueError, match="form a loop"):
        Model([Frame("A", "B"), Frame("B", "A")], [])
    with pytest.raises(ValueError, match="duplicate frame names"):
        Model([a], [Body("b", "A", 1.0, [0, 0, 0], I3, com_frame="A")])
    with pytest.raises(ValueError, match="model: gravity must be finite"):
        Model([a], [body], gravity=[0, 0, np.nan])
    with pytest.raises(ValueError, match="coordinate 'q1' is not among"):
        Model([a], [body], augmented_names=("x",))
    with pytest.raises(ValueError, match="coordinate_map returns shape"):
        Model([a], [body], coordinate_map=jaxmb.models.TriangleLoop())


def test_shape_errors_name_the_argument(arm):
    # jaxtyping's runtime check (on in the tests) raises TypeError first; without it, ValueError
    with pytest.raises((ValueError, TypeError), match=r"q: expected shape \(3,\)|parameter 'q'"):
        jaxmb.mass_matrix(arm, jnp.zeros(2))
    with pytest.raises((ValueError, TypeError), match=r"qd: expected shape|parameter 'qd'"):
        jaxmb.bias_forces(arm, jnp.zeros(3), jnp.zeros(4))
    with pytest.raises((ValueError, TypeError), match=r"expected shape \(6,\)|parameter 'wrench'"):
        jaxmb.wrench_forces(arm, jnp.array([0, 0.3, 0.1]), "F3", jnp.zeros(3))
    with pytest.raises(ValueError, match=r"q: expected shape \(3,\)"):  # not type-annotated
        jaxmb.rnea(arm, jnp.zeros(2), jnp.zeros(2), jnp.zeros(2))
    with pytest.raises(ValueError, match="unknown frame 'F9'"):
        jaxmb.frame_pose(arm, jnp.array([0, 0.3, 0.1]), "F9")
    with pytest.raises(ValueError, match="method: expected one of"):
        jaxmb.inverse_dynamics(arm, jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), method="aba")


def test_traced_construction_checks_at_run_time():
    """Under jit the same checks run through equinox.error_if."""

    @eqx.filter_jit
    def build(m):
        return mass_matrix(two_link(mass=m), jnp.zeros(2))

    assert np.isfinite(build(jnp.asarray(2.0))).all()
    with pytest.raises(RuntimeError, match="body 'boom': mass"):
        jax.block_until_ready(build(jnp.asarray(-2.0)))


def test_reconfiguring_one_body_changes_only_its_gamma(arm):
    """Dastranj & Mattila (2026) Section II-B: a local change stays local."""
    q = jnp.array([0.3, 0.4, 0.12])
    before = np.asarray(body_mass_matrices(arm, q))
    new = jaxmb.replace_body(arm, "link1", mass=70.0, com=[1.0, 0.0, -0.05])
    after = np.asarray(body_mass_matrices(new, q))
    changed = [not np.allclose(a, b, rtol=0, atol=0) for a, b in zip(after, before, strict=True)]
    assert changed == [False, True, False]
    np.testing.assert_allclose(
        mass_matrix(new, q) - mass_matrix(arm, q), after[1] - before[1], atol=1e-11
    )
    with pytest.raises(ValueError, match="body 'link1': mass"):
        jaxmb.replace_body(arm, "link1", mass=-1.0)
    with pytest.raises(ValueError, match="unknown body 'link9'"):
        jaxmb.replace_body(arm, "link9", mass=1.0)


def test_replacing_a_placement_changes_only_bodies_below_it(arm):
    q = jnp.array([0.3, 0.4, 0.12])
    before = np.asarray(body_mass_matrices(arm, q))
    new = jaxmb.replace_placement(arm, "F2", translation=[2.2, 0.0, 0.0])  # longer link 1
    after = np.asarray(body_mass_matrices(new, q))
    changed = [not np.allclose(a, b, rtol=0, atol=0) for a, b in zip(after, before, strict=True)]
    assert changed == [False, False, True]
    tool = jaxmb.replace_placement(arm, "F3", translation=[2.5, 0.0, 0.0])  # tool frame: no mass
    np.testing.assert_array_equal(body_mass_matrices(tool, q), before)
    with pytest.raises(ValueError, match="frame 'F2': rotation"):
        jaxmb.replace_placement(arm, "F2", rotation=np.zeros((3, 3)))
