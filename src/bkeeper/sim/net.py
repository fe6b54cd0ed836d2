"""The simulated network: TCP between the nodes of one :class:`~bkeeper.sim.loop.SimLoop`.

The production modules keep their own TCP code (``loop.create_connection`` in the client,
``loop.create_server`` in the bookie, asyncio protocols on both ends): the loop hands those
calls here, and this module plays the kernel's part with timers. What TCP promises is kept,
and nothing more:

- bytes of one direction of one connection arrive in order, exactly once, but in chunks of
  its choosing (a write may arrive split in two), after a latency drawn per chunk from the
  run's random generator (a slow node's links take ``slow`` times longer);
- a **partition** (one way or both) holds the bytes of the directions it cuts; they flow,
  in order, once it heals (TCP retransmits). A connection attempt across a cut gets no
  answer: it retries its SYN every second and fails after :data:`CONNECT_GIVE_UP_S`
  (callers time out first);
- a **killed** node (its process died) loses everything; its peers see the connection
  reset after the bytes it had already sent; connecting to it is refused until a new
  listener binds its port;
- ``pause_reading`` holds what arrives until ``resume_reading``; a writer whose bytes in
  flight pass the high-water mark gets ``pause_writing``, and ``resume_writing`` once they
  drop below the low one.

Delivery callbacks run in the receiving node's context, so tasks a protocol starts belong
to its node (:data:`~bkeeper.sim.loop.NODE`). Every delivered chunk goes into the run's
:class:`~bkeeper.sim.trace.Trace`.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bkeeper.sim.loop import NODE, SimLoop
from bkeeper.sim.trace import Trace

__all__ = ["CONNECT_GIVE_UP_S", "NetConfig", "SimNetwork"]

#: A connection attempt across a partition gives up after this long (Linux: ~127 s of SYN
#: retries; callers' own timeouts are far shorter).
CONNECT_GIVE_UP_S = 127.0
#: How often a blocked connection attempt retries its SYN.
SYN_RETRY_S = 1.0
#: Later chunks of one direction arrive at least this much after earlier ones (keeps the
#: timer heap's order strict, so equal times never decide an order).
_ORDER_S = 1e-7


@dataclass(frozen=True)
class NetConfig:
    """The network's latencies (one way, seconds) and chunking."""

    latency_min_s: float = 0.000_05
    latency_max_s: float = 0.001
    #: chance that a write arrives in two chunks
    split_chance: float = 0.05
    #: per-writer bytes in flight above which ``pause_writing`` is called
    write_high_bytes: int = 4 * 1024 * 1024


@dataclass
class _Direction:
    """One direction of one connection."""

    conn: _Connection
    forward: bool
    src: str
    dst: str
    context: contextvars.Context  # the receiver's
    last_s: float = 0.0
    in_flight: int = 0  # bytes sent and not yet handed to the receiver
    held: list[bytes] = field(default_factory=list)  # cut off by a partition
    paused: list[bytes] = field(default_factory=list)  # arrived while reading paused
    reading_paused: bool = False
    eof_pending: bool = False  # close(): after the bytes, the peer's connection_lost
    dropped: bool = False  # reset: nothing more of this direction arrives


class _Connection:
    def __init__(
        self,
        net: SimNetwork,
        conn_id: int,
        client: str,
        server: str,
        server_port: int,
        client_port: int,
    ) -> None:
        self.net = net
        self.id = conn_id
        self.client, self.server = client, server
        self.forward = _Direction(self, True, client, server, net.loop.node_context(server))
        self.backward = _Direction(self, False, server, client, net.loop.node_context(client))
        self.client_end = _SimTransport(self, True, (server, server_port))
        self.server_end = _SimTransport(self, False, (client, client_port))
        self.broken = False  # reset or closed both ways: nothing more is delivered

    def end(self, client_side: bool) -> _SimTransport:
        return self.client_end if client_side else self.server_end


