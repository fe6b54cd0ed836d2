"""Record batches (issue 18) through the data source in real Spark (local[2]) against real
bookies: the sink packs rows into record batches (and can compress them or write one record
per entry), reads give each record its own row and position (ledger, entry, index), exact
positions inside a batch start and end batch reads and streams, and a stream's offsets carry
the index."""

from __future__ import annotations

import json
import time

from bkeeper.namedlog import Position
from tests.spark.test_spark import read_log_positions, source
from tests.spark.test_spark_options import log_ledgers, write


def _frame(spark, payloads: list[bytes], keys: bool = False):
    rows = [(p, b"k%d" % i if keys else None) for i, p in enumerate(payloads)]
    return spark.createDataFrame(rows, "payload binary, key binary").coalesce(1)


def test_the_sink_packs_rows_into_record_batches(spark, spark_cluster):
    uri = spark_cluster.uri
    payloads = [b"b%03d" % i for i in range(95)]
    write(_frame(spark, payloads, keys=True), uri, log="packed", batchMaxRecords=10)
    found = read_log_positions(uri, "packed")
    assert [p for p, _ in found] == payloads
    (ledger,) = log_ledgers(uri, "packed")
    # one task: 9 batches of 10 and one of 5, each record at its own index
    assert [pos for _, pos in found] == [Position(ledger, i // 10, i % 10) for i in range(95)]
    rows = source(spark, uri, log="packed").orderBy("ledger", "entry", "batch_index").collect()
    assert [r.payload for r in rows] == payloads
    assert [r.key for r in rows] == [b"k%d" % i for i in range(95)]
    assert [(r.entry, r.batch_index) for r in rows] == [(i // 10, i % 10) for i in range(95)]

    # batchMaxBytes: envelopes of 14 bytes (10 of head, 4 of payload): 3 to a 50-byte batch
    write(_frame(spark, payloads[:7]), uri, log="by-bytes", batchMaxBytes=50)
    assert [pos.entry_id for _, pos in read_log_positions(uri, "by-bytes")] == [0, 0, 0, 1, 1, 1, 2]
    write(_frame(spark, payloads[:3]), uri, log="zstd", compression="zstd")
    write(_frame(spark, payloads[:3]), uri, log="singles", batching="false")
    assert [pos for _, pos in read_log_positions(uri, "singles")][-1].entry_id == 2
    for log in ("zstd", "singles"):
        assert [r.payload for r in source(spark, uri, log=log).collect()] == payloads[:3]


def test_positions_inside_a_batch_start_and_end_a_batch_read(spark, spark_cluster):
    uri = spark_cluster.uri
    payloads = [b"p%03d" % i for i in range(40)]
    write(_frame(spark, payloads), uri, log="inside", batchMaxRecords=10)
    (ledger,) = log_ledgers(uri, "inside")

    def between(start: Position, end: Position) -> list[bytes]:
        def at(p: Position) -> str:
            return json.dumps({"inside": {"ledger": p.ledger_id, "entry": p.entry_id,
                                          "index": p.index}})  # fmt: skip

        frame = source(spark, uri, log="inside", startingPosition=at(start),
                       endingPosition=at(end), maxEntriesPerSplit=1)  # fmt: skip
        return [r.payload for r in frame.orderBy("entry", "batch_index").collect()]

    assert between(Position(ledger, 0, 7), Position(ledger, 2, 4)) == payloads[7:24]
    assert between(Position(ledger, 1, 2), Position(ledger, 1, 5)) == payloads[12:15]
    assert between(Position(ledger, 3, 9), Position(ledger, 4, 0)) == payloads[39:40]
    assert between(Position(ledger, 2, 10), Position(ledger, 3, 1)) == payloads[30:31]


def test_a_stream_resumes_inside_a_batch_and_counts_entries_per_trigger(
    spark, spark_cluster, tmp_path
):
    uri = spark_cluster.uri
    payloads = [b"s%03d" % i for i in range(50)]
    write(_frame(spark, payloads), uri, log="batched-src", batchMaxRecords=10)
    (ledger,) = log_ledgers(uri, "batched-src")
    start = json.dumps({"batched-src": {"ledger": ledger, "entry": 0, "index": 5}})
    query = (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "batched-src")
        .option("startingPosition", start)
        .option("maxEntriesPerTrigger", 2)
        .load()
        .writeStream.format("memory")
        .queryName("batched_copy")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    rows = spark.table("batched_copy").orderBy("entry", "batch_index").collect()
    assert [r.payload for r in rows] == payloads[5:]
    assert [(r.entry, r.batch_index) for r in rows][:2] == [(0, 5), (0, 6)]
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    # at most 2 entries (20 records) a trigger: 5 + 10, 20, 10
    assert [p["numInputRows"] for p in batches] == [15, 20, 10]
    ends = [json.loads(p["sources"][0]["endOffset"]) for p in batches]
    assert ends == [{"batched-src": {"ledger": ledger, "entry": e}} for e in (2, 4, 5)]


def test_a_stream_copy_of_a_batched_log_writes_batches(spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    payloads = [b"c%03d" % i for i in range(30)]
    write(_frame(spark, payloads), uri, log="copy-src", batchMaxRecords=7)
    query = (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "copy-src")
        .option("startingPosition", "earliest")
        .load()
        .select("payload")
        .writeStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "copy-dst")
        .option("batchMaxRecords", 4)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    deadline = time.monotonic() + 120
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    assert time.monotonic() < deadline
    found = read_log_positions(uri, "copy-dst")
    assert sorted(p for p, _ in found) == payloads
    assert max(pos.index for _, pos in found) == 3, "batches of at most 4 records"
    # local_session writes the checkpoint through the raw local file system: no .crc files
    written = {p.relative_to(tmp_path / "ck").as_posix() for p in (tmp_path / "ck").rglob("*")}
    assert {"offsets/0", "commits/0"} <= written
    assert not [name for name in written if name.endswith(".crc")], sorted(written)


def test_a_20_mib_record_goes_through_the_sink_and_reads_once_whatever_the_splits(
    spark, spark_cluster
):
    """A row larger than a chunk (4 MiB) is written by the sink as chunk entries; every read
    gives it once, at its last chunk's position, when splits of one or two entries cut it (the
    split holding its last chunk reads the others across its start)."""
    from tests.e2e.test_large_records import payload_of

    uri = spark_cluster.uri
    mib = 1024 * 1024
    payloads = [b"small-0", payload_of("big", 20 * mib), b"small-2", payload_of("mid", 9 * mib)]
    write(_frame(spark, payloads), uri, log="large")
    (ledger,) = log_ledgers(uri, "large")
    # 20 MiB and a 10-byte head: 6 chunks (entries 1..6); 9 MiB: 3 (entries 8..10)
    expected = [(0, 0), (6, 0), (7, 0), (10, 0)]
    for split in (1, 2, 100):
        rows = source(spark, uri, log="large", maxEntriesPerSplit=split).collect()
        rows.sort(key=lambda r: (r.entry, r.batch_index))
        assert [r.payload for r in rows] == payloads, split
        assert [(r.entry, r.batch_index) for r in rows] == expected
        assert {r.ledger for r in rows} == {ledger}
    # A read starting inside the 20 MiB record (its third chunk) gets it whole.
    inside = json.dumps({"large": {"ledger": ledger, "entry": 3}})
    rows = source(spark, uri, log="large", startingPosition=inside).collect()
    assert sorted(r.entry for r in rows) == [6, 7, 10]


def test_a_stream_whose_triggers_cut_large_records_gives_each_once(spark, spark_cluster, tmp_path):
    """maxEntriesPerTrigger=2 ends triggers inside 3-chunk records: each record comes once, in
    the trigger holding its last chunk, and the offsets stay exact entry positions."""
    from tests.e2e.test_large_records import payload_of

    uri = spark_cluster.uri
    big = [payload_of("one", 9 * 1024 * 1024), payload_of("two", 9 * 1024 * 1024)]
    payloads = [b"s0", big[0], b"s2", big[1], b"s4"]
    write(_frame(spark, payloads), uri, log="large-src")
    (ledger,) = log_ledgers(uri, "large-src")
    query = (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "large-src")
        .option("startingPosition", "earliest")
        .option("maxEntriesPerTrigger", 2)
        .load()
        .writeStream.format("memory")
        .queryName("large_copy")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    rows = spark.table("large_copy").orderBy("entry").collect()
    # entries: s0, chunks 1-3, s2, chunks 5-7, s4
    assert [r.payload for r in rows] == payloads
    assert [(r.ledger, r.entry) for r in rows] == [(ledger, e) for e in (0, 3, 4, 7, 8)]
    batches = [p for p in query.recentProgress if p["sources"][0]["endOffset"]]
    ends = [json.loads(p["sources"][0]["endOffset"])["large-src"]["entry"] for p in batches]
    assert ends[-1] == 9 and all(b - a <= 2 for a, b in zip([0, *ends], ends, strict=False))
    assert sum(p["numInputRows"] for p in batches) == 5
