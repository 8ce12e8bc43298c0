"""Shared jitted functions and references that share no code with jaxmb."""

import equinox as eqx
import numpy as np

import jaxmb

mass_matrix = eqx.filter_jit(jaxmb.mass_matrix)
body_mass_matrices = eqx.filter_jit(jaxmb.body_mass_matrices)
bias_lagrangian = eqx.filter_jit(lambda m, q, qd: jaxmb.bias_forces(m, q, qd, method="lagrangian"))
bias_rnea = eqx.filter_jit(lambda m, q, qd: jaxmb.bias_forces(m, q, qd, method="rnea"))
gravity_forces = eqx.filter_jit(jaxmb.gravity_forces)
coriolis_matrix = eqx.filter_jit(jaxmb.coriolis_matrix)
inverse_dynamics = eqx.filter_jit(jaxmb.inverse_dynamics)
forward_dynamics = eqx.filter_jit(jaxmb.forward_dynamics)
regressor = eqx.filter_jit(jaxmb.regressor)
kinetic_energy = eqx.filter_jit(jaxmb.kinetic_energy)
potential_energy = eqx.filter_jit(jaxmb.potential_energy)

# arm constants from shared/specs/series_parallel_3dof.md, typed in again on purpose
SPEC_L0, SPEC_l0 = 0.35, 0.425


def arm_state(rng, n_states=1, stroke=(0.0, 0.2)):
    """Random arm states inside the stroke."""
    q = np.column_stack(
        [
            rng.uniform(-np.pi, np.pi, n_states),
            rng.uniform(-1.0, 1.5, n_states),
            rng.uniform(*stroke, n_states),
        ]
    )
    qd = rng.normal(size=(n_states, 3)) * np.array([1.0, 1.0, 0.1])
    return q, qd


def rot_x(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def rot_z(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def skew_np(w):
    """[w] with [w] x = w x x, written out."""
    return np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
