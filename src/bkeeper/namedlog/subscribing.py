"""Subscribing: :func:`subscribe` creates a subscription the first time and returns its
consumer: an exclusive :class:`~bkeeper.namedlog.consumer.Consumer` (the owner node taken, a
new epoch) or one :class:`~bkeeper.namedlog.shared.SharedConsumer` among several."""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING

from bkeeper.common.errors import ConfigError, SubscriptionNotFoundError
from bkeeper.namedlog.config import EARLIEST
from bkeeper.namedlog.consumer import ACK_FLUSH_MS, Consumer
from bkeeper.namedlog.records import Position
from bkeeper.namedlog.shared import ACK_TIMEOUT_MS, CLAIM_RECORDS, SharedConsumer
from bkeeper.namedlog.subscription import Mode, SubscriptionState, check_subscription_name
from bkeeper.namedlog.subscription_store import SubscriptionStore

if TYPE_CHECKING:
    from bkeeper.namedlog.logs import NamedLog

__all__ = ["default_consumer_id", "subscribe"]

log = logging.getLogger(__name__)


def default_consumer_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{id(object()):x}"


async def subscribe(
    named: NamedLog,
    name: str,
    start: str | Position | int = EARLIEST,
    *,
    consumer_id: str | None = None,
    wait_s: float | None = 0.0,
    skip_truncated: bool = False,
    ack_flush_ms: int = ACK_FLUSH_MS,
    create: bool = True,
    mode: Mode = "exclusive",
    ack_timeout_ms: int = ACK_TIMEOUT_MS,
    claim_records: int = CLAIM_RECORDS,
) -> Consumer:
    """The consumer of subscription ``name`` (see :mod:`bkeeper.namedlog.consumer`); with
    ``create`` False a subscription that does not exist is ``SubscriptionNotFoundError``.
    ``mode`` is fixed when the subscription is created: subscribing to it in the other mode
    is a ``ConfigError``. ``ack_timeout_ms`` and ``claim_records``: shared mode only."""
    check_subscription_name(name)
    if mode not in ("exclusive", "shared"):
        raise ConfigError(f"mode {mode!r}: exclusive or shared")
    if ack_flush_ms < 1:
        raise ConfigError(f"ack_flush_ms: must be at least 1, got {ack_flush_ms}")
    logs = named.logs
    subs = SubscriptionStore(logs.bk.cluster.store, logs.store)
    consumer_id = consumer_id or default_consumer_id()
    await named.metadata()  # LogNotFoundError first, for a log that does not exist
    try:
        state, _version = await subs.read(named.name, name)
    except SubscriptionNotFoundError:
        if not create:
            raise
        probe = await named.open_reader(start)  # resolves earliest, latest or a time
        try:
            first = await probe.seek()
        finally:
            await probe.close()
        state = SubscriptionState(logs.clock.wall_ms(), first, mode=mode)
        if await subs.create(named.name, name, state):
            log.debug("log %s: %s subscription %s created at %s", named.name, mode, name, first)
        state, _version = await subs.read(named.name, name)
    if state.mode != mode:
        raise ConfigError(f"subscription {name!r} of log {named.name!r} is {state.mode}, "
                          f"not {mode}")  # fmt: skip
    if mode == "shared":
        state, version = await subs.read(named.name, name)
        shared = SharedConsumer(named, subs, name, consumer_id, state, version, ack_flush_ms,
                                skip_truncated, ack_timeout_ms=ack_timeout_ms,
                                claim_records=claim_records)  # fmt: skip
        await shared.open()
        return shared
    await subs.take(named.name, name, consumer_id, wait_s)
    try:
        state, version = await subs.read(named.name, name)
        state = state.taken_over(consumer_id)
        version = await subs.write(named.name, name, state, version)
        consumer = Consumer(named, subs, name, consumer_id, state, version, ack_flush_ms,
                            skip_truncated)  # fmt: skip
        await consumer.open()
    except BaseException:
        await subs.release(named.name, name)
        raise
    return consumer
