"""What the benchmark scripts share: pinning to cores before JAX starts, and best-of timing."""

import os
import time


def pin_cores(cores: int) -> None:
    """Run on the first ``cores`` cores; with one, XLA's CPU backend single-threaded too, so
    that jaxmb and its peer compare algorithms, not core counts. Call before importing jax."""
    os.sched_setaffinity(0, set(range(cores)))
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
