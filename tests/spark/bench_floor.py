"""What Spark itself costs a Python data source, with no bkeeper in it (docs/benchmarks.md,
"Spark: the Python data source's floor"): the figures issue 23's latency and scan targets
are held against.

    python -m tests.spark.bench_floor latency --seconds 20   # micro-batches, trigger 0
    python -m tests.spark.bench_floor cold                   # a new JVM's first batch
    python -m tests.spark.bench_floor read --runs 4          # rows/s against Parquet

from the repository root. ``latency``: a Python stream source whose ``read`` yields 20
ready rows and a Python sink whose ``write`` only counts them (``py-py``), beside the same
source into Spark's ``noop`` sink and Spark's ``rate`` source into ``noop`` (no Python at
all); the median of each progress phase over the batches after the fifth. ``cold``: a new
SparkSession (made before the clock starts), then the time from ``start()`` of the py-py
stream to its first batch with rows. ``read``: a Python batch source yielding ready Arrow
batches of 10,000 rows (the bkeeper schema's 7 columns, or only ``payload`` when the
schema given names only it) against Parquet holding the same payloads, the query of
``bkeeper bench spark`` (``count(*)``, ``sum(length(payload))``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

#: The bkeeper read schema (``bkeeper.spark.options.spark_schema``), as the floor reads it.
SCHEMA = (
    "log string, ledger bigint, entry bigint, batch_index int, timestamp timestamp, "
    "key binary, payload binary"
)
ROWS, PARTITIONS, BATCH_ROWS, PAYLOAD_BYTES = 1_000_000, 4, 10_000, 100


class Floor(DataSource):
    """A source and sink that do nothing Spark does not make them do."""

    @classmethod
    def name(cls) -> str:
        return "floor"

    def schema(self) -> str:
        return SCHEMA if self.options.get("kind") == "batch" else "t double"

    def reader(self, schema: Any) -> DataSourceReader:
        return ReadyBatches(len(schema.fields))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return Ticks()

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return Counts()


class Ticks(DataSourceStreamReader):
    def initialOffset(self) -> dict[str, int]:
        return {"ms": 0}

    def latestOffset(self) -> dict[str, int]:
        return {"ms": int(time.time() * 1000)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(end["ms"])]

    def read(self, partition: InputPartition) -> Iterator[tuple[float]]:
        now = time.time()
        for _ in range(20):
            yield (now,)


class Counts(DataSourceStreamWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()


class ReadyBatches(DataSourceReader):
    def __init__(self, columns: int) -> None:
        self.columns = columns

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        batch = arrow_batch(self.columns == 1)
        for _ in range(ROWS // PARTITIONS // BATCH_ROWS):
            yield batch


def arrow_batch(payload_only: bool) -> Any:
    import numpy as np
    import pyarrow as pa

    n = BATCH_ROWS
    payload = pa.array([b"x" * PAYLOAD_BYTES] * n, pa.binary())
    if payload_only:
        return pa.RecordBatch.from_arrays([payload], names=["payload"])
    columns = [
        pa.array(["events"] * n),
        pa.array(np.full(n, 3, np.int64)),
        pa.array(np.arange(n, dtype=np.int64)),
        pa.array(np.zeros(n, np.int32)),
        pa.array(np.zeros(n, np.int64)).cast(pa.timestamp("us", tz="UTC")),
        pa.nulls(n, pa.binary()),
        payload,
    ]
    return pa.RecordBatch.from_arrays(columns, names=[c.split()[0] for c in SCHEMA.split(", ")])


def session() -> Any:
    """The session ``bkeeper bench spark`` uses (``local_session``), with the floor's source."""
    from bkeeper.spark.session import local_session

    spark = local_session("local[2]", "bench-floor", register_source=False)
    spark.dataSource.register(Floor)
    return spark


def stream(spark: Any, source: str, sink: str) -> Any:
    reader = spark.readStream.format(source)
    frame = reader.option("rowsPerSecond", 2000).load() if source == "rate" else reader.load()
    if source == "rate":
        frame = frame.selectExpr("cast(value as double) t")
    return (
        frame.writeStream.format(sink)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-floor-"))
        .trigger(processingTime="0 seconds")
        .start()
    )


def latency(seconds: float) -> None:
    spark = session()
    for name, source, sink in [
        ("python source -> python sink", "floor", "floor"),
        ("python source -> noop", "floor", "noop"),
        ("rate -> noop (no Python)", "rate", "noop"),
    ]:
        query = stream(spark, source, sink)
        time.sleep(seconds)
        progress = query.recentProgress[5:]
        query.stop()
        phases: dict[str, list[int]] = {}
        for p in progress:
            for phase, ms in p["durationMs"].items():
                phases.setdefault(phase, []).append(ms)
        medians = ", ".join(f"{k} {statistics.median(v):g}" for k, v in sorted(phases.items()))
        print(f"{name}: {len(progress)} batches; median ms: {medians}", flush=True)
    spark.stop()


def cold() -> None:
    spark = session()
    started = time.monotonic()
    query = stream(spark, "floor", "floor")
    while not [p for p in query.recentProgress if p["numInputRows"]]:
        time.sleep(0.01)
    print(f"cold first batch: {time.monotonic() - started:.2f} s", flush=True)
    query.stop()
    spark.stop()


def read(runs: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    spark = session()
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as scratch:
        table = pa.Table.from_batches([arrow_batch(True)] * (ROWS // BATCH_ROWS))
        pq.write_table(table, str(Path(scratch) / "payloads.parquet"))
        frames = [
            ("python source, 7 columns", spark.read.format("floor").option("kind", "batch")),
            (
                "python source, payload only",
                spark.read.format("floor").option("kind", "batch").schema("payload binary"),
            ),
        ]
        for run in range(1, runs + 1):
            for name, frame in [
                *((n, r.load()) for n, r in frames),
                ("parquet", spark.read.parquet(scratch)),
            ]:
                started = time.perf_counter()
                totals = frame.selectExpr("count(*) AS n", "sum(length(payload)) AS b").first()
                rate = totals.n / (time.perf_counter() - started)
                print(f"run {run}, {name}: {rate:,.0f} rows/s", flush=True)
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["latency", "cold", "read"])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    if args.what == "latency":
        latency(args.seconds)
    elif args.what == "cold":
        cold()
    else:
        read(args.runs)


if __name__ == "__main__":
    main()
