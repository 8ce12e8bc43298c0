"""A pressure transducer's offset (`PressureTransducers`) and an encoder's (`HydraulicPlant`'s
``encoders``) as plant leaves: selected by name, additive in identification's theta, read
from and written to parameter files, and applied only where a simulation meets a log
(`output_error.reading_offsets`)."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb.actuators.hydraulics import PressureTransducers
from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification import output_error as oe
from jaxmb.io.params_file import apply_hydraulics
from jaxmb.models.crane import lift_tilt_crane_plant


@pytest.fixture(scope="module")
def plant():
    return lift_tilt_crane_plant()


def test_offsets_are_additive_leaves_in_one_bar_steps(plant):
    """Zero by default; ``nominal + 1 bar x theta`` in identification (either sign), with a
    std of 1 bar per unit of theta's."""
    spec = oe.HydraulicParameters(("sensor.lift.p_a", "sensor.tilt.p_b", "valve.lift.c_pa"))
    assert [oe.is_additive(n) for n in spec.names] == [True, True, False]
    assert oe.additive_step("sensor.lift.p_a") == 1e5
    np.testing.assert_array_equal(oe.initial_theta(plant, spec), 0.0)
    p = oe.plant_with(jnp.array([0.5, -0.25, 0.0]), plant, spec)
    assert float(p.actuator("lift").sensor.p_a) == 0.5e5
    assert float(p.actuator("tilt").sensor.p_b) == -0.25e5
    assert float(p.actuator("lift").sensor.p_b) == 0.0  # the others untouched
    vals = oe.parameter_values(jnp.array([0.5, -0.25, 0.0]), plant, spec)
    assert vals["sensor.tilt.p_b"] == -0.25e5
    assert oe.value_std(np.array([0.1, 0.1, 0.1]), spec, vals)["sensor.lift.p_a"] == 1e4
    names = ("q1", "p_a_lift", "p_b_tilt", "u_lift")
    np.testing.assert_array_equal(oe.reading_offsets(p, names), [0.0, 0.5e5, -0.25e5, 0.0])


def test_offsets_round_trip_through_a_parameter_file_and_bad_ones_are_named(plant):
    p = apply_hydraulics(plant, {"hydraulics": {"sensor.lift.p_b": -3.5e4, "sensor.tilt.p_a": 2e4}})
    assert float(p.actuator("lift").sensor.p_b) == -3.5e4
    assert float(p.actuator("tilt").sensor.p_a) == 2e4
    with pytest.raises(ValueError, match=r"hydraulics\['sensor.lift.p_a'\]: expected a finite"):
        apply_hydraulics(plant, {"hydraulics": {"sensor.lift.p_a": float("nan")}})
    with pytest.raises(
        ValueError, match="PressureTransducers of actuator 'lift' has no leaf 'p_c'"
    ):
        apply_hydraulics(plant, {"hydraulics": {"sensor.lift.p_c": 1.0}})
    with pytest.raises(ValueError, match="no actuator 'boom'"):
        apply_hydraulics(plant, {"hydraulics": {"sensor.boom.p_a": 1.0}})
    with pytest.raises(ValueError, match=r"PressureTransducers: p_a \(offset, Pa\) must be finite"):
        PressureTransducers(p_a=np.inf)


def test_encoder_offsets_are_additive_leaves_in_centirad_steps(plant):
    """One per coordinate, zero by default; ``nominal + 1e-2 x theta`` (rad, or m on a sliding
    coordinate) in identification; read as the coordinate's offset (`reading_offsets`)."""
    assert [float(e) for e in plant.encoders] == [0.0, 0.0]
    spec = oe.HydraulicParameters(("encoder.q2.offset", "sensor.lift.p_a"))
    assert oe.is_additive("encoder.q2.offset") and oe.additive_step("encoder.q2.offset") == 1e-2
    np.testing.assert_array_equal(oe.initial_theta(plant, spec), 0.0)
    p = oe.plant_with(jnp.array([-2.5, 1.0]), plant, spec)
    assert [float(e) for e in p.encoders] == [0.0, -2.5e-2]
    vals = oe.parameter_values(jnp.array([-2.5, 1.0]), plant, spec)
    assert vals["encoder.q2.offset"] == -2.5e-2
    assert oe.value_std(np.array([0.1, 0.1]), spec, vals)["encoder.q2.offset"] == 1e-3
    names = ("q1", "q2", "p_a_lift", "u_lift")
    np.testing.assert_array_equal(oe.reading_offsets(p, names), [0.0, -2.5e-2, 1e5, 0.0])


def test_encoder_offsets_round_trip_through_a_parameter_file_and_bad_ones_are_named(plant):
    p = apply_hydraulics(plant, {"hydraulics": {"encoder.q1.offset": -0.004}})
    assert float(p.encoders[0]) == -0.004 and float(p.encoders[1]) == 0.0
    with pytest.raises(ValueError, match=r"hydraulics\['encoder.q1.offset'\]: expected a finite"):
        apply_hydraulics(plant, {"hydraulics": {"encoder.q1.offset": float("inf")}})
    with pytest.raises(ValueError, match="an encoder's field is 'offset'"):
        apply_hydraulics(plant, {"hydraulics": {"encoder.q1.gain": 1.0}})
    with pytest.raises(ValueError, match=r"a coordinate of \('q1', 'q2'\)"):
        apply_hydraulics(plant, {"hydraulics": {"encoder.lift.offset": 1.0}})
    with pytest.raises(ValueError, match="one offset per coordinate"):
        HydraulicPlant(plant.model, plant.actuators, encoders=(0.0,))
    with pytest.raises(ValueError, match=r"encoders\[1\] \(offset of 'q2'\) must be finite"):
        HydraulicPlant(plant.model, plant.actuators, encoders=(0.0, np.nan))
    # a plant rebuilt without its logged supply keeps its encoders
    assert float(p.constant_supply().encoders[0]) == -0.004
