"""`bkeeper bookie` processes on a real full disk (a 64 MiB tmpfs filled with a filler file).

Read-only at once when the bookie's own adds cross the threshold (EREADONLY, never EIO),
reads served, registered under ``available/readonly``; writable again, and a real client's
adds succeed, once the filler is deleted, without a restart; starts read-only on a full disk
(with and without ``--readonly``) creating no file; a start that cannot replay its journal on
a full disk fails with one line and leaves no file behind. Every acknowledged entry is read
back at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from bkeeper.client import BookKeeper
from bkeeper.client.bookie_client import BookieClient
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.testing.tmpfs import fill_disk, used_fraction
from bkeeper.testing.zookeeper import ZooKeeperServer
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, ReadRequest

KEY = master_key(b"pw")
BATCH = 50


def body(ledger: int, entry: int) -> bytes:
    manager = DigestManager(ledger, DigestType.CRC32C, b"pw")
    return manager.encode_entry(entry, entry - 1, 1000 * (entry + 1), bytes([entry % 251]) * 1000)


class BookieProcess:
    """One ``bkeeper bookie`` on a data directory, its output in a log file."""

    def __init__(self, data_dir: Path, log_path: Path, uri: str) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.uri = uri
        self.port = 0  # picked by the bookie at its first start
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bookie_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(self.data_dir),
            "--port", str(self.port), "--metadata", self.uri, *extra,
        ]  # fmt: skip

    def start(self, *extra: str) -> None:
        """Start and wait until the bookie says it is ready (registered, signals handled);
        its first start picks its port, later ones reuse it (the bookie id)."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(*extra), stdout=log, stderr=log)
        self.port = wait_ready(self.proc, self.log_path, offset)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(30)
        self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@pytest.fixture
async def cluster_uri(zookeeper: ZooKeeperServer) -> AsyncIterator[str]:
    uri = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
    yield uri


@pytest.fixture
def bookie(small_tmpfs: Path, tmp_path: Path, cluster_uri: str) -> Iterable[BookieProcess]:
    process = BookieProcess(small_tmpfs / "bookie", tmp_path / "bookie.log", cluster_uri)
    yield process
    process.kill()


async def wait_registered(uri: str, bookie_id: str, read_only: bool | None) -> None:
    """Wait until ``bookie_id`` is registered read-only or writable (None: not at all)."""
    async with (
        await ClusterMetadata.open(uri) as cluster,
        asyncio.timeout(30),
        contextlib.aclosing(cluster.registry.watch()) as sets,
    ):
        async for bookies in sets:
            if read_only is None:
                if bookie_id not in bookies.read_only | bookies.writable:
                    return
            elif bookie_id in (bookies.read_only if read_only else bookies.writable):
                return


async def with_metadata(uri: str, bookie_id: str, *ledger_ids: int) -> None:
    """Give ledgers written here raw their metadata: without it, the bookie's garbage
    collector (which runs at once on a full disk) would rightly delete them."""
    meta = LedgerMetadata.new([bookie_id], 1, 1, DigestType.CRC32C, b"pw", ctime_ms=0)
    async with await ClusterMetadata.open(uri) as cluster:
        for ledger_id in ledger_ids:
            await cluster.ledgers.create(meta, ledger_id=ledger_id)


async def add_batch(client: BookieClient, ledger: int, entries: range) -> list[StatusCode]:
    responses = await asyncio.gather(
        *(client.send(AddRequest(ledger, e, KEY, body(ledger, e))) for e in entries)
    )
    return [response.status for response in responses]


async def read_back(client: BookieClient, ledger: int, entries: Iterable[int]) -> None:
    entries = list(entries)
    responses = await asyncio.gather(*(client.send(ReadRequest(ledger, e)) for e in entries))
    for entry, response in zip(entries, responses, strict=True):
        assert response.status is StatusCode.EOK, (ledger, entry, response.status)
        assert bytes(response.body) == body(ledger, entry), (ledger, entry)


def files(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_size for p in directory.rglob("*")}


