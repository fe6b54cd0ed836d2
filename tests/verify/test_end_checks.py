"""The end checks on a cluster whose metadata is in memory: a ledger the workload names that
is gone is a violation, said as such (it was an exception that ended the run)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.ledger_metadata import DigestType, LedgerMetadata
from bkeeper.meta.memory import drop_memory_tree
from bkeeper.verify.check import Verdict
from bkeeper.verify.end_checks import check_listed, check_replication


@pytest.fixture
def uri() -> Iterator[str]:
    name = f"end-checks-{uuid.uuid4().hex[:8]}"
    yield f"memory://{name}/ledgers"
    drop_memory_tree(name)


async def _cluster_with_one_ledger(uri: str) -> int:
    cluster = await ClusterMetadata.open(uri)
    try:
        await cluster.format()
        meta = LedgerMetadata.new(("b0:3181", "b1:3181", "b2:3181"), 3, 2, DigestType.CRC32C, b"")
        ledger_id, _ = await cluster.ledgers.create(meta)
        return int(ledger_id)
    finally:
        await cluster.aclose()


async def test_a_listed_ledger_that_is_gone_is_a_violation(uri: str) -> None:
    kept = await _cluster_with_one_ledger(uri)
    verdict = Verdict()
    found = await check_listed(uri, [kept, kept + 1000], verdict)
    assert found == [kept]
    assert verdict.violations == [
        f"ledger {kept + 1000} is gone (no metadata), yet the workload's log still names it"
    ]


async def test_the_replicas_check_reports_a_gone_ledger_and_goes_on(uri: str) -> None:
    await _cluster_with_one_ledger(uri)
    verdict = Verdict()
    await check_replication(uri, [999_999], 1.0, verdict, audit=False)
    assert verdict.violations == [
        "ledger 999999 is gone (no metadata), yet the workload's log still names it"
    ]
    skipped = Verdict()
    await check_replication(uri, [999_999], 1.0, skipped, gone_ok=True, audit=False)
    assert skipped.violations == []
