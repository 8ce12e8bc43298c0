r"""Hydraulic cylinders, valves and friction (Petrovic & Mattila (2022) Section 3.4).

Every constant is an array leaf, so identification differentiates with respect to it and Monte
Carlo studies vmap over perturbed copies. SI units throughout: Pa, m, m^2, m^3, m^3/s, N, V.

- `CylinderMount`: where a cylinder sits on a jaxmb `Model`: a base pin on one frame and a rod
  pin on another. Piston position ``x(q) = |AB| - l_min``, velocity ``xdot = J_x(q) qd`` and
  generalized force ``J_x^T f`` by autodiff, so any model (the crane's two cylinders, the arm's
  elbow) uses the same code.
- `Cylinder`: areas, stroke, dead volumes, leakage; piston force (eq. (79)) and chamber
  pressure dynamics (eqs. (80)-(81) with dead volumes, which removes their singularities).
- `Valve`: four-edge spool valve flows (eqs. (82)-(85)), command saturation, flow coefficients
  from a datasheet, optional first- or second-order spool lag.
- `StribeckFriction` (the spec's smooth Coulomb/Stribeck/viscous law) and `LuGreFriction`
  (Canudas de Wit et al. 1995) with its internal bristle state.
- `HydraulicActuator`: mount + cylinder + valve + friction, with its own state.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxmb.multibody.checks import (
    check_coordinates,
    checked,
    finite_inputs,
    not_finite,
    not_nonnegative,
    not_positive,
)
from jaxmb.multibody.kinematics import resolve_frame, world_transforms
from jaxmb.multibody.model import WORLD, Model
from jaxmb.multibody.spatial import small_matmul

__all__ = [
    "BAR",
    "signed_sqrt",
    "CylinderMount",
    "Cylinder",
    "Valve",
    "AbstractFriction",
    "StribeckFriction",
    "LuGreFriction",
    "PressureTransducers",
    "HydraulicActuator",
]

BAR = 1e5  # Pa


def _positive(owner: str, name: str, x, allow_zero: bool = False):
    bad = not_nonnegative if allow_zero else not_positive
    rel = ">= 0" if allow_zero else "> 0"
    return checked(x, bad, f"{owner}: {name} must be {rel} and finite", ())


def signed_sqrt(dp, width):
    r"""$v(\Delta p) = \mathrm{sign}(\Delta p)\sqrt{|\Delta p|}$ of Petrovic & Mattila (2022)
    eq. (85), regularised as $\Delta p / (\Delta p^2 + w^2)^{1/4}$.

    ``width`` ``w`` (Pa) is a model parameter: the slope at zero is ``1/sqrt(w)`` instead of
    infinite, so values and gradients stay finite where a chamber pressure crosses supply or
    return. Away from zero the relative error is ``1 - (1 + (w/dp)^2)^(-1/4) <= (w/dp)^2 / 4``:
    with the default w = 1e3 Pa (0.01 bar) it is below 2.5e-5 for |dp| >= 1 bar."""
    return dp / (dp * dp + width * width) ** 0.25


class CylinderMount(eqx.Module):
    r"""A cylinder between two frames of a model: base pin ``base_point`` in ``base_frame`` and
    rod pin ``rod_point`` in ``rod_frame`` (m, frame coordinates).

    ``x(q) = |p_rod - p_base| - l_min`` (the spec's piston position; ``l_min`` is the pin
    distance at zero stroke), ``xdot = J_x qd`` with ``J_x = dx/dq`` by autodiff, and a piston
    force ``f`` along the axis (positive pushing the pins apart) enters the equations of motion
    as the generalized force ``J_x^T f``: the virtual work ``f dx``."""

    base_frame: str = eqx.field(static=True)
    rod_frame: str = eqx.field(static=True)
    base_point: Float[Array, 3]
    rod_point: Float[Array, 3]
    l_min: Float[Array, ""]

    def __init__(self, base_frame: str, base_point, rod_frame: str, rod_point, l_min):
        self.base_frame, self.rod_frame = base_frame, rod_frame
        self.base_point = checked(
            base_point, not_finite, "CylinderMount: base_point must be finite", (3,)
        )
        self.rod_point = checked(
            rod_point, not_finite, "CylinderMount: rod_point must be finite", (3,)
        )
        self.l_min = _positive("CylinderMount", "l_min", l_min)

    def length(self, model: Model, q: Float[Array, " n"]) -> Float[Array, ""]:
        """Pin distance ``|AB|``, m."""
        return _mount_length(model, q, self)

    def length_at(self, model: Model, transforms) -> Float[Array, ""]:
        """Pin distance ``|AB|`` from the model's frame transforms (`world_transforms`), so that
        several mounts share one kinematic pass."""
        a = _point_in_world(model, transforms, self.base_frame, self.base_point)
        b = _point_in_world(model, transforms, self.rod_frame, self.rod_point)
        return jnp.linalg.norm(b - a)

    def position(self, model: Model, q: Float[Array, " n"]) -> Float[Array, ""]:
        """Piston position ``x = |AB| - l_min``, m."""
        return self.length(model, q) - self.l_min

    def position_and_jacobian(
        self, model: Model, q: Float[Array, " n"]
    ) -> tuple[Float[Array, ""], Float[Array, " n"]]:
        """``(x, J_x)`` with ``J_x = dx/dq`` (row), so ``xdot = J_x qd`` and the generalized force
        of a piston force ``f`` is ``J_x f``."""
        return jax.value_and_grad(lambda q_: self.position(model, q_))(q)


def _mount_length(
    model: Model, q: Float[ArrayLike, " n"], mount: CylinderMount
) -> Float[Array, ""]:
    """`CylinderMount.length` with the public functions' checks (`finite_inputs`, the model's
    type, ``q``'s shape) and one compiled program per model structure."""
    return mount.length_at(model, world_transforms(model, check_coordinates(model, q)))


