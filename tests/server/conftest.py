"""Fixtures for bookie tests: an in-process bookie on an ephemeral port and clients to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from bkeeper.client.bookie_client import BookieClient
from bkeeper.server import Bookie, BookieConfig
from bkeeper.storage import FileSystem, StorageConfig
from bkeeper.wire.codes import Protocol

StartBookie = Callable[..., Awaitable[Bookie]]


@pytest.fixture
async def start_bookie(tmp_path: Path) -> AsyncIterator[StartBookie]:
    """Start bookies in this process; every one still running is closed at the end."""
    started: list[Bookie] = []

    async def start(
        data_dir: Path | None = None,
        *,
        fs: FileSystem | None = None,
        storage: dict[str, object] | None = None,
        **overrides: object,
    ) -> Bookie:
        """``fs`` and ``storage`` (StorageConfig fields) go to the storage engine, the
        ``overrides`` to BookieConfig."""
        directory = str(data_dir or tmp_path / "bookie")
        config = BookieConfig(data_dir=directory, port=int(overrides.pop("port", 0)), **overrides)  # type: ignore[arg-type]
        storage_config = StorageConfig(data_dir=directory, **(storage or {}))  # type: ignore[arg-type]
        bookie = Bookie(config, storage_config, fs)
        await bookie.start()
        started.append(bookie)
        return bookie

    yield start
    for bookie in started:
        await bookie.aclose()


@pytest.fixture
async def connect() -> AsyncIterator[Callable[..., Awaitable[BookieClient]]]:
    clients: list[BookieClient] = []

    async def make(bookie: Bookie, protocol: Protocol = Protocol.V3) -> BookieClient:
        client = await BookieClient.connect("127.0.0.1", bookie.port, protocol)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()
