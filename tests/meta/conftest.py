"""Fixtures of the metadata conformance suite: every test runs on ``memory://`` and ``zk://``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from bkeeper.meta.memory import drop_memory_tree
from bkeeper.meta.store import NodeStore, StoreConfig
from bkeeper.meta.uri import MetadataUri, open_node_store

OpenStore = Callable[..., Awaitable[NodeStore]]


@pytest.fixture(params=["memory", pytest.param("zk", marks=pytest.mark.takes("zookeeper"))])
def metadata_uri(request: pytest.FixtureRequest) -> Iterator[str]:
    """A metadata URI with a root of its own: a fresh memory tree, or a fresh ZooKeeper path."""
    unique = uuid.uuid4().hex[:12]
    if request.param == "memory":
        yield f"memory://{unique}/ledgers"
        drop_memory_tree(unique)
        return
    zookeeper = request.getfixturevalue("zookeeper")
    yield zookeeper.uri(f"/{unique}/ledgers")


@pytest.fixture
def root(metadata_uri: str) -> str:
    return MetadataUri.parse(metadata_uri).root


@pytest.fixture
async def open_store(metadata_uri: str) -> AsyncIterator[OpenStore]:
    """Open node stores (one session each) on the test's tree; all closed at the end."""
    stores: list[NodeStore] = []

    async def open_(**config: int) -> NodeStore:
        store = await open_node_store(metadata_uri, StoreConfig(**config))
        stores.append(store)
        return store

    yield open_
    for store in stores:
        await store.aclose()