_mount_length.__name__ = "CylinderMount.length"  # what the checks' messages name
_mount_length = finite_inputs(eqx.filter_jit(_mount_length))


def _point_in_world(model: Model, transforms, frame: str, point) -> Array:
    if frame == WORLD:
        return point
    k, com = resolve_frame(model, frame)
    R, p = transforms[k]
    if com is not None:  # COM frames are parallel to their body frame
        point = point + com
    return small_matmul(R, point) + p


class Cylinder(eqx.Module):
    r"""A double-acting cylinder: piston-side area ``area_a``, rod-side ``area_b`` (m^2),
    ``stroke`` (m), dead (hose) volumes ``V0_a``, ``V0_b`` (m^3), effective bulk modulus
    ``beta`` (Pa), internal leakage ``c_int`` (a -> b) and external leakage ``c_ext`` (each
    chamber to tank), both laminar, m^3/(s Pa).

    Chamber volumes ``V_a = V0_a + A_a x``, ``V_b = V0_b + A_b (stroke - x)``.

    End stops: beyond ``0 <= x <= stroke`` a stiff spring ``k_stop`` (N/m) with damping
    ``c_stop`` (N s/m) pushes the piston back (`end_stop_force`), so a run that hits an end
    goes on with the piston at the end, as on a machine, and reports it (`jaxmb.actuators.plant.limit_events`)
    instead of crushing a chamber to zero volume. Defaults 1e8 N/m and 2e6 N s/m (this
    project's choice: about critically damped for the crane's ~3e4 kg effective piston mass,
    penetration about 1.5 mm at 150 kN)."""

    area_a: Float[Array, ""]
    area_b: Float[Array, ""]
    stroke: Float[Array, ""]
    V0_a: Float[Array, ""]
    V0_b: Float[Array, ""]
    beta: Float[Array, ""]
    c_int: Float[Array, ""]
    c_ext: Float[Array, ""]
    k_stop: Float[Array, ""]
    c_stop: Float[Array, ""]

    def __init__(
        self, area_a, area_b, stroke, V0_a, V0_b, beta, c_int=0.0, c_ext=0.0, k_stop=1e8, c_stop=2e6
    ):
        o = "Cylinder"
        self.area_a = _positive(o, "area_a", area_a)
        self.area_b = _positive(o, "area_b", area_b)
        self.stroke = _positive(o, "stroke", stroke)
        self.V0_a = _positive(o, "V0_a", V0_a)
        self.V0_b = _positive(o, "V0_b", V0_b)
        self.beta = _positive(o, "beta", beta)
        self.c_int = _positive(o, "c_int", c_int, allow_zero=True)
        self.c_ext = _positive(o, "c_ext", c_ext, allow_zero=True)
        self.k_stop = _positive(o, "k_stop", k_stop, allow_zero=True)
        self.c_stop = _positive(o, "c_stop", c_stop, allow_zero=True)

    @classmethod
    def from_bore(cls, bore, rod, stroke, V0, beta, **leakage) -> Cylinder:
        """Areas from bore and rod diameters (m): ``A_a = pi bore^2/4``, ``A_b = A_a - pi rod^2/4``."""
        A_a = jnp.pi * jnp.asarray(bore, float) ** 2 / 4
        A_b = A_a - jnp.pi * jnp.asarray(rod, float) ** 2 / 4
        return cls(A_a, A_b, stroke, V0, V0, beta, **leakage)

    def volumes(self, x) -> tuple[Array, Array]:
        """``(V_a, V_b)``, m^3."""
        return self.V0_a + self.area_a * x, self.V0_b + self.area_b * (self.stroke - x)

    def force(self, p_a, p_b):
        r"""Piston force $f_p = A_a p_a - A_b p_b$ (Petrovic & Mattila (2022) eq. (79)), N."""
        return self.area_a * p_a - self.area_b * p_b

    def end_stop_force(self, x, xd):
        """Axial force of the end stops (N, positive extending): zero inside the stroke,
        ``-k_stop (x - stroke) - c_stop xdot`` beyond its end, ``-k_stop x - c_stop xdot``
        below zero."""
        over = jnp.maximum(x - self.stroke, 0.0)
        under = jnp.minimum(x, 0.0)
        contact = (over > 0) | (under < 0)
        return -self.k_stop * (over + under) - jnp.where(contact, self.c_stop * xd, 0.0)

    def pressure_rates(self, x, xd, p_a, p_b, Q_a, Q_b) -> tuple[Array, Array]:
        r"""Chamber pressure rates (Petrovic & Mattila (2022) eqs. (80)-(81) with dead volumes
        and leakage):

            pdot_a = beta / V_a (Q_a - A_a xdot - c_int (p_a - p_b) - c_ext p_a)
            pdot_b = beta / V_b (Q_b + A_b xdot + c_int (p_a - p_b) - c_ext p_b)

        With ``V0 = 0`` and no leakage this is eqs. (80)-(81) exactly. Flows ``Q`` into the
        chambers, m^3/s; returns Pa/s."""
        V_a, V_b = self.volumes(x)
        leak = self.c_int * (p_a - p_b)
        dp_a = self.beta / V_a * (Q_a - self.area_a * xd - leak - self.c_ext * p_a)
        dp_b = self.beta / V_b * (Q_b + self.area_b * xd + leak - self.c_ext * p_b)
        return dp_a, dp_b

    def stiffness(self, x) -> Array:
        r"""Hydraulic spring rate $\beta (A_a^2 / V_a + A_b^2 / V_b)$, N/m: with the load mass
        it sets the hydraulic natural frequency, the reason the third-order loop is stiff."""
        V_a, V_b = self.volumes(x)
        return self.beta * (self.area_a**2 / V_a + self.area_b**2 / V_b)


