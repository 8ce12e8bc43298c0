"""JAX's persistent compilation cache, where jaxmb's commands can keep their compiled programs.

A closed-loop crane simulation or an identification compiles for tens of seconds; the cache
makes that a one-time cost per shape: the second run of a command with the same shapes loads
its programs from disk. JAX writes no program that holds a host callback (a raising
``equinox.error_if``, a progress meter) to the cache, so the commands trace their programs
inside `jaxmb.multibody.checks.failures_as_nan` and raise from the returned status instead.

Off unless asked for. With jaxlib 0.10.2 on CPU, loading one of the project's programs back
from the cache kills the process (a segmentation fault in XLA while it deserializes the
executable): the crane tuning's forward-mode pass through the closed loop
(`control.vdc_tuning`), written by one run and read by the next, every time; the same
program compiled afresh runs. Until the loader is fixed upstream a user opts in, knowing it:
``$JAXMB_COMPILE_CACHE`` set to ``on`` (the folder ``$XDG_CACHE_HOME/jaxmb/xla``, i.e.
``~/.cache/jaxmb/xla``) or to a folder; ``off`` (or unset) switches it off. Its size is
bounded by ``$JAXMB_COMPILE_CACHE_MAX_MB`` (default 2048): JAX evicts the least recently used
programs.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental.compilation_cache import compilation_cache as _jax_cache

__all__ = ["ENV", "ENV_MAX_MB", "cache_dir", "enable", "mapped_regions", "relieve", "strong_types"]

ENV = "JAXMB_COMPILE_CACHE"
ENV_MAX_MB = "JAXMB_COMPILE_CACHE_MAX_MB"
_OFF = ("", "off", "0", "false", "no", "none")
_ON = ("on", "1", "true", "yes")
# programs that compile faster than this are not worth a disk entry (nor the read back)
MIN_COMPILE_TIME_S = 0.2


def cache_dir(environ=os.environ) -> Path | None:
    """The cache folder the environment asks for (``on``: the user's cache folder), or None
    where it leaves the cache off (the default: module docstring)."""
    given = environ.get(ENV, "").strip()
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
    return folder


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
