"""A named log's writer with a bookie lost and no spare (docs/client.md, "No spare: degraded
writes"): its ledger goes on degraded, and a roll that cannot create a new ledger (too few
bookies) does not stop it: it writes on to the current ledger and rolls once a bookie is back.
Before, the first roll after the loss failed the append with ``NotEnoughBookiesError``."""

from __future__ import annotations

import logging

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.namedlog.writer import ROLL_RETRY_PAUSE_S
from bkeeper.testing.clock import FakeClock
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from tests.client.test_degraded_scenarios import add_bookie, until
from tests.client.test_scenarios_more import bounded

FAST = ClientConfig(
    add_timeout_ms=500,
    read_timeout_ms=500,
    long_poll_timeout_ms=200,
    degraded_retry_interval_ms=100,
)


@on_virtual_time
async def test_a_roll_with_too_few_bookies_writes_on_to_the_degraded_ledger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "bkeeper.namedlog.writer")
    clock = FakeClock()
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), LogConfig(roll_bytes=200), clock=clock)
        named = await logs.create("log")
        writer = await named.open_writer()
        records = [b"record-%03d-" % i + b"x" * 40 for i in range(40)]
        first = await bounded(writer.append(records[0]))
        await cluster.stop_bookie(cluster.bookie(writer._handle.ensemble[0]))
        positions = [first] + [await bounded(writer.append(r)) for r in records[1:20]]
        assert {p.ledger_id for p in positions} == {first.ledger_id}, "no roll: no bookies"
        warnings = [r for r in caplog.records if "cannot roll" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
        await add_bookie(cluster)
        await until(lambda: not writer._handle.degraded, "the ledger replaced its bookie")
        positions.append(await bounded(writer.append(records[20])))
        assert positions[-1].ledger_id == first.ledger_id, "the roll waits for its pause"
        clock.advance(ROLL_RETRY_PAUSE_S)
        positions += [await bounded(writer.append(r)) for r in records[21:]]
        assert positions[-1].ledger_id > first.ledger_id, "rolled once the pause is over"
        assert sum("after 1 tries" in r.getMessage() for r in caplog.records) == 1
        await bounded(writer.close())
        reader = await named.open_reader()
        got = [await bounded(reader.next(5)) for _ in records]
        assert [r.payload for r in got if r is not None] == records
        await reader.close()
