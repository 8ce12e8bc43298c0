"""Traced programs kept on disk beside the compiled ones, so that a second run of a command
skips tracing as well as compiling (issue 28 point 1).

JAX's persistent cache (`jaxmb.compile_cache`) keys compiled code by the lowered program, so
every run must trace and lower its programs before it can look them up: for the crane's closed
loop 5.6 s of tracing and 0.6 s of lowering, against 1.9 s to read its compiled code back. A
function wrapped by `saved` keeps its lowered program (StableHLO, `jax.export`) under a key of
everything the trace depends on, and a later process with the same key calls that program
without tracing; its compiled code then comes from JAX's cache as before.

What the key holds, and why that is all a trace depends on:

- the function (module and name; a function of jaxmb's packages only);
- every array argument's shape, dtype, weak type and sharding (their values are the program's
  inputs), and every other argument exactly, by pickling (equinox's static fields, Python
  numbers and strings, options): as `equinox.filter_jit`, which the wrapped function would be
  otherwise, arrays are traced and the rest is static;
- the code: a hash of every source file of jaxmb's packages, the versions of JAX, jaxlib and
  the libraries jaxmb traces through, Python's version;
- JAX's trace context (``jax_enable_x64`` and the other settings that are part of JAX's own jit
  keys, `jaxmb.multibody.checks.failures_as_nan` among them) and the devices.

A function or class from outside those packages and the standard library anywhere in the
arguments (a user's controller, a reference written in a script) is code no key covers: such
a call is traced as usual (`equinox.filter_jit`), and so is a call under a transformation (its
arguments tracers), with the cache off, or outside `failures_as_nan` (a raising check is a host
callback, which neither JAX's cache nor an exported program keeps); `keyable` tells a caller
beforehand (`jaxmb.simulation.integrate` closure-converts what has no key). Any saved program
that cannot be read is traced anew and written again. `saved_shape` keeps a call's output
shapes the same way, for checks that would otherwise trace it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import logging
import os
import pickle
import sys
import types
from importlib import metadata
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from jaxmb.multibody.checks import failures_give_nan

__all__ = ["saved", "saved_shape", "keyable", "program_folder", "MAX_BYTES"]

_log = logging.getLogger(__name__)

# libraries whose code a trace runs through: their versions are part of every key
_VERSIONED = ("jax", "jaxlib", "equinox", "diffrax", "lineax", "optimistix", "optax", "numpy",
              "jaxtyping", "scipy")  # fmt: skip
_OWN = ("jaxmb",)  # hashed source by source (jaxmb.control and jaxmb.identification included)
MAX_BYTES = 256 * 2**20  # the saved programs' folder, least recently used first out


def program_folder() -> Path | None:
    """Where saved programs go: ``programs/`` in JAX's persistent cache folder, or None where
    that cache is off."""
    folder = jax.config.jax_compilation_cache_dir
    return None if folder is None else Path(folder) / "programs"


class _Unkeyable(Exception):
    """An argument holds something no key covers (module docstring)."""


@functools.cache
def _code() -> bytes:
    """The hash of jaxmb's sources and the versions of what it traces through."""
    h = hashlib.sha256(sys.version.encode())
    for name in _VERSIONED:
        try:
            h.update(f"{name}={metadata.version(name)};".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name}=-;".encode())
    # the packages' folders, found without importing the workflows from down here
    found = [
        importlib.util.find_spec(m) for m in ("jaxmb", "jaxmb.control", "jaxmb.identification")
    ]
    roots = {Path(p) for spec in found for p in spec.submodule_search_locations}
    for root in sorted(roots):
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.digest()


def _known_module(name: str | None) -> bool:
    top = (name or "").split(".")[0]
    return top in _OWN or top in _VERSIONED or top in sys.stdlib_module_names or top == "builtins"


class _KeyPickler(pickle.Pickler):
    """Pickles the arguments for the key, refusing code from outside jaxmb, the versioned
    libraries and the standard library (its behaviour is in no key)."""

    def reducer_override(self, obj):
        if isinstance(obj, jax.sharding.Mesh):  # by its layout: devices do not pickle
            ids = tuple(d.id for d in obj.devices.flat)
            return str, (f"Mesh{obj.axis_names}{obj.devices.shape}{ids}",)
        if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
            if not _known_module(getattr(obj, "__module__", None)):
                raise _Unkeyable(f"{obj!r} from {obj.__module__}")
        elif isinstance(obj, jax.core.Tracer):
            raise _Unkeyable("a traced argument")
        return NotImplemented


