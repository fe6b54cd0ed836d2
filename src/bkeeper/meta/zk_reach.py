"""What the ``zk://`` driver learns from kazoo about reaching ZooKeeper, and how it says it.

kazoo narrates every connection attempt: ``Connecting to ...`` at INFO, then ``Connection
dropped: socket connection error: Connection refused`` at WARNING, once per attempt (14 lines
before a 10 s connect gave up), through its own loggers, which Python's last-resort handler
prints for a library user who configured no logging. The driver hands kazoo a
:class:`KazooNarration` as its logger instead: every line goes on to kazoo's own logger at
DEBUG (``--verbose``, or ``logging.getLogger("kazoo").setLevel(logging.DEBUG)``, shows them;
a line carrying a traceback keeps its level: that is a bug, not the weather), and what the
lines say about each host is kept in a :class:`Reachability`. The driver logs one line per
change of the session's state itself (``bkeeper.meta.zk``) and words a failed connect from
the :class:`Reachability`: which hosts were tried and why each failed (its name does not
resolve, its connection was refused, timed out), e.g. ``cannot reach ZooKeeper at
127.0.0.1:2999: connection refused (tried for 2 s; is ZooKeeper running?)``.

kazoo calls in from its connection thread and the driver reads from the event loop: the
record is behind a lock. No kazoo import here (kazoo stays in :mod:`bkeeper.meta.zk`).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CONNECTED",
    "REFUSED",
    "TIMED_OUT",
    "UNRESOLVED",
    "KazooNarration",
    "Reachability",
    "socket_reason",
    "split_hosts",
]

#: What became of the last attempt at a host (``Reachability.outcome``).
CONNECTED = "connected"
REFUSED = "connection refused"
TIMED_OUT = "timed out"
UNRESOLVED = "name does not resolve"

#: kazoo's lines read here (its format strings, kazoo 2.9-2.10 ``protocol/connection.py``).
_CANNOT_RESOLVE = "Cannot resolve %s: %s"
_DROPPED = "Connection dropped: %s"
_TIME_OUT = "Connection time-out: %s"

_DNS_NO_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}

_HINTS = {REFUSED: "is ZooKeeper running?", UNRESOLVED: "check the host name"}


def split_hosts(hosts: str) -> list[tuple[str, int]]:
    """``"h1:p1,[::1]:p2,h3"`` as (host, port) pairs, as kazoo reads it (port 2181 if none)."""
    pairs = []
    for given in hosts.split("/", 1)[0].split(","):
        entry = given.strip()
        if not entry:
            continue
        host, colon, port = entry.rpartition(":")
        if not colon or host.endswith(":") or (host.startswith("[") != host.endswith("]")):
            host, port = entry, "2181"  # no port, or a bare IPv6 address
        pairs.append((host.strip("[]"), int(port) if port.isdigit() else 2181))
    return pairs


def socket_reason(error: BaseException) -> str:
    """A failed connect or lookup in a few words: ``connection refused``, ``timed out``..."""
    if isinstance(error, socket.gaierror):
        if error.errno in _DNS_NO_NAME:
            return UNRESOLVED
        return f"name lookup failed ({error.strerror or error})"
    if isinstance(error, TimeoutError):
        return TIMED_OUT
    if isinstance(error, OSError):
        if error.errno == errno.ECONNREFUSED:
            return REFUSED
        if error.strerror:
            return error.strerror[:1].lower() + error.strerror[1:]
        return TIMED_OUT  # kazoo raises a bare socket.error once its time for a host is spent
    cause = error.__context__  # kazoo's ConnectionDropped wraps the socket's error
    if cause is not None and cause is not error:
        return socket_reason(cause)
    return str(error) or type(error).__name__


class Reachability:
    """Per host of one store, what its last connection attempt came to, and since when
    every host has failed in a way that waiting will not mend (refused, unresolvable)."""

    def __init__(self, hosts: str) -> None:
        self._hosts = split_hosts(hosts)
        self._lock = threading.Lock()
        self._outcomes: dict[tuple[str, int], str] = {}
        #: Why the connection last dropped (for the "connection lost" line), if known.
        self.last_drop: str | None = None

    def unresolved(self, host: str, error: BaseException) -> None:
        reason = socket_reason(error)
        with self._lock:
            for pair in self._hosts:
                if pair[0] == host:
                    self._outcomes[pair] = reason

    def attempted(self, host: str, port: int, error: BaseException | None) -> None:
        """A TCP connect to ``host:port`` (the name as configured) succeeded, or failed so."""
        reason = CONNECTED if error is None else socket_reason(error)
        with self._lock:
            self._outcomes[(host, port)] = reason

    def dropped(self, error: BaseException) -> None:
        self.last_drop = socket_reason(error)

    def outcome(self, host: str, port: int) -> str | None:
        with self._lock:
            return self._outcomes.get((host, port))

    def hopeless(self) -> bool:
        """Every host failed its last attempt at once (refused, unresolvable, unreachable):
        not a slow server, nor one that answers TCP but gives no session."""
        with self._lock:
            outcomes = [self._outcomes.get(pair) for pair in self._hosts]
        return bool(outcomes) and all(o not in (None, CONNECTED, TIMED_OUT) for o in outcomes)

    def explain(self, hosts: str, waited_s: float) -> str:
        """Why no session came after ``waited_s``: one line naming each host and its cause.
        A host that took a TCP connection and gave no session: ``connected, but no session
        within N s``."""
        with self._lock:
            reasons = {pair: self._outcomes.get(pair) for pair in self._hosts}
        if not reasons or all(r == CONNECTED for r in reasons.values()):
            return (
                f"ZooKeeper at {hosts}: connected, but no session within {waited_s:g} s "
                "(is the server overloaded, paused, or not ZooKeeper?)"
            )
        worded = {pair: _worded(reason, waited_s) for pair, reason in reasons.items()}
        distinct = set(worded.values())
        if len(distinct) == 1:
            (reason,) = distinct
            return f"cannot reach ZooKeeper at {_names(reasons)}: {_hinted(reason, waited_s)}"
        parts = ", ".join(f"{_name(pair)} ({why})" for pair, why in worded.items())
        return f"cannot reach ZooKeeper at {parts} (tried for {waited_s:g} s)"


def _worded(reason: str | None, waited_s: float) -> str:
    if reason is None or reason == TIMED_OUT:
        return f"no answer within {waited_s:g} s"
    if reason == CONNECTED:
        return f"connected, but no session within {waited_s:g} s"
    return reason


def _hinted(reason: str, waited_s: float) -> str:
    if reason.startswith(("no answer", "no session")):
        return reason
    hint = _HINTS.get(reason)
    return f"{reason} (tried for {waited_s:g} s{'; ' + hint if hint else ''})"


def _name(pair: tuple[str, int]) -> str:
    host, port = pair
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _names(reasons: Mapping[tuple[str, int], object]) -> str:
    return ",".join(_name(pair) for pair in reasons)


class KazooNarration(logging.LoggerAdapter[logging.Logger]):
    """The logger handed to kazoo: its lines at DEBUG on its own logger (a traceback keeps
    its level), and what they say about the hosts into ``reach``."""

    def __init__(self, logger: logging.Logger, reach: Reachability) -> None:
        super().__init__(logger, {})
        self.reach = reach

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if msg == _CANNOT_RESOLVE and len(args) == 2 and isinstance(args[1], BaseException):
            self.reach.unresolved(str(args[0]), args[1])
        elif msg in (_DROPPED, _TIME_OUT) and args and isinstance(args[0], BaseException):
            self.reach.dropped(args[0])
        if not kwargs.get("exc_info"):
            level = min(level, logging.DEBUG)
        if self.logger.isEnabledFor(level):
            self.logger.log(level, msg, *args, **kwargs)

    def warn(self, msg: object, *args: Any, **kwargs: Any) -> None:  # kazoo still calls it
        self.log(logging.WARNING, msg, *args, **kwargs)
