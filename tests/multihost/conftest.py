"""A multi-host cluster per test module (issue 42): a 3-server ZooKeeper ensemble and 6
bookies in 3 racks, each process in a network namespace of its own with its own address,
the tests' clients in this process's namespace (:mod:`bkeeper.testing.multihost`).

Without root or ``ip`` the module's tests are skipped saying so; under CI (``CI``,
``BKEEPER_REQUIRE_INTEGRATION`` or ``--require-integration``) they fail instead. A test may
stop, kill, isolate and restart what it likes, but leaves the cluster whole: every bookie and
ZooKeeper server running and every link up (``cluster_left_whole`` checks, around each
test, so a module's later tests do not fail for an earlier one's reason).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.testing.multihost import MultiHostCluster, MultiHostConfig
from bkeeper.testing.netns import namespaces_unavailable
from tests.conftest import integration_required


@pytest.fixture(scope="module")
def multihost_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper_home: Path | None,
    request: pytest.FixtureRequest,
) -> Iterator[MultiHostCluster]:
    """A started :class:`MultiHostCluster` (module doc) for the module's tests."""
    why = namespaces_unavailable()
    if why is not None:
        if integration_required(request.config):
            pytest.fail(f"a multi-host cluster cannot run here: {why}")
        pytest.skip(f"a multi-host cluster cannot run here: {why}")
    config = MultiHostConfig(
        data_dir=tmp_path_factory.mktemp("multihost"), zookeeper_home=zookeeper_home
    )
    with MultiHostCluster(config) as cluster:
        yield cluster


def not_whole(cluster: MultiHostCluster) -> list[str]:
    """What of the cluster is not running or not connected, one line each."""
    wrong = [f"bookie {i} is not running" for i in range(cluster.config.bookies)
             if not cluster.bookie_running(i)]  # fmt: skip
    running = cluster.zookeeper.running()
    wrong += [f"ZooKeeper server {k} is not running"
              for k in range(cluster.config.zookeepers) if k not in running]  # fmt: skip
    links = subprocess.run(
        ["ip", "-o", "link", "show", "master", cluster.network.bridge],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    wrong += [f"link {line.split(':')[1].strip().split('@')[0]} is down"
              for line in links.splitlines() if "state DOWN" in line]  # fmt: skip
    return wrong


@pytest.fixture(autouse=True)
def cluster_left_whole(request: pytest.FixtureRequest) -> Iterator[None]:
    """The module's cluster is whole before each test and after it (module doc)."""
    if "multihost_cluster" not in request.fixturenames:
        yield
        return
    cluster: MultiHostCluster = request.getfixturevalue("multihost_cluster")
    assert not_whole(cluster) == [], "before this test"
    yield
    assert not_whole(cluster) == [], "after this test (it must leave the cluster whole)"
