"""Machines from files (URDF + TOML machine file, `jaxmb.io.machine`): the crane's files
against the spec typed in and built by hand (closed-form planar loops), the loops of a 3-D
machine with a prismatic joint closed by kinematics, its energy conserved with the valves shut,
and every bad machine file refused by name before anything compiles."""

import re
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import SPEC_CRANE, spec_crane_plant

import jaxmb
from jaxmb.actuators.hydraulics import HydraulicActuator
from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.io.logs import LogError, write_log
from jaxmb.io.machine import MachineFileError, check_reach, load_machine, machine_path

KNUCKLE = Path(__file__).parent.parent / "data/machines/knuckle_telescope/knuckle_telescope.toml"
# float64 between two exact formulations of the same plant: round-off only
RTOL = 1e-11


def _states(rng, plant, n):
    lo, hi = np.array([-0.4, -0.75]), np.array([1.4, 0.65])
    out = []
    for _ in range(n):
        q = jnp.asarray(rng.uniform(lo, hi))
        y = plant.initial_state(q, jnp.asarray(rng.normal(size=2)))
        acts = {
            a: {k: v + rng.uniform(-20e5, 20e5) for k, v in s.items()}
            for a, s in y["actuators"].items()
        }
        out.append(({**y, "actuators": acts}, jnp.asarray(rng.uniform(-10, 10, 2))))
    return out


@pytest.mark.parametrize("payload", [0.0, 60.0])
def test_crane_files_match_the_spec_built_by_hand(payload):
    """The shipped crane files, read by the generic loader (URDF tree, cylinder loops through
    the tree's kinematics), give the plant of the spec typed in and built with closed-form
    planar loop geometry: vector field, pistons and mass matrix to round-off."""
    ours = load_machine("crane", payload=payload).plant
    ref = spec_crane_plant(payload=payload)
    rng = np.random.default_rng(3)
    for y, u in _states(rng, ref, 4):
        f_ours, f_ref = ours.vector_field(0.0, y, u), ref.vector_field(0.0, y, u)
        for a, b in zip(jax.tree.leaves(f_ours), jax.tree.leaves(f_ref), strict=True):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=1e-9 * float(jnp.abs(b).max()))
        np.testing.assert_allclose(
            jaxmb.mass_matrix(ours.model, y["q"]), jaxmb.mass_matrix(ref.model, y["q"]), rtol=RTOL
        )
        s_ours, s_ref = ours.signals(y, u), ref.signals(y, u)
        for k in ("x_lift", "x_tilt", "xd_lift", "f_tilt"):
            np.testing.assert_allclose(s_ours[k], s_ref[k], rtol=RTOL, atol=1e-12)


def test_crane_file_holds_the_spec_numbers():
    """The numbers of the shipped files are the spec's (pins, strokes, areas, valves)."""
    plant = load_machine("crane").plant
    for k, (name, A, B) in enumerate((("lift", "A1", "B1"), ("tilt", "A2", "B2"))):
        a = plant.actuator(name)
        np.testing.assert_array_equal(a.mount.base_point, SPEC_CRANE[A])
        np.testing.assert_array_equal(a.mount.rod_point, SPEC_CRANE[B])
        assert float(a.mount.l_min) == SPEC_CRANE["l_min"][k]
        assert float(a.cylinder.stroke) == SPEC_CRANE["stroke"][k]
        assert (float(a.cylinder.area_a), float(a.cylinder.area_b)) == SPEC_CRANE["area"]
        np.testing.assert_allclose(a.valve.c_pa, SPEC_CRANE["c_valve"][k], rtol=1e-15)
    # the spec's rounded coefficients (m^3 s^-1 V^-1 Pa^-1/2)
    np.testing.assert_allclose(plant.actuator("lift").valve.c_bn, 3.563483e-8, rtol=1e-6)
    np.testing.assert_allclose(plant.actuator("tilt").valve.c_an, 8.908708e-8, rtol=1e-6)


