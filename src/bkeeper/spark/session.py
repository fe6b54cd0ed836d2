"""A quiet local SparkSession with the ``bkeeper`` data source registered (tests, examples,
``bkeeper bench spark``).

It applies the settings a local PySpark needs to work with this package (see docs/spark.md):
the Python workers run this interpreter (so they find bkeeper and pyarrow), the driver stays
on loopback, the UI and console progress are off, and log4j prints errors only.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bkeeper.spark.source import register

__all__ = ["local_session"]

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


def local_session(
    master: str = "local[2]",
    app_name: str = "bkeeper",
    conf: dict[str, str] | None = None,
    *,
    register_source: bool = True,
) -> Any:
    """A SparkSession on this machine with ``format("bkeeper")`` ready to use.

    Spark finds the source by its short name anyway when bkeeper is installed (the
    ``pyspark_bkeeper`` module); ``register_source`` also registers it explicitly, for
    code run from a source tree that is not installed."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = Path(tempfile.gettempdir()) / "bkeeper-spark-log4j2.properties"
    if not log4j.exists() or log4j.read_text() != _LOG4J:
        log4j.write_text(_LOG4J)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if register_source:
        register(spark)
    return spark
