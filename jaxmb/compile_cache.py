"""JAX's persistent compilation cache, where jaxmb's commands keep their compiled programs.

A closed-loop crane simulation or an identification compiles for tens of seconds; the cache
makes that a one-time cost per shape: the second run of a command with the same shapes loads
its programs from disk. JAX writes no program that holds a host callback (a raising
``equinox.error_if``, a progress meter) to the cache, so the commands trace their programs
inside `jaxmb.multibody.checks.failures_as_nan` and raise from the returned status instead.

On by default for the commands (`jaxmb.cli`), in the user's cache folder
(``$XDG_CACHE_HOME/jaxmb/xla``, i.e. ``~/.cache/jaxmb/xla``); ``$JAXMB_COMPILE_CACHE`` set to
a folder moves it there, ``off`` switches it off. Its size is bounded by
``$JAXMB_COMPILE_CACHE_MAX_MB`` (default 2048): JAX evicts the least recently used programs.
A library user opts in by calling `enable`.

A program read back can kill the process: jaxlib 0.10.2's CPU loader links a program's object
files recursively on a thread of a fixed 2 MiB stack, and has overflowed it on a large program
(docs/compile-cache.md: once, on an earlier form of the crane tuning's gradient; none of the
commands' programs does so now). So every read is watched: before JAX looks a program up, a
marker with the time goes into the folder (``.jaxmb-reading-HOST-PID``), and it goes once the
program is loaded or compiled. A process that dies in between leaves its marker behind; the
next `enable` on that host finds it, removes the entries read since (a ``-atime`` file JAX
stamps at every read), and warns: the run that died is the only one that program kills, and
it is compiled afresh the next time.
"""

from __future__ import annotations

import atexit
import os
import socket
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental.compilation_cache import compilation_cache as _jax_cache

__all__ = [
    "ENV",
    "ENV_MAX_MB",
    "cache_dir",
    "enable",
    "mapped_regions",
    "recover",
    "relieve",
    "strong_types",
]

ENV = "JAXMB_COMPILE_CACHE"
ENV_MAX_MB = "JAXMB_COMPILE_CACHE_MAX_MB"
_OFF = ("off", "0", "false", "no", "none")
_ON = ("on", "1", "true", "yes")
# programs that compile faster than this are not worth a disk entry (nor the read back)
MIN_COMPILE_TIME_S = 0.2


def cache_dir(environ=os.environ) -> Path | None:
    """The cache folder the environment asks for: the user's cache folder where
    ``$JAXMB_COMPILE_CACHE`` is unset or ``on``, the folder it names, or None where it is
    ``off``."""
    given = environ.get(ENV, "").strip() or "on"
    if given.lower() in _OFF:
        return None
    if given.lower() not in _ON:
        return Path(given).expanduser()
    base = environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "jaxmb" / "xla"


def _max_bytes(environ) -> int:
    raw = environ.get(ENV_MAX_MB, "2048").strip()
    try:
        mb = float(raw)
    except ValueError:
        raise ValueError(f"${ENV_MAX_MB}: expected a size in MB, got {raw!r}") from None
    if not mb > 0:
        raise ValueError(f"${ENV_MAX_MB}: expected a size > 0 MB, got {raw!r}")
    return int(mb * 2**20)


def enable(path: str | Path | None = None, *, environ=os.environ) -> Path | None:
    """Point JAX's persistent compilation cache at ``path`` (default: `cache_dir`) and bound its
    size; returns the folder, or None where the cache is off or its folder cannot be written
    (a warning says so, and everything still runs, compiling as before)."""
    folder = Path(path).expanduser() if path is not None else cache_dir(environ)
    max_bytes = _max_bytes(environ)
    _watch(None)
    if folder is None:
        if jax.config.jax_compilation_cache_dir is not None:
            jax.config.update("jax_compilation_cache_dir", None)
            _jax_cache.reset_cache()
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".jaxmb-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        warnings.warn(
            f"compilation cache {folder} cannot be written ({err.strerror}); compiling without "
            f"it (set ${ENV} to another folder, or to 'off')",
            stacklevel=2,
        )
        return None
    if jax.config.jax_compilation_cache_dir != str(folder):
        # JAX settles on its cache when it first compiles: a new folder needs a reset
        jax.config.update("jax_compilation_cache_dir", str(folder))
        _jax_cache.reset_cache()
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_compilation_cache_max_size", max_bytes)
    removed = recover(folder)
    if removed:
        warnings.warn(
            f"compilation cache {folder}: an earlier run died while reading a compiled program "
            f"back ({len(removed)} entr{'y' if len(removed) == 1 else 'ies'} removed; they "
            "compile afresh). jaxlib's CPU loader can crash on a large program "
            f"(docs/compile-cache.md); set ${ENV}=off to run without the cache",
            stacklevel=2,
        )
    _watch(folder)
    return folder


