"""A log's settings stored with the log (issue 39): the metadata's ``config`` object round
trips, a wrong stored value is named, old nodes read as "not set", changes go by
compare-and-set, writers follow the stored settings over their process's ``LogConfig``, and
retention runs when a writer opens and on its timer (the in-memory cluster, a fake clock)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import LogConfig, LogMetadata, NamedLogs
from bkeeper.namedlog.core import LogSettings, Position, encode_record
from bkeeper.namedlog.writer import TIMER_POLL_S
from bkeeper.testing.clock import FakeClock
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

FAST = ClientConfig(add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200)
OLD = b'{"format":1,"ctime_ms":5,"ledgers":[{"id":3,"ctime_ms":6}]}'


def test_settings_round_trip_in_the_metadata_and_old_nodes_have_none() -> None:
    old = LogMetadata.decode(OLD, "orders")
    assert old.settings("orders") == LogSettings()
    assert old.encode() == OLD, "no config written where there was none"
    settings = LogSettings(retention_consumed=True, roll_age_ms=2_000, retention_bytes=0)
    meta = old.with_settings(settings)
    doc = json.loads(meta.encode())
    assert doc["format"] == 1
    assert doc["config"] == {"retention_bytes": 0, "retention_consumed": True, "roll_age_ms": 2000}
    again = LogMetadata.decode(meta.encode(), "orders")
    assert again == meta and again.settings("orders") == settings
    assert again.with_ledger(4, 7).settings() == settings, "a roll keeps the settings"
    assert meta.with_settings(LogSettings()).encode() == OLD, "none set: no config"
    # A setting a newer bkeeper wrote is kept and written back, and otherwise ignored.
    newer = OLD[:-1] + b',"config":{"roll_bytes":100,"tiering":{"after_ms":5}}}'
    kept = LogMetadata.decode(newer).settings()
    assert kept.roll_bytes == 100
    changed = LogMetadata.decode(newer).with_settings(kept.changed(roll_bytes=200))
    assert json.loads(changed.encode())["config"] == {
        "roll_bytes": 200,
        "tiering": {"after_ms": 5},
    }


def test_stored_settings_win_over_the_process_config() -> None:
    process = LogConfig(roll_bytes=1_000, retention_age_ms=60_000, batching=True)
    mine = LogSettings(roll_bytes=50, retention_age_ms=0, ensemble_size=2, write_quorum=2,
                       ack_quorum=1)  # fmt: skip
    applied = mine.applied_to(process)
    assert (applied.roll_bytes, applied.retention_age_ms) == (50, 0), "0 stored: off"
    assert (applied.ensemble_size, applied.write_quorum, applied.ack_quorum) == (2, 2, 1)
    assert applied.batching, "what the log does not set comes from the process"
    assert LogSettings().applied_to(process) is process


@pytest.mark.parametrize(
    ("stored", "named"),
    [
        ('{"roll_bytes":-1}', "config.roll_bytes: must be a positive integer, got -1"),
        ('{"retention_consumed":"yes"}', "config.retention_consumed: must be true or false"),
        ('{"retention_age_ms":1.5}', "config.retention_age_ms: must be an integer >= 0"),
        ('{"ensemble_size":3}', "set all three or none, got 3/None/None"),
        (
            '{"ensemble_size":2,"write_quorum":3,"ack_quorum":2}',
            "need ensemble >= write quorum >= ack quorum, got 2/3/2",
        ),
        ("[1]", "config: must be a JSON object"),
    ],
)
def test_a_wrong_stored_setting_is_named_with_its_log(stored: str, named: str) -> None:
    data = OLD[:-1] + b',"config":' + stored.encode() + b"}"
    meta = LogMetadata.decode(data, "orders")  # readers are not stopped by it
    with pytest.raises(ConfigError) as caught:
        meta.settings("orders")
    message = str(caught.value)
    assert message.startswith("log 'orders': the settings stored with it are wrong: ")
    assert named in message and "bkeeper log config orders" in message
    assert "\n" not in message


async def test_a_wrong_stored_setting_stops_writers_not_readers_and_can_be_fixed() -> None:
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        named = await logs.create("orders")
        writer = await named.open_writer()
        await writer.append(b"a")
        await writer.close()
        store = logs.bk.cluster.store
        data, version = await store.get(logs.store.path("orders"))
        doc = json.loads(data)
        doc["config"] = {"roll_age_ms": -5, "retention_consumed": True, "ensemble_size": 9}
        await store.set(logs.store.path("orders"), json.dumps(doc).encode(), version)
        with pytest.raises(ConfigError, match=r"config\.roll_age_ms: must be an integer >= 0"):
            await named.open_writer()
        assert len((await named.metadata()).ledgers) == 1, "the refused writer made nothing"
        reader = await named.open_reader()
        assert (await reader.next(5)).payload == b"a"
        await reader.close()
        before, after = await named.configure(lambda s: s.changed(roll_age_ms=60_000))
        assert before == LogSettings(retention_consumed=True), "the wrong ones left out"
        assert after == LogSettings(retention_consumed=True, roll_age_ms=60_000)
        writer = await named.open_writer()
        await writer.close()


async def test_a_change_that_loses_its_compare_and_set_runs_again_none_lost() -> None:
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        named = await logs.create("orders", LogSettings(roll_bytes=1_000))
        tree, path = logs.bk.cluster.store.tree, logs.store.path("orders")
        seen: list[LogSettings] = []

        def set_age(settings: LogSettings) -> LogSettings:
            seen.append(settings)
            if len(seen) == 1:  # another process changes the node between read and write
                data, _version = tree.get(path)
                meta = LogMetadata.decode(data)
                other = meta.with_settings(settings.changed(retention_bytes=9_000))
                tree.set(path, other.encode(), -1)
            return settings.changed(retention_age_ms=5_000)

        before, after = await named.configure(set_age)
        assert len(seen) == 2, "the lost compare-and-set ran the change again"
        assert before == LogSettings(roll_bytes=1_000, retention_bytes=9_000)
        assert after == LogSettings(roll_bytes=1_000, retention_bytes=9_000, retention_age_ms=5_000)
        assert await named.settings() == after, "both changes kept"
        with pytest.raises(ConfigError, match="write_quorum"):
            await named.configure(
                lambda s: s.changed(ensemble_size=2, write_quorum=3, ack_quorum=2)
            )
        assert (await named.settings()).ensemble_size is None, "refused: unchanged"


async def test_the_writer_follows_the_stored_settings_over_its_own() -> None:
    process = LogConfig(roll_bytes=10_000_000, ensemble_size=3, write_quorum=3, ack_quorum=2)
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), process)
        stored = LogSettings(roll_bytes=100, ensemble_size=2, write_quorum=2, ack_quorum=1)
        named = await logs.create("orders", stored)
        writer = await named.open_writer()
        ledger = await logs.bk.ledger_metadata(writer.ledger_id)
        assert (ledger.ensemble_size, ledger.write_quorum, ledger.ack_quorum) == (2, 2, 1)
        first = await writer.append(b"x" * 120)
        second = await writer.append(b"y")
        assert second.ledger_id > first.ledger_id, "rolled at the log's 100 bytes"
        await writer.close()
        # A ledger written elsewhere for append_ledgers (Spark's write tasks) is made alike.
        handle = await named.new_ledger()
        assert (handle.metadata.ensemble_size, handle.metadata.write_quorum) == (2, 2)
        await handle.append(encode_record(b"z", 1, None, None))
        await handle.close()
        assert await named.append_ledgers([handle.ledger_id])


async def test_retention_runs_when_a_writer_opens() -> None:
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))  # the process sets no retention
        named = await logs.create("orders", LogSettings(retention_consumed=True))
        consumer = await named.subscribe("billing")
        sessions = []
        for payload in (b"a", b"b", b"c"):  # three writer sessions: three ledgers
            writer = await named.open_writer()
            sessions.append(await writer.append(payload))
            await writer.close()
        for _ in sessions:
            record = await consumer.receive(5.0)
            consumer.ack(record.position)
        await consumer.flush()
        writer = await named.open_writer()
        ids = [x.ledger_id for x in (await named.metadata()).ledgers]
        assert ids == [sessions[-1].ledger_id, writer.ledger_id], (
            "the consumed ledgers went when the writer opened (not the one holding the "
            "subscription's position)"
        )
        await writer.close()
        await consumer.close()
        again = await named.subscribe("billing")  # its position is still in the log:
        assert await again.receive(0.5) is None, "no records reported lost"
        await again.close()


async def wait_for_tick(writer_clock: FakeClock, seconds: float) -> None:
    """Move the writer's clock, then let its timer poll (three times, on virtual time: the
    tests that call this run on it, so the polls and what they start have run, however
    loaded the machine)."""
    writer_clock.advance(seconds)
    await asyncio.sleep(TIMER_POLL_S * 3)


@on_virtual_time
async def test_the_timer_rolls_an_idle_ledger_and_trims_what_was_consumed() -> None:
    clock = FakeClock()
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), clock=clock)
        named = await logs.create("orders", LogSettings(retention_consumed=True, roll_age_ms=2_000))
        writer = await named.open_writer()
        consumer = await named.subscribe("billing")
        first = writer.ledger_id
        position = await writer.append(b"a")
        await wait_for_tick(clock, 1.0)
        assert writer.ledger_id == first, "younger than the roll age"
        await wait_for_tick(clock, 1.5)
        assert writer.ledger_id > first, "rolled on the timer with no append coming"
        second = await writer.append(b"b")
        assert second.ledger_id == writer.ledger_id
        assert (await consumer.receive(5.0)).position == position
        consumer.ack((await consumer.receive(5.0)).position)
        await consumer.flush()
        await wait_for_tick(clock, 1.0)
        ids = [x.ledger_id for x in (await named.metadata()).ledgers]
        assert ids == [second.ledger_id], "the consumed, sealed ledger was trimmed"
        await wait_for_tick(clock, 2.5)
        assert writer.ledger_id > second.ledger_id, "the ledger holding b rolled in its turn"
        idle = writer.ledger_id
        await wait_for_tick(clock, 10.0)
        assert writer.ledger_id == idle, "a ledger with no entry is never rolled"
        assert writer.timer_error is None
        await writer.close()
        await consumer.close()


@on_virtual_time
async def test_the_timer_picks_up_changed_settings_and_reports_errors_once(caplog) -> None:
    clock = FakeClock()
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), clock=clock)
        named = await logs.create("orders")
        writer = await named.open_writer()
        first = writer.ledger_id
        await writer.append(b"a")
        await named.configure(lambda s: s.changed(roll_age_ms=60_000))
        clock.advance(61)
        await writer.tick()
        assert writer.ledger_id > first, "the stored roll age applies to the open writer"

        store, path = logs.bk.cluster.store, logs.store.path("orders")
        data, version = await store.get(path)
        doc = json.loads(data)
        doc["config"] = {"retention_bytes": -1}
        await store.set(path, json.dumps(doc).encode(), version)
        with caplog.at_level(logging.WARNING, logger="bkeeper.namedlog.writer"):
            await writer.tick()
            await writer.tick()
        assert writer.timer_error is not None and "config.retention_bytes" in writer.timer_error
        warnings = [r for r in caplog.records if "retention_bytes" in r.getMessage()]
        assert len(warnings) == 1, "logged once while the error stays the same"
        await named.configure(lambda _: LogSettings())
        await writer.tick()
        assert writer.timer_error is None
        await writer.append(b"b")
        await writer.close()


def test_settings_refuse_what_log_config_would() -> None:
    with pytest.raises(ConfigError, match="roll_bytes: must be a positive integer, got 0"):
        LogSettings(roll_bytes=0)
    with pytest.raises(ConfigError, match="no log setting named 'roll_size'"):
        LogSettings().changed(roll_size=5)
    assert LogSettings(retention_bytes=5).changed(retention_bytes=None).empty


async def test_many_short_writer_sessions_some_empty_leave_the_log_readable() -> None:
    """Each ``bkeeper log append`` is a writer session with a ledger of its own, empty when
    nothing was appended: readers walk over them all, and retention by age bounds them."""
    clock = FakeClock()
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), clock=clock)
        named = await logs.create("orders", LogSettings(retention_age_ms=3_600_000))
        expected = []
        for session in range(30):
            writer = await named.open_writer()
            if session % 3 != 2:  # every third session appends nothing, the last one too
                expected.append(b"r%d" % session)
                await writer.append(expected[-1])
            await writer.close()
            clock.advance(60)
        ledgers = (await named.metadata()).ledgers
        assert len(ledgers) == 30, "one ledger per session, an empty one too"
        reader = await named.open_reader()
        got = [(await reader.next(5)).payload for _ in expected]
        assert got == expected
        assert await reader.next(0.3) is None, "the empty last ledgers hold nothing more"
        await reader.close()
        assert (await named.last_position()).ledger_id == ledgers[-2].ledger_id
        clock.advance(3_600 - 30 * 60 + 10 * 60)  # the first 10 sessions are older than 1 h
        writer = await named.open_writer()  # retention on open, by age
        left = (await named.metadata()).ledgers
        assert len(left) < len(ledgers) - 5 and left[-1].ledger_id == writer.ledger_id
        await writer.close()


async def test_retention_runs_after_ledgers_are_appended() -> None:
    """Spark's sink appends ledgers written by its tasks: retention runs after each batch."""
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        named = await logs.create("orders", LogSettings(retention_consumed=True))
        consumer = await named.subscribe("billing")

        async def batch(payload: bytes) -> int:
            handle = await named.new_ledger()
            await handle.append(encode_record(payload, 1, None, None))
            await handle.close()
            assert await named.append_ledgers([handle.ledger_id])
            return handle.ledger_id

        await batch(b"a")
        await batch(b"b")
        for _ in range(2):
            consumer.ack((await consumer.receive(5.0)).position)
        await consumer.flush()
        second_last = (await named.metadata()).ledgers[-1].ledger_id
        last = await batch(b"c")
        ids = [x.ledger_id for x in (await named.metadata()).ledgers]
        assert ids == [second_last, last], "the first consumed ledger went after the batch"
        assert (await consumer.receive(5.0)).payload == b"c"
        await consumer.close()


