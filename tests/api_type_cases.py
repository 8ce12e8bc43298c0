"""The public API's type checks (issue 29, point 4), one row per argument and kind of
mistake: ``(call, error type, message regex)``. Each row must raise exactly that error, with a
message that names the argument and what it expects.

Run as a script (``python tests/api_type_cases.py``), as a user calls the library: the test
suite's runtime type checker (jaxtyping's import hook with beartype, pyproject's addopts) would
answer a mistyped annotated argument first, in its own words, so tests/test_bad_input.py runs
this file in a process of its own."""

import re
import sys

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxmb  # noqa: E402
import jaxmb.identification  # noqa: E402
import jaxmb.identification.mechanics  # noqa: E402
import jaxmb.identification.output_error as _oe  # noqa: E402
import jaxmb.identification.rigid as _rigid  # noqa: E402
import jaxmb.simulation.sampled  # noqa: E402
from jaxmb.simulation import simulate  # noqa: E402

ARM = jaxmb.models.series_parallel_3dof()
RPR = jaxmb.models.rpr3()
CRANE = jaxmb.models.lift_tilt_crane_plant()
LOG = jaxmb.identification.Log(np.linspace(0.0, 1.0, 11), {"q1": np.zeros(11)})
Q3 = [0.1, 0.35, 0.1]
TS = jnp.linspace(0.0, 0.1, 3)
_REAL = r"expected real numbers \(a float, or an array or list of floats\), got "


def _pd(t, q, qd, desired):
    return 100.0 * (desired[0] - q) - 20.0 * qd


def _ref(t):
    return jnp.array(Q3) + 0.0 * t