# -- the guard against a program that kills the process as it is read back (module docstring)

_READING = ".jaxmb-reading-"
_REQUEST = "/jax/compilation_cache/compile_requests_use_cache"  # before JAX's look-up
_DONE = "/jax/core/compile/backend_compile_duration"  # after it: read back or compiled
_watched: dict = {"folder": None, "listening": False}


def _marker(folder: Path, pid: int | None = None) -> Path:
    return folder / f"{_READING}{socket.gethostname()}-{os.getpid() if pid is None else pid}"


def _on_event(event: str, **kwargs) -> None:
    folder = _watched["folder"]
    if event == _REQUEST and folder is not None:
        try:  # the time on the clock JAX stamps its reads with
            _marker(folder).write_text(str(time.time_ns()))
        except OSError:
            pass


def _on_duration(event: str, duration: float, **kwargs) -> None:
    folder = _watched["folder"]
    if event == _DONE and folder is not None:
        _marker(folder).unlink(missing_ok=True)


def _watch(folder: Path | None) -> None:
    """Mark every look-up in ``folder`` (None: stop marking), listening to JAX's events."""
    old = _watched["folder"]
    if old is not None and old != folder:
        _marker(old).unlink(missing_ok=True)
    _watched["folder"] = folder
    if folder is not None and not _watched["listening"]:
        jax.monitoring.register_event_listener(_on_event)
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        atexit.register(lambda: _watch(None))
        _watched["listening"] = True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def recover(folder: Path) -> list[str]:
    """Remove the entries that a process of this host which has died was reading back when it
    died (its marker's time or later); returns their keys. Markers of live processes, and of
    other hosts sharing the folder, are left alone."""
    from filelock import FileLock, Timeout

    folder = Path(folder)
    removed: list[str] = []
    for marker in folder.glob(f"{_READING}{socket.gethostname()}-*"):
        try:
            pid = int(marker.name.rsplit("-", 1)[1])
            since = int(marker.read_text())
        except (ValueError, OSError):
            marker.unlink(missing_ok=True)  # unreadable: written as the process died
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        try:  # JAX's own lock on the folder: no read or write of an entry meanwhile
            with FileLock(folder / ".lockfile", timeout=10):
                for stamp in folder.glob("*-atime"):
                    try:
                        read_at = int.from_bytes(stamp.read_bytes(), "little")
                    except OSError:
                        continue
                    if read_at >= since:
                        key = stamp.name.removesuffix("-atime")
                        (folder / f"{key}-cache").unlink(missing_ok=True)
                        stamp.unlink(missing_ok=True)
                        removed.append(key)
        except Timeout:
            continue  # held by a live process: the next run looks again
        marker.unlink(missing_ok=True)
    return removed


def mapped_regions() -> int | None:
    """How many memory mappings this process holds (Linux's ``/proc/self/maps``), or None
    where the system does not say."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def _map_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65530  # Linux's default


def relieve(fraction: float = 0.5) -> bool:
    """Drop JAX's in-memory compiled programs (`jax.clear_caches`) when this process holds
    more than ``fraction`` of the kernel's per-process limit on memory mappings
    (``vm.max_map_count``, 65530 by default); returns whether it did.

    Why: XLA's CPU JIT maps every kernel of every compiled program on its own (a closed loop
    of a hydraulic machine holds thousands of mappings), and a process past the limit dies
    in its next allocation, a segmentation fault with no message. Long commands call this
    between their stages; what a later stage needs again is traced and compiled anew (or read
    back from the persistent cache where it is on)."""
    n = mapped_regions()
    if n is None or n <= fraction * _map_limit():
        return False
    jax.clear_caches()
    return True


def strong_types(tree):
    """``tree`` with every weakly typed array leaf made strong, of the same dtype. A weak type
    is part of a compiled program's signature: a plant built from Python floats (a machine
    file's payload, ``jnp.asarray(60.0)``) and the same plant out of ``eqx.tree_at`` with a
    float64 array would otherwise compile every program twice (5-25 s each on the crane and
    the knuckle). The entry points of the compiled workflows (output error, the machines'
    closed loop) pass their pytrees through this."""
    return jax.tree.map(
        lambda x: jnp.asarray(x, dtype=x.dtype) if isinstance(x, jax.Array) and x.weak_type else x,
        tree,
    )
