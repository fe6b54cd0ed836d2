"""``format("bkeeper")`` in a session that never registered the source, and the first line of
a bad option's error (issue 11, item 12). Before the fix Spark answered
``[DATA_SOURCE_NOT_FOUND]``, and an option error's first line was ``Traceback ...``."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from bkeeper.client import BookKeeper
from bkeeper.namedlog import NamedLogs


@pytest.fixture
def plain_spark(spark: Any) -> Any:
    """A new session of the shared context: its own SQL conf and data source registry
    (``register`` never ran in it; the shared session has the source registered), shown by
    :func:`test_a_new_session_does_not_see_the_shared_sessions_sources`."""
    return spark.newSession()


def test_a_new_session_does_not_see_the_shared_sessions_sources(spark, plain_spark) -> None:
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class Probe(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bkeeper_probe"

        def schema(self) -> str:
            return "x int"

        def reader(self, schema: Any) -> DataSourceReader:
            raise NotImplementedError

    spark.dataSource.register(Probe)
    assert spark.read.format("bkeeper_probe").load().columns == ["x"]
    with pytest.raises(Exception, match="DATA_SOURCE_NOT_FOUND"):
        plain_spark.read.format("bkeeper_probe").load()


async def _fill(uri: str, name: str, count: int) -> None:
    async with BookKeeper(uri) as bk:
        writer = await (await NamedLogs(bk).create(name)).open_writer()
        for i in range(count):
            await writer.append(b"record %d" % i)
        await writer.close()


def test_format_bkeeper_works_without_register(plain_spark, spark_cluster) -> None:
    uri = spark_cluster.uri
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _fill(uri, "short", 7)).result()
    frame = plain_spark.read.format("bkeeper").option("metadata", uri).option("log", "short")
    rows = frame.load().orderBy("entry").collect()
    assert [bytes(row.payload) for row in rows] == [b"record %d" % i for i in range(7)]


def test_a_bad_option_is_named_on_the_first_line(plain_spark, spark_cluster) -> None:
    reader = (
        plain_spark.read.format("bkeeper")
        .option("metadata", spark_cluster.uri)
        .option("log", "short")
        .option("maxEntriesPerSplit", "abc")
    )
    with pytest.raises(Exception) as caught:
        reader.load().collect()
    first = str(caught.value).splitlines()[0]
    assert first.endswith(
        "bkeeper.common.errors.ConfigError: option maxEntriesPerSplit: 'abc' is not an integer"
    ), first
