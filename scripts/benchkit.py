"""What the benchmark scripts share: pinning to cores before JAX starts, and best-of timing."""

import os
import time


def shipped_flags() -> None:
    """XLA's options as the commands set them (`jaxmb.cli.CPU_FLAGS`, the fusion emitters off),
    so that a benchmark's compile and run times are those a user's command gets. (Before
    2026-12-05 the scripts compiled with XLA's defaults: the crane's closed loop 24-27 s in
    `bench_crane.py` against about 12 s in `jaxmb simulate`.) Call before JAX's first
    computation: XLA reads the variable when its backend starts."""
    from jaxmb.cli import CPU_FLAGS

    flags = os.environ.get("XLA_FLAGS", "")
    for name, value in CPU_FLAGS.items():
        if name not in flags:
            flags = f"{flags} --{name}={value}".strip()
    os.environ["XLA_FLAGS"] = flags


def pin_cores(cores: int) -> None:
    """Run on the first ``cores`` cores; with one, XLA's CPU backend single-threaded too, so
    that jaxmb and its peer compare algorithms, not core counts; XLA's options as the
    commands set them (`shipped_flags`). Call before importing jax."""
    os.sched_setaffinity(0, set(range(cores)))
    shipped_flags()
    if cores == 1:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
        ).strip()


def best_of(fn, repeats: int) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``fn``, after one warm-up (compilation)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
