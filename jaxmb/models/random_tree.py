"""Random kinematic trees as URDF, for tests and benchmarks (`serial_chain`, `random_tree_urdf`).

Generated as URDF text so that an independent implementation (Pinocchio) can load exactly the
same system. Joint axes are random unit vectors, placements and inertial frames are randomly
rotated, inertias are physically realisable (principal moments from random point-mass-like
distributions)."""

import numpy as np

from jaxmb.io.urdf import load_urdf
from jaxmb.multibody.model import Model

__all__ = ["random_tree_urdf", "serial_chain"]


def _rpy(rng):
    return rng.uniform(-np.pi, np.pi, 3) * np.array([1.0, 0.45, 1.0])  # keep pitch off +-pi/2


def _principal_moments(rng, m):
    # moments of a box with random sides: always satisfy the triangle inequalities
    a, b, c = rng.uniform(0.05, 0.5, 3)
    return m / 12 * np.array([b * b + c * c, a * a + c * c, a * a + b * b])


def random_tree_urdf(
    n: int,
    seed: int,
    *,
    branching: bool = False,
    prismatic_every: int = 3,
    fixed_every: int = 4,
) -> str:
    """A URDF robot with ``n`` moving joints (revolute, every ``prismatic_every``-th prismatic),
    a fixed joint after every ``fixed_every``-th moving joint (0: none), and, with ``branching``,
    each link attached to a random earlier link instead of the previous one."""
    if n < 1:
        raise ValueError(f"n: expected at least 1 moving joint, got {n}")
    rng = np.random.default_rng(seed)
    fmt = lambda v: " ".join(f"{x:.17g}" for x in v)  # noqa: E731 - exact round trip
    lines = [f'<robot name="random_{n}_{seed}">', '  <link name="base"/>']
    links = ["base"]

    def link(name):
        m = rng.uniform(0.5, 5.0)
        Ip = _principal_moments(rng, m)
        lines.append(
            f'  <link name="{name}"><inertial><origin xyz="{fmt(rng.uniform(-0.2, 0.2, 3))}" '
            f'rpy="{fmt(_rpy(rng))}"/><mass value="{m:.17g}"/><inertia ixx="{Ip[0]:.17g}" '
            f'ixy="0" ixz="0" iyy="{Ip[1]:.17g}" iyz="0" izz="{Ip[2]:.17g}"/></inertial></link>'
        )

    def joint(name, jtype, parent, child):
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        limit = (
            '<limit lower="-3" upper="3" effort="100" velocity="10"/>' if jtype != "fixed" else ""
        )
        ax = f'<axis xyz="{fmt(axis)}"/>' if jtype != "fixed" else ""
        lines.append(
            f'  <joint name="{name}" type="{jtype}"><parent link="{parent}"/><child link="{child}"/>'
            f'<origin xyz="{fmt(rng.uniform(-0.4, 0.4, 3))}" rpy="{fmt(_rpy(rng))}"/>{ax}{limit}</joint>'
        )

    for i in range(1, n + 1):
        parent = links[rng.integers(len(links))] if branching else links[-1]
        jtype = "prismatic" if prismatic_every and i % prismatic_every == 0 else "revolute"
        name = f"link{i}"
        link(name)
        joint(f"joint{i}", jtype, parent, name)
        links.append(name)
        if fixed_every and i % fixed_every == 0:
            link(f"{name}_tool")
            joint(f"fixed{i}", "fixed", name, f"{name}_tool")
            links.append(f"{name}_tool")
    lines.append("</robot>")
    return "\n".join(lines)


def serial_chain(n: int, seed: int = 0) -> Model:
    """A random serial chain of ``n`` revolute/prismatic joints (see `random_tree_urdf`)."""
    return load_urdf(random_tree_urdf(n, seed))
