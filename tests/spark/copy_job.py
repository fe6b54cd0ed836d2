"""A streaming copy from one log to another, run as its own process by test_spark_kill.py
(so that the test can kill -9 it mid-stream, driver and JVM together).

    python tests/spark/copy_job.py METADATA_URI SOURCE TARGET CHECKPOINT MODE

MODE: ``tail`` (run until killed, micro-batches of 100 records) or ``drain`` (AvailableNow:
copy what is there in micro-batches of 1,000, then exit).
"""

from __future__ import annotations

import sys

from bkeeper.spark.session import local_session


def main() -> None:
    uri, source, target, checkpoint, mode = sys.argv[1:6]
    spark = local_session("local[2]", "copy-job")
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
    query = writer.start()
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