def test_the_retention_decision_keeps_what_may_still_take_entries() -> None:
    from bkeeper.namedlog.core import LogLedger, SubscriptionState, consumed_before, retained_from

    ledgers = [LogLedger(i, 1_000 * i) for i in range(1, 6)]  # ledger i made at i s
    config = LogConfig(retention_age_ms=1_500, retention_consumed=True)
    # Age: ledger i's records are older than ledger i + 1's creation.
    assert retained_from(ledgers, config, now_ms=4_600, limit=4) == 2
    assert retained_from(ledgers, config, now_ms=99_000, limit=3) == 3, "never past the limit"
    assert retained_from(ledgers, config, now_ms=99_000, limit=9) == 4, "never the last"
    by_size = LogConfig(retention_bytes=250)
    lengths = {1: 100, 2: 100, 3: 100, 4: 100}
    assert retained_from(ledgers, by_size, now_ms=0, limit=4, lengths=lengths) == 2
    # Consumption: the ledgers before the one the slowest subscription reads next.
    at_3_end = SubscriptionState(ctime_ms=0, start=Position(1, 0), mark=Position(3, 7))
    at_2 = SubscriptionState(ctime_ms=0, start=Position(1, 0), mark=Position(2, 0))
    assert consumed_before(ledgers, [at_3_end]) == 2, "ledger 3 stays: the position names it"
    assert consumed_before(ledgers, [at_3_end, at_2]) == 1, "the slowest"
    assert consumed_before(ledgers, []) is None, "no subscription: keep everything"
    assert retained_from(ledgers, LogConfig(retention_consumed=True), now_ms=0, limit=4) == 0


@on_virtual_time
async def test_a_writer_left_open_stops_its_timer_when_its_client_closes(caplog) -> None:
    """A writer abandoned without close (a crashed application, a test) whose client was
    closed: its timer ticked for ever on the loop, warning 'store is closed (tried again at
    the next tick)'; it stops at the first tick that finds the store closed."""
    clock = FakeClock()
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        logs = NamedLogs(bk, clock=clock)
        named = await logs.create("orders", LogSettings(roll_age_ms=2_000))
        writer = await named.open_writer()
        await writer.append(b"a")
        await bk.close()
        with caplog.at_level(logging.INFO, logger="bkeeper.namedlog.writer"):
            for _ in range(3):
                await wait_for_tick(clock, 1.5)
        ticking = writer._ticking
        assert ticking is not None and ticking.done(), "the timer still runs"
        messages = [r.getMessage() for r in caplog.records]
        assert not [m for m in messages if "tried again at the next tick" in m], messages
        assert any("the writer's timer stops" in m for m in messages), messages
