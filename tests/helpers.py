"""Shared jitted functions, and references that share no code with jaxmb."""

from functools import partial

import numpy as np

import jaxmb

# jaxmb's public functions are already equinox.filter_jit-ed: one compiled version per model
# structure is shared by every test that imports these names
mass_matrix = jaxmb.mass_matrix
body_mass_matrices = jaxmb.body_mass_matrices
bias_lagrangian = partial(jaxmb.bias_forces, method="lagrangian")
bias_rnea = partial(jaxmb.bias_forces, method="rnea")
gravity_forces = jaxmb.gravity_forces
coriolis_matrix = jaxmb.coriolis_matrix
inverse_dynamics = jaxmb.inverse_dynamics
forward_dynamics = jaxmb.forward_dynamics
regressor = jaxmb.regressor
kinetic_energy = jaxmb.kinetic_energy
potential_energy = jaxmb.potential_energy

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
