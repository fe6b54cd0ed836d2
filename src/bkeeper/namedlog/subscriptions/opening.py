"""Opening subscriptions: :func:`subscribe` creates a subscription the first time and returns
its consumer: an exclusive :class:`~bkeeper.namedlog.subscriptions.exclusive.Consumer` (the
owner node taken, a new epoch) or one
:class:`~bkeeper.namedlog.subscriptions.shared.SharedConsumer` among several. For consumers
that keep their own progress (Spark): :func:`ensure_subscription` and :func:`commit_before`."""

from __future__ import annotations

import logging
from dataclasses import replace

from bkeeper.common.cas import cas_update
from bkeeper.common.errors import (
    ConfigError,
    MetadataVersionError,
    SubscriptionNotFoundError,
)
from bkeeper.namedlog.core.config import EARLIEST
from bkeeper.namedlog.core.records import Position
from bkeeper.namedlog.core.subscription_state import (
    SubscriptionState,
    check_subscription_name,
)
from bkeeper.namedlog.handle import LogHandle
from bkeeper.namedlog.reader import open_reader
from bkeeper.namedlog.stores import CursorLedger, drop_cursor, load
from bkeeper.namedlog.subscriptions.exclusive import Consumer
from bkeeper.namedlog.subscriptions.options import SubscribeOptions
from bkeeper.namedlog.subscriptions.shared import SharedConsumer

__all__ = ["commit_before", "ensure_subscription", "subscribe"]

log = logging.getLogger(__name__)


async def subscribe(
    named: LogHandle, name: str, start: str | Position | int, options: SubscribeOptions
) -> Consumer:
    """The consumer of subscription ``name`` (see :mod:`bkeeper.namedlog.subscriptions`),
    created at ``start`` the first time unless ``options.create`` is False (then
    ``SubscriptionNotFoundError``). Subscribing in the other mode than the subscription's
    is a ``ConfigError``."""
    check_subscription_name(name)
    options = options.with_consumer_id()
    consumer_id, mode = options.consumer_id, options.mode
    assert consumer_id is not None
    logs = named.context
    subs = logs.subscriptions
    await named.metadata()  # LogNotFoundError first, for a log that does not exist
    try:
        state, _version = await subs.read(named.name, name)
    except SubscriptionNotFoundError:
        if not options.create:
            raise
        probe = await open_reader(named, start)  # resolves earliest, latest or a time
        try:
            first = await probe.seek()
        finally:
            await probe.close()
        state = SubscriptionState(logs.clock.wall_ms(), first, mode=mode)
        if await subs.create(named.name, name, state):
            log.debug("log %s: %s subscription %s created at %s", named.name, mode, name, first)
        state, _version = await subs.read(named.name, name)
    if state.mode != mode:
        raise ConfigError(
            f"subscription {name!r} of log {named.name!r} is {state.mode}, not {mode}"
        )
    if mode == "shared":
        state, version = await subs.read(named.name, name)
        shared = SharedConsumer(named, name, state, version, options)
        await shared.open()
        return shared
    await subs.take(named.name, name, consumer_id, options.wait_s)
    cursor: CursorLedger | None = None
    try:
        state, version = await subs.read(named.name, name)
        previous = state.cursor
        if previous is not None:  # the last consumer's acks: fence its ledger, take them
            newer = await load(logs.bk, previous, logs.config)
            if newer is not None:
                state = state.with_progress_of(newer)
        state = replace(state.taken_over(consumer_id), cursor=None)
        if options.ack_store == "ledger":
            cursor = await CursorLedger.create(logs.bk, logs.config, state)
            state = replace(state, cursor=cursor.ledger_id)
        version = await subs.write(named.name, name, state, version)
        if previous is not None:
            await drop_cursor(logs.bk, previous)
        consumer = Consumer(named, name, state, version, options, cursor=cursor)
        await consumer.open()
    except BaseException:
        if cursor is not None:
            await cursor.delete()
        await subs.release(named.name, name)
        raise
    return consumer


async def ensure_subscription(
    named: LogHandle, name: str, start: str | Position | int = EARLIEST
) -> SubscriptionState:
    """Subscription ``name`` (exclusive), created at ``start`` if it does not exist, for a
    consumer that keeps its own progress (a Spark query's checkpoint) and only reports it
    with :func:`commit_before`."""
    check_subscription_name(name)
    logs = named.context
    subs = logs.subscriptions
    try:
        return (await subs.read(named.name, name))[0]
    except SubscriptionNotFoundError:
        probe = await open_reader(named, start)
        try:
            first = await probe.seek()
        finally:
            await probe.close()
        await subs.create(named.name, name, SubscriptionState(logs.clock.wall_ms(), first))
        return (await subs.read(named.name, name))[0]


async def commit_before(named: LogHandle, name: str, position: Position) -> SubscriptionState:
    """Record every record of the log before ``position`` consumed in subscription ``name``
    (compare-and-set; the mark never goes back). For consumers that keep their own progress:
    no ownership is taken, and a consumer holding the subscription keeps it."""
    logs = named.context
    subs = logs.subscriptions
    last, count = await _last_before(named, position)
    counts = {} if last is None else {(last.ledger_id, last.entry_id): count}

    async def attempt(snapshot: tuple[SubscriptionState, int]) -> SubscriptionState:
        state, version = snapshot
        if last is None:
            return state
        new = state.with_acks(last, [], counts=counts)
        if new == state:
            return state
        await subs.write(named.name, name, new, version)
        return new

    def lost() -> SubscriptionState:
        raise MetadataVersionError(
            f"subscription {name!r} of log {named.name!r}: commit lost "
            f"{logs.config.metadata_retries_max} compare-and-sets in a row"
        )

    return await cas_update(
        lambda: subs.read(named.name, name),
        attempt,
        on_exhausted=lost,
        what=f"subscription {name!r} of log {named.name!r}: commit",
        attempts_max=logs.config.metadata_retries_max,
    )


async def _last_before(named: LogHandle, position: Position) -> tuple[Position | None, int]:
    """The position of the last record before ``position`` (None: there is none) and how
    many records its entry holds (the entry is read: a batch's record count tells whether
    the record ends it)."""
    walk = named.context.walk
    if position.index > 0:
        end = await walk.last_record(position.ledger_id, position.entry_id)
        last = Position(position.ledger_id, position.entry_id, position.index - 1)
        return min(last, end), end.index + 1
    if position.entry_id > 0:
        end = await walk.last_record(position.ledger_id, position.entry_id - 1)
        return end, end.index + 1
    ledgers = [x.ledger_id for x in (await named.metadata()).ledgers]
    for ledger_id in reversed([x for x in ledgers if x < position.ledger_id]):
        ledger_end = await walk.ledger_end(ledger_id)
        if ledger_end is not None and ledger_end.last >= 0:
            end = await walk.last_record(ledger_id, ledger_end.last)
            return end, end.index + 1
    return None, 1