class Valve(eqx.Module):
    r"""A four-edge proportional spool valve (Petrovic & Mattila (2022) eqs. (82)-(85)).

    Flows into the chambers for the (saturated, lagged) spool command ``u`` in V:

        Q_a = c_pa v(p_s - p_a) u S(u)  + c_an v(p_a - p_r) u S(-u)         (82)
        Q_b = -c_bn v(p_b - p_r) u S(u) - c_pb v(p_s - p_b) u S(-u)         (83)

    (``c_pa, c_an, c_pb, c_bn`` are the paper's ``c_p1, c_n1, c_p2, c_n2``; ``S`` is the
    selection function of eq. (84), ``v`` the regularised signed root of eq. (85),
    `signed_sqrt`). ``u > 0`` connects the piston side to supply (the cylinder extends).

    Spool overlap (the dead band of mobile valves): with ``deadband`` ``u_db`` the edges meter
    the effective opening ``u_e = sign(u) max(|u| - u_db, 0)`` in place of ``u`` (`opening`),
    so no flow passes until the spool leaves the band. ``u_db = 0``, the default, is the ideal
    zero-lapped valve of eqs. (82)-(85).

    Attributes:
        c_pa, c_an, c_pb, c_bn: flow coefficients per edge, m^3 s^-1 V^-1 Pa^-1/2.
        p_s, p_r: supply and return pressures, Pa.
        u_max: command saturation, V (commands are clipped to [-u_max, u_max]).
        deadband: spool overlap ``u_db``, V (command units): ``0 <= u_db < u_max``.
        delay: transport delay of the command, s (bus and driver): the spool is driven by the
            command sent ``delay`` earlier. Replays of logged commands take it exactly
            (`jaxmb.simulation.CommandTable`), a sampled feedback loop holds the commands
            sent until they arrive (`jaxmb.simulation.zero_order_hold`); a continuous one
            refuses a delay.
        dp_width: width of the square root's regularisation, Pa (`signed_sqrt`).
        spool: ``"none"`` (the spool follows the command), ``"first"`` (time constant
            ``tau``, s) or ``"second"`` (natural frequency ``omega``, rad/s, damping ``zeta``).
    """

    c_pa: Float[Array, ""]
    c_an: Float[Array, ""]
    c_pb: Float[Array, ""]
    c_bn: Float[Array, ""]
    p_s: Float[Array, ""]
    p_r: Float[Array, ""]
    u_max: Float[Array, ""]
    deadband: Float[Array, ""]
    delay: Float[Array, ""]
    dp_width: Float[Array, ""]
    tau: Float[Array, ""]
    omega: Float[Array, ""]
    zeta: Float[Array, ""]
    spool: str = eqx.field(static=True)

    def __init__(
        self,
        c_pa,
        c_an,
        c_pb,
        c_bn,
        p_s,
        p_r,
        *,
        u_max=10.0,
        deadband=0.0,
        delay=0.0,
        dp_width=1e3,
        spool: str = "none",
        tau=0.01,
        omega=150.0,
        zeta=0.7,
    ):
        o = "Valve"
        if spool not in ("none", "first", "second"):
            raise ValueError(f"Valve: spool must be 'none', 'first' or 'second', got {spool!r}")
        self.spool = spool
        self.c_pa = _positive(o, "c_pa", c_pa, allow_zero=True)
        self.c_an = _positive(o, "c_an", c_an, allow_zero=True)
        self.c_pb = _positive(o, "c_pb", c_pb, allow_zero=True)
        self.c_bn = _positive(o, "c_bn", c_bn, allow_zero=True)
        self.p_s = _positive(o, "p_s", p_s)
        self.p_r = _positive(o, "p_r", p_r, allow_zero=True)
        if not isinstance(self.p_s, jax.core.Tracer) and not isinstance(self.p_r, jax.core.Tracer):
            if not float(self.p_s) > float(self.p_r):
                raise ValueError(
                    f"Valve: supply pressure p_s must exceed return p_r; got {float(self.p_s)} "
                    f"<= {float(self.p_r)} Pa"
                )
        self.u_max = _positive(o, "u_max", u_max)
        self.deadband = _positive(o, "deadband", deadband, allow_zero=True)
        self.delay = _positive(o, "delay", delay, allow_zero=True)
        if not any(isinstance(x, jax.core.Tracer) for x in (self.deadband, self.u_max)):
            if not float(self.deadband) < float(self.u_max):
                raise ValueError(
                    f"Valve: deadband must be below the command range u_max; got "
                    f"{float(self.deadband)} >= {float(self.u_max)}"
                )
        self.dp_width = _positive(o, "dp_width", dp_width)
        self.tau = _positive(o, "tau", tau)
        self.omega = _positive(o, "omega", omega)
        self.zeta = _positive(o, "zeta", zeta)

    @classmethod
    def from_datasheet(cls, q_nom, dp_nom, p_s, p_r, *, u_nom=10.0, **options) -> Valve:
        r"""A symmetric valve from its datasheet rating: nominal flow ``q_nom`` (m^3/s) at the
        pressure drop ``dp_nom`` (Pa) per notch (one metering edge) at the command ``u_nom``
        (V): ``c = q_nom / ((u_nom - u_db) sqrt(dp_nom))`` on all four edges (the spec's rule,
        ``u_db = 0``). A datasheet rates the flow at the command, overlap included: the edges
        meter the opening past the dead band ``u_db`` (``deadband`` in ``options``), so the
        rated flow is reached at ``u_nom`` whatever the overlap.
        E.g. NG6, 40 l/min at 35 bar: ``Valve.from_datasheet(40e-3/60, 35e5, 185e5, 10e5)``."""
        u_db = options.get("deadband", 0.0)
        if not isinstance(u_db, jax.core.Tracer) and not float(u_db) < float(u_nom):
            raise ValueError(
                f"Valve.from_datasheet: deadband must be below the rated command u_nom; got "
                f"{float(u_db)} >= {float(u_nom)}"
            )
        rating = {"q_nom": q_nom, "dp_nom": dp_nom, "u_nom": u_nom}
        rating = {k: _positive("Valve.from_datasheet", k, v) for k, v in rating.items()}
        xp = jnp if any(isinstance(x, jax.Array) for x in (q_nom, dp_nom, u_nom, u_db)) else np
        if xp is jnp:  # a traced rating is checked at run time: the checked values must be used
            q_nom, dp_nom, u_nom = rating["q_nom"], rating["dp_nom"], rating["u_nom"]
        with np.errstate(all="ignore"):  # as JAX: a bad rating gives inf or NaN, refused below
            opening = xp.asarray(u_nom, float) - xp.asarray(u_db, float)
            c = xp.asarray(q_nom, float) / (opening * xp.sqrt(dp_nom))
        return cls(c, c, c, c, p_s, p_r, **options)

    def saturate(self, u):
        """The command clipped to ``[-u_max, u_max]`` V."""
        return jnp.clip(u, -self.u_max, self.u_max)

    @property
    def n_states(self) -> int:
        """Spool states: 0 (no lag), 1 (position) or 2 (position and rate)."""
        return {"none": 0, "first": 1, "second": 2}[self.spool]

    def spool_rates(self, spool, u):
        """Time derivative of the spool state (position in V-equivalent, rate) for command u.

        First order: ``tau ds/dt = sat(u) - s``. Second order:
        ``s'' = omega^2 (sat(u) - s) - 2 zeta omega s'``."""
        u = self.saturate(u)
        if self.spool == "first":
            return (u - spool) / self.tau
        s, sd = spool[0], spool[1]
        return jnp.stack([sd, self.omega**2 * (u - s) - 2 * self.zeta * self.omega * sd])

    def opening(self, u):
        """The effective opening the edges meter for the spool position (or command) ``u``:
        ``sign(u) max(|u| - u_db, 0)`` after saturation (spool overlap, the class docstring)."""
        u = self.saturate(u)
        return jnp.sign(u) * jnp.maximum(jnp.abs(u) - self.deadband, 0.0)

    def step_over(self, u_e):
        """The command whose effective `opening` is ``u_e``: ``u_e + u_db sign(u_e)``, the
        dead-band compensation of a controller that knows the overlap (the command steps over
        the band; saturation left to the valve)."""
        return u_e + self.deadband * jnp.sign(u_e)

    def spool_at(self, command, t0, *, window: float = 0.2, dt: float = 1e-3) -> Array:
        """The spool state (`n_states` entries) at ``t0`` that the command history
        ``command(t)`` (V, the command as the spool receives it: delayed) leaves: the spool
        equations (`spool_rates`) run by fixed-step RK4 over ``window`` s before ``t0`` from
        rest at the command there. The lag forgets its start within a few time constants (a
        0.2 s window leaves ``exp(-0.2 / tau)`` of it: 3e-4 at 25 ms); a spool set to the
        command at ``t0`` instead lags nothing, which a fit of the delay and the lag would
        absorb."""
        n = int(round(window / dt))
        t_start = t0 - n * dt
        u0 = self.saturate(command(t_start))
        s0 = u0[None] if self.spool == "first" else jnp.stack([u0, jnp.zeros_like(u0)])

        def rate(t, s):
            out = self.spool_rates(s[0] if self.spool == "first" else s, command(t))
            return jnp.atleast_1d(out)

        # classical RK4 steps in a scan, not a diffrax solve: the actuators sit below
        # `jaxmb.simulation`, and a scan differentiates in forward and reverse mode alike
        def step(s, k):
            t = t_start + k * dt
            k1 = rate(t, s)
            k2 = rate(t + dt / 2, s + dt / 2 * k1)
            k3 = rate(t + dt / 2, s + dt / 2 * k2)
            k4 = rate(t + dt, s + dt * k3)
            return s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

        return jax.lax.scan(step, s0, jnp.arange(n))[0]

    def flows(self, u, p_a, p_b) -> tuple[Array, Array]:
        r"""``(Q_a, Q_b)`` into the chambers, m^3/s, for the spool position ``u`` (V), eqs.
        (82)-(85) on the effective `opening` (``u`` clipped to ``[-u_max, u_max]``, less the
        overlap)."""
        u = self.opening(u)
        w = self.dp_width
        pos = jnp.maximum(u, 0.0)  # u S(u), eq. (84)
        neg = jnp.minimum(u, 0.0)  # u S(-u)
        Q_a = (
            self.c_pa * signed_sqrt(self.p_s - p_a, w) * pos
            + self.c_an * signed_sqrt(p_a - self.p_r, w) * neg
        )  # eq. (82)
        Q_b = (
            -self.c_bn * signed_sqrt(p_b - self.p_r, w) * pos
            - self.c_pb * signed_sqrt(self.p_s - p_b, w) * neg
        )  # eq. (83)
        return Q_a, Q_b


