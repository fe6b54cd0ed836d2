"""Writer terms (issue 22, part 2) on the in-memory cluster: the log records the term of the
newest writer, an older term is refused before it fences anything, and the log's old metadata
format (no term) still reads."""

from __future__ import annotations

import json

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError, LogFencedError, WriterTermError
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.namedlog import LogConfig, LogMetadata, NamedLogs
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

FAST = ClientConfig(add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200)


def test_the_term_is_recorded_and_the_old_format_reads() -> None:
    old = b'{"format":1,"ctime_ms":5,"ledgers":[{"id":3,"ctime_ms":6}]}'
    meta = LogMetadata.decode(old)
    assert meta.writer_term is None
    assert meta.encode() == old, "no term written where there was none"
    with_term = meta.with_term(12)
    doc = json.loads(with_term.encode())
    assert doc["term"] == 12 and doc["format"] == 1
    assert LogMetadata.decode(with_term.encode()) == with_term
    # Every other change keeps the term.
    assert with_term.with_ledger(4, 7).writer_term == 12


@on_virtual_time
async def test_an_older_term_is_refused_before_it_fences_anything() -> None:
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        named = await logs.create("log")
        leader = await named.open_writer(term=5)
        await leader.append(b"a")
        assert (await named.metadata()).writer_term == 5

        other = NamedLogs(await cluster.client(FAST)).log("log")
        with pytest.raises(WriterTermError, match="term 3 is older than the log's term 5"):
            await other.open_writer(term=3)
        meta = await named.metadata()
        assert [x.ledger_id for x in meta.ledgers] == [leader.ledger_id]
        ledger = await logs.bk.ledger_metadata(leader.ledger_id)
        assert ledger.state is LedgerState.OPEN, "the refused writer fenced nothing"
        await leader.append(b"b")  # the leader goes on

        again = await named.open_writer(term=5)  # the same term may open again
        with pytest.raises(LogFencedError):
            await leader.append(b"c")
        newer = await other.open_writer(term=6)
        assert (await named.metadata()).writer_term == 6
        with pytest.raises(LogFencedError):
            await again.append(b"d")
        untermed = await other.open_writer()  # a writer without a term is not ordered
        assert (await named.metadata()).writer_term == 6
        with pytest.raises(LogFencedError):
            await newer.append(b"e")
        await untermed.close()
        with pytest.raises(ConfigError, match="term"):
            await named.open_writer(term=-1)


@on_virtual_time
async def test_a_writer_whose_term_was_overtaken_is_fenced_at_its_next_roll() -> None:
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), LogConfig(roll_bytes=10))
        named = await logs.create("log")
        writer = await named.open_writer(term=1)
        await writer.append(b"0123456789")
        # A newer leader has recorded its term and not listed its ledger yet.
        meta, version = await logs.store.read("log")
        await logs.store.write("log", meta.with_term(2), version)
        with pytest.raises(LogFencedError, match="term 2 overtook term 1"):
            await writer.append(b"x")  # rolls: refused
        assert len((await named.metadata()).ledgers) == 1
