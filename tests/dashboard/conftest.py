"""The dashboard's tests run against the real cluster of the client tests (ZooKeeper +
bookie processes)."""

from tests.client.conftest import RealCluster, real_cluster

__all__ = ["RealCluster", "real_cluster"]
