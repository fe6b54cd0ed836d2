"""Stream a bkeeper log into Parquet files and into another bkeeper log.

Both queries read the source log from its first record and keep tailing it; each has its
own checkpoint, so a restart resumes where it stopped. The copy into the other log is
exactly once (a replayed micro-batch is recognised and not appended twice); Parquet's file
sink is exactly once too. ``--available-now`` copies what is there and stops.

    python examples/stream_copy.py --metadata zk://127.0.0.1:2181/ledgers \\
        --source dice --target dice-copy --parquet /tmp/dice-parquet --checkpoints /tmp/ck
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def start_copies(
    spark: Any,
    metadata: str,
    source: str,
    target: str,
    parquet: str,
    checkpoints: str,
    *,
    available_now: bool = False,
    max_entries_per_trigger: int = 100_000,
) -> list[Any]:
    """Start the two streaming queries; returns them (running)."""
    records = (
        spark.readStream.format("bkeeper")
        .option("metadata", metadata)
        .option("log", source)
        .option("startingPosition", "earliest")
        .option("maxEntriesPerTrigger", max_entries_per_trigger)
        .load()
    )

    def trigger(writer: Any) -> Any:
        if available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime="1 second")

    to_parquet = trigger(
        records.writeStream.format("parquet")
        .option("path", parquet)
        .option("checkpointLocation", str(Path(checkpoints) / "parquet"))
    ).start()
    to_log = trigger(
        records.select("payload", "key")
        .writeStream.format("bkeeper")
        .option("metadata", metadata)
        .option("log", target)
        .option("checkpointLocation", str(Path(checkpoints) / "log"))
    ).start()
    return [to_parquet, to_log]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", default="zk://127.0.0.1:2181/ledgers")
    parser.add_argument("--source", default="dice")
    parser.add_argument("--target", default="dice-copy")
    parser.add_argument("--parquet", default="./dice-parquet")
    parser.add_argument("--checkpoints", default="./dice-checkpoints")
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args()

    from bkeeper.spark.session import local_session

    spark = local_session("local[2]", "stream-copy")
    try:
        queries = start_copies(
            spark, args.metadata, args.source, args.target, args.parquet, args.checkpoints,
            available_now=args.available_now,
        )  # fmt: skip
        for query in queries:
            query.awaitTermination()
    except KeyboardInterrupt:
        pass
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
