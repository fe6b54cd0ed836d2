"""The admin HTTP server of a real bookie in this process: started and stopped with it, its
address published in the registration (endpoint ``httpserver``), its answers following the
bookie's state; a port in use is one error naming the port and the option."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.meta.bookie_info import HTTP_ENDPOINT_ID, Endpoint
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.server import Bookie, BookieConfig
from bkeeper.storage import MemoryFileSystem
from tests.server.admin_client import call

MIB = 1024 * 1024
STATE = "/api/v1/bookie/state"


@pytest.fixture
def uri() -> str:
    return f"memory://{uuid.uuid4().hex[:8]}/ledgers"


@pytest.fixture
async def cluster(uri: str) -> AsyncIterator[ClusterMetadata]:
    async with await ClusterMetadata.open(uri) as metadata:
        await metadata.format()
        yield metadata


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


async def wait_registered(cluster: ClusterMetadata, bookie: Bookie, read_only: bool) -> None:
    async with asyncio.timeout(30), contextlib.aclosing(cluster.registry.watch()) as sets:
        async for bookies in sets:
            if bookie.bookie_id in (bookies.read_only if read_only else bookies.writable):
                return


async def test_registered_with_its_admin_endpoint(start_bookie, cluster, uri) -> None:
    bookie = await start_bookie(metadata_uri=uri, http_port=0)
    await wait_registered(cluster, bookie, read_only=False)
    assert bookie.http_port not in (None, 0)
    assert bookie.admin_url == f"http://127.0.0.1:{bookie.http_port}"
    info = await cluster.registry.service_info(bookie.bookie_id)
    assert info.endpoint(HTTP_ENDPOINT_ID) == Endpoint(
        HTTP_ENDPOINT_ID, "127.0.0.1", bookie.http_port, "http"
    )
    ready = await call(bookie.http_port, "GET", "/api/v1/bookie/is_ready")
    assert (ready.status, ready.json()) == (200, {"ready": True})


async def test_on_every_address_it_publishes_the_bookie_host(start_bookie, cluster, uri) -> None:
    bookie = await start_bookie(metadata_uri=uri, http_port=0, http_host="0.0.0.0")
    await wait_registered(cluster, bookie, read_only=False)
    info = await cluster.registry.service_info(bookie.bookie_id)
    endpoint = info.endpoint(HTTP_ENDPOINT_ID)
    assert endpoint is not None and (endpoint.host, endpoint.port) == (
        "127.0.0.1",
        bookie.http_port,
    )


async def test_without_http_port_no_admin_server_and_no_endpoint(
    start_bookie, cluster, uri
) -> None:
    bookie = await start_bookie(metadata_uri=uri)
    await wait_registered(cluster, bookie, read_only=False)
    assert (bookie.http_port, bookie.admin_url) == (None, None)
    info = await cluster.registry.service_info(bookie.bookie_id)
    assert info.endpoint(HTTP_ENDPOINT_ID) is None
    assert info.endpoint() is not None


async def test_state_and_info_follow_the_bookie(start_bookie, tmp_path: Path) -> None:
    fs = MemoryFileSystem(capacity_bytes=8 * MIB)
    storage = {"disk_high_priority_free_bytes_min": 64 * 1024}
    bookie = await start_bookie(fs=fs, storage=storage, http_port=0)
    state = await call(bookie.http_port, "GET", STATE)
    assert state.json() == {
        "running": True,
        "readOnly": False,
        "shuttingDown": False,
        "availableForHighPriorityWrites": True,
    }
    total, free = fs.disk_usage("/")
    info = await call(bookie.http_port, "GET", "/api/v1/bookie/info")
    assert info.json() == {"freeSpace": free, "totalSpace": total}

    handle = fs.open_append("/filler")  # over the threshold, with room for recovery writes
    handle.write(b"\0" * (free - int(total * 0.03)))
    handle.close()
    assert bookie.check_disk() is True
    state = await call(bookie.http_port, "GET", STATE)
    assert (state.json()["readOnly"], state.json()["availableForHighPriorityWrites"]) == (
        True,
        True,
    )
    fs.remove("/filler")
    assert bookie.check_disk() is False
    assert (await call(bookie.http_port, "GET", STATE)).json()["readOnly"] is False


async def test_a_bookie_that_stops_closes_its_admin_server(start_bookie) -> None:
    bookie = await start_bookie(http_port=0)
    port = bookie.http_port
    assert (await call(port, "GET", STATE)).status == 200
    status = bookie.status()
    assert (status.ready, status.shutting_down) == (True, False)
    await bookie.aclose()
    status = bookie.status()
    assert (status.ready, status.not_ready_reason) == (False, "the bookie is shutting down")
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_an_admin_port_in_use_is_one_error_naming_it(
    start_bookie, taken_port: int, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as caught:
        await start_bookie(tmp_path / "b", http_port=taken_port)
    assert str(caught.value) == (
        f"cannot listen on 127.0.0.1:{taken_port} (http_port, the admin HTTP server): "
        "the port is in use by another process"
    )
    assert not (tmp_path / "b").exists(), "refused before the data dir was touched"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"http_port": 70000}, r"http_port: 70000 is not a TCP port \(0..65535\)"),
        ({"http_port": True}, "http_port: True is not a TCP port"),
        ({"http_port": 4000, "port": 4000}, "http_port: 4000 is the bookie's port too"),
    ],
)
def test_http_port_is_validated(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BookieConfig(data_dir="/d", **fields)  # type: ignore[arg-type]


def test_the_admin_host_defaults_to_loopback_whatever_the_bookie_host() -> None:
    assert BookieConfig(data_dir="/d", host="10.0.0.1").effective_http_host == "127.0.0.1"
    assert BookieConfig(data_dir="/d", host="0.0.0.0").effective_http_host == "127.0.0.1"
    config = BookieConfig(data_dir="/d", host="10.0.0.1", http_host="0.0.0.0", http_port=4000)
    assert config.effective_http_host == "0.0.0.0"
    # Same port, other address: allowed.
    BookieConfig(data_dir="/d", port=4000, http_port=4000, host="10.0.0.1", http_host="10.0.0.2")


#: The keys of the GC status the spec promises (docs/admin.md).
STATUS_KEYS = {
    "running", "suspended_major", "suspended_minor", "passes", "last_pass",
    "ledgers_deleted_total", "logs_removed_total", "logs_compacted_total", "bytes_freed_total",
    "entry_logs", "entry_log_bytes", "live_bytes", "gc_wait_ms", "disk_state",
}  # fmt: skip


async def test_the_gc_endpoints_drive_the_bookies_garbage_collector(start_bookie) -> None:
    bookie = await start_bookie(http_port=0, gc_wait_ms=3_600_000, http_admin_writes=True)
    gc = "/api/v1/bookie/gc"
    status = (await call(bookie.http_port, "GET", gc)).json()
    assert set(status) >= STATUS_KEYS and status["passes"] == 0
    assert status["gc_wait_ms"] == 3_600_000
    report = await call(bookie.http_port, "PUT", gc, {"forceMajor": True})
    assert report.status == 200
    assert (report.json()["major"], report.json()["stopped"]) == (True, False)
    after = (await call(bookie.http_port, "GET", gc)).json()
    assert (after["passes"], after["last_pass"]) == (1, report.json())
    details = (await call(bookie.http_port, "GET", "/api/v1/bookie/gc_details")).json()
    assert len(details) == 1 and details[0]["passes"] == 1

    suspend = await call(
        bookie.http_port, "PUT", f"{gc}/suspend_compaction", {"suspendMinor": True}
    )
    assert suspend.json() == {"isMajorGcSuspended": False, "isMinorGcSuspended": True}
    assert bookie.garbage_collector is not None
    assert bookie.garbage_collector.status()["suspended_minor"] is True
    resume = await call(bookie.http_port, "PUT", f"{gc}/resume_compaction", {"resumeMinor": True})
    assert resume.json() == {"isMajorGcSuspended": False, "isMinorGcSuspended": False}


async def test_without_http_admin_writes_the_bookie_refuses_a_gc_pass(start_bookie) -> None:
    bookie = await start_bookie(http_port=0, gc_wait_ms=3_600_000)
    refused = await call(bookie.http_port, "PUT", "/api/v1/bookie/gc", {"forceMajor": True})
    assert refused.status == 403
    assert "unless started with http_admin_writes (--http-admin-writes)" in refused.error
    assert bookie.garbage_collector is not None
    assert bookie.garbage_collector.status()["passes"] == 0
