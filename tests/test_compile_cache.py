"""The persistent compilation cache (issue 28 point 1): where it lives, how it is switched off,
and that a command's compiled programs go into it and come back from it."""

import logging
from pathlib import Path

import jax
import pytest

from jaxmb import compile_cache
from jaxmb.cli import main


def test_the_folder_follows_the_environment(tmp_path):
    assert compile_cache.cache_dir({"JAXMB_COMPILE_CACHE": str(tmp_path)}) == tmp_path
    for off in ("off", "0", "OFF", "no"):
        assert compile_cache.cache_dir({"JAXMB_COMPILE_CACHE": off}) is None
    assert compile_cache.enable(environ={"JAXMB_COMPILE_CACHE": "off"}) is None
    assert jax.config.jax_compilation_cache_dir is None
    # on by default, in the user's cache folder ("on" says the same)
    for on in ({}, {"JAXMB_COMPILE_CACHE": "on"}, {"JAXMB_COMPILE_CACHE": ""}):
        assert compile_cache.cache_dir(on) == Path.home() / ".cache" / "jaxmb" / "xla"
        xdg = {**on, "XDG_CACHE_HOME": str(tmp_path)}
        assert compile_cache.cache_dir(xdg) == tmp_path / "jaxmb" / "xla"
    compile_cache.enable()  # the session's folder (tests/conftest.py) back for later tests


def test_bad_settings_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"\$JAXMB_COMPILE_CACHE_MAX_MB: expected a size in MB"):
        compile_cache.enable(tmp_path, environ={"JAXMB_COMPILE_CACHE_MAX_MB": "lots"})
    with pytest.raises(ValueError, match=r"expected a size > 0 MB, got '-1'"):
        compile_cache.enable(tmp_path, environ={"JAXMB_COMPILE_CACHE_MAX_MB": "-1"})
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    with pytest.warns(UserWarning, match="cannot be written.*compiling without it"):
        assert compile_cache.enable(blocked / "xla", environ={}) is None


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A fresh cache folder for one test; the session's (tests/conftest.py) comes back after."""
    folder = tmp_path / "xla"
    monkeypatch.setenv("JAXMB_COMPILE_CACHE", str(folder))
    yield folder
    monkeypatch.undo()
    compile_cache.enable()


def test_a_second_run_reads_its_programs_back(own_cache, tmp_path, caplog):
    """`jaxmb simulate` (the arm's closed loop, with its default progress bar) twice in one
    process, JAX's in-memory caches cleared between: the first run writes its programs, none of
    which holds a host callback (the command traces its run-time checks as NaN and reads the
    solver's status; the bar moves between chunks of the solve, each one call of one compiled
    program); the second compiles nothing new and reads them back."""
    hits = []

    def listen(event, **kwargs):
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    argv = ["simulate", "--t-final", "0.05", "--dt-save", "0.01", "--no-plots"]
    jax.config.update("jax_explain_cache_misses", True)  # logs why a program is not written
    jax.monitoring.register_event_listener(listen)
    try:
        with caplog.at_level(logging.WARNING, logger="jax._src.compiler"):
            jax.clear_caches()
            assert main([*argv, "--out", str(tmp_path / "a")]) == 0
            written = sorted(p.name for p in own_cache.iterdir())
            assert not [r for r in caplog.records if "host callbacks" in r.getMessage()]
            jax.clear_caches()
            hits.clear()
            assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    finally:
        jax.monitoring.unregister_event_listener(listen)
        jax.config.update("jax_explain_cache_misses", False)
    assert any("simulate" in n or "lambda" in n for n in written), written
    assert sorted(p.name for p in own_cache.iterdir()) == written  # nothing compiled anew
    programs = [n for n in written if n.endswith("-cache")]  # each with its "-atime" (LRU)
    assert len(hits) >= len(programs) > 0
    a = (tmp_path / "a" / "timeseries.csv").read_text()
    assert a == (tmp_path / "b" / "timeseries.csv").read_text()


