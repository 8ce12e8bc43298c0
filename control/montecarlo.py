r"""Monte Carlo robustness studies: N perturbed closed loops as one vmapped, jitted computation
per chunk, sharded over every device of every process, written to Parquet as they finish.

Execution. A chunk of sample indices is a global array split over a one-axis mesh of all
devices (`jax.sharding`; `jax.devices()` spans every process once `jax.distributed` is
initialised); `jax.shard_map` gives each device its slice, which it runs as one vmapped solve
with its own adaptive loop (devices do not wait for each other's steps). A sample's values
are drawn on the host from the seed and the index alone (`sampling.Distribution`) and enter
the computation as data, and each device solves
``lanes`` samples at a time, so results do not depend on the chunk size, the device count or
the process count (`chunk_runner`). Chunks are padded to a multiple of ``lanes`` times the
device count with samples past the end, which are computed and dropped: one compilation serves
every chunk.

Results. Each finished chunk is written by process 0 to ``DIR/chunks/part-<start>-<stop>.parquet``
(write, then atomic rename): one row per sample with ``sample``, the sampled parameters, the
study's figures and ``failed``. A failed solve keeps its row, its parameters and
``failed = True``; its figures are null (Parquet's missing value), never NaN that could pass
for data, and a successful solve whose figures are not finite is marked failed too. When all
samples are done the chunks are gathered, in sample order, into ``DIR/results.parquet``.
Running the same study on the same ``DIR`` again skips the samples already written: an
interrupted study resumes from its last complete chunk, and a larger ``samples`` extends it.
``DIR/study.json`` records the study; a different study in the same ``DIR`` is refused.

Provenance. Each chunk file carries, in its Parquet metadata, a hash of the configuration it ran
(``study.json``'s study, parameter names and lanes) and a hash of its sampled parameter values.
A resume checks every chunk before it runs anything: a chunk of another configuration (say a
study restarted with another seed after ``study.json`` was deleted), or whose parameter columns
are not the values the configuration draws for its samples, is refused with a message that says
how to start afresh, so that rows of two configurations never mix. A chunk that cannot be read,
lacks its hashes or whose columns no longer match its own hash is corrupted: it is removed and
its samples are recomputed, with a line on stderr that names it.

Launching on several devices or machines: see docs/robustness.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxmb.compile_cache import strong_types
from jaxmb.multibody.checks import failures_as_nan
from jaxmb.saved_programs import saved

__all__ = [
    "chunk_runner",
    "run_study",
    "read_results",
    "completed_samples",
    "check_chunks",
    "config_hash",
    "values_hash",
]

CHUNK_DIR = "chunks"


def chunk_runner(study, controller, *, lanes: int = 32, devices=None) -> tuple[Callable, int]:
    """``(run, granule)``: ``run(indices)`` evaluates the samples ``indices`` (an int array
    whose length is a multiple of ``granule = lanes * n_devices``) sharded over ``devices``
    (default: all of them, every process's) and returns ``{"values": (B, P), figure: (B,)}``
    as global arrays.

    Each device runs its slice ``lanes`` samples at a time (`jax.lax.map` over one vmapped
    solve of exactly ``lanes`` samples): every sample's solve is the same compiled loop
    whatever the chunk size, device count or process count, and a slow sample holds back only
    its own group of lanes. Measured: parameters and solves bitwise equal across layouts, the
    figures reduced from them (norms in the bounds) equal to 1e-15 relative, as XLA may fuse
    those last reductions differently; the same layout (a resumed study) gives the same bits.

    The study's and the controller's arrays (gains, nominal values, save times, the plant's
    parameters) are arguments of the compiled code, replicated to every device, and their
    structure is its static part: another controller, gains or study of the same shapes (a
    tuning's validation of the tuned and of the given gains, a study rerun with other nominal
    values) reuses the program compiled for the first (`_chunk_program`, one jit cache for
    every runner).

    Traced under `jaxmb.multibody.checks.failures_as_nan`, so a sample that leaves its model's domain is a
    failed sample, not an error for the batch."""
    devices = jax.devices() if devices is None else list(devices)
    study.check_controller(controller)  # before anything compiles
    if not (isinstance(lanes, int) and lanes >= 1):
        raise ValueError(f"lanes: must be an integer >= 1, got {lanes}")
    mesh = Mesh(np.asarray(devices), ("sample",))
    granule = lanes * len(devices)

    def run(indices):
        indices = np.asarray(indices, dtype=np.int64)
        if indices.shape[0] % granule:
            raise ValueError(
                f"chunk_runner: {indices.shape[0]} samples are not a multiple of {lanes} lanes "
                f"x {len(devices)} devices"
            )
        values = study.values(indices)  # every process draws the same, on the host
        sharding = NamedSharding(mesh, P("sample"))
        x = jax.make_array_from_callback(values.shape, sharding, lambda idx: values[idx])
        replicated = jax.tree.map(
            lambda a: _replicate(a, mesh) if eqx.is_array(a) else a,
            strong_types((study, controller)),  # a weak type would compile the program again
        )
        with failures_as_nan():
            out = _chunk_program(replicated, x, mesh, lanes)
        return {"values": values, **out}

    return run, granule


def _replicate(a, mesh):
    """``a`` as a global array with a full copy on every device of ``mesh`` (every process
    holds the same host values, so each fills its own devices)."""
    a = np.asarray(a)
    return jax.make_array_from_callback(a.shape, NamedSharding(mesh, P()), lambda idx: a[idx])


@saved
def _chunk_program(study_controller, values, mesh, lanes):
    """The samples ``values`` (B, P), sharded over ``mesh``, each device's slice ``lanes`` at
    a time (`chunk_runner`), for ``study_controller = (study, controller)``: their arrays are
    the program's arguments, the rest (structure, names, options) its static part."""
    dynamic, static = eqx.partition(study_controller, eqx.is_array)

    def device_slice(dynamic, values):
        study, controller = eqx.combine(dynamic, static)
        return jax.lax.map(lambda v: study.run(controller, v), values, batch_size=lanes)

    return jax.shard_map(
        device_slice, mesh=mesh, in_specs=(P(), P("sample")), out_specs=P("sample"),
        check_vma=False,
    )(dynamic, values)  # fmt: skip


def _gather(tree) -> dict:
    """Global arrays as host numpy arrays on every process."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree.map(np.asarray, tree)


def _table(indices, out: dict, names: tuple[str, ...]) -> pa.Table:
    """One chunk's rows: figures of failed (or non-finite) samples become nulls."""
    values = np.asarray(out["values"], dtype=float)
    figures = {k: np.asarray(v) for k, v in out.items() if k not in ("values", "failed")}
    failed = np.asarray(out["failed"], dtype=bool).copy()
    for v in figures.values():
        if v.dtype.kind == "f":
            failed |= ~np.isfinite(v)
    cols = {"sample": pa.array(np.asarray(indices, dtype=np.int64))}
    for j, n in enumerate(names):
        cols[n] = pa.array(values[:, j])
    for k in sorted(figures):
        v = figures[k]
        v = v.astype(np.float64) if v.dtype.kind == "f" else v
        cols[k] = pa.array(v, mask=failed)
    cols["failed"] = pa.array(failed)
    return pa.table(cols)


# Parquet metadata keys of a chunk's provenance
CONFIG_KEY, VALUES_KEY = b"jaxmb.config_sha256", b"jaxmb.values_sha256"


def config_hash(manifest: dict) -> str:
    """sha256 of what a chunk's rows depend on: the study's description, its parameter names
    and the lanes (``samples`` is left out: a larger study extends a smaller one)."""
    key = {k: manifest[k] for k in ("study", "parameters", "lanes")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def values_hash(indices, values) -> str:
    """sha256 of sample indices and their parameter values (int64 and float64 bytes)."""
    h = hashlib.sha256(np.ascontiguousarray(indices, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    return h.hexdigest()


def _chunk_values(table: pa.Table, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(table["sample"], dtype=np.int64)
    v = np.stack([np.asarray(table[n], dtype=float) for n in names], axis=1) if names else None
    return s, np.zeros((s.shape[0], 0)) if v is None else v


def check_chunks(out: Path, study, manifest: dict, *, log=None) -> np.ndarray:
    """Check every chunk in ``out/chunks`` against ``manifest`` and ``study`` (module
    docstring) and return the samples the sound ones hold (sorted): refuse another
    configuration's chunk (ValueError); drop a corrupted one, so that its samples run again,
    say so on ``log`` (default stderr) and remove it (process 0; every process reaches the same
    verdict from the same bytes)."""
    lead = jax.process_index() == 0
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True) if lead else None)
    want = config_hash(manifest)
    names = tuple(study.parameter_names)
    afresh = f"remove {out} (or pass another --out) to start afresh"
    done = []
    for path in sorted((Path(out) / CHUNK_DIR).glob("part-*.parquet")):
        try:
            table = pq.read_table(path)
            meta = table.schema.metadata or {}
            s, v = _chunk_values(table, names)
            stored = meta[VALUES_KEY].decode()
            config = meta[CONFIG_KEY].decode()
        except Exception as err:  # unreadable, truncated, columns or hashes missing
            log(f"montecarlo: {path}: corrupted ({type(err).__name__}: {err}); recomputing it")
            _remove(path, lead)
            continue
        if values_hash(s, v) != stored:
            log(f"montecarlo: {path}: its parameter columns do not match its own hash "
                "(corrupted); recomputing it")  # fmt: skip
            _remove(path, lead)
            continue
        if config != want:
            raise ValueError(
                f"{path}: was run under another configuration (config hash {config[:12]}, this "
                f"study's is {want[:12]}); its rows must not mix with this study's: {afresh}"
            )
        if values_hash(s, study.values(s)) != stored:
            raise ValueError(
                f"{path}: its sampled parameters are not the values this configuration draws "
                f"for samples {int(s.min())}..{int(s.max())}; its rows must not mix with this "
                f"study's: {afresh}"
            )
        done.append(s)
    return np.unique(np.concatenate(done)) if done else np.zeros(0, dtype=np.int64)


def _remove(path: Path, lead: bool) -> None:
    if lead:
        path.unlink(missing_ok=True)


def completed_samples(out: Path) -> np.ndarray:
    """Indices of the samples already written in ``out/chunks`` (sorted)."""
    done = [
        np.asarray(pq.read_table(p, columns=["sample"])["sample"])
        for p in sorted((Path(out) / CHUNK_DIR).glob("part-*.parquet"))
    ]
    return np.unique(np.concatenate(done)) if done else np.zeros(0, dtype=np.int64)


def _write_chunk(
    out: Path, table: pa.Table, start: int, stop: int, config: str, names: tuple[str, ...]
) -> None:
    path = Path(out) / CHUNK_DIR / f"part-{start:09d}-{stop:09d}.parquet"
    meta = {
        CONFIG_KEY: config.encode(),
        VALUES_KEY: values_hash(*_chunk_values(table, names)).encode(),
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)  # a chunk file exists complete or not at all


def read_results(out: Path, samples: int | None = None) -> pa.Table:
    """All written rows (samples < ``samples`` if given), in sample order."""
    parts = sorted((Path(out) / CHUNK_DIR).glob("part-*.parquet"))
    if not parts:
        raise FileNotFoundError(f"no results in {Path(out) / CHUNK_DIR}")
    table = pa.concat_tables([pq.read_table(p) for p in parts])
    order = np.argsort(np.asarray(table["sample"]), kind="stable")
    table = table.take(pa.array(order))
    s = np.asarray(table["sample"])
    keep = np.ones(s.shape[0], bool) if samples is None else s < samples
    keep[1:] &= s[1:] != s[:-1]  # a sample written twice (overlapping chunks) counts once
    return table.filter(pa.array(keep))


def _check_manifest(out: Path, manifest: dict) -> None:
    path = Path(out) / "study.json"
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("study") != manifest["study"]:
            raise ValueError(
                f"{out}: holds results of a different study (see {path}); use another --out or "
                "remove it"
            )


def run_study(
    study,
    controller,
    out: Path,
    *,
    samples: int,
    chunk: int,
    description: dict,
    progress: bool = True,
    stop_after: int | None = None,
    lanes: int = 32,
) -> pa.Table | None:
    """Run (or resume) a study into ``out``; returns the results table when every sample is
    done (on process 0; None on the others or when ``stop_after`` chunks ran first).

    Args:
        study, controller: an `ArmStudy` or `MachineStudy` and the controller it evaluates.
        out: the study folder (see the module docstring).
        samples, chunk: N and the samples per jitted call (rounded up to a multiple of
            ``lanes`` times the device count).
        description: what identifies the study (its configuration): ``study.json`` records it
            and a resume checks it; ``samples`` and ``chunk`` are not part of it.
        progress: one progress bar over samples, updated in place.
        stop_after: run at most this many chunks (tests use it to interrupt a study).
        lanes: samples vmapped together on a device (`chunk_runner`); part of the computation,
            so results are bitwise reproducible only for the same ``lanes``."""
    if not (isinstance(samples, int) and samples >= 1):
        raise ValueError(f"samples: must be an integer >= 1, got {samples}")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk: must be an integer >= 1, got {chunk}")
    out = Path(out)
    lead = jax.process_index() == 0
    manifest = {
        "study": description,
        "parameters": list(study.parameter_names),
        "samples": samples,
        "lanes": lanes,
    }
    _check_manifest(out, manifest)
    done = set(check_chunks(out, study, manifest).tolist())  # before anything compiles
    if lead:
        (out / CHUNK_DIR).mkdir(parents=True, exist_ok=True)
        (out / "study.json").write_text(json.dumps(manifest, indent=1))
    todo = [i for i in range(samples) if i not in done]
    run, granule = chunk_runner(study, controller, lanes=lanes)
    size = -(-min(chunk, max(len(todo), 1)) // granule) * granule
    bar = None
    if progress and lead:
        from tqdm.auto import tqdm

        bar = tqdm(total=samples, initial=samples - len(todo), unit="sample", desc="montecarlo")
    ran = 0
    try:
        for k in range(0, len(todo), size):
            if stop_after is not None and ran >= stop_after:
                return None
            part = np.asarray(todo[k : k + size], dtype=np.int64)
            # pad with samples past the end: one compiled shape for every chunk
            pad = np.arange(samples, samples + size - part.shape[0])
            result = run(np.concatenate([part, pad]))
            values = result.pop("values")  # host data, the same on every process
            result = {"values": values, **_gather(result)}
            if lead:
                rows = {key: v[: part.shape[0]] for key, v in result.items()}
                _write_chunk(
                    out, _table(part, rows, study.parameter_names), int(part[0]),
                    int(part[-1]) + 1, config_hash(manifest), tuple(study.parameter_names),
                )  # fmt: skip
            ran += 1
            if bar is not None:
                bar.update(part.shape[0])
    finally:
        if bar is not None:
            bar.close()
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("jaxmb montecarlo done")
    if not lead:
        return None
    table = read_results(out, samples)
    tmp = out / "results.parquet.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, out / "results.parquet")
    return table