class AbstractFriction(eqx.Module):
    """Piston friction ``f_f(v, z)`` (N, opposing motion) with an optional internal state ``z``
    (``n_states`` of them; ``z_rate`` is its time derivative)."""

    n_states: eqx.AbstractClassVar[int]

    @abc.abstractmethod
    def force(self, v, z=None): ...

    @abc.abstractmethod
    def z_rate(self, v, z): ...


class StribeckFriction(AbstractFriction):
    r"""The spec's smooth Stribeck/Coulomb/viscous law

        f = (F_c + (F_s - F_c) exp(-(v / v_s)^2)) tanh(v / v_eps) + sigma v

    with ``v`` the piston velocity (m/s): Coulomb ``F_c`` and static ``F_s`` (N), Stribeck
    velocity ``v_s`` (m/s), viscous ``sigma`` (N s/m) and the tanh width ``v_eps`` (m/s), which
    makes it smooth (and so differentiable, and friendly to an adaptive solver)."""

    n_states = 0
    F_c: Float[Array, ""]
    F_s: Float[Array, ""]
    v_s: Float[Array, ""]
    sigma: Float[Array, ""]
    v_eps: Float[Array, ""]

    def __init__(self, F_c, F_s, v_s, sigma, v_eps):
        o = "StribeckFriction"
        self.F_c = _positive(o, "F_c", F_c, allow_zero=True)
        self.F_s = _positive(o, "F_s", F_s, allow_zero=True)
        self.v_s = _positive(o, "v_s", v_s)
        self.sigma = _positive(o, "sigma", sigma, allow_zero=True)
        self.v_eps = _positive(o, "v_eps", v_eps)

    def force(self, v, z=None):
        del z
        g = self.F_c + (self.F_s - self.F_c) * jnp.exp(-((v / self.v_s) ** 2))
        return g * jnp.tanh(v / self.v_eps) + self.sigma * v

    def z_rate(self, v, z):
        del v
        return z


