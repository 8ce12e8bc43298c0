r"""The `Model`: rigid bodies on a kinematic tree over augmented coordinates, an optional
coordinate map closing the loops, and gravity. An immutable equinox pytree.

Structure (names, parents, joint types, which coordinate drives which joint) is static; every
number (masses, COMs, inertias, placements, joint axes, gravity, the coordinate map's lengths) is
an array leaf, so identification and gain tuning can differentiate with respect to the model and
Monte Carlo studies can `vmap` over perturbed models.

Kinematic tree (Dastranj & Mattila (2026) Section II-A): each `Frame` hangs from a parent frame
(``"S"`` is the inertial frame) by a fixed placement ``T_parent,J = (rotation, translation)``
followed by a joint motion about a unit ``axis`` of J:

    T_parent,frame(qhat) = T_parent,J @ exp(axis * qhat[k])  (revolute: rotation; prismatic: translation)

so that a joint is exactly a URDF ``<joint>`` (origin, then motion) and a chain such as
``T_B1,F1 T_F1,B2`` of the specs is a fixed frame F1 followed by a revolute frame B2.

Closed chains: a `CoordinateMap` ``Xi(q) -> qhat`` (eq. before (26)) maps the minimal
coordinates ``q`` to the augmented ones; ``E = dXi/dq`` is obtained by autodiff.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import inspect
import typing
from collections.abc import Iterable, Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

__all__ = [
    "WORLD",
    "coordinate_joint_types",
    "JOINT_TYPES",
    "Body",
    "Frame",
    "CoordinateMap",
    "Model",
    "replace_body",
    "replace_placement",
    "runtime_check",
    "as_real_array",
    "check_type",
    "check_number",
    "check_finite",
    "check_all_finite",
    "finite_inputs",
    "failures_as_nan",
    "INERTIA_ATOL",
]

WORLD = "S"
JOINT_TYPES = ("fixed", "revolute", "prismatic")


def _tol(x) -> float:
    """Relative round-off allowance of x's dtype for structural checks."""
    return 1e-9 if jnp.asarray(x).dtype == jnp.float64 else 1e-6


def _trace_mode_state():
    """A JAX configuration state that is part of every jit cache key (JAX's own mechanism for
    ``jax_enable_x64`` and friends), so that a function traced inside `failures_as_nan` and the
    same function traced outside are two compiled programs, side by side, and neither context
    has to clear JAX's caches. None where this JAX lacks the (internal) constructor: the
    contexts then clear the caches instead."""
    try:
        from jax._src.config import bool_state
    except ImportError:  # pragma: no cover - depends on the JAX release
        return None
    return bool_state(
        "jaxmb_failures_as_nan",
        False,
        help="jaxmb: failed run-time checks give NaN (traced inside jaxmb.model.failures_as_nan)",
        include_in_jit_key=True,
        include_in_trace_context=True,
    )


_NAN_MODE = _trace_mode_state()
_FAILURES_AS_NAN = [False]  # the fallback's flag


def _failures_give_nan() -> bool:
    return bool(_NAN_MODE.value) if _NAN_MODE is not None else _FAILURES_AS_NAN[0]