@pytest.fixture(scope="module")
def knuckle():
    return load_machine(KNUCKLE)


def test_shared_jacobian_rule_is_plain_automatic_differentiation(knuckle):
    """The vector field's forward-mode rule (`jaxmb.simulation.sensitivities`: the state
    Jacobian formed once by groups and shared among the tangents, what `simulate` uses under
    `SharedJacobianForwardMode`) gives the derivatives that plain forward mode gives, batched
    (`jax.jacfwd` vmaps the rule), for parameters of every kind (a valve, a bulk modulus, a
    friction law, a body's mass), the state and the commands, and for a tangent on one
    pressure alone (every other entry a symbolic zero)."""
    import equinox as eqx
    from jax.flatten_util import ravel_pytree

    from jaxmb.simulation.sensitivities import plant_field

    plant = knuckle.plant
    leaves = (
        lambda p: p.actuators[0].valve.c_pa,
        lambda p: p.actuators[1].cylinder.beta,
        lambda p: p.actuators[2].friction.F_c,
        lambda p: p.model.bodies[1].mass,
    )
    nominal = [float(get(plant)) for get in leaves]
    y0 = plant.initial_state(jnp.array([0.3, -0.4, 0.5]), jnp.array([0.2, -0.3, 0.05]))
    y0["actuators"]["fold"]["p_a"] = y0["actuators"]["fold"]["p_a"] + 3e5
    flat_y, unravel = ravel_pytree(y0)
    u0 = jnp.array([2.0, -1.5, 0.7])

    def field(fn):
        def f(theta, x, u):
            p = plant
            for k, get in enumerate(leaves):
                p = eqx.tree_at(get, p, nominal[k] * jnp.exp(theta[k]))
            return ravel_pytree(fn(p, unravel(x), u))[0]

        return f

    def derivatives(fn):
        f = field(fn)

        def one_pressure(p_a):  # every other state entry a symbolic zero
            y = jax.tree.map(lambda x: x, y0)
            y["actuators"]["extend"]["p_a"] = p_a
            return ravel_pytree(fn(plant, y, u0))[0]

        @jax.jit
        def all_of(theta, x, u):
            return (
                *jax.jacfwd(f, argnums=(0, 1, 2))(theta, x, u),  # jacfwd: vmap of the rule
                jax.jvp(one_pressure, (y0["actuators"]["extend"]["p_a"],), (1.0,))[1],
            )

        return all_of(jnp.zeros(len(leaves)), flat_y, u0)

    got = derivatives(lambda p, y, u: plant_field(p, 0.0, y, u, None, None))
    want = derivatives(lambda p, y, u: p.vector_field(0.0, y, u))
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w).reshape(w.shape[0], -1)
        scale = np.abs(w).max(axis=1, keepdims=True) + 1e-300  # each rate's own magnitude
        np.testing.assert_allclose(np.asarray(g).reshape(w.shape) / scale, w / scale, atol=1e-11)
    # every parameter and the lone pressure move the field: no comparison of zeros
    assert np.all(np.abs(np.asarray(want[0])).max(axis=0) > 0)
    assert np.abs(np.asarray(want[-1])).max() > 0


def _piston_by_frame_pose(model, mount, q):
    """x = |AB| - l_min from the public `frame_pose` of the mount's two frames, one at a time:
    the reference for the plant's shared kinematic pass."""
    T_a = jaxmb.frame_pose(model, q, mount.base_frame)
    T_b = jaxmb.frame_pose(model, q, mount.rod_frame)
    A = T_a[:3, :3] @ mount.base_point + T_a[:3, 3]
    B = T_b[:3, :3] @ mount.rod_point + T_b[:3, 3]
    return jnp.linalg.norm(B - A) - mount.l_min


