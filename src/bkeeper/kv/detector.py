"""Faster fail-over after a leader's process dies: its followers delete its election node.

Without it, a leader killed -9 leads until ZooKeeper expires its session: the session
timeout, plus ZooKeeper's rounding of expiry up to its next tick (4 to 6 s with a 4 s
timeout and a 2 s tick; docs/benchmarks.md). A process that died no longer listens: a
connection to its HTTP port is refused at once (the kernel answers RST). So each member that
does not lead probes the leader's HTTP port every ``probe_s``; after ``REFUSALS_MIN``
refusals in a row, over at least ``REFUSED_FOR_S_MIN``, it deletes that leader's election node
(the very node it probed: a restarted process makes a new one), and the next candidate is
elected at once.

Safety does not rest on this (nor on the election at all): a new leader fences the old
ledger before it writes and, with a read lease, waits it out after fencing
(:mod:`bkeeper.statemachine.machine`); a leader whose node was deleted while it lived loses
leadership when it sees the deletion. A refusal is the only signal counted: a timeout or any
other error (a slow or unreachable host) counts for nothing, and ZooKeeper's session expiry
handles those as before.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from urllib.parse import urlsplit

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import BKeeperError, NoNodeError
from bkeeper.meta.store import NodeStore, join_path

__all__ = ["REFUSALS_MIN", "CrashDetector"]

log = logging.getLogger(__name__)

#: Refused connections in a row, and seconds they span at least, before the node is deleted.
REFUSALS_MIN = 3
REFUSED_FOR_S_MIN = 0.2
#: Seconds a probe's connection attempt may take (a timeout is not a refusal).
CONNECT_TIMEOUT_S = 1.0
#: Seconds between reads of who leads (the leader's node and URL) from the store.
LEADER_REFRESH_S = 1.0


async def refused(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """True when a TCP connection to ``url``'s host and port is refused."""
    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        return False
    try:
        async with asyncio.timeout(timeout_s):
            _reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    return False


class CrashDetector:
    """Run by every member (module doc); probes only while ``leading()`` is false."""

    def __init__(
        self,
        store: NodeStore,
        directory: str,
        own_url: str,
        probe_s: float,
        leading: Callable[[], bool],
        *,
        clock: Clock | None = None,
    ) -> None:
        """``clock``: what the refusals' span is measured on (default: the system clock)."""
        self._store = store
        self._directory = directory
        self._own_url = own_url
        self._probe_s = probe_s
        self._leading = leading
        self._clock: Clock = clock or default_clock()
        #: Probes made, and leaders' nodes deleted.
        self.probes = 0
        self.deposed = 0

    async def _leader_node(self) -> tuple[str, str] | None:
        """The path and URL of the leading member's node (the first), or None."""
        try:
            children = await self._store.children(self._directory)
        except NoNodeError:
            return None
        for child in sorted(children, key=lambda c: c[-10:]):
            path = join_path(self._directory, child)
            try:
                data, _version = await self._store.get(path)
            except NoNodeError:
                continue  # gone meanwhile: the next one leads
            try:
                url = json.loads(data)["url"]
            except (ValueError, KeyError, TypeError):
                return None
            return (path, url) if isinstance(url, str) else None
        return None

    async def run(self, stop: asyncio.Event) -> None:
        clock = self._clock
        leader: tuple[str, str] | None = None
        read_at = -LEADER_REFRESH_S
        streak, first_refusal = 0, 0.0
        while not stop.is_set():
            try:
                async with asyncio.timeout(self._probe_s):
                    await stop.wait()
            except TimeoutError:
                pass
            if stop.is_set():
                return
            if self._leading():
                leader, streak = None, 0
                continue
            now = clock.monotonic()
            try:
                if leader is None or (streak == 0 and now - read_at >= LEADER_REFRESH_S):
                    fresh = await self._leader_node()
                    read_at = now
                    if fresh != leader:
                        leader, streak = fresh, 0
            except BKeeperError as exc:
                log.info("crash detector: cannot read the election: %s", exc)
                continue
            if leader is None or leader[1] == self._own_url:
                streak = 0
                continue
            self.probes += 1
            if not await refused(leader[1]):
                streak = 0
                continue
            if streak == 0:
                first_refusal = clock.monotonic()
            streak += 1
            if streak >= REFUSALS_MIN and clock.monotonic() - first_refusal >= REFUSED_FOR_S_MIN:
                await self._depose(leader)
                leader, streak = None, 0

    async def _depose(self, leader: tuple[str, str]) -> None:
        path, url = leader
        try:
            await self._store.delete(path)
        except NoNodeError:
            return  # its session expired meanwhile
        except BKeeperError as exc:
            log.warning("crash detector: could not delete %s: %s", path, exc)
            return
        self.deposed += 1
        log.warning(
            "the leader at %s refused %d connections in a row: its election node %s deleted",
            url,
            REFUSALS_MIN,
            path,
        )