@contextlib.contextmanager
def failures_as_nan():
    """Within this context, functions *traced* here turn a failed run-time check (a state
    outside a coordinate map's domain, a Gamma that is not positive definite, a traced
    parameter out of range) into NaN instead of raising, and so do equinox's and diffrax's own
    checks (their ``error_if`` default); the caller reads the result's status instead
    (``simulate(throw=False)``'s ``success``, a solver's result code) and raises after the call.

    Two reasons. Batched studies: under `jax.vmap` an `equinox.error_if` raises for the whole
    batch when one element fails; a NaN makes the adaptive solver reject steps until it fails,
    and ``simulate(throw=False)`` reports ``success = False`` for that sample alone. And the
    persistent compilation cache (`jaxmb.compile_cache`): a raising check is a host callback,
    and JAX writes no program that holds one to the cache. The CLI runs every command in here.

    The mode is part of JAX's jit cache key, so what is compiled inside and outside coexists."""
    import equinox._errors as eqx_errors  # the trace-time default of equinox.error_if

    old_eqx = getattr(eqx_errors, "EQX_ON_ERROR", None)
    if old_eqx is not None:
        eqx_errors.EQX_ON_ERROR = "nan"
    try:
        if _NAN_MODE is not None:
            with _NAN_MODE(True):
                yield
            return
        old = _FAILURES_AS_NAN[0]
        if not old:
            jax.clear_caches()
        _FAILURES_AS_NAN[0] = True
        try:
            yield
        finally:
            _FAILURES_AS_NAN[0] = old
            if not old:
                jax.clear_caches()
    finally:
        if old_eqx is not None:
            eqx_errors.EQX_ON_ERROR = old_eqx


def runtime_check(x, pred, msg: str):
    """``x``, checked at run time: raise ``msg`` (`equinox.error_if`) where ``pred`` holds,
    or return NaN there inside `failures_as_nan`."""
    if _failures_give_nan():
        return jax.tree.map(lambda v: jnp.where(pred, jnp.nan, v), x)
    return eqx.error_if(x, pred, msg)


def _describe(x, a) -> str:
    """What a rejected argument ``x`` (``a``: it as an array, or None) is, in a few words."""
    text = repr(x)
    text = text if len(text) <= 40 else text[:37] + "..."
    if a is None or a.dtype.kind == "O" or isinstance(x, str) or a.ndim == 0:
        return f"{type(x).__name__} {text}"
    if a.dtype.kind in "US":
        return f"{type(x).__name__} of strings {text}"
    return f"{type(x).__name__} of {a.dtype} {text}"


def as_real_array(x, name: str, *, host: bool = False):
    """``x`` as an array of real numbers (integers become the default float), or a
    ``TypeError`` that names ``name`` and says what was expected: the type check of the public
    functions' array arguments, run once at entry on concrete values. Traced values pass
    unchanged (jit, vmap and grad already know their dtypes). ``host``: return a float64
    numpy array (host data such as logs, whose boolean columns read as 0 and 1) instead of a
    JAX array."""
    if isinstance(x, jax.core.Tracer):
        return x
    try:
        a = x if isinstance(x, jax.Array) else np.asarray(x)
    except (ValueError, TypeError):  # ragged nesting, objects numpy cannot hold
        a = None
    if a is None or a.dtype.kind not in ("iufb" if host else "iuf"):  # a log's flag is 0/1
        raise TypeError(
            f"{name}: expected real numbers (a float, or an array or list of floats), got "
            f"{_describe(x, a)}"
        )
    if host:
        return np.asarray(a, dtype=np.float64)
    if a.dtype.kind in "iu":
        return jnp.asarray(a, dtype=jax.dtypes.canonicalize_dtype(float))
    return jnp.asarray(a)


def check_type(value, expected: type | tuple[type, ...], name: str):
    """``value`` unchanged if it is an instance of ``expected``, else a ``TypeError`` naming
    ``name`` (the argument, with its function) and the types it accepts."""
    if not isinstance(value, expected):
        kinds = expected if isinstance(expected, tuple) else (expected,)
        wanted = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
        raise TypeError(f"{name}: expected {wanted}, got {_describe(value, None)}")
    return value


def check_number(
    value, name: str, *, integer: bool = False, above: float | int | None = None,
    at_least: float | int | None = None,
):  # fmt: skip
    """A Python number option, checked at entry: an int (``integer``) or a real number, not a
    bool, finite, and ``> above`` / ``>= at_least`` where given. ``TypeError`` for a wrong
    type, ``ValueError`` for a wrong value; both name ``name`` and what was expected."""
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    what = "an integer" if integer else "a finite number"
    if above is not None:
        what += f" > {above}"
    if at_least is not None:
        what += f" >= {at_least}"
    if isinstance(value, bool | np.bool_) or not isinstance(value, kinds):
        raise TypeError(f"{name}: expected {what}, got {_describe(value, None)}")
    if not (
        np.isfinite(value)
        and (above is None or value > above)
        and (at_least is None or value >= at_least)
    ):
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return value


