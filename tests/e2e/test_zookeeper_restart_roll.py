"""Verify seed 50042 on real processes: ZooKeeper dies just as a log writer rolls, and stays
away longer than the writer's ``request_timeout_ms``.

The course before the fixes: kazoo held the roll's compare-and-set (made before this event
loop heard of the drop) and sent it when ZooKeeper came back; the writer had given the roll
up at its request timeout and deleted the new ledger; so the log listed a ledger that was
gone, and a reader reaching it looked for it again for ever (a kv follower applied nothing
more, silently). Now the store refuses the request at once, the writer keeps a ledger whose
listing it cannot rule out, and a reader reads past a listed ledger that is gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

import bkeeper.namedlog.writer_roll as writer_module
from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.common.errors import BKeeperError, ConnectionLossError, LedgerNotFoundError
from bkeeper.meta.cluster import ClusterMetadata, MetadataConfig
from bkeeper.meta.store import StoreConfig
from bkeeper.meta.zk import ZkNodeStore
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.testing.benchmarks import free_port, free_port_range
from bkeeper.testing.sandbox import Sandbox, SandboxConfig

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

LOG = LogConfig(ensemble_size=3, write_quorum=2, ack_quorum=2, roll_bytes=2_000, tail_poll_ms=100)
CLIENT = ClientConfig(add_timeout_ms=5_000, read_timeout_ms=2_000)


def _kill_zookeeper(box: Sandbox) -> None:
    pid = box.zookeeper.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    box.zookeeper.wait()
    box.zookeeper.stop()


async def _scenario(box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    hear = ZkNodeStore._on_state

    def late(self: ZkNodeStore, state: str, session_id: int) -> None:  # a busy loop: 0.5 s
        self._loop.call_later(0.5, hear, self, state, session_id)

    monkeypatch.setattr(ZkNodeStore, "_on_state", late)
    store = StoreConfig(request_timeout_ms=1_000)
    cluster = await ClusterMetadata.open(box.metadata_uri, MetadataConfig(store=store))
    async with (
        BookKeeper(config=CLIENT, cluster=cluster) as writer_bk,
        BookKeeper(box.metadata_uri, CLIENT) as reader_bk,
    ):
        named = await NamedLogs(writer_bk, LOG).create("restart")
        writer = await named.open_writer()
        real_create, armed, kazoo = writer_module.create_ledger, [False], cluster.store._client
        killed = asyncio.Event()

        async def create_then_kill(bk, config):  # ZooKeeper dies between create and list
            handle = await real_create(bk, config)
            if armed[0]:
                armed[0] = False
                _kill_zookeeper(box)
                killed.set()
                deadline = time.monotonic() + 10
                while kazoo.connected:  # kazoo knows; this loop hears of it later
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
            return handle

        monkeypatch.setattr(writer_module, "create_ledger", create_then_kill)
        acknowledged = [await writer.append(b"a%03d" % i * 25) for i in range(10)]
        armed[0] = True

        async def restart_later() -> None:  # away longer than request_timeout_ms
            await killed.wait()  # counted from the kill, not from before the appends
            await asyncio.sleep(2.5)  # a window: load can only lengthen the outage
            await asyncio.to_thread(box.zookeeper.start)

        restart = asyncio.create_task(restart_later())
        try:
            for i in range(10, 200):
                acknowledged.append(await writer.append(b"a%03d" % i * 25))
                assert armed[0], "a roll came and went without failing"
        except BKeeperError:
            pass  # the roll failed: this writer is done
        if not killed.is_set():
            restart.cancel()
            pytest.fail("no roll happened")
        await restart
        await writer.close()
        writer = await named.open_writer()  # as a new leader would (seals what was left)
        acknowledged += [await writer.append(b"b%03d" % i * 25) for i in range(10)]
        meta = await named.metadata()
        for ledger in meta.ledgers:  # no listed ledger is gone
            try:
                await writer_bk.ledger_metadata(ledger.ledger_id)
            except LedgerNotFoundError:
                pytest.fail(f"the log lists ledger {ledger.ledger_id}, which is gone")
        async with asyncio.timeout(60):  # the reader's own session may still be reconnecting
            while True:
                try:
                    reader = await NamedLogs(reader_bk, LOG).log("restart").open_reader()
                    break
                except ConnectionLossError:
                    await asyncio.sleep(0.2)
        positions = []
        while len(positions) < len(acknowledged) - 1:  # the last one shows on close
            record = await reader.next(30.0)
            assert record is not None, f"{len(positions)} records read, then none in 30 s"
            positions.append(record.position)
        assert positions == acknowledged[:-1]
        await reader.close()
        await writer.close()


def test_a_roll_lost_in_a_zookeeper_restart_lists_no_ledger_that_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = SandboxConfig(
        data_dir=tmp_path / "sb",
        bookies=3,
        zookeeper_port=free_port(),
        bookie_port_base=free_port_range(3),
        autorecovery=False,
    )
    with Sandbox(config) as box:
        asyncio.run(asyncio.wait_for(_scenario(box, monkeypatch), 180))
