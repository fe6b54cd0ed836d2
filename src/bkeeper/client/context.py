"""What every handle of one client shares: config, connections, metadata, placement.

Placement's shell: the choices are :mod:`bkeeper.client.placement`'s (pure), fed here with
the writable bookies, the client-wide :class:`~bkeeper.client.placement.Quarantine` and the
time. A quarantined bookie chosen because no other was left is connected to first; one that
cannot be reached is left out and the choice made again (at most once per quarantined
bookie: each round excludes one more), so that a bookie still registered but dead is not
written a segment only to fail again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import weakref
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bkeeper.client.config import ClientConfig
from bkeeper.client.metadata import ReconnectingLedgers
from bkeeper.client.metrics import ClientMetrics
from bkeeper.client.placement import (
    Domains,
    Quarantine,
    SpareWarning,
    choose_ensemble,
    replace_bookie,
)
from bkeeper.client.pool import BookiePool
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import BookieUnavailableError
from bkeeper.common.rand import new_rng

__all__ = ["ClientContext"]

B = TypeVar("B", bound=str)

log = logging.getLogger(__name__)


@dataclass
class ClientContext:
    config: ClientConfig
    pool: BookiePool
    ledgers: ReconnectingLedgers
    writable_bookies: Callable[[], Awaitable[frozenset[str]]]
    clock: Clock = field(default_factory=default_clock)
    rng: random.Random = field(default_factory=new_rng)
    #: v2 batch reads are matched on a request id: unique across this client's connections
    #: (a count per client, not per process: a simulated run's bytes do not depend on the
    #: runs before it in the process).
    batch_request_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    closed: bool = False
    handles: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    #: Read handles' metadata views that watch their ledger now (``metadata_watches_max``).
    followers: set[Any] = field(default_factory=set)
    metrics: ClientMetrics | None = None
    #: Bookies that failed a writer of this client (``bookie_quarantine_time_ms``).
    quarantine: Quarantine = field(init=False)
    spare_warning: SpareWarning = field(default_factory=SpareWarning)
    #: Queues a ledger for auto-recovery with the given missing replicas (the metadata's
    #: under-replication manager): a writer that ends degraded writes names the bookies
    #: that lack the entries written meanwhile. None: nowhere to say it (logged only).
    mark_underreplicated: Callable[[int, Collection[str]], Awaitable[None]] | None = None
    #: The registered network locations (bookie id -> ``/rack`` or ``/region/rack``), read
    #: at each choice of bookies; None: none registered anywhere (placement by ``racks``).
    locations: Callable[[], Awaitable[Mapping[str, str]]] | None = None

    #: Bookies in ``ClientConfig.local_region`` as last read (:meth:`refresh_local`); reads
    #: ask them first.
    local_bookies: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.quarantine = Quarantine(self.config.bookie_quarantine_time_ms / 1000.0)

    async def refresh_local(self) -> None:
        """Read which bookies are in ``ClientConfig.local_region`` (nothing without one)."""
        region = self.config.local_region
        if not region:
            return
        registered = await self.locations() if self.locations is not None else {}
        domains = Domains({**registered, **self.config.racks})
        self.local_bookies = frozenset(b for b in domains.locations if domains.region(b) == region)

    def local_first(self, replicas: list[B]) -> list[B]:
        """``replicas`` with those in the local region first, each group in its order."""
        local = self.local_bookies
        if not local:
            return replicas
        return [b for b in replicas if b in local] + [b for b in replicas if b not in local]

    async def domains(self) -> Domains | None:
        """Where bookies are, for the client's placement (None: random placement): the
        registered locations, those of ``ClientConfig.racks`` winning."""
        config = self.config
        if config.placement == "random":
            return None
        registered = await self.locations() if self.locations is not None else {}
        return Domains(
            {**registered, **config.racks},
            regions=config.placement == "regionaware",
            min_racks=config.min_racks_per_write_quorum,
            enforce=config.enforce_min_racks,
        )

    def quarantine_bookies(self, bookies: Collection[str]) -> None:
        """``bookies`` failed a writer: avoid them for ``bookie_quarantine_time_ms``."""
        if bookies and self.quarantine.duration_s > 0:
            log.info(
                "bookies %s quarantined for %.0f s: new ensembles take them only if no other "
                "bookie is left",
                ", ".join(sorted(bookies)),
                self.quarantine.duration_s,
            )
        self.quarantine.add(bookies, self.clock.monotonic())

    async def new_ensemble(self, size: int, write_quorum: int) -> tuple[str, ...]:
        candidates = await self.writable_bookies()
        domains = await self.domains()
        if self.spare_warning.check(len(candidates), size):
            log.warning(
                "a new ledger's ensemble of %d takes every writable bookie (%d): no spare, so "
                "a lost bookie cannot be replaced and its writers go on degraded (with Qa "
                "copies, if the write quorum leaves Qa up) or fail; add a bookie "
                "(logged again only after a spare has come and gone)",
                size,
                len(candidates),
            )
        return await self._choose_reachable(
            lambda excluded, quarantined: choose_ensemble(
                candidates,
                size,
                write_quorum,
                exclude=excluded,
                quarantined=quarantined,
                domains=domains,
                rng=self.rng,
            ),
            set(),
        )

    async def replacement(
        self, ensemble: tuple[str, ...], position: int, write_quorum: int, exclude: set[str]
    ) -> str:
        """A bookie for ``ensemble[position]``, never one of ``exclude`` (failing now)."""
        candidates = await self.writable_bookies()
        domains = await self.domains()
        chosen = await self._choose_reachable(
            lambda excluded, quarantined: (
                replace_bookie(
                    ensemble,
                    position,
                    candidates,
                    write_quorum,
                    exclude=excluded,
                    quarantined=quarantined,
                    domains=domains,
                    rng=self.rng,
                ),
            ),
            set(exclude),
            log_taken_back=True,
        )
        return chosen[0]

    async def _choose_reachable(
        self,
        choose: Callable[[set[str], dict[str, float]], tuple[str, ...]],
        exclude: set[str],
        *,
        log_taken_back: bool = False,
    ) -> tuple[str, ...]:
        """``choose(exclude, quarantined)`` again until every quarantined bookie it picks can
        be connected to; an unreachable one joins ``exclude`` (module doc)."""
        while True:  # bounded: each round excludes one more quarantined bookie
            quarantined = self.quarantine.current(self.clock.monotonic())
            picks = choose(exclude, quarantined)
            unreachable = await self._unreachable([b for b in picks if b in quarantined])
            if not unreachable:
                if log_taken_back:
                    for bookie in (b for b in picks if b in quarantined):
                        log.info("bookie %s taken back from quarantine: no other is left", bookie)
                return picks
            exclude.update(unreachable)

    async def _unreachable(self, bookies: list[str]) -> set[str]:
        """Those of ``bookies`` the client cannot connect to now (each logged)."""
        results = await asyncio.gather(
            *(self.pool.connection(b) for b in bookies), return_exceptions=True
        )
        unreachable = set()
        for bookie, result in zip(bookies, results, strict=True):
            if isinstance(result, BookieUnavailableError):
                log.info("quarantined bookie %s left out: %s", bookie, result)
                unreachable.add(bookie)
            elif isinstance(result, BaseException):
                raise result
        return unreachable
