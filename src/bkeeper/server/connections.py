"""The bookie's connections as a whole: the limits no single connection can enforce.

Rules (each a named limit in :class:`~bkeeper.server.config.BookieConfig`):

- **Connection limit** ``connections_max`` (0: derived from the process's soft
  ``RLIMIT_NOFILE``, less :data:`FD_HEADROOM` descriptors for the bookie's own files, at most
  :data:`CONNECTIONS_MAX_AUTO_CAP`). A connection accepted at the limit closes the
  longest-idle connection that has nothing in flight (a long-poll read counts as in flight),
  and is refused only when every open connection has requests in flight (a scan that finds
  them all busy is not repeated before the next sweep, so that a flood of connection
  attempts costs one scan per sweep, not one per attempt).
- **Handshake timeout** ``connection_handshake_timeout_ms``: a connection whose first frame
  is not complete that long after it was accepted is closed (however much it trickles).
- **Idle timeout** ``connection_idle_timeout_ms``: a connection that received and sent
  nothing that long and has nothing in flight is closed, quietly: a client reconnects on its
  next request.
- **Partial-frame budget** ``partial_frames_bytes_max``: the bytes buffered in incomplete
  frames, summed over all connections. A connection whose data takes the sum over it first
  closes stalled holders of incomplete frames (nothing received for a sweep interval or
  more), largest first; if that is not enough, it is closed itself. Closing rather than pausing
  cannot deadlock: a paused connection would wait for room that only stalled peers hold.

Time: one sweep every :attr:`ConnectionTable.sweep_interval_s` (a quarter of the shorter
timeout, at most :data:`SWEEP_INTERVAL_S_MAX`) looks at every connection; there is no timer
per connection or request, and no clock read per chunk: a connection only sets ``active`` on
each chunk it receives and each batch it writes, and the sweep turns that mark into
``last_seen`` (a time at or after its last activity). Idle times measured from it are thus
never overstated, and timeouts are enforced within two sweep intervals. Ranking for the
connection limit puts connections active since the last sweep last, and the others by
``last_seen``.

Every close for a client's misbehaviour logs one line (peer, reason) through
:class:`~bkeeper.server.ratelimit.RateLimitedLog` (``client_log``); idle closes log at debug
level; requests answered EBADREQ log through a limit of their own (``request_log``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import resource
from typing import Protocol

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.metrics import Counter
from bkeeper.common.tasks import within
from bkeeper.server.config import BookieConfig
from bkeeper.server.ratelimit import RateLimitedLog

__all__ = [
    "CONNECTIONS_MAX_AUTO_CAP",
    "FD_HEADROOM",
    "LISTEN_BACKLOG",
    "ConnectionTable",
    "Member",
    "connections_max_for",
]

log = logging.getLogger(__name__)

#: File descriptors left for the bookie's own files (journal, entry logs and their read
#: handles, index, ZooKeeper session, standard streams) when the limit is derived.
FD_HEADROOM = 256
#: A derived connection limit never exceeds this (memory of idle connections stays bounded).
CONNECTIONS_MAX_AUTO_CAP = 65_536
#: ... nor falls below this, however low the descriptor limit is.
CONNECTIONS_MAX_AUTO_MIN = 64
#: The sweep runs at least this often (and four times per shortest timeout).
SWEEP_INTERVAL_S_MAX = 1.0
SWEEP_INTERVAL_S_MIN = 0.005
#: Connections the kernel completes before the bookie accepts them (capped by the kernel's
#: somaxconn, as Netty's default is): asyncio's default of 100 makes a burst of connection
#: attempts wait for SYN retransmits (1 s, then 3 s...).
LISTEN_BACKLOG = 4096
#: Idle connections ranked at once when a new connection needs room.
VICTIM_BATCH = 64


def connections_max_for(nofile_soft: int) -> int:
    """The connection limit derived from a soft ``RLIMIT_NOFILE`` value."""
    if nofile_soft == resource.RLIM_INFINITY or nofile_soft < 0:
        return CONNECTIONS_MAX_AUTO_CAP
    return max(CONNECTIONS_MAX_AUTO_MIN, min(CONNECTIONS_MAX_AUTO_CAP, nofile_soft - FD_HEADROOM))


class Member(Protocol):
    """What the table needs of a connection (``BookieConnection``)."""

    peer: str
    closed: bool
    active: bool
    last_seen: float
    accepted_at: float
    partial_bytes: int
    requests_in_flight: int

    @property
    def handshaken(self) -> bool:
        """Its first frame arrived and chose a protocol."""
        ...

    @property
    def busy(self) -> bool:
        """Requests in flight (long-poll reads included) or responses about to be written."""
        ...

    def abort_transport(self) -> None: ...

    def close(self) -> None:
        """Write what is queued, then close (bookie shutdown)."""
        ...


def _idle_rank(conn: Member) -> tuple[bool, float, bool]:
    # Longest idle first; at equal idleness, connections that never sent a valid frame.
    return (conn.active, conn.last_seen, conn.handshaken)


class ConnectionTable:
    """Open connections, their limits and the sweep that enforces the timeouts."""

    def __init__(
        self,
        config: BookieConfig,
        clock: Clock | None = None,
        nofile_soft: int | None = None,
    ) -> None:
        if nofile_soft is None:
            nofile_soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.connections_max = config.connections_max or connections_max_for(nofile_soft)
        self.partial_frames_bytes_max = config.partial_frames_bytes_max
        self._handshake_s = config.connection_handshake_timeout_ms / 1000.0
        self._idle_s = config.connection_idle_timeout_ms / 1000.0
        self.sweep_interval_s = max(
            SWEEP_INTERVAL_S_MIN,
            min(SWEEP_INTERVAL_S_MAX, self._handshake_s / 4, self._idle_s / 4),
        )
        self._clock: Clock = default_clock() if clock is None else clock
        rate, burst = config.client_error_log_lines_per_s, config.client_error_log_burst
        #: Lines about connections closed or refused for a client's misbehaviour.
        self.client_log = RateLimitedLog(log, rate, burst, self._clock, "lines about connections")
        #: Lines about requests answered EBADREQ: a budget of their own, so that a flood of
        #: them does not hide the connections closed.
        self.request_log = RateLimitedLog(log, rate, burst, self._clock, "lines about bad requests")
        self._connections: dict[Member, None] = {}  # ordered: oldest first, every run
        self.partial_bytes = 0
        self.sweeps = 0
        # Idle (inactive) connections ranked for eviction, most idle last: (last_seen, conn).
        self._victims: list[tuple[float, Member]] = []
        self._victims_none_at = -1  # the sweep in whose period no victim was found
        self._stalled_scanned_at = -1  # the sweep in whose period the stalled scan fell short
        self.closed_idle = 0
        self.closed_handshake = 0
        self.closed_over_budget = 0
        self.evicted = 0
        self.refused = 0
        #: Frames over ``max_frame_bytes`` answered EBADREQ (connection kept); the bookie
        #: registers it as ``bkeeper_bookie_oversized_frames_total`` when it keeps metrics.
        self.oversized_frames = Counter()

    def __len__(self) -> int:
        return len(self._connections)

    @property
    def connections(self) -> list[Member]:
        return list(self._connections)

    # -- admission -----------------------------------------------------------------------
    def admit(self, conn: Member) -> bool:
        """Take ``conn`` in, closing the longest-idle connection at the limit; False: refuse."""
        conn.accepted_at = conn.last_seen = self._clock.monotonic()
        if len(self._connections) >= self.connections_max:
            victim = self._victim()
            if victim is None:
                self.refused += 1
                self.client_log.warning(
                    "refusing connection from %s: %d connections open, all with requests in flight",
                    conn.peer,
                    len(self._connections),
                )
                return False
            self.evicted += 1
            self.close(
                victim,
                f"connection limit {self.connections_max} reached, closing the longest idle",
                logging.INFO,
            )
        self._connections[conn] = None
        return True

    def _victim(self) -> Member | None:
        # Idle connections ranked earlier come first: connections admitted since are newer.
        while self._victims:
            last_seen, conn = self._victims.pop()
            if (
                conn in self._connections
                and not conn.busy
                and not conn.active
                and conn.last_seen == last_seen
            ):
                return conn
        if self._victims_none_at == self.sweeps:
            return None  # all busy a moment ago: no new scan before the next sweep
        ranked = heapq.nsmallest(
            VICTIM_BATCH, (c for c in self._connections if not c.busy), key=_idle_rank
        )
        if not ranked:
            self._victims_none_at = self.sweeps
            return None
        idle = [c for c in ranked if not c.active]
        if not idle:
            return ranked[0]  # every candidate active since the last sweep: nothing to keep
        self._victims = [(c.last_seen, c) for c in reversed(idle[1:])]
        return idle[0]

    # -- closing -------------------------------------------------------------------------
    def close(self, conn: Member, reason: str, level: int = logging.WARNING) -> None:
        """Close ``conn`` at once, logging one (rate-limited) line at ``level`` if >= INFO."""
        if conn.closed:
            return
        if level >= logging.INFO:
            self.client_log.log(level, "closing connection from %s: %s", conn.peer, reason)
        else:
            log.log(level, "closing connection from %s: %s", conn.peer, reason)
        self.discard(conn)
        conn.abort_transport()

    def restart_handshake(self, conn: Member) -> None:
        """``conn`` finished its TLS handshake: its next frame (choosing the protocol again)
        is due within the handshake timeout from now."""
        conn.accepted_at = conn.last_seen = self._clock.monotonic()

    def discard(self, conn: Member) -> None:
        """Forget ``conn`` (closed), releasing its share of the partial-frame budget."""
        self._connections.pop(conn, None)
        if conn.partial_bytes:
            self.partial_bytes -= conn.partial_bytes
            conn.partial_bytes = 0

    # -- partial frames ------------------------------------------------------------------
    def partial_changed(self, conn: Member, partial: int) -> None:
        """``conn`` now buffers ``partial`` bytes of an incomplete frame; may close it.
        Called once per chunk received whose incomplete frame changed size: kept cheap."""
        total = self.partial_bytes + partial - conn.partial_bytes
        self.partial_bytes = total
        conn.partial_bytes = partial
        if total > self.partial_frames_bytes_max:
            self._over_budget(conn)

    def _over_budget(self, conn: Member) -> None:
        budget = self.partial_frames_bytes_max
        if self._stalled_scanned_at != self.sweeps:
            now = self._clock.monotonic()
            quiet_s = self.sweep_interval_s
            stalled = [
                c
                for c in self._connections
                if c.partial_bytes and not c.active and now - c.last_seen >= quiet_s
            ]
            stalled.sort(key=lambda c: c.partial_bytes, reverse=True)
            for victim in stalled:
                if self.partial_bytes <= budget:
                    break
                self.closed_over_budget += 1
                self.close(
                    victim,
                    f"incomplete frame of {victim.partial_bytes} bytes stalled while "
                    f"incomplete frames are over the budget of {budget} bytes",
                )
            if self.partial_bytes <= budget:
                return
            self._stalled_scanned_at = self.sweeps  # no new scan before the next sweep
        self.closed_over_budget += 1
        self.close(
            conn,
            f"incomplete frames of all connections over the budget of {budget} bytes "
            f"({conn.partial_bytes} bytes from this one)",
        )

    # -- time ----------------------------------------------------------------------------
    def sweep(self) -> None:
        """Close connections past the handshake or idle timeout; one pass over all."""
        now = self._clock.monotonic()
        self.sweeps += 1
        handshake_s, idle_s = self._handshake_s, self._idle_s
        for conn in list(self._connections):
            if not conn.handshaken and now - conn.accepted_at >= handshake_s:
                self.closed_handshake += 1
                self.close(conn, f"no valid first frame within {handshake_s * 1000:.0f} ms")
            elif conn.active:
                conn.active = False
                conn.last_seen = now
            elif now - conn.last_seen >= idle_s and not conn.busy:
                self.closed_idle += 1
                self.close(conn, f"idle for {idle_s * 1000:.0f} ms", logging.DEBUG)
        self.client_log.flush()
        self.request_log.flush()

    async def run(self, stopping: asyncio.Event) -> None:
        """Sweep every ``sweep_interval_s`` until ``stopping`` is set."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await within(stopping.wait(), self.sweep_interval_s)
            if not stopping.is_set():
                self.sweep()
