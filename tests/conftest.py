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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-integration",
        action="store_true",
        help="A test that would be skipped for a missing dependency (Java, ZooKeeper jars, "
        "pyspark, ...) fails instead. Also on when $CI or $BKEEPER_REQUIRE_INTEGRATION is set.",
    )


def integration_required(config: pytest.Config) -> bool:
    """True under CI: nothing may be skipped for want of a dependency."""
    return bool(
        config.getoption("--require-integration")
        or os.environ.get("CI")
        or os.environ.get("BKEEPER_REQUIRE_INTEGRATION")
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI a skip is a failure that says what was missing: a test that cannot run
    there proves nothing, and would hide a broken install."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and integration_required(item.config):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped, but integration tests are required here: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """The same for a whole module skipped at import (a module-level ``importorskip``)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and integration_required(collector.config):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped, but integration tests are required here: {reason}"


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
