"""VDC on any machine file (`jaxmb.vdc.bodies`, `jaxmb.control.machine_run`) and the machine
workflows around it: the required forces against the paper's segment recursion (crane) and
against inverse dynamics (knuckle boom with a telescope), a perfect-model closed loop that
tracks its task, and `jaxmb simulate`, `montecarlo` and `tune` on the knuckle's file."""

import dataclasses
import json
import re
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import unlisted

import jaxmb
import jaxmb.algorithms.terms as terms
from jaxmb.cli import main
from jaxmb.control.machine_run import closed_loop_run, machine_controller
from jaxmb.control.summary_keys import (
    MACHINE,
    MACHINE_FILES,
    MONTECARLO,
    MONTECARLO_FILES,
    TUNE,
    TUNE_FILES,
)
from jaxmb.control.vdc_control import GAINS
from jaxmb.io.machine import load_machine
from jaxmb.models.crane import abcd_reference, crane_chain
from jaxmb.multibody.checks import failures_as_nan
from jaxmb.simulation import integrate
from jaxmb.simulation.controller import one_pass_field, pass_sharing
from jaxmb.simulation.disturbances import Disturbance
from jaxmb.vdc import M_A, chain_bodies, required_forces
from jaxmb.vdc.bodies import body_gains, body_required_forces, body_required_forces_by_jacobians

KNUCKLE = Path(__file__).parent.parent / "data/machines/knuckle_telescope/knuckle_telescope.toml"


def _rates(rng, n):
    return [jnp.asarray(rng.normal(size=n)) for _ in range(3)]


def test_body_form_gives_the_segment_recursions_forces_on_the_crane():
    """Required actuator forces by virtual power over the crane's seven bodies equal Petrovic &
    Mattila's recursion over its two segments (eqs. (68)-(77)) with K_A = k_v M_A, and the
    accompanying functions (eq. (96)) sum to the same total."""
    plant = load_machine("crane", payload=60.0).plant
    chain = crane_chain(plant.model)
    K_chain = jnp.stack([20.0 * M_A(b) for _, b in chain_bodies(chain)])
    K_bodies = body_gains(plant.model, 20.0, 0.0)
    rng = np.random.default_rng(0)
    for _ in range(4):
        q = jnp.asarray(rng.uniform([-0.3, -0.7], [1.3, 0.6]))
        qd, qd_r, qdd_r = _rates(rng, 2)
        seg = required_forces(chain, q, qd, qd_r, qdd_r, K_chain)
        bod = body_required_forces(plant.model, q, qd, qd_r, qdd_r, K_bodies)
        _, _, J = plant.piston_kinematics(q, qd)
        np.testing.assert_allclose(jnp.linalg.solve(J.T, bod.tau_r), seg.f_cr, rtol=1e-10)
        np.testing.assert_allclose(jnp.sum(bod.v), jnp.sum(seg.v), rtol=1e-10)


def test_body_form_is_inverse_dynamics_when_the_required_velocity_is_measured():
    """With qd_r = qd the gain terms vanish and sum_A J_A^T F*_Ar is M qdd_r + C qd + g: the
    knuckle boom's inverse dynamics (CRBA and autodiff of the kinetic energy), through its
    cylinder loops, a prismatic telescope and gravity along -z."""
    plant = load_machine(KNUCKLE).plant
    K = body_gains(plant.model, 50.0, 1.0)
    rng = np.random.default_rng(1)
    for _ in range(4):
        q = jnp.asarray(rng.uniform([0.25, -0.5, 0.1], [0.7, 0.2, 0.8]))
        qd, _, qdd = _rates(rng, 3)
        bod = body_required_forces(plant.model, q, qd, qd, qdd, K)
        np.testing.assert_allclose(
            bod.tau_r, jaxmb.inverse_dynamics(plant.model, q, qd, qdd), rtol=1e-10, atol=1e-8
        )
        np.testing.assert_allclose(bod.v, 0.0, atol=1e-20)