CASES = [
    # constructors
    (
        lambda: jaxmb.Body("b", "F1", "2.0", [0.0] * 3, np.eye(3)),
        rf"body 'b': mass: {_REAL}str '2.0'",
    ),
    (
        lambda: jaxmb.Body("b", "F1", 1.0, [0.0] * 3, [["a"] * 3] * 3),
        rf"body 'b': inertia: {_REAL}list of strings",
    ),
    (
        lambda: jaxmb.Body("b", "F1", 1.0, [0.0, 0.0, 1j], np.eye(3)),
        rf"body 'b': com: {_REAL}list of complex128",
    ),
    (
        lambda: jaxmb.Body("b", 3, 1.0, [0.0] * 3, np.eye(3)),
        r"body 'b': frame: expected a frame name \(a non-empty string\), got int 3",
    ),
    (
        lambda: jaxmb.Frame("f", None),
        r"frame 'f': parent: expected a frame name .*, got NoneType None",
    ),
    (lambda: jaxmb.Frame("f", translation="abc"), rf"frame 'f': translation: {_REAL}str 'abc'"),
    (lambda: jaxmb.Model("abc", ()), r"model: frames: expected a sequence of Frame, got str 'abc'"),
    (
        lambda: jaxmb.Model(ARM.frames, [ARM.frames[0]]),
        r"model: bodies: expected Body instances, got Frame",
    ),
    (
        lambda: jaxmb.Model(ARM.frames, ARM.bodies, gravity=["0", "0", "-9.81"]),
        rf"model: gravity: {_REAL}list of strings",
    ),
    (
        lambda: jaxmb.Model(ARM.frames, ARM.bodies, coordinate_map=len),
        r"model: coordinate_map must be a CoordinateMap, got builtin_function",
    ),
    # the dynamics
    (lambda: jaxmb.mass_matrix("arm", Q3), r"mass_matrix: model: expected a Model, got str 'arm'"),
    (lambda: jaxmb.mass_matrix(ARM, ["0.1", "0.35", "0.1"]), rf"q: {_REAL}list of strings \['0.1'"),
    (lambda: jaxmb.mass_matrix(ARM, np.array(Q3, complex)), rf"q: {_REAL}ndarray of complex128"),
    (lambda: jaxmb.mass_matrix(ARM, None), r"mass_matrix: q: expected real numbers, got None"),
    (
        lambda: jaxmb.bias_forces(ARM, Q3, [[0.0], [1.0, 2.0]]),
        rf"qd: {_REAL}list \[\[0.0\], \[1.0, 2.0\]\]",
    ),
    (lambda: jaxmb.forward_dynamics(ARM, Q3, Q3, "abc"), rf"tau: {_REAL}str 'abc'"),
    (
        lambda: jaxmb.forward_dynamics(ARM, Q3, Q3, Q3, [0.0] * 6),
        r"wrenches: expected a mapping from frame names to 6-vector wrenches \[moment; force\], got list",
    ),
    (
        lambda: jaxmb.forward_dynamics(ARM, Q3, Q3, Q3, {"F3": "up"}),
        rf"wrench on frame 'F3': {_REAL}str 'up'",
    ),
    (
        lambda: jaxmb.frame_jacobian(RPR, Q3, "F3"),
        r"frame_jacobian: model: expected a Model, got ConstrainedSystem",
    ),
    (
        lambda: jaxmb.constraints.projection.projector(ARM, jnp.zeros(7)),
        r"projector: system: expected a ConstrainedSystem, got Model",
    ),
    (
        lambda: jaxmb.vdc.actuator_forces(ARM, Q3, Q3, Q3),
        r"actuator_forces: chain: expected a VDCChain, got Model",
    ),
    # simulate
    (
        lambda: simulate("arm", _pd, _ref, Q3, Q3, TS),
        r"simulate: plant: expected a Model, a ConstrainedSystem or an AbstractPlant, got str",
    ),
    (
        lambda: simulate(ARM, 3, _ref, Q3, Q3, TS),
        r"simulate: controller: expected a callable .*, got int",
    ),
    (
        lambda: simulate(ARM, _pd, Q3, Q3, Q3, TS),
        r"simulate: reference: expected a callable t -> q_d or None, got list",
    ),
    (lambda: simulate(ARM, _pd, _ref, "abc", Q3, TS), rf"simulate: q0: {_REAL}str 'abc'"),
    (
        lambda: simulate(ARM, _pd, _ref, Q3, Q3, ["0", "1"]),
        rf"simulate: ts: {_REAL}list of strings",
    ),
    (
        lambda: jaxmb.simulation.sampled.simulate_sampled(
            ARM, _pd, _ref, "abc", Q3, t_final=0.1, h=1e-3
        ),
        rf"simulate_sampled: q0: {_REAL}str",
    ),
    # identification
    (
        lambda: jaxmb.identification.read_log(3),
        r"read_log: path: expected str or PathLike, got int 3",
    ),
    (lambda: jaxmb.identification.Log("abc", {}), rf"column 't': {_REAL}str 'abc'"),
    (
        lambda: jaxmb.identification.Log([0.0, 1.0], {"q1": ["a", "b"]}),
        rf"column 'q1': {_REAL}list of strings",
    ),
    (
        lambda: jaxmb.identification.Log([0.0, 1.0], [("q1", [0.0, 1.0])]),
        r"Log: signals: expected a mapping name -> array, got list",
    ),
    (
        lambda: jaxmb.identification.validate_log("log.csv", None),
        r"validate_log: log: expected Log, got str 'log.csv'",
    ),
    (
        lambda: _rigid.identify_rigid("kr300", None),
        r"identify_rigid: model: expected Model, got str 'kr300'",
    ),
    (
        lambda: _rigid.identify_rigid(ARM, "log.csv"),
        r"identify_rigid: log \(read a file with jaxmb.identification.read_log\): expected Log, got str",
    ),
    (
        lambda: _rigid.identify_rigid(ARM, LOG, cutoff="10"),
        r"identify_rigid: cutoff \(Hz\): expected a finite number > 0, got str '10'",
    ),
    (
        lambda: _rigid.identify_rigid(ARM, LOG, stride=2.5),
        r"identify_rigid: stride: expected an integer >= 1, got float 2.5",
    ),
    (
        lambda: _rigid.identify_rigid(ARM, LOG, terms="viscous"),
        r"identify_rigid: terms: expected a sequence of term names, got str 'viscous'",
    ),
    (
        lambda: _rigid.identify_rigid(ARM, LOG, coulomb_width=True),
        r"identify_rigid: coulomb_width \(rad/s\): expected a finite number > 0, got bool True",
    ),
    (
        lambda: _rigid.predict_torques(None, LOG),
        r"predict_torques: result: expected RigidIdentification, got NoneType",
    ),
    (
        lambda: jaxmb.identification.mechanics.identify_mechanics("crane", LOG),
        r"identify_mechanics: machine \(see jaxmb.io.machine\): expected Machine, got str",
    ),
    (
        lambda: _oe.make_segments(CRANE, LOG),
        r"make_segments: log \(columns by name; .*\): expected Mapping, got Log",
    ),
    (
        lambda: _oe.make_segments(CRANE, {}, segment_time=-0.5),
        r"make_segments: segment_time \(s\): expected a finite number > 0, got -0.5",
    ),
    (
        lambda: _oe.fit(CRANE, "all", None),
        r"fit: spec: expected HydraulicParameters, got str 'all'",
    ),
    (lambda: _oe.predict("crane", {}), r"predict: plant: expected HydraulicPlant, got str"),
]


def failures() -> list[str]:
    """Every row whose call does not raise its error with its message."""
    out = []
    for i, (call, message) in enumerate(CASES):
        kind = ValueError if "expected a finite number > 0, got -" in message else TypeError
        try:
            call()
        except Exception as e:  # noqa: BLE001
            if not isinstance(e, kind):  # any other outcome is a failure to report
                out.append(f"row {i}: expected {kind.__name__}, got {type(e).__name__}: {e}")
            elif not re.search(message, str(e)):
                out.append(f"row {i}: message {str(e)!r} does not match {message!r}")
        else:
            out.append(f"row {i}: no error (expected {message!r})")
    return out


if __name__ == "__main__":
    bad = failures()
    print("\n".join(bad) if bad else f"all {len(CASES)} rows passed")
    sys.exit(1 if bad else 0)
