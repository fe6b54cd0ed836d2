"""Named-log records larger than a bookie's frame (5 MiB) on real bookie processes: a 20 MiB
record appended with ``bkeeper log append --file`` (a file, and standard input) is read back
whole by ``bkeeper log read`` and by a consumer, one position each; the chunks of a record
whose writer stopped between chunks are skipped by every reader. The tests kill nothing: they
share the module's cluster (4 bookies), each with a log of its own."""

from __future__ import annotations

import subprocess
import sys

from bkeeper.client import BookKeeper
from bkeeper.namedlog import NamedLogs, Position, create_ledger
from bkeeper.namedlog.core import decode_chunk, encode_chunks, encode_record
from tests.client.conftest import shared_cluster, shared_cluster_left_running
from tests.e2e.helpers import bkeeper

__all__ = ["shared_cluster", "shared_cluster_left_running"]  # the module's cluster, its check


MIB = 1024 * 1024


def payload_of(tag: str, size: int = 20 * MIB) -> bytes:
    """A printable payload (``log read`` prints it as text) that differs along its length."""
    unit = f"{tag}-".encode()
    line = b"".join(unit + b"%07d;" % i for i in range(size // (len(unit) + 8) + 1))
    return line[:size]


def append_from_stdin(uri: str, name: str, data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "log", "append", name, "--file", "-", "--metadata", uri],
        input=data, capture_output=True, timeout=120, check=False,
    )  # fmt: skip


async def test_a_20_mib_record_round_trips_through_the_cli_and_a_consumer(
    shared_cluster, tmp_path
) -> None:
    uri = shared_cluster.uri
    assert bkeeper(uri, "log", "create", "big").returncode == 0
    first, second = payload_of("file"), payload_of("stdin")
    path = tmp_path / "record.bin"
    path.write_bytes(first)
    from_file = bkeeper(uri, "log", "append", "big", "--file", str(path))
    assert from_file.returncode == 0, from_file.stderr
    from_stdin = append_from_stdin(uri, "big", second)
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert bkeeper(uri, "log", "append", "big", "small").returncode == 0
    positions = [Position.parse(from_file.stdout.strip()),
                 Position.parse(from_stdin.stdout.decode().strip())]  # fmt: skip
    # One position per record: its last chunk's (6 chunks: 20 MiB and a 10-byte head in
    # chunks of 4 MiB); each command's writer starts a ledger.
    assert [p.entry_id for p in positions] == [5, 5]
    assert positions[1].ledger_id > positions[0].ledger_id

    read = bkeeper(uri, "log", "read", "big")
    assert read.returncode == 0, read.stderr[-2000:]
    lines = read.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines[:2]] == [str(p) for p in positions]
    assert [line.split("\t")[3].encode() for line in lines] == [first, second, b"small"]
    # A read from a position inside the second record gets it whole.
    inside = Position(positions[1].ledger_id, positions[1].entry_id - 2)
    again = bkeeper(uri, "log", "read", "big", "--from", str(inside))
    assert [line.split("\t")[3].encode() for line in again.stdout.splitlines()] == [
        second,
        b"small",
    ]

    async with BookKeeper(uri) as bk:
        named = NamedLogs(bk).log("big")
        consumer = await named.subscribe("readers")
        got = [await consumer.receive(30.0) for _ in range(3)]
        assert [r.payload for r in got] == [first, second, b"small"]
        assert [r.position for r in got[:2]] == positions and got[0].chunks == 6
        consumer.ack_individual(got[1].position)  # out of order: every chunk of it
        consumer.ack(got[0].position)
        await consumer.close()
        resumed = await named.subscribe("readers")
        record = await resumed.receive(30.0)
        assert record.payload == b"small"  # neither large record comes again
        await resumed.close()


async def test_a_record_cut_short_by_its_writer_is_skipped_on_real_bookies(
    shared_cluster,
) -> None:
    uri = shared_cluster.uri
    async with BookKeeper(uri) as bk:
        logs = NamedLogs(bk)
        named = await logs.create("cut")
        writer = await named.open_writer()
        before = await writer.append(b"before")
        await writer.close()
        # A writer that died after two of its five chunks (the ledger API writes them).
        chunks = encode_chunks(encode_record(payload_of("cut", 17 * MIB), 1), 4 * MIB)
        handle = await create_ledger(bk, logs.config)
        for data in chunks[:2]:
            await handle.append(data)
        await handle.close()
        await named.append_ledgers([handle.ledger_id])
        writer = await named.open_writer()
        after = await writer.append(b"after")
        await writer.close()
        first_chunk = await (await logs.walk.open(handle.ledger_id)).read_entry(0)
        assert decode_chunk(first_chunk.payload, handle.ledger_id, 0).chunk_count == 5

        reader = await named.open_reader()
        got = [await reader.next(30.0) for _ in range(2)]
        assert [(r.position, r.payload) for r in got] == [(before, b"before"), (after, b"after")]
        assert reader.incomplete_records == 1
        await reader.close()
        assert await named.last_position() == after
    read = bkeeper(uri, "log", "read", "cut")
    assert [line.split("\t")[3] for line in read.stdout.splitlines()] == ["before", "after"]
    assert "incomplete chunked record skipped" in read.stderr
