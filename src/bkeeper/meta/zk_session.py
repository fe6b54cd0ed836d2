"""The ``zk://`` driver's session, told apart from kazoo: starting the client and waiting for
its first session, and one log line per change of the session's state.

Nothing here imports kazoo (:mod:`bkeeper.meta.zk` does, and maps kazoo's states onto
:class:`~bkeeper.meta.store.SessionState` before they come here). Time comes from a
:class:`~bkeeper.common.clock.Clock`. Lines go to the ``bkeeper.meta.zk`` logger, the
driver's (docs/operations.md names it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from bkeeper.common.clock import Clock
from bkeeper.common.errors import ConnectionLossError
from bkeeper.meta.store import SessionState, StoreConfig
from bkeeper.meta.zk_reach import Reachability

__all__ = ["CONNECT_FIRST_POLL_S", "CONNECT_POLL_S", "SessionNarration", "start_session"]

_log = logging.getLogger("bkeeper.meta.zk")

#: How often a connect looks whether it has a session, or cause to give up: first after
#: ``CONNECT_FIRST_POLL_S``, then at twice the interval each time up to ``CONNECT_POLL_S``
#: (a local ZooKeeper gives a session in 5-15 ms: a first look at 50 ms cost every command
#: ~45 ms; docs/benchmarks.md, "CLI start-up").
CONNECT_POLL_S = 0.05
CONNECT_FIRST_POLL_S = 0.005


class _Client(Protocol):
    @property
    def connected(self) -> bool: ...

    def start_async(self) -> object: ...


async def start_session(
    client: _Client,
    stop: Callable[[], None],
    hosts: str,
    config: StoreConfig,
    reach: Reachability,
    clock: Clock,
) -> None:
    """Start ``client`` and wait for its first session (:func:`_wait_connected`). On any
    failure, a cancel too, ``stop()`` it (blocking, in a thread) and raise the failure."""
    try:
        await _start(client)
        await _wait_connected(client, hosts, config, reach, clock)
    except BaseException as exc:
        await _discard(stop, hosts, exc)
        raise


async def _start(client: _Client) -> None:
    # kazoo's start runs in a thread that a cancel cannot stop: the client is stopped
    # only after it has finished (stopping it half-started fails inside kazoo).
    starting = asyncio.ensure_future(asyncio.to_thread(client.start_async))
    try:
        await asyncio.shield(starting)
    except asyncio.CancelledError as cancel:
        while not starting.done():
            with contextlib.suppress(asyncio.CancelledError):  # ``cancel`` goes on
                await asyncio.wait({starting})
        if not starting.cancelled() and (error := starting.exception()) is not None:
            cancel.add_note(f"the ZooKeeper client's start failed meanwhile: {error!r}")
        raise


async def _discard(stop: Callable[[], None], hosts: str, cause: BaseException) -> None:
    """Stop the client of a connect that failed or was cancelled, without letting the
    clean-up replace ``cause`` (a cancellation above all: a kazoo ``stop`` that fails
    would otherwise be taken for the connect's own error, and the cancel lost)."""
    try:
        await asyncio.shield(asyncio.to_thread(stop))
    except Exception as cleanup:  # reported on ``cause``, which goes on
        _log.warning("ZooKeeper %s: stopping an unfinished client failed: %r", hosts, cleanup)
        cause.add_note(f"stopping the unfinished ZooKeeper client also failed: {cleanup!r}")


async def _wait_connected(
    client: _Client, hosts: str, config: StoreConfig, reach: Reachability, clock: Clock
) -> None:
    """Wait until ``client`` (started) has a session. ``ConnectionLossError`` naming each
    host and why it failed after ``connect_timeout_ms``, or after ``unreachable_timeout_ms``
    when every host refuses the connection or does not resolve."""
    started = clock.monotonic()
    deadline = started + config.connect_timeout_ms / 1000
    give_up = started + config.unreachable_timeout_ms / 1000
    poll_s = CONNECT_FIRST_POLL_S
    while not client.connected:
        now = clock.monotonic()
        if now >= deadline:
            waited_ms = config.connect_timeout_ms
        elif now >= give_up and reach.hopeless():
            waited_ms = config.unreachable_timeout_ms
        else:
            await asyncio.sleep(poll_s)
            poll_s = min(poll_s * 2, CONNECT_POLL_S)
            continue
        raise ConnectionLossError(reach.explain(hosts, waited_ms / 1000))


class SessionNarration:
    """One line per change of the session's state (kazoo's own narration is DEBUG): lost and
    back at INFO (the store reconnects by itself, and its callers retry); expired at WARNING
    (the session's ephemeral nodes, locks and watches are gone); and, once, at WARNING, a
    connection still lost a session timeout later. ``still_away()`` says whether the store
    is still without its connection (and not closing) when that warning is due."""

    def __init__(
        self,
        hosts: str,
        session_timeout_s: float,
        reach: Reachability,
        clock: Clock,
        still_away: Callable[[], bool],
    ) -> None:
        self._hosts = hosts
        self._session_timeout_s = session_timeout_s
        self._reach = reach
        self._clock = clock
        self._still_away = still_away
        self._lost_at = 0.0
        self._away_warning: asyncio.TimerHandle | None = None

    def changed(self, before: SessionState, after: SessionState, reconnect: bool) -> None:
        """The session goes from ``before`` to ``after`` (``reconnect``: it had one before)."""
        if after is SessionState.SUSPENDED and before is SessionState.CONNECTED:
            self._lost_at = self._clock.monotonic()
            why = self._reach.last_drop
            because = f" ({why})" if why else ""
            _log.info("ZooKeeper %s: connection lost%s, reconnecting", self._hosts, because)
            self.close()
            away_s = self._session_timeout_s
            loop = asyncio.get_running_loop()
            self._away_warning = loop.call_later(away_s, self._warn_away, away_s)
        elif after is SessionState.CONNECTED and before is SessionState.SUSPENDED:
            self.close()
            if reconnect:
                away_s = self._clock.monotonic() - self._lost_at
                _log.info("ZooKeeper %s: reconnected after %.1f s", self._hosts, away_s)
        elif after is SessionState.EXPIRED and before is not SessionState.EXPIRED:
            _log.warning(
                "ZooKeeper %s: session expired (its ephemeral nodes and watches are gone); "
                "opening a new one",
                self._hosts,
            )

    def close(self) -> None:
        """Forget the pending warning, if any."""
        if self._away_warning is not None:
            self._away_warning.cancel()
            self._away_warning = None

    def _warn_away(self, away_s: float) -> None:
        """Still no connection a session timeout after it was lost: the servers expire the
        session meanwhile (its ephemeral nodes go), which matters: said once, at WARNING."""
        self._away_warning = None
        if self._still_away():
            why = self._reach.last_drop
            _log.warning(
                "ZooKeeper %s: no connection for %g s%s: its session expires on the servers; "
                "still trying",
                self._hosts,
                away_s,
                f" ({why})" if why else "",
            )