def _spec(x):
    """An array argument as its key: what the trace sees of it (shape, dtype, weak type), and
    its sharding where it is spread over several devices. A numpy array and an uncommitted or
    single-device JAX array of the same shape trace alike, as `equinox.filter_jit` takes them."""
    if isinstance(x, jax.core.Tracer):
        raise _Unkeyable("a traced argument")
    weak = bool(getattr(x, "weak_type", False))
    return ("array", x.shape, x.dtype.str, weak, repr(x.sharding) if _spread(x) else None)


def _context() -> str:
    """JAX's trace context (the settings in its own jit keys), primitives only."""
    from jax._src import config

    try:
        ctx = config.trace_context()
    except AttributeError:  # pragma: no cover - depends on the JAX release
        raise _Unkeyable("this JAX has no trace context") from None
    plain = (bool, int, float, str, type(None), tuple)
    items = [repr(v) if isinstance(v, plain) else type(v).__name__ for v in ctx]
    import equinox._errors as eqx_errors

    items.append(repr(getattr(eqx_errors, "EQX_ON_ERROR", None)))
    return "|".join(items)


def _pickled(args, kwargs) -> bytes:
    """The arguments as the key holds them (module docstring); raises `_Unkeyable`."""
    specs = jax.tree.map(lambda x: _spec(x) if eqx.is_array(x) else x, (args, kwargs))
    buf = io.BytesIO()
    pickler = _KeyPickler(buf, protocol=5)
    pickler.fast = True  # no memo: an object passed twice pickles as two equal copies would
    try:
        pickler.dump(specs)
    except _Unkeyable:
        raise
    except Exception as err:  # an argument pickle cannot write (a lambda, a lock, ...)
        raise _Unkeyable(f"{type(err).__name__}: {err}") from None
    return buf.getvalue()


def keyable(*args, **kwargs) -> bool:
    """Whether a call with these arguments has a key, so that a `saved` function can keep its
    program (a closure, or code from outside jaxmb and its libraries, has none)."""
    try:
        _pickled(args, kwargs)
    except _Unkeyable:
        return False
    return True


def _key(fun, args, kwargs) -> str:
    """The key of ``fun(*args, **kwargs)``'s trace (module docstring); raises `_Unkeyable`."""
    pickled = _pickled(args, kwargs)
    h = hashlib.sha256(_code())
    h.update(f"{fun.__module__}:{fun.__qualname__}|{_context()}".encode())
    h.update(f"|{jax.default_backend()}|{jax.device_count()}|{jax.process_count()}|".encode())
    h.update(pickled)
    return h.hexdigest()[:40]


def _sds(x):
    return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.aval.weak_type)


def _input_spec(x):
    """An argument as the exported program takes it: with its sharding where it is spread
    over several devices; a single device's array goes where the program's devices are."""
    if not isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype)
    sharding = x.sharding if _spread(x) else None
    return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.aval.weak_type, sharding=sharding)


def _callable(exported):
    """The exported program, compiled for the devices it was exported for: a program that
    shards over several (`jax.shard_map` inside) takes its single-device arguments replicated
    over as many local devices, as its traced form did."""
    call = jax.jit(exported.call)
    n = exported.nr_devices
    if n == 1:
        # every argument committed to one device: JAX compiles such a call anew for each mix
        # of committed and uncommitted arguments (a Python float's array, a result of an
        # earlier computation), where `jax.jit` of the traced function would not
        one = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return lambda *xs: call(*jax.device_put(xs, one))
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    whole = NamedSharding(Mesh(np.asarray(jax.local_devices()[:n]), ("devices",)), PartitionSpec())

    def on_devices(*xs):
        return call(*(x if _spread(x) else jax.device_put(x, whole) for x in xs))

    return on_devices


def _spread(x) -> bool:
    return isinstance(x, jax.Array) and len(x.sharding.device_set) > 1


def _write(path: Path, data: bytes | bytearray) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # whole or not at all, also with another process writing


def _bound(folder: Path) -> None:
    """Keep the folder within `MAX_BYTES`, the least recently used programs going first."""
    files = []
    for f in [*folder.glob("*.export"), *folder.glob("*.shape")]:
        try:
            st = f.stat()
        except OSError:
            continue
        files.append((st.st_mtime, st.st_size, f))
    total = sum(s for _, s, _ in files)
    for _, size, f in sorted(files):
        if total <= MAX_BYTES:
            break
        f.unlink(missing_ok=True)
        f.with_suffix(".out").unlink(missing_ok=True)
        total -= size


