"""Traced programs kept on disk (`jaxmb.saved_programs`, issue 28 point 1): a later process
runs a saved program without tracing and gets the same numbers bit for bit; the key changes
with everything the trace depends on, and code no key covers is traced as usual."""

import functools
import os
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb import compile_cache, saved_programs
from jaxmb.algorithms.dynamics import bias_forces, mass_matrix
from jaxmb.multibody.checks import failures_as_nan
from jaxmb.saved_programs import _key, _Unkeyable, saved


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A cache folder of this test's own; the session's (tests/conftest.py) back after."""
    compile_cache.enable(tmp_path / "xla")
    yield tmp_path / "xla" / "programs"
    compile_cache.enable()


def _traces(fn, *args):
    """``fn(*args)`` and the number of functions JAX traced for it."""
    seen = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/jaxpr_trace_duration":
            seen.append(kwargs.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        out = jax.block_until_ready(fn(*args))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return out, seen


def test_a_saved_program_is_read_back_without_tracing_and_gives_the_same_numbers(folder, arm):
    q = jnp.array([0.1, 0.35, 0.12])
    with failures_as_nan():
        plain = eqx.filter_jit(mass_matrix)(arm, q)
        first, _ = _traces(saved(mass_matrix), arm, q)
        assert len(list(folder.glob("*.export"))) == 1
        # a fresh wrapper knows nothing in memory, as a new process: it reads the program
        again, traced = _traces(saved(mass_matrix), arm, q + 0.01)
        assert not [f for f in traced if "mass_matrix" in f or "flat" in f], traced
        np.testing.assert_array_equal(first, plain)
        np.testing.assert_array_equal(again, eqx.filter_jit(mass_matrix)(arm, q + 0.01))
    # outside failures_as_nan a raising check is a host callback: traced as usual, not saved
    for f in folder.glob("*"):
        f.unlink()
    np.testing.assert_array_equal(saved(mass_matrix)(arm, q), plain)
    assert not list(folder.glob("*.export"))


_SCRIPT = """
import sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np
import jaxmb
from jaxmb import compile_cache
from jaxmb.algorithms.dynamics import bias_forces
from jaxmb.multibody.checks import failures_as_nan
from jaxmb.saved_programs import saved
compile_cache.enable(sys.argv[1])
traced = []
jax.monitoring.register_event_duration_secs_listener(
    lambda e, d, **k: traced.append(k.get("fun_name")) if e.endswith("jaxpr_trace_duration") else 0)
arm = jaxmb.models.series_parallel_3dof()
with failures_as_nan():
    h = saved(bias_forces)(arm, jnp.array([0.1, 0.35, 0.12]), jnp.array([0.2, -0.1, 0.05]))
