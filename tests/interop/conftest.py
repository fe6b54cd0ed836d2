"""Fixtures of the interoperability tests: Java BookKeeper's build, and a cluster formatted
by bkeeper on the session's real ZooKeeper."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.interop.javabk import JavaBookKeeper, find_javabk


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