def test_one_kinematic_pass_gives_every_mounts_piston(knuckle):
    """The plant reads all its mounts' pins from one kinematic pass, with ``J_x`` by forward
    mode (`HydraulicPlant.piston_kinematics`). Each mount alone, from `frame_pose` per frame
    and central differences of it, gives the same x and J_x, and its forward-mode derivative
    along qd the same xdot."""
    model, plant = knuckle.model, knuckle.plant
    rng = np.random.default_rng(11)
    for _ in range(3):
        q = jnp.asarray(rng.uniform([-0.3, -1.2, 0.0], [0.8, 0.3, 1.2]))
        qd = jnp.asarray(rng.normal(size=3))
        x, xd, J = plant.piston_kinematics(q, qd)
        for i, a in enumerate(plant.actuators):
            np.testing.assert_allclose(x[i], _piston_by_frame_pose(model, a.mount, q), atol=1e-13)
            fd = [
                (
                    _piston_by_frame_pose(model, a.mount, q + 1e-6 * e)
                    - _piston_by_frame_pose(model, a.mount, q - 1e-6 * e)
                )
                / 2e-6
                for e in jnp.eye(3)
            ]
            np.testing.assert_allclose(J[i], fd, rtol=1e-7, atol=1e-9)  # central, h = 1e-6
            _, xd_ref = jax.jvp(lambda q_: _piston_by_frame_pose(model, a.mount, q_), (q,), (qd,))  # noqa: B023
            np.testing.assert_allclose(xd[i], xd_ref, rtol=1e-12, atol=1e-14)


def test_knuckle_loops_close_through_the_tree(knuckle):
    """On the 3-D machine (base yawed and rolled, a prismatic joint), the coordinate map puts
    every cylinder's rod frame on its rod pin and its tube's x axis along AB, at random
    configurations; a massless cylinder (extend) adds no coordinates."""
    model, plant = knuckle.model, knuckle.plant
    assert model.augmented_names == ("lift", "fold", "extend", "alpha_lift", "s_lift",
                                     "alpha_fold", "s_fold")  # fmt: skip
    rng = np.random.default_rng(5)
    for _ in range(4):
        q = jnp.asarray(rng.uniform([-0.3, -1.2, 0.0], [0.8, 0.3, 1.2]))
        for name in ("lift", "fold"):
            a = plant.actuator(name)
            T_a = jaxmb.frame_pose(model, q, a.mount.base_frame)
            T_b = jaxmb.frame_pose(model, q, a.mount.rod_frame)
            A = T_a[:3, :3] @ a.mount.base_point + T_a[:3, 3]
            B = T_b[:3, :3] @ a.mount.rod_point + T_b[:3, 3]
            T_rod = jaxmb.frame_pose(model, q, f"{name}_rod")
            T_tube = jaxmb.frame_pose(model, q, f"{name}_tube")
            np.testing.assert_allclose(T_rod[:3, 3], B, atol=1e-12)
            np.testing.assert_allclose(T_tube[:3, 3], A, atol=1e-12)
            np.testing.assert_allclose(T_tube[:3, 0], (B - A) / jnp.linalg.norm(B - A), atol=1e-12)
            np.testing.assert_allclose(T_rod[:3, :3], T_tube[:3, :3], atol=1e-12)


def _frictionless(plant: HydraulicPlant) -> HydraulicPlant:
    acts = [HydraulicActuator(a.name, a.mount, a.cylinder, a.valve, None) for a in plant.actuators]
    return HydraulicPlant(plant.model, acts)