class LuGreFriction(AbstractFriction):
    r"""LuGre friction (Canudas de Wit, Olsson, Astrom & Lischinsky 1995):

        dz/dt = v - sigma0 |v| z / g(v),   g(v) = F_c + (F_s - F_c) exp(-(v / v_s)^2)
        f = sigma0 z + sigma1 dz/dt + sigma2 v

    ``z`` the mean bristle deflection (m), ``sigma0`` bristle stiffness (N/m), ``sigma1``
    bristle damping (N s/m), ``sigma2`` viscous (N s/m). ``|v|`` is smoothed as
    ``sqrt(v^2 + v_eps^2) - v_eps`` so the state equation is differentiable at v = 0; the
    steady state ``z = g(v) sign(v) / sigma0`` gives the Stribeck curve up to that smoothing."""

    n_states = 1
    sigma0: Float[Array, ""]
    sigma1: Float[Array, ""]
    sigma2: Float[Array, ""]
    F_c: Float[Array, ""]
    F_s: Float[Array, ""]
    v_s: Float[Array, ""]
    v_eps: Float[Array, ""]

    def __init__(self, sigma0, sigma1, sigma2, F_c, F_s, v_s, v_eps=1e-6):
        o = "LuGreFriction"
        self.sigma0 = _positive(o, "sigma0", sigma0)
        self.sigma1 = _positive(o, "sigma1", sigma1, allow_zero=True)
        self.sigma2 = _positive(o, "sigma2", sigma2, allow_zero=True)
        self.F_c = _positive(o, "F_c", F_c)
        self.F_s = _positive(o, "F_s", F_s)
        self.v_s = _positive(o, "v_s", v_s)
        self.v_eps = _positive(o, "v_eps", v_eps)

    def stribeck(self, v):
        """``g(v) = F_c + (F_s - F_c) exp(-(v / v_s)^2)``: the Stribeck curve, the steady
        friction force's magnitude at speed ``v``."""
        return self.F_c + (self.F_s - self.F_c) * jnp.exp(-((v / self.v_s) ** 2))

    def _abs(self, v):
        return jnp.sqrt(v * v + self.v_eps**2) - self.v_eps

    def z_rate(self, v, z):
        return v - self.sigma0 * self._abs(v) * z / self.stribeck(v)

    def steady_z(self, v):
        """The bristles' steady deflection at constant ``v`` (``dz/dt = 0``): ``v g(v) /
        (sigma0 |v|)`` with the smoothed ``|v|``, ``g(v) sign(v) / sigma0`` away from rest, and 0
        at rest (where it is 0 / 0: a state at rest starts unloaded)."""
        abs_v = self._abs(v)
        moving = abs_v > 1e-12
        return jnp.where(
            moving, self.stribeck(v) * v / (self.sigma0 * jnp.where(moving, abs_v, 1.0)), 0.0
        )

    def force(self, v, z=None):
        return self.sigma0 * z + self.sigma1 * self.z_rate(v, z) + self.sigma2 * v