@pytest.mark.parametrize("route", ["unrolled", "scan"])
@pytest.mark.parametrize("machine", ["crane", "knuckle"])
def test_body_recursion_is_the_sum_over_the_bodies_jacobians(machine, route, monkeypatch):
    """The O(n) pass over the augmented tree (required twists as path sums, their rates along
    the measured motion, wrenches summed tip to base) gives ``sum_A J_A^T F*_Ar`` with every
    body's Jacobian formed (the definition, through autodiff of the Jacobians), the velocity
    errors and the accompanying functions, with a gain ``k_0 I`` that the segment form lacks,
    for the small trees' unrolled products and the large trees' scans alike."""
    monkeypatch.setattr(terms, "UNROLL_MAX_FRAMES", 16 if route == "unrolled" else 0)
    plant = load_machine("crane" if machine == "crane" else KNUCKLE, payload=80.0).plant
    K = body_gains(plant.model, 20.0, 3.0)
    rng = np.random.default_rng(2)
    lo, hi = (
        ([-0.3, -0.7], [1.3, 0.6]) if machine == "crane" else ([0.25, -0.5, 0.1], [0.7, 0.2, 0.8])
    )
    for _ in range(3):
        q = jnp.asarray(rng.uniform(lo, hi))
        qd, qd_r, qdd_r = _rates(rng, plant.n)
        fast = body_required_forces(plant.model, q, qd, qd_r, qdd_r, K)
        ref = body_required_forces_by_jacobians(plant.model, q, qd, qd_r, qdd_r, K)
        scale = jnp.max(jnp.abs(ref.tau_r))
        np.testing.assert_allclose(fast.tau_r, ref.tau_r, rtol=1e-12, atol=1e-12 * scale)
        np.testing.assert_allclose(fast.dV, ref.dV, atol=1e-12)
        np.testing.assert_allclose(fast.v, ref.v, rtol=1e-10, atol=1e-10)


def test_crane_file_holds_the_spec_task_and_the_crane_gains():
    m = load_machine("crane")
    assert m.task.t_final == 18.0 and m.gains == GAINS
    ref = m.task.reference()
    for t in np.linspace(0.0, 18.0, 73):
        np.testing.assert_allclose(ref(jnp.asarray(t)), abcd_reference()(jnp.asarray(t)))


class _OnePass(Exception):
    """Raised by a spy where a closed loop's trace takes the one-pass field."""


