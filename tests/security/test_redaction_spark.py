"""A ledger password given to the Spark data source as the ``password`` option is not shown
by Spark: not in its plans (``explain``, the query execution text the SQL tab shows), not in
its event log (what the history server shows: the properties, each query's plan, each job),
and a read with a wrong password fails without naming either password.

Spark shows no option of a Python data source in its plans; where it shows options or
properties, it redacts those whose key matches ``spark.redaction.regex`` (Spark 4's default:
``(?i)secret|password|token|access[.]?key|credential``)."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import (  # noqa: F401 (fixtures)
    shared_spark_cluster,
    spark_cluster,
    spark_jvm,
)

#: A setting whose key matches the redaction regex: its value must not reach the event log.
REDACTED_SETTING = "spark.bkeeper.test.password"


@pytest.fixture(scope="module")
def logged_spark(
    spark_jvm: None,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Any, Path, str]]:
    """A local session writing Spark's event log: (session, event log dir, the value of
    :data:`REDACTED_SETTING`)."""
    from pyspark import SparkContext

    from bkeeper.spark.session import local_session

    # A context this process made before (tests/spark's shared session) would be reused, and
    # its conf has no event log (CI, stop 51): stop it; the shared one is made again on its
    # next use.
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    events = tmp_path_factory.mktemp("spark-events")
    setting = "conf-" + os.urandom(9).hex()
    session = local_session(
        "local[2]",
        "bkeeper-redaction",
        {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"file://{events}",
            "spark.eventLog.compress": "false",  # searched as text
            REDACTED_SETTING: setting,
        },
        scratch_dir=tmp_path_factory.mktemp("spark-scratch"),
    )
    yield session, events, setting
    session.stop()


def _shown(df: Any) -> str:
    """What Spark shows of ``df``'s query: ``explain`` in two modes, and the query
    execution's text."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(extended=True)
        df.explain(mode="formatted")
    return out.getvalue() + str(df._jdf.queryExecution().toString())


def test_spark_shows_no_ledger_password(
    logged_spark: tuple[Any, Path, str],
    spark_cluster: Any,  # noqa: F811
) -> None:
    spark, events, setting = logged_spark
    uri = spark_cluster.uri
    password = "pw-" + os.urandom(9).hex()
    wrong = "pw-" + os.urandom(9).hex()
    rows = [(b"r%d" % i,) for i in range(20)]
    written = spark.createDataFrame(rows, "payload binary")
    written.write.format("bkeeper").option("metadata", uri).option("log", "secret-log").option(
        "password", password
    ).mode("append").save()

    def reader(given: str) -> Any:
        return (
            spark.read.format("bkeeper")
            .option("metadata", uri)
            .option("log", "secret-log")
            .option("password", given)
            .load()
        )

    df = reader(password)
    assert sorted(r.payload for r in df.collect()) == sorted(p for (p,) in rows)
    shown = _shown(df)
    assert "BatchScan bkeeper" in shown and password not in shown

    with pytest.raises(Exception) as failed:  # Spark wraps the error
        reader(wrong).collect()
    message = str(failed.value)
    assert "password" in message.lower(), message
    assert wrong not in message and password not in message

    spark.stop()  # the event log is complete once the application ends
    logs = [path for path in events.rglob("*") if path.is_file()]
    assert logs, f"no event log in {events}"
    text = "".join(path.read_text(errors="replace") for path in logs)
    assert "SparkListenerSQLExecutionStart" in text and "BatchScan bkeeper" in text
    assert REDACTED_SETTING in text and setting not in text  # Spark's redaction is on
    for secret in (password, wrong):
        assert secret not in text