class _SimTransport(asyncio.Transport):
    def __init__(self, conn: _Connection, client_side: bool, peer: tuple[str, int]) -> None:
        super().__init__()
        self._conn = conn
        self._client_side = client_side
        self._peer = peer
        self.protocol: asyncio.Protocol | None = None
        self._closing = False
        self._lost = False
        self._high = conn.net.config.write_high_bytes
        self._low = self._high // 4
        self._writing_paused = False

    @property
    def _out(self) -> _Direction:
        return self._conn.forward if self._client_side else self._conn.backward

    @property
    def _in(self) -> _Direction:
        return self._conn.backward if self._client_side else self._conn.forward

    # -- asyncio.Transport --------------------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._peer
        if name == "sockname":
            return (self._out.src, 0)
        return default

    def is_closing(self) -> bool:
        return self._closing or self._conn.broken

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._conn.broken or not data:
            return
        self._conn.net._send(self._out, bytes(data))
        if not self._writing_paused and self._out.in_flight > self._high:
            self._writing_paused = True
            if self.protocol is not None:
                self.protocol.pause_writing()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        """Graceful: what was written still arrives, then the peer sees the end."""
        if self._closing or self._conn.broken:
            return
        self._closing = True
        self._conn.net._close(self._out)
        self._conn.net._lost_soon(self, None)

    def abort(self) -> None:
        """Reset: nothing more either way; both ends see the connection lost."""
        if self._conn.broken:
            return
        self._closing = True
        self._conn.net._reset(self._conn, from_client=self._client_side)

    def pause_reading(self) -> None:
        self._in.reading_paused = True

    def resume_reading(self) -> None:
        direction = self._in
        if not direction.reading_paused:
            return
        direction.reading_paused = False
        waiting, direction.paused = direction.paused, []
        for chunk in waiting:
            self._conn.net._hand_over(direction, chunk)

    def is_reading(self) -> bool:
        return not self._in.reading_paused

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high = high if high is not None else self._conn.net.config.write_high_bytes
        self._low = low if low is not None else self._high // 4

    def get_write_buffer_size(self) -> int:
        return self._out.in_flight

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self._low, self._high)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol

    # -- the network's side ---------------------------------------------------------------
    def drained(self) -> None:
        if self._writing_paused and self._out.in_flight <= self._low:
            self._writing_paused = False
            if self.protocol is not None and not self._lost:
                self.protocol.resume_writing()

    def lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        if self.protocol is not None:
            self.protocol.connection_lost(exc)


class _FakeSocket:
    def __init__(self, host: str, port: int) -> None:
        self._name = (host, port)

    def getsockname(self) -> tuple[str, int]:
        return self._name


