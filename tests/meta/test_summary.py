"""``cluster_summary`` (``bkeeper shell clusterinfo``), on memory:// and a real ZooKeeper."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.meta import BookieServiceInfo, ClusterMetadata, Cookie, auditor_election
from bkeeper.meta.summary import cluster_summary

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_the_summary_counts_bookies_by_state_and_names_the_auditor(
    metadata_uri: str,
) -> None:
    async with await ClusterMetadata.open(metadata_uri) as cluster:
        instance_id = await cluster.format()
        empty = await cluster_summary(cluster)
        assert empty.as_json() == {
            "auditorElected": False,
            "auditorId": "",
            "clusterUnderReplicated": False,
            "ledgerReplicationEnabled": True,
            "totalBookiesCount": 0,
            "writableBookiesCount": 0,
            "readonlyBookiesCount": 0,
            "unavailableBookiesCount": 0,
            "instanceId": instance_id,
            "writableBookies": [],
            "readonlyBookies": [],
            "unavailableBookies": [],
            "underReplicatedLedgersCount": 0,
            "underReplicatedLedgersCountCapped": False,
            "lostBookieRecoveryDelaySeconds": None,
        }
        # b1 writable, b2 read-only (both with cookies), b3 only a cookie: unavailable.
        for bookie in ("b1:3181", "b2:3181", "b3:3181"):
            await cluster.cookies.write(bookie, Cookie(bookie, ("/j",), ("/l",), instance_id))
        info = BookieServiceInfo.for_bookie("127.0.0.1", 3181)
        async with (
            await cluster.registry.register("b1:3181", info),
            await cluster.registry.register("b2:3181", info, read_only=True),
            auditor_election(cluster.store, cluster.root, "b1:3181") as election,
        ):
            await asyncio.wait_for(election.wait_leadership(), 10)
            await cluster.underreplication.mark_underreplicated(7, ["b3:3181"])
            await cluster.underreplication.mark_underreplicated(9, ["b3:3181"])
            await cluster.underreplication.disable()
            await cluster.underreplication.set_lost_bookie_recovery_delay_s(30)
            summary = await cluster_summary(cluster)
        assert (summary.writable, summary.read_only, summary.unavailable) == (
            ("b1:3181",), ("b2:3181",), ("b3:3181",),
        )  # fmt: skip
        assert summary.total == 3 and summary.auditor == "b1:3181"
        assert (summary.under_replicated, summary.under_replicated_capped) == (2, False)
        assert summary.replication_enabled is False
        assert summary.lost_bookie_recovery_delay_s == 30
        shown = summary.as_json()
        assert shown["clusterUnderReplicated"] is True and shown["auditorElected"] is True
        # Unregistered now: all three are unavailable, and nobody is the auditor.
        after = await cluster_summary(cluster)
        assert (after.unavailable, after.auditor) == (("b1:3181", "b2:3181", "b3:3181"), None)
