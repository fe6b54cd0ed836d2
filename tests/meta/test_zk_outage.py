"""ZooKeeper gone for good: requests fail instead of waiting for a reconnection that never
comes, and a bookie (with auto-recovery in it) still stops on SIGTERM.

Before: kazoo queues a request made while it reconnects, so every request of a shutdown hung
(a bookie whose ZooKeeper had died was still running a minute after SIGTERM).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.common.errors import ConnectionLossError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.store import SessionState, StoreConfig
from bkeeper.meta.zk import ZkNodeStore
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.testing.zookeeper import ZooKeeperConfig, ZooKeeperServer


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test's own, to be stopped by it (the session's is shared)."""
    server = ZooKeeperServer(ZooKeeperConfig(data_dir=tmp_path / "zk", port=0))
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_requests_fail_while_no_server_answers(own_zookeeper: ZooKeeperServer) -> None:
    store = await ZkNodeStore.connect(own_zookeeper.connect_string, StoreConfig())
    try:
        assert "zookeeper" in await store.children("/")
        session = store.session_events()
        own_zookeeper.stop()
        while (await asyncio.wait_for(session.get(), 30)).state is not SessionState.SUSPENDED:
            pass
        with pytest.raises(ConnectionLossError, match="disconnected"):
            await asyncio.wait_for(store.children("/"), 30)  # before: waited for ever
        session.close()
    finally:
        await asyncio.wait_for(store.aclose(), 30)


async def test_a_request_without_answer_fails_after_request_timeout_ms(
    own_zookeeper: ZooKeeperServer,
) -> None:
    store = await ZkNodeStore.connect(
        own_zookeeper.connect_string, StoreConfig(request_timeout_ms=300)
    )
    try:
        pid = own_zookeeper.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # the server holds the connection but answers nothing
        try:
            with pytest.raises(ConnectionLossError, match="request_timeout_ms"):
                await asyncio.wait_for(store.children("/"), 30)
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        await asyncio.wait_for(store.aclose(), 30)


async def test_a_request_made_as_the_connection_drops_is_not_sent_when_it_is_back(
    own_zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kazoo holds a request made while it reconnects and sends it on the next connection.
    The store refused requests once its event loop had heard of the drop, so a request made
    before that (a busy loop hears of it late) waited in kazoo; when ZooKeeper stayed away
    past ``request_timeout_ms`` its caller was failed, and the write went in later, when
    ZooKeeper was back: a log writer's roll given up and then applied (verify seed 50042's
    likely course). The store now refuses a request kazoo knows it cannot send."""
    hear = ZkNodeStore._on_state

    def late(self: ZkNodeStore, state: str, session_id: int) -> None:  # a busy loop: 0.5 s
        self._loop.call_later(0.5, hear, self, state, session_id)

    monkeypatch.setattr(ZkNodeStore, "_on_state", late)
    store = await ZkNodeStore.connect(
        own_zookeeper.connect_string, StoreConfig(request_timeout_ms=1000)
    )
    try:
        path = f"/late-{uuid.uuid4().hex[:8]}"
        await store.create(path, b"before")
        pid = own_zookeeper.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        own_zookeeper.wait()
        own_zookeeper.stop()
        async with asyncio.timeout(10):
            while store._client.connected:  # kazoo knows; this loop hears of it 0.5 s later
                await asyncio.sleep(0.01)
        assert store.session_state is SessionState.CONNECTED
        with pytest.raises(ConnectionLossError):
            await asyncio.wait_for(store.set(path, b"late"), 30)
        own_zookeeper.start()
        async with asyncio.timeout(60):
            while True:
                try:
                    data, _version = await store.get(path)
                    break
                except ConnectionLossError:
                    await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # anything kazoo held is sent by now
        data, _version = await store.get(path)
        assert data == b"before", "a write its caller was told had failed went in later"
    finally:
        await asyncio.wait_for(store.aclose(), 30)


async def test_a_bookie_stops_on_sigterm_after_its_zookeeper_died(
    own_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    uri = own_zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
    log_path = tmp_path / "bookie.log"
    command = [
        sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(tmp_path / "bookie"),
        "--port", "0", "--metadata", uri, "--autorecovery",
    ]  # fmt: skip
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        wait_ready(proc, log_path, 0)
        own_zookeeper.stop()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)  # before: still running a minute later
        assert code == 0, log_path.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_bookie_started_while_zookeeper_is_down_waits_for_it(
    own_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """A client gives up a connect after ``unreachable_timeout_ms`` (2 s) when every host
    refuses; a bookie started with (or during a restart of) its ZooKeeper waits its whole
    ``metadata_connect_timeout_ms`` instead, so one coming up 4 s later still gets it
    registered. The timeout is set long here: with the default 10 s, a ZooKeeper slow to
    start on a busy machine made this test fail (CI, stop 50), which says nothing of the
    bookie."""
    uri = own_zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
    own_zookeeper.stop()
    log_path = tmp_path / "bookie.log"
    command = [
        sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(tmp_path / "bookie"),
        "--port", "0", "--metadata", uri, "-o", "metadata_connect_timeout_ms=300000",
    ]  # fmt: skip
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        await asyncio.sleep(4.0)
        assert proc.poll() is None, log_path.read_text()[-2000:]  # before: gave up at 2 s
        own_zookeeper.start()
        await asyncio.to_thread(wait_ready, proc, log_path, 0)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


async def test_a_bookie_gives_up_on_zookeeper_after_its_connect_timeout(
    own_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """``metadata_connect_timeout_ms`` bounds the wait: past it the bookie exits 1 with one
    line saying which ZooKeeper it could not reach and for how long."""
    uri = own_zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    own_zookeeper.stop()
    command = [
        sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(tmp_path / "bookie"),
        "--port", "0", "--metadata", uri, "-o", "metadata_connect_timeout_ms=3000",
    ]  # fmt: skip
    done = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "cannot reach ZooKeeper" in done.stderr
    assert "tried for 3 s" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("steps", [0, 1, 2, 3, 5, 8])
async def test_a_connect_cancelled_at_any_step_raises_cancelled_and_leaves_no_client(
    zookeeper: ZooKeeperServer, steps: int
) -> None:
    """A bookie stopped just after start (its auto-recovery still connecting) hung for good:
    the cancelled connect stopped a kazoo client whose start was still running in its
    thread, kazoo raised ``AttributeError`` from ``stop`` in place of the cancellation, and
    the auto-recovery supervisor took that for a failure and started again."""
    before = {t.ident for t in threading.enumerate()}
    task = asyncio.create_task(ZkNodeStore.connect(zookeeper.connect_string, StoreConfig()))
    for _ in range(steps):
        await asyncio.sleep(0)
    task.cancel()
    done, _pending = await asyncio.wait({task}, timeout=30)
    assert done, "the cancelled connect did not end"
    if not task.cancelled():  # connected before the cancel arrived: a store to close
        await asyncio.wait_for(task.result().aclose(), 30)
    async with asyncio.timeout(30):  # kazoo's threads end
        while {t.ident for t in threading.enumerate() if "zk_loop" in t.name} - before:
            await asyncio.sleep(0.01)
