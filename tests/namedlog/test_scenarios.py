"""Named-log scenarios on the in-memory cluster: racing writers, fencing mid-append, tailing
across rolls and writer changes, truncation while a reader is behind."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import LogExistsError, LogFencedError, LogNotFoundError
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.namedlog import LATEST, LogConfig, NamedLogs, Position
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

FAST = ClientConfig(add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200)
SMALL = LogConfig(roll_bytes=400, tail_poll_ms=100)


async def collect(reader, count: int, timeout_s: float = 10.0):
    records = []
    while len(records) < count:
        record = await reader.next(timeout_s)
        assert record is not None, f"only {len(records)} of {count} records arrived"
        records.append(record)
    return records


async def read_to(reader, last: Position, timeout_s: float = 30.0):
    """Records up to the one at ``last`` (each must come within the generous ``timeout_s``)."""
    records = []
    while not records or records[-1].position < last:
        record = await reader.next(timeout_s)
        assert record is not None, f"{len(records)} records, then none within {timeout_s} s"
        records.append(record)
    return records


async def wait_until(condition, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.005)


@on_virtual_time
async def test_create_list_delete():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        await logs.create("a")
        await logs.create("b")
        with pytest.raises(LogExistsError):
            await logs.create("a")
        assert await logs.names() == ["a", "b"]
        writer = await logs.log("a").open_writer()
        await writer.append(b"x")
        await writer.close()
        assert await logs.delete("a") == 1
        assert await logs.names() == ["b"]
        with pytest.raises(LogNotFoundError):
            await logs.log("a").open_writer()


@on_virtual_time
async def test_append_and_read_from_every_start():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        named = await logs.create("log")
        writer = await named.open_writer()
        positions = [
            await writer.append(b"r%d" % i, key=b"k", properties={"i": b"%d" % i})
            for i in range(30)
        ]
        assert positions == sorted(positions)
        assert len({p.ledger_id for p in positions}) > 1, "small roll_bytes rolls the ledger"
        reader = await named.open_reader()
        records = await collect(reader, 29)  # the last one is visible once the writer closes
        assert [r.payload for r in records] == [b"r%d" % i for i in range(29)]
        assert records[5].key == b"k" and records[5].properties == {"i": b"5"}
        await writer.close()
        assert (await reader.next(5)).payload == b"r29"
        from_position = await named.open_reader(positions[10])
        assert (await from_position.next(5)).payload == b"r10"
        stamp = records[20].timestamp_ms
        from_time = await named.open_reader(stamp)
        first = await from_time.next(5)
        assert first.timestamp_ms >= stamp and first.position <= positions[20]
        for r in (reader, from_position, from_time):
            await r.close()


@on_virtual_time
async def test_latest_sees_only_new_records():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        named = await logs.create("log")
        writer = await named.open_writer()
        for i in range(5):
            await writer.append(b"old%d" % i)
        reader = await named.open_reader(LATEST)
        for i in range(3):
            await writer.append(b"new%d" % i)
        await writer.close()
        got = [r.payload for r in await collect(reader, 3)]
        assert got == [b"new0", b"new1", b"new2"]
        await reader.close()


@on_virtual_time
async def test_two_writers_racing():
    async with MemoryCluster(3) as cluster:
        logs_a = NamedLogs(await cluster.client(FAST), SMALL)
        logs_b = NamedLogs(await cluster.client(FAST), SMALL)
        await logs_a.create("log")
        a, b = await asyncio.gather(
            logs_a.log("log").open_writer(), logs_b.log("log").open_writer()
        )
        results = {}
        for name, writer in (("a", a), ("b", b)):
            try:
                results[name] = await writer.append(name.encode())
            except LogFencedError:
                results[name] = None
        # Whoever opened last leads: its open sealed the other's ledger, so exactly one of
        # the two appends is acknowledged, into the log's last ledger.
        assert sorted(p is None for p in results.values()) == [False, True], results
        winner, loser = (a, b) if results["a"] is not None else (b, a)
        won = results["a"] or results["b"]
        assert won is not None
        listed = (await logs_a.log("log").metadata()).ledgers
        assert won.ledger_id == listed[-1].ledger_id == winner.ledger_id
        with pytest.raises(LogFencedError):
            await loser.append(b"late")
        await winner.append(b"end")
        await winner.close()
        meta = await logs_a.log("log").metadata()
        ids = [x.ledger_id for x in meta.ledgers]
        assert ids == sorted(ids) and len(ids) == 2, "the loser's spare ledger was not kept"
        reader = await logs_a.log("log").open_reader()
        payloads = [
            r.payload for r in await collect(reader, len([p for p in results.values() if p]) + 1)
        ]
        assert payloads[-1] == b"end" and b"late" not in payloads
        await reader.close()


@on_virtual_time
async def test_writer_fenced_mid_append_loses_nothing_acknowledged():
    async with MemoryCluster(3) as cluster:
        logs_a = NamedLogs(await cluster.client(FAST), LogConfig(tail_poll_ms=100))
        logs_b = NamedLogs(await cluster.client(FAST), LogConfig(tail_poll_ms=100))
        named = await logs_a.create("log")
        a = await named.open_writer()
        acked: list[bytes] = []
        refused: list[BaseException] = []  # appends taken, then failed by the fencing
        failed = 0  # appends refused at once: A already knew it was fenced

        async def pump():
            nonlocal failed
            futures = []
            for i in range(400):
                try:
                    future = await a.append_async(b"a%d" % i)
                except LogFencedError:
                    failed += 1
                    continue
                future.add_done_callback(
                    lambda f, i=i: (
                        acked.append(b"a%d" % i)
                        if not f.exception()
                        else refused.append(f.exception())
                    )
                )
                futures.append(future)
                if i % 50 == 0:
                    await asyncio.sleep(0.001)  # let the other writer in between
            await asyncio.gather(*futures, return_exceptions=True)

        pumping = asyncio.create_task(pump())
        await wait_until(lambda: len(acked) >= 20)  # B takes over in the middle of A's run
        b = await logs_b.log("log").open_writer()
        await pumping
        await b.append(b"b-first")
        await b.close()
        # Every append A made was either acknowledged or failed with the fencing, never lost
        # silently: the ones refused at once, and the ones taken and failed later.
        assert len(acked) + len(refused) + failed == 400
        assert all(isinstance(e, LogFencedError) for e in refused), refused[:3]
        with pytest.raises(LogFencedError):
            await a.append(b"after")
        reader = await logs_b.log("log").open_reader()
        last = await logs_b.log("log").last_position()
        got = [r.payload for r in await read_to(reader, last)]
        assert b"b-first" in got and got[-1] == b"b-first", "nothing of A's after B's record"
        from_a = got[:-1]
        # A's records form a prefix of what A sent: every acknowledged one, maybe followed by
        # some unacknowledged ones that reached a bookie and that recovery kept.
        assert from_a == [b"a%d" % i for i in range(len(from_a))]
        assert set(acked) <= set(from_a)
        await reader.close()


@on_virtual_time
async def test_reader_tails_across_rolls_and_writer_changes():
    async with MemoryCluster(3) as cluster:
        config = LogConfig(roll_bytes=100, tail_poll_ms=100)
        logs = NamedLogs(await cluster.client(FAST), config)
        named = await logs.create("log")
        reader = await named.open_reader()
        sent: list[bytes] = []
        for generation in range(3):
            writer_logs = NamedLogs(await cluster.client(FAST), config)
            writer = await writer_logs.log("log").open_writer()
            for i in range(20):
                payload = b"g%d-%02d" % (generation, i)
                await writer.append(payload)
                sent.append(payload)
            if generation < 2:
                continue  # abandoned without close: the next writer recovers it
            await writer.close()
        got = [r.payload for r in await collect(reader, len(sent))]
        assert got == sent
        assert len((await named.metadata()).ledgers) > 6
        await reader.close()


@on_virtual_time
async def test_truncation_while_a_reader_is_behind():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), LogConfig(roll_bytes=200, tail_poll_ms=100))
        named = await logs.create("log")
        writer = await named.open_writer()
        positions = [await writer.append(b"%03d" % i) for i in range(60)]
        reader = await named.open_reader()
        assert [r.payload for r in await collect(reader, 3)] == [b"000", b"001", b"002"]
        cut = positions[40]
        deleted = await named.truncate(cut)
        assert deleted > 0
        meta = await named.metadata()
        assert meta.ledgers[0].ledger_id <= cut.ledger_id and meta.truncated_before == cut
        await writer.close()
        rest = [r.payload for r in await read_to(reader, positions[-1])]
        assert rest and rest[-1] == b"059"
        # The ledger being read when truncation came is finished (its data is still on the
        # bookies); the deleted ledgers after it are skipped.
        numbers = [int(p) for p in rest]
        assert numbers == sorted(numbers) and len(numbers) < 57, "truncated records were skipped"
        assert [n for n in numbers if n >= 40] == list(range(40, 60)), "nothing after the cut lost"
        assert reader.skipped_ledgers > 0
        await reader.close()


@on_virtual_time
async def test_retention_by_size_and_age_truncates_sealed_ledgers():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        by_size = NamedLogs(bk, LogConfig(roll_bytes=100, retention_bytes=300))
        named = await by_size.create("sized")
        writer = await named.open_writer()
        for i in range(100):
            await writer.append(b"%03d" % i)
        await writer.close()
        meta = await named.metadata()
        assert 2 <= len(meta.ledgers) <= 6, "old ledgers were truncated"
        assert meta.truncated_before is not None
        reader = await named.open_reader()
        kept = [int(r.payload) for r in await read_to(reader, await named.last_position())]
        assert kept[-1] == 99 and 0 not in kept and kept == list(range(kept[0], 100))
        await reader.close()

        by_age = NamedLogs(bk, LogConfig(roll_bytes=100, retention_age_ms=1))
        named = await by_age.create("aged")
        writer = await named.open_writer()
        for i in range(60):
            await writer.append(b"%03d" % i)
            if i % 10 == 0:
                await asyncio.sleep(0.005)
        await writer.close()
        assert len((await named.metadata()).ledgers) <= 3


async def three_hundred_records(cluster: MemoryCluster):
    """A log of 300 records ``r000``... (one ledger, its writer open), and a reader of it
    (batch reads of 40 entries, no speculative reads) that has returned the first 75:
    (writer, reader, the last record's position, the payloads read)."""
    writer_client = await cluster.client(FAST)
    reader_client = await cluster.client(
        ClientConfig(add_timeout_ms=500, read_timeout_ms=300, long_poll_timeout_ms=200,
                     batch_read_entries_max=40, speculative_read_timeout_ms=0)
    )  # fmt: skip
    config = LogConfig(roll_bytes=10_000, tail_poll_ms=100)
    named = await NamedLogs(writer_client, config).create("log")
    writer = await named.open_writer()
    for i in range(300):
        last = await writer.append(b"r%03d" % i)
    reader = await NamedLogs(reader_client, config).log("log").open_reader()
    got = [(await reader.next(5.0)).payload for _ in range(75)]
    return writer, reader, last, got


@on_virtual_time
async def test_reader_resumes_after_failed_reads_without_duplicates_or_gaps():
    from bkeeper.wire.codes import StatusCode

    async with MemoryCluster(3) as cluster:
        writer, reader, last, got = await three_hundred_records(cluster)
        await writer.close()
        assert reader.position is not None and reader.position.entry_id == 75
        faults = [cluster.fault(index, None, error=StatusCode.EIO) for index in range(3)]
        pending = asyncio.ensure_future(read_to(reader, last))  # every read fails a while:
        await wait_until(lambda: sum(f.applied for f in faults) >= 6)  # the reader retries
        for index in range(3):
            cluster.heal(index)
        got += [r.payload for r in await pending]
        await reader.close()
        assert got == [b"r%03d" % i for i in range(300)]


@pytest.mark.parametrize("how", ["next", "iterate"])
@on_virtual_time
async def test_a_reader_whose_read_failed_for_good_goes_on_once_it_is_called_again(how):
    """A read error that trying again does not cure (every replica refuses: EUA) reaches
    the caller; the reader is not spent by it: called again, it reads on from the record
    after the last one it returned (it used to answer None, or end its iteration, for
    ever after: a state machine member following the log stopped applying, silently)."""
    from bkeeper.common.errors import UnauthorizedAccessError
    from bkeeper.wire.codes import StatusCode

    async with MemoryCluster(3) as cluster:
        writer, reader, last, got = await three_hundred_records(cluster)
        faults = [cluster.fault(index, None, error=StatusCode.EUA) for index in range(3)]
        with pytest.raises(UnauthorizedAccessError):
            while True:  # the records read ahead already come first
                record = await (reader.next(5.0) if how == "next" else anext(reader))
                assert record is not None
                got.append(record.payload)
        assert all(f.applied for f in faults)
        for index in range(3):
            cluster.heal(index)
        got += [r.payload for r in await read_to(reader, last)]
        await writer.append(b"after")  # the reader tails on
        assert (await reader.next(5.0)).payload == b"after"
        await reader.close()
        await writer.close()
        assert got == [b"r%03d" % i for i in range(300)]


@on_virtual_time
async def test_a_reader_past_the_last_ledger_sees_an_appended_one_at_once():
    """A reader that has read every ledger waits for the list to grow on a watch of the
    log's metadata, not a poll: a ledger appended whole (as the Spark sink commits each
    batch) reaches it long before ``tail_poll_ms`` (a minute here) has passed."""
    from bkeeper.namedlog import create_ledger, encode_record

    async with MemoryCluster(3) as cluster:
        client = await cluster.client(FAST)
        config = LogConfig(tail_poll_ms=60_000)
        logs = NamedLogs(client, config)
        named = await logs.create("sunk")
        reader = await named.open_reader()
        assert await reader.next(0.3) is None  # waiting: nothing in the log yet
        for batch in range(3):
            handle = await create_ledger(client, config)
            await handle.append(encode_record(b"batch-%d" % batch, 0))
            await handle.close()
            started = asyncio.get_running_loop().time()
            await named.append_ledgers([handle.ledger_id])
            record = await reader.next(5.0)
            assert record is not None and record.payload == b"batch-%d" % batch
            assert asyncio.get_running_loop().time() - started < 5.0
        await reader.close()


@on_virtual_time
async def test_a_tailer_sees_an_idle_writers_last_record():
    """A bookie learns that an entry is confirmed from the next add; a log writer whose
    appends are all acknowledged tells its bookies its LAC itself, so a tailing reader gets
    the last record too, with the clients' and logs' defaults (nobody set an interval)."""
    async with MemoryCluster(3) as cluster:
        writer_logs = NamedLogs(await cluster.client(ClientConfig()), LogConfig())
        named = await writer_logs.create("idle")
        writer = await named.open_writer()
        reader_logs = NamedLogs(await cluster.client(ClientConfig()), LogConfig())
        reader = await reader_logs.log("idle").open_reader()
        for round_ in range(2):  # the first append of a ledger and a later one
            sent = [b"round%d-%d" % (round_, i) for i in range(5)]
            for payload in sent:
                await writer.append(payload)
            assert [r.payload for r in await collect(reader, 5, timeout_s=5.0)] == sent
        await writer.close()
        await reader.close()


def test_a_log_ledgers_explicit_lac_interval():
    """None: the client's, else 10 ms; 0: off; a bad value is one clear error."""
    from bkeeper.common.errors import ConfigError

    assert LogConfig().explicit_lac_interval_ms is None
    assert LogConfig(explicit_lac_interval_ms=0).explicit_lac_interval_ms == 0
    for bad in (-1, 1.5, "10", True):
        with pytest.raises(ConfigError, match="explicit_lac_interval_ms: must be an integer"):
            LogConfig(explicit_lac_interval_ms=bad)


@on_virtual_time
async def test_a_roll_whose_answer_was_lost_keeps_the_ledger_it_listed():
    """A roll's compare-and-set that ZooKeeper applied but whose answer was lost (a
    ConnectionLoss: the server died before it answered) left the new ledger listed, and the
    writer deleted it as never listed: a reader reached the listed ledger, found it gone
    and looked again, for ever (a kv follower stopped applying, silently). The writer now
    looks: listed and last, the roll happened."""
    from bkeeper.common.errors import ConnectionLossError

    async with MemoryCluster(3) as cluster:
        client = await cluster.client(FAST)
        logs = NamedLogs(client, SMALL)
        named = await logs.create("lost")
        writer = await named.open_writer()
        real_write, lost = logs.store.write, [1]

        async def write(name, meta, version):
            new_version = await real_write(name, meta, version)
            if lost[0]:
                lost[0] -= 1
                raise ConnectionLossError("ZooKeeper: connection lost (the answer)")
            return new_version

        logs.store.write = write
        sent = [b"r%03d" % i * 30 for i in range(20)]
        positions = [await writer.append(payload) for payload in sent]
        assert lost == [0], "no roll happened"
        await writer.close()
        meta = await named.metadata()
        for ledger in meta.ledgers:  # every listed ledger is there
            await client.ledger_metadata(ledger.ledger_id)
        assert {p.ledger_id for p in positions} <= {x.ledger_id for x in meta.ledgers}
        reader = await named.open_reader()
        assert [r.payload for r in await collect(reader, 20, timeout_s=5.0)] == sent
        await reader.close()


@on_virtual_time
async def test_a_reader_reads_past_a_listed_ledger_that_is_gone(caplog):
    """A ledger deleted while the log still lists it (not by truncation, which unlists
    first) held the reader for ever: it opened the ledger, found it gone, read the list,
    found it still listed, and started again. It now says so and reads on after it."""
    async with MemoryCluster(3) as cluster:
        client = await cluster.client(FAST)
        logs = NamedLogs(client, SMALL)
        named = await logs.create("holed")
        writer = await named.open_writer()
        positions = [await writer.append(b"r%03d" % i * 30) for i in range(30)]
        await writer.close()
        ledgers = sorted({p.ledger_id for p in positions})
        assert len(ledgers) >= 3
        gone = ledgers[1]
        await client.delete_ledger(gone)
        expected = [b"r%03d" % i * 30 for i, p in enumerate(positions) if p.ledger_id != gone]
        reader = await named.open_reader()
        records = await collect(reader, len(expected), timeout_s=5.0)
        assert [r.payload for r in records] == expected
        assert reader.lost_ledgers == 1 and reader.skipped_ledgers == 0
        assert f"ledger {gone} is listed but gone" in caplog.text
        from bkeeper.verify.kv_workload import LISTED_BUT_GONE  # what verify looks for

        assert LISTED_BUT_GONE in caplog.text
        await reader.close()


@on_virtual_time
async def test_a_ledger_whose_seal_failed_after_a_roll_is_sealed_later(monkeypatch, caplog):
    """After a roll the writer seals the old ledger in the background. A seal that failed
    (the store away past ``metadata_reconnect_timeout_ms``, as a ZooKeeper restart of 10.8 s
    does) was given up with a warning, and the ledger stayed open behind the ledgers after
    it: readers read to its end and waited for its seal for ever. The writer now tries again
    until it is sealed."""
    from bkeeper.client.write_handle import WriteHandle
    from bkeeper.common.errors import ConnectionLossError

    real_close, failed = WriteHandle.close, []

    async def close(self):
        if self.ledger_id == first and len(failed) < 2:
            failed.append(self.ledger_id)
            raise ConnectionLossError("the metadata store stayed unreachable for 10 s")
        return await real_close(self)

    monkeypatch.setattr(WriteHandle, "close", close)
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        named = await logs.create("sealing")
        writer = await named.open_writer()
        first = writer.ledger_id
        sent = [b"r%03d" % i * 30 for i in range(30)]
        positions = [await writer.append(payload) for payload in sent]
        assert len({p.ledger_id for p in positions}) >= 3, "rolled twice"
        reader = await named.open_reader()
        records = await collect(reader, 29, timeout_s=5.0)
        assert [r.payload for r in records] == sent[:29]
        assert failed == [first, first]
        assert "closing ledger" in caplog.text
        await writer.close()
        await reader.close()


@on_virtual_time
async def test_a_new_writer_seals_a_ledger_left_open_behind_sealed_ones(monkeypatch):
    """A writer that died while it was still trying to seal a ledger it had rolled away
    from, after sealing a later one, left that ledger open behind a sealed one; a new
    writer sealed only the open ledgers at the end of the list, so readers waited at that
    ledger's end for ever. A new writer now seals every open ledger of the list."""
    from bkeeper.client.write_handle import WriteHandle
    from bkeeper.common.errors import ConnectionLossError

    real_close, first = WriteHandle.close, []

    async def close(self):
        if first and self.ledger_id == first[0]:
            raise ConnectionLossError("the metadata store stayed unreachable for 10 s")
        return await real_close(self)

    monkeypatch.setattr(WriteHandle, "close", close)
    async with MemoryCluster(3) as cluster:
        dying = await cluster.client(FAST)
        named = await NamedLogs(dying, SMALL).create("left-open")
        writer = await named.open_writer()
        first.append(writer.ledger_id)
        sent = [b"r%03d" % i * 30 for i in range(30)]
        positions = [await writer.append(payload) for payload in sent]
        ledgers = sorted({p.ledger_id for p in positions})
        assert len(ledgers) >= 3, "rolled twice"
        await dying.close()  # the writer's process dies: the first ledger is still open
        first.clear()
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        assert (await logs.bk.ledger_metadata(ledgers[0])).state is not LedgerState.CLOSED
        writer = await logs.log("left-open").open_writer()
        for ledger_id in ledgers:
            assert (await logs.bk.ledger_metadata(ledger_id)).state is LedgerState.CLOSED
        await writer.append(b"after")
        reader = await logs.log("left-open").open_reader()
        records = await collect(reader, 30, timeout_s=5.0)
        assert [r.payload for r in records] == [*sent, b"after"][:30]
        await writer.close()
        await reader.close()