def test_knuckle_energy_is_conserved_with_valves_shut(knuckle):
    r"""Valves shut, no friction or leakage: each chamber's oil mass is fixed and the machine is
    conservative. With ``pdot = -beta/V dV/dt`` the oil stores ``-(p + beta) V`` (up to a
    constant), so ``T + V_g - sum (p + beta) V`` is constant: a check of the cylinder
    kinematics, forces and loops on a 3-D machine with a prismatic joint and cylinder bodies."""
    plant = _frictionless(knuckle.plant)
    model = plant.model
    q0 = jnp.array([0.3, -0.4, 0.5])
    y0 = plant.initial_state(q0, jnp.array([0.15, -0.2, 0.1]))

    def energy(y):
        q, qd = y["q"], y["qd"]
        x, _, _ = plant.piston_kinematics(q, qd)
        E = jaxmb.kinetic_energy(model, q, qd) + jaxmb.potential_energy(model, q)
        for i, a in enumerate(plant.actuators):
            V_a, V_b = a.cylinder.volumes(x[i])
            s = y["actuators"][a.name]
            E = E - (s["p_a"] + a.cylinder.beta) * V_a - (s["p_b"] + a.cylinder.beta) * V_b
        return E

    def f(t, y, args):
        return plant.vector_field(t, y, jnp.zeros(3))

    ts = jnp.linspace(0.0, 0.4, 9)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(f), diffrax.Dopri8(), 0.0, 0.4, 1e-4, y0,
        saveat=diffrax.SaveAt(ts=ts), max_steps=20000,
        stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-11),
    )  # fmt: skip
    E = jax.vmap(energy)(sol.ys)
    kinetic0 = jaxmb.kinetic_energy(model, q0, y0["qd"])
    moved = jnp.abs(sol.ys["q"] - q0[None]).max()
    assert moved > 1e-3  # it moves (the pressures were set for rest, the rates were not)
    # the terms are ~1e6 J each (beta V); their sum is constant to the solver's tolerance
    np.testing.assert_allclose(E - E[0], 0.0, atol=1e-5 * float(kinetic0) + 1e-6)


def test_payload_is_a_differentiable_leaf(knuckle):
    """The payload's mass is a leaf: the static lift pressure grows with it, by a gradient that
    agrees with finite differences (and vmaps over masses)."""
    q = jnp.array([0.3, -0.4, 0.5])

    def p_lift(mass):
        return knuckle.with_payload(mass).static_pressures(q)[0][0]

    g = jax.grad(p_lift)(100.0)
    fd = (p_lift(101.0) - p_lift(99.0)) / 2.0
    assert g > 0
    np.testing.assert_allclose(g, fd, rtol=1e-8)
    batch = jax.vmap(p_lift)(jnp.array([0.0, 100.0, 200.0]))
    np.testing.assert_allclose(batch[1] - batch[0], batch[2] - batch[1], rtol=1e-9)  # linear


def test_a_valves_overlap_from_the_machine_file(knuckle, tmp_path):
    """``deadband`` in a valve's table: a leaf of the plant's valve, 0 by default (the files
    without it keep today's valves), and the rated flow reached at the rated command past it
    (``c = rated_flow / ((command_max - deadband) sqrt(dp))``)."""
    assert all(float(a.valve.deadband) == 0.0 for a in knuckle.plant.actuators)
    text = KNUCKLE.read_text().replace('cylinder = "lift"\n', 'cylinder = "lift"\ndeadband = 1.2\n')
    (tmp_path / "knuckle_telescope.urdf").write_text(KNUCKLE.with_suffix(".urdf").read_text())
    (tmp_path / "m.toml").write_text(text)
    lift = load_machine(tmp_path / "m.toml").plant.actuators[0].valve
    assert float(lift.deadband) == 1.2
    np.testing.assert_allclose(lift.c_bn, 1.0e-3 / (8.8 * np.sqrt(35e5)), rtol=1e-12)


def test_known_sensor_offsets_are_taken_off_every_log(knuckle, tmp_path):
    """``[log] offsets``: a transducer that reads 0.4 bar at zero pressure (in the column's
    unit, bar here) and an encoder whose zero is 0.2 deg off (SI, rad): every log of the
    machine is read with the offsets subtracted, the other signals as they were."""
    text = KNUCKLE.read_text().replace(
        'units = { p_a_lift = "bar", p_b_lift = "bar" }',
        'units = { p_a_lift = "bar", p_b_lift = "bar" }\noffsets = { p_a_lift = 0.4, fold = 0.0035 }',
    )
    (tmp_path / "knuckle_telescope.urdf").write_text(KNUCKLE.with_suffix(".urdf").read_text())
    (tmp_path / "m.toml").write_text(text)
    shifted = load_machine(tmp_path / "m.toml")
    assert shifted.offsets == {"p_a_lift": 0.4e5, "fold": 0.0035}
    log = KNUCKLE.parent / "knuckle_telescope_validation.parquet"
    a, b = knuckle.read_log(log), shifted.read_log(log)
    np.testing.assert_array_equal(b.t, a.t)
    for k in a.names:
        np.testing.assert_allclose(b[k], a[k] - shifted.offsets.get(k, 0.0), rtol=0, atol=1e-9)


