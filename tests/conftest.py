"""Fixtures shared by every test package: one real ZooKeeper per test session, small tmpfs
disks for full-disk tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.testing.tmpfs import mounted_tmpfs
from bkeeper.testing.zookeeper import (
    ZooKeeperConfig,
    ZooKeeperServer,
    find_java,
    find_zookeeper_classpath,
)


@pytest.fixture(scope="session")
def zookeeper_home() -> Path | None:
    """``ZOOKEEPER_HOME`` if set; the test is skipped (with why) when ZooKeeper cannot run."""
    home = os.environ.get("ZOOKEEPER_HOME")
    zookeeper_home = Path(home) if home else None
    try:
        find_java()
        find_zookeeper_classpath(zookeeper_home)
    except ConfigError as exc:
        pytest.skip(f"no real ZooKeeper: {exc}")
    return zookeeper_home


@pytest.fixture(scope="session")
def zookeeper(
    tmp_path_factory: pytest.TempPathFactory, zookeeper_home: Path | None
) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper on 127.0.0.1 and a free port, started once per test session.

    Tests sharing it keep apart by using their own root path.
    """
    config = ZooKeeperConfig(
        data_dir=tmp_path_factory.mktemp("zookeeper"),
        port=0,
        tick_time_ms=500,
        zookeeper_home=zookeeper_home,
    )
    with ZooKeeperServer(config) as server:
        yield server


#: The size of the tmpfs that full-disk tests fill.
SMALL_TMPFS_BYTES = 64 * 1024 * 1024


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs mounted for the test, unmounted after it. Where it cannot be mounted
    the test is skipped with the reason, except in CI (``CI`` or
    ``BKEEPER_REQUIRE_INTEGRATION`` set), where that is a failure."""
    try:
        mount = mounted_tmpfs(tmp_path / "tmpfs", SMALL_TMPFS_BYTES)
        path = mount.__enter__()
    except ConfigError as exc:
        if os.environ.get("CI") or os.environ.get("BKEEPER_REQUIRE_INTEGRATION"):
            pytest.fail(f"a full-disk test needs a tmpfs: {exc}")
        pytest.skip(f"a full-disk test needs a tmpfs: {exc}")
    try:
        yield path
    finally:
        mount.__exit__(None, None, None)