def test_relieve_drops_compiled_programs_only_past_its_share_of_the_map_limit():
    """`compile_cache.relieve`: a long command's guard against the kernel's per-process limit
    on memory mappings (XLA's CPU JIT maps each kernel of each program on its own)."""
    f = jax.jit(lambda x: 2.0 * x + 1.0)
    assert f(1.0) == 3.0 and f._cache_size() == 1
    assert compile_cache.mapped_regions() > 0  # Linux: /proc/self/maps
    assert not compile_cache.relieve(1.0) and f._cache_size() == 1  # below the limit: kept
    assert compile_cache.relieve(0.0) and f._cache_size() == 0  # past it: dropped
    assert f(2.0) == 5.0  # and compiled again when called


# A process with the cache in `folder`; `program` compiles and runs a small function (every
# program written, whatever its compile time); with `die_reading`, reading a program back kills
# the process with SIGSEGV where jaxlib's loader would (after JAX's look-up has stamped the
# entry, before the executable is loaded).
_RUN = """
import os, signal, sys
import jax
jax.config.update("jax_enable_x64", True)
from jaxmb import compile_cache
compile_cache.enable(sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
if sys.argv[2] == "die_reading":
    from jax._src import compilation_cache as cc
    cc.decompress_executable = lambda *a: os.kill(os.getpid(), signal.SIGSEGV)
print(float(jax.jit(lambda x: jax.numpy.sin(x) * 3.0 + 1.0)(0.5)))
"""


def _run(folder, mode):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", _RUN, str(folder), mode], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_a_program_that_kills_the_process_as_it_is_read_back_is_removed_next_time(tmp_path):
    """The guard against jaxlib's loader crash (jaxmb.compile_cache): a run that dies while
    reading a program back leaves its marker; the next `enable` removes what it was reading
    and warns; the run after that compiles the program afresh and gets the same result."""
    import math
    import signal

    folder = tmp_path / "xla"
    first = _run(folder, "write")
    assert first.returncode == 0, first.stderr
    assert float(first.stdout) == 3.0 * math.sin(0.5) + 1.0
    entries = sorted(p.name for p in folder.glob("*-cache"))
    assert len(entries) == 1 and not list(folder.glob(".jaxmb-reading-*"))  # none left open

    died = _run(folder, "die_reading")
    assert died.returncode == -signal.SIGSEGV, died.stderr
    markers = list(folder.glob(".jaxmb-reading-*"))
    assert len(markers) == 1  # the dead run's, with the time of its look-up

    try:
        with pytest.warns(UserWarning, match=r"an earlier run died while reading a compiled "
                          r"program back \(1 entry removed"):  # fmt: skip
            assert compile_cache.enable(folder) == folder
        assert not list(folder.glob("*-cache")) and not list(folder.glob(".jaxmb-reading-*"))
    finally:
        compile_cache.enable()  # the session's folder (tests/conftest.py) back
    again = _run(folder, "write")
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert sorted(p.name for p in folder.glob("*-cache")) == entries  # compiled afresh


def test_markers_of_live_processes_and_other_hosts_are_left_alone(tmp_path):
    import os
    import socket
    import time

    (tmp_path / "k-cache").write_bytes(b"x")
    (tmp_path / "k-atime").write_bytes(time.time_ns().to_bytes(8, "little"))
    host = socket.gethostname()
    live = tmp_path / f".jaxmb-reading-{host}-{os.getppid()}"  # the process that runs pytest
    other = tmp_path / f".jaxmb-reading-{host}x-999999"
    for m in (live, other):
        m.write_text("0")
    assert compile_cache.recover(tmp_path) == []
    assert live.exists() and other.exists() and (tmp_path / "k-cache").exists()
    garbled = tmp_path / f".jaxmb-reading-{host}-1x"
    garbled.write_text("")
    assert compile_cache.recover(tmp_path) == [] and not garbled.exists()
