"""The connection table's rules and the rate-limited log, with fake connections and time."""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.server.config import BookieConfig
from bkeeper.server.connections import (
    CONNECTIONS_MAX_AUTO_CAP,
    ConnectionTable,
    connections_max_for,
)
from bkeeper.server.ratelimit import RateLimitedLog, TokenBucket
from bkeeper.testing.clock import FakeClock

MIB = 1024 * 1024


def move_to(clock: FakeClock, seconds: float) -> None:
    """Advance ``clock`` to the monotonic time ``seconds``."""
    clock.advance(seconds - clock.monotonic())


@dataclass(eq=False)
class FakeConnection:
    peer: str
    in_flight: int = 0
    closed: bool = False
    active: bool = False
    last_seen: float = 0.0
    accepted_at: float = 0.0
    partial_bytes: int = 0
    handshaken: bool = False

    @property
    def busy(self) -> bool:
        return self.in_flight > 0

    def abort_transport(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True


def table(clock: FakeClock, **overrides: object) -> ConnectionTable:
    config = BookieConfig(data_dir="-", **overrides)  # type: ignore[arg-type]
    return ConnectionTable(config, clock, nofile_soft=20_000)


def admit(t: ConnectionTable, clock: FakeClock, name: str) -> FakeConnection:
    conn = FakeConnection(name)
    assert t.admit(conn)
    clock.advance(1)
    return conn


def test_limit_from_the_descriptor_limit() -> None:
    assert connections_max_for(20_000) == 19_744
    assert connections_max_for(1024) == 768
    assert connections_max_for(100) == 64
    assert connections_max_for(resource.RLIM_INFINITY) == CONNECTIONS_MAX_AUTO_CAP
    assert connections_max_for(10_000_000) == CONNECTIONS_MAX_AUTO_CAP
    clock = FakeClock()
    assert table(clock).connections_max == 19_744
    assert table(clock, connections_max=7).connections_max == 7
    with pytest.raises(ConfigError, match="connections_max"):
        BookieConfig(data_dir="-", connections_max=-1)
    with pytest.raises(ConfigError, match="partial_frames_bytes_max"):
        BookieConfig(data_dir="-", partial_frames_bytes_max=MIB)
    with pytest.raises(ConfigError, match="connection_idle_timeout_ms"):
        BookieConfig(data_dir="-", connection_idle_timeout_ms=0)


def test_at_the_limit_the_longest_idle_goes_and_busy_ones_stay() -> None:
    clock = FakeClock()
    t = table(clock, connections_max=3)
    a, b, c = (admit(t, clock, name) for name in "abc")
    a.in_flight = 1  # the oldest, but busy
    b.active = True  # received something since the last sweep
    d = admit(t, clock, "d")
    assert (a.closed, b.closed, c.closed) == (False, False, True)
    e = admit(t, clock, "e")  # inactive d goes before active b
    assert (b.closed, d.closed) == (False, True)
    t.sweep()  # b: seen active at this sweep, e: accepted before it
    assert b.last_seen == clock.monotonic() and not b.active
    admit(t, clock, "f")
    assert (b.closed, e.closed) == (False, True)
    admit(t, clock, "g")
    assert b.closed
    assert len(t) == 3 and t.evicted == 4


def test_a_connection_active_after_ranking_is_ranked_again() -> None:
    clock = FakeClock()
    t = table(clock, connections_max=3)
    a, b, c = (admit(t, clock, name) for name in "abc")
    admit(t, clock, "d")  # ranks a, b, c; a goes
    b.active = True  # after the ranking
    admit(t, clock, "e")  # b was ranked next but is active now: c goes
    assert (a.closed, b.closed, c.closed) == (True, False, True)


def test_at_the_limit_with_every_connection_busy_a_new_one_is_refused() -> None:
    clock = FakeClock()
    t = table(clock, connections_max=2)
    a, b = admit(t, clock, "a"), admit(t, clock, "b")
    a.in_flight = b.in_flight = 1
    assert not t.admit(FakeConnection("c"))
    assert t.refused == 1 and not a.closed and not b.closed
    b.in_flight = 0  # idle now, but found only from the next sweep on (no scan per refusal)
    assert not t.admit(FakeConnection("c"))
    t.sweep()
    assert t.admit(FakeConnection("c"))
    assert b.closed


def test_sweep_closes_silent_and_idle_connections_but_not_busy_ones() -> None:
    clock = FakeClock()
    t = table(clock, connection_handshake_timeout_ms=10_000, connection_idle_timeout_ms=60_000)
    silent, trickling, idle, busy = (admit(t, clock, name) for name in ("s", "t", "i", "b"))
    idle.handshaken = busy.handshaken = True
    busy.in_flight = 1
    move_to(clock, silent.accepted_at + 9.9)
    trickling.active = True  # it keeps sending; its first frame never ends
    t.sweep()
    assert not silent.closed
    move_to(clock, silent.accepted_at + 10)
    trickling.active = True
    t.sweep()
    assert (silent.closed, trickling.closed, idle.closed) == (True, False, False)
    move_to(clock, trickling.accepted_at + 10)
    trickling.active = True
    t.sweep()
    assert trickling.closed
    idle.active = True  # a request and its answer
    t.sweep()
    seen = clock.monotonic()
    move_to(clock, seen + 59.9)
    t.sweep()
    assert not idle.closed
    move_to(clock, seen + 60)
    t.sweep()
    assert (idle.closed, busy.closed) == (True, False)
    assert (t.closed_handshake, t.closed_idle, len(t)) == (2, 1, 1)


def test_partial_frames_over_budget_close_stalled_holders_first() -> None:
    clock = FakeClock()
    t = table(clock, partial_frames_bytes_max=10 * MIB)
    a, b, c = (admit(t, clock, name) for name in "abc")
    t.partial_changed(a, 4 * MIB)
    t.partial_changed(b, 5 * MIB)
    clock.advance(5)  # a and b stall
    c.active = True
    t.partial_changed(c, 3 * MIB)  # 12 MiB: b, the largest stalled, goes
    assert (a.closed, b.closed, c.closed) == (False, True, False)
    assert t.partial_bytes == 7 * MIB
    t.partial_changed(c, 7 * MIB)  # 11 MiB: a is stalled and goes
    assert (a.closed, c.closed, t.partial_bytes) == (True, False, 7 * MIB)
    d = admit(t, clock, "d")
    d.active = True
    t.partial_changed(d, 4 * MIB)  # nothing stalled: the one over the budget goes
    assert (c.closed, d.closed, t.partial_bytes) == (False, True, 7 * MIB)
    t.partial_changed(c, 0)
    assert t.partial_bytes == 0 and t.closed_over_budget == 3


def test_a_holder_is_stalled_only_a_sweep_interval_after_it_was_last_seen() -> None:
    clock = FakeClock()
    t = table(clock, partial_frames_bytes_max=10 * MIB)
    a, b = admit(t, clock, "a"), admit(t, clock, "b")
    t.partial_changed(a, 6 * MIB)
    a.active = True
    t.sweep()  # a seen active now
    clock.advance(t.sweep_interval_s / 2)
    b.active = True
    t.partial_changed(b, 6 * MIB)  # a not stalled long enough: b goes
    assert (a.closed, b.closed) == (False, True)


def test_a_closed_connection_gives_its_partial_bytes_back() -> None:
    clock = FakeClock()
    t = table(clock)
    a = admit(t, clock, "a")
    t.partial_changed(a, 3 * MIB)
    t.close(a, "test")
    t.discard(a)  # connection_lost after the close: nothing twice
    assert (t.partial_bytes, len(t), a.partial_bytes) == (0, 0, 0)


def test_token_bucket() -> None:
    bucket = TokenBucket(10, 3, now=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.take(0.1) and not bucket.take(0.1)
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]
    with pytest.raises(ConfigError):
        TokenBucket(0, 3, now=0.0)


def test_rate_limited_log_counts_what_it_drops(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    logger = logging.getLogger("test.ratelimit")
    limited = RateLimitedLog(logger, rate_per_s=10, burst=2, clock=clock, what="lines about x")
    with caplog.at_level(logging.INFO, logger="test.ratelimit"):
        for i in range(5):
            limited.warning("bad client %d", i)
        limited.flush()  # no token yet: the count waits
        clock.advance(0.1)
        limited.info("bad client %d", 5)
        for i in range(6, 9):
            limited.warning("bad client %d", i)
        clock.advance(0.1)
        limited.flush()
        limited.flush()
    assert [r.getMessage() for r in caplog.records] == [
        "bad client 0",
        "bad client 1",
        "bad client 5 (3 more lines about x suppressed)",
        "3 lines about x suppressed",
    ]
    assert (limited.logged, limited.suppressed) == (4, 0)
