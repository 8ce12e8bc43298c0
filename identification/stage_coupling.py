r"""Stage 2's covariance with stage 1's uncertainty carried into it (a two-step estimator).

Stage 2 (output error) fits theta with stage 1's bodies held at their estimate ``p1``
(`mechanics.identify_mechanics`), so its own covariance (`output_error.theta_covariance`) is
theta's spread *given* those bodies. To first order a change ``dp1`` of the held bodies moves the
estimate by ``G dp1``, ``G = -(J2^T J2)^{-1} J2^T J1`` with ``J1`` the residuals' Jacobian in
the held parameters. Taking stage 1's errors as independent of stage 2's residuals (both read
the same pressures, stage 1 low-passed: Murphy & Topel's cross term is left out),

    Cov(theta) = Cov2 + G Cov1 G^T,    Cov(theta, p1) = G Cov1

(Murphy & Topel 1985, two-step maximum likelihood; here with stage 1's Laplace covariance
``Cov1``). Measured on the knuckle's 40 s log: the truth lay 668 in squared Mahalanobis
distance from the long refit's estimate by stage 2's covariance alone (21 parameters; chi^2 95
%: 32.7), 35 with stage 1's bodies carried; given the true bodies the same fit put it at 31.5.

The held bodies enter through the plant's selectors ``body.<b>.<mass|com_x|com_y|com_z|I_xx|
I_yy|I_zz>`` (`HydraulicParameters`), stage 1's friction through ``friction.<a>.<F_c|F_s|
sigma>`` where stage 2 holds them (the static force always: it stays at the file's ratio to
stage 1's Coulomb force); stage 1's body parameters are each body's mass, first moments
and inertia about its frame's origin (`regressor.INERTIAL_NAMES`), mapped to those selectors
by `selector_map` (the products of inertia have no selector and are left out: on the knuckle
they did not matter, its booms move in one plane). A selector that stage 2 fits itself (a
boom's mass in the long refit) takes nothing from stage 1."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from jaxmb.actuators.parameters import additive_step
from jaxmb.identification.regressor import INERTIAL_NAMES

__all__ = ["held_selectors", "selector_map", "carried"]

_FIELDS = ("mass", "com_x", "com_y", "com_z", "I_xx", "I_yy", "I_zz")


def held_selectors(
    stage1_names: Sequence[str],
    stage1_values: Float[np.ndarray, " Q"],
    fitted: Sequence[str],
    stribeck: Sequence[str] = (),
) -> tuple[str, ...]:
    """The plant's selectors that stage 1 set and stage 2 holds (not in ``fitted``): every
    body's of each body stage 1 fitted (``<body>.m`` among ``stage1_names``), and for each
    cylinder of ``stribeck`` (a Stribeck law, which takes stage 1's friction where its
    Coulomb force came out positive: ``hydraulic_route``) its Coulomb and static forces (the
    static at the file's ratio to the Coulomb) and, where positive, its viscous coefficient."""
    fitted, value = set(fitted), dict(zip(stage1_names, np.asarray(stage1_values), strict=True))
    bodies = [n[: -len(".m")] for n in stage1_names if n.endswith(".m")]
    out = [f"body.{b}.{f}" for b in bodies for f in _FIELDS]
    for a in stribeck:
        if value.get(f"friction.{a}.F_c", 0.0) > 0:
            out += [f"friction.{a}.F_c", f"friction.{a}.F_s"]
            if value.get(f"friction.{a}.sigma", 0.0) > 0:
                out.append(f"friction.{a}.sigma")
    return tuple(n for n in out if n not in fitted)


def _selector_values(p: Float[jax.Array, " 10"]) -> dict:
    # mass, centre c = (m c) / m, inertia about the centre I_o - m (|c|^2 1 - c c^T)
    m, mcx, mcy, mcz, Ixx, _, Iyy, _, _, Izz = p
    c = jnp.stack([mcx, mcy, mcz]) / m
    return {
        "mass": m, "com_x": c[0], "com_y": c[1], "com_z": c[2],
        "I_xx": Ixx - m * (c[1] ** 2 + c[2] ** 2),
        "I_yy": Iyy - m * (c[0] ** 2 + c[2] ** 2),
        "I_zz": Izz - m * (c[0] ** 2 + c[1] ** 2),
    }  # fmt: skip


def selector_map(
    selectors: Sequence[str],
    stage1_names: Sequence[str],
    stage1_values: Float[np.ndarray, " Q"],
    plant_values: Mapping[str, float],
) -> Float[np.ndarray, "S Q"]:
    """``d theta_s / d p1``: how each selector's theta (the log of its value in the plant,
    ``plant_values``, or a centre's coordinate in `additive_step` units) moves with stage 1's
    parameters, at stage 1's estimate (`held_selectors`'s)."""
    names = list(stage1_names)
    values = np.asarray(stage1_values, float)
    T = np.zeros((len(selectors), len(names)))
    for i, sel in enumerate(selectors):
        part, body, field = sel.split(".")
        if part == "friction":  # log of F_c (F_s its multiple) or sigma: d value / value
            k = names.index(f"friction.{body}.{'sigma' if field == 'sigma' else 'F_c'}")
            T[i, k] = 1.0 / values[k]
            continue
        idx = [names.index(f"{body}.{x}") for x in INERTIAL_NAMES]
        p = jnp.asarray(values[idx])
        grad = np.asarray(jax.grad(lambda q, f=field: _selector_values(q)[f])(p))
        T[i, idx] = grad / (additive_step(sel) if field.startswith("com") else plant_values[sel])
    return T


def carried(
    cov2: Float[np.ndarray, "P P"],
    J2: Float[np.ndarray, "N P"],
    J1: Float[np.ndarray, "N S"],
    T: Float[np.ndarray, "S Q"],
    cov1: Float[np.ndarray, "Q Q"],
) -> tuple[Float[np.ndarray, "P P"], Float[np.ndarray, "P Q"]]:
    """``(Cov(theta), Cov(theta, p1))`` of the module docstring from stage 2's covariance
    ``cov2`` and (weighted) Jacobian ``J2``, the residuals' Jacobian ``J1`` in the held
    selectors' theta, `selector_map`'s ``T`` and stage 1's covariance ``cov1``. A parameter
    that the residuals do not determine keeps its row of ``cov2`` (0: its std is infinite
    elsewhere)."""
    J2 = np.asarray(J2, float)
    G = -np.linalg.pinv(J2.T @ J2) @ (J2.T @ (np.asarray(J1, float) @ T))
    cross = G @ cov1
    dead = ~np.any(np.asarray(cov2) != 0, axis=1)  # undetermined: left as stage 2 had it
    cross[dead] = 0.0
    total = np.asarray(cov2) + cross @ G.T
    total[dead], total[:, dead] = cov2[dead], cov2[:, dead]
    return 0.5 * (total + total.T), cross
