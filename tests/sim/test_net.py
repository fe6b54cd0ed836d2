"""The simulator's loop and network: virtual time, TCP's promises, partitions, deaths."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.common.tasks import within
from bkeeper.sim.loop import NODE, SimIOError, SimLoop, SimStuckError
from bkeeper.sim.net import SimNetwork
from tests.sim.simnet import as_node, run_on_net


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


class _Collect(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = bytearray()
        self.lost: list[Exception | None] = []
        self.got = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.got.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)
        self.got.set()


def test_time_is_virtual_and_jumps() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> float:
        start = loop.time()
        await asyncio.sleep(3600)
        return loop.time() - start

    (elapsed, _) = run_on_net(main)
    assert elapsed == 3600


def test_bytes_arrive_in_order_whatever_the_chunking_and_the_trace_replays() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> bytes:
        await as_node(loop, "server", loop.create_server(_Echo, "server", 1))
        collect = _Collect()
        transport, _ = await as_node(
            loop, "client", loop.create_connection(lambda: collect, "server", 1)
        )
        sent = b"".join(bytes([i % 256]) * (i % 7 + 1) for i in range(2000))
        for i in range(0, len(sent), 13):
            transport.write(sent[i : i + 13])
        while len(collect.data) < len(sent):
            collect.got.clear()
            await collect.got.wait()
        assert bytes(collect.data) == sent
        return bytes(collect.data)

    first, digest = run_on_net(main, seed=7)
    again, digest_again = run_on_net(main, seed=7)
    _, other = run_on_net(main, seed=8)
    assert first == again and digest == digest_again
    assert digest != other


def test_a_partition_holds_bytes_until_it_heals() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> None:
        await as_node(loop, "server", loop.create_server(_Echo, "server", 1))
        collect = _Collect()
        transport, _ = await as_node(
            loop, "client", loop.create_connection(lambda: collect, "server", 1)
        )
        net.cut("client", "server")
        transport.write(b"held")
        await asyncio.sleep(5)
        assert collect.data == b""
        net.mend("client", "server")
        await within(collect.got.wait(), 1)
        assert collect.data == b"held"

    run_on_net(main)


def test_connecting_across_a_cut_waits_and_to_a_dead_node_is_refused() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> None:
        await as_node(loop, "server", loop.create_server(_Echo, "server", 1))
        net.cut("server", "client")
        with pytest.raises(TimeoutError):
            await as_node(
                loop,
                "client",
                within(loop.create_connection(_Collect, "server", 1), 10),
            )
        net.mend("server", "client")
        net.kill("server")
        with pytest.raises(ConnectionRefusedError):
            await as_node(loop, "client", loop.create_connection(_Collect, "server", 1))

    run_on_net(main)


def test_a_killed_node_resets_its_peers_after_what_it_sent() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> None:
        await as_node(loop, "server", loop.create_server(_Echo, "server", 1))
        collect = _Collect()
        transport, _ = await as_node(
            loop, "client", loop.create_connection(lambda: collect, "server", 1)
        )
        transport.write(b"ping")
        await collect.got.wait()
        net.kill("server")
        while not collect.lost:
            collect.got.clear()
            await collect.got.wait()
        assert collect.data == b"ping"
        assert isinstance(collect.lost[0], ConnectionResetError)

    run_on_net(main)


def test_tasks_belong_to_the_node_that_made_them() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> None:
        async def child() -> str:
            await asyncio.sleep(1)
            return NODE.get()

        task = loop.run_as("bookie-1", lambda: loop.create_task(child()))
        assert loop.node_tasks("bookie-1") == [task]
        assert await task == "bookie-1"
        assert loop.node_tasks("bookie-1") == []

    run_on_net(main)


def test_a_loop_with_nothing_to_do_says_it_is_stuck() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> None:
        await loop.create_future()

    with pytest.raises(SimStuckError):
        run_on_net(main)


def test_real_io_is_refused() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> None:
        with pytest.raises(SimIOError):
            await loop.getaddrinfo("localhost", 80)

    run_on_net(main)


def test_a_loop_that_spins_without_time_moving_is_stopped() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> None:
        loop.livelock_iterations_max = 10_000
        while True:
            await asyncio.sleep(0)

    with pytest.raises(SimStuckError, match="without the clock moving"):
        run_on_net(main)