async def test_full_disk_is_read_only_at_once_and_writable_again_without_restart(
    bookie: BookieProcess, small_tmpfs: Path, cluster_uri: str
) -> None:
    bookie.start()
    filler = small_tmpfs / "filler"
    await wait_registered(cluster_uri, bookie.bookie_id, read_only=False)
    await with_metadata(cluster_uri, bookie.bookie_id, 9)
    async with BookKeeper(cluster_uri) as client:
        before = await client.create_ledger(1, 1, 1, password=b"pw")
        written = [b"before %d " % i + bytes(500) for i in range(200)]
        for data in written:
            await before.append(data)
        raw = await BookieClient.connect("127.0.0.1", bookie.port, Protocol.V2)

        # The bookie's own adds take the disk from 93% past the 95% threshold.
        fill_disk(filler, 0.93)
        statuses: list[StatusCode] = []
        while statuses.count(StatusCode.EREADONLY) < 2 * BATCH and len(statuses) < 30_000:
            statuses += await add_batch(raw, 9, range(len(statuses), len(statuses) + BATCH))
        assert set(statuses) == {StatusCode.EOK, StatusCode.EREADONLY}  # never EIO
        first_refused = statuses.index(StatusCode.EREADONLY)
        assert StatusCode.EOK not in statuses[first_refused:]  # refused from then on
        assert 0.95 <= used_fraction(small_tmpfs) < 1.0  # read-only with room left
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=True)
        await read_back(raw, 9, range(first_refused))

        # Full to the last byte: still EREADONLY, still readable.
        fill_disk(filler)
        assert (
            await add_batch(raw, 9, range(first_refused, first_refused + 5))
            == [StatusCode.EREADONLY] * 5
        )
        await read_back(raw, 9, range(first_refused))

        # Space freed: writable again, registered so, and a real client's adds succeed.
        filler.unlink()
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=False)
        after = await client.create_ledger(1, 1, 1, password=b"pw")
        written_after = [b"after %d " % i + bytes(500) for i in range(200)]
        for data in written_after:
            await after.append(data)
        await before.close()
        await after.close()
        for handle, expected in ((before, written), (after, written_after)):
            reader = await client.open_ledger(handle.ledger_id, b"pw")
            assert [entry.data async for entry in reader.read()] == expected
        await read_back(raw, 9, range(first_refused))
        await raw.aclose()
    assert bookie.stop() == 0


async def test_starts_read_only_on_a_full_disk_and_a_failed_start_leaves_nothing(
    bookie: BookieProcess, small_tmpfs: Path, cluster_uri: str
) -> None:
    filler = small_tmpfs / "filler"
    bookie.start()
    await with_metadata(cluster_uri, bookie.bookie_id, 7, 8)
    raw = await BookieClient.connect("127.0.0.1", bookie.port, Protocol.V2)
    for start in range(0, 300, BATCH):
        assert await add_batch(raw, 7, range(start, start + BATCH)) == [StatusCode.EOK] * BATCH
    await raw.aclose()
    assert bookie.stop() == 0

    fill_disk(filler)
    before = files(bookie.data_dir)
    for extra in ((), ("--readonly",)):
        bookie.start(*extra)
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=True)
        raw = await BookieClient.connect("127.0.0.1", bookie.port, Protocol.V2)
        await read_back(raw, 7, range(300))
        assert await add_batch(raw, 7, range(300, 301)) == [StatusCode.EREADONLY]
        await raw.aclose()
        assert bookie.stop() == 0
        assert files(bookie.data_dir) == before  # no journal, entry log or temp file made

    # A journal tail larger than the write cache cannot be replayed on a full disk.
    filler.unlink()
    small = ("--write-cache-mb", "2", "--checkpoint-interval-ms", "600000")
    bookie.start(*small)
    raw = await BookieClient.connect("127.0.0.1", bookie.port, Protocol.V2)
    for start in range(0, 4000, BATCH):  # 4 MiB past the checkpoint at start
        assert await add_batch(raw, 8, range(start, start + BATCH)) == [StatusCode.EOK] * BATCH
    await raw.aclose()
    bookie.stop(signal.SIGKILL)
    fill_disk(filler)
    before = files(bookie.data_dir)
    failed = subprocess.run(
        bookie.command(*small), check=False, capture_output=True, text=True, timeout=60
    )
    assert failed.returncode == 1
    last_line = failed.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error: no space left on the data disk to replay the journal")
    assert files(bookie.data_dir) == before

    filler.unlink()
    # The killed bookie's registration lingers until its session expires.
    await wait_registered(cluster_uri, bookie.bookie_id, read_only=None)
    bookie.start(*small)
    raw = await BookieClient.connect("127.0.0.1", bookie.port, Protocol.V2)
    await read_back(raw, 7, range(300))
    await read_back(raw, 8, range(4000))
    await raw.aclose()
    assert bookie.stop() == 0


