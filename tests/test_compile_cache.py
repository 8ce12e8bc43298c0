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
    for off in ("off", "0", "OFF", ""):
        assert compile_cache.cache_dir({"JAXMB_COMPILE_CACHE": off}) is None
    # off unless asked for (jaxlib 0.10.2's CPU loader crashes on one of the project's
    # programs: the module docstring); "on" takes the user's cache folder
    assert compile_cache.cache_dir({}) is None
    assert compile_cache.enable(environ={}) is None and jax.config.jax_compilation_cache_dir is None
    xdg = {"XDG_CACHE_HOME": str(tmp_path), "JAXMB_COMPILE_CACHE": "on"}
    assert compile_cache.cache_dir(xdg) == tmp_path / "jaxmb" / "xla"
    on = {"JAXMB_COMPILE_CACHE": "on"}
    assert compile_cache.cache_dir(on) == Path.home() / ".cache" / "jaxmb" / "xla"
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
