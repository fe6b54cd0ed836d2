"""Fixtures shared by every test package: one real ZooKeeper per test session, small tmpfs
disks for full-disk tests, and a check that the session leaves no process and no file
behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from bkeeper.common.errors import ConfigError
from bkeeper.testing.tmpfs import mounted_tmpfs
from bkeeper.testing.zookeeper import (
    ZooKeeperConfig,
    ZooKeeperServer,
    find_java,
    find_zookeeper_classpath,
)
from tests.forkserver import stop_fork_server
from tests.interop.javabk import OPTIONAL_PEER_MISSING

#: A client's settings a user's shell may hold (after pasting what `bkeeper sandbox` prints):
#: the tests choose their own cluster and credentials, so they run without these.
CLIENT_ENVIRONMENT = (
    "BKEEPER_METADATA",
    "BKEEPER_TLS_CA",
    "BKEEPER_TLS_CERT",
    "BKEEPER_TLS_KEY",
    "BKEEPER_TLS_NO_HOSTNAME_CHECK",
    "BKEEPER_AUTH_TOKEN_FILE",
    "BKEEPER_LEDGER_PASSWORD",
)
for _name in CLIENT_ENVIRONMENT:
    os.environ.pop(_name, None)

#: The order of test files, longest first, from tests/durations.json (``--update-durations``);
#: the tiers (``integration`` by the fixtures a test uses, ``slow``, ``--slow-full``).
pytest_plugins = ["tests.suite_order", "tests.tiers"]

# Hypothesis profiles, chosen by $HYPOTHESIS_PROFILE: "ci" (the default under CI) replays the
# same examples every run (a failure there is a change's, not the draw's); "dev" (the default
# elsewhere) draws new ones; "nightly" draws ten times as many. None has a deadline: a
# property's examples are timed by a loaded machine's scheduler, not by the code under test.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.register_profile("nightly", deadline=None, max_examples=1000)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE")
    or ("ci" if os.environ.get("CI") or os.environ.get("BKEEPER_REQUIRE_INTEGRATION") else "dev")
)

# pytest-xdist's workers (execnet) start with COLUMNS=80 and LINES=24 of their own, which a
# plain `pytest` run does not have: the CLI's tables (80 columns, else 160 into a pipe) would
# differ between `-n 0` and the suite's `-n 4` and `-n 2`. Each test that wants a width sets one.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


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
        if OPTIONAL_PEER_MISSING in str(reason):
            return  # an optional peer no install step provides (../shared/javabk)
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
    yield from _small_tmpfs(tmp_path / "tmpfs")


@pytest.fixture
def second_small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """Another 64 MiB tmpfs, as :func:`small_tmpfs` (a second disk)."""
    yield from _small_tmpfs(tmp_path / "tmpfs2")


def _small_tmpfs(where: Path) -> Iterator[Path]:
    try:
        mount = mounted_tmpfs(where, SMALL_TMPFS_BYTES)
        path = mount.__enter__()
    except ConfigError as exc:
        if os.environ.get("CI") or os.environ.get("BKEEPER_REQUIRE_INTEGRATION"):
            pytest.fail(f"a full-disk test needs a tmpfs: {exc}")
        pytest.skip(f"a full-disk test needs a tmpfs: {exc}")
    try:
        yield path
    finally:
        mount.__exit__(None, None, None)


#: JIT and GC for every JVM the tests start (ZooKeeper, Spark, Java BookKeeper): the client
#: compiler only, and the serial collector. The tests' JVMs live seconds to minutes and share
#: two cores with the bookies: C2's compile threads and G1's workers cost more CPU than they
#: earn back in so short a life (tests/spark/test_spark.py: 105 s of CPU with the defaults,
#: 68 s with these). Not a product setting: a long-lived JVM wants C2. The environment
#: variable ``BKEEPER_TEST_JVM_OPTIONS`` replaces them (empty: the JVM's defaults).
JVM_OPTIONS = os.environ.get("BKEEPER_TEST_JVM_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
#: Carried in the environment of every process the test session starts (its value: the
#: session's temp dir), so that one whose parent died is still known as the session's.
SESSION_ENV = "BKEEPER_TEST_SESSION"
#: How long processes may take to exit once the session is over (the environment variable
#: ``BKEEPER_TEST_LEFTOVER_WAIT_S`` overrides it: tests of this check run a session with less).
LEFTOVER_WAIT_S = float(os.environ.get("BKEEPER_TEST_LEFTOVER_WAIT_S", "30"))


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fails the session, naming them, if processes or temp files outlive it.

    For the session, the system temp dir of this process and of every process it starts is
    a new ``bkeeper-tests-*`` directory: ``TMPDIR`` for Python and the rest, and
    ``java.io.tmpdir`` for JVMs (``JAVA_TOOL_OPTIONS``, with ``JVM_OPTIONS``), where Spark makes its ``spark-*``
    and ``blockmgr-*`` directories unless told otherwise. Other test runs on the same
    machine make the same names in the real temp dir, so only this one is checked: it must
    be empty at the end (pytest's own temp root stays where it was). Processes: those that
    descend from this one, or carry ``SESSION_ENV`` in their environment (a child of a
    process that died), must be gone. Leftovers are killed and removed after being named.
    """
    tmp_path_factory.getbasetemp()  # pytest's temp root: fixed before TMPDIR changes
    scratch = Path(tempfile.mkdtemp(prefix="bkeeper-tests-"))
    java_options = os.environ.get("JAVA_TOOL_OPTIONS", "")
    changed = {
        "TMPDIR": str(scratch),
        SESSION_ENV: scratch.name,
        "JAVA_TOOL_OPTIONS": f"{java_options} -Djava.io.tmpdir={scratch} {JVM_OPTIONS}".strip(),
    }
    saved = {name: os.environ.get(name) for name in changed}
    saved_tempdir = tempfile.tempdir
    os.environ.update(changed)
    tempfile.tempdir = str(scratch)
    before = _session_processes(scratch.name)
    try:
        yield
    finally:
        tempfile.tempdir = saved_tempdir
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    deadline = time.monotonic() + LEFTOVER_WAIT_S
    while (left := _new(before, _session_processes(scratch.name))) and time.monotonic() < deadline:
        time.sleep(0.1)
    files = sorted(str(path) for path in scratch.iterdir())
    for pid, started in left:
        if _start_time(pid) == started:  # still that process, not a reused pid
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(scratch)
    if left or files:
        lines = [f"process {pid}: {command}" for (pid, _), command in sorted(left.items())]
        lines += [f"file {name}" for name in files]
        pytest.fail(
            f"the test session left {len(left)} processes (killed now) and {len(files)} "
            "temp files (removed now) behind:\n  " + "\n  ".join(lines),
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def fork_server_stopped(nothing_left_behind: None) -> Iterator[None]:
    """Ends this process's bookie fork server (tests/forkserver.py), if a test started it,
    before the leftover check looks."""
    yield
    stop_fork_server()


def _new(before: dict[tuple[int, int], str], now: dict[tuple[int, int], str]) -> dict:
    return {key: command for key, command in now.items() if key not in before}


def _session_processes(token: str) -> dict[tuple[int, int], str]:
    """``(pid, start time) -> command line`` of the live processes that descend from this
    one or carry ``SESSION_ENV=token`` in their environment (empty without ``/proc``)."""
    me = os.getpid()
    children: dict[int, list[int]] = {}
    alive: dict[int, int] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = _stat_fields(stat)
        if fields[0] == "Z":
            continue  # exited; only its parent's wait() is missing
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        alive[pid] = int(fields[19])  # start time: tells a reused pid apart
    found: set[int] = set()
    todo = list(children.get(me, []))
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, []))
    marker = f"\0{SESSION_ENV}={token}\0".encode()
    for pid in alive.keys() - found - {me}:
        try:
            environ = (proc / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        if marker in b"\0" + environ:
            found.add(pid)
    return {(pid, alive[pid]): _command(pid) for pid in found if pid in alive}


def _stat_fields(stat: str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` from the state on (the command may hold spaces)."""
    return stat[stat.rindex(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    try:
        return int(_stat_fields(Path(f"/proc/{pid}/stat").read_text())[19])
    except OSError:
        return None


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "(exited)"
    command = raw.replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    if "forkserver.py" in command:  # a fork server's child shows the server's command line
        with contextlib.suppress(OSError):
            command += f" [its name: {Path(f'/proc/{pid}/comm').read_text().strip()}]"
    return command
