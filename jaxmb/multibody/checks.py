"""Input checks of the public functions, and the run-time failure mode of batched studies.

At entry, once, on concrete values (before anything traces): `as_real_array` (the types of
array arguments), `check_type`, `check_number` (Python options), `check_finite` and
`check_all_finite` (NaN and inf), `finite_inputs` (all of them for a public function's model
and state arguments), `checked` (a field of a constructor: type, shape, then a predicate).
Traced values pass to a run-time check instead (`runtime_check`: an `equinox.error_if`, or NaN
inside `failures_as_nan`, where batched studies read the failure from the solver's status),
so a compiled step pays for one check per call, not per argument."""

from __future__ import annotations

import contextlib
import functools
import inspect
import typing
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

__all__ = [
    "failures_as_nan",
    "failures_give_nan",
    "runtime_check",
    "describe",
    "as_real_array",
    "check_type",
    "check_number",
    "check_finite",
    "check_all_finite",
    "finite_inputs",
    "check_coordinates",
    "checked",
    "not_finite",
    "array_namespace",
]


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
        help="jaxmb: failed run-time checks give NaN (traced inside jaxmb.multibody.checks.failures_as_nan)",
        include_in_jit_key=True,
        include_in_trace_context=True,
    )


_NAN_MODE = _trace_mode_state()
_FAILURES_AS_NAN = [False]  # the fallback's flag


def failures_give_nan() -> bool:
    """Whether what is traced now gives NaN for a failed check (inside `failures_as_nan`)."""
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
    if failures_give_nan():
        return jax.tree.map(lambda v: jnp.where(pred, jnp.nan, v), x)
    return eqx.error_if(x, pred, msg)


def describe(x, a) -> str:
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
            f"{describe(x, a)}"
        )
    if host:
        return np.asarray(a, dtype=np.float64)
    if a.dtype.kind in "iu":  # converted on the host (on the device it is a compile)
        dtype = jax.dtypes.canonicalize_dtype(float)
        return jnp.asarray(a.astype(dtype) if isinstance(a, np.ndarray) else a, dtype=dtype)
    return jnp.asarray(a)


def check_type(value, expected: type | tuple[type, ...], name: str):
    """``value`` unchanged if it is an instance of ``expected``, else a ``TypeError`` naming
    ``name`` (the argument, with its function) and the types it accepts."""
    if not isinstance(value, expected):
        kinds = expected if isinstance(expected, tuple) else (expected,)
        wanted = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
        raise TypeError(f"{name}: expected {wanted}, got {describe(value, None)}")
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
        raise TypeError(f"{name}: expected {what}, got {describe(value, None)}")
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
    a = as_real_array(x, name)
    # on the host value: under an enclosing trace (jit of a function given a Python constant)
    # the converted array can itself be a tracer
    bad = ~np.isfinite(np.asarray(x, dtype=float))
    if bad.any():
        raise ValueError(
            f"{name}: must be finite, got NaN or inf at index {np.argwhere(bad)[0].tolist()} "
            f"({int(bad.sum())} of {bad.size} entries)"
        )
    return a


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
    if failures_give_nan():
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
                f"{describe(arguments[first], None)}"
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
                        f"[moment; force], got {describe(x, None)}"
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


def checked(x, bad, msg: str, shape: tuple[int, ...] | None = None):
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
    # the predicate runs in NumPy on the concrete value (`array_namespace`): in JAX each of its
    # operations, or the predicate as one program, compiled once per process and shape, which
    # was most of the time a machine file took to load (1.3 s for the crane's). NumPy's
    # floating-point warnings are JAX's silent inf and NaN, which the predicates judge, and
    # its linear algebra's refusal of an overflowing matrix is JAX's NaN, a failed check;
    # float16 is judged in float32 (NumPy has no float16 linear algebra)
    host = np.asarray(x)
    try:
        with np.errstate(all="ignore"):
            failed = bool(
                np.any(bad(host.astype(np.float32) if host.dtype == np.float16 else host))
            )
    except np.linalg.LinAlgError:
        failed = True
    if failed:
        raise ValueError(f"{msg}; got {np.asarray(x).tolist()}")
    return x


def array_namespace(x):
    """`numpy` for a host array, `jax.numpy` for a JAX array or a traced value: a predicate of
    `checked` written against it runs in NumPy on concrete values and in JAX at run time."""
    return jnp if isinstance(x, jax.Array | jax.core.Tracer) else np


def not_finite(x):
    return ~array_namespace(x).isfinite(x)


def not_positive(x):
    """Not a finite number > 0: zero, negative, NaN or infinite (``~(x > 0)`` alone lets
    +inf pass, and an infinite parameter gives NaN at the first use)."""
    return not_finite(x) | ~(x > 0)


def not_nonnegative(x):
    """Not a finite number >= 0."""
    return not_finite(x) | ~(x >= 0)


def check_coordinates(model, x, name: str = "q", finite: bool = True):
    """``x`` as one value per minimal coordinate of ``model`` (a `jaxmb.Model`; shape ``(n,)``,
    else a ``ValueError`` that lists the coordinates), checked finite unless ``finite=False``
    (the caller then checks several arguments at once with `check_all_finite`)."""
    if np.shape(x) != (model.n,):
        raise ValueError(
            f"{name}: expected shape ({model.n},) for coordinates {model.coordinate_names}, "
            f"got {np.shape(x)}"
        )
    return check_finite(x, name) if finite else as_real_array(x, name)
