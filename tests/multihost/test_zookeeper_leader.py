"""The ZooKeeper leader killed (SIGKILL) under a writer appending continuously: no
acknowledged entry is lost, the writer goes on, metadata operations work once the two
servers left have elected a new leader, and the killed server rejoins as a follower with the
data written meanwhile."""

from __future__ import annotations

from bkeeper.client import BookKeeper
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.multihost import MultiHostCluster
from tests.multihost.writer import PASSWORD, PacedWriter, check_all_read_back, run_in_thread

#: The writer's appends a second.
RATE_PER_S = 500
#: How long the two servers left may take to elect a new leader.
ELECTION_S = 20.0
#: How long the writer may take to have this many more appends acknowledged after the kill
#: (adds need no ZooKeeper: they should never stop; the bound allows for a loaded machine).
APPENDS_AFTER_KILL = 2 * RATE_PER_S
APPENDS_RESUME_S = 15.0
#: How long a metadata operation (a ledger's creation) may take once a leader is elected
#: (the client tries again while its session reconnects).
METADATA_CALL_S = 30.0


def test_the_zookeeper_leader_killed_under_a_writer_loses_nothing(
    multihost_cluster: MultiHostCluster,
) -> None:
    cluster = multihost_cluster
    ensemble = cluster.zookeeper
    leader = ensemble.leader()
    assert leader is not None
    writer = PacedWriter(cluster.metadata_uri, RATE_PER_S)
    writer.start()
    try:
        writer.wait_acknowledged(RATE_PER_S // 2, APPENDS_RESUME_S, "appends before the kill")
        ensemble.kill_server(leader)
        at_kill = writer.acknowledged
        others = [k for k in range(len(ensemble.servers)) if k != leader]
        ensemble.wait_serving(others, "a new leader", timeout_s=ELECTION_S)
        new_leader = ensemble.leader()
        assert new_leader in others

        writer.wait_acknowledged(
            at_kill + APPENDS_AFTER_KILL, APPENDS_RESUME_S, "appends after the leader's kill"
        )

        async def create_ledger(client: BookKeeper) -> int:
            handle = await client.create_ledger(password=PASSWORD)
            await handle.append(b"created under the new leader")
            await handle.close()
            return handle.ledger_id

        created = writer.run(create_ledger, METADATA_CALL_S)

        ensemble.start_server(leader)  # waits until it serves
        assert ensemble.mode(leader) == "follower"
        assert ensemble.leader() == new_leader
        writer.wait_acknowledged(
            writer.acknowledged + RATE_PER_S // 2, APPENDS_RESUME_S, "appends after rejoining"
        )
    finally:
        result = writer.stop()
    assert result.failures == []
    assert len(result.acknowledged) == result.appended
    check_all_read_back(cluster.metadata_uri, result)

    # The server that rejoined has what was written while it was dead (read from it alone).
    server = ensemble.servers[leader]
    alone = f"zk://{server.host}:{server.client_port}{cluster.config.root}"

    async def read_metadata() -> tuple[str, int]:
        async with await ClusterMetadata.open(alone) as metadata:
            versioned = await metadata.ledgers.read(created)
            return versioned.value.state.name, versioned.value.last_entry_id

    assert run_in_thread(read_metadata) == ("CLOSED", 0)
