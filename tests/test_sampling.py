"""Distributions over perturbed models (jaxmb.control.sampling): per-index reproducibility, the
marginals and the Gaussian copula's correlation against their definitions, leaf addressing and
the errors of bad specifications."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb
from jaxmb.control.sampling import (
    Distribution,
    Parameter,
    leaf_getter,
    nominal_value,
    with_leaves,
    with_point_mass,
)

DIST = Distribution.from_pairs(
    [
        Parameter("a", spread=0.1),
        Parameter("b", "normal", spread=0.2),
        Parameter("c", "range", low=-1.0, high=3.0),
    ],
    [("a", "b", 0.6)],
)
NOMINAL = jnp.array([2.0, 5.0, 0.0])


@pytest.fixture(scope="module")
def draws():
    return DIST.sample(NOMINAL, 7, np.arange(20000))


def test_a_sample_depends_on_seed_and_index_alone(draws):
    one = DIST.sample(NOMINAL, 7, [1234])[0]
    np.testing.assert_array_equal(one, draws[1234])  # bitwise, whatever is drawn beside it
    np.testing.assert_array_equal(DIST.sample(NOMINAL, 7, [5, 1234, 9])[1], one)
    other_seed = DIST.sample(NOMINAL, 8, [1234])[0]
    assert not np.allclose(one, other_seed)


def test_marginals(draws):
    a, b, c = draws.T
    # uniform 2 (1 +- 0.1): range and variance (b - a)^2 / 12
    assert a.min() >= 1.8 and a.max() <= 2.2
    np.testing.assert_allclose(a.var(), 0.4**2 / 12, rtol=0.05)
    # normal: 5 (1 + 0.2 z)
    np.testing.assert_allclose(b.mean(), 5.0, atol=0.03)
    np.testing.assert_allclose(b.std(), 1.0, rtol=0.03)
    assert c.min() >= -1 and c.max() <= 3
    np.testing.assert_allclose(c.mean(), 1.0, atol=0.03)


def test_copula_correlation(draws):
    a, b, c = draws.T
    # Gaussian copula: a = F(Phi(z1)), z1, z2 correlated 0.6; for a uniform marginal the
    # Pearson correlation with the normal one is rho * sqrt(3 / pi) (closed form)
    r_ab = np.corrcoef(a, b)[0, 1]
    np.testing.assert_allclose(r_ab, 0.6 * np.sqrt(3 / np.pi), atol=0.02)
    assert abs(np.corrcoef(a, c)[0, 1]) < 0.03


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Parameter("x", "gauss"), "distribution must be one of"),
        (lambda: Parameter("x", spread=1.5), "uniform spread must be < 1"),
        (lambda: Parameter("x", spread=-0.1), "spread must be a finite number >= 0"),
        (lambda: Parameter("x", "range", low=2.0, high=1.0), "need high >= low"),
        (lambda: Distribution((Parameter("x"), Parameter("x"))), "listed twice"),
        (
            lambda: Distribution.from_pairs([Parameter("x")], [("x", "y", 0.5)]),
            "'y' is not a perturbed parameter",
        ),
        (
            lambda: Distribution(
                (Parameter("x"), Parameter("y"), Parameter("z")),
                ((1.0, 0.9, 0.9), (0.9, 1.0, -0.9), (0.9, -0.9, 1.0)),
            ),
            "not positive definite",
        ),
    ],
)
def test_bad_specifications_name_what_is_wrong(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_leaves_of_models_and_plants():
    arm = jaxmb.models.series_parallel_3dof(full=True)
    heavier = with_leaves(arm, {"body.link1.mass": 66.0, "body.link2.inertia": 1.1})
    assert float(heavier.body("link1").mass) == 66.0
    np.testing.assert_allclose(heavier.body("link2").inertia, 1.1 * arm.body("link2").inertia)
    assert nominal_value(arm, "body.link2.inertia") == 1.0
    crane = with_point_mass(jaxmb.models.lift_tilt_crane_plant(), "payload", "tool", 0.0)
    assert float(leaf_getter(crane, "body.payload.mass")(crane)) == 0.0
    c2 = with_leaves(crane, {"valve.lift.c_pa": 1e-8, "cylinder.tilt.beta": 1e9})
    assert float(c2.actuators[0].valve.c_pa) == 1e-8
    assert float(c2.actuators[1].cylinder.beta) == 1e9
    for name, match in [
        ("body.nope.mass", "no body 'nope'"),
        ("body.link1.colour", "'mass' or 'inertia'"),
        ("valve.lift.c_pa", "only 'body"),
        ("mass", "expected '<part>.<name>.<field>'"),
    ]:
        with pytest.raises(ValueError, match=match):
            leaf_getter(arm, name)
    with pytest.raises(ValueError, match="no actuator 'boom'"):
        leaf_getter(crane, "valve.boom.c_pa")
    with pytest.raises(ValueError, match="has no leaf 'c_xx'"):
        leaf_getter(crane, "valve.lift.c_xx")
