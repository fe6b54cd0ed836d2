"""A run's trace: a hash of everything that happened, and the events worth reading.

Every byte the simulated network delivers (with its time and connection), every fault and
every operation of a workload goes into one BLAKE2b hash: two runs of one seed are the same
run exactly when their hashes are equal. Faults and operations are also kept as lines (up to
:data:`TRACE_LINES_MAX`, then only the newest), to print when a run fails.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Callable

__all__ = ["TRACE_LINES_MAX", "Trace"]

#: Event lines a trace keeps (the newest); the hash covers every event however many.
TRACE_LINES_MAX = 5_000


class Trace:
    def __init__(
        self, now: Callable[[], float], start_s: float = 0.0, lines_max: int = TRACE_LINES_MAX
    ) -> None:
        self._now = now
        self._start_s = start_s
        self._hash = hashlib.blake2b(digest_size=16)
        self.lines: collections.deque[str] = collections.deque(maxlen=lines_max)

    def delivered(self, connection: int, forward: bool, data: bytes | memoryview) -> None:
        """Bytes the network delivered (hashed, not kept as a line)."""
        self._hash.update(b"%d %d %.9f " % (connection, forward, self._now()))
        self._hash.update(data)

    def event(self, node: str, what: str) -> None:
        """A fault or an operation: hashed and kept as a line."""
        line = f"{self._now() - self._start_s:10.4f} {node:>10} {what}"
        self._hash.update(line.encode())
        self.lines.append(line)

    def request(self, node: str, what: str) -> None:
        """A metadata request applied (hashed, not kept as a line)."""
        self._hash.update(b"%.9f %s %s" % (self._now(), node.encode(), what.encode()))

    def note(self, what: bytes) -> None:
        """Hashed only (an outcome worth comparing between runs, too many to print)."""
        self._hash.update(what)

    @property
    def digest(self) -> str:
        return self._hash.hexdigest()