class PressureTransducers(eqx.Module):
    """What a cylinder's two pressure transducers read beyond the chamber pressures: a
    constant offset each (Pa), ``reading = p + offset``. A transducer's zero drifts by up to
    about 1 bar; identification fits these (``sensor.<a>.p_a``, ``sensor.<a>.p_b``) where the
    data say so. They enter only what identification compares with a log (the readings, and
    the chamber pressures a replay starts from), never the plant's dynamics; an offset the
    user knows is subtracted from the log instead (``[log] offsets`` of a machine file)."""

    p_a: Float[Array, ""]
    p_b: Float[Array, ""]

    def __init__(self, p_a=0.0, p_b=0.0):
        msg = "PressureTransducers: {} (offset, Pa) must be finite"
        self.p_a = checked(p_a, not_finite, msg.format("p_a"), ())
        self.p_b = checked(p_b, not_finite, msg.format("p_b"), ())


class HydraulicActuator(eqx.Module):
    """One valve-controlled cylinder on a model: `CylinderMount`, `Cylinder`, `Valve` and
    friction, named (``"lift"``: signals ``p_a_lift``, ``p_b_lift``, ``x_lift``, ``u_lift``).

    Its state is a dict ``{"p_a", "p_b"}`` (Pa) plus ``"spool"`` (shape (1,) or (2,)) with a
    spool lag and ``"z"`` (shape (1,)) with LuGre friction. ``sensor``: its pressure
    transducers' offsets (`PressureTransducers`, default none)."""

    name: str = eqx.field(static=True)
    mount: CylinderMount
    cylinder: Cylinder
    valve: Valve
    friction: AbstractFriction | None
    sensor: PressureTransducers

    def __init__(self, name: str, mount, cylinder, valve, friction=None, sensor=None):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"HydraulicActuator: name must be an identifier, got {name!r}")
        self.name, self.mount, self.cylinder, self.valve = name, mount, cylinder, valve
        self.friction = friction
        self.sensor = PressureTransducers() if sensor is None else sensor

    def initial_state(self, p_a, p_b) -> dict[str, Array]:
        """Rest state: pressures given, spool closed, bristles relaxed."""
        s = {"p_a": jnp.asarray(p_a, float), "p_b": jnp.asarray(p_b, float)}
        if self.valve.n_states:
            s["spool"] = jnp.zeros(self.valve.n_states)
        if self.friction is not None and self.friction.n_states:
            s["z"] = jnp.zeros(self.friction.n_states)
        return s

    def friction_force(self, xd, state) -> Array:
        if self.friction is None:
            return jnp.zeros_like(xd)
        z = state["z"][0] if "z" in state else None
        return self.friction.force(xd, z)

    def force(self, xd, state, x=None) -> Array:
        """Net axial force on the mechanism, ``A_a p_a - A_b p_b - f_friction(xdot)``, N, plus
        the end stops' force when the piston position ``x`` is given."""
        f = self.cylinder.force(state["p_a"], state["p_b"]) - self.friction_force(xd, state)
        if x is not None:
            f = f + self.cylinder.end_stop_force(x, xd)
        return f

    def opening(self, u, state) -> Array:
        """The spool position the valve meters (`Valve.flows`): the command, or the lagged
        spool position."""
        if self.valve.spool == "none":
            return u
        return state["spool"][0]

    def state_rates(self, x, xd, u, state) -> dict[str, Array]:
        """Time derivatives of the actuator state for piston position ``x``, velocity ``xd``
        and valve command ``u``."""
        Q_a, Q_b = self.valve.flows(self.opening(u, state), state["p_a"], state["p_b"])
        dp_a, dp_b = self.cylinder.pressure_rates(x, xd, state["p_a"], state["p_b"], Q_a, Q_b)
        out = {"p_a": dp_a, "p_b": dp_b}
        if "spool" in state:
            s = state["spool"]
            out["spool"] = jnp.atleast_1d(self.valve.spool_rates(s[0] if s.shape[0] == 1 else s, u))
        if "z" in state:
            out["z"] = jnp.atleast_1d(self.friction.z_rate(xd, state["z"][0]))
        return out
