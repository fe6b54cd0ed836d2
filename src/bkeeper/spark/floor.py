"""Spark's own floor for a Python data source: a source and sink that do no work, for
``bkeeper bench spark --cold-start`` to run beside the bkeeper source (docs/benchmarks.md,
"Spark cold start"). Same idea as ``tests/spark/bench_floor.py``, shipped so the bench can
use it.

Spark unpickles these classes in every Python process it starts for them, so this module
imports pyspark's data source API and nothing of bkeeper: what a cold query costs with it
is what Spark costs any Python source.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit

__all__ = ["FLOOR_NAME", "FloorSource"]

#: The floor's short name (``format("bkeeper-floor")``).
FLOOR_NAME = "bkeeper-floor"
#: Partitions of a batch read, and rows each partition yields (as ``--cold-start`` reads).
BATCH_PARTITIONS, BATCH_ROWS = 4, 25
#: Rows of each Arrow batch when the option ``rows`` is given.
ARROW_BATCH_ROWS = 10_000
#: Rows each micro-batch yields.
STREAM_ROWS = 20


class FloorSource(DataSource):
    """Batch reads of ready rows, a stream of ready rows, a stream sink that only counts."""

    @classmethod
    def name(cls) -> str:
        return FLOOR_NAME

    def schema(self) -> str:
        return "t double, payload binary"

    def reader(self, schema: Any) -> DataSourceReader:
        rows = self.options.get("rows")
        return _Rows(int(rows) if rows is not None else None)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802
        return _Ticks()

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        return _Counts()


class _Rows(DataSourceReader):
    """``BATCH_ROWS`` rows a partition, or with the option ``rows`` that many in all, in
    ready Arrow batches of up to ``ARROW_BATCH_ROWS`` (as many rows as a log holds: the JVM's
    cost of a first read of them, its JIT warming up, is Spark's)."""

    def __init__(self, rows: int | None) -> None:
        self.rows = rows

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(BATCH_PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if self.rows is None:
            now = time.time()
            for _ in range(BATCH_ROWS):
                yield (now, b"x" * 100)
            return
        import pyarrow as pa

        mine = self.rows // BATCH_PARTITIONS + (partition.value < self.rows % BATCH_PARTITIONS)
        for first in range(0, mine, ARROW_BATCH_ROWS):
            n = min(ARROW_BATCH_ROWS, mine - first)
            yield pa.RecordBatch.from_arrays(
                [pa.array([time.time()] * n), pa.array([b"x" * 100] * n, pa.binary())],
                names=["t", "payload"],
            )


class _Ticks(DataSourceStreamReader):
    def initialOffset(self) -> dict[str, int]:  # noqa: N802
        return {"ms": 0}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        return {"ms": int(time.time() * 1000)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(end["ms"])]

    def read(self, partition: InputPartition) -> Iterator[tuple[float, bytes]]:
        now = time.time()
        for _ in range(STREAM_ROWS):
            yield (now, b"x" * 100)


class _Counts(DataSourceStreamWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        pass
