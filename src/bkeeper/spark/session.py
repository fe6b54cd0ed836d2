"""A quiet local SparkSession with the ``bkeeper`` data source registered (tests, examples,
``bkeeper bench spark``), and the end of the JVM behind it.

It applies the settings a local PySpark needs to work with this package (see docs/spark.md):
the Python workers run this interpreter (so they find bkeeper and pyarrow; see
``_workers_run_this_python`` for why that goes through the environment), the driver stays on
loopback (``spark.driver.host`` and ``spark.driver.bindAddress``), the UI and console
progress are off, log4j prints errors only, and local files (a stream's checkpoint) are
written without ``.crc`` files (``RAW_LOCAL_FILES``).

Scratch files stay in one directory: Spark's ``spark.local.dir`` (``blockmgr-*`` and
``spark-*``: shuffle and block files, pyspark's own files), the JVM's ``java.io.tmpdir``
(``spark-*``, ``artifacts-*``, unpacked native libraries) and the log4j2 file. It is the
caller's ``scratch_dir`` when given; otherwise one ``bkeeper-spark-*`` directory in the
system temp dir per Python process, removed when the process exits (after :func:`stop_jvm`,
so no JVM writes into it while it goes). Nothing is written at a fixed path.

PySpark starts one JVM per Python process, at the first session, and keeps it until the
process exits; its ``java.io.tmpdir`` and log4j2 file are those of that first session.
:func:`stop_jvm` ends it earlier (the next session starts a new one).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

from bkeeper.spark.source import register

__all__ = ["local_session", "stop_jvm"]

#: Where the driver listens and what it advertises: a local session stays on loopback.
LOOPBACK = "127.0.0.1"
#: Local files (a stream's checkpoint: its offset and commit logs, written twice per
#: micro-batch) through Hadoop's raw local file system: no ``.crc`` file beside each, which
#: took ~30 ms of each write on a loaded 2-core machine (docs/benchmarks.md, "Spark (issue
#: 23, continued)"). Checksums guard against a local disk corrupting a file, which the
#: checkpoint's JSON parsing detects anyway; ``conf`` may set them back.
RAW_LOCAL_FILES = {
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
}
#: How long :func:`stop_jvm` waits for the JVM to exit before it kills it.
JVM_STOP_TIMEOUT_S = 60.0

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""

_default_scratch: Path | None = None
_default_scratch_lock = threading.Lock()


def local_session(
    master: str = "local[2]",
    app_name: str = "bkeeper",
    conf: dict[str, str] | None = None,
    *,
    register_source: bool = True,
    scratch_dir: str | Path | None = None,
) -> Any:
    """A SparkSession on this machine with ``format("bkeeper")`` ready to use.

    Spark finds the source by its short name anyway when bkeeper is installed (the
    ``pyspark_bkeeper`` module); ``register_source`` also registers it explicitly, for
    code run from a source tree that is not installed. ``scratch_dir``: where Spark's scratch
    files go (see the module docstring); ``conf`` may still override any setting."""
    _workers_run_this_python()
    scratch = Path(scratch_dir) if scratch_dir is not None else _process_scratch()
    scratch.mkdir(parents=True, exist_ok=True)
    log4j = scratch / "log4j2.properties"
    log4j.write_text(_LOG4J)
    java_options = f"-Djava.io.tmpdir={scratch} -Dlog4j2.configurationFile=file:{log4j}"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.local.dir", str(scratch))
        .config("spark.driver.host", LOOPBACK)
        .config("spark.driver.bindAddress", LOOPBACK)
        .config("spark.driver.extraJavaOptions", java_options)
    )
    for key, value in RAW_LOCAL_FILES.items():
        builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if register_source:
        register(spark)
    return spark


def _workers_run_this_python() -> None:
    """Make Spark's Python workers run this interpreter (unless the caller chose another).

    The one place bkeeper's library writes the environment, because it is the only channel
    there is: the JVM picks the interpreter of the workers of a data source found by its
    short name from *its* environment (``PYSPARK_DRIVER_PYTHON``, then ``PYSPARK_PYTHON``:
    ``PythonUtils.defaultPythonExec``), one registered from Python (``register``) runs
    ``SparkContext.pythonExec`` (``PYSPARK_PYTHON``); no Spark setting reaches either, and
    ``spark.pyspark.python`` is read only by ``spark-submit`` of a Python file; PySpark
    starts the JVM with a copy of ``os.environ`` and takes no other environment for it, and
    PySpark's own workers for UDFs use ``PYSPARK_PYTHON`` read from ``os.environ``.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def stop_jvm(timeout_s: float = JVM_STOP_TIMEOUT_S) -> None:
    """Stop the SparkSession of this process, then the JVM PySpark started for it, and wait
    until it exited (killed after ``timeout_s``, then ``TimeoutExpired`` is raised). A no-op
    when no JVM runs."""
    gateway = SparkContext._gateway
    process: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    if gateway is None or process is None:
        return  # none, or one this process did not start (under spark-submit): not ours
    session = SparkSession._instantiatedSession
    if session is not None:
        session.stop()
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    SparkContext._gateway = None
    SparkContext._jvm = None
    # The JVM goes first (its gateway exits on end of input), so that each of py4j's
    # connections is at its end before py4j closes it: closing the stream of a connection
    # that a callback thread is reading (the JVM's calls to a Python StreamingQueryListener)
    # waits for that read, which never ends while the JVM lives (a CI run hung so).
    # py4j logs (on the root logger and its own) a traceback for each call that meets the
    # exited JVM (a thread's last call, its shutdown command): expected here, and noise.
    quiet = _FromPy4j()
    handlers = [h for h in [*logging.getLogger().handlers, logging.lastResort] if h is not None]
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        finally:
            gateway.shutdown()  # its connections and callback server, all at their end now
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)


class _FromPy4j(logging.Filter):
    """Drops the records py4j's own code logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


def _process_scratch() -> Path:
    """This process's default scratch directory, made on first use."""
    global _default_scratch
    with _default_scratch_lock:
        if _default_scratch is None:
            _default_scratch = Path(tempfile.mkdtemp(prefix="bkeeper-spark-"))
            atexit.register(_remove_scratch, _default_scratch)
        return _default_scratch


def _remove_scratch(path: Path) -> None:
    stop_jvm()
    shutil.rmtree(path)
