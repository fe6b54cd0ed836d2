"""Lag without Spark: a checkpoint's last committed offsets, and entries and bytes behind on
the in-memory cluster (``bkeeper.spark.lag``)."""

from __future__ import annotations

import json

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import LogConfig, NamedLogs, Position
from bkeeper.spark.lag import LagReport, checkpoint_offsets, exact_offset, measure
from bkeeper.spark.log_view import LogView
from bkeeper.testing.cluster import MemoryCluster

FAST = ClientConfig(add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200)


def test_checkpoint_offsets_are_the_last_committed_batch(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})
    for batch, entry in ((0, 5), (1, 9), (2, 12)):
        source = json.dumps({"a": {"ledger": 3, "entry": entry}})
        (tmp_path / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{source}\n")
    for batch in (0, 1):  # batch 2 planned, not committed
        (tmp_path / "commits" / str(batch)).write_text("v1\n{}\n")
    assert checkpoint_offsets(tmp_path) == (1, {"a": Position(3, 9)})
    with pytest.raises(ConfigError, match="no offsets/"):
        checkpoint_offsets(tmp_path / "commits")
    assert exact_offset('{"a": "earliest"}') is None
    assert exact_offset("not json") is None


async def test_entries_and_bytes_behind_across_ledgers():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), LogConfig(roll_bytes=500))
        await logs.create("a")
        writer = await logs.log("a").open_writer()
        positions = [await writer.append(b"x" * 90) for _ in range(12)]  # 100-byte records
        await writer.close()
        assert len({p.ledger_id for p in positions}) > 1, "the log rolled"
        view = LogView(logs)
        lag = await measure(view, {"a": positions[3]})
        assert (lag["a"].entries_behind, lag["a"].bytes_behind) == (9, 900)
        assert (lag["a"].records_behind, lag["a"].records_exact) == (9, True), "1 per entry"
        assert lag["a"].head == Position(positions[-1].ledger_id, positions[-1].entry_id + 1)
        whole = (await measure(view, {"a": positions[0]}))["a"]
        report = LagReport(4, {"a": lag["a"], "from-start": whole})
        assert report.entries_behind_total == 21 and report.bytes_behind_total == 2100
        assert (report.entries_behind_min, report.entries_behind_max) == (9, 12)
        assert report.to_json()["entries_behind"] == {"total": 21, "min": 9, "avg": 10.5, "max": 12}
