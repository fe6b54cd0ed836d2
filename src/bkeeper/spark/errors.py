"""Errors a Spark user must see first: the line that names the problem, not a traceback.

Spark wraps an exception from a Python data source as ``[PYTHON_DATA_SOURCE_ERROR] Failed to
... : <the Python traceback>``, so the first line a user reads is ``Traceback (most recent
call last):`` and bkeeper's message (``option maxEntriesPerSplit: 'abc' is not an
integer``) comes last, under a screenful of frames. PySpark's worker formats the exception
without its traceback when ``SPARK_HIDE_TRACEBACK`` is set in the worker's environment at
the moment it reports the error. :func:`plainly` sets it for bkeeper's own errors (each of
which is one line that says what is wrong) raised by methods that run on the driver's
planner worker, or in the worker of a write's commit, neither of which Spark reuses after a
failure, so no later error of anyone else loses its traceback. ``bkeeper -v``-style detail
stays available: the exception is re-raised unchanged, and other exceptions (bugs) keep their
tracebacks.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from bkeeper.common.errors import BKeeperError

__all__ = ["HIDE_TRACEBACK_ENV", "plainly"]

#: Read by ``pyspark.util.handle_worker_exception``.
HIDE_TRACEBACK_ENV = "SPARK_HIDE_TRACEBACK"

P = ParamSpec("P")
T = TypeVar("T")


def plainly(method: Callable[P, T]) -> Callable[P, T]:
    """Wrap a planner-side data source method so bkeeper's errors reach the user as their
    one-line message (see the module docstring)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except BKeeperError:
            # PySpark's worker reads this switch from its environment and from nowhere else
            # (pyspark.util.handle_worker_exception), at the moment it reports the error; the
            # one Spark setting that sets it hides every error's traceback, bugs' too.
            os.environ[HIDE_TRACEBACK_ENV] = "1"
            raise

    return wrapper
