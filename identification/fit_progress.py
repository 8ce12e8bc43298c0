"""Where a long identification stands, for its progress bar: which choice is being fitted and
how many evaluations it has run.

An output-error identification spends minutes in stage 2 choosing its structure (pilots, one
fit per candidate, the final fit, the long refit), each fit a few dozen evaluations of the
residuals and their Jacobian. The fits report each evaluation here (`evaluation`), under the
labels the route sets around them (`fitting`); a caller that shows progress listens
(`reporting`) and moves its bar with every message. Context-local (`contextvars`), so the
fits deep in the route report without every signature carrying a callback, and a caller
that does not listen pays nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["evaluation", "fitting", "reporting"]

_listener: ContextVar[Callable[[str], None] | None] = ContextVar("listener", default=None)
_labels: ContextVar[tuple[str, ...]] = ContextVar("labels", default=())


@contextmanager
def reporting(listener: Callable[[str], None]) -> Iterator[None]:
    """Within the block, every evaluation of a fit calls ``listener`` with one line: the
    labels it runs under and its evaluation count and cost."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


@contextmanager
def fitting(label: str) -> Iterator[None]:
    """The fits within the block run under ``label`` (nested labels join with ", ")."""
    token = _labels.set((*_labels.get(), label))
    try:
        yield
    finally:
        _labels.reset(token)


def evaluation(count: int, cost: float) -> None:
    """A fit evaluated its residuals for the ``count``-th time, at ``cost``."""
    listener = _listener.get()
    if listener is not None:
        where = ", ".join(_labels.get()) or "fitting"
        listener(f"{where}: evaluation {count}, cost {cost:.6g}")