def check_finite(x, name: str):
    """``x`` as an array, refused if any entry is NaN or inf: concrete input raises
    ``ValueError`` now, traced input goes through `runtime_check` (an `equinox.error_if`, or NaN
    inside `failures_as_nan`). The message names the field."""
    if isinstance(x, jax.core.Tracer):
        return runtime_check(x, ~jnp.isfinite(x).all(), f"{name}: must be finite, got NaN or inf")
    x = as_real_array(x, name)
    bad = ~np.isfinite(np.asarray(x))
    if bad.any():
        raise ValueError(
            f"{name}: must be finite, got NaN or inf at index {np.argwhere(bad)[0].tolist()} "
            f"({int(bad.sum())} of {bad.size} entries)"
        )
    return x


def check_all_finite(fields: Mapping[str, Array]) -> tuple:
    """`check_finite` of several fields at once: concrete ones now, the traced ones with a single
    run-time check whose message names the first non-finite field. One branch point instead of
    one per field matters under `jax.vmap`, where each check splits the fused computation."""
    names = list(fields)
    out = [x if isinstance(x, jax.core.Tracer) else check_finite(x, n) for n, x in fields.items()]
    traced = [i for i, x in enumerate(out) if isinstance(x, jax.core.Tracer)]
    if not traced:
        return tuple(out)
    bad = jnp.stack([~jnp.isfinite(out[i]).all() for i in traced])
    xs = tuple(out[i] for i in traced)
    if _failures_give_nan():
        xs = jax.tree.map(lambda v: jnp.where(bad.any(), jnp.nan, v), xs)
    else:
        msgs = [f"{names[i]}: must be finite, got NaN or inf" for i in traced]
        xs = eqx.branched_error_if(xs, bad.any(), jnp.argmax(bad), msgs)
    for i, x in zip(traced, xs, strict=True):
        out[i] = x
    return tuple(out)


# the state-like arguments of the public functions: coordinates, rates, forces and wrenches,
# and the VDC's driven-frame twists, rotations and end-effector wrenches (Petrovic & Mattila)
_STATE_ARGUMENTS = ("q", "qd", "qdd", "qd_r", "qdd_r", "tau", "f", "wrench", "wrenches",
                    "V_c", "Vd_c", "V_cr", "Vd_cr", "R_WC", "F_D", "F_D_r")  # fmt: skip


def finite_inputs(fn):
    """Check a public function's concrete arguments at entry, once, before anything traces:
    the model-like first argument has its annotated type, and each state argument
    (``_STATE_ARGUMENTS``; for ``wrenches``, a mapping, each value) is real numbers
    (`as_real_array`: lists become arrays, integers floats) and finite (`check_finite`). A
    wrong type raises ``TypeError``, a NaN or inf ``ValueError``, each naming the argument.
    Traced arguments (inside jit, vmap, grad) pass through to the function's own
    `check_finite`, which reports them at run time; a compiled step pays nothing."""
    signature = inspect.signature(fn)
    names = [n for n in _STATE_ARGUMENTS if n in signature.parameters]
    first = next(iter(signature.parameters))
    expected = []  # the first argument's class, resolved at the first call (forward references)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = signature.bind_partial(*args, **kwargs)
        arguments = bound.arguments
        if not expected:
            hint = typing.get_type_hints(inspect.unwrap(fn)).get(first)
            expected.append(hint if isinstance(hint, type) else object)
        if first in arguments and not isinstance(arguments[first], expected[0]):
            raise TypeError(
                f"{fn.__name__}: {first}: expected a {expected[0].__name__}, got "
                f"{_describe(arguments[first], None)}"
            )
        for name in names:
            x = arguments.get(name)
            if x is None and signature.parameters[name].default is inspect.Parameter.empty:
                raise TypeError(f"{fn.__name__}: {name}: expected real numbers, got None")
            if x is None or isinstance(x, jax.core.Tracer):
                continue
            if name == "wrenches":
                if not isinstance(x, Mapping):
                    raise TypeError(
                        "wrenches: expected a mapping from frame names to 6-vector wrenches "
                        f"[moment; force], got {_describe(x, None)}"
                    )
                arguments[name] = {
                    frame: W if isinstance(W, jax.core.Tracer)
                    else check_finite(W, f"wrench on frame {frame!r}")
                    for frame, W in x.items()
                }  # fmt: skip
            else:
                arguments[name] = check_finite(x, name)
        return fn(*bound.args, **bound.kwargs)

    return wrapper


