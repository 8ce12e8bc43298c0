"""Ider et al. (2019): the reduced equations (eqs. (6)-(10), (12)) against their printed block
formulas, the fourth-order inverse dynamics against the plant's own projected dynamics, and the
Section 6 case study through the CLI with its stability analysis (eqs. (17)-(31))."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import unlisted

from jaxmb.actuators.reduced import (
    reduced_terms,
    task_jacobian,
    time_derivatives,
)
from jaxmb.algorithms.dynamics import bias_forces, mass_matrix
from jaxmb.cli import main
from jaxmb.constraints.projection import assemble, constraint_jacobian, projector
from jaxmb.control.fourth_order import (
    FourthOrderController,
    _torque_for_snap,
    estimated_jet,
    itae_gains,
    stability_analysis,
    task_inertia,
)
from jaxmb.control.rpr3_flexible import initial_configuration, reference, section6_plant
from jaxmb.control.summary_keys import FOURTH_ORDER, FOURTH_ORDER_FILES
from jaxmb.models.planar_rpr import end_effector

PLANT = section6_plant()
SYSTEM = PLANT.system
Q0 = initial_configuration(SYSTEM)
IA, IU = [0, 1, 2], [3, 4, 5, 6]


def test_reduced_equations_match_eqs_7_8_10_12():
    rng = np.random.default_rng(0)
    a1 = jnp.asarray(rng.normal(size=3))
    M_star, Q_star = eqx.filter_jit(reduced_terms)(SYSTEM, PLANT.driven, Q0, a1)
    # the printed block formulas, from M, B, Bdot and Q of the open tree
    B = np.asarray(constraint_jacobian(SYSTEM, Q0))
    Ba, Bu = B[:, IA], B[:, IU]
    Bui = np.linalg.inv(Bu)
    M = np.asarray(mass_matrix(SYSTEM.model, Q0))
    Maa, Mau, Muu = M[np.ix_(IA, IA)], M[np.ix_(IA, IU)], M[np.ix_(IU, IU)]
    eq7 = -Ba.T @ Bui.T @ (Mau.T - Muu @ Bui @ Ba) + (Maa - Mau @ Bui @ Ba)
    np.testing.assert_allclose(M_star, eq7, rtol=1e-12, atol=1e-12)
    etad = np.zeros(7)
    etad[IA] = a1
    etad[IU] = -Bui @ Ba @ np.asarray(a1)  # eq. (2)
    Bd = np.asarray(
        jax.jvp(lambda q: constraint_jacobian(SYSTEM, q), (Q0,), (jnp.asarray(etad),))[1]
    )
    Bad, Bud = Bd[:, IA], Bd[:, IU]
    h = np.asarray(bias_forces(SYSTEM.model, Q0, jnp.asarray(etad)))
    eq8 = (
        (-Mau @ Bui @ Bad + Ba.T @ Bui.T @ Muu @ Bui @ Bad) @ np.asarray(a1)
        + (-Mau @ Bui @ Bud + Ba.T @ Bui.T @ Muu @ Bui @ Bud) @ etad[IU]
        + h[IA]
        - Ba.T @ Bui.T @ h[IU]
    )
    np.testing.assert_allclose(Q_star, eq8, rtol=1e-12, atol=1e-12)
    f = lambda e: end_effector(SYSTEM, e)  # noqa: E731
    Gam = np.asarray(jax.jacfwd(f)(Q0))
    eq10 = Gam[:, IA] - Gam[:, IU] @ Bui @ Ba
    np.testing.assert_allclose(task_jacobian(SYSTEM, PLANT.driven, f, Q0), eq10, atol=1e-13)
    # eq. (12): A = K^-1 I^r M* J^-1 against the formula-free route (d T / d snap)
    K, Ir = np.asarray(PLANT.stiffness), np.asarray(PLANT.reduced_rotor_inertia)
    eq12 = np.diag(Ir / K) @ eq7 @ np.linalg.inv(eq10)
    np.testing.assert_allclose(task_inertia(PLANT, end_effector, Q0), eq12, rtol=1e-11)


def test_time_derivatives_of_a_closed_form():
    """One nest of forward passes gives every order: ``exp(c t) sin(w t + p)`` has the k-th
    derivative ``Im((c + i w)^k e^{i p})`` at t = 0."""
    c, w, p = -0.7, 3.0, 0.4
    got = time_derivatives(lambda t: jnp.exp(c * t) * jnp.sin(w * t + p), 5)
    want = [np.imag((c + 1j * w) ** k * np.exp(1j * p)) for k in range(6)]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13)


def test_inverse_dynamics_gives_the_commanded_snap_on_the_plant():
    """The law's estimates (eqs. (20)-(21)) equal the plant's own derivatives along its flow,
    and the torque of eq. (14) for a snap u makes the plant's x'''' equal u (eq. (11) with a
    perfect model): the plant integrates Aghili's projection in seven dependent coordinates, the
    law reduces by Taylor jets on three, so the two routes are independent."""
    rng = np.random.default_rng(3)
    qd = projector(SYSTEM, Q0) @ jnp.asarray(rng.normal(size=7))
    y = PLANT.initial_state(
        Q0, qd,
        {j: {"phi": Q0[i] + 0.01 * rng.normal(), "phid": qd[i] + 0.1 * rng.normal()}
         for i, j in enumerate(PLANT.joints)},
    )  # fmt: skip
    u = jnp.asarray(rng.normal(size=3)) * 100

    @eqx.filter_jit
    def check(plant, y, u):
        jet = estimated_jet(plant, y)
        T, _ = _torque_for_snap(plant, end_effector, jet, u)

        def along(orders):  # orders 0..k of (q, x) -> 0..k+1, along the flow under constant T
            def more(yy):
                value, rate = jax.jvp(orders, (yy,), (plant.vector_field(0.0, yy, T),))
                return (*value, rate[-1])

            return more

        # one nest: each pass's primal carries the lower orders (a nest per order and per
        # output traced the vector field 2 + 4 + 8 + 16 times for the snap alone)
        def orders(yy):
            return ((yy["q"], end_effector(plant.system, yy["q"])),)

        for _ in range(4):
            orders = along(orders)
        got = orders(y)
        return jet, [o[0] for o in got[:4]], [o[1] for o in got]

    jet, flow, x = check(PLANT, y, u)
    for k in range(4):
        np.testing.assert_allclose(
            jet[k], flow[k], atol=1e-12 * max(1.0, float(jnp.abs(flow[k]).max()))
        )
    np.testing.assert_allclose(x[4], u, rtol=1e-9)


# --------------------------------------------------------------------------------------------
# Section 6 through the CLI
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    out = tmp_path_factory.mktemp("rpr3")
    assert main(["simulate", "--machine", "rpr3-flexible", "--t-final", "1.2", "--out",
                 str(out), "--quiet"]) == 0  # fmt: skip
    return out, json.loads((out / "summary.json").read_text())


def test_case_study_writes_figures_tables_and_summary(case):
    out, s = case
    for name in ("fig2_positions.png", "fig3_velocities.png", "fig4_deflections_torques.png",
                 "tracking_errors.csv", "series.csv"):  # fmt: skip
        assert (out / name).stat().st_size > 0
    assert s["success"]
    assert set(s) == set(FOURTH_ORDER)  # docs/reference.md
    assert not unlisted(out, FOURTH_ORDER_FILES)
    err = s["max_abs_error_after_1s"]
    assert set(err) == {"x_G", "y_G", "theta7"}
    # tracking through the 10 % model error and the impact: sub-millimetre after 1 s
    assert max(err.values()) < 1e-3
    imp = s["impact"]
    assert abs(imp["time_s"] - 0.25) < 1e-3  # found by the event, near the paper's 0.25 s
    assert imp["impulse_H_N_s"] > 0
    assert max(abs(v) for v in imp["task_velocity_jump"].values()) > 0.1
    rows = (out / "tracking_errors.csv").read_text().splitlines()
    assert rows[0].startswith("coordinate") and len(rows) == 4


def test_case_study_stability_verdict(case):
    """The paper's error model scales masses, inertias, rotors and springs alike, so
    E = A^-1 A_est = 0.9 I exactly (eq. (12)); Upsilon is then constant and its eigenvalues are
    the roots of lambda^4 + 0.9 (C1 lambda^3 + C2 lambda^2 + C3 lambda + C4), computed here by
    numpy; Delta_M is round-off and Desoer's condition holds."""
    _, s = case
    st = s["stability"]
    np.testing.assert_allclose(st["E_eigenvalue_range"], [0.9, 0.9], atol=1e-12)
    assert st["E_variation_max_abs"] < 1e-12
    C1, C2, C3, C4 = (float(c) for c in itae_gains(50.0))
    roots = np.roots([1.0, 0.9 * C1, 0.9 * C2, 0.9 * C3, 0.9 * C4])
    np.testing.assert_allclose(st["sigma0"], -roots.real.max(), rtol=1e-9)
    assert st["m"] >= 1.0
    assert st["delta_M"] < 1e-9
    assert st["desoer_condition_holds"] == (st["delta_M"] <= st["desoer_bound_sigma0^2/(3m^4)"])
    assert st["desoer_condition_holds"]
    # eq. (31): the quasi-static estimate of the error during the deployment, after the
    # transients, against the simulated error (measured: within 30 % of its peak)
    ss = s["steady_state_estimate_eq31"]
    for c in ("x_G", "y_G", "theta7"):
        peak = ss["max_abs_simulated_error"][c]
        assert peak > 1e-5
        np.testing.assert_allclose(ss["max_abs_estimate"][c], peak, rtol=0.1)
        assert ss["max_abs_difference"][c] < 0.3 * peak


def test_stability_analysis_with_a_configuration_dependent_E():
    """An error in the platform alone makes E vary along the motion: Delta_M (eq. (28)) from the
    exact E' must match finite differences of Upsilon along the samples, and m bounds
    |exp(Upsilon tau)| exp(sigma0 tau / 2) as eq. (29) says."""
    system = PLANT.system
    light = eqx.tree_at(lambda p: p.system.model.bodies[-1].mass, PLANT,
                        PLANT.system.model.bodies[-1].mass * 0.7)  # fmt: skip
    ctrl = FourthOrderController(light, end_effector, reference, itae_gains(50.0))
    # states along a motion of theta1 (the others follow the loop closure), rates by differences
    ts = jnp.linspace(0.3, 0.7, 41)
    qs = [assemble(system, {"theta1": float(Q0[0]) + 0.3 * float(t - 0.3),
                            "theta3": float(Q0[1]), "theta5": float(Q0[2])}, Q0)
          for t in np.asarray(ts)]  # fmt: skip
    qs = jnp.stack(qs)
    qds = jnp.gradient(qs, ts, axis=0)
    qds = jax.vmap(lambda q, v: projector(system, q) @ v)(qs, qds)
    ys = jax.vmap(lambda q, v: PLANT.initial_state(q, v))(qs, qds)
    rep = eqx.filter_jit(stability_analysis)(ctrl, PLANT, ts, ys, steady_state=False)
    E = np.asarray(rep.E)
    assert np.max(np.abs(E - E[:1])) > 1e-3  # E varies
    # Upsilon (eq. (25)) rebuilt here in numpy, in the same scaled coordinates
    C = [np.asarray(c) for c in (ctrl.C1, ctrl.C2, ctrl.C3, ctrl.C4)]
    w = C[3] ** 0.25
    sc = np.concatenate([w**-k for k in range(4)])
    Z, I = np.zeros((3, 3)), np.eye(3)
    U = np.stack(
        [
            np.block(
                [
                    [Z, I, Z, Z],
                    [Z, Z, I, Z],
                    [Z, Z, Z, I],
                    [-e * C[3], -e * C[2], -e * C[1], -e * C[0]],
                ]
            )
            for e in E
        ]  # fmt: skip
    ) * (sc[None, :, None] / sc[None, None, :])
    fd = np.linalg.norm((U[2:] - U[:-2]) / (2 * float(ts[1] - ts[0])), 2, axis=(1, 2))
    np.testing.assert_allclose(float(rep.delta_M), fd.max(), rtol=0.02)
    lam = np.linalg.eigvals(U)
    np.testing.assert_allclose(float(rep.sigma0), -lam.real.max(), rtol=1e-8)
    # eq. (29) on a few samples and times, by eigendecomposition (U is diagonalisable here)
    sigma0, m = float(rep.sigma0), float(rep.m)
    for Uk in U[::10]:
        vals, vecs = np.linalg.eig(Uk)
        inv = np.linalg.inv(vecs)
        for tau in (0.0, 0.01, 0.05, 0.2):
            expU = (vecs * np.exp(vals * tau)[None, :]) @ inv
            assert np.linalg.norm(expU.real, 2) <= m * np.exp(-sigma0 * tau / 2) * (1 + 1e-6)
    assert bool(rep.desoer_holds) == (float(rep.delta_M) <= float(rep.desoer_bound))


@pytest.mark.parametrize("t_final", ["0.1", "1.001", "-2"])
def test_a_run_too_short_for_the_report_is_refused_up_front(tmp_path, t_final):
    """The report reads the errors after 1 s and checks eq. (31) over 0.6-0.95 s: a shorter
    run (or one off the 2 ms sampling grid) is refused before anything compiles or is
    written, naming the option (a 0.1 s run used to end in a numpy error on an empty window)."""
    out = tmp_path / "r"
    argv = ["simulate", "--machine", "rpr3-flexible", f"--t-final={t_final}", "--out", str(out)]
    with pytest.raises(SystemExit, match=r"--t-final: expected a multiple of .* at least 1 s"):
        main(argv)
    assert not out.exists()
