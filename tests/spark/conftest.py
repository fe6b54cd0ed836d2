"""Real Spark (local[2]) against a real cluster: the session's ZooKeeper plus bookie
processes. Both are made once per test process (a pytest-xdist worker) and shared by every
test module there:

- ``spark``: this process's one local SparkSession (its JVM and context start once, not per
  module). A test may change the session's SQL conf and start streaming queries, but must
  undo both: the check after each test fails it, naming what it left (restored then, so
  the next test is not affected). A module that needs a session of its own says why
  (``test_short_name``: a new session of the same context; ``test_standalone``: another
  master, so it stops this JVM, and the next ``spark`` starts a new one).
- ``spark_cluster``: four bookies (an E3 ensemble with a spare, so that an add a loaded
  bookie answers late moves to the spare instead of failing), which tests leave running.
  Each module starts on an empty cluster: its setup deletes every ledger and every named
  log the modules before it left, so that log names, ledger listings and "no orphan
  ledger" checks are the module's own. A module that stops or kills bookies has a cluster
  of its own (:func:`own_cluster`, e.g. ``test_failures``).

Spark's scratch files go to pytest's temp dirs, and the JVM PySpark starts in this process is
stopped when the session ends."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from bkeeper.client import BookKeeper
from bkeeper.meta.cluster import ClusterMetadata, delete_tree
from bkeeper.namedlog.core.log_metadata import logs_root
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.client.conftest import RealCluster

#: Bookies of a cluster the Spark tests share: E3 and a spare.
BOOKIES = 4


async def _format(uri: str) -> None:
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()


def _run(coro: Any) -> Any:
    with ThreadPoolExecutor(1) as pool:  # outside the tests' event loop
        return pool.submit(asyncio.run, coro).result()


@contextlib.contextmanager
def own_cluster(uri: str, data_dir: Path, bookies: int = BOOKIES) -> Iterator[RealCluster]:
    """A new cluster at ``uri`` (formatted here) of ``bookies`` bookie processes started
    together (ports: their own picks), killed on the way out."""
    _run(_format(uri))
    real = RealCluster(uri, data_dir, [0] * bookies)
    try:
        with ThreadPoolExecutor(bookies) as pool:
            list(pool.map(real.start, range(bookies)))
        yield real
    finally:
        real.stop_all()


@pytest.fixture(scope="session")
def shared_spark_cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealCluster]:
    """The bookies every module of this process shares (through ``spark_cluster``)."""
    uri = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    with own_cluster(uri, tmp_path_factory.mktemp("spark-bookies")) as real:
        yield real


async def _empty(uri: str) -> None:
    """Delete every ledger of the cluster and every named log (with their subscriptions
    and pending-ledger registries: all under the logs' parent node)."""
    async with BookKeeper(uri) as bk:
        for ledger_id in [ledger_id async for ledger_id in bk.list_ledgers()]:
            await bk.delete_ledger(ledger_id, fence=False)  # nothing writes them any more
        await delete_tree(bk.cluster.store, logs_root(bk.cluster.root).rpartition("/")[0])


@pytest.fixture(scope="module")
def spark_cluster(shared_spark_cluster: RealCluster) -> RealCluster:
    """The shared bookies, emptied for this module (see the module docstring)."""
    assert all(proc.poll() is None for proc in shared_spark_cluster.procs.values()), (
        "a shared bookie is not running: a module stopped one (it needs own_cluster)"
    )
    _run(_empty(shared_spark_cluster.uri))
    return shared_spark_cluster


@pytest.fixture(scope="session")
def spark_jvm() -> Iterator[None]:
    """Ends the JVM that the sessions share (PySpark keeps it until the process exits)
    once the test session is over, so that no process outlives the tests."""
    pytest.importorskip("pyspark")
    from bkeeper.spark.session import stop_jvm

    yield
    stop_jvm()


class _Shared:
    """This process's local session, made at first use and again once its context was
    stopped (``test_standalone`` stops the JVM to start a context of its own)."""

    session: Any = None


def _local_session(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from pyspark import SparkContext

    from bkeeper.spark.session import local_session

    if _Shared.session is None or SparkContext._active_spark_context is None:
        scratch = tmp_path_factory.mktemp("spark-scratch")
        _Shared.session = local_session("local[2]", "bkeeper-tests", scratch_dir=scratch)
    return _Shared.session


@pytest.fixture
def spark(spark_jvm: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The process's shared local session; after the test, its SQL conf must be as before
    and no streaming query may run (else the test fails, and both are put right)."""
    session = _local_session(tmp_path_factory)
    conf = _conf(session)
    yield session
    left = _left_behind(session, conf)
    if left:
        pytest.fail("the test left the shared Spark session changed: " + "; ".join(left))


def _conf(session: Any) -> dict[str, str]:
    """The session's SQL conf in one py4j call (``conf.getAll`` makes a round trip per
    setting: ~3 CPU-s of a worker's 300 s of Spark tests, py-spy)."""
    text = session._jsparkSession.conf().getAll().mkString("\x00")
    pairs = (item.split(" -> ", 1) for item in text.split("\x00") if item)
    return {key: value for key, value in pairs}


def _left_behind(session: Any, conf: dict[str, str]) -> list[str]:
    """What a test left in the shared session (undone here): running queries, conf."""
    left = []
    for query in session.streams.active:
        left.append(f"streaming query {query.name or query.id} still running (stopped now)")
        query.stop()
    now = _conf(session)
    for key in sorted(now.keys() | conf.keys()):
        if now.get(key) == conf.get(key):
            continue
        left.append(f"conf {key} is {now.get(key)!r}, was {conf.get(key)!r} (restored now)")
        if key in conf:
            session.conf.set(key, conf[key])
        else:
            session.conf.unset(key)
    return left
