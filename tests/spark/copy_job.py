"""A streaming copy from one log to another, run as its own process by test_spark_kill.py
(so that the test can kill -9 it mid-stream, driver and JVM together).

    python tests/spark/copy_job.py METADATA_URI SOURCE TARGET CHECKPOINT MODE

MODE: ``tail`` (run until killed, micro-batches of 100 records) or ``drain`` (AvailableNow:
copy what is there in micro-batches of 1,000, then exit). :func:`copy_query` is the query,
which the test also starts in its own session to drain what the killed job left.
"""

from __future__ import annotations

import sys
from typing import Any

from bkeeper.spark.session import local_session


def copy_query(spark: Any, uri: str, source: str, target: str, checkpoint: str, mode: str) -> Any:
    """The copy, started: ``source`` to ``target`` through ``checkpoint``."""
    reader = (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", source)
        .option("startingPosition", "earliest")
        .option("maxEntriesPerTrigger", 100 if mode == "tail" else 1_000)
        .load()
        .select("payload", "key")
    )
    writer = (
        reader.writeStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", target)
        .option("checkpointLocation", checkpoint)
    )
    writer = writer.trigger(availableNow=True) if mode == "drain" else writer
    return writer.start()


def main() -> None:
    uri, source, target, checkpoint, mode = sys.argv[1:6]
    spark = local_session("local[2]", "copy-job")
    query = copy_query(spark, uri, source, target, checkpoint, mode)
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
