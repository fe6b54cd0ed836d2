"""What every handle of one client shares: config, connections, metadata, placement."""

from __future__ import annotations

import random
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bkeeper.client.config import ClientConfig
from bkeeper.client.metadata import ReconnectingLedgers
from bkeeper.client.metrics import ClientMetrics
from bkeeper.client.placement import choose_ensemble, replace_bookie
from bkeeper.client.pool import BookiePool
from bkeeper.common.clock import Clock, SystemClock

__all__ = ["ClientContext"]


@dataclass
class ClientContext:
    config: ClientConfig
    pool: BookiePool
    ledgers: ReconnectingLedgers
    writable_bookies: Callable[[], Awaitable[frozenset[str]]]
    clock: Clock = field(default_factory=SystemClock)
    rng: random.Random = field(default_factory=random.Random)
    closed: bool = False
    handles: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    #: Read handles' metadata views that watch their ledger now (``metadata_watches_max``).
    followers: set[Any] = field(default_factory=set)
    metrics: ClientMetrics | None = None

    def _racks(self) -> dict[str, str] | None:
        return dict(self.config.racks) if self.config.placement == "rackaware" else None

    async def new_ensemble(self, size: int, write_quorum: int) -> tuple[str, ...]:
        candidates = await self.writable_bookies()
        return choose_ensemble(candidates, size, write_quorum, racks=self._racks(), rng=self.rng)

    async def replacement(
        self, ensemble: tuple[str, ...], position: int, write_quorum: int, exclude: set[str]
    ) -> str:
        candidates = await self.writable_bookies()
        return replace_bookie(
            ensemble,
            position,
            candidates,
            write_quorum,
            exclude=exclude,
            racks=self._racks(),
            rng=self.rng,
        )