def test_one_kinematic_pass_serves_the_plant_and_its_controller(monkeypatch):
    """Issue 28 point 3: a closed loop makes one kinematic pass a state for the plant and its
    controller (`one_pass_field`). The whole pass where the plant is the controller's model;
    the augmented state and pistons where the two read the same geometry arrays (a sampled
    plant: each model's own acceleration from them). Either gives the plant's vector field
    under the controller's command as the two computed apart give it. Equal values in other
    arrays are another model (no sharing). `jaxmb simulate`'s compiled run keeps the plant
    the controller's, and a machine study hands each sample's geometry to the controller."""
    machine = load_machine(KNUCKLE)
    plant = machine.plant
    ctrl = machine_controller(machine, plant)
    heavy = machine.with_payload(180.0)  # eqx.tree_at: the same geometry arrays
    none, pushed = Disturbance(), Disturbance(forces=lambda t: jnp.ones(plant.n))
    assert pass_sharing(plant, ctrl, none) == "whole"
    assert pass_sharing(heavy, ctrl, none) == "kinematics"
    assert pass_sharing(plant, ctrl, pushed) == "kinematics"  # the plant alone is pushed
    assert pass_sharing(jax.tree.map(jnp.array, plant), ctrl, none) is None  # copies
    assert pass_sharing(plant, lambda t, y, desired: jnp.zeros(3), none) is None  # no such law
    # at a moving state off the task, every pressure off its holding value
    rng = np.random.default_rng(5)
    q0 = jnp.asarray(machine.task.reference()(jnp.asarray(0.0))) + 0.01
    y = plant.initial_state(q0, jnp.asarray(rng.normal(size=plant.n)) * 0.1)
    y = jax.tree.map(lambda x: x * (1 + 0.05 * rng.normal(size=x.shape)), y)
    f = jnp.asarray(rng.normal(size=plant.n)) * 1e3
    apart = eqx.filter_jit(lambda p, c, y, f: (p.vector_field(0.7, y, c(0.7, y), None, f),
                                               c(0.7, y)))  # fmt: skip
    shared = eqx.filter_jit(one_pass_field)
    for p, how, forces in ((plant, "whole", jnp.zeros(plant.n)), (heavy, "kinematics", f)):
        got, want = shared(p, ctrl, 0.7, y, forces, None, how), apart(p, ctrl, y, forces)
        # the same operations in another order of fusion: equal to rounding
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * float(jnp.abs(b).max()))
    # a non-finite state is refused as the plant's own field refuses it (the command it
    # makes is named first, as there)
    bad = jax.tree.map(lambda x: x, y)
    bad["actuators"]["fold"] = {**y["actuators"]["fold"], "p_a": jnp.asarray(jnp.nan)}
    for run in (lambda: shared(plant, ctrl, 0.7, bad, jnp.zeros(plant.n), None, "whole"),
                lambda: apart(plant, ctrl, bad, jnp.zeros(plant.n))):  # fmt: skip
        with pytest.raises(Exception, match="command: must be finite, got NaN or inf"):
            jax.block_until_ready(run())
    with pytest.raises(ValueError, match="sharing must be 'whole' or 'kinematics'"):
        one_pass_field(plant, ctrl, 0.7, y, None, None, "all")
    # a machine study whose samples keep the geometry: the controller reads each sample's
    from jaxmb.control.sampling import Distribution, Parameter
    from jaxmb.control.studies import machine_study

    masses, _ = machine_study(machine, Distribution((Parameter("body.boom1.mass", spread=0.1),)))
    stroke, _ = machine_study(machine, Distribution((Parameter("mount.lift.l_min", spread=0.01),)))
    assert masses.kinematics_fixed and not stroke.kinematics_fixed
    sample, _ = masses.realise(masses.values(np.arange(1))[0])
    assert pass_sharing(sample, masses.controller_on(ctrl, sample), none) == "kinematics"
    assert stroke.controller_on(ctrl, sample) is ctrl
    moved = eqx.tree_at(lambda c: c.plant.actuators[0].mount.l_min, ctrl,
                        ctrl.plant.actuators[0].mount.l_min + 1e-3)  # fmt: skip
    with pytest.raises(ValueError, match="controller's model has another geometry"):
        masses.check_controller(moved)

    # the compiled run's trace takes the whole pass (a save grid no other test compiles:
    # traced, not loaded)
    def spy(*args):
        raise _OnePass(args[-1])

    monkeypatch.setattr(integrate, "one_pass_field", spy)
    with pytest.raises(_OnePass, match="whole"):
        closed_loop_run(plant, ctrl, jnp.linspace(0.0, 0.01, 3))
    # and a machine study's sample the kinematics, traced as Monte Carlo and tuning trace it
    # (the study and the controller arguments: their arrays other tracers), where the loop is
    # continuous: a sampled controller runs once a sample, apart from the plant's stages
    continuous, _ = machine_study(dataclasses.replace(machine, rate=None), masses.distribution)
    assert masses.sample_time == 1e-3 and continuous.sample_time is None
    with pytest.raises(_OnePass, match="kinematics"):
        eqx.filter_jit(lambda st, c, v: st.run(c, v))(continuous, ctrl, masses.values([0])[0])


def test_simulate_runs_vdc_on_the_machine_files_task(tmp_path, capsys):
    """`jaxmb simulate --machine FILE.toml`: with the file's plant as its own model and no
    initial error, VDC tracks exactly up to its sampling's error (the command held for 1 ms:
    2.3e-6 rad and 1.1e-5 m at the tool measured) where a wrong required force would show as
    an error of order 1e-3."""
    out = tmp_path / "vdc"
    argv = ["simulate", "--machine", str(KNUCKLE), "--t-final", "0.5", "--out", str(out),
            "--payload", "120"]  # fmt: skip
    assert main([*argv, "--no-plots", "--quiet"]) == 0
    assert "VDC closed loop on the file's [task], 0.5 s, payload 120 kg" in capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())
    assert s["success"] and s["machine"] == "knuckle_telescope" and s["payload_kg"] == 120
    assert set(s) <= set(MACHINE) and not unlisted(out, MACHINE_FILES)  # docs/reference.md
    assert s["controller"] == "sampled at 1000 Hz, zero-order hold" and s["solver"] == "rk4"
    assert max(s["max_joint_error_rad"].values()) < 1e-5
    assert s["max_tool_position_error_m"] < 5e-5  # 1.1e-5 m
    cols = np.genfromtxt(out / "timeseries.csv", delimiter=",", names=True)
    assert cols.shape == (501,) and np.ptp(cols["fold"]) > 5e-3  # the task moves it


