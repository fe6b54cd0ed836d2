"""The suite's tiers: which tests start real processes (``integration``), and which are
benchmark smoke runs or long verify runs (``slow``).

``integration`` is never written by hand. A test is in it when it uses, directly or through
other fixtures, one of :data:`PROCESS_FIXTURES`: the fixtures that start a process
(ZooKeeper, bookies, Spark's JVM, a sandbox, Java BookKeeper, Chromium) or, for a test that
starts one itself, the marker fixture ``subprocesses``. ``scripts/test.sh`` runs
``-m "not integration"`` first (stopping at its first failure), then ``-m integration``.

What keeps the list honest: every test runs under an audit hook (:func:`sys.addaudithook`)
that sees each process started (``subprocess.Popen``, ``os.posix_spawn``, ``os.fork``,
``os.system``, ``os.exec``) while the test or its fixtures run. A test outside the
``integration`` tier that starts one fails at teardown, saying what it started and which
fixture to use, so a new process-starting fixture or test cannot slip into the in-process
tier.

``slow`` is written by hand on benchmark smoke runs and long verify runs. They run in every
tier, in a reduced form (fewer records, shorter schedules, still every output field and exit
code checked), unless ``--slow-full`` asks for their full form: they read it from the
``slow_full`` fixture.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

__all__ = [
    "PROCESS_EVENTS",
    "PROCESS_FIXTURES",
    "fixtures_used",
    "is_integration",
    "slow_full",
    "subprocesses",
]

#: Fixtures that start a process themselves (a test using any of them, even through another
#: fixture, is an integration test).
PROCESS_FIXTURES = frozenset(
    {
        "subprocesses",  # a test or fixture that starts a process itself says so with this
        "zookeeper",
        "zookeeper_home",  # runs `java -version` to find a JVM
        "own_zookeeper",
        "routable_zookeeper",
        "real_cluster",
        "shared_cluster",
        "spark_jvm",
        "spark",
        "spark_cluster",
        "standalone",
        "sandbox",
        "multihost_cluster",  # a ZooKeeper ensemble and bookies in network namespaces
        "javabk",
        "small_tmpfs",  # mounts a tmpfs (`mount`)
        "second_small_tmpfs",
    }
)

#: Audit events that start a process.
PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.system",
     "os.exec"}
)  # fmt: skip


@pytest.fixture(scope="session")
def subprocesses() -> None:
    """Says that a test (or fixture) starts processes itself: it is an integration test."""


@pytest.fixture(scope="session")
def slow_full(request: pytest.FixtureRequest) -> bool:
    """True with ``--slow-full``: a ``slow`` test runs its full form (CI runs the reduced)."""
    return bool(request.config.getoption("--slow-full"))


def fixtures_used(item: pytest.Item) -> set[str]:
    """The fixtures ``item`` declares: its closure, and the ``takes`` marks of its
    parameters. A fixture parameter that needs a process fixture takes it with
    ``request.getfixturevalue``, out of pytest's sight, and says so with
    ``pytest.param("zk", marks=pytest.mark.takes("zookeeper"))`` (pytest refuses
    ``usefixtures`` on a parameter)."""
    names = set(getattr(item, "fixturenames", ()))
    for mark in item.iter_markers("takes"):
        names.update(mark.args)
    return names


def is_integration(item: pytest.Item) -> bool:
    return bool(PROCESS_FIXTURES.intersection(fixtures_used(item)))


def _taken_undeclared(item: pytest.Item) -> set[str]:
    """Process fixtures ``item`` took with ``getfixturevalue`` without declaring them."""
    request = getattr(item, "_request", None)
    taken = set(getattr(request, "_fixture_defs", {}) or {})
    return PROCESS_FIXTURES.intersection(taken) - fixtures_used(item)


class _Watch:
    """What the audit hook saw while the current test ran."""

    current: pytest.Item | None = None
    started: ClassVar[list[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in PROCESS_EVENTS and _Watch.current is not None:
        what = args[0] if args else ""
        if event == "subprocess.Popen" and len(args) > 1:
            what = args[1]
        _Watch.started.append(f"{event} {what!r}"[:200])


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow-full",
        action="store_true",
        help="Run the slow tier's full form (longer benchmark smoke runs and verify runs); "
        "without it they run the reduced form CI runs.",
    )


def pytest_configure(config: pytest.Config) -> None:
    for marker in (
        "integration: starts real processes (ZooKeeper, bookies, Spark, Java, Chromium); set "
        "by the fixtures a test uses, never by hand (tests/tiers.py)",
        "takes(fixture): a fixture parameter that takes a process fixture with "
        "getfixturevalue (tests/tiers.py)",
        "slow: a benchmark smoke run or long verify run: its reduced form unless --slow-full",
    ):
        config.addinivalue_line("markers", marker)
    sys.addaudithook(_audit)  # (cannot be removed: it does nothing outside a test)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects and tests/suite_order.py orders
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_integration(item):
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _Watch.current = item
    _Watch.started.clear()
    try:
        yield
    finally:
        _Watch.current = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if call.when != "teardown" or not report.passed or is_integration(item):
        return
    if _Watch.started:
        started = "; ".join(_Watch.started[:3])
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started {len(_Watch.started)} process(es) ({started}) but uses no "
            "process fixture, so it is counted in the in-process tier: use the fixture that "
            "starts it, or request `subprocesses` (tests/tiers.py)"
        )
    elif undeclared := _taken_undeclared(item):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {', '.join(sorted(undeclared))} with getfixturevalue, which "
            "the tiers cannot see: declare it (as an argument, or on the parameter that needs "
            "it: pytest.param(..., marks=pytest.mark.takes(NAME))) (tests/tiers.py)"
        )
