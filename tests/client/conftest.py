"""Real clusters for client tests: the session's ZooKeeper plus bookie processes over TCP.

Bookies are forked by this pytest process's fork server (tests/forkserver.py): real
processes, without Python's start-up for each.

Two fixtures, one parameter (a number of bookies, or ``(number, extra bookie arguments)``,
given with ``indirect=True``):

- ``shared_cluster``, module-scoped: for tests that kill, stop and pause nothing. They share
  its bookies (and their start-up, seconds each) and use ledgers and names of their own. Its
  default is 4 bookies: an E3 ensemble with a spare, so an add that a loaded bookie answers
  late is moved to the spare instead of failing with ``NotEnoughBookiesError``. A test that
  leaves a bookie not running fails (the check after each test).
- ``real_cluster``, for one test: the test may kill, stop or restart its bookies (3 by
  default; a test that does not need exactly E asks for a spare).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bkeeper.common.errors import BKeeperError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.forkserver import ForkedProcess, fork_server

_SIGTERM = signal.SIGTERM  # the class below has a method named ``signal``


@dataclass
class RealCluster:
    uri: str
    data_dir: Path
    ports: list[int] = field(default_factory=list)
    procs: dict[int, ForkedProcess] = field(default_factory=dict)
    bookie_args: tuple[str, ...] = ()

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _stopped: bool = False

    def start(self, index: int, *args: str) -> None:
        """Start bookie ``index`` (``args``: more ``bkeeper bookie`` options) and wait until
        it says it is ready (killed if it is not in time). Its first start binds a port of
        its own choosing (``ports[index]`` 0), kept for restarts. Refused once ``stop_all``
        ran: a start still under way in another thread when a fixture gives up must not
        leave a bookie that nobody stops."""
        cmd = [
            "bookie",
            "--data-dir", str(self.data_dir / f"bookie-{index}"),
            "--port", str(self.ports[index]), "--metadata", self.uri,
            *self.bookie_args, *args,
        ]  # fmt: skip
        log_path = self.data_dir / f"bookie-{index}.log"
        with self._lock:
            if self._stopped:
                raise BKeeperError(f"bookie {index} not started: the cluster was stopped")
            offset = log_path.stat().st_size if log_path.exists() else 0
            proc = fork_server().spawn(cmd, log_path)  # `python -m bkeeper bookie ...`
            self.procs[index] = proc
        self.ports[index] = wait_ready(proc, log_path, offset)

    def bookie_id(self, index: int) -> str:
        return f"127.0.0.1:{self.ports[index]}"

    def index_of(self, bookie_id: str) -> int:
        return self.ports.index(int(bookie_id.rpartition(":")[2]))

    def require_running(self, when: str) -> None:
        """Fail naming every bookie that is not running (exited or stopped) ``when``."""
        down = [
            f"bookie {index} ({self.bookie_id(index)}): {why}"
            for index, proc in sorted(self.procs.items())
            if (why := _not_running(proc)) is not None
        ]
        if down:
            raise AssertionError(f"{when}: " + "; ".join(down))

    def signal(self, index: int, sig: int) -> None:
        os.kill(self.procs[index].pid, sig)

    def stop(self, index: int, sig: int = _SIGTERM) -> int:
        """Send ``sig`` to bookie ``index`` and wait for it to exit; its exit code."""
        proc = self.procs[index]
        proc.send_signal(sig)
        return proc.wait(30)

    def stop_all(self) -> None:
        """Kill every bookie and reap it (stopped ones too); later starts are refused."""
        with self._lock:
            self._stopped = True
            procs = list(self.procs.values())
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait()


def _not_running(proc: ForkedProcess) -> str | None:
    """Why ``proc`` is not running (exited, or stopped by a signal), or None."""
    code = proc.poll()
    if code is not None:
        return f"exited with {code}"
    try:
        state = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:  # gone between the two looks, or no /proc
        return None if proc.poll() is None else f"exited with {proc.poll()}"
    return "stopped" if state in ("T", "t") else None


@contextlib.asynccontextmanager
async def _started(
    zookeeper: ZooKeeperServer, path: Path, param: int | tuple[int, tuple[str, ...]]
) -> AsyncIterator[RealCluster]:
    # The parameter: a number of bookies, or (number, extra ``bkeeper bookie`` arguments).
    bookies, bookie_args = param if isinstance(param, tuple) else (param, ())
    uri = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
    real = RealCluster(uri, path, [0] * bookies, {}, bookie_args)  # ports: their own picks
    try:
        await asyncio.gather(*(asyncio.to_thread(real.start, i) for i in range(bookies)))
        yield real
    finally:
        real.stop_all()


@pytest.fixture
async def real_cluster(
    zookeeper: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[RealCluster]:
    """Bookie processes (3, or the ``indirect`` parameter) for one test: it may kill them."""
    async with _started(zookeeper, tmp_path, getattr(request, "param", 3)) as real:
        yield real


#: Bookies of a ``shared_cluster`` by default: E3 ensembles with a spare (issue 41).
SHARED_BOOKIES = 4


@pytest.fixture(scope="module")
async def shared_cluster(
    zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> AsyncIterator[RealCluster]:
    """Bookie processes (4, or the ``indirect`` parameter) shared by a module's tests, which
    must kill, stop and pause none of them and use ledgers and names of their own
    (``shared_cluster_left_running`` checks the first, around each test)."""
    param = getattr(request, "param", SHARED_BOOKIES)
    async with _started(zookeeper, tmp_path_factory.mktemp("shared"), param) as real:
        yield real


@pytest.fixture(autouse=True)
def shared_cluster_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test on the module's ``shared_cluster`` finds every bookie running and leaves it so:
    else it fails, naming the bookie (the module's later tests would fail for its reason).
    Autouse here (tests/client); a module elsewhere that uses ``shared_cluster`` imports it."""
    if "shared_cluster" not in request.fixturenames:
        yield
        return
    cluster: RealCluster = request.getfixturevalue("shared_cluster")
    cluster.require_running("before this test")
    yield
    cluster.require_running("after this test (it must leave every bookie running)")
