"""HTTP between simulated nodes: an aiohttp connector whose connections go through the
simulated network (:mod:`bkeeper.sim.net`), for the kv store's clients and members.

aiohttp resolves host names and makes its own sockets before it asks the loop for a
connection; both are ports of ``aiohttp.TCPConnector`` (``resolver``, ``socket_factory``). The
resolver answers a node's name as its address (the simulated network routes by name), and
the socket factory hands out :class:`~bkeeper.sim.loop.SimSocket` s, which the simulator's
loop connects over its network.

Two of aiohttp's orders follow memory addresses (sets of objects), which differ from one
process history to the next and would make a seed's run depend on the seeds run before it
in the same process: the waiters of a host name being resolved (so the connector keeps no
DNS cache: resolving here is immediate) and the connections it closes when closed (so its
set of connections in use is an insertion-ordered one).
"""

from __future__ import annotations

import socket
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from bkeeper.sim.loop import SimSocket

__all__ = ["sim_connector"]

#: Connections one client keeps at most (as the kv client's own TCP connector).
CONNECTIONS_MAX = 100


class _NodeResolver(AbstractResolver):
    """A node's name is its address."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host, host=host, port=port, family=socket.AF_INET, proto=0, flags=0
            )
        ]

    async def close(self) -> None:
        pass


def _socket(addr_info: Any) -> Any:
    return SimSocket()


class _OrderedSet(dict[Any, None]):
    """The part of ``set`` aiohttp's connector uses, in insertion order."""

    def add(self, item: Any) -> None:
        self[item] = None

    def discard(self, item: Any) -> None:
        self.pop(item, None)

    def remove(self, item: Any) -> None:
        del self[item]


class _SimConnector(aiohttp.TCPConnector):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(getattr(self, "_acquired", None), set):
            raise RuntimeError("aiohttp's connector changed: no _acquired set to order")
        self._acquired = _OrderedSet()  # type: ignore[assignment]


def sim_connector() -> aiohttp.BaseConnector:
    """A connector for a ``KvClient`` (or any aiohttp session) on a simulated node."""
    return _SimConnector(
        limit=CONNECTIONS_MAX,
        resolver=_NodeResolver(),
        socket_factory=_socket,
        use_dns_cache=False,
    )
