"""Smoke runs of the client benchmarks' issue-18 options (figures: docs/benchmarks.md, "Client
batching (issue 18)"): ``bench write --batch/--entries/--gc-freeze``, ``bench read
--gc-freeze`` and ``bench tail``. They check rows and counts, never how fast anything was."""

from __future__ import annotations

from tests.e2e.helpers import bkeeper


def _row(stdout: str, workload: str) -> list[str]:
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if cells and cells[0].startswith(workload):
            return cells
    raise AssertionError(f"no row {workload!r} in:\n{stdout}")


def test_write_batches_a_fixed_count_and_tail(real_cluster) -> None:
    uri = real_cluster.uri
    write = bkeeper(
        uri, "bench", "write", "--entries", "3000", "--batch", "250", "--in-flight", "500",
        "--duration", "60", "--entry-size", "100", "--gc-freeze", "--read",
    )  # fmt: skip
    assert write.returncode == 0, write.stderr
    row = _row(write.stdout, "client writes")  # its label wraps in the wide table
    assert row[1] == "3,000"  # exactly --entries, in batches of 250
    # The CPU µs per entry of the client, and of the servers (the bookies and ZooKeeper of
    # this machine, from /proc): "23.3 (ZK 3.3)"
    client_cpu, server_cpu = row[-2:]
    assert float(client_cpu) > 0, row
    total, zk = server_cpu.split(" (ZK ")
    assert float(total) > 0 and float(zk.rstrip(")")) >= 0, row
    assert _row(write.stdout, "client reads of ledger")[1] == "3,000"
    kept = bkeeper(uri, "bench", "write", "--entries", "50", "--duration", "30", "--keep")
    assert kept.returncode == 0, kept.stderr
    ledger = kept.stdout.split("kept ledger ")[1].split()[0]
    assert f"bkeeper bench read --ledger {ledger}" in kept.stdout
    read = bkeeper(uri, "bench", "read", "--ledger", ledger)
    assert read.returncode == 0, read.stderr
    assert _row(read.stdout, f"client reads of ledger {ledger}")[1] == "50"
    called = bkeeper(
        uri, "bench", "write", "--api", "callback", "--entries", "2000", "--duration", "60"
    )
    assert called.returncode == 0, called.stderr
    row = _row(called.stdout, "client writes")
    assert row[1] == "2,000" and float(row[-2]) > 0, row  # every entry called back, timed
    assert "append_callback" in called.stdout
    mixed = bkeeper(uri, "bench", "write", "--api", "callback", "--batch", "10")
    assert mixed.returncode != 0
    assert "--api callback appends one entry a call: not with --batch" in mixed.stderr
    too_big = bkeeper(uri, "bench", "write", "--batch", "2000", "--in-flight", "1000")
    assert too_big.returncode != 0
    assert "--batch 2000 is more than --in-flight 1000" in too_big.stderr

    tail = bkeeper(uri, "bench", "tail", "--rate", "200", "--duration", "1")
    assert tail.returncode == 0, tail.stderr
    seen = _row(tail.stdout, "ledger tail, 100 B at 200/s: append due")
    assert seen[1] == "200"  # 200/s for 1 s, every one seen
    assert _row(tail.stdout, "ledger tail, 100 B at 200/s: acknowledged")[1] != "0"


def test_bench_tail_ends_when_the_reader_sees_the_seal_first(real_cluster, monkeypatch) -> None:
    """The tailing reader may learn that the ledger is sealed (its metadata watch) before
    the writer's ``close`` returns; a long poll on a sealed ledger answers at once, so a
    reader that only waited for the writer to say it was done spun without yielding and
    the benchmark hung (1 run in about 20). Here the writer's close returns only once the
    reader's handle has said it is sealed, so the reader always sees the seal first (it was
    a 0.5 s sleep, which a slow metadata watch could outlast)."""
    import asyncio
    import threading

    from bkeeper.client.read_handle import ReadHandle
    from bkeeper.client.write_handle import WriteHandle
    from bkeeper.testing.benchmarks.client import bench_ledger_tail

    close = WriteHandle.close
    is_closed = ReadHandle.is_closed.fget
    assert is_closed is not None
    seal_seen = asyncio.Event()  # bound to the bench's loop at its first wait

    def is_closed_seen(self: ReadHandle) -> bool:
        sealed = is_closed(self)
        if sealed:
            seal_seen.set()
        return sealed

    async def close_after_the_reader_saw_the_seal(self: WriteHandle) -> None:
        await close(self)
        async with asyncio.timeout(30):  # a hang guard: the reader's handle never said so
            await seal_seen.wait()

    monkeypatch.setattr(ReadHandle, "is_closed", property(is_closed_seen))
    monkeypatch.setattr(WriteHandle, "close", close_after_the_reader_saw_the_seal)
    results: list = []
    bench = bench_ledger_tail(real_cluster.uri, rate=200, duration_s=0.2, entry_bytes=10)
    # A thread of its own: a reader spinning on the loop would block a timeout on it too.
    runner = threading.Thread(target=lambda: results.append(asyncio.run(bench)), daemon=True)
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), "bench_ledger_tail hung after the writer sealed the ledger"
    assert seal_seen.is_set()
    assert results[0][0].operations == 40  # 200/s for 0.2 s, every one seen


def test_idle_holds_open_ledgers_and_reports_its_cpu(real_cluster) -> None:
    """``bench idle``: a row with the ledgers held and the client's CPU a second (its figure
    is docs/benchmarks.md's, never checked here); bad input is refused in one line."""
    idle = bkeeper(real_cluster.uri, "bench", "idle", "--ledgers", "20", "--duration", "1")
    assert idle.returncode == 0, idle.stderr
    row = _row(idle.stdout, "client holding open ledgers")
    assert row[1] == "20" and float(row[-1]) >= 0, row
    bad = bkeeper(real_cluster.uri, "bench", "idle", "--ledgers", "0")
    assert bad.returncode != 0 and "--ledgers" in bad.stderr
