"""Tests run in float64 with rank promotion disabled; functions are jitted once and shared."""

import os
import sys
import warnings

# Compiling is three quarters of the suite's time (docs/performance.md, "Where the test suite's
# time goes"). XLA's CPU fusion emitters (MLIR kernels, XLA's default) cost about a fifth of a
# compile and buy the project's programs no speed, so the tests compile without them, as the
# commands do (`jaxmb.cli.CPU_FLAGS`): the suite's compiles 4539 -> 3641 worker-s, the same
# results. Set before jax starts its backend (XLA reads the flags once).
_FLAG = "--xla_cpu_use_fusion_emitters=false"
if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}".strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")  # (n,) vs (n, 1) mix-ups fail loudly

import hypothesis  # noqa: E402
import pytest  # noqa: E402

import jaxmb  # noqa: E402
from jaxmb import compile_cache  # noqa: E402

# JAX's persistent compilation cache in a folder the test runs keep ($XDG_CACHE_HOME/jaxmb/
# xla-tests, beside the commands' own), shared by this session's workers and the commands its
# tests start in subprocesses (they inherit the environment), and read back by later runs: a
# program compiled once for the same shapes, options and jaxlib is not compiled again by the
# other worker, a subprocess, a test after `relieve`, or the next run (compiling was over half
# of the suite's time). An entry is keyed by the program's HLO, the compile options and the
# jaxlib version, so a read gives the executable a compile would (jaxmb's saved traces,
# `jaxmb.saved_programs`, are keyed by a hash of jaxmb's sources too). Its size is bounded as
# the commands' cache is (JAX drops the least recently used programs). jaxlib 0.10.2's CPU
# loader has crashed reading a large program back, which the suite's two workers risk within a
# run already: such a crash fails that run's test, and the next `enable` removes what the
# crashed process was reading (jaxmb.compile_cache), so it is compiled afresh. A
# $JAXMB_COMPILE_CACHE of the caller's is kept ('off' compiles everything);
# tests/test_compile_cache.py runs it in folders of its own.
if compile_cache.ENV not in os.environ:
    _user = compile_cache.cache_dir({k: v for k, v in os.environ.items() if k != compile_cache.ENV})
    os.environ[compile_cache.ENV] = str(_user.parent / "xla-tests")
# enable's warning that it removed what a killed run was reading is news, not a failure: it
# goes to stderr (the suite turns warnings into errors, conftest's import included)
with warnings.catch_warnings(record=True) as _said:
    warnings.simplefilter("always")
    compile_cache.enable()
for _w in _said:
    print(f"tests/conftest.py: {_w.message}", file=sys.stderr)


# $JAXMB_TEST_COMPILE_LOG=DIR: every trace, lowering and XLA compile of the session, one row
# each (test, event, function, seconds), one file per worker, to find where CI's time goes
# (compiles dominate it: issue 28). Off by default; the events are JAX's own monitoring ones.
_COMPILE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",  # a read from the cache too
    "/jax/compilation_cache/compile_time_saved_sec": "saved",  # by a read from the cache
}


_LOG_PATH = None  # the compile log's file, where $JAXMB_TEST_COMPILE_LOG asks for one


def _log_row(kind: str, what: str, seconds: float) -> None:
    test = os.environ.get("PYTEST_CURRENT_TEST", "-").split(" ")[0]
    with open(_LOG_PATH, "a") as f:
        f.write(f"{test}\t{kind}\t{what}\t{seconds:.3f}\n")


def _log_compiles(folder: str) -> None:
    global _LOG_PATH
    os.makedirs(folder, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _LOG_PATH = os.path.join(folder, f"compiles-{worker}.tsv")

    def listen(event, duration, **kwargs):
        kind = _COMPILE_EVENTS.get(event)
        if kind is not None:
            _log_row(kind, kwargs.get("fun_name", "-"), duration)

    jax.monitoring.register_event_duration_secs_listener(listen)


if os.environ.get("JAXMB_TEST_COMPILE_LOG"):
    _log_compiles(os.environ["JAXMB_TEST_COMPILE_LOG"])

hypothesis.settings.register_profile(
    "jaxmb", deadline=None, max_examples=20, derandomize=True, print_blob=True
)
hypothesis.settings.load_profile("jaxmb")


@pytest.fixture(scope="session")
def arm():
    return jaxmb.models.series_parallel_3dof()


@pytest.fixture(scope="session")
def arm_full():
    return jaxmb.models.series_parallel_3dof(full=True)


@pytest.fixture(autouse=True)
def _free_compiled_code_when_crowded():
    """Drop JAX's compiled programs after any test that leaves the process above 40 % of the
    kernel's per-process limit on memory mappings (vm.max_map_count, 65530 by default): XLA's
    CPU JIT maps every kernel of every program on its own (a crane closed loop holds about
    2,000 mappings), and a worker past the limit dies (xdist: "node down"). One module's
    commands (machine-file simulate, Monte Carlo and tune) reached 49,000 mappings, one whole
    hydraulic `jaxmb identify` 36,000, and the commands relieve themselves at half the limit
    between their stages. Below that nothing is dropped, not even between modules, so later
    tests and modules reuse what earlier ones compiled (the eager operations' programs at
    every shape among them: clearing them at every module's end cost a tenth of the light
    modules' time)."""
    yield
    before = compile_cache.mapped_regions()
    if compile_cache.relieve(0.4) and _LOG_PATH is not None:  # each drop costs recompiles
        _log_row("relieve", f"maps {before} -> {compile_cache.mapped_regions()}", 0.0)


# The modules that take longest (measured on the 2-core CI machine), in that order. They are
# collected first and `.ci/run` keeps the collection order (`--no-loadscope-reorder`; xdist
# otherwise orders modules by their number of tests), so the two workers end on short modules
# instead of one waiting minutes for the other's last heavy module.
_LONGEST_FIRST = (
    "test_identify_main.py",
    "test_mobile_identified.py",
    "test_machine_vdc.py",
    "test_valve_effects.py",
    "test_urdf_robots.py",
    "test_crane_tuning.py",
    "test_uncertainty_ranking.py",
    "test_montecarlo.py",
    "test_flexible_control.py",
    "test_recursions.py",
    "test_tuning.py",
    "test_crane.py",
    "test_output_error.py",
    "test_pinocchio.py",
    "test_simulate_states.py",
    "test_projection.py",
    "test_robust_control.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order within
