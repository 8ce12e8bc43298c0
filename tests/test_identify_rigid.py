"""The regressor route recovers known inertial, drive and friction parameters from synthetic
logs, and `jaxmb identify --model robot.urdf` runs it end to end.

Ground truth: a random 3-joint URDF robot (`random_tree_urdf`) moved along a Fourier-series
trajectory; its torques are inverse dynamics plus armature, viscous, Coulomb and offset terms
(computed here independently of the regressor), plus Gaussian noise; positions are quantised
like a 2^18 counts/rev encoder."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import pinocchio_agrees, unlisted

import jaxmb
from jaxmb import cli
from jaxmb.identification import regressor as rg
from jaxmb.identification import rigid
from jaxmb.identification.excitation import FourierTrajectory
from jaxmb.io import params_file
from jaxmb.io.logs import Log, write_log
from jaxmb.models import random_tree_urdf

SEED = 3
TRUE_JOINT = {
    "joint1": {"armature": 0.05, "viscous": 2.0, "coulomb": 1.5, "offset": 0.4},
    "joint2": {"armature": 0.02, "viscous": 1.0, "coulomb": 0.8, "offset": -0.3},
    "joint3": {"armature": 0.01, "viscous": 0.5, "coulomb": 0.5, "offset": 0.1},
}
NOISE = 0.05  # N m (or N), per joint equation
WIDTH = 1e-2  # smoothed Coulomb width of the synthetic joints, rad/s (given to the fits)


def _true_tau(model, q, qd, qdd):
    tau = jax.vmap(lambda a, b, c: jaxmb.inverse_dynamics(model, a, b, c))(q, qd, qdd)
    for i, c in enumerate(model.coordinate_names):
        p = TRUE_JOINT[c]
        tau = tau.at[:, i].add(
            p["armature"] * qdd[:, i]
            + p["viscous"] * qd[:, i]
            + p["coulomb"] * jnp.tanh(qd[:, i] / WIDTH)
            + p["offset"]
        )
    return tau


def _log(model, seed, t_final=20.0, fs=200.0, period=10.0) -> Log:
    rng = np.random.default_rng(seed)
    n, L = model.n, 4
    traj = FourierTrajectory(
        q0=rng.uniform(-0.5, 0.5, n),
        a=rng.normal(0, 0.6, (n, L)),
        b=rng.normal(0, 0.6, (n, L)),
        w_f=2 * np.pi / period,
    )
    t = np.arange(0.0, t_final + 0.5 / fs, 1 / fs)
    q, qd, qdd = (np.asarray(x) for x in traj.sample(jnp.asarray(t)))
    tau = np.asarray(_true_tau(model, jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)))
    tau = tau + NOISE * rng.normal(size=tau.shape)
    res = 2 * np.pi / 2**18
    q_meas = np.round(q / res) * res
    signals = {c: q_meas[:, i] for i, c in enumerate(model.coordinate_names)}
    signals |= {f"tau_{c}": tau[:, i] for i, c in enumerate(model.coordinate_names)}
    return Log(t, signals, {"model": "random_3", "synthetic": True})


@pytest.fixture(scope="module")
def robot(tmp_path_factory):
    path = tmp_path_factory.mktemp("robot") / "robot.urdf"
    path.write_text(random_tree_urdf(3, SEED, prismatic_every=0, fixed_every=0))
    return path, jaxmb.load_urdf(path)


@pytest.fixture(scope="module")
def fitted(robot):
    _, model = robot
    log = _log(model, 0)
    return {
        m: rigid.identify_rigid(model, log, method=m, cutoff=5.0, coulomb_width=WIDTH)
        for m in ("wls", "consistent")
    }


def test_base_parameters_within_their_confidence_intervals(robot, fitted):
    _, model = robot
    res = fitted["wls"]
    pi_true = rg.standard_parameters(model, rigid.DEFAULT_TERMS, TRUE_JOINT)
    truth = res.base.project(np.asarray(pi_true))
    z = (res.fit.theta - truth) / res.fit.std
    # the differentiation filter adds a small bias, so allow 5 sigma, and most within 2 sigma
    assert np.abs(z).max() < 5, dict(zip(res.base.base_names, np.round(z, 2), strict=True))
    assert np.mean(np.abs(z) < 2) > 0.8
    # the estimated noise level per joint equation is the true one after the zero-phase filter:
    # |H|^2 = 1 / (1 + (f/fc)^16) has noise bandwidth fc (pi/16) / sin(pi/16), so white noise
    # of std NOISE sampled at 200 Hz leaves NOISE sqrt(2 B / fs)
    B = 5.0 * (np.pi / 16) / np.sin(np.pi / 16)
    np.testing.assert_allclose(res.fit.row_sigma, NOISE * np.sqrt(2 * B / 200.0), rtol=0.15)


@pytest.mark.parametrize("method", ["wls", "consistent"])
def test_friction_recovered(fitted, method):
    res = fitted[method]
    for c, terms in TRUE_JOINT.items():
        for t in ("viscous", "coulomb", "offset"):
            assert res.joint[c][t] == pytest.approx(terms[t], rel=0.05, abs=0.02), (c, t)


def test_consistent_fit_is_physical_and_predicts(robot, fitted):
    _, model = robot
    res = fitted["consistent"]
    assert all(res.consistent.values())
    # a fresh trajectory: prediction error at the noise floor (the truth is noise-free)
    val = _log(model, 1)
    s, tau_hat = rigid.predict_torques(res, val, cutoff=5.0)
    tau_true = np.asarray(_true_tau(model, *(jnp.asarray(s.at(k)) for k in ("q", "qd", "qdd"))))
    rmse = np.sqrt(np.mean((tau_hat - tau_true) ** 2, axis=0))
    assert (rmse < 0.5 * NOISE).all(), rmse
    # and far better than the model it started from (the URDF's inertias, no friction)
    s0 = rg.standard_parameters(model, rigid.DEFAULT_TERMS)
    W = np.asarray(
        rg.stacked_regressor(model, s.at("q"), s.at("qd"), s.at("qdd"), rigid.DEFAULT_TERMS)
    )
    prior_rmse = np.sqrt(np.mean((W @ np.asarray(s0) - tau_true) ** 2, axis=0))
    assert (rmse < 0.1 * prior_rmse).all()


def test_model_from_parameters_round_trip(robot):
    _, model = robot
    back = rigid.model_from_parameters(model, np.asarray(jaxmb.inertial_parameters(model)))
    for a, b in zip(model.bodies, back.bodies, strict=True):
        np.testing.assert_allclose(b.mass, a.mass, rtol=1e-12)
        np.testing.assert_allclose(b.com, a.com, atol=1e-12)
        np.testing.assert_allclose(b.inertia, a.inertia, atol=1e-12)
    bad = np.asarray(jaxmb.inertial_parameters(model)).copy()
    bad[1, 0] = -1.0
    with pytest.raises(ValueError, match="identified mass"):
        rigid.model_from_parameters(model, bad)


def test_identify_cli_on_a_urdf(robot, tmp_path, capsys):
    path, model = robot
    write_log(tmp_path / "train.csv", _log(model, 0, t_final=12.0))
    write_log(tmp_path / "val.parquet", _log(model, 1, t_final=8.0))
    out = tmp_path / "out"
    argv = ["identify", str(tmp_path / "train.csv"), "--model", str(path), "--out", str(out),
            "--validate", str(tmp_path / "val.parquet"), "--cutoff", "5", "--quiet",
            "--gear-ratios", "joint1=2"]  # fmt: skip
    assert cli.main(argv) == 0
    # issue 29: a drive constant the log's columns do not need is said to be ignored, once
    printed = capsys.readouterr()
    err = printed.err
    assert err.count("ignored") == 1
    assert "--gear-ratios joint1: ignored; the log gives joint1 by tau_joint1 (in train.csv)" in err
    summary = json.loads((out / "summary.json").read_text())
    from jaxmb.identification.summary_keys import RIGID, RIGID_FILES

    assert set(summary) == set(RIGID)  # each key explained in docs/reference.md
    assert not unlisted(out, RIGID_FILES)  # and each file
    assert summary["method_key"] == "consistent" and summary["condition_number"] > 1
    assert set(summary["fit_rmse"]) == {"tau_joint1", "tau_joint2", "tau_joint3"}
    assert set(summary["validation_rmse"]) == {"val"}
    assert max(summary["validation_rmse"]["val"].values()) < 2 * NOISE
    for png in ("fit_train.png", "validation_val.png", "residuals_validation_val.png"):
        assert (out / png).stat().st_size > 1000
    doc = params_file.read_params(out / "params.json", model_name="robot")
    new = params_file.apply_bodies(model, doc)
    assert doc["joints"]["joint1"]["viscous"] == pytest.approx(2.0, rel=0.05)
    # the file's model reproduces the identified torques
    q, qd, qdd = jnp.array([0.1, -0.2, 0.3]), jnp.array([0.5, 0.1, -0.4]), jnp.array([1.0, 2, -1])
    Y = rg.full_regressor(model, q, qd, qdd, rigid.DEFAULT_TERMS)
    pi_file = rg.standard_parameters(new, rigid.DEFAULT_TERMS, doc["joints"])
    pi_true = rg.standard_parameters(model, rigid.DEFAULT_TERMS, TRUE_JOINT)
    np.testing.assert_allclose(Y @ pi_file, Y @ pi_true, rtol=0.02, atol=0.05)
    assert "route: regressor" in printed.out
    # issue 31: the identified model as a copy of the input URDF, the same dynamics in Pinocchio
    assert summary["urdf"] == {"file": "identified.urdf", "not_in_file": []}
    text = (out / "identified.urdf").read_text()
    armature = [doc["joints"][c]["armature"] for c in model.coordinate_names]
    pm = pinocchio_agrees(text, new, armature)
    order = [pm.names[i] for i in range(1, pm.njoints)]
    np.testing.assert_allclose(pm.damping, [doc["joints"][c]["viscous"] for c in order])
    np.testing.assert_allclose(pm.friction, [doc["joints"][c]["coulomb"] for c in order])
    assert f"offset = {doc['joints']['joint2']['offset']!r}" in text
    # a base-parameter fit is no physical model: no URDF, and the report says why
    out2 = tmp_path / "wls"
    argv = ["identify", str(tmp_path / "train.csv"), "--model", str(path), "--out", str(out2),
            "--cutoff", "5", "--quiet", "--method", "wls"]  # fmt: skip
    assert cli.main(argv) == 0
    assert not (out2 / "identified.urdf").exists()
    why = json.loads((out2 / "summary.json").read_text())["urdf"]["why"]
    assert why.startswith("method 'wls' fits base parameters, which are not a physical model")
    assert f"identified URDF: {why}" in capsys.readouterr().out


def test_identify_cli_rejects_a_malformed_log(robot, tmp_path):
    path, model = robot
    log = _log(model, 0, t_final=2.0)
    bad = log.with_signals({"tau_joint2": np.where(log.t > 1.0, np.nan, log["tau_joint2"])})
    write_log(tmp_path / "bad.csv", bad)
    argv = ["identify", str(tmp_path / "bad.csv"), "--model", str(path), "--out",
            str(tmp_path / "o"), "--quiet"]  # fmt: skip
    with pytest.raises(SystemExit, match="tau_joint2"):
        cli.main(argv)
    with pytest.raises(SystemExit, match="--model: expected one of"):
        cli.main(["identify", str(tmp_path / "bad.csv"), "--model", "nope", "--out", str(tmp_path)])


def test_motor_side_measurements(robot, fitted):
    """Motor torques through a gear, or motor currents with a torque constant, identify the
    same model as the joint torques they stand for."""
    _, model = robot
    log = _log(model, 0)
    G = {"joint1": 120.0, "joint2": -80.0, "joint3": 50.5}  # a negative ratio: reversed motor
    kt = {"joint1": 1.3, "joint2": 0.9, "joint3": 2.0}
    motor = {f"tau_motor_{c}": log[f"tau_{c}"] / G[c] for c in G}
    current = {f"i_{c}": log[f"tau_{c}"] / (G[c] * kt[c]) for c in G}
    keep = {c: log[c] for c in model.coordinate_names}
    by_motor = Log(log.t, {**keep, **motor})
    by_current = Log(log.t, {**keep, **current})
    drives = rigid.Drives(G, kt)
    names = model.coordinate_names
    ref = log.stack([f"tau_{c}" for c in names])
    np.testing.assert_allclose(rigid.generalized_forces(by_motor, names, drives), ref, rtol=1e-14)
    np.testing.assert_allclose(rigid.generalized_forces(by_current, names, drives), ref, rtol=1e-14)
    assert rigid.unused_drives(by_current, names, drives) == []
    assert rigid.unused_drives(by_motor, names, drives) == [
        "--torque-constants joint1, joint2, joint3: ignored; the log gives joint1 by "
        "tau_motor_joint1, joint2 by tau_motor_joint2, joint3 by tau_motor_joint3"
    ]
    res = rigid.identify_rigid(model, by_current, method="wls", cutoff=5.0,
                               coulomb_width=WIDTH, drives=drives)  # fmt: skip
    np.testing.assert_allclose(res.fit.theta, fitted["wls"].fit.theta, rtol=1e-7, atol=1e-9)
    with pytest.raises(ValueError, match="'i_joint1' with a gear ratio and a torque constant"):
        rigid.generalized_forces(by_current, names, rigid.Drives(G))
    with pytest.raises(ValueError, match="gear_ratio\\['joint1'\\] must be finite and non-zero"):
        rigid.Drives({"joint1": 0.0})


def test_the_closed_chain_arm_identified_and_simulated(tmp_path):
    """`--model arm`: the series-parallel arm's regressor runs through its coordinate map
    (minimal coordinates phi, theta, delta); the identified bodies then drive the controller
    model of `jaxmb simulate --params`."""
    arm = jaxmb.models.series_parallel_3dof()
    t = np.arange(0.0, 10.0, 0.005)
    q = np.stack([0.4 * np.sin(0.6 * t) + 0.2 * np.sin(1.7 * t),
                  0.35 + 0.2 * np.sin(0.8 * t + 1) + 0.05 * np.sin(2.1 * t),
                  0.1 + 0.05 * np.sin(0.5 * t + 0.3) + 0.02 * np.sin(1.9 * t)], axis=1)  # fmt: skip
    w = np.array([[0.6, 1.7], [0.8, 2.1], [0.5, 1.9]])
    a = np.array([[0.4, 0.2], [0.2, 0.05], [0.05, 0.02]])
    ph = np.array([[0.0, 0.0], [1.0, 0.0], [0.3, 0.0]])
    qd = np.stack([sum(a[i, k] * w[i, k] * np.cos(w[i, k] * t + ph[i, k]) for k in range(2))
                   for i in range(3)], axis=1)  # fmt: skip
    qdd = np.stack([sum(-a[i, k] * w[i, k] ** 2 * np.sin(w[i, k] * t + ph[i, k]) for k in range(2))
                    for i in range(3)], axis=1)  # fmt: skip
    tau = np.asarray(jax.vmap(lambda x, y, z: jaxmb.inverse_dynamics(arm, x, y, z))(q, qd, qdd))
    tau = tau + 0.5 * np.random.default_rng(0).normal(size=tau.shape)
    names = arm.coordinate_names
    write_log(tmp_path / "arm.csv", Log(t, {**{c: q[:, i] for i, c in enumerate(names)},
              **{f"tau_{c}": tau[:, i] for i, c in enumerate(names)}}))  # fmt: skip
    out = tmp_path / "out"
    assert cli.main(["identify", str(tmp_path / "arm.csv"), "--model", "arm", "--terms", "",
                     "--out", str(out), "--quiet"]) == 0  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    # the fit reaches the 0.5 N m (N) noise and no further
    for v in summary["fit_rmse"].values():
        assert 0.45 < v < 0.6
    # a closed chain has no URDF: none is written, and the summary says why
    assert summary["urdf"]["file"] is None and "closed kinematic loops" in summary["urdf"]["why"]
    assert not (out / "identified.urdf").exists()
    from jaxmb.identification.summary_keys import RIGID_FILES

    assert not unlisted(out, RIGID_FILES)  # docs/reference.md
    sim = tmp_path / "sim"
    argv = ["simulate", "--params", str(out / "params.json"), "--t-final", "0.05",
            "--dt-save", "0.01", "--out", str(sim), "--no-plots", "--quiet"]  # fmt: skip
    assert cli.main(argv) == 0 and (sim / "summary.json").is_file()
    from jaxmb.control.summary_keys import ROBUST, ROBUST_FILES

    assert set(json.loads((sim / "summary.json").read_text())) == set(ROBUST)
    assert not unlisted(sim, ROBUST_FILES)  # docs/reference.md


PAYLOAD = {"payload_kg": 2.0, "payload_com": [0.05, 0.0, 0.1]}


def _with_payload(model, mass, com):
    """``model`` with a point mass merged into its last body (parallel axes): an independent
    way to the torques a carried payload adds."""
    b = model.bodies[-1]
    m0, c0, com = float(b.mass), np.asarray(b.com), np.asarray(com)
    m = m0 + mass
    c = (m0 * c0 + mass * com) / m
    I = np.asarray(b.inertia)
    for mk, ck in ((m0, c0), (mass, com)):
        d = ck - c
        I = I + mk * (d @ d * np.eye(3) - np.outer(d, d))
    return jaxmb.multibody.model.replace_body(model, b.name, mass=m, com=c, inertia=I)


def test_several_logs_with_their_payloads_and_noise_levels(robot, tmp_path, capsys):
    """Issue 31, point 2: `jaxmb identify A B` fits one robot to two experiments, B carrying a
    2 kg payload its sidecar names, with four times A's torque noise. Each log gets its own
    noise levels (and so its weight), the payload's torques are the sidecar's, and the robot
    comes out as from A alone; per-log fit RMSEs are reported."""
    path, model = robot
    a = _log(model, 0, t_final=12.0)
    loaded = _with_payload(model, PAYLOAD["payload_kg"], PAYLOAD["payload_com"])
    b = _log(loaded, 1, t_final=12.0)
    rng = np.random.default_rng(7)
    noisy = {k: (v + 3 * NOISE * rng.normal(size=v.shape) if k.startswith("tau_") else v)
             for k, v in b.signals.items()}  # 4x the noise, roughly  # fmt: skip
    write_log(tmp_path / "a.csv", a)
    write_log(tmp_path / "b.csv", Log(b.t, noisy, {"model": "random_3", "synthetic": True,
                                                   "conditions": PAYLOAD}))  # fmt: skip
    out = tmp_path / "out"
    argv = ["identify", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--model", str(path),
            "--out", str(out), "--cutoff", "5", "--quiet",
            "--coulomb-width", str(WIDTH)]  # the truth's smoothed sign, not the noise's  # fmt: skip
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "  of a: " in printed and "  of b: " in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["log"] == [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]
    assert summary["payloads"] == {"b": {"mass_kg": 2.0, "com_m": PAYLOAD["payload_com"],
                                         "frame": model.bodies[-1].frame}}  # fmt: skip
    # each log's own noise level (the 5 Hz low-pass keeps part of the white noise)
    na, nb = summary["wls_sigma_per_log"]["a"], summary["wls_sigma_per_log"]["b"]
    for k in na:
        assert 3.0 < nb[k] / na[k] < 5.0, (k, na[k], nb[k])
        assert summary["fit_rmse_per_log"]["b"][k] / summary["fit_rmse_per_log"]["a"][k] > 3.0
    # the robot without its payload: the torques of the true robot
    doc = params_file.read_params(out / "params.json", model_name="robot")
    new = params_file.apply_bodies(model, doc)
    q, qd, qdd = jnp.array([0.1, -0.2, 0.3]), jnp.array([0.5, 0.1, -0.4]), jnp.array([1.0, 2, -1])
    Y = rg.full_regressor(model, q, qd, qdd, rigid.DEFAULT_TERMS)
    pi_file = rg.standard_parameters(new, rigid.DEFAULT_TERMS, doc["joints"])
    pi_true = rg.standard_parameters(model, rigid.DEFAULT_TERMS, TRUE_JOINT)
    np.testing.assert_allclose(Y @ pi_file, Y @ pi_true, rtol=0.02, atol=0.05)
    # and the payload's torques are what the merged body adds
    Q = np.stack([np.asarray(q), -np.asarray(q)])
    Qd, Qdd = np.stack([np.asarray(qd)] * 2), np.stack([np.asarray(qdd)] * 2)
    got = rigid.payload_torques(model, rigid.Payload(2.0, np.array(PAYLOAD["payload_com"]),
                                                     model.bodies[-1].frame), Q, Qd, Qdd)  # fmt: skip
    want = [jaxmb.inverse_dynamics(loaded, *x) - jaxmb.inverse_dynamics(model, *x)
            for x in zip(Q, Qd, Qdd, strict=True)]  # fmt: skip
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "conditions, names, message",
    [
        ({"payload_kg": 2.0, "payload_frame": "nowhere"}, ("a", "b"),
         r"b\.csv: sidecar conditions\.payload_frame: expected one of the model's frames"),
        ({"payload_kg": -1.0}, ("a", "b"), r"b\.csv: sidecar conditions\.payload_kg: expected a "
         r"mass >= 0 kg, got -1\.0"),
        ({"payload_com": [0, 0, 1]}, ("a", "b"), r"b\.csv: sidecar conditions: \['payload_com'\] "
         r"given without payload_kg"),
        ({"payload_kg": 1.0, "payload_com": [0, 1]}, ("a", "b"),
         r"b\.csv: sidecar conditions\.payload_com: expected \[x, y, z\] in m"),
        ({}, ("a", "a"), r"logs \['a'\]: given twice, or two files of one name"),
    ],
)  # fmt: skip
def test_several_logs_refused_up_front(robot, tmp_path, conditions, names, message):
    path, model = robot
    a = _log(model, 0, t_final=3.0)
    write_log(tmp_path / "a.csv", a)
    write_log(tmp_path / "b.csv", Log(a.t, a.signals, {"model": "random_3", "synthetic": True,
                                                       "conditions": conditions}))  # fmt: skip
    out = tmp_path / "out"
    argv = ["identify", *(str(tmp_path / f"{n}.csv") for n in names), "--model", str(path),
            "--out", str(out), "--quiet"]  # fmt: skip
    with pytest.raises(SystemExit, match=message):
        cli.main(argv)
    assert not out.exists()


SHORT = {
    # shorter than what the default cutoff rule could ever filter: not blamed on the rule
    # (which found no motion in it)
    "for any cutoff": (0.3, [], r"stretch is 0\.3 s \(61 samples\), and the low-pass even at "
                       r"its highest cutoff \(15 Hz\) trims 0\.2 s at both ends, so a stretch must "
                       r"be longer than 0\.4 s \(at least 82 samples\); a longer log \(tens"),
    "for the cutoff chosen": (3.0, [], r"stretch is 3 s \(601 samples\), and the 2 Hz low-pass "
                              r"the fit logs' motion chose trims 1\.5 s at both ends, so a stretch "
                              r"must be longer than 3 s \(at least 602 samples\); a longer log, or "
                              r"a higher --cutoff than the one chosen"),
    "for the cutoff given": (3.0, ["--cutoff", "2"], r"stretch is 3 s \(601 samples\), and the "
                             r"--cutoff 2 Hz low-pass trims 1\.5 s at both ends, so a stretch "
                             r"must be longer than 3 s \(at least 602 samples\); a longer log, "
                             r"or a higher --cutoff$"),
}  # fmt: skip


@pytest.mark.parametrize("case", SHORT)
def test_a_log_too_short_is_refused_by_its_length(robot, tmp_path, case):
    """A log too short for the low-pass is refused by its length in samples and seconds
    against what the filter needs, and by where its cutoff came from; nothing written."""
    seconds, options, message = SHORT[case]
    path, model = robot
    write_log(tmp_path / "a.csv", _log(model, 0, t_final=seconds))
    out = tmp_path / "out"
    argv = ["identify", str(tmp_path / "a.csv"), "--model", str(path), "--out", str(out),
            "--quiet", *options]  # fmt: skip
    with pytest.raises(SystemExit, match=r"a\.csv: too short to identify: its longest gap-free "
                       + message):  # fmt: skip
        cli.main(argv)
    assert not out.exists()


def test_several_logs_of_other_rates_or_a_payload_on_a_branching_tree_refused(tmp_path):
    """Fit logs are one set of equations: two sampled at different rates are refused by name;
    on a branching tree a payload must name its frame (there is no one tool end)."""
    xml = random_tree_urdf(3, SEED, prismatic_every=0, fixed_every=0, branching=True)
    (tmp_path / "tree.urdf").write_text(xml)
    model = jaxmb.load_urdf(xml)
    a, b = _log(model, 0, t_final=8.0), _log(model, 1, t_final=8.0, fs=250.0)
    write_log(tmp_path / "a.csv", a)
    write_log(tmp_path / "b.csv", b)
    out = tmp_path / "out"
    argv = ["identify", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--model",
            str(tmp_path / "tree.urdf"), "--out", str(out), "--quiet"]  # fmt: skip
    with pytest.raises(SystemExit, match=r"fit logs sampled at different rates: a\.csv 200 Hz, "
                       r"b\.csv 250 Hz"):  # fmt: skip
        cli.main(argv)
    parents = [f.parent for f in model.frames]
    assert any(parents.count(p) > 1 for p in parents)  # the tree branches
    write_log(tmp_path / "b.csv", Log(a.t, a.signals, {"conditions": {"payload_kg": 1.0}}))
    with pytest.raises(SystemExit, match=r"b\.csv: sidecar conditions\.payload_frame: needed, as "
                       r"the model's bodies branch"):  # fmt: skip
        cli.main(argv)
    assert not out.exists()
    # a serial robot whose URDF has tool frames beside its last link (the UR5's ee_link and
    # tool0): its payload defaults to the last body's frame
    import importlib.metadata
    import os

    from jaxmb.identification.rigid_route import payload_of as _payload

    dist = importlib.metadata.distribution("example-robot-data")
    ur5 = jaxmb.load_urdf(os.path.join(os.fspath(dist.locate_file(
        "cmeel.prefix/share/example-robot-data/robots")), "ur_description/urdf/ur5_robot.urdf"))  # fmt: skip
    carried = _payload(Log(a.t, {}, {"conditions": {"payload_kg": 2.0}}), ur5, "x.csv")
    assert carried.frame == "wrist_3_link" and carried.mass == 2.0


def test_reported_uncertainty_matches_a_monte_carlo_over_noise():
    """Issue 31, point 4: 40 noise realisations on one synthetic trajectory (the 3-joint robot,
    the default consistent fit at the default 10 Hz cutoff). The base parameters the consistent
    fit reproduces (``K pi``), whitened by each fit's reported covariance (the low-pass's
    correlation of the residuals included, `rigid.filtered_noise_covariance`), have unit
    spread about the truth within 20 % (measured 1.01; the former factor fs / (2 cutoff) gave
    about 1.1), and the 95 % intervals cover the truth about 95 % of the time (measured 93 %)."""
    model = jaxmb.load_urdf(random_tree_urdf(3, SEED, prismatic_every=0, fixed_every=0))
    rng0 = np.random.default_rng(0)
    n = model.n
    traj = FourierTrajectory(q0=rng0.uniform(-0.5, 0.5, n), a=rng0.normal(0, 0.6, (n, 4)),
                             b=rng0.normal(0, 0.6, (n, 4)), w_f=2 * np.pi / 10.0)  # fmt: skip
    t = np.arange(0.0, 20.0 + 0.5 / 200, 1 / 200)
    q, qd, qdd = (np.asarray(x) for x in traj.sample(jnp.asarray(t)))
    tau0 = np.asarray(_true_tau(model, jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)))
    res = 2 * np.pi / 2**18
    names = model.coordinate_names
    positions = {c: np.round(q[:, i] / res) * res for i, c in enumerate(names)}
    pi_true = np.asarray(rg.standard_parameters(model, rigid.DEFAULT_TERMS, TRUE_JOINT))
    z2, cover, est, std = [], [], [], []
    for k in range(40):
        tau = tau0 + NOISE * np.random.default_rng(100 + k).normal(size=tau0.shape)
        log = Log(t, positions | {f"tau_{c}": tau[:, i] for i, c in enumerate(names)})
        r = rigid.identify_rigid(model, log)
        K = np.asarray(r.base.K)
        truth, theta = K @ pi_true, K @ r.pi
        lo, hi = (theta[:, None] + r.fit.interval(0.95) - r.fit.theta[:, None]).T
        cover.append((lo <= truth) & (truth <= hi))
        z = np.linalg.solve(np.linalg.cholesky(r.fit.cov), theta - truth)
        z2.append(z @ z / z.size)
        est.append(theta)
        std.append(r.fit.std)
    assert 0.8 < np.sqrt(np.mean(z2)) < 1.2
    assert 0.9 < np.mean(cover) < 0.99
    # the diagonal alone, pooled over the parameters: the spread of the estimates over the
    # mean reported std
    ratio = np.sqrt(np.mean(np.var(est, axis=0, ddof=1) / np.mean(std, axis=0) ** 2))
    assert 0.8 < ratio < 1.2, ratio


def test_cutoff_chosen_from_the_motion_predicts_as_well_as_the_best(robot):
    """The default cutoff (`cutoff_choice.choose_cutoff`: the smallest candidate at or above 3x
    the motion's bandwidth) predicts a held-out log within 0.5 % of the best candidate's (the
    oracle, which sees the held-out log). The motion reaches 2 Hz (a 2 s period, 4 harmonics),
    so the low candidates distort it: at 4, 3 and 2 Hz the held-out RMSE is 6 %, 4.7x and 49x
    the best (measured; the choice is 7 Hz, the oracle's 5 Hz, 0.3 % apart). On the KR300 the
    choice is 2 Hz (test_identify_main)."""
    from jaxmb.identification.cutoff_choice import CANDIDATES, choose_cutoff

    _, model = robot
    fit, held = _log(model, 0, period=2.0), _log(model, 1, t_final=10.0, period=2.0)
    choice = choose_cutoff([fit], model.coordinate_names)
    # the harmonics: 0.5, 1, 1.5, 2 Hz; 99 % of the velocity's power below the top one
    assert all(1.9 < f < 2.1 for f in choice["f_motion_hz"].values()), choice
    held_out = {}
    for c in CANDIDATES:
        r = rigid.identify_rigid(model, fit, cutoff=c)
        s, tau = rigid.predict_torques(r, held, cutoff=c, edge=1.5)  # the same samples for all
        held_out[c] = float(np.sum(np.log(np.mean((s.at("tau") - tau) ** 2, axis=0))))
    best = min(held_out, key=held_out.get)
    # sum of log MSE over the 3 joints: 0.03 is 0.5 % in RMSE on each
    assert held_out[choice["cutoff_hz"]] - held_out[best] < 0.03, (choice, held_out)
    assert max(held_out.values()) - held_out[best] > 0.3  # a choice that matters


def test_motion_bandwidth_of_a_sine():
    """A 1.2 Hz sine has all its velocity power at 1.2 Hz (to the periodogram's 0.05 Hz bins,
    a Hann window's leakage within one bin)."""
    from jaxmb.identification.cutoff_choice import choose_cutoff, motion_bandwidth

    t = np.arange(0.0, 20.0, 1e-3)
    log = Log(t, {"q1": 0.3 * np.sin(2 * np.pi * 1.2 * t), "q2": 0.1 * np.sin(2 * np.pi * 0.2 * t)})
    bands = motion_bandwidth([log], ("q1", "q2"))
    assert bands["q1"] == pytest.approx(1.2, abs=0.06) and bands["q2"] == pytest.approx(
        0.2, abs=0.06
    )
    assert choose_cutoff([log], ("q1", "q2"))["cutoff_hz"] == 4.0  # 3 x 1.2 = 3.6
    # encoder steps (18 bit): a joint that stands still has no band (it would have read as
    # hundreds of Hz from a differentiated velocity); one that barely moves has its own
    res = 2 * np.pi / 2**18
    steps = {"q1": np.round(0.3 * np.sin(2 * np.pi * 1.2 * t) / res) * res,
             "q2": np.round(0.01 * np.sin(2 * np.pi * 0.5 * t) / res) * res,
             "q3": np.round((0.3 + 1e-5 * np.random.default_rng(0).normal(size=t.size)) / res) * res}  # fmt: skip
    bands = motion_bandwidth([Log(t, steps)], ("q1", "q2", "q3"))
    assert bands["q1"] == pytest.approx(1.2, abs=0.06) and bands["q2"] == pytest.approx(
        0.5, abs=0.11
    )
    assert bands["q3"] is None
    assert choose_cutoff([Log(t, steps)], ("q1", "q2", "q3"))["cutoff_hz"] == 4.0
    with pytest.raises(ValueError, match=r"no coordinate of \['q3'\] moves above its noise"):
        choose_cutoff([Log(t, steps)], ("q3",))
    fast = Log(t, {"q1": 0.3 * np.sin(2 * np.pi * 6.0 * t)})
    with pytest.raises(ValueError, match=r"--cutoff: the motion of q1 reaches 6(\.0\d*)? Hz"):
        choose_cutoff([fast], ("q1",))


@pytest.mark.parametrize(
    "fs, cutoff, measured_velocity",
    [(1000.0, 3.0, False), (1000.0, 3.0, True), (250.0, 2.0, True), (4000.0, 2.0, False)],
)
def test_coulomb_width_from_the_velocity_noise(fs, cutoff, measured_velocity):
    """`coulomb_width.velocity_noise` (the log's white-noise floor carried through the filter's
    impulse response) equals the noise the filtered velocity actually carries: the spread of
    `estimate_derivatives`' velocity of noisy logs about that of the noise-free log (the filter
    is linear), over the samples away from the ends, in 8 realisations (one alone spreads by
    ~5 %: the filtered noise has few degrees of freedom). At 4 kHz and 2 Hz the derivative's
    window is 943 samples (where scipy's own Savitzky-Golay coefficients had lost all
    precision). A noise-free log gets the floor, and says so."""
    from jaxmb.identification import coulomb_width as cw
    from jaxmb.identification.signals import estimate_derivatives

    rng = np.random.default_rng(7)
    dt, names = 1.0 / fs, ("q1", "q2")
    t = np.arange(0.0, 30.0, dt)
    clean = {"q1": 0.5 * np.sin(2 * np.pi * 0.4 * t), "q2": 0.2 * np.cos(2 * np.pi * 0.3 * t)}
    sigma = {"q1": 2e-4, "q2": 5e-5}
    if measured_velocity:  # a logged velocity is the one filtered (and its noise the one seen)
        clean |= {"qd_q1": 0.4 * np.pi * np.cos(2 * np.pi * 0.4 * t),
                  "qd_q2": -0.12 * np.pi * np.sin(2 * np.pi * 0.3 * t)}  # fmt: skip
        sigma = {"qd_q1": 3e-3, "qd_q2": 1e-3}
    b = estimate_derivatives(Log(t, clean), names, cutoff=cutoff)
    for c in names:  # the noise-free velocity is the motion's (the filter passes it)
        want = clean[f"qd_{c}"] if measured_velocity else np.gradient(clean[c], dt)
        np.testing.assert_allclose(np.asarray(b[f"qd_{c}"])[t.size // 4 : -t.size // 4],
                                   want[t.size // 4 : -t.size // 4], atol=2e-4)  # fmt: skip
    predicted, seen = {c: [] for c in names}, {c: [] for c in names}
    mid = slice(t.size // 10, -t.size // 10)
    for _ in range(8):
        noisy = Log(t, {k: v + (sigma[k] * rng.normal(size=t.size) if k in sigma else 0.0)
                        for k, v in clean.items()})  # fmt: skip
        a = estimate_derivatives(noisy, names, cutoff=cutoff)
        for c, v in cw.velocity_noise([noisy], names, cutoff).items():
            predicted[c].append(v)
            seen[c].append(np.mean((np.asarray(a[f"qd_{c}"]) - np.asarray(b[f"qd_{c}"]))[mid] ** 2))
    for c in names:
        assert np.mean(predicted[c]) == pytest.approx(np.sqrt(np.mean(seen[c])), rel=0.05), c
    quiet = cw.choose_coulomb_width([Log(t, clean)], names, cutoff)
    assert quiet["coulomb_width"] == cw.FLOOR and "no noise" in quiet["note"]


def test_identify_rigid_chooses_as_the_command_does(robot):
    """Left out, the cutoff and the Coulomb sign's width are the command's choices from the log
    (recorded with the rules' reports); a log whose joints do not move leaves the cutoff rule
    nothing to measure, refused in the library's own names."""
    from jaxmb.identification.coulomb_width import choose_coulomb_width
    from jaxmb.identification.cutoff_choice import choose_cutoff

    _, model = robot
    log = _log(model, 0, period=2.0)
    res = rigid.identify_rigid(model, log, method="wls")
    cutoff = choose_cutoff([log], model.coordinate_names)["cutoff_hz"]
    width = choose_coulomb_width([log], model.coordinate_names, cutoff)["coulomb_width"]
    assert (res.cutoff, res.coulomb_width) == (cutoff, width)
    assert set(res.choices) == {"cutoff", "coulomb_width"}
    given = rigid.identify_rigid(model, log, method="wls", cutoff=5.0, coulomb_width=WIDTH)
    assert (given.cutoff, given.coulomb_width, given.choices) == (5.0, WIDTH, {})
    rng = np.random.default_rng(0)  # joints standing still: their encoders' noise only
    still = Log(log.t, {k: v[0] + 1e-6 * rng.normal(size=v.shape) for k, v in log.signals.items()},
                log.sidecar)  # fmt: skip
    with pytest.raises(ValueError, match=r"identify_rigid: cutoff=None: no coordinate .* "
                       r"moves above its noise .*; give cutoff=$"):  # fmt: skip
        rigid.identify_rigid(model, still)