def test_machine_log_columns_and_units(knuckle, tmp_path):
    """A log in the machine's own names and units (bar) reads as the plant's signals in SI."""
    t = np.linspace(0, 1, 11)
    cols = {
        "boom_angle": 0.3 + 0.1 * t, "knuckle_angle": -0.4 + 0.1 * t, "telescope": 0.5 + 0.2 * t,
        "P_lift_A": 46.0 + t, "P_lift_B": 40.0 - t,
    }  # fmt: skip
    write_log(tmp_path / "run.csv", t, cols, meta={"model": "knuckle_telescope"})
    log = knuckle.read_log(tmp_path / "run.csv", required=("lift", "p_a_lift"))
    np.testing.assert_allclose(log["p_a_lift"], (46.0 + t) * 1e5)
    np.testing.assert_allclose(log["fold"], -0.4 + 0.1 * t)
    with pytest.raises(LogError, match="missing required column 'p_b_fold'"):
        knuckle.read_log(tmp_path / "run.csv", required=("p_b_fold",))
    write_log(tmp_path / "short.csv", t, {k: v for k, v in cols.items() if k != "P_lift_B"})
    with pytest.raises(LogError, match="missing column 'P_lift_B' .* for 'p_b_lift'"):
        knuckle.read_log(tmp_path / "short.csv", required=("p_b_lift",))


def test_a_supply_pressure_from_the_log(tmp_path):
    """``supply_from_log = true``: the plant takes ``p_s`` from each log (its column and unit
    named in ``[log]``), every log of the machine must hold it, and a logged supply that is
    missing, NaN, not positive or not above the return pressure is refused by the log's name,
    the column and the first bad sample, before anything compiles."""
    text = KNUCKLE.read_text().replace(
        "bulk_modulus = 1.2e9", "bulk_modulus = 1.2e9\nsupply_from_log = true"
    ).replace('columns = { lift = "boom_angle"', 'columns = { p_s = "P_pump", lift = "boom_angle"'
    ).replace('units = { p_a_lift = "bar"', 'units = { p_s = "bar", p_a_lift = "bar"')  # fmt: skip
    (tmp_path / "knuckle_telescope.urdf").write_text(KNUCKLE.with_suffix(".urdf").read_text())
    (tmp_path / "m.toml").write_text(text)
    machine = load_machine(tmp_path / "m.toml")
    assert machine.plant.logged == ("p_s",) and machine.plant.input_names[-1] == "p_s"
    t = np.linspace(0, 1, 11)
    cols = {"boom_angle": 0.3 + 0.1 * t, "knuckle_angle": -0.4 + 0.1 * t,
            "telescope": 0.5 + 0.2 * t, "P_lift_A": 46.0 + t, "P_lift_B": 40.0 - t,
            "P_pump": 150.0 + 20 * t}  # fmt: skip
    write_log(tmp_path / "run.csv", t, cols)
    np.testing.assert_allclose(machine.read_log(tmp_path / "run.csv")["p_s"], (150 + 20 * t) * 1e5)
    write_log(tmp_path / "nopump.csv", t, {k: v for k, v in cols.items() if k != "P_pump"})
    with pytest.raises(LogError, match="missing column 'P_pump' .* for 'p_s'"):
        machine.read_log(tmp_path / "nopump.csv")
    pump = cols["P_pump"].copy()
    pump[4] = np.nan
    write_log(tmp_path / "gap.csv", t, {**cols, "P_pump": pump})
    with pytest.raises(LogError, match=r"column 'p_s': 1 NaN values \(first at index 4, t = 0.4"):
        machine.read_log(tmp_path / "gap.csv")
    for bad, what in ((0.0, "a finite pressure > 0 Pa, got 0.0"),
                      (-3.0, "a finite pressure > 0 Pa, got -300000.0"),
                      (5.0, "a supply above the return pressure, got 500000.0")):  # fmt: skip
        pump = cols["P_pump"].copy()
        pump[4] = bad
        write_log(tmp_path / "bad.csv", t, {**cols, "P_pump": pump})
        with pytest.raises(ValueError, match=rf"log bad.csv: column 'P_pump' \(the logged supply "
                           rf"pressure p_s, .*\): expected {what} Pa at t = 0.4 s"):  # fmt: skip
            machine.read_log(tmp_path / "bad.csv")
    with pytest.raises(MachineFileError, match=r"\[hydraulics\] key 'return_from_log': expected "
                       "true or false"):  # fmt: skip
        (tmp_path / "m2.toml").write_text(text.replace("supply_from_log = true",
                                                       'return_from_log = "yes"'))  # fmt: skip
        load_machine(tmp_path / "m2.toml")