print(repr(np.asarray(h).tolist()), sum(1 for f in traced if "flat" in f or "bias" in f))
"""


def _twice(script: str, folder) -> list:
    """``script`` run by two fresh processes one after the other, with ``folder`` as their
    cache; both must succeed."""
    runs = [
        subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "JAXMB_COMPILE_CACHE": "off"})
        for _ in range(2)
    ]  # fmt: skip
    for r in runs:
        assert r.returncode == 0, r.stderr
    return runs


def test_a_second_process_runs_the_saved_program(tmp_path):
    runs = _twice(_SCRIPT, tmp_path)
    (h1, n1), (h2, n2) = (r.stdout.rsplit(" ", 1) for r in runs)
    assert int(n1) >= 1 and int(n2) == 0  # the first traced, the second read it back
    assert h1 == h2


def test_the_key_follows_what_the_trace_depends_on(arm, monkeypatch):
    q = jnp.array([0.1, 0.35, 0.12])
    with failures_as_nan():
        k = _key(mass_matrix, (arm, q), {})
        assert _key(mass_matrix, (arm, q + 1.0), {}) == k  # values are inputs, not the key
        assert _key(bias_forces, (arm, q), {}) != k
        assert _key(mass_matrix, (arm, q[:2]), {}) != k
        assert _key(mass_matrix, (arm, q.astype(jnp.float32)), {}) != k
        assert _key(mass_matrix, (arm, jnp.asarray(0.5) + q), {}) == k
        assert _key(mass_matrix, (arm, q), {"option": 1.0}) != _key(
            mass_matrix, (arm, q), {"option": 2.0}
        )  # a static argument's value is part of the program
        heavier = jaxmb_replace(arm)
        assert _key(mass_matrix, (heavier, q), {}) == k  # a body's mass is an input
        # the code: jaxmb's sources and the libraries' versions
        monkeypatch.setattr(saved_programs, "_code", lambda: b"other sources")
        assert _key(mass_matrix, (arm, q), {}) != k
    assert _key(mass_matrix, (arm, q), {}) != k  # outside failures_as_nan: another trace


def jaxmb_replace(arm):
    import jaxmb

    return jaxmb.replace_body(arm, arm.bodies[0].name, mass=2.0 * float(arm.bodies[0].mass))


def _own_law(x):  # a function of this module: code no key covers
    return x


def test_code_outside_the_key_is_traced_as_usual(folder, arm):
    q = jnp.array([0.1, 0.35, 0.12])
    for args in ((arm, q, _own_law), (arm, q, lambda x: x), (arm, q, functools.partial(_own_law))):
        with pytest.raises(_Unkeyable):
            _key(mass_matrix, args, {})

    def traced_key(x):
        return _key(mass_matrix, (arm, x), {})

    with pytest.raises(_Unkeyable, match="traced"):
        jax.jit(traced_key)(q)
    with pytest.raises(ValueError, match="module-level function of jaxmb"):
        saved(_own_law)

    with failures_as_nan():  # and under a transformation it runs, traced with the caller
        out = jax.vmap(lambda x: saved(mass_matrix)(arm, x))(jnp.stack([q, q]))
    assert out.shape == (2, 3, 3) and not list(folder.glob("*.export"))


def test_an_unreadable_program_is_traced_anew_and_the_folder_stays_bounded(
    folder, arm, monkeypatch
):
    q = jnp.array([0.1, 0.35, 0.12])
    with failures_as_nan():
        want = saved(mass_matrix)(arm, q)
        (program,) = folder.glob("*.export")
        program.write_bytes(program.read_bytes()[:100])  # cut short
        np.testing.assert_array_equal(saved(mass_matrix)(arm, q), want)
        assert program.stat().st_size > 100  # written again, whole
        # at most MAX_BYTES: the least recently used program goes first
        saved(bias_forces)(arm, q, q)
        (newer,) = folder.glob("*bias_forces*.export")
        os.utime(program, (1, 1))
        monkeypatch.setattr(saved_programs, "MAX_BYTES", newer.stat().st_size + 1)
        saved_programs._bound(folder)
        assert sorted(p.name for p in folder.iterdir()) == [newer.name, newer.stem + ".out"]


_SHARDED = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxmb import compile_cache, saved_programs
from jaxmb.multibody.checks import failures_as_nan
saved_programs._OWN = ("jaxmb", "__main__")  # this script's function, as if it were jaxmb's
compile_cache.enable(sys.argv[1])
traced = []
jax.monitoring.register_event_duration_secs_listener(
    lambda e, d, **k: traced.append(k.get("fun_name")) if e.endswith("jaxpr_trace_duration") else 0)
mesh = Mesh(np.asarray(jax.local_devices()), ("s",))
def f(theta, x):
    out = jax.shard_map(lambda th, xx: jnp.sin(xx) * th, mesh=mesh, in_specs=(P(), P("s")),
                        out_specs=P("s"), check_vma=False)(theta, x)
    return out.sum(), out
g = saved_programs.saved(f)
theta, x = jnp.asarray(2.0, dtype=float), jnp.arange(8.0)
with failures_as_nan():
    a = g(theta, x)  # host arguments: replicated over the program's two devices
    b = g(theta, jax.device_put(x, NamedSharding(mesh, P("s"))))  # spread over them
want = jax.jit(f)(theta, x)
assert all(np.array_equal(u, w) for u, w in zip(a + b, want + want))
print(sum(1 for n in traced if n == "flat"))
"""


def test_a_program_sharded_over_devices_is_saved_and_read_back(tmp_path):
    """A program that shards its batch over two XLA devices (`jax.shard_map`, as the Monte
    Carlo chunks and the identification's segments do), called with host arguments and with
    arguments spread over the devices: saved, and read back by a second process."""
    runs = _twice(_SHARDED, tmp_path)
    assert [int(r.stdout) for r in runs] == [2, 0]  # two layouts traced once, then none
    assert len(list((tmp_path / "programs").glob("*.export"))) == 2


def _saved_then_read_back(folder, run, programs, names, shape):
    """``run(True)`` (with the bar) twice, the saved ``programs`` cleared from memory before
    each, as in a new process: the first exports ``names`` and the command's ``shape``, the
    second traces nothing but the saved programs' calls (not even the controller, for its
    output's shape) and gives the same numbers bit for bit. Returns the first result."""
    with failures_as_nan():
        for program in programs:  # nothing in memory from earlier tests of this process
            program.loaded.clear()
        first, traced = _traces(run, True)
        assert "flat" in traced  # traced for export
        assert sorted(p.name.split("-")[0] for p in folder.glob("*.export")) == names
        (kept,) = folder.glob("*.shape")  # the controller's output shape (`saved_shape`)
        assert kept.name.startswith(f"jaxmb.simulation.{shape}-")
        for program in programs:
            program.loaded.clear()
        again, traced = _traces(run, True)
        assert set(traced) == {"call"}, traced
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(a, b)
    return first


