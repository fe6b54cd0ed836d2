"""``bkeeper shell gc|gcstatus|suspendcompaction|resumecompaction`` against real bookie
processes and a real ZooKeeper, through the bookies' admin HTTP servers; every way of not
reaching one is one ``error:`` line and exit status 1.

The commands run in this process (tests/cli/runner.py) but for a success and a failure that
run as ``python -m bkeeper``, and the bookies refusing a taken admin port."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from bkeeper.cli.shell_admin import _rows
from bkeeper.common.ids import BookieId
from bkeeper.meta.bookie_info import BookieServiceInfo
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.registry import BookieRegistration
from tests.e2e.helpers import one_error_line
from tests.e2e.helpers import run_in_process as run
from tests.e2e.helpers import run_process as process

#: One bookie with an admin server taking writes; no periodic pass during a test (only those it asks for).
ADMIN = (1, ("--http-port", "0", "--http-admin-writes", "-o", "gc_wait_ms=3600000"))


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


#: What a pass reports, at least (docs/admin.md).
REPORT_KEYS = (
    "ledgers_deleted", "metadata_reads", "minor", "major", "logs_removed", "logs_compacted",
    "bytes_freed", "bytes_copied", "entries_copied", "duration_s", "stopped",
)  # fmt: skip

Register = Callable[[str, BookieServiceInfo], Awaitable[None]]


@pytest.fixture
async def register(real_cluster) -> AsyncIterator[Register]:
    """Registers made-up bookies in the real cluster, as a bookie registers itself."""
    cluster = await ClusterMetadata.open(real_cluster.uri, require_cluster=True)
    registrations: list[BookieRegistration] = []

    async def register(bookie_id: str, info: BookieServiceInfo) -> None:
        registration = BookieRegistration(
            cluster.registry, cluster.store, BookieId(bookie_id), info, False
        )
        await registration.start()
        registrations.append(registration)

    try:
        yield register
    finally:
        for registration in registrations:
            await registration.aclose()
        await cluster.aclose()


@pytest.mark.parametrize("real_cluster", [ADMIN], indirect=True)
async def test_gcstatus_json_and_gc_on_a_real_bookie(real_cluster) -> None:
    uri, bookie = real_cluster.uri, real_cluster.bookie_id(0)
    status = await run(uri, "shell", "gcstatus", "--bookie", bookie, "--json")
    assert status.returncode == 0, status.stderr
    parsed = json.loads(status.stdout)
    assert parsed["passes"] == 0 and parsed["running"] is False
    assert (parsed["suspended_major"], parsed["suspended_minor"]) == (False, False)

    wrote = await run(uri, "shell", "simpletest", "--entries", "50", "--ensemble", "1",
                      "--write-quorum", "1", "--ack-quorum", "1")  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr  # and deleted it: garbage for the pass
    gc = await run(uri, "shell", "gc", "--bookie", bookie, "--major", "--minor", "--json")
    assert gc.returncode == 0, gc.stderr
    report = json.loads(gc.stdout)
    assert set(REPORT_KEYS) <= set(report), report
    assert (report["major"], report["stopped"], report["ledgers_deleted"]) == (True, False, 1)

    table = await process(uri, "shell", "gc", "--bookie", bookie)
    assert table.returncode == 0, table.stderr
    assert f"GC pass on bookie {bookie}" in table.stdout
    assert "logs_removed" in table.stdout and "duration_s" in table.stdout

    after = json.loads((await run(uri, "shell", "gcstatus", "--bookie", bookie, "--json")).stdout)
    assert after["passes"] >= 2 and after["ledgers_deleted_total"] == 1


@pytest.mark.parametrize("real_cluster", [ADMIN], indirect=True)
async def test_suspend_and_resume_compaction(real_cluster) -> None:
    uri, bookie = real_cluster.uri, real_cluster.bookie_id(0)
    suspended = await run(uri, "shell", "suspendcompaction", "--bookie", bookie, "--major")
    assert suspended.returncode == 0, suspended.stderr
    assert suspended.stdout.strip() == (
        f"bookie {bookie}: major compaction suspended, minor compaction running"
    )
    both = await run(uri, "shell", "suspendcompaction", "--bookie", bookie)
    assert both.stdout.strip() == (
        f"bookie {bookie}: major compaction suspended, minor compaction suspended"
    )
    status = json.loads((await run(uri, "shell", "gcstatus", "--bookie", bookie, "--json")).stdout)
    assert (status["suspended_major"], status["suspended_minor"]) == (True, True)
    resumed = await run(uri, "shell", "resumecompaction", "--bookie", bookie, "--minor")
    assert resumed.stdout.strip() == (
        f"bookie {bookie}: major compaction suspended, minor compaction running"
    )


@pytest.mark.parametrize("real_cluster", [1], indirect=True)
async def test_every_way_of_not_reaching_the_admin_server_is_one_line(
    real_cluster, register: Register, closed_port: int, silent_port: int
) -> None:
    uri = real_cluster.uri
    await register("fake:1", BookieServiceInfo.for_bookie("127.0.0.1", 1))
    await register("fake:2", BookieServiceInfo.for_bookie("127.0.0.1", 2, http_port=closed_port))
    await register("fake:3", BookieServiceInfo.for_bookie("127.0.0.1", 3, http_port=silent_port))

    absent = await process(uri, "shell", "gcstatus", "--bookie", "nobody:1")
    assert one_error_line(absent) == (
        f"error: bookie nobody:1 is not registered at {uri} "
        "(bkeeper shell listbookies --all shows those that are)"
    )
    real = real_cluster.bookie_id(0)  # a real bookie, started without --http-port
    for bookie in (real, "fake:1"):
        plain = await run(uri, "shell", "gc", "--bookie", bookie)
        assert one_error_line(plain) == (
            f"error: bookie {bookie} registered no admin endpoint: start it with --http-port"
        )
    refused = await run(uri, "shell", "suspendcompaction", "--bookie", "fake:2")
    assert one_error_line(refused).startswith(
        f"error: bookie fake:2 (PUT http://127.0.0.1:{closed_port}"
        "/api/v1/bookie/gc/suspend_compaction): its admin server does not answer: "
    )
    silent = await run(uri, "shell", "gcstatus", "--bookie", "fake:3", "--timeout", "0.5")
    assert one_error_line(silent) == (
        f"error: bookie fake:3 (GET http://127.0.0.1:{silent_port}/api/v1/bookie/gc): "
        "no answer within 0.5 s"
    )


@pytest.mark.usefixtures("subprocesses")  # bookie processes refusing to start
def test_an_admin_port_in_use_is_one_line_naming_it_and_the_option(
    silent_port: int, tmp_path: Path
) -> None:
    for how in (["--http-port", str(silent_port)], ["-o", f"http_port={silent_port}"]):
        result = subprocess.run(
            [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(tmp_path / "b"),
             "--port", "0", *how],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert one_error_line(result) == (
            f"error: cannot listen on 127.0.0.1:{silent_port} (http_port, the admin HTTP "
            "server): the port is in use by another process"
        ), how
        assert not (tmp_path / "b").exists()


def test_the_table_shows_sizes_times_and_nested_values() -> None:
    rows = _rows(
        {
            "bytes_freed": 3 * 2**20,
            "started_wall_ms": 86_400_000,
            "duration_s": 0.25,
            "last_pass": {"logs_removed": 2, "error": ""},
            "previous": None,
        }
    )
    assert rows == [
        ("bytes_freed", "3,145,728 (3.0 MiB)"),
        ("duration_s", "0.250"),
        ("last_pass.error", ""),
        ("last_pass.logs_removed", "2"),
        ("previous", "-"),
        ("started_wall_ms", "86400000 (1970-01-02 00:00:00 UTC)"),
    ]


@pytest.mark.parametrize("real_cluster", [(1, ("--http-port", "0"))], indirect=True)
async def test_gc_on_a_bookie_without_admin_writes_is_one_line_naming_the_option(
    real_cluster,
) -> None:
    uri, bookie = real_cluster.uri, real_cluster.bookie_id(0)
    status = await run(uri, "shell", "gcstatus", "--bookie", bookie, "--json")
    assert status.returncode == 0, status.stderr  # reads are served
    refused = await run(uri, "shell", "gc", "--bookie", bookie)
    line = one_error_line(refused)
    assert line.startswith(f"error: bookie {bookie} (PUT http://"), line
    assert line.endswith(
        "/api/v1/bookie/gc) answered 403: PUT /api/v1/bookie/gc changes the bookie or the "
        "cluster: the admin server takes no such request unless started with "
        "http_admin_writes (--http-admin-writes)"
    ), line