def test_reach_is_checked_at_the_logs_angles(knuckle):
    check_reach(knuckle, np.array([[0.3, -0.4, 0.5], [0.8, 0.3, 1.2]]))
    with pytest.raises(MachineFileError, match=r"\[cylinders.lift\]: the cylinder cannot reach"):
        check_reach(knuckle, np.array([[0.3, -0.4, 0.5], [1.6, -0.4, 0.5]]), t=[0.0, 0.1])


def test_builtin_name_is_a_file():
    assert machine_path("crane").is_file() and machine_path("crane").suffix == ".toml"


# each: (text to replace in the knuckle file, replacement, message expected)
BAD_FILES = {
    "mount link missing": (
        'rod = { link = "boom2", point = [0.6',
        'rod = { link = "boom3", point = [0.6',
        r"\[cylinders.fold\] key 'rod': no link 'boom3' in knuckle_telescope.urdf",
    ),
    "rod not thinner than bore": (
        "rod_diameter = 0.056",
        "rod_diameter = 0.1",
        r"\[cylinders.fold\] key 'rod_diameter': "
        r"must be < bore",
    ),
    "stroke not positive": (
        "stroke = 0.8\n",
        "stroke = -0.8\n",
        r"\[cylinders.fold\] key 'stroke': expected a number > 0",
    ),
    "dead volume zero": (
        "dead_volume = 2.0e-4",
        "dead_volume = 0.0",
        r"\[cylinders.fold\] key 'dead_volume'",
    ),
    "valve names no cylinder": (
        'cylinder = "fold"',
        'cylinder = "fodl"',
        r"\[valves.fold\] key 'cylinder': no cylinder "
        r"'fodl'",
    ),
    "cylinder without valve": (
        '[valves.extend]\ncylinder = "extend"',
        '[valves.extend]\ncylinder = "lift"',
        r"\[valves.extend\] key 'cylinder': cylinder 'lift' already has a valve",
    ),
    "misspelt key": ("l_min = 0.93", "lmin = 0.93", r"\[cylinders.fold\] key 'lmin': unknown key"),
    "no urdf": ('urdf = "knuckle_telescope.urdf"', 'urdf = "nope.urdf"', r"key 'urdf': no such"),
    "payload link missing": ('link = "tool"', 'link = "tol"', r"\[payload\] key 'link': no link"),
    "log signal unknown": (
        'p_a_lift = "P_lift_A", p_b',
        'p_a_lfit = "P_lift_A", p_b',
        r"\[log\] key 'columns': 'p_a_lfit' is not a signal",
    ),
    "unit of another kind": (
        'units = { p_a_lift = "bar"',
        'units = { p_a_lift = "deg"',
        r"unit 'deg' is not a unit",
    ),
    "pins out of the pin plane": (
        'base = { link = "boom1", point = [2.0, 0.0, -0.4] }',
        'base = { link = "boom1", point = [2.0, 0.1, -0.4] }',
        r"\[cylinders.fold\] key 'pin_axis': the pins must lie in a plane normal",
    ),
    "supply below return": (
        "supply_pressure = 210e5",
        "supply_pressure = 3e5",
        r"must exceed return_pressure",
    ),
    "pressure as text": ("bulk_modulus = 1.2e9", 'bulk_modulus = "1.2e9"', r"expected a finite"),
    "task misses a coordinate": (
        "extend = [0.2, 0.2, 0.5, 0.5, 0.2] }",
        "extnd = [0.2, 0.2, 0.5, 0.5, 0.2] }",
        r"\[task\] key 'waypoints': expected one list per coordinate",
    ),
    "task lists of two lengths": (
        "lift = [0.3, 0.6, 0.6, 0.45, 0.3]",
        "lift = [0.3, 0.6, 0.6, 0.45]",
        r"\[task\] key 'waypoints': every coordinate needs the same number of waypoints",
    ),
    "vdc gain not positive": ("[task]", "[vdc]\nk_x = -1.0\n\n[task]", r"\[vdc\] key 'k_x'"),
    "vdc gain per cylinder": ("[task]", "[vdc]\nk_f = [1e-7, 1e-7]\n\n[task]", r"or 3 of them"),
    "controller rate not positive": (
        "[task]",
        "[vdc]\nrate = 0.0\n\n[task]",
        r"\[vdc\] key 'rate': expected a sampling rate in Hz > 0 or \"continuous\", got 0.0",
    ),
    "controller rate as text": (
        "[task]",
        '[vdc]\nrate = "1 kHz"\n\n[task]',
        r"\[vdc\] key 'rate': expected a sampling rate",
    ),
    "offset of a signal the machine lacks": (
        'units = { p_a_lift = "bar", p_b_lift = "bar" }',
        'units = { p_a_lift = "bar", p_b_lift = "bar" }\noffsets = { p_a_lfit = 0.4 }',
        r"\[log\] key 'offsets': 'p_a_lfit' is not a signal of this machine",
    ),
    "offset as text": (
        'units = { p_a_lift = "bar", p_b_lift = "bar" }',
        'units = { p_a_lift = "bar", p_b_lift = "bar" }\noffsets = { p_a_lift = "0.4 bar" }',
        r"\[log\] key 'offsets': 'p_a_lift': expected a finite number \(bar\)",
    ),
    "overlap negative": (
        'cylinder = "fold"\n',
        'cylinder = "fold"\ndeadband = -0.5\n',
        r"\[valves.fold\] key 'deadband': expected a number >= 0 \(V\)",
    ),
    "overlap not below the command range": (
        'cylinder = "fold"\n',
        'cylinder = "fold"\ndeadband = 10.0\n',
        r"\[valves.fold\] key 'deadband': expected an overlap below command_max = 10 V",
    ),
    "overlap not below the rated command": (
        'cylinder = "fold"\n',
        'cylinder = "fold"\ndeadband = 4.0\nrated_command = 4.0\n',
        r"\[valves.fold\] key 'deadband': expected an overlap below rated_command = 4",
    ),
    "overlap as text": (
        'cylinder = "fold"\n',
        'cylinder = "fold"\ndeadband = "1 V"\n',
        r"\[valves.fold\] key 'deadband': expected a finite number",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_machine_files_are_refused_by_name(case, tmp_path):
    old, new, message = BAD_FILES[case]
    text = KNUCKLE.read_text()
    assert old in text, case
    (tmp_path / "knuckle_telescope.urdf").write_text(KNUCKLE.with_suffix(".urdf").read_text())
    bad = tmp_path / "machine.toml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(MachineFileError, match=message) as err:
        load_machine(bad)
    assert str(bad) in str(err.value)


def test_the_controller_rate_is_read_from_the_vdc_table(tmp_path):
    """``[vdc] rate``: 1 kHz by default, any rate in Hz, or "continuous" (no sampling)."""
    assert load_machine(KNUCKLE).rate == 1000.0 and load_machine(KNUCKLE).sample_time == 1e-3
    (tmp_path / "knuckle_telescope.urdf").write_text(KNUCKLE.with_suffix(".urdf").read_text())
    for given, rate, h in (("400", 400.0, 2.5e-3), ('"continuous"', None, None)):
        path = tmp_path / "machine.toml"
        path.write_text(KNUCKLE.read_text().replace("[task]", f"[vdc]\nrate = {given}\n\n[task]"))
        machine = load_machine(path)
        assert machine.rate == rate and machine.sample_time == h and machine.gains == {}


def test_a_cylinder_with_no_valve_is_refused(tmp_path):
    text = KNUCKLE.read_text()
    cut = text.index("[valves.extend]")
    end = text.index("[log]")
    (tmp_path / "knuckle_telescope.urdf").write_text(KNUCKLE.with_suffix(".urdf").read_text())
    bad = tmp_path / "m.toml"
    bad.write_text(text[:cut] + text[end:])
    with pytest.raises(MachineFileError, match=re.escape("[cylinders.extend]: no valve drives")):
        load_machine(bad)


def _knuckle_log(path, drop=(), scale=None):
    """A short log of the knuckle machine in its own names (pressures in bar as its [log]
    table declares for the lift cylinder), every column moving."""
    t = np.linspace(0.0, 1.0, 201)
    w = np.sin(2 * np.pi * t)
    cols = {"boom_angle": 0.3 + 0.05 * w, "knuckle_angle": -0.4 + 0.05 * w,
            "telescope": 0.5 + 0.05 * w, "P_lift_A": 46.0 + w, "P_lift_B": 40.0 - w}  # fmt: skip
    for a in ("fold", "extend"):
        cols[f"p_a_{a}"], cols[f"p_b_{a}"] = 40e5 + 1e5 * w, 40e5 - 1e5 * w
    for a in ("lift", "fold", "extend"):
        cols[f"u_{a}"] = w
    for k, f in (scale or {}).items():
        cols[k] = cols[k] * f
    write_log(path, t, {k: v for k, v in cols.items() if k not in drop})
    return path


@pytest.mark.parametrize(
    "case, drop, scale, message",
    [
        ("missing pressure", ("p_b_fold",), None, r"missing required column 'p_b_fold'"),
        ("renamed column missing", ("P_lift_B",), None, r"missing column 'P_lift_B'"),
        ("bar where Pa", (), {"p_a_fold": 1e-5, "p_b_fold": 1e-5}, r"looks like bar"),
        ("out of reach", (), {"boom_angle": 5.0}, r"\[cylinders.lift\]: the cylinder cannot reach"),
    ],
)
def test_identify_refuses_a_bad_log_before_anything_is_written(tmp_path, case, drop, scale,
                                                               message):  # fmt: skip
    from jaxmb import cli

    log = _knuckle_log(tmp_path / "run.parquet", drop, scale)
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=message):
        cli.main(["identify", str(log), "--model", str(KNUCKLE), "--out", str(out), "--quiet"])
    assert not out.exists(), case


def test_identify_refuses_a_bad_machine_file_by_name(tmp_path):
    from jaxmb import cli

    (tmp_path / "knuckle_telescope.urdf").write_text(KNUCKLE.with_suffix(".urdf").read_text())
    bad = tmp_path / "m.toml"
    bad.write_text(KNUCKLE.read_text().replace("bore = 0.1\n", "bore = 0.05\n", 1))
    log = _knuckle_log(tmp_path / "run.parquet")
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=r"m.toml: \[cylinders.fold\] key 'rod_diameter'"):
        cli.main(["identify", str(log), "--model", str(bad), "--out", str(out), "--quiet"])
    assert not out.exists()
