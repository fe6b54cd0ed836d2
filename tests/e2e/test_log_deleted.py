"""A log or ledger deleted under its writer, on real ZooKeeper and bookie processes (issue 36):
the writer learns of it within a second and reports no success after it, also once the
bookies' garbage collection has dropped the deleted ledger (and with it its fence: a bookie
then takes the writer's adds as if to a new ledger).

Before the fix a writer idle across the delete and the bookies' next GC pass had its later
appends acknowledged (``bkeeper log append`` exited 0 with them counted), and a ledger deleted
without a fence went on taking adds at once.

The tests kill no bookie: they share the module's cluster (4 bookies, GC on request), each
with a log or ledger of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time

import aiohttp
import pytest

from bkeeper.cli.shell_admin import admin_url
from bkeeper.client import BookKeeper
from bkeeper.common.errors import LedgerDeletedError, LogDeletedError
from bkeeper.namedlog import NamedLogs, Position
from tests.client.conftest import shared_cluster, shared_cluster_left_running
from tests.e2e.helpers import append_process, bkeeper

__all__ = ["shared_cluster", "shared_cluster_left_running"]  # the module's cluster, its check


#: Bookies whose admin servers take a GC request; no periodic pass of their own. Four: E3
#: ensembles with a spare (issue 41).
GC_ON_REQUEST = (4, ("--http-port", "0", "--http-admin-writes", "-o", "gc_wait_ms=3600000"))
#: A hang guard: the writer learns of the delete (a ZooKeeper watch, then a metadata read).
#: The product's bound, within a second, is asserted on virtual time, where a loaded machine
#: cannot stretch it: tests/namedlog/test_deleted.py.
LEARN_GUARD_S = 30.0


async def _collect_garbage(cluster) -> None:
    """A GC pass on every bookie: each drops its data of the ledgers whose metadata is gone."""
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as http:
        for index in range(len(cluster.ports)):
            url = await admin_url(cluster.uri, cluster.bookie_id(index))
            async with http.put(f"{url}/api/v1/bookie/gc", json={}) as answer:
                assert answer.status == 200, await answer.text()


@pytest.mark.parametrize("shared_cluster", [GC_ON_REQUEST], indirect=True)
async def test_a_log_writer_learns_of_the_delete_and_fails_after_the_bookies_gc(
    shared_cluster,
) -> None:
    uri = shared_cluster.uri
    async with BookKeeper(uri) as bk, BookKeeper(uri) as admin:
        writer = await (await NamedLogs(bk).create("doomed")).open_writer()
        before = await writer.append(b"acknowledged before")
        assert await NamedLogs(admin).delete("doomed") == 1
        async with asyncio.timeout(LEARN_GUARD_S):
            error = await writer.wait_deleted()
        assert "log 'doomed' was deleted while this writer was open" in str(error)
        await _collect_garbage(shared_cluster)  # the bookies forget the ledger and its fence
        for _ in range(3):
            with pytest.raises(LogDeletedError, match="'doomed'"):
                await writer.append(b"after the delete")
        with pytest.raises(LogDeletedError):
            await writer.close()
        assert before == Position(before.ledger_id, 0)


@pytest.mark.parametrize("shared_cluster", [GC_ON_REQUEST], indirect=True)
async def test_a_ledger_deleted_without_a_fence_fails_its_writer(shared_cluster) -> None:
    uri = shared_cluster.uri
    async with BookKeeper(uri) as bk, BookKeeper(uri) as admin:
        handle = await bk.create_ledger(3, 3, 2, password=b"pw")
        assert await handle.append(b"before") == 0
        await admin.delete_ledger(handle.ledger_id, fence=False)  # bookies not told
        deadline = time.monotonic() + LEARN_GUARD_S
        while time.monotonic() < deadline:
            try:
                await handle.append(b"during")  # may still be acknowledged: not known yet
            except LedgerDeletedError:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"appends still acknowledged {LEARN_GUARD_S} s after the delete")
        await _collect_garbage(shared_cluster)
        with pytest.raises(LedgerDeletedError, match=f"ledger {handle.ledger_id} was deleted"):
            await handle.append(b"after")
        with pytest.raises(LedgerDeletedError):
            await handle.close()


def _error_lines(proc: subprocess.Popen[bytes]) -> list[str]:
    """Its standard error once it ended by itself (within a minute), as lines."""
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.wait(60)
    return err.decode().strip().splitlines()


@pytest.mark.parametrize("shared_cluster", [GC_ON_REQUEST], indirect=True)
async def test_log_append_waiting_for_input_exits_when_its_log_is_deleted(shared_cluster) -> None:
    """``bkeeper log append`` fed by a pipe that stays open, its log deleted (and the
    bookies' GC run) while it waits for the next line: it exits 1 by itself, with one error
    line naming the delete and how many records went in before."""
    uri = shared_cluster.uri
    assert bkeeper(uri, "log", "create", "doomed-waiting").returncode == 0
    with append_process(uri, "doomed-waiting") as proc:
        assert proc.stdin is not None
        proc.stdin.write(b"".join(b"record %d\n" % i for i in range(100)))
        proc.stdin.flush()
        async with BookKeeper(uri) as bk:
            named = NamedLogs(bk).log("doomed-waiting")
            async with asyncio.timeout(60):
                while (last := await named.last_position()) is None or last.entry_id < 99:
                    await asyncio.sleep(0.05)
        assert last.entry_id == 99
        ledger = last.ledger_id  # the log's one ledger (the cluster holds others too)
        deleted = bkeeper(uri, "log", "delete", "doomed-waiting", "--force")
        assert deleted.returncode == 0, deleted.stderr
        await _collect_garbage(shared_cluster)
        lines = await asyncio.to_thread(_error_lines, proc)  # standard input still open
    assert proc.returncode == 1, lines
    assert lines[-1] == (
        f"error: appended 100 records to doomed-waiting ({ledger}:0 to {ledger}:99); the next "
        "append failed: "
        "log 'doomed-waiting' was deleted while this writer was open (its node was deleted)"
    )
    assert len([line for line in lines if "error" in line.lower()]) == 1, lines


@pytest.mark.parametrize("shared_cluster", [GC_ON_REQUEST], indirect=True)
async def test_log_append_streaming_fails_when_its_log_is_deleted(shared_cluster) -> None:
    """Records streaming in while the log is deleted: the command stops with the delete as
    its error (not "another writer took over") and counts only acknowledged records."""
    uri = shared_cluster.uri
    assert bkeeper(uri, "log", "create", "doomed-streaming").returncode == 0
    with append_process(uri, "doomed-streaming") as proc:
        assert proc.stdin is not None
        stdin = proc.stdin

        def stream() -> None:
            with contextlib.suppress(BrokenPipeError, ValueError):
                for i in range(1_000_000):
                    stdin.write(b"record %d\n" % i)
                    if i % 50 == 0:
                        stdin.flush()
                        time.sleep(0.005)

        streaming = asyncio.create_task(asyncio.to_thread(stream))
        async with BookKeeper(uri) as bk:
            named = NamedLogs(bk).log("doomed-streaming")
            async with asyncio.timeout(60):
                while (before := await named.last_position()) is None or before.entry_id < 500:
                    await asyncio.sleep(0.05)
        deleted = bkeeper(uri, "log", "delete", "doomed-streaming", "--force")
        assert deleted.returncode == 0, deleted.stderr
        lines = await asyncio.to_thread(_error_lines, proc)
        await streaming
    assert proc.returncode == 1, lines
    last = lines[-1]
    assert last.startswith("error: appended "), lines
    assert "the next append failed: log 'doomed-streaming' was deleted while this writer" in last, (
        lines
    )
    count = int(last.split()[2])
    assert count > before.entry_id, (count, before)
    assert len([line for line in lines if "error" in line.lower()]) == 1, lines
