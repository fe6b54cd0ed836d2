"""A rolling restart of every bookie under a steady writer (issue 42): 1,000 appends a second
to one E3/Qw2/Qa2 ledger while each bookie in turn is stopped (SIGTERM, waited for until it
exited), started again with its data, and waited for until it registered, before the next.
Not one append may fail, and every acknowledged entry reads back as written."""

from __future__ import annotations

import time

from bkeeper.testing.multihost import MultiHostCluster
from tests.multihost.writer import PacedWriter, check_all_read_back

#: The writer's appends a second.
RATE_PER_S = 1000
#: Appends acknowledged before the first restart, and after each (the writer goes on).
APPENDS_BETWEEN = RATE_PER_S // 4
#: How long those may take (the writer is paced: a quarter of a second unless it stalls).
APPENDS_WITHIN_S = 15.0


def test_a_rolling_restart_fails_no_append_of_a_steady_writer(
    multihost_cluster: MultiHostCluster,
) -> None:
    cluster = multihost_cluster
    writer = PacedWriter(cluster.metadata_uri, RATE_PER_S, quorum=(3, 2, 2))
    writer.start()
    restarts: list[str] = []
    try:
        writer.wait_acknowledged(APPENDS_BETWEEN, APPENDS_WITHIN_S, "appends before the restarts")

        def after(index: int) -> None:
            took = writer.wait_acknowledged(
                writer.acknowledged + APPENDS_BETWEEN,
                APPENDS_WITHIN_S,
                f"appends after bookie {index} restarted",
            )
            restarts.append(f"bookie {index}: {time.monotonic() - began:.1f} s (+{took:.1f})")

        began = time.monotonic()
        cluster.rolling_restart(between=after)
    finally:
        result = writer.stop()
    took_s = time.monotonic() - began
    assert result.failures == [], f"{len(result.failures)} appends failed; restarts: {restarts}"
    assert len(result.acknowledged) == result.appended
    assert result.appended >= RATE_PER_S * took_s * 0.75, (
        f"the writer made {result.appended} appends in {took_s:.1f} s: not a steady "
        f"{RATE_PER_S} a second"
    )
    read = check_all_read_back(cluster.metadata_uri, result)
    assert read == result.appended
