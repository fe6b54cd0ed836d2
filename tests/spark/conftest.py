"""Real Spark (local[2]) against a real cluster: the session's ZooKeeper plus three bookie
processes, both shared by every test of a module. Spark's scratch files go to pytest's temp
dirs, and the JVM PySpark starts in this process is stopped when the session ends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.client.conftest import RealCluster


async def _format(uri: str) -> None:
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()


@pytest.fixture(scope="module")
def spark_cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealCluster]:
    uri = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    with ThreadPoolExecutor(1) as pool:  # outside the tests' event loop
        pool.submit(asyncio.run, _format(uri)).result()
    real = RealCluster(
        uri,
        tmp_path_factory.mktemp("spark-bookies"),
        [0, 0, 0],  # ports: the bookies' picks
    )
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(real.start, range(3)))
        yield real
    finally:
        real.stop_all()


@pytest.fixture(scope="session")
def spark_jvm() -> Iterator[None]:
    """Ends the JVM that the modules' sessions share (PySpark keeps it until the process
    exits) once the test session is over, so that no process outlives the tests."""
    pytest.importorskip("pyspark")
    from bkeeper.spark.session import stop_jvm

    yield
    stop_jvm()


@pytest.fixture(scope="module")
def spark(spark_jvm: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from bkeeper.spark.session import local_session

    scratch = tmp_path_factory.mktemp("spark-scratch")
    session = local_session("local[2]", "bkeeper-tests", scratch_dir=scratch)
    yield session
    session.stop()