def _checked(x, bad, msg: str, shape: tuple[int, ...] | None = None):
    """Concrete input: raise ValueError now. Traced input (jit/vmap/grad): check at run time.

    ``bad(x)`` is a boolean (array) that is True where ``x`` is unacceptable."""
    # "body 'b': com must be finite" -> "body 'b': com"; "X.K: must be > 0" -> "X.K"
    field = msg.split(" must ")[0].rstrip(":")
    if isinstance(x, jax.core.Tracer):
        if shape is not None and x.shape != shape:
            raise ValueError(f"{field}: expected shape {shape}, got {x.shape}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(jax.dtypes.canonicalize_dtype(float))
        return runtime_check(x, jnp.any(bad(x)), msg)  # the returned x must be used
    with jax.ensure_compile_time_eval():  # concrete values stay concrete, even inside jit
        x = as_real_array(x, field)  # the type first: "abc" is no array of shape ()
        if shape is not None and x.shape != shape:
            raise ValueError(f"{field}: expected shape {shape}, got {x.shape}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(jax.dtypes.canonicalize_dtype(float))
        x = jnp.asarray(x, dtype=x.dtype)  # drop weak typing: leaves have a definite dtype
        failed = bool(np.any(np.asarray(bad(x))))
    if failed:
        raise ValueError(f"{msg}; got {np.asarray(x).tolist()}")
    return x


def _not_finite(x):
    return ~jnp.isfinite(x)


INERTIA_ATOL = 1e-10
"""kg m^2: how far a principal moment may be negative, or a triangle inequality fail, before an
inertia counts as not physically realisable (absolute, on top of the dtype's round-off)."""


def _inertia_asymmetric(I):
    """True unless I is finite and symmetric (to round-off)."""
    finite = jnp.isfinite(I).all()
    Is = jnp.where(finite, I, jnp.eye(3, dtype=I.dtype))
    scale = jnp.maximum(jnp.abs(Is).max(), 1e-30)
    return ~(finite & (jnp.abs(Is - Is.T).max() <= 1e3 * _tol(Is) * scale))


def _inertia_bad(I):
    """True unless I is finite, symmetric, positive semidefinite and obeys the triangle
    inequalities of its principal moments (a physically realisable rigid-body inertia about the
    COM; zero for a point mass, singular for a thin rod), within `INERTIA_ATOL`."""
    finite = jnp.isfinite(I).all()
    Is = jnp.where(finite, I, jnp.eye(3, dtype=I.dtype))  # keep eigvalsh away from NaN/inf
    scale = jnp.maximum(jnp.abs(Is).max(), 1e-30)
    sym = jnp.abs(Is - Is.T).max() <= 1e3 * _tol(Is) * scale
    lam = jnp.linalg.eigvalsh(0.5 * (Is + Is.T))
    slack = (1e-9 if Is.dtype == jnp.float64 else 1e-5) * scale + INERTIA_ATOL
    pd = (lam >= -slack).all()
    tri = (lam[0] + lam[1] >= lam[2] - slack) & (lam[1] + lam[2] >= lam[0] - slack)
    tri = tri & (lam[0] + lam[2] >= lam[1] - slack)
    return ~(finite & sym & pd & tri)


def _rotation_bad(R):
    finite = jnp.isfinite(R).all()
    Rs = jnp.where(finite, R, jnp.eye(3, dtype=R.dtype))
    orth = jnp.abs(Rs.T @ Rs - jnp.eye(3, dtype=R.dtype)).max() <= 1e3 * _tol(R)
    proper = jnp.linalg.det(Rs) > 0
    return ~(finite & orth & proper)


class Body(eqx.Module):
    r"""One rigid body with its spatial inertia $M_i$ (Dastranj & Mattila (2026) after eq. (8)).

    Attributes:
        name: the body's name (static).
        frame: the kinematic frame ``B_i`` the body is rigidly attached to (static).
        com_frame: name of the frame ``C_i`` at the COM, parallel to ``B_i``; None for no name.
        mass: kg, > 0.
        com: ``p_{B_i C_i}``, the centre of mass in ``B_i`` coordinates, m.
        inertia: ``I_{C_i}``, inertia about the COM in axes parallel to ``B_i``, kg m^2;
            symmetric positive semidefinite (zero: a point mass) and physically realisable
            (triangle inequalities), within `INERTIA_ATOL`.

    ``physical=False`` (keyword) accepts a published inertia that is not realisable and a zero
    mass, checking only that the numbers are finite and the inertia symmetric; `load_urdf` uses
    it, with a warning, for files other tools load as they are.
    """

    name: str = eqx.field(static=True)
    frame: str = eqx.field(static=True)
    com_frame: str | None = eqx.field(static=True)
    physical: bool = eqx.field(static=True)
    mass: Float[Array, ""]
    com: Float[Array, 3]
    inertia: Float[Array, "3 3"]

    def __init__(
        self,
        name: str,
        frame: str,
        mass,
        com,
        inertia,
        com_frame: str | None = None,
        *,
        physical: bool = True,
    ):
        if not isinstance(name, str) or not name:
            raise ValueError(f"body name must be a non-empty string, got {name!r}")
        for field, value in (("frame", frame), ("com_frame", com_frame)):
            if not (isinstance(value, str) and value) and not (
                field == "com_frame" and value is None
            ):
                raise TypeError(
                    f"body {name!r}: {field}: expected a frame name (a non-empty string), got "
                    f"{_describe(value, None)}"
                )
        self.name = name
        self.frame = frame
        self.com_frame = com_frame
        self.physical = physical
        if physical:
            self.mass = _checked(
                mass, lambda m: ~(m > 0), f"body {name!r}: mass must be > 0 and finite", ()
            )
        else:
            self.mass = _checked(
                mass, lambda m: ~(m >= 0), f"body {name!r}: mass must be >= 0 and finite", ()
            )
        self.com = _checked(com, _not_finite, f"body {name!r}: com must be finite", (3,))
        if physical:
            self.inertia = _checked(
                inertia,
                _inertia_bad,
                f"body {name!r}: inertia must be finite, symmetric, positive semidefinite and "
                "satisfy the triangle inequalities of its principal moments",
                (3, 3),
            )
        else:
            self.inertia = _checked(
                inertia,
                _inertia_asymmetric,
                f"body {name!r}: inertia must be finite and symmetric",
                (3, 3),
            )


class Frame(eqx.Module):
    r"""A frame of the kinematic tree: fixed placement, then a joint motion.

    ``T_parent,frame = (rotation, translation) @ motion``, with ``motion`` the identity for a
    ``"fixed"`` frame, ``(rot_axis_angle(axis, qhat[k]), 0)`` for ``"revolute"`` and
    ``(I, axis * qhat[k])`` for ``"prismatic"``, ``k`` the index of ``coordinate`` in the model's
    augmented coordinates. The axis is normalised here.
    """

    name: str = eqx.field(static=True)
    parent: str = eqx.field(static=True)
    joint: str = eqx.field(static=True)
    coordinate: str | None = eqx.field(static=True)
    rotation: Float[Array, "3 3"]
    translation: Float[Array, 3]
    axis: Float[Array, 3]

    def __init__(
        self,
        name: str,
        parent: str = WORLD,
        *,
        rotation=None,
        translation=None,
        joint: str = "fixed",
        axis=None,
        coordinate: str | None = None,
    ):
        if not isinstance(name, str) or not name:
            raise ValueError(f"frame name must be a non-empty string, got {name!r}")
        if name == WORLD:
            raise ValueError(
                f"frame {name!r}: the name {WORLD!r} is reserved for the inertial frame"
            )
        if not isinstance(parent, str) or not parent:
            raise TypeError(
                f"frame {name!r}: parent: expected a frame name (a non-empty string), got "
                f"{_describe(parent, None)}"
            )
        if joint not in JOINT_TYPES:
            raise ValueError(f"frame {name!r}: joint must be one of {JOINT_TYPES}, got {joint!r}")
        if joint == "fixed" and coordinate is not None:
            raise ValueError(
                f"frame {name!r}: a fixed frame takes no coordinate, got {coordinate!r}"
            )
        if joint != "fixed" and not coordinate:
            raise ValueError(f"frame {name!r}: a {joint} joint needs a coordinate name")
        self.name, self.parent, self.joint, self.coordinate = name, parent, joint, coordinate
        self.rotation = _checked(
            jnp.eye(3) if rotation is None else rotation,
            _rotation_bad,
            f"frame {name!r}: rotation must be a finite proper rotation matrix",
            (3, 3),
        )
        self.translation = _checked(
            jnp.zeros(3) if translation is None else translation,
            _not_finite,
            f"frame {name!r}: translation must be finite",
            (3,),
        )
        if joint == "fixed":
            self.axis = _checked(
                jnp.zeros(3) if axis is None else axis, _not_finite, f"frame {name!r}: axis", (3,)
            )
        else:
            if axis is None:
                raise ValueError(f"frame {name!r}: a {joint} joint needs an axis")
            a = _checked(
                axis,
                lambda a: ~(jnp.isfinite(a).all() & (jnp.linalg.norm(a) > 1e-12)),
                f"frame {name!r}: axis must be finite and non-zero",
                (3,),
            )
            self.axis = a / jnp.linalg.norm(a)


class CoordinateMap(eqx.Module):
    r"""Abstract ``Xi: q -> qhat`` from minimal to augmented coordinates (Dastranj & Mattila
    (2026), before eq. (26)). Concrete maps hold their lengths as array leaves and raise through
    `equinox.error_if` for ``q`` outside their domain."""

    names: eqx.AbstractVar[tuple[str, ...]]

    @abc.abstractmethod
    def __call__(self, q: Float[Array, " n"]) -> Float[Array, " nhat"]: ...


class Model(eqx.Module):
    r"""A multibody system: frames, bodies, gravity and an optional coordinate map.

    Attributes:
        frames: the kinematic tree, parents before children (sorted at construction).
        bodies: rigid bodies, each attached to one frame.
        gravity: gravity vector in S, m/s^2 (``[0, 0, -9.81]`` for z up).
        coordinate_map: ``Xi(q) -> qhat`` or None (then ``qhat = q``).
        augmented_names: the augmented coordinates ``qhat`` in order (static).
        coordinate_names: the minimal coordinates ``q`` in order (static); logs, plots and the
            CLI address coordinates by these names.
    """

    frames: tuple[Frame, ...]
    bodies: tuple[Body, ...]
    gravity: Float[Array, 3]
    coordinate_map: CoordinateMap | None
    augmented_names: tuple[str, ...] = eqx.field(static=True)
    coordinate_names: tuple[str, ...] = eqx.field(static=True)
    # derived static topology, filled at construction
    parent_index: tuple[int, ...] = eqx.field(static=True)
    coordinate_index: tuple[int, ...] = eqx.field(static=True)
    body_frame_index: tuple[int, ...] = eqx.field(static=True)

    def __init__(
        self,
        frames,
        bodies,
        gravity=(0.0, 0.0, -9.81),
        coordinate_map: CoordinateMap | None = None,
        augmented_names: tuple[str, ...] | None = None,
    ):
        checked = []
        for what, items, cls in (("frames", frames, Frame), ("bodies", bodies, Body)):
            if isinstance(items, str | bytes) or not isinstance(items, Iterable):
                raise TypeError(
                    f"model: {what}: expected a sequence of {cls.__name__}, got "
                    f"{_describe(items, None)}"
                )
            checked.append(tuple(items))
            for x in checked[-1]:
                if not isinstance(x, cls):
                    raise TypeError(
                        f"model: {what}: expected {cls.__name__} instances, got "
                        f"{_describe(x, None)}"
                    )
        frames, bodies = checked
        self.frames = _topological(frames)
        names = [f.name for f in self.frames]
        self.bodies = bodies
        self.gravity = _checked(gravity, _not_finite, "model: gravity must be finite", (3,))

        # augmented coordinates: given order, or order of first appearance in the tree
        used = [f.coordinate for f in self.frames if f.coordinate is not None]
        if augmented_names is None:
            augmented_names = tuple(dict.fromkeys(used))
        augmented_names = tuple(augmented_names)
        if len(set(augmented_names)) != len(augmented_names):
            raise ValueError(f"model: duplicate augmented coordinate names in {augmented_names}")
        for f in self.frames:
            if f.coordinate is not None and f.coordinate not in augmented_names:
                raise ValueError(
                    f"frame {f.name!r}: coordinate {f.coordinate!r} is not among the augmented "
                    f"coordinates {augmented_names}"
                )
        for c in augmented_names:
            if c not in used:
                raise ValueError(f"model: augmented coordinate {c!r} drives no joint")
        self.augmented_names = augmented_names

        body_names = [b.name for b in bodies]
        dup = {n for n in body_names if body_names.count(n) > 1}
        if dup:
            raise ValueError(f"model: duplicate body names {sorted(dup)}")
        extra = [b.com_frame for b in bodies if b.com_frame is not None]
        all_frames = names + extra
        dup = {n for n in all_frames if all_frames.count(n) > 1}
        if dup or WORLD in extra:
            raise ValueError(f"model: duplicate frame names {sorted(dup or {WORLD})}")
        for b in bodies:
            if b.frame not in names:
                raise ValueError(f"body {b.name!r}: unknown frame {b.frame!r}; frames are {names}")

        self.parent_index = tuple(
            -1 if f.parent == WORLD else names.index(f.parent) for f in self.frames
        )
        self.coordinate_index = tuple(
            -1 if f.coordinate is None else augmented_names.index(f.coordinate) for f in self.frames
        )
        self.body_frame_index = tuple(names.index(b.frame) for b in bodies)

        self.coordinate_map = coordinate_map
        if coordinate_map is None:
            self.coordinate_names = augmented_names
        else:
            if not isinstance(coordinate_map, CoordinateMap):
                raise TypeError(
                    f"model: coordinate_map must be a CoordinateMap, got {type(coordinate_map).__name__}"
                )
            self.coordinate_names = tuple(coordinate_map.names)
            n = len(self.coordinate_names)
            out = jax.eval_shape(coordinate_map, jax.ShapeDtypeStruct((n,), self.gravity.dtype))
            if out.shape != (len(augmented_names),):
                raise ValueError(
                    f"model: coordinate_map returns shape {out.shape}, expected "
                    f"({len(augmented_names)},) for augmented coordinates {augmented_names}"
                )

    @property
    def n(self) -> int:
        """Number of minimal coordinates (degrees of freedom)."""
        return len(self.coordinate_names)

    @property
    def n_augmented(self) -> int:
        """Number of augmented coordinates ``qhat``."""
        return len(self.augmented_names)

    @property
    def frame_names(self) -> tuple[str, ...]:
        """All named frames: the kinematic frames, then the named COM frames."""
        return tuple(f.name for f in self.frames) + tuple(
            b.com_frame for b in self.bodies if b.com_frame is not None
        )

    @property
    def body_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.bodies)

    def body(self, name: str) -> Body:
        """The body called ``name``."""
        for b in self.bodies:
            if b.name == name:
                return b
        raise ValueError(f"model: unknown body {name!r}; bodies are {list(self.body_names)}")

    def coordinate(self, name: str) -> int:
        """Index of the minimal coordinate called ``name``."""
        if name not in self.coordinate_names:
            raise ValueError(
                f"model: unknown coordinate {name!r}; coordinates are {self.coordinate_names}"
            )
        return self.coordinate_names.index(name)


def _topological(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """Parents before children; raises for duplicates, unknown parents and cycles."""
    names = [f.name for f in frames]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"model: duplicate frame names {sorted(dup)}")
    by_name = {f.name: f for f in frames}
    for f in frames:
        if f.parent != WORLD and f.parent not in by_name:
            raise ValueError(f"frame {f.name!r}: unknown parent {f.parent!r}; frames are {names}")
    order: list[Frame] = []
    placed: set[str] = {WORLD}
    pending = list(frames)
    while pending:
        ready = [f for f in pending if f.parent in placed]
        if not ready:
            raise ValueError(f"model: the frames {[f.name for f in pending]} form a loop")
        for f in ready:
            order.append(f)
            placed.add(f.name)
        pending = [f for f in pending if f.name not in placed]
    return tuple(order)


def replace_body(model: Model, name: str, *, mass=None, com=None, inertia=None) -> Model:
    """Reconfiguration: the model with body ``name``'s mass, COM and/or inertia replaced.

    The body is rebuilt through its constructor, so the new values are validated. Only that
    body's Gamma_i changes (Dastranj & Mattila (2026) Section II-B, inertia partitioning)."""
    old = model.body(name)
    new = Body(
        name,
        old.frame,
        old.mass if mass is None else mass,
        old.com if com is None else com,
        old.inertia if inertia is None else inertia,
        com_frame=old.com_frame,
        physical=old.physical,
    )
    i = model.body_names.index(name)
    return eqx.tree_at(lambda m: m.bodies[i], model, new)


def replace_placement(model: Model, frame: str, *, rotation=None, translation=None) -> Model:
    """Reconfiguration: the model with frame ``frame``'s fixed placement replaced (validated).

    Only the bodies on and below that frame see their Jacobians, hence their Gamma_i, change."""
    names = [f.name for f in model.frames]
    if frame not in names:
        raise ValueError(f"model: unknown frame {frame!r}; frames are {names}")
    i = names.index(frame)
    old = model.frames[i]
    new = Frame(
        old.name,
        old.parent,
        rotation=old.rotation if rotation is None else rotation,
        translation=old.translation if translation is None else translation,
        joint=old.joint,
        axis=old.axis,
        coordinate=old.coordinate,
    )
    return eqx.tree_at(lambda m: m.frames[i], model, new)


def coordinate_joint_types(model: Model) -> dict[str, str]:
    """``{coordinate: "revolute" | "prismatic"}``: the joint of the frame a minimal coordinate
    drives. With a coordinate map, a minimal coordinate that is also an augmented one drives
    that frame (every map of `jaxmb.models` passes such coordinates through); one that is not
    (the 3-DoF arm's ``delta``) cannot be told from the map and is taken as revolute."""
    by_aug: dict[str, str] = {}
    for f in model.frames:
        if f.coordinate is not None:
            by_aug.setdefault(f.coordinate, f.joint)
    return {c: by_aug.get(c, "revolute") for c in model.coordinate_names}
