"""The dashboard's under-replicated list says why each ledger waits (the reason a worker
recorded beside BookKeeper's mark), and the page has the column for it."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

from bkeeper.dashboard import DashboardConfig
from bkeeper.dashboard.metadata_view import recovery_view
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.memory import drop_memory_tree
from bkeeper.meta.underreplication import BlockedReason

WHY = "no candidate bookie for a:3181 (segment at entry 0): 2 writable, 2 already in the ensemble"
STATIC = Path(__file__).parents[2] / "src" / "bkeeper" / "dashboard" / "static"


async def test_recovery_view_rows_carry_the_reason() -> None:
    name = uuid.uuid4().hex[:12]
    uri = f"memory://{name}/ledgers"
    try:
        async with await ClusterMetadata.open(uri) as cluster:
            await cluster.format()
            urm = cluster.underreplication
            await urm.mark_underreplicated(1, ["a:3181"])
            await urm.mark_underreplicated(2, ["b:3181"])
            await urm.set_blocked(1, BlockedReason("no_candidate", WHY, 1_700_000_000_000, "w"))
            view = await recovery_view(cluster, DashboardConfig(uri, port=0))
    finally:
        drop_memory_tree(name)
    rows = [dataclasses.asdict(row) for row in view.rows]
    assert [(r["ledger_id"], r["reason"], r["reason_kind"]) for r in rows] == [
        (1, WHY, "no_candidate"),
        (2, None, None),
    ]
    assert rows[0]["reason_since_ms"] == 1_700_000_000_000


def test_the_page_shows_the_reason_column() -> None:
    assert "<th>waiting because</th>" in (STATIC / "index.html").read_text()
    script = (STATIC / "dashboard.js").read_text()
    assert "u.reason" in script and "u.reason_kind" in script
