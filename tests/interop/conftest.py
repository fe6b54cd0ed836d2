"""Fixtures of the interoperability tests: Java BookKeeper's build, a cluster formatted by
bkeeper on the session's real ZooKeeper, Java's client (one JVM per module), and clusters of
bookie processes (bkeeper's, Java's, or both)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.interop.javabk import (
    BOOKIE_START_TIMEOUT_S,
    JavaBookie,
    JavaBookKeeper,
    JavaClient,
    find_javabk,
)


@pytest.fixture(scope="session")
def javabk() -> JavaBookKeeper:
    """Java BookKeeper 4.17's build; the test is skipped (saying why) where it or ``java``
    is missing. Under CI a missing ``java`` fails (see tests/conftest.py); a missing build
    stays a skip (no install step provides ../shared/javabk)."""
    found, why = find_javabk()
    if found is None:
        pytest.skip(why)
    return found


@pytest.fixture
async def cluster(zookeeper: ZooKeeperServer) -> AsyncIterator[tuple[str, ClusterMetadata]]:
    """A new cluster formatted by bkeeper under a root of its own: (its URI, its metadata)."""
    uri = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    async with await ClusterMetadata.open(uri) as metadata:
        await metadata.format()
        await metadata.underreplication.ensure_layout()
        yield uri, metadata


@pytest.fixture(scope="module")
def java_tls(javabk: JavaBookKeeper) -> JavaBookKeeper:
    """Java BookKeeper with what its TLS needs; skipped (saying why) without it."""
    missing = javabk.tls_missing()
    if missing is not None:
        pytest.skip(missing)
    return javabk


@pytest.fixture(scope="module")
def java_client(
    javabk: JavaBookKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaClient]:
    """Java's client for the module's tests (``client`` commands add connections)."""
    client = javabk.client(tmp_path_factory.mktemp("java-client"))
    try:
        yield client
    finally:
        client.close()


async def wait_registered(uri: str, bookie_ids: set[str], java: list[JavaBookie]) -> None:
    """Until every one of ``bookie_ids`` is registered writable. The Java bookies are
    checked every second meanwhile: one that exited, or whose main thread died, fails the
    wait at once, naming why."""
    async with await ClusterMetadata.open(uri) as metadata:
        registered: frozenset[str] = frozenset()

        async def all_registered() -> None:
            nonlocal registered
            async with contextlib.aclosing(metadata.registry.watch()) as sets:
                async for bookies in sets:
                    registered = bookies.writable
                    if bookie_ids <= registered:
                        return
            raise AssertionError("the registry's watch ended before the bookies registered")

        watching = asyncio.create_task(all_registered())
        deadline = asyncio.get_running_loop().time() + BOOKIE_START_TIMEOUT_S
        try:
            while not watching.done():
                await asyncio.wait({watching}, timeout=1.0)
                for bookie in java:
                    bookie.check_running()
                if asyncio.get_running_loop().time() > deadline:
                    missing = sorted(bookie_ids - registered)
                    raise AssertionError(
                        f"bookies {missing} not registered within {BOOKIE_START_TIMEOUT_S:g} s"
                    )
            watching.result()
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)


def start_java_bookies(
    javabk: JavaBookKeeper, uri: str, count: int, data_dir: Path, **settings: str
) -> list[JavaBookie]:
    """``count`` Java bookies (``settings``: more ``bk_server.conf`` lines)."""
    return [javabk.bookie(uri, data_dir / f"java-bookie-{i}", **settings) for i in range(count)]


async def wait_unregistered(uri: str, bookie_ids: set[str], timeout_s: float) -> None:
    """Until none of ``bookie_ids`` is registered (writable or read-only): a bookie killed
    with SIGKILL stays registered until ZooKeeper expires its session."""
    async with await ClusterMetadata.open(uri) as metadata:
        left: set[str] = set(bookie_ids)

        async def gone() -> None:
            nonlocal left
            async with contextlib.aclosing(metadata.registry.watch()) as sets:
                async for bookies in sets:
                    left = bookie_ids & (bookies.writable | bookies.read_only)
                    if not left:
                        return
            raise AssertionError("the registry's watch ended before the bookies left")

        try:
            await asyncio.wait_for(gone(), timeout_s)
        except TimeoutError:
            raise AssertionError(
                f"bookies {sorted(left)} still registered after {timeout_s:g} s"
            ) from None