class _Listener(asyncio.AbstractServer):
    def __init__(
        self,
        net: SimNetwork,
        node: str,
        port: int,
        factory: Callable[[], asyncio.BaseProtocol],
        serving: bool,
    ) -> None:
        self._net = net
        self.node = node
        self.port = port
        self.factory = factory
        self.serving = serving
        self._closed = False

    @property
    def sockets(self) -> tuple[Any, ...]:
        return () if self._closed else (_FakeSocket(self.node, self.port),)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.serving = False
            self._net._unlisten(self)

    async def wait_closed(self) -> None:
        return None

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._net.loop

    def is_serving(self) -> bool:
        return self.serving

    async def start_serving(self) -> None:
        if self._closed:
            raise OSError("the listener is closed")
        self.serving = True

    async def serve_forever(self) -> None:
        await self.start_serving()
        await self._net.loop.create_future()

    async def __aenter__(self) -> _Listener:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class SimNetwork:
    """``SimNetwork(loop, rng, trace)``: plugs itself into ``loop`` (see the module doc)."""

    def __init__(
        self, loop: SimLoop, rng: random.Random, trace: Trace, config: NetConfig | None = None
    ) -> None:
        self.loop = loop
        self.rng = rng
        self.trace = trace
        self.config = config or NetConfig()
        loop.net = self
        self._listeners: dict[tuple[str, int], _Listener] = {}
        self._connections: dict[int, _Connection] = {}
        self._ids = itertools.count(1)
        self._ports = itertools.count(40000)
        #: (src, dst) directions cut off
        self._cut: dict[tuple[str, str], None] = {}
        self._down: dict[str, None] = {}
        #: node -> latency factor
        self.slow: dict[str, float] = {}

    # -- faults --------------------------------------------------------------------------
    def cut(self, src: str, dst: str) -> None:
        """Hold everything from ``src`` to ``dst`` until :meth:`mend`."""
        self._cut[(src, dst)] = None

    def mend(self, src: str, dst: str) -> None:
        if self._cut.pop((src, dst), "absent") == "absent":
            return
        for conn in list(self._connections.values()):
            for direction in (conn.forward, conn.backward):
                if direction.src == src and direction.dst == dst and direction.held:
                    held, direction.held = direction.held, []
                    for chunk in held:
                        self._schedule(direction, chunk)

    def mend_all(self) -> None:
        for src, dst in list(self._cut):
            self.mend(src, dst)

    def is_cut(self, src: str, dst: str) -> bool:
        return (src, dst) in self._cut

    def kill(self, node: str) -> None:
        """The node's process died: its listeners go, its connections reset, its life ends
        (:meth:`SimLoop.end_life`)."""
        self.loop.end_life(node)
        self._down[node] = None
        for listener in [x for x in self._listeners.values() if x.node == node]:
            listener.close()
        for conn in list(self._connections.values()):
            if node in (conn.client, conn.server) and not conn.broken:
                self._reset(conn, from_client=conn.client == node, dead=node)

    def revive(self, node: str) -> None:
        self._down.pop(node, None)

    # -- listen and connect ----------------------------------------------------------------
    def listen(
        self, factory: Callable[[], asyncio.BaseProtocol], node: str, port: int, start: bool
    ) -> _Listener:
        if not node:
            raise OSError("create_server outside a simulated node")
        self.loop.check_alive(f"listen on {port}")
        if (node, port) in self._listeners:
            raise OSError(98, f"{node}:{port}: address in use")
        listener = _Listener(self, node, port, factory, start)
        self._listeners[(node, port)] = listener
        return listener

    def _unlisten(self, listener: _Listener) -> None:
        if self._listeners.get((listener.node, listener.port)) is listener:
            del self._listeners[(listener.node, listener.port)]

    async def connect(
        self, factory: Callable[[], asyncio.BaseProtocol], host: str, port: int
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        src = NODE.get()
        if not src:
            raise OSError("create_connection outside a simulated node")
        self.loop.check_alive(f"connect to {host}:{port}")
        waited = 0.0
        while self.is_cut(src, host) or self.is_cut(host, src):
            if waited >= CONNECT_GIVE_UP_S:
                raise TimeoutError(f"connect to {host}:{port}: no answer (partitioned)")
            await asyncio.sleep(SYN_RETRY_S)
            waited += SYN_RETRY_S
        await asyncio.sleep(self._latency(src, host) * 2)  # SYN, SYN-ACK
        self.loop.check_alive(f"connect to {host}:{port}")
        listener = self._listeners.get((host, port))
        if src in self._down:
            raise ConnectionResetError("the connecting node died")
        if listener is None or not listener.serving or host in self._down:
            raise ConnectionRefusedError(111, f"connect to {host}:{port}: refused")
        conn = _Connection(self, next(self._ids), src, host, port, next(self._ports))
        self._connections[conn.id] = conn
        server_protocol = conn.forward.context.run(listener.factory)
        conn.server_end.protocol = server_protocol  # type: ignore[assignment]
        conn.forward.context.run(server_protocol.connection_made, conn.server_end)
        client_protocol = factory()
        conn.client_end.protocol = client_protocol  # type: ignore[assignment]
        client_protocol.connection_made(conn.client_end)
        self.trace.event(src, f"connect {host}:{port} #{conn.id}")
        return conn.client_end, client_protocol

    # -- delivery ------------------------------------------------------------------------
    def _latency(self, src: str, dst: str) -> float:
        config = self.config
        latency = self.rng.uniform(config.latency_min_s, config.latency_max_s)
        return latency * max(self.slow.get(src, 1.0), self.slow.get(dst, 1.0))

    def _send(self, direction: _Direction, data: bytes) -> None:
        if direction.dst in self._down:
            return  # a dead host answers nothing (its reset is on its way)
        direction.in_flight += len(data)
        if len(data) > 1 and self.rng.random() < self.config.split_chance:
            cut = self.rng.randrange(1, len(data))
            self._schedule(direction, data[:cut])
            self._schedule(direction, data[cut:])
        else:
            self._schedule(direction, data)

    def _schedule(self, direction: _Direction, chunk: bytes) -> None:
        loop = self.loop
        loop.call_at(
            self._after(direction), self._arrive, direction, chunk, context=direction.context
        )

    def _arrive(self, direction: _Direction, chunk: bytes) -> None:
        if direction.dropped:
            return
        if direction.held or (direction.src, direction.dst) in self._cut:
            direction.held.append(chunk)  # retransmitted once the cut heals
            return
        if direction.reading_paused:
            direction.paused.append(chunk)
            return
        self._hand_over(direction, chunk)

    def _hand_over(self, direction: _Direction, chunk: bytes) -> None:
        conn = direction.conn
        if direction.dropped:
            return
        direction.in_flight -= len(chunk)
        self.trace.delivered(conn.id, direction.forward, chunk)
        receiver = conn.end(client_side=not direction.forward)
        sender = conn.end(client_side=direction.forward)
        sender.drained()
        protocol = receiver.protocol
        if protocol is not None and not receiver._lost:
            protocol.data_received(chunk)
        if direction.eof_pending and direction.in_flight == 0 and not direction.held:
            direction.eof_pending = False
            self._end(conn, receiver)

    def _close(self, direction: _Direction) -> None:
        """The sender closed: the receiver sees the end after the bytes in flight."""
        conn = direction.conn
        if direction.in_flight == 0 and not direction.held:
            at = self._after(direction)
            receiver = conn.end(client_side=not direction.forward)
            self.loop.call_at(at, self._end, conn, receiver, context=direction.context)
        else:
            direction.eof_pending = True

    def _end(self, conn: _Connection, receiver: _SimTransport) -> None:
        if conn.broken:
            return
        self._break(conn)  # a half-closed connection is closed: our protocols close both ways
        receiver.lost(None)

    def _break(self, conn: _Connection) -> None:
        conn.broken = True
        conn.forward.dropped = conn.backward.dropped = True
        self._connections.pop(conn.id, None)

    def _lost_soon(self, end: _SimTransport, exc: Exception | None) -> None:
        self.loop.call_soon(end.lost, exc, context=self.loop.node_context(end._out.src))

    def _after(self, direction: _Direction) -> float:
        """When something sent now in ``direction`` arrives: after all sent before it."""
        at = max(self.loop.time() + self._latency(direction.src, direction.dst), direction.last_s)
        direction.last_s = at = at + _ORDER_S
        return at

    def _reset(self, conn: _Connection, from_client: bool, dead: str | None = None) -> None:
        """A reset from one end (or its death): nothing more reaches that end; the other end
        gets the bytes already on their way, then learns of the reset."""
        if conn.broken:
            return
        conn.broken = True
        self._connections.pop(conn.id, None)
        local = conn.end(client_side=from_client)
        remote = conn.end(client_side=not from_client)
        toward = conn.forward if from_client else conn.backward
        (conn.backward if from_client else conn.forward).dropped = True
        if dead is None:
            self.loop.call_soon(
                local.lost,
                ConnectionAbortedError("aborted"),
                context=self.loop.node_context(toward.src),
            )
        self.loop.call_at(self._after(toward), self._reset_arrives, toward, remote)
        self.trace.event(toward.src, f"reset #{conn.id}")

    def _reset_arrives(self, direction: _Direction, remote: _SimTransport) -> None:
        direction.dropped = True
        direction.context.run(remote.lost, ConnectionResetError(104, "connection reset by peer"))
