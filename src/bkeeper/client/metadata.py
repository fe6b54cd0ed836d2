"""The client's metadata calls, carried across a lost metadata connection or session.

ZooKeeper ends a session that could not ping in time (a network partition, a client process
that was stopped or swapped out for longer than the session timeout); kazoo then opens a new
session by itself, and after a dropped connection it reconnects. A call made in between fails
with :class:`ConnectionLossError` or :class:`SessionExpiredError`. The client holds no
ephemeral nodes and no watches, so it loses nothing with its session: each of its metadata
calls is tried again, after a pause that doubles from ``PAUSE_FIRST_S`` up to
``PAUSE_MAX_S``, until it succeeds or ``metadata_reconnect_timeout_ms`` has passed since its
first failure (then the last error is raised, naming the call and the wait).

A write whose outcome the lost connection hid is tried again with the same version: if it had
been applied, the retry loses its compare-and-set and the caller re-reads, as after any lost
compare-and-set (every writer of ledger metadata does). A delete that had been applied answers
the retry with :class:`LedgerNotFoundError`, which then counts as done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TypeVar

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import ConnectionLossError, LedgerNotFoundError, SessionExpiredError
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.ledgers import LedgerMetadataStore
from bkeeper.meta.store import ANY_VERSION, Versioned

__all__ = ["PAUSE_FIRST_S", "PAUSE_MAX_S", "MetadataRetry", "ReconnectingLedgers"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The first pause before a metadata call is tried again; it doubles up to ``PAUSE_MAX_S``.
PAUSE_FIRST_S = 0.05
PAUSE_MAX_S = 1.0

_LOST = (ConnectionLossError, SessionExpiredError)


class MetadataRetry:
    """Runs a metadata call, trying again while the store reconnects (see the module doc)."""

    def __init__(self, reconnect_timeout_ms: int, clock: Clock | None = None) -> None:
        self.timeout_s = reconnect_timeout_ms / 1000.0
        self.clock: Clock = clock or default_clock()

    async def __call__(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        backoff = _Backoff(what, self.timeout_s, self.clock)
        while True:
            try:
                return await call()
            except _LOST as exc:
                await backoff.wait(exc)


class _Backoff:
    """The pauses of one call's retries, and the error once its time is up."""

    def __init__(self, what: str, timeout_s: float, clock: Clock) -> None:
        self._what = what
        self._timeout_s = timeout_s
        self._clock = clock
        self._deadline: float | None = None  # counted from the first failure
        self._pause = PAUSE_FIRST_S

    async def wait(self, exc: ConnectionLossError | SessionExpiredError) -> None:
        if self._deadline is None:
            self._deadline = self._clock.monotonic() + self._timeout_s
        remaining = self._deadline - self._clock.monotonic()
        if remaining <= 0:
            raise type(exc)(
                f"{self._what}: the metadata store stayed unreachable for "
                f"{self._timeout_s:g} s (metadata_reconnect_timeout_ms): {exc}"
            ) from exc
        log.info("%s: %s; trying again", self._what, exc)
        await asyncio.sleep(min(self._pause, remaining))
        self._pause = min(2 * self._pause, PAUSE_MAX_S)


class ReconnectingLedgers:
    """:class:`LedgerMetadataStore`'s calls, each through a :class:`MetadataRetry`."""

    def __init__(self, ledgers: LedgerMetadataStore, retry: MetadataRetry) -> None:
        self._ledgers = ledgers
        self._retry = retry

    async def create(
        self, metadata: LedgerMetadata, ledger_id: int | None = None
    ) -> tuple[int, Versioned[LedgerMetadata]]:
        return await self._retry(
            "creating a ledger", lambda: self._ledgers.create(metadata, ledger_id)
        )

    async def read(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        return await self._retry(
            f"reading ledger {ledger_id}'s metadata", lambda: self._ledgers.read(ledger_id)
        )

    async def write(
        self, ledger_id: int, metadata: LedgerMetadata, version: int
    ) -> Versioned[LedgerMetadata]:
        return await self._retry(
            f"writing ledger {ledger_id}'s metadata",
            lambda: self._ledgers.write(ledger_id, metadata, version),
        )

    async def delete(self, ledger_id: int, version: int = ANY_VERSION) -> None:
        interrupted = False

        async def delete() -> None:
            nonlocal interrupted
            try:
                await self._ledgers.delete(ledger_id, version)
            except _LOST:
                interrupted = True
                raise
            except LedgerNotFoundError:
                if not interrupted:
                    raise
                # The attempt the lost connection interrupted had deleted it.

        await self._retry(f"deleting ledger {ledger_id}'s metadata", delete)

    def watch(self, ledger_id: int) -> AsyncGenerator[Versioned[LedgerMetadata] | None, None]:
        """The ledger's metadata, then each new version (None while it does not exist);
        see :meth:`LedgerMetadataStore.watch` (it rides out lost connections by itself)."""
        return self._ledgers.watch(ledger_id)

    async def ledger_ids(self) -> AsyncIterator[int]:
        """Every ledger id, ascending; a listing cut by a lost connection goes on after the
        last id it gave."""
        backoff = _Backoff("listing ledgers", self._retry.timeout_s, self._retry.clock)
        last = -1
        while True:
            try:
                async for ledger_id in self._ledgers.ledger_ids():
                    if ledger_id > last:
                        last = ledger_id
                        yield ledger_id
                return
            except _LOST as exc:
                await backoff.wait(exc)
