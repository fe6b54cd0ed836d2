"""What the parts of a named log share, built once by ``NamedLogs``: the ledger client, the
process's :class:`LogConfig`, the clock, the stores (logs and subscriptions) and the walk.

The writer, the reader and the consumers get a :class:`LogContext` (through the
:class:`~bkeeper.namedlog.handle.LogHandle` of their log) instead of reaching through the
``NamedLogs`` facade, so nothing below ``logs.py`` imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.clock import Clock
from bkeeper.namedlog.core.config import LogConfig
from bkeeper.namedlog.stores import LogStore, SubscriptionStore
from bkeeper.namedlog.walk import LogWalk

__all__ = ["LogContext"]


@dataclass(frozen=True)
class LogContext:
    """The services every log of one ``NamedLogs`` uses (see the module docstring)."""

    bk: BookKeeper
    config: LogConfig
    clock: Clock
    store: LogStore
    subscriptions: SubscriptionStore
    walk: LogWalk

    @classmethod
    def build(cls, bk: BookKeeper, config: LogConfig, clock: Clock) -> LogContext:
        store = LogStore(bk.cluster.store, bk.cluster.root)
        subscriptions = SubscriptionStore(bk.cluster.store, store, clock)
        return cls(bk, config, clock, store, subscriptions, LogWalk(bk, config.password))