def test_vdc_steps_over_a_known_spool_overlap(tmp_path, capsys):
    """Every valve of the knuckle with 1.5 V of overlap (15 % of its range), in its machine
    file: VDC, whose model knows it, steps its command over the band (`Valve.step_over`) and
    tracks the task as with zero-lapped valves (the test above), up to its sampling's error. A
    controller whose model ignores the overlap leaves the valves shut within the band: the
    error it leaves is three orders larger."""
    text = KNUCKLE.read_text()
    for v in ("lift", "fold", "extend"):
        text = text.replace(f'cylinder = "{v}"\n', f'cylinder = "{v}"\ndeadband = 1.5\n')
    machine_file = tmp_path / "knuckle_telescope.toml"
    machine_file.write_text(text)
    (tmp_path / "knuckle_telescope.urdf").write_text(KNUCKLE.with_suffix(".urdf").read_text())
    out = tmp_path / "vdc"
    argv = ["simulate", "--machine", str(machine_file), "--t-final", "0.5", "--out", str(out),
            "--payload", "120"]  # fmt: skip
    assert main([*argv, "--no-plots", "--quiet"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["success"] and max(s["max_joint_error_rad"].values()) < 1e-5
    cols = np.genfromtxt(out / "timeseries.csv", delimiter=",", names=True)
    u = np.stack([cols[f"u_{a}"] for a in ("lift", "fold", "extend")])
    moving = np.abs(u) > 1e-9
    assert moving.any() and np.all(np.abs(u[moving]) > 1.5)  # every command past the band
    machine = load_machine(machine_file, payload=120.0)
    naive = machine_controller(machine, load_machine(KNUCKLE, payload=120.0).plant)
    tr = closed_loop_run(machine.plant, naive, jnp.linspace(0.0, 0.5, 501))
    q_d = jax.vmap(naive.reference)(tr.t)
    assert bool(tr.success) and float(jnp.abs(tr.q - q_d).max()) > 1e-3


def _overlapped(folder: Path, rate: str = "") -> Path:
    """The knuckle's files with 0.5 V of spool overlap and a 2 ms command delay on every
    valve (and ``rate``, a ``[vdc] rate`` line, where given)."""
    text = KNUCKLE.read_text()
    for v in ("lift", "fold", "extend"):
        text = text.replace(
            f'cylinder = "{v}"\n', f'cylinder = "{v}"\ndeadband = 0.5\ndelay = 0.002\n'
        )
    if rate:
        text += f"\n[vdc]\n{rate}\n"
    (folder / "knuckle_telescope.urdf").write_text(KNUCKLE.with_suffix(".urdf").read_text())
    (folder / "knuckle_telescope.toml").write_text(text)
    return folder / "knuckle_telescope.toml"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A 2-sample Monte Carlo study of the knuckle, its valves overlapping by 0.5 V and their
    commands 2 ms late, over payload, one valve coefficient, the lift valve's overlap and its
    delay."""
    d = tmp_path_factory.mktemp("mc")
    machine = _overlapped(d)
    cfg = d / "study.toml"
    cfg.write_text(
        f'[study]\nscenario = "machine"\nmachine = "{machine}"\nsamples = 2\nchunk = 2\n'
        "lanes = 2\nt_final = 0.5\nseed = 4\n\n"
        '[[parameter]]\nname = "body.payload.mass"\ndistribution = "range"\nlow = 150.0\n'
        'high = 300.0\n\n[[parameter]]\nname = "valve.lift.c_pa"\nspread = 0.1\n\n'
        '[[parameter]]\nname = "valve.lift.deadband"\ndistribution = "range"\nlow = 0.3\n'
        'high = 0.7\n\n[[parameter]]\nname = "valve.lift.delay"\ndistribution = "range"\n'
        "low = 0.001\nhigh = 0.003\n"
    )
    assert main(["montecarlo", str(cfg), "--out", str(d / "out"), "--no-plots", "--quiet"]) == 0
    return cfg, d / "out", machine


def test_montecarlo_rows_are_the_closed_loops_of_their_sampled_plants(study):
    """Each row of a machine study is what the closed loop of its own sampled plant gives:
    sample 1 rerun on its own (payload, valve coefficient, overlap and delay set by hand, the
    controller knowing none of them: it steps over the file's 0.5 V). The study keeps the
    commands of delays up to its range's 3 ms, the rerun those of its own: the same rows."""
    _, out, machine_file = study
    rows = pq.read_table(out / "results.parquet").to_pydict()
    assert not any(rows["failed"]) and len(rows["sample"]) == 2
    assert set(json.loads((out / "summary.json").read_text())) <= set(MONTECARLO)
    assert not unlisted(out, MONTECARLO_FILES)
    assert all(150.0 <= m <= 300.0 for m in rows["body.payload.mass"])
    assert all(0.3 <= d <= 0.7 for d in rows["valve.lift.deadband"])
    assert all(0.001 <= d <= 0.003 for d in rows["valve.lift.delay"])
    k = rows["sample"].index(1)
    machine = load_machine(machine_file)
    plant = machine.with_payload(rows["body.payload.mass"][k])
    i = plant.actuator_names.index("lift")
    plant = eqx.tree_at(
        lambda p: (p.actuators[i].valve.c_pa, p.actuators[i].valve.deadband,
                   p.actuators[i].valve.delay), plant,
        tuple(jnp.asarray(rows[f"valve.lift.{f}"][k], float) for f in ("c_pa", "deadband", "delay")),
    )  # fmt: skip
    ts = jnp.linspace(0.0, 0.5, 501)
    # traced as the CLI traces it (failures as NaN, the status returned). Not the program of
    # `jaxmb simulate`'s run above: there the plant is the controller's model, whose loop
    # makes one kinematic pass a state (`pass_sharing`); a sample's plant is another model.
    # Sampled at the file's rate, as the study's loops are
    with failures_as_nan():
        tr = closed_loop_run(plant, machine_controller(machine), ts, sample_time=1e-3)
    assert bool(tr.success)
    for j, c in enumerate(plant.coordinate_names):
        rmse = float(jnp.sqrt(jnp.mean(tr.e[:, j] ** 2)))
        assert rmse > 1e-6  # the unknown payload is felt
        np.testing.assert_allclose(rows[f"rmse_{c}"][k], rmse, rtol=1e-5)
    summary = json.loads((out / "study.json").read_text())
    assert len(summary["study"]["study"]["machine_files_sha256"]) == 64


def test_tune_writes_gains_that_simulate_loads(study, tmp_path, capsys):
    """`jaxmb tune` on a machine study: one Adam step on one sample; the gains file it writes
    loads into `jaxmb simulate --machine FILE.toml --gains` unchanged."""
    cfg, _, _ = study
    tune_cfg = tmp_path / "tune.toml"
    tune_cfg.write_text(
        cfg.read_text() + "\n[tune]\nsamples = 1\nsteps = 1\nvalidation_samples = 2\n"
        "t_final = 0.2\ntolerated_error = [2e-3, 2e-3, 1e-3]\n"
    )
    out = tmp_path / "tune"
    assert main(["tune", str(tune_cfg), "--out", str(out), "--no-plots", "--quiet"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["scenario"] == "machine" and s["validation_tuned"]["samples"] == 2
    assert set(s) == set(TUNE) and not unlisted(out, TUNE_FILES)  # docs/reference.md
    for v in (out / "validation_tuned", out / "validation_given"):
        assert set(json.loads((v / "summary.json").read_text())) <= set(MONTECARLO)
        assert not unlisted(v, MONTECARLO_FILES)
    assert s["validation_tuned"]["extend"]["unit"] == "m"
    assert set(s["validation_tuned"]) >= {"lift", "valve_lift", "extend", "valve_extend"}
    gains = json.loads((out / "gains.json").read_text())["gains"]
    assert len(gains["lam"]) == 3 and len(gains["k_x"]) == 3
    sim = tmp_path / "sim"
    argv = ["simulate", "--machine", str(KNUCKLE), "--gains", str(out / "gains.json")]
    assert main([*argv, "--t-final", "0.5", "--out", str(sim), "--no-plots", "--quiet"]) == 0
    ran = json.loads((sim / "summary.json").read_text())["gains"]
    np.testing.assert_allclose(ran["k_x"], gains["k_x"], rtol=1e-12)


def test_a_continuous_loop_refuses_delayed_valves_by_name(tmp_path):
    """Delayed valves need the sampled loop, which holds the commands until they arrive: a
    machine file with ``[vdc] rate = "continuous"`` is refused naming the file, the valves'
    key and the rate, by `jaxmb simulate` before any compile and by a study over it."""
    from jaxmb.control.sampling import Distribution, Parameter
    from jaxmb.control.studies import machine_study

    machine_file = _overlapped(tmp_path, rate='rate = "continuous"')
    out = tmp_path / "o"
    with pytest.raises(SystemExit, match=re.escape(
        f"machine file {machine_file} ([vdc] rate = \"continuous\"): the valves of ['u_lift', "
        "'u_fold', 'u_extend'] have a command delay (valve key 'delay')",
    )):  # fmt: skip
        main(["simulate", "--machine", str(machine_file), "--out", str(out)])
    assert not out.exists()
    machine = load_machine(machine_file)
    with pytest.raises(ValueError, match=r"\[study\] parameters \['valve.lift.delay'\]: a valve's "
                       "command delay needs the sampled loop"):  # fmt: skip
        machine_study(machine, Distribution((Parameter("valve.lift.delay", spread=0.1),)))


def _without_task(tmp_path) -> Path:
    text = KNUCKLE.read_text()
    cut, end = text.index("[task]"), text.index("[cylinders.lift]")
    (tmp_path / "knuckle_telescope.urdf").write_text(KNUCKLE.with_suffix(".urdf").read_text())
    p = tmp_path / "no_task.toml"
    p.write_text(text[:cut] + text[end:])
    return p


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--payload", "-1"], "--payload: expected a mass >= 0 kg, got -1.0"),
        (["--gains", "g.json", "--commands", "x.parquet"], "the replay of --commands has no"),
        (["--t-final", "-1"], "--t-final: expected a duration > 0 s"),
        (["--gains", "MISSING.json"], "gains file 'MISSING.json': cannot read"),
        (["--clip-commands"], "--clip-commands: only for the replay of --commands"),
        (["--commands", str(KNUCKLE.parent / "knuckle_telescope_validation.parquet"),
          "--clip-commands"], "--clip-commands: not for a log's replay"),
        (["--commands", "MISSING.csv"], "--commands: commands file 'MISSING.csv' does not exist"),
        (["--dt-save", "0.0015"], "--dt-save 0.0015 s over --t-final 17 s: the saved rows must "
         f"fall on the controller's samples, multiples of 0.001 s (machine file {KNUCKLE}: "
         "[vdc] rate = 1000 Hz); row 1 is at 0.00150"),
        (["--omega", "3"], "--omega: not for a machine file; only for --machine rpr3-flexible"),
        # issue 29: a replay longer than its log is refused, not held at the last commands
        (["--commands", str(KNUCKLE.parent / "knuckle_telescope_validation.parquet"),
          "--t-final", "1000"],
         "--t-final: 1000 s goes beyond knuckle_telescope_validation.parquet, which spans"),
    ],
)  # fmt: skip
def test_bad_machine_simulate_options_are_refused_before_any_compile(tmp_path, extra, message):
    out = tmp_path / "o"
    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["simulate", "--machine", str(KNUCKLE), "--out", str(out), *extra])
    assert not out.exists()


def test_a_machine_without_a_task_is_refused_by_name(tmp_path):
    bad = _without_task(tmp_path)
    out = tmp_path / "o"
    with pytest.raises(SystemExit, match=re.escape(f"machine file {bad}: no [task] table")):
        main(["simulate", "--machine", str(bad), "--out", str(out)])
    assert not out.exists()


@pytest.mark.parametrize(
    "study_lines, message",
    [
        ('scenario = "machine"', "the machine scenario needs machine ="),
        (
            f'scenario = "crane"\nmachine = "{KNUCKLE}"',
            "only for scenario = 'machine', not 'crane'",
        ),
        ('scenario = "machine"\nmachine = "nope.toml"', "nope.toml: no such file"),
        ('scenario = "section_iv"\nparams = "p.json"', "[study] params: only for a machine file's"),
        ('scenario = "crane"\nparams = "p.json"', "[study] params: --params: no such file"),
        (
            f'scenario = "machine"\nmachine = "{KNUCKLE}"\nparams = "p.json"',
            "[study] params: --params: no such file",
        ),
        (  # saved rows between the controller's samples, where no command was held
            f'scenario = "machine"\nmachine = "{KNUCKLE}"\nsamples = 2\n\n[solver]\n'
            'dt_save = 0.0015\n\n[[parameter]]\nname = "body.payload.mass"\nspread = 0.1',
            "[solver] dt_save = 0.0015 s over 17 s: the saved rows must fall on the controller's "
            f"samples, multiples of 0.001 s (machine file {KNUCKLE}: [vdc] rate = 1000 Hz)",
        ),
    ],
)
def test_bad_machine_study_configurations_are_refused(tmp_path, study_lines, message):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[study]\n{study_lines}\n")
    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["montecarlo", str(cfg), "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()
