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

The same goes for the tasks that read and write records on executors (:func:`plainly_each`
for a read task's iterator, :func:`plainly` for a write task): PySpark's task worker
(``pyspark.worker.main``) reports a task's exception, then ends with ``sys.exit(-1)``, and
its daemon forks a fresh worker for the next task (a worker is reused only after a task
that succeeded), so the switch dies with the process that reported bkeeper's error.

Errors raised deep in the client (a bookie that refused a connection, a ZooKeeper that
gave no session) name a socket address and nothing of the query; :func:`explained` puts
them in context: what was being done, on which log and ledger, and the next step. What a
user then reads first, after Spark's fixed prefix, is one line::

    An exception was thrown from the Python worker:
    bkeeper.common.errors.BookieUnavailableError: log 'orders': cannot read ledger 12 ...
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from bkeeper.common.errors import (
    AuthenticationError,
    BKeeperError,
    BookieUnavailableError,
    CallTimeoutError,
    ConfigError,
    ConnectionLossError,
    LogDeletedError,
    LogNotFoundError,
    NotEnoughBookiesError,
    SessionExpiredError,
)

__all__ = [
    "HIDE_TRACEBACK_ENV",
    "check_workers_python",
    "explained",
    "next_step",
    "plainly",
    "plainly_each",
    "python_lacks",
]

#: Read by ``pyspark.util.handle_worker_exception``.
HIDE_TRACEBACK_ENV = "SPARK_HIDE_TRACEBACK"

P = ParamSpec("P")
T = TypeVar("T")


def _hide_traceback() -> None:
    """Have this PySpark worker report the error being raised without its traceback."""
    # PySpark's worker reads this switch from its environment and from nowhere else
    # (pyspark.util.handle_worker_exception), at the moment it reports the error; the one
    # Spark setting that sets it hides every error's traceback, bugs' too.
    os.environ[HIDE_TRACEBACK_ENV] = "1"


def plainly(method: Callable[P, T]) -> Callable[P, T]:
    """Wrap a planner-side data source method so bkeeper's errors reach the user as their
    one-line message (see the module docstring)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except BKeeperError as exc:
            _hide_traceback()
            deleted = _deleted_under_stream(exc, method.__name__, args)
            if deleted is not None:
                raise deleted from exc
            if next_step(exc) is None or getattr(exc, _EXPLAINED, False):
                raise
            raise explained(exc, _doing(method.__name__, args)) from exc

    return wrapper


def plainly_each(method: Callable[P, Iterator[T]]) -> Callable[P, Iterator[T]]:
    """:func:`plainly` for a method that returns an iterator (a read task's batches), whose
    errors are raised while Spark iterates, after the method returned."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        try:
            yield from method(*args, **kwargs)
        except BKeeperError:
            _hide_traceback()
            raise

    return wrapper


#: A stream's methods that take an offset (``start``, or ``end`` for ``commit``) first.
_OFFSET_METHODS = frozenset({"latestOffset", "partitions", "commit"})


def _deleted_under_stream(
    error: BKeeperError, name: str, args: tuple[Any, ...]
) -> LogDeletedError | None:
    """A log a stream's offset names that is not found any more was deleted since: say so
    (the planner only sees that no log has that name)."""
    if name not in _OFFSET_METHODS or len(args) < 2 or not isinstance(args[1], dict):
        return None
    if not isinstance(error, LogNotFoundError) or isinstance(error, LogDeletedError):
        return None
    gone = [log for log in args[1] if isinstance(log, str) and repr(log) in str(error)]
    if not gone:
        return None
    return LogDeletedError(
        f"log {gone[0]!r} was deleted while this stream read it (its offsets name it): its "
        "records are gone; stop the query, and start a new one (a new checkpoint) once the "
        "log is created again"
    )


#: Marks an error :func:`explained` made (it is not explained twice).
_EXPLAINED = "_bkeeper_explained"


def _doing(name: str, args: tuple[Any, ...]) -> str:
    """What a data source method ``name`` was doing, for :func:`explained`: its logs, when
    its object's options name them."""
    options = getattr(args[0], "options", None) if args else None
    logs = getattr(options, "logs", None) or [getattr(options, "log", None)]
    named = ", ".join(repr(log) for log in logs if isinstance(log, str))
    doing = _DOING.get(name, name)
    return f"log {named}: {doing}" if named else doing


#: What each data source method does, in a user's words.
_DOING = {
    "schema": "checking the options",
    "reader": "checking the options",
    "partitions": "planning the read",
    "initialOffset": "finding where the stream starts",
    "latestOffset": "finding the stream's next records",
    "commit": "committing",
    "writer": "checking the sink's options",
    "streamWriter": "checking the sink's options",
}


#: The next step for errors of the client that name no query (first match wins).
_NEXT_STEPS: tuple[tuple[type[BKeeperError], str], ...] = (
    (
        AuthenticationError,
        "check the client's credentials (the token options) against the bookies' "
        "authentication settings",
    ),
    (
        BookieUnavailableError,
        "are the ledger's bookies running, and reachable from this host? `bkeeper shell "
        "listbookies` lists the live ones",
    ),
    (
        NotEnoughBookiesError,
        "start more bookies or lower the ensemble size; `bkeeper shell listbookies` lists "
        "the live ones",
    ),
    (
        CallTimeoutError,
        "are the bookies and ZooKeeper running, and reachable from this host? "
        "`bkeeper shell listbookies`",
    ),
    (
        ConnectionLossError,
        "check that ZooKeeper runs and is reachable from this host (the metadata option)",
    ),
    (SessionExpiredError, "is ZooKeeper overloaded or was this process paused? try again"),
)


def next_step(error: BKeeperError) -> str | None:
    """What a user should do about ``error`` (``None``: its message says it already)."""
    for kind, step in _NEXT_STEPS:
        if isinstance(error, kind):
            return step
    return None


def explained(error: BKeeperError, doing: str) -> BKeeperError:
    """``error`` (of the same class when its constructor takes one message) saying first
    what was being ``done`` (``log 'a': cannot read ledger 3 (entries 0..99)``) and last
    the next step; raise it ``from`` the original."""
    message = f"{doing}: {error}"
    step = next_step(error)
    if step is not None:
        message += f"; {step}"
    try:
        made = type(error)(message)
    except TypeError:  # a class whose constructor wants more than a message
        made = BKeeperError(message)
    made.retriable = error.retriable
    setattr(made, _EXPLAINED, True)
    return made


#: What Spark's Python workers need for bkeeper's tasks (PySpark itself they get from Spark).
WORKER_MODULES = ("pyarrow", "bkeeper")
#: Longest the check of an interpreter may take.
PYTHON_CHECK_TIMEOUT_S = 60.0
_FIND = (
    "import importlib.util as u, sys; "
    "print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))"
)
_python_checked: dict[str, str | None] = {}


def python_lacks(executable: str) -> str | None:
    """What ``executable`` lacks to run bkeeper's tasks (``None``: nothing): the modules
    of ``WORKER_MODULES`` it cannot find, or that it does not run. Looked up (not imported)
    once per interpreter and process."""
    if executable in _python_checked:
        return _python_checked[executable]
    try:
        found = subprocess.run(
            [executable, "-c", _FIND, *WORKER_MODULES],
            capture_output=True,
            text=True,
            timeout=PYTHON_CHECK_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        lacks: str | None = f"does not run ({exc})"
    else:
        missing = found.stdout.split()
        if found.returncode != 0:
            lacks = f"does not run (exit status {found.returncode})"
        elif missing:
            lacks = f"has no module {' nor '.join(repr(m) for m in missing)}"
        else:
            lacks = None
    _python_checked[executable] = lacks
    return lacks


def check_workers_python(spark: Any) -> None:
    """Refuse, saying which interpreter and how to point Spark at the right one, a session
    whose Python workers cannot run bkeeper: PySpark's worker imports pyarrow and unpickles
    bkeeper's classes before any code of bkeeper runs there, so the worker's own error
    (``No module named 'pyarrow'``, under a traceback) is all a user would read.

    Only a ``local`` master is checked: its workers run on this machine, with the
    interpreter that ``PYSPARK_PYTHON`` (or ``spark.pyspark.python``) names. A cluster's
    executors run on other hosts, where this process cannot look (docs/spark.md, "Running
    on a cluster", says what they need)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return  # Spark Connect: the workers are the server's, out of this process's sight
    master = str(spark.sparkContext.master)
    if not master.startswith("local"):
        return
    # What a source registered from Python runs: the SparkContext's pythonExec, taken from
    # PYSPARK_PYTHON when the context started (spark-submit sets that variable from
    # spark.pyspark.python), else python3.
    executable = str(spark.sparkContext.pythonExec)
    setting = "PYSPARK_PYTHON"
    configured = spark.conf.get("spark.pyspark.python", None)
    if configured and str(configured) == executable:
        setting = "spark.pyspark.python"
    elif executable == "python3":
        setting = "Spark's default, as neither PYSPARK_PYTHON nor spark.pyspark.python is set"
    lacks = python_lacks(executable)
    if lacks is None:
        return
    raise ConfigError(
        f"Spark's Python workers run {executable} ({setting}), which {lacks}: bkeeper's "
        f"reads and writes run there. Point Spark at an interpreter with bkeeper installed: "
        f"PYSPARK_PYTHON={sys.executable} (spark.pyspark.python under spark-submit), or on "
        'a cluster a packed venv shipped with --archives (docs/spark.md, "Running on a '
        'cluster")'
    )