class _Saved:
    """``fun`` as `saved` returns it."""

    def __init__(self, fun):
        if "<locals>" in fun.__qualname__ or not _known_module(fun.__module__):
            raise ValueError(
                f"saved: {fun.__module__}.{fun.__qualname__}: expected a module-level function "
                "of jaxmb (its code is what the key covers)"
            )
        self.fun = fun
        self.jitted = eqx.filter_jit(fun)
        self.loaded: dict[str, tuple] = {}  # key -> (compiled call, output skeleton)
        functools.update_wrapper(self, fun)

    def __call__(self, *args, **kwargs):
        folder = program_folder()
        if folder is None or not failures_give_nan():  # a raising check: a host callback,
            return self.jitted(*args, **kwargs)  # which neither cache keeps
        try:
            key = _key(self.fun, args, kwargs)
        except _Unkeyable as why:
            _log.info("%s: traced as usual: %s", self.fun.__qualname__, why)
            return self.jitted(*args, **kwargs)
        dynamic, static = eqx.partition((args, kwargs), eqx.is_array)
        leaves, treedef = jax.tree.flatten(dynamic)
        if key not in self.loaded:
            self.loaded[key] = self._load(folder, key) or self._export(
                folder, key, leaves, treedef, static
            )
        if self.loaded[key] is None:
            return self.jitted(*args, **kwargs)
        call, (skeleton, static_out) = self.loaded[key]
        out = call(*leaves)
        return eqx.combine(jax.tree.unflatten(jax.tree.structure(skeleton), out), static_out)

    def _paths(self, folder: Path, key: str) -> tuple[Path, Path]:
        stem = f"{self.fun.__module__}.{self.fun.__qualname__}-{key}"
        return folder / f"{stem}.export", folder / f"{stem}.out"

    def _load(self, folder: Path, key: str):
        program, outputs = self._paths(folder, key)
        try:
            exported = jax.export.deserialize(bytearray(program.read_bytes()))
            skeleton = pickle.loads(outputs.read_bytes())
            os.utime(program)  # recently used (`_bound`)
        except FileNotFoundError:
            _log.info("%s: no saved program %s", self.fun.__qualname__, key)
            return None
        except Exception:  # unreadable (cut short, another version's format): traced anew
            return None
        return _callable(exported), skeleton

    def _export(self, folder: Path, key: str, leaves, treedef, static):
        fun, skeleton = self.fun, []

        def flat(*xs):
            args, kwargs = eqx.combine(jax.tree.unflatten(treedef, xs), static)
            dynamic, static_out = eqx.partition(fun(*args, **kwargs), eqx.is_array)
            skeleton.append((jax.tree.map(_sds, dynamic), static_out))
            return jax.tree.leaves(dynamic)

        specs = [_input_spec(x) for x in leaves]
        try:
            exported = jax.export.export(jax.jit(flat))(*specs)
        except (NotImplementedError, ValueError) as why:
            # a program jax.export refuses (a host callback, a custom call it does not keep)
            # runs as usual; and an error of the trace itself comes again from there
            _log.info("%s: not exported: %s", self.fun.__qualname__, str(why).splitlines()[0])
            return None
        # the program as a later process reads it: serializing drops weak types (a weakly
        # typed output comes back strong), and an output that feeds the next call's key (a
        # chunk's carry) must be the same in the process that exports and in those that read
        blob = exported.serialize()
        exported = jax.export.deserialize(blob)
        try:
            outputs_blob = pickle.dumps(skeleton[0], protocol=5)
        except Exception:  # an output pickle cannot write: this process runs it, unsaved
            return _callable(exported), skeleton[0]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            program, outputs = self._paths(folder, key)
            _write(outputs, outputs_blob)
            _write(program, blob)
            _bound(folder)
        except OSError:
            pass  # not saved (a full disk, a folder gone): this process still runs it
        return _callable(exported), skeleton[0]


def saved_shape(fun, *args, **kwargs):
    """``equinox.filter_eval_shape(fun, *args, **kwargs)``, kept on disk beside the saved
    programs under the same key, so that a later process checks the shapes of a call without
    tracing it (``fun`` a module-level function of jaxmb); computed as usual wherever `saved`
    would trace."""
    folder = program_folder()
    if folder is None or not failures_give_nan():
        return eqx.filter_eval_shape(fun, *args, **kwargs)
    try:
        key = _key(fun, args, kwargs)
    except _Unkeyable:
        return eqx.filter_eval_shape(fun, *args, **kwargs)
    path = folder / f"{fun.__module__}.{fun.__qualname__}-{key}.shape"
    try:
        out = pickle.loads(path.read_bytes())
        os.utime(path)  # recently used (`_bound`)
        return out
    except Exception:  # none yet, or unreadable: evaluated anew and written again
        pass
    out = eqx.filter_eval_shape(fun, *args, **kwargs)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _write(path, pickle.dumps(out, protocol=5))
    except Exception:  # an output pickle cannot write, a full disk: not kept
        pass
    return out


def saved(fun):
    """``fun`` compiled as `equinox.filter_jit` would (arrays traced, everything else static),
    its traced program kept on disk where JAX's persistent cache is on, so that a later
    process calls it without tracing (module docstring)."""
    return _Saved(fun)