async def wait_logged(path: Path, text: str, after: int = 0, timeout_s: float = 30.0) -> None:
    """Wait until the bookie's log holds ``text`` after byte ``after``."""
    async with asyncio.timeout(timeout_s):
        while text not in path.read_text(errors="replace")[after:]:
            await asyncio.sleep(0.02)


def logs_in(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.glob("*.log")}


async def test_two_ledger_disks_read_only_only_when_both_are_full(
    small_tmpfs: Path, second_small_tmpfs: Path, tmp_path: Path, cluster_uri: str
) -> None:
    """Two ledger dirs on two real 64 MiB disks (the journal on the test's own disk): one
    full disk only leaves the rotation; both full make the bookie read-only (EREADONLY, never
    EIO, reads served), one freed makes it writable again, without a restart; with
    ``readonly_on_any_dir_full`` one full disk is enough."""
    home, other = small_tmpfs / "ledgers", second_small_tmpfs / "ledgers"
    bookie = BookieProcess(tmp_path / "bookie", tmp_path / "bookie.log", cluster_uri)
    dirs = ("--ledger-dir", str(home), "--ledger-dir", str(other))
    try:
        bookie.start(*dirs)
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=False)
        await with_metadata(cluster_uri, bookie.bookie_id, 7, 8)
        raw = await BookieClient.connect("127.0.0.1", bookie.port, Protocol.V2)
        assert await add_batch(raw, 7, range(BATCH)) == [StatusCode.EOK] * BATCH

        # The second disk past its threshold: out of rotation, the bookie stays writable.
        log_offset = bookie.log_path.stat().st_size
        fill_disk(second_small_tmpfs / "filler", 0.96)
        await wait_logged(bookie.log_path, f"disk of {other}: ", log_offset)
        before = logs_in(other)
        added = BATCH
        while added < 4000:  # 4 MB: several flushes, all to the first disk
            statuses = await add_batch(raw, 7, range(added, added + BATCH))
            assert statuses == [StatusCode.EOK] * BATCH
            added += BATCH
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=False)
        assert logs_in(home) and logs_in(other) == before

        # The first disk crosses its threshold too: read-only, reads served.
        fill_disk(small_tmpfs / "filler", 0.93)
        statuses = []
        while statuses.count(StatusCode.EREADONLY) < BATCH and len(statuses) < 30_000:
            statuses += await add_batch(raw, 8, range(len(statuses), len(statuses) + BATCH))
        assert set(statuses) == {StatusCode.EOK, StatusCode.EREADONLY}  # never EIO
        first_refused = statuses.index(StatusCode.EREADONLY)
        assert StatusCode.EOK not in statuses[first_refused:]
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=True)
        await read_back(raw, 7, range(added))
        await read_back(raw, 8, range(first_refused))

        # The second disk freed: writable again without a restart; new logs go there.
        (second_small_tmpfs / "filler").unlink()
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=False)
        more = first_refused + 3000
        for start in range(first_refused, more, BATCH):
            statuses = await add_batch(raw, 8, range(start, start + BATCH))
            assert statuses == [StatusCode.EOK] * BATCH
        await raw.aclose()
        assert bookie.stop() == 0
        assert set(logs_in(other)) > set(before)

        # With readonly_on_any_dir_full, the one full disk makes it start read-only.
        bookie.start(*dirs, "-o", "readonly_on_any_dir_full=true")
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=True)
        (small_tmpfs / "filler").unlink()
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=False)
        raw = await BookieClient.connect("127.0.0.1", bookie.port, Protocol.V2)
        await read_back(raw, 7, range(added))
        await read_back(raw, 8, range(more))
        await raw.aclose()
        assert bookie.stop() == 0
    finally:
        bookie.kill()