def test_a_chunked_simulation_with_its_bar_is_saved_and_read_back(folder):
    """The progress bar's chunked solve (`simulate(..., progress=True)`, what the commands run
    by default) of a hydraulic plant: its loop is a pytree (`integrate._ClosedLoop`), so its
    start state, its chunk and the trajectory after it are saved programs. Read back as a new
    process would (nothing in memory), they are not traced and give the same numbers bit for
    bit; and they agree with the single solve to the solver's tolerance (the chunks restart
    its step control)."""
    import jaxmb
    from jaxmb.models.crane import WAYPOINTS
    from jaxmb.simulation import CommandTable, integrate, simulate

    crane = jaxmb.models.lift_tilt_crane_plant()
    table = CommandTable([0.0, 0.6], [[10.0, -3.0], [10.0, 3.0]], ("u_lift", "u_tilt"))
    q0, ts = jnp.asarray(WAYPOINTS["A"]), jnp.linspace(0.0, 0.6, 31)

    def run(progress):
        return simulate(crane, table, None, q0, jnp.zeros(2), ts, rtol=1e-8, atol=1e-10,
                        progress=progress, throw=False)  # fmt: skip

    programs = (integrate._chunk_saved, integrate._call_saved, integrate.start_state)
    names = [f"jaxmb.simulation.integrate.{f}" for f in ("_call", "_chunk_solve", "_start")]
    first = _saved_then_read_back(folder, run, programs, names, "integrate._command_shape")
    with failures_as_nan():
        single = run(False)
    assert bool(first.success) and bool(single.success)
    np.testing.assert_allclose(first.q, single.q, atol=1e-7)
    np.testing.assert_allclose(first.signal("p_a_lift"), single.signal("p_a_lift"), rtol=1e-6)
    np.testing.assert_array_equal(first.u, single.u)  # the table at the save times


def test_the_exporting_process_gets_what_later_processes_read(folder):
    """A weakly typed output (from Python-float arguments) comes back from a saved program as a
    later process reads it: serialization drops weak types, and where such an output feeds the
    next call's key (a chunk's carry) the exporting process keyed a second program."""
    from jaxmb.actuators.hydraulics import signed_sqrt

    dp, width = jnp.asarray(4.0e5), jnp.asarray(1.0e3)
    assert dp.weak_type and signed_sqrt(dp, width).weak_type  # traced as usual: weak
    with failures_as_nan():
        exported = saved(signed_sqrt)(dp, width)
        read = saved(signed_sqrt)(dp, width)  # a fresh wrapper reads the program back
    assert len(list(folder.glob("*signed_sqrt*.export"))) == 1
    assert exported.weak_type == read.weak_type
    np.testing.assert_array_equal(exported, read)


def test_committed_and_uncommitted_arguments_share_one_compile(folder, arm):
    """A saved program is compiled once for arguments fresh from Python and for results of
    earlier computations (committed to a device): an Adam step's gains are the latter, the
    first step's the former (`jax.jit` of an exported call alone compiled it twice, 50 s
    each for the crane tuning's gradient)."""
    compiled = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(kwargs.get("fun_name"))

    q = jnp.array([0.1, 0.35, 0.12])
    f = saved(bias_forces)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        with failures_as_nan():
            fresh = f(arm, q, q)
            committed = jax.device_put(q, jax.devices()[0])
            assert committed.committed and not q.committed
            again = f(arm, committed, jnp.sin(committed) * 0 + q)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiled.count("jit(call)") == 1, compiled
    np.testing.assert_array_equal(fresh, again)


def test_a_sampled_loop_with_its_bar_is_saved_and_read_back(folder):
    """`simulate_sampled`'s loop is a pytree too (`sampled._SampledLoop`): with the bar (what
    `jaxmb simulate --machine rpr3-flexible` runs) its chunks of one compiled scan, the
    trajectory after them and the start state are saved programs, and the command's shape a
    saved shape. Read back as a new process would, nothing but their calls is traced, the
    numbers are the same bit for bit, and the chunks are the single scan's intervals."""
    import jaxmb
    from jaxmb.models.crane import WAYPOINTS
    from jaxmb.simulation import CommandTable, integrate, sampled

    crane = jaxmb.models.lift_tilt_crane_plant()
    table = CommandTable([0.0, 0.6], [[10.0, -3.0], [10.0, 3.0]], ("u_lift", "u_tilt"))
    q0 = jnp.asarray(WAYPOINTS["A"])

    def run(progress):
        return sampled.simulate_sampled(crane, table, None, q0, jnp.zeros(2), h=0.02,
                                        t_final=0.6, rtol=1e-8, atol=1e-10,
                                        progress=progress)  # fmt: skip

    programs = (sampled._scan_saved, sampled._finish_saved, integrate.start_state)
    names = ["jaxmb.simulation.integrate._start", "jaxmb.simulation.sampled._finish",
             "jaxmb.simulation.sampled._scan_solve"]  # fmt: skip
    first = _saved_then_read_back(folder, run, programs, names, "sampled._command_shape")
    with failures_as_nan():
        single = jax.jit(lambda: run(False))()
    assert bool(first.success) and int(first.num_steps) == int(single.num_steps)
    for a, b in zip(jax.tree.leaves(first.y), jax.tree.leaves(single.y), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(first.u, single.u)
