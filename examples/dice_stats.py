"""How often each die value came up in the Dice log (a batch read of a bkeeper log).

bkeeper sandbox &                 # a local cluster
bkeeper dice                      # a few seconds of rolls; Ctrl-C
python examples/dice_stats.py --metadata zk://127.0.0.1:2181/ledgers
"""

from __future__ import annotations

import argparse
from typing import Any


def dice_stats(spark: Any, metadata: str, log: str = "dice") -> list[tuple[int, int]]:
    """(value, count) for every die value in the log, by value."""
    rolls = spark.read.format("bkeeper").option("metadata", metadata).option("log", log).load()
    values = rolls.selectExpr("CAST(CAST(payload AS STRING) AS INT) AS value")
    stats = values.groupBy("value").count().orderBy("value")
    return [(row["value"], row["count"]) for row in stats.collect()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", default="zk://127.0.0.1:2181/ledgers")
    parser.add_argument("--log", default="dice")
    args = parser.parse_args()

    from bkeeper.spark.session import local_session

    spark = local_session("local[2]", "dice-stats")
    try:
        rows = dice_stats(spark, args.metadata, args.log)
        total = sum(count for _, count in rows) or 1
        print(f"{'value':>5} {'count':>8} {'share':>7}")
        for value, count in rows:
            print(f"{value:>5} {count:>8} {count / total:>7.1%}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
