"""CPU time of the server processes a benchmark drives, from ``/proc``: the local process
listening on each bookie's and ZooKeeper's port, whatever started it (our sandbox, a Java
bookie, a ZooKeeper of the system).

CPU per operation travels between machines where a rate does not (docs/benchmarks.md):
``bkeeper bench write`` reports the bookies' and ZooKeeper's user + system time over the
run, per acknowledged entry, next to the client's own.

Linux only: ``/proc/net/tcp{,6}`` gives the inode of the socket listening on a port,
``/proc/<pid>/fd`` the process that holds it, and ``/proc/<pid>/stat`` its CPU time (every
thread's). A server on another machine, or in a process this user may not look into, is not
measured: :func:`find_listeners` leaves it out and :class:`ServerCpu` says which were.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bkeeper.testing.benchmarks.cpu_split import cpu_ticks

__all__ = ["ServerCpu", "cpu_seconds", "find_listeners", "is_local_host", "split_host_port"]

_PROC = Path("/proc")
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def split_host_port(address: str) -> tuple[str, int] | None:
    """("host", port) of ``host:port`` (``[v6]:port`` too); None if it has no port."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def is_local_host(host: str) -> bool:
    """Whether ``host`` names this machine (loopback, its name, or one of its addresses)."""
    if host in ("localhost", "127.0.0.1", "::1", "0.0.0.0", "") or host.startswith("127."):
        return True
    try:
        wanted = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
        mine = {str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        return False
    return bool(wanted & (mine | {"127.0.0.1", "::1"})) or any(a.startswith("127.") for a in wanted)


def _listening_inodes(ports: set[int]) -> dict[int, int]:
    """Socket inode -> port, for the TCP sockets of this machine listening on ``ports``."""
    inodes: dict[int, int] = {}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
            for line in lines:
                fields = line.split()
                if len(fields) < 10 or fields[3] != _LISTEN:
                    continue
                port = int(fields[1].rpartition(":")[2], 16)
                if port in ports:
                    inodes[int(fields[9])] = port
    return inodes


def find_listeners(ports: Iterable[int]) -> dict[int, int]:
    """Port -> pid of the local process listening on it, for those of ``ports`` found."""
    inodes = _listening_inodes(set(ports))
    found: dict[int, int] = {}
    if not inodes:
        return found
    wanted = {f"socket:[{inode}]": port for inode, port in inodes.items()}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:  # gone, or another user's
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            port = wanted.get(target)
            if port is not None:
                found.setdefault(port, int(entry.name))
        if len(found) == len(set(wanted.values())):
            break
    return found


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads); None once it is gone."""
    ticks = cpu_ticks(pid)
    return None if ticks is None else ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class ServerCpu:
    """CPU seconds of named server processes between :meth:`start` and :meth:`stop`.

    ``ServerCpu({"bookies": [3181, 3182, 3183], "ZooKeeper": [2181]})``: each group's
    processes are found by the ports they listen on."""

    groups: Mapping[str, Iterable[int]]
    pids: dict[str, list[int]] = field(default_factory=dict)
    _before: dict[int, float] = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=dict)
    #: name -> (processes measured, ports of the group)
    coverage: dict[str, tuple[int, int]] = field(default_factory=dict)

    def start(self) -> None:
        ports = {port for group in self.groups.values() for port in group}
        by_port = find_listeners(ports)
        for name, group in self.groups.items():
            pids = sorted({by_port[p] for p in group if p in by_port})
            self.pids[name] = pids
        for pid in {pid for pids in self.pids.values() for pid in pids}:
            seconds = cpu_seconds(pid)
            if seconds is not None:
                self._before[pid] = seconds

    def stop(self) -> None:
        for name, pids in self.pids.items():
            total, measured = 0.0, 0
            for pid in pids:
                after = cpu_seconds(pid)
                before = self._before.get(pid)
                if after is not None and before is not None:
                    total += after - before
                    measured += 1
            self.coverage[name] = (measured, len(set(self.groups[name])))
            if measured:
                self.spent[name] = total

    def per_op_us(self, name: str, operations: int) -> float | None:
        """µs of ``name``'s CPU per operation; None when not measured."""
        spent = self.spent.get(name)
        return None if spent is None or not operations else spent / operations * 1e6
